package tests

import (
	"fmt"
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
