package tests

import (
	"net"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/testutil"
)

// Signals reach a statically linked program blocked in a hook
// (preload/static_sig.c): a SIGTERM to a static C server asleep in accept
// on an offloaded listener, or to a static client asleep in recv on a shm
// connection, does what it does on kernel TCP: the default action kills
// it at once; a handler without SA_RESTART runs and the call fails with
// EINTR; one with SA_RESTART runs and the call goes on waiting, then
// succeeds. Bare and under osfrun --static alike (shm asserted).

// sigModes are staticecho's SIGTERM actions: the default, a handler, a
// handler with SA_RESTART.
var sigModes = []string{"dfl", "intr", "restart"}

// staticSigCmd is staticecho with args, bare or under osfrun --static.
func staticSigCmd(t *testing.T, osf bool, args ...string) *testutil.Command {
	prog := staticecho(t)
	if !osf {
		return bare.cmd(t, nil, prog, args...)
	}
	return underOsf.cmd(t, nil, testutil.Bin(t, "osfrun"), append([]string{"--static", prog}, args...)...)
}

// waitAsleep waits until process pid sleeps (in the call under test: a
// signal during osf's spin before it must do the same).
func waitAsleep(t *testing.T, pid int) {
	t.Helper()
	testutil.WaitFor(t, shortRun, "asleep", func() bool { return procState(pid) == "S" })
}

// sigterm sends SIGTERM to p and checks what mode expects: killed by it
// (dfl), or the handler's line and then, for restart, nothing more until
// proceed makes the call succeed; it returns p's result.
func sigterm(t *testing.T, p *tcpxProc, mode string, proceed func()) testutil.Result {
	t.Helper()
	waitAsleep(t, p.Pid)
	if err := p.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if mode == "dfl" {
		if r := p.Wait(shortRun); r.TimedOut || r.Signal != unix.SIGTERM {
			t.Fatalf("after SIGTERM (default action): %s", r)
		}
		return testutil.Result{}
	}
	p.WaitOutput("handler", shortRun)
	if mode == "restart" {
		waitAsleep(t, p.Pid) // still in the call
		if out := p.Stdout(); strings.Contains(out, "handled") {
			t.Fatalf("SA_RESTART: the call returned: %q", out)
		}
		proceed()
	}
	r := p.Wait(shortRun)
	if !r.OK() {
		t.Fatalf("after SIGTERM (%s): %s", mode, r)
	}
	return r
}

// TestStaticSignalAccept: a static C server asleep in accept.
func TestStaticSignalAccept(t *testing.T) {
	for _, osf := range []bool{false, true} {
		for _, mode := range sigModes {
			t.Run(map[bool]string{false: "bare", true: "osf"}[osf]+"/"+mode, func(t *testing.T) {
				srv, port := staticServer(t, staticSigCmd(t, osf, "sigaccept", "127.0.0.1", mode))
				if osf {
					testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportShm)
				}
				var c net.Conn
				r := sigterm(t, srv, mode, func() {
					var err error
					if c, err = net.Dial("tcp", "127.0.0.1:"+port); err != nil {
						t.Fatal(err)
					}
				})
				if c != nil {
					c.Close()
				}
				want := map[string]string{"intr": "accept EINTR handled 1", "restart": "accepted handled 1"}[mode]
				if mode != "dfl" && !strings.Contains(r.Stdout, want) {
					t.Fatalf("sigaccept %s: %q, want %q", mode, r.Stdout, want)
				}
				noOsfMessages(t, "sigaccept", srv.Stderr())
			})
		}
	}
}

// TestStaticSignalRecv: a static C client asleep in recv (its peer, a
// static server, sends one byte when told to).
func TestStaticSignalRecv(t *testing.T) {
	for _, osf := range []bool{false, true} {
		for _, mode := range sigModes {
			t.Run(map[bool]string{false: "bare", true: "osf"}[osf]+"/"+mode, func(t *testing.T) {
				peer, port := staticServer(t, staticSigCmd(t, osf, "sigpeer", "127.0.0.1"))
				cli := startPiped(t, staticSigCmd(t, osf, "sigrecv", "127.0.0.1", port, mode))
				cli.WaitOutput("connected", shortRun)
				if osf {
					testutil.AssertTransport(t, cli.Pid, testutil.ByRole("client"), testutil.TransportShm)
				}
				r := sigterm(t, cli, mode, func() { peer.proceed(t) })
				want := map[string]string{"intr": "recv EINTR handled 1", "restart": "recv 1 x handled 1"}[mode]
				if mode != "dfl" && !strings.Contains(r.Stdout, want) {
					t.Fatalf("sigrecv %s: %q, want %q", mode, r.Stdout, want)
				}
				peer.stdin.Close()
				if r := peer.Wait(shortRun); !r.OK() {
					t.Fatalf("sigpeer: %s", r)
				}
				noOsfMessages(t, "sigrecv", cli.Stderr())
			})
		}
	}
}
