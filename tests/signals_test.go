package tests

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/testutil"
)

// TestSIGPIPE writes to a TCP connection whose peer has closed (progs/
// sigpipe.c) with SIGPIPE handled, ignored, left at its default, and with
// MSG_NOSIGNAL: bare and under osf (where listen and connect load the
// core) the result must be the same: EPIPE and a handled signal, EPIPE
// alone, death by SIGPIPE, EPIPE and no signal.
func TestSIGPIPE(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "sigpipe")
	cases := []struct {
		mode, out string
		signal    unix.Signal
	}{
		{"handler", "first-write ok\nresult errno=EPIPE sigpipe-handled=yes\n", 0},
		{"ignore", "first-write ok\nresult errno=EPIPE sigpipe-handled=no\n", 0},
		{"default", "first-write ok\n", unix.SIGPIPE},
		{"nosignal", "first-write ok\nresult errno=EPIPE sigpipe-handled=no\n", 0},
	}
	for _, tc := range cases {
		for _, m := range []mode{bare, underOsf, osfLogged} {
			t.Run(tc.mode+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				r := m.cmd(t, nil, prog, tc.mode).Run(shortRun)
				if r.Err != nil || r.TimedOut || r.Signal != tc.signal || (tc.signal == 0 && r.ExitCode != 0) {
					t.Fatalf("sigpipe %s: want signal %d (%v) / exit 0: %s", tc.mode, int(tc.signal), tc.signal, r)
				}
				if r.Stdout != tc.out {
					t.Errorf("stdout %q, want %q", r.Stdout, tc.out)
				}
				checkMaps(t, m, r.Stderr, m.log)
				noOsfMessages(t, "sigpipe", r.Stderr)
			})
		}
	}
}

// TestTimeoutNeverHangs runs coreutils `timeout 20 sleep 1` 100 times, ten
// at a time, under osf with the core loaded at start-up (in timeout and in
// sleep): every run must exit 0. timeout blocks SIGCHLD and waits for it
// in sigsuspend; a signal delivered to one of the Go runtime's threads
// instead would leave it waiting until its own alarm, and a timeout whose
// alarm fired exits 124 (EXIT_TIMEDOUT) even when its child exited 0, so
// exit 0 proves SIGCHLD woke it. The alarm is 20 s, not a few, so that a
// run slowed down by a loaded machine (starting two processes that load
// the core) cannot reach it; a run that gets no signal at all (SIGALRM
// lost too) is a hang, killed after 60 s. The same runs bare must pass too.
func TestTimeoutNeverHangs(t *testing.T) {
	t.Parallel()
	timeout := testutil.Tool(t, "timeout")
	sleep := testutil.Tool(t, "sleep")
	for _, m := range []mode{bare, osfCore} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			const runs, batch = 100, 10
			var mu sync.Mutex
			var failures []string
			coreSeen := 0
			var slowest time.Duration
			fail := func(format string, args ...any) {
				mu.Lock()
				defer mu.Unlock()
				failures = append(failures, fmt.Sprintf(format, args...))
			}
			start := time.Now()
			for b := 0; b < runs/batch; b++ {
				var wg sync.WaitGroup
				for i := range batch {
					p := m.cmd(t, nil, timeout, "20", sleep, "1").Start()
					deadline := time.Now().Add(60 * time.Second)
					wg.Go(func() {
						n := b*batch + i
						if m.osf {
							// The core is loaded at start-up, before
							// timeout starts sleep, and timeout then
							// lives at least the 1 s of the sleep: it
							// must be seen mapped before timeout exits.
							for !p.Exited() && time.Now().Before(deadline) {
								if ok, err := testutil.CoreMapped(p.Pid); err == nil && ok {
									mu.Lock()
									coreSeen++
									mu.Unlock()
									break
								}
								time.Sleep(5 * time.Millisecond)
							}
						}
						r := p.Wait(time.Until(deadline))
						if !r.OK() {
							fail("run %d: %s", n, r)
						}
						mu.Lock()
						slowest = max(slowest, r.Elapsed)
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			t.Logf("%d runs of timeout 20 sleep 1 took %v, the slowest %v", runs,
				time.Since(start).Round(time.Millisecond), slowest.Round(time.Millisecond))
			for _, f := range failures {
				t.Error(f)
			}
			if m.osf && coreSeen != runs {
				t.Errorf("the core was mapped in timeout in %d of %d runs, want all", coreSeen, runs)
			}
		})
	}
}

// TestSigwaitSignalfd blocks SIGUSR1 and SIGTERM and waits for them with
// sigtimedwait and with a signalfd (progs/sigwait.c), 4 signals per
// process, 25 processes per way of waiting, with the core loaded; the
// test sends each signal with kill(2) and the program must get every one.
// Then the same for SIGCHLD from the program's own children, which must
// not be lost either.
func TestSigwaitSignalfd(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "sigwait")
	for _, how := range []string{"sigwait", "signalfd"} {
		for _, m := range []mode{bare, osfLogged} {
			t.Run(how+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				const procs, rounds = 25, 4
				for i := range procs {
					p := m.cmd(t, nil, prog, how, strconv.Itoa(rounds), "--core").Start()
					for k := 1; k <= rounds; k++ {
						p.WaitOutput(fmt.Sprintf("ready %d\n", k), shortRun)
						sig := unix.SIGUSR1
						if (i+k)%2 == 0 {
							sig = unix.SIGTERM
						}
						if err := p.Signal(sig); err != nil {
							t.Fatal(err)
						}
						p.WaitOutput(fmt.Sprintf("got %d %s\n", k, strings.TrimPrefix(unix.SignalName(sig), "SIG")), shortRun)
					}
					r := p.Wait(shortRun)
					if !r.OK() {
						t.Fatalf("process %d: %s", i, r)
					}
					checkMaps(t, m, r.Stderr, true)
				}
			})
			t.Run("chld-"+how+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				r := m.cmd(t, nil, prog, "chld-"+how, "10", "--core").Run(longRun)
				if !r.OK() || r.Stdout != "got 10/10 SIGCHLD\n" {
					t.Errorf("sigwait chld-%s: %s", how, r)
				}
				checkMaps(t, m, r.Stderr, true)
			})
		}
	}
}

// TestSIGCHLDHandler reaps 20 forked children from a SIGCHLD handler
// (progs/sigchld.c) with the core loaded: all are reaped, with the same
// exit statuses, bare and under osf.
func TestSIGCHLDHandler(t *testing.T) {
	t.Parallel()
	for _, m := range []mode{bare, osfLogged} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := m.cmd(t, nil, testutil.Prog(t, "sigchld"), "--core").MustRun(shortRun)
			if r.Stdout != "reaped 20 sum 77\n" {
				t.Errorf("stdout %q, want \"reaped 20 sum 77\"", r.Stdout)
			}
			checkMaps(t, m, r.Stderr, true)
		})
	}
}

// TestSIGPROFLargeFrame runs an application SIGPROF handler with a 256 KiB
// stack frame from setitimer(ITIMER_PROF) while the program makes 300 TCP
// connections (progs/sigprof.c): no crash, the handler ran, always on the
// program's own thread.
func TestSIGPROFLargeFrame(t *testing.T) {
	t.Parallel()
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := m.cmd(t, nil, testutil.Prog(t, "sigprof")).Run(shortRun)
			want := "connections 300\nhandler ran yes\nhandler on other threads 0\n"
			if !r.OK() || r.Stdout != want {
				t.Errorf("sigprof: want %q: %s", want, r)
			}
		})
	}
}

// syncSignals are the signals the Go runtime may take over in a c-shared
// library: it turns faults in Go code into panics. Everything else belongs
// to the program.
var syncSignals = map[string]bool{"SEGV": true, "BUS": true, "FPE": true, "ILL": true, "TRAP": true, "SYS": true}

// faultOwn is sigdisp's last line: a SIGSEGV handler the program sets
// after the core loaded reads back, gets a real fault, and gives way to
// SIG_DFL again.
const faultOwn = "segv own handler read back yes, fault reached it yes, SIG_DFL read back yes\n"

// TestGoUpgradeSignalDispositions is the check docs/DESIGN.md D1 asks to run on
// every Go upgrade: progs/sigdisp.c sets a disposition for most signals,
// loads the core, and reads them all back with sigaction. The Go runtime
// keeps its handlers for the synchronous signals (SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGTRAP, SIGSYS), but the program reads back what it set for
// those too: every handler and mask must be exactly what the program set,
// and the thread's signal mask must not change. In a fork child (stale core), even the synchronous signals must
// have the program's handlers back. Bare, nothing changes at all.
func TestGoUpgradeSignalDispositions(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "sigdisp")
	rb := bare.cmd(t, nil, prog).MustRun(shortRun)
	wantBare := "parent checked 62 signals, 0 changed\nchild checked 62 signals, 0 changed\nmask unchanged yes\n" + faultOwn
	if rb.Stdout != wantBare {
		t.Errorf("bare: stdout %q, want %q", rb.Stdout, wantBare)
	}
	r := osfLogged.cmd(t, nil, prog).MustRun(shortRun)
	checkMaps(t, osfLogged, r.Stderr, true)
	t.Logf("under osf:\n%s", r.Stdout)
	if !strings.Contains(r.Stdout, "parent checked 62 signals") || !strings.Contains(r.Stdout, "child checked 62 signals") {
		t.Fatalf("under osf: unexpected output %q", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "mask unchanged yes\n") {
		t.Errorf("loading the core changed the thread's signal mask")
	}
	if !strings.Contains(r.Stdout, faultOwn) {
		t.Errorf("a SIGSEGV handler set after the core loaded: want %q", faultOwn)
	}
	var flagsOnly []string
	for _, line := range strings.Split(r.Stdout, "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || (f[0] != "changed" && f[0] != "child-changed") {
			continue
		}
		sig, handler, flags, mask := f[1], f[2], f[3], f[4]
		handlerSame := handlerUnchanged(handler)
		switch {
		case f[0] == "child-changed" && syncSignals[sig] && handlerSame && mask == "mask-differs=0":
			// Back to the program's handler; glibc adds SA_RESTORER to
			// flags when osf re-installs SIG_DFL.
		case handlerSame && mask == "mask-differs=0":
			flagsOnly = append(flagsOnly, line)
		default:
			t.Errorf("disposition changed by loading the core: %s (%s %s)", line, flags, mask)
		}
	}
	t.Run("async-load", func(t *testing.T) {
		// With OSF_DEBUG_LOAD_CORE=1 the core loads while main sets its
		// dispositions; none may be lost.
		for _, m := range []mode{bare, osfCore} {
			for range 3 {
				r := m.cmd(t, nil, prog, "--wait-core").MustRun(shortRun)
				checkMaps(t, m, r.Stderr, true)
				if want := "async checked 26 settings, 0 reverted\n"; r.Stdout != want {
					t.Errorf("%s: stdout %q, want %q", m.name, r.Stdout, want)
				}
			}
		}
	})
	t.Run("flags-read-back", func(t *testing.T) {
		if len(flagsOnly) > 0 {
			t.Errorf("sa_flags read back differ:\n%s", strings.Join(flagsOnly, "\n"))
		}
	})
}

// handlerUnchanged reports whether a "handler=A->B" field has A == B.
func handlerUnchanged(field string) bool {
	a, b, ok := strings.Cut(strings.TrimPrefix(field, "handler="), "->")
	return ok && a == b
}

// TestSignalHandlerChangesItemsDuringWait: a SIGALRM handler, every
// 100 µs for 3 s, calls setsockopt(SO_RCVLOWAT), setsockopt(SO_SNDBUF)
// and shutdown on offloaded connections (OSF_STRICT=1: a fallback fails
// the connect) while the main thread waits on them in epoll_wait and
// poll. Those calls re-check the process's epoll items
// (osf_mux_changed), which took the epoll's lock that the interrupted
// epoll_wait held while it collected items: the program hung within a
// second on every run. A handler now defers the re-check to its thread's
// unlock.
func TestSignalHandlerChangesItemsDuringWait(t *testing.T) {
	t.Parallel()
	strictProgOnPort(t, "sigmux", "3")
}

// TestSignalHandlerClosesDuringWait: a SIGALRM handler, every 50 µs,
// closes an offloaded connection (OSF_STRICT=1: a fallback fails the
// connect), deletes or modifies its epoll registration, or connects a new
// one and adds it, while the main thread waits on it in epoll_wait, poll
// or select, round after round (tests/progs/sigclose.c checks each call's
// result, the bytes, the fd number free at once, EOF at the peer, what
// the epoll reports after, EINTR rather than POLLNVAL or EBADF). Those
// calls took the epoll's lock the interrupted epoll_wait held (gdb:
// mu_lock <- osf_mux_forget or ctl_item <- handler <- collect): a hang
// within the first second. A handler osf installed now runs at its
// thread's last mux unlock; one installed behind osf's back ("raw",
// closes during epoll_wait only) has its close's epoll bookkeeping
// deferred there.
func TestSignalHandlerClosesDuringWait(t *testing.T) {
	t.Parallel()
	t.Run("trampoline", func(t *testing.T) { strictProgOnPort(t, "sigclose", "3") })
	t.Run("raw", func(t *testing.T) { strictProgOnPort(t, "sigclose", "3", "raw") })
}
