package tests

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// TestWakeTokensBounded is issue 10's item 1: wake tokens that nobody
// takes (an epoll wait that ended without sleeping, an interest update
// while armed) must never pile up on a wake socket, and a wake-up must
// never be lost. progs/tokens.c repeats the event-loop pattern that left a
// token behind each round until the socket's buffer was full, then sleeps
// in epoll_wait while the peer sends a byte: it must wake. Bare, the same
// program checks the test itself against kernel TCP.
func TestWakeTokensBounded(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "tokens")
	for _, m := range []mode{bare, underOsf, osfRDMASim} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := m.cmd(t, nil, prog, "2000").Run(30 * time.Second)
			if !r.OK() || !strings.Contains(r.Stdout, "PASS") {
				t.Fatalf("tokens: %s", r)
			}
			want := "transport tcp"
			if m.osf {
				want = "transport offloaded"
			}
			if !strings.Contains(r.Stdout, want) {
				t.Fatalf("tokens: want %q: %s", want, r)
			}
			t.Logf("%s", strings.TrimSpace(r.Stdout))
		})
	}
}

// soakSeconds is how long each soak client runs: OSF_SOAK_SECONDS (make
// soak sets 600), else 45 (make test).
func soakSeconds(t *testing.T) int {
	if v := os.Getenv("OSF_SOAK_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 {
			t.Fatalf("OSF_SOAK_SECONDS=%q: want a number of seconds >= 5", v)
		}
		return n
	}
	return 45
}

// procCounts are the resources of a process that must stay flat, and the
// regions of slots (OSF_SHM_POOL) it maps among its maps, with their
// resident memory.
type procCounts struct{ fds, maps, rssKiB, regions, regionKiB int }

func countsOf(t *testing.T, pid int) procCounts {
	t.Helper()
	var c procCounts
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	c.fds = len(ents)
	maps, err := testutil.Maps(pid)
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	c.maps = strings.Count(maps, "\n")
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	region := false
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			region = strings.Contains(line, "memfd:osf-region")
			if region {
				c.regions++
			}
		case region && len(f) >= 2 && f[0] == "Rss:":
			kib, _ := strconv.Atoi(f[1])
			c.regionKiB += kib
		}
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			c.rssKiB, _ = strconv.Atoi(f[1])
		}
	}
	return c
}

// TestSoak is the bounded soak (issue 10): two single-threaded epoll
// servers under osf (one reading each connection until EAGAIN, one
// reading once per event as redis does) and clients that wait with poll,
// select, epoll and blocking calls, doing keep-alive ping-pong, streams
// checked byte by byte and by checksum, and connection churn, all at
// once. No client may stall (a wait over 10 s fails it), every byte must
// arrive intact, every connection must be offloaded, and the servers'
// descriptors, mappings and memory must be as flat at the end as after
// the warm-up. make soak runs it for 10 minutes (OSF_SOAK_SECONDS=600).
func TestSoak(t *testing.T) {
	secs := soakSeconds(t)
	prog := testutil.Prog(t, "soak")
	type server struct {
		p    *testutil.Process
		port string
		base procCounts
	}
	var srv [2]server
	for i, opts := range []string{"lt", "once"} {
		p := underOsf.cmd(t, nil, prog, "server", "127.0.0.1", "0", opts).Start()
		out := p.WaitOutput("\n", shortRun)
		var port int
		if _, err := fmt.Sscanf(out, "port %d", &port); err != nil {
			t.Fatalf("soak server printed %q: %v", out, err)
		}
		srv[i] = server{p: p, port: strconv.Itoa(port)}
	}
	// Warm-up: osf's own descriptors and the epoll's inner state exist
	// from here on.
	for i := range srv {
		r := underOsf.cmd(t, nil, prog, "client", "127.0.0.1", srv[i].port, "poll", "churn", "1").Run(shortRun)
		if !r.OK() {
			t.Fatalf("warm-up: %s", r)
		}
		time.Sleep(200 * time.Millisecond) // the server saw the last close
		srv[i].base = countsOf(t, srv[i].p.Pid)
	}
	clients := []struct {
		srv        int
		wait, test string
		size       string
	}{
		{0, "poll", "pingpong", "100"},
		{1, "epoll", "pingpong", "100"},
		{0, "select", "pingpong", "1000"},
		{1, "block", "pingpong", "100"},
		{0, "poll", "stream", "16777216"},
		{1, "block", "stream", "8388608"},
		{0, "epoll", "churn", "100"},
		{1, "select", "churn", "3000"},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := make([]testutil.Result, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := underOsf.cmd(t, nil, prog, "client", "127.0.0.1", srv[c.srv].port, c.wait, c.test,
				strconv.Itoa(secs), c.size, "10").Run(time.Duration(secs+60) * time.Second)
			mu.Lock()
			results[i] = r
			mu.Unlock()
		}(i)
	}
	// While they run: every server connection is offloaded.
	time.Sleep(3 * time.Second)
	for i := range srv {
		testutil.AssertTransport(t, srv[i].p.Pid, testutil.ByRole("server"), "shm")
	}
	wg.Wait()
	for i, c := range clients {
		r := results[i]
		if !r.OK() || !strings.Contains(r.Stdout, "PASS") {
			t.Errorf("soak client %s %s (server %d): %s", c.wait, c.test, c.srv, r)
			continue
		}
		noOsfMessages(t, "soak client", r.Stderr)
		t.Logf("%s", strings.TrimSpace(r.Stdout))
	}
	for i := range srv {
		if srv[i].p.Exited() {
			t.Fatalf("soak server %d exited: %s", i, srv[i].p.Wait(shortRun))
		}
		// One more connection, from a process of its own, as the
		// warm-up's: with OSF_SHM_KFD=1 a server reads the links of its
		// clients' processes (one each, hidden) only at an accept, and
		// closes those whose process ended then (the links it holds at
		// the end are the clients' that ended after its last accept, as
		// after the warm-up, whose own link stays: ARCHITECTURE.md
		// "Links").
		if r := underOsf.cmd(t, nil, prog, "client", "127.0.0.1", srv[i].port, "poll", "churn", "1").Run(shortRun); !r.OK() {
			t.Fatalf("cool-down: %s", r)
		}
		var end procCounts
		defer func() { // also when WaitFor fails
			t.Logf("soak server %d: fds %d -> %d, maps %d -> %d (regions %d -> %d, %d KiB resident), RSS %d -> %d KiB", i,
				srv[i].base.fds, end.fds, srv[i].base.maps, end.maps, srv[i].base.regions, end.regions,
				end.regionKiB, srv[i].base.rssKiB, end.rssKiB)
		}()
		testutil.WaitFor(t, 10*time.Second, "the soak server to close every connection", func() bool {
			end = countsOf(t, srv[i].p.Pid)
			return end.fds <= srv[i].base.fds &&
				end.maps-end.regions <= srv[i].base.maps-srv[i].base.regions+4
		})
		// Regions of slots (OSF_SHM_POOL): the server keeps at most 16
		// that no connection holds mapped (one per client process, for
		// its next connection); their free slots' rings go back at the
		// owner's closes (preload/pool.c), so of their memory at most a
		// page a slot and a slot's rings each (its last connection's,
		// when the client's side let go first and it exited).
		if end.regions > 16 {
			t.Errorf("soak server %d: maps %d regions of slots, want at most 16 idle", i, end.regions)
		}
		if limit := end.regions * (64*4 + 2*1024); end.regionKiB > limit {
			t.Errorf("soak server %d: %d regions hold %d KiB, want at most %d", i, end.regions, end.regionKiB, limit)
		}
		// Memory: malloc may keep freed arenas; a leak of one segment per
		// connection would be gigabytes.
		if end.rssKiB > srv[i].base.rssKiB+32*1024 {
			t.Errorf("soak server %d: RSS grew from %d KiB to %d KiB", i, srv[i].base.rssKiB, end.rssKiB)
		}
	}
}
