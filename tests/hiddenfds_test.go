package tests

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// TestHiddenFdsPerConnection counts the fds an open connection costs each
// process (/proc/PID/fd), the program's own one included, client and
// server: idlemem holds n open connections with a few bytes moved on each,
// and the difference between runs of 8 and 24 connections, divided by 16,
// is one connection's share (fixed costs, the region's memfd, a companion,
// osf's table, cancel out). Kernel TCP: 1 each. Under osf the hidden ones
// are docs/LIMITS.md "Descriptors" and D2-PROPOSAL step 2: a connection
// whose rings are a segment of its own (OSF_SHM_POOL=0) holds the
// segment's memfd; a slot of a region (the default) none: its entry names
// the region's one memfd (the client's own, the first a hello brought
// the server); a slot's writers wake on its region's one eventfd (the
// default, with OSF_SHM_KFD=1 too), else (OSF_SHM_EFD=0, segments) each
// holds the writers' wake socket; on the client the socket that holds
// its port; with OSF_SHM_KFD=1 the application's fd is the kernel TCP
// socket, which holds the port: no hidden fd per connection on either
// end. The counts are by kind of file, so a change in what osf holds per
// connection shows as which fd came or went.
func TestHiddenFdsPerConnection(t *testing.T) {
	// want: client, server; each a sorted list of kinds, one per fd
	for _, tc := range []struct {
		name   string
		m      mode
		env    []string
		tp     string
		client string
		server string
	}{
		{"tcp", bare, nil, "", "socket", "socket"},
		{"segments", underOsf, []string{"OSF_SHM_POOL=0"}, testutil.TransportShm,
			"memfd:osf-seg,socket,socket,socket", "memfd:osf-seg,socket,socket"},
		{"slots", underOsf, []string{"OSF_SHM_POOL=1", "OSF_SHM_EFD=0"}, testutil.TransportShm,
			"socket,socket,socket", "socket,socket"},
		{"kfd", underOsf, []string{"OSF_SHM_KFD=1", "OSF_SHM_EFD=1"}, testutil.TransportShm,
			"socket", "socket"},
		{"slots-efd", underOsf, []string{"OSF_SHM_POOL=1", "OSF_SHM_EFD=1"}, testutil.TransportShm,
			"socket,socket", "socket"},
		{"kfd-pair", underOsf, []string{"OSF_SHM_KFD=1", "OSF_SHM_EFD=0"}, testutil.TransportShm,
			"socket,socket", "socket,socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testutil.KfdRun() && tc.name != "tcp" && !strings.HasPrefix(tc.name, "kfd") {
				t.Skip("OSF_TEST_SHM_KFD=1: every connection under osf is kfd")
			}
			env := append([]string{"OSF_STRICT=1"}, tc.env...)
			if tc.tp == "" {
				env = nil
			}
			c8, s8 := openFds(t, tc.m, env, tc.tp, 8)
			c24, s24 := openFds(t, tc.m, env, tc.tp, 24)
			client, server := perConn(t, c8, c24, 16), perConn(t, s8, s24, 16)
			t.Logf("fds per open connection: client %s, server %s", client, server)
			if client != tc.client || server != tc.server {
				t.Fatalf("fds per open connection: client %s, server %s; want %s and %s",
					client, server, tc.client, tc.server)
			}
		})
	}
}

// openFds runs idlemem with n open connections (1 KiB each way, then idle)
// and returns how many fds of each kind the client and the server hold.
func openFds(t *testing.T, m mode, env []string, tp string, n int) (client, server map[string]int) {
	t.Helper()
	srv, cl, pw := startIdlemem(t, m, env, n, -1, 1, 0, "epoll")
	defer pw.Close()
	srv.WaitOutput(fmt.Sprintf("accepted %d", n), 10*time.Second)
	if tp != "" {
		testutil.AssertTransport(t, cl.Pid, testutil.ByRole("client"), tp)
		testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), tp)
	}
	client, server = fdKinds(t, cl.Pid), fdKinds(t, srv.Pid)
	if _, err := pw.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	cl.WaitOutput("ok", 60*time.Second)
	if r := cl.Wait(30 * time.Second); !r.OK() {
		t.Fatalf("client: %s", r)
	}
	return client, server
}

// fdKinds counts process pid's fds by kind: what the link names before
// its first '[' ("socket:[123]" is "socket"), "anon_inode:[eventfd]" and
// the like whole, "memfd:NAME" without " (deleted)", or the path.
func fdKinds(t *testing.T, pid int) map[string]int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	kinds := map[string]int{}
	for _, e := range ents {
		l, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		l = strings.TrimPrefix(strings.TrimSuffix(l, " (deleted)"), "/")
		if i := strings.IndexByte(l, '['); i > 0 && !strings.HasPrefix(l, "anon_inode:") {
			l = strings.TrimSuffix(l[:i], ":")
		}
		kinds[l]++
	}
	return kinds
}

// perConn returns the kinds of fds that d more connections added, each
// kind repeated as many times as one connection holds of it, sorted and
// joined by commas. Up to slack fds of a kind may come or go with the
// process's own (a client's one spare segment kit made ahead,
// setup_spare.c: a memfd and a socket pair; a thread's eventfd); any
// other growth that is not a whole number per connection fails.
func perConn(t *testing.T, a, b map[string]int, d int) string {
	t.Helper()
	const slack = 2
	var out []string
	for k := range union(a, b) {
		g := b[k] - a[k]
		n := (g + d/2) / d
		if g-n*d > slack || n*d-g > slack {
			t.Fatalf("%d more connections added %d fds %q: not a whole number each (%v, then %v)", d, g, k, a, b)
		}
		for i := 0; i < n; i++ {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func union(a, b map[string]int) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}
