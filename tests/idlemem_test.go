package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// segMemory returns the connections' rings that the processes hold and
// the bytes of memory those have allocated, each memfd counted once, and
// the segments' rings' bytes (size less the shared page). A segment is a
// memfd named osf-seg, one per connection; a region of slots (osf-region,
// OSF_SHM_POOL) holds one connection's rings a slot, and each process one
// fd for it that all its connections name: segs counts pids[0]'s shm
// connections instead (osfstat).
func segMemory(t *testing.T, pids ...int) (segs int, bytes, rings int64) {
	t.Helper()
	seen := map[uint64]int64{}
	regions := false
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("read %s: %v", dir, err)
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			l, err := os.Readlink(p)
			region := strings.Contains(l, "memfd:osf-region")
			if err != nil || !region && !strings.Contains(l, "memfd:osf-seg") {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(p, &st) != nil {
				continue
			}
			if _, ok := seen[st.Ino]; !ok && !region {
				rings += st.Size - 4096
				segs++
			}
			regions = regions || region
			seen[st.Ino] = st.Blocks * 512
		}
	}
	for _, b := range seen {
		bytes += b
	}
	if regions {
		for _, s := range testutil.OsfStat(t, pids[0]).Sockets {
			if s.Kind == "shm" && s.Transport == testutil.TransportShm {
				segs++
			}
		}
	}
	return segs, bytes, rings
}

// TestIdleRingsGiveMemoryBack: connections that moved a MiB each way and
// went idle (both ends asleep in epoll_wait) give their rings' pages back,
// down to what their unread bytes need plus the segment's shared page
// (the header's, with both rings' first bytes: sdp/segment.h); and
// every byte still arrives, in order, when traffic resumes across the
// holes, including the bytes left unread in the rings while they were
// trimmed (issue 12). The server's waits are endless, or cut at 30 ms as
// an event loop's timer cuts them (redis: 100 ms): the idle time adds up
// across waits. An RDMA engine's rings are pinned memory the NIC writes:
// they keep every page (here on the engine's stand-in). Threads that only
// sleep in a blocking recv, on both ends, and never poll: their rings are
// trimmed by osf's reaper thread (shm-blocking-recv). A client that waits
// on none of its connections, asleep in nanosleep (shm-sleeping) or in
// poll() on stdin alone (shm-poll-other-fd), gives its pages back too:
// the reaper trims every connection whose reader consumed a page and
// that idles, whatever the program does (issue 28).
func TestIdleRingsGiveMemoryBack(t *testing.T) {
	t.Run("shm", func(t *testing.T) { idleMemory(t, underOsf, 200, -1, "epoll", nil) })
	t.Run("shm-30ms-waits", func(t *testing.T) { idleMemory(t, underOsf, 50, 30, "epoll", nil) })
	t.Run("shm-blocking-recv", func(t *testing.T) { idleMemory(t, underOsf, 50, -2, "epoll", nil) })
	t.Run("shm-sleeping", func(t *testing.T) { idleMemory(t, underOsf, 50, -1, "sleep", nil) })
	t.Run("shm-poll-other-fd", func(t *testing.T) { idleMemory(t, underOsf, 50, -1, "poll", nil) })
	t.Run("rdma-sim", func(t *testing.T) { idleMemory(t, osfRDMASim, 4, -1, "epoll", nil) })
}

// startIdlemem starts an idlemem server (waits of waitMs) and a client
// of conns connections that moved kib KiB each way, left unread bytes
// unread and idles as idle says, and returns once the client is idle; a
// line on pw ends its idling.
func startIdlemem(t *testing.T, m mode, env []string, conns, waitMs, kib, unread int, idle string) (srv, cl *testutil.Process, pw *os.File) {
	t.Helper()
	prog := testutil.Prog(t, "idlemem")
	port := strconv.Itoa(testutil.FreePort(t))
	srv = m.cmd(t, env, prog, "server", port, strconv.Itoa(conns), strconv.Itoa(waitMs)).Start()
	srv.WaitOutput("listening", 10*time.Second)

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cc := m.cmd(t, env, prog, "client", port, strconv.Itoa(conns), strconv.Itoa(kib), strconv.Itoa(unread), idle)
	cc.Cmd.Stdin = pr
	cl = cc.Start()
	pr.Close()
	cl.WaitOutput(fmt.Sprintf("idle %d", conns), 60*time.Second)
	return srv, cl, pw
}

func idleMemory(t *testing.T, m mode, conns, waitMs int, idle string, env []string) {
	const kib = 1024
	unread := 10000
	if waitMs == -2 { // blocking recv threads: nothing left unread
		unread = -1
	}
	srv, cl, pw := startIdlemem(t, m, env, conns, waitMs, kib, unread, idle)
	defer pw.Close()
	tp, wantSegs := testutil.TransportShm, conns
	if m.rdmaSim {
		tp, wantSegs = testutil.TransportRDMA, 2*conns // one per side, each with its engine
	}
	testutil.AssertTransport(t, cl.Pid, testutil.ByRole("client"), tp)
	testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), tp)

	// Per connection: the shared page, and on every other one the pages
	// its unread bytes lie in (at most unread/4096 + 2).
	limit := int64(conns * 4096)
	if unread > 0 {
		limit += int64(conns / 2 * (unread/4096 + 2) * 4096)
	}
	var segs int
	var held, rings int64
	for deadline := time.Now().Add(20 * time.Second); ; {
		segs, held, rings = segMemory(t, srv.Pid, cl.Pid)
		if segs == wantSegs && held <= limit || time.Now().After(deadline) || m.rdmaSim {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m.rdmaSim { // long enough for a trim, had one been allowed
		time.Sleep(500 * time.Millisecond)
		segs, held, rings = segMemory(t, srv.Pid, cl.Pid)
	}
	t.Logf("%d idle connections, %d segments hold %d bytes (%d per connection; shm limit %d)",
		conns, segs, held, held/int64(conns), limit)
	if segs != wantSegs {
		t.Fatalf("%d segments, want %d", segs, wantSegs)
	}
	// Each ring was written kib KiB: every page it has, or that many.
	if full := min(rings, int64(wantSegs)*2*kib<<10); m.rdmaSim && held < full {
		t.Fatalf("RDMA segments hold %d bytes, want all %d: a registered ring was trimmed", held, full)
	}
	if !m.rdmaSim && held > limit {
		t.Fatalf("idle connections hold %d bytes of segment memory, want at most %d", held, limit)
	}

	if _, err := pw.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	cl.WaitOutput("ok", 60*time.Second)
	if r := cl.Wait(30 * time.Second); !r.OK() {
		t.Fatalf("client: %s", r)
	}
}

// TestTrimNeverStallsWriter: a consumer process stopped (SIGSTOP, a
// debugger) while its reaper trims the ring, holding the producer's lock
// right before a punch (OSF_DEBUG_TRIM_STOP stops it there), keeps no
// writer waiting: a non-blocking send with room takes its bytes and a
// blocking one returns, as TCP's would, and the punch the stopped trimmer
// was about to make is cancelled, so every byte written meanwhile arrives
// (issue 12; before, the writers waited for the whole stop).
func TestTrimNeverStallsWriter(t *testing.T) {
	t.Parallel()
	p := underOsf.cmd(t, []string{"OSF_DEBUG_TRIM_STOP=1"}, testutil.Prog(t, "trimstop")).Start()
	if _, err := fmt.Sscanf(p.WaitOutput("\n", shortRun), "child %d", new(int)); err != nil {
		t.Fatalf("trimstop: %v: %s", err, p.Stdout())
	}
	testutil.AssertTransport(t, p.Pid, testutil.ByRole("server"), testutil.TransportShm)
	_ = p.Signal(unix.SIGUSR1)
	r := p.Wait(time.Minute)
	if !r.OK() || !strings.Contains(r.Stdout, "stopped in a trim") || !strings.Contains(r.Stdout, "PASS") {
		t.Fatalf("trimstop: %s", r)
	}
}

// TestReaperClosesDuringLooks: connections whose readers listed them for
// osf's reaper are closed one by one while it looks at them and trims
// them (issue 28): a close takes its connection out of the list first,
// waiting for a look under way, so the reaper never touches an unmapped
// segment (the process would crash) nor a closed writers' socket. Each
// look holds its connection 5 ms (OSF_DEBUG_REAP_SLOW), so that closes
// land in looks. Under osf (OSF_STRICT=1: offloaded or failed) and the
// sanitized library.
func TestReaperClosesDuringLooks(t *testing.T) {
	t.Parallel()
	envs := map[string][]string{
		"osf":       underOsf.env(t, "OSF_STRICT=1", "OSF_DEBUG_REAP_SLOW=1"),
		"sanitized": sanitized(t, "OSF_STRICT=1", "OSF_DEBUG_REAP_SLOW=1"),
	}
	for name, env := range envs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := testutil.Cmd(t, env, testutil.Prog(t, "reaplife"), "close", "6", "32").Run(longRun)
			noSanitizerReport(t, name, r.Stderr)
			if !r.OK() || !strings.Contains(r.Stdout, "PASS") {
				t.Fatalf("reaplife close: %s", r)
			}
		})
	}
}

// TestReaperInForkChild: a connection its reader listed before a fork,
// read on by the child after it, and idle in a child that waits on none
// of its connections (nanosleep) gives its pages back: the child keeps
// the parent's list and starts its own reaper at its first wait after
// that read (issue 28).
// The parent closed its copy of the child's end (its close took it out of
// its own list) and holds the other end, asleep too.
func TestReaperInForkChild(t *testing.T) {
	t.Parallel()
	p := underOsf.cmd(t, []string{"OSF_STRICT=1"}, testutil.Prog(t, "reaplife"), "fork").Start()
	var child int
	if _, err := fmt.Sscanf(p.WaitOutput("\n", shortRun), "child %d", &child); err != nil {
		t.Fatalf("reaplife fork: %v: %s", err, p.Stdout())
	}
	testutil.AssertTransport(t, child, testutil.ByRole("server"), testutil.TransportShm)
	// The shared page, and nothing of the ring the child consumed.
	var held int64
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, held, _ = segMemory(t, p.Pid, child)
		if held <= 4096 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if held > 4096 {
		t.Fatalf("the idle connection holds %d bytes of segment memory, want at most 4096", held)
	}
	if !strings.Contains(threadNames(t, child), "osf-reaper") {
		t.Fatalf("the child has threads %q, want its own osf-reaper", threadNames(t, child))
	}
}

// threadNames returns the names of process pid's threads, sorted, joined
// by commas.
func threadNames(t *testing.T, pid int) string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	var names []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "comm"))
		if err == nil {
			names = append(names, strings.TrimSpace(string(b)))
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}
