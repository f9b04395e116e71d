package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestNetpollManyWaiters runs progs/netpoll.c: two processes ping-pong
// over 8–16 connections, each process waiting on one edge-triggered epoll
// from several threads at once as Go's runtime netpoller does (one thread
// blocked with no timeout, others making non-blocking waits and handing
// the events over, workers reading and writing until EAGAIN). Nothing in
// it polls on a timer, so a wake-up osf loses is a stall: the program
// reports the connection, every connection's state and osfstat's view of
// the rings, and fails. Bytes are checked on both sides; bare and under
// osf alike, on shm connections (OSF_STRICT=1 and osfstat).
func TestNetpollManyWaiters(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"pwait", nil},
		// The non-blocking waits take fewer events than are ready.
		{"pwait2-maxev2", []string{"wait=pwait2", "maxev=2", "spinners=2"}},
		// Non-blocking waits after every hand-out; a short read counts
		// as drained (no EAGAIN before the next edge is awaited).
		{"wait-shortread", []string{"wait=wait", "shortread=1", "eager=1", "big=0",
			"rounds=1000", "conns=8"}},
	}
	for _, m := range bareAndOsf {
		for _, tc := range cases {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				port := strconv.Itoa(testutil.FreePort(t))
				env := []string{"OSF_STRICT=1", "NETPOLL_OSFSTAT=" + testutil.Bin(t, "osfstat")}
				args := append([]string{port, "stall=8", "seconds=45"}, tc.args...)
				p := m.cmd(t, env, testutil.Prog(t, "netpoll"), args...).Start()
				var srv, cli int
				out := p.WaitOutput("\n", shortRun)
				if _, err := fmt.Sscanf(out, "ready server %d client %d", &srv, &cli); err != nil {
					t.Fatalf("netpoll: %v: %q", err, out)
				}
				if m.osf {
					testutil.AssertTransport(t, srv, testutil.ByRole("server"), testutil.TransportShm)
					testutil.AssertTransport(t, cli, testutil.ByRole("client"), testutil.TransportShm)
				}
				if err := p.Signal(unix.SIGUSR1); err != nil {
					t.Fatal(err)
				}
				r := p.Wait(longRun)
				if !r.OK() || !strings.Contains(r.Stdout, "result ok") ||
					!strings.Contains(r.Stdout, "server ok") {
					t.Fatalf("netpoll %s: %s", strings.Join(args, " "), r)
				}
				for _, line := range strings.Split(r.Stdout, "\n") {
					if strings.HasPrefix(line, "result") {
						t.Log(line)
					}
				}
			})
		}
	}
}

// TestEpollStolenWakeup runs progs/epsteal.c: a thread blocked in
// epoll_wait (timeout -1) while the main thread's non-blocking waits on
// the same epoll take what the blocked one was woken for. The kernel
// still wakes the blocked wait for what is left or comes next: an
// edge-triggered connection's next arrival after a short read (edge),
// the second of two ready connections when the non-blocking wait takes
// one (maxev), connections added or changed while it is blocked (ctladd,
// ctlmod), and a connection added after a wait went to the kernel on an
// epoll that had none (young); two threads in poll() both wake (poll2).
// Bare and under osf alike, on shm connections (OSF_STRICT=1).
func TestEpollStolenWakeup(t *testing.T) {
	for _, m := range bareAndOsf {
		for _, c := range []string{"edge", "maxev", "ctladd", "ctlmod", "young", "poll2"} {
			t.Run(m.name+"/"+c, func(t *testing.T) {
				r := m.cmd(t, []string{"OSF_STRICT=1"}, testutil.Prog(t, "epsteal"), c).Run(longRun)
				if !r.OK() || !strings.Contains(r.Stdout, "result ok") {
					t.Fatalf("epsteal %s: %s", c, r)
				}
				t.Log(strings.TrimSpace(r.Stdout))
			})
		}
	}
}

// TestEpollFirstRegistrations runs progs/epfirst.c: eight threads add
// their first connections to one fresh epoll at once (Go's dialing
// goroutines on the netpoller's epoll), 100 rounds; every event carries
// data a thread registered and every connection is reported. Under osf
// two threads could each make the epoll's state, and the loser's inner
// epoll joined the epoll under a marker no wait stripped: a Go client
// took it for a pollDesc and died of SIGSEGV. Bare and under osf alike,
// on shm connections (OSF_STRICT=1).
func TestEpollFirstRegistrations(t *testing.T) {
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			r := m.cmd(t, []string{"OSF_STRICT=1"}, testutil.Prog(t, "epfirst")).Run(longRun)
			if !r.OK() || !strings.Contains(r.Stdout, "result ok") {
				t.Fatalf("epfirst: %s", r)
			}
		})
	}
}

// TestEdgeTriggeredRoomIsNoWake runs progs/etout.c: both ends of a
// connection between two processes wait in edge-triggered epolls holding
// EPOLLIN | EPOLLOUT (how Go's netpoller registers every connection) and
// ping-pong 400 messages, then the parent fills the connection and must
// get EPOLLOUT once the child has read. Bare and under osf the same. Under
// osf a read of the other side made room while the writer never lacked it
// and wrote the region's eventfd for each message, waking every poller of
// the region in both processes (a gRPC-Go call's system time went up by
// about a fifth); TCP wakes writers only after SOCK_NOSPACE. Counted with
// strace: the eventfd's writes (8 bytes of 1) stay a handful.
func TestEdgeTriggeredRoomIsNoWake(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "etout")
	for _, m := range bareAndOsf {
		r := m.cmd(t, []string{"OSF_STRICT=1"}, prog, "400").Run(longRun)
		want := "transport tcp"
		if m.osf {
			want = "transport offloaded"
		}
		if !r.OK() || !strings.Contains(r.Stdout, want) || !strings.Contains(r.Stdout, "PASS") {
			t.Fatalf("etout (%s): want %q and PASS: %s", m.name, want, r)
		}
	}
	strace := testutil.OptionalTool(t, "strace", "count the region eventfd's writes")
	tr := filepath.Join(t.TempDir(), "trace")
	r := testutil.Cmd(t, nil, strace, "-f", "-qq", "-e", "trace=write", "-o", tr,
		"-E", "LD_PRELOAD="+testutil.Lib(t), "-E", "OSF_STRICT=1", prog, "400").Run(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "transport offloaded") || !strings.Contains(r.Stdout, "PASS") {
		t.Fatalf("etout under strace: %s", r)
	}
	b, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	wakes := len(regexp.MustCompile(`write\(\d+, "\\1\\0\\0\\0\\0\\0\\0\\0", 8\)`).FindAll(b, -1))
	if wakes > 20 {
		t.Errorf("the region's eventfd was written %d times for 400 messages to pollers that never lacked room, want at most 20 (the fill's)", wakes)
	}
	t.Logf("eventfd writes: %d", wakes)
}
