package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestSemantics runs each scenario of progs/semantics.c (socket semantics
// of Linux TCP on loopback: return values, errno, poll masks, signals,
// timeouts, epoll modes, names and options; see the program's comment)
// bare and under osf, where both ends of every connection are in the one
// process and so offloaded. The outputs must be identical line for line,
// except the "transport" lines, which must say tcp for every end bare and
// unix (the kernel lists the socket in /proc/net/unix: offloaded) under
// osf, or kfd (a TCP socket osf offloads) with OSF_TEST_SHM_KFD=1. Bare
// Linux TCP is the reference: a difference is a bug in osf.
func TestSemantics(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "semantics")
	names := strings.Fields(testutil.Cmd(t, nil, prog, "-l").MustRun(shortRun).Stdout)
	if len(names) < 40 {
		t.Fatalf("semantics -l lists %d scenarios: %q", len(names), names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if name == "defer_shared" && !testutil.PoolRun() {
				// The note that a listener defers comes in a client's
				// region (docs/LIMITS.md, TCP_DEFER_ACCEPT).
				t.Skip("OSF_SHM_POOL=0: no region tells a client that its listener defers")
			}
			bp := bare.cmd(t, nil, prog, name).Start()
			op := underOsf.cmd(t, nil, prog, name).Start()
			// longRun: a scenario's own waits are bounded (10 s each, the
			// program's timeouts), and blocked_shutdown runs 6 s on a
			// quiet host, more than shortRun at load 13.
			b, o := bp.Wait(longRun), op.Wait(longRun)
			if !b.OK() {
				t.Fatalf("bare run: %s", b)
			}
			if !o.OK() {
				t.Fatalf("run under osf: %s\n--- bare output for comparison:\n%s", o, b.Stdout)
			}
			noOsfMessages(t, name, o.Stderr)
			semanticsCompare(t, name, b.Stdout, o.Stdout, testutil.ShmTransport())
		})
	}
}

// semanticsCompare requires scenario name's output under osf to be the
// bare run's (Linux TCP's) line for line, and as many connection ends.
func semanticsCompare(t *testing.T, name, bare, osf, transport string) {
	t.Helper()
	want, nb := semanticsNormalize(t, name, "bare", bare, "tcp")
	got, no := semanticsNormalize(t, name, "osf", osf, transport)
	if nb != no {
		t.Errorf("%d connections bare, %d under osf", nb, no)
	}
	if want != got {
		t.Errorf("scenario %s under osf differs from Linux TCP (bare):\n%s\n--- bare:\n%s--- osf:\n%s",
			name, lineDiff(want, got), bare, osf)
	}
}

// semanticsNormalize checks that out is one scenario's complete output
// ("NAME: ..." lines ending with "NAME: done") whose transport lines all
// name transport, and returns it with those lines reduced to "NAME:
// transport" and the number of connection ends they described.
func semanticsNormalize(t *testing.T, name, mode, out, transport string) (string, int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) == 0 || lines[len(lines)-1] != name+": done" {
		t.Errorf("%s: output does not end with %q:\n%s", mode, name+": done", out)
	}
	ends := 0
	for i, l := range lines {
		if !strings.HasPrefix(l, name+": ") {
			t.Errorf("%s: line %d does not start with %q: %q", mode, i+1, name+": ", l)
			continue
		}
		rest, ok := strings.CutPrefix(l, name+": transport ")
		if !ok {
			continue
		}
		for _, tp := range strings.Fields(rest) {
			ends++
			if tp != transport {
				t.Errorf("%s: a connection end uses %q, want %q: %q", mode, tp, transport, l)
			}
		}
		lines[i] = fmt.Sprintf("%s: transport", name)
	}
	return strings.Join(lines, "\n"), ends
}

// rdmaCallerScenarios are the scenarios of progs/semantics.c in which a
// recv blocks: timeouts, signals with and without SA_RESTART, the peer's
// FIN and reset, a shutdown or close by another thread, MSG_WAITALL and
// SO_RCVLOWAT; and those in which poll, select or epoll_wait sleeps:
// readiness masks, select and poll together, a signal in poll, the peer's
// FIN seen by a poller, a reader and a sender polling on one connection
// from two threads, epoll level- and edge-triggered, for output,
// one-shot, EPOLLRDHUP, the end seen by an edge-triggered item, an item
// deleted and added again.
var rdmaCallerScenarios = []string{"rcvtimeo", "eintr", "eintr_restart", "timeo_eintr",
	"peerclose", "reset_seen", "blocked_shutdown", "waitall", "rcvlowat", "recv0",
	"pollmasks", "selectpoll", "poll_eintr", "peerclose_nb", "duplex_pollers",
	"epoll_lt", "epoll_et", "epoll_et_out", "epoll_oneshot", "epoll_rdhup", "epoll_et_end", "epoll_readd",
	"sndtimeo", "partial", "peer_killed"}

// TestSemanticsRDMACaller runs rdmaCallerScenarios over the RDMA
// stand-in with OSF_RDMA_RX=caller, where a reader that found nothing
// sleeps in poll on its connection's own channel and its wake socket
// (preload/conn_rdma.c) instead of in recv on the wake socket: the
// outputs must be Linux TCP's line for line, and the engine's log must
// show readers asleep on the channel.
func TestSemanticsRDMACaller(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "semantics")
	// lend: the channel lent between waits (docs/DESIGN.md D4). One
	// after the other: 22 scenarios at once load a busy host enough.
	for _, rx := range []string{"caller", "lend"} {
		t.Run(rx, func(t *testing.T) { semanticsRDMACaller(t, prog, rx) })
	}
}

func semanticsRDMACaller(t *testing.T, prog, rx string) {
	var mu sync.Mutex
	sleeps, ran := 0, 0
	t.Run("scenarios", func(t *testing.T) {
		for _, name := range rdmaCallerScenarios {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				logPath := filepath.Join(t.TempDir(), "osf.log")
				// 22 scenarios at once over the stand-in: a long
				// one (blocked_shutdown: 6 s of kicks alone) ran out
				// of shortRun on a busy host.
				b := bare.cmd(t, nil, prog, name).MustRun(longRun)
				o := osfRDMASim.cmd(t, []string{"OSF_RDMA_RX=" + rx, "OSF_LOG_LEVEL=debug", "OSF_LOG_FILE=" + logPath},
					prog, name).Run(longRun)
				if !o.OK() {
					t.Fatalf("run under osf: %s\n--- bare output for comparison:\n%s", o, b.Stdout)
				}
				semanticsCompare(t, name, b.Stdout, o.Stdout, "unix")
				log, _ := os.ReadFile(logPath)
				if !strings.Contains(string(log), ": rdma via sim") {
					t.Errorf("no connection over RDMA in the log:\n%s", log)
				}
				mu.Lock()
				defer mu.Unlock()
				ran++
				for _, m := range chanSleeps.FindAllStringSubmatch(string(log), -1) {
					n, _ := strconv.Atoi(m[1])
					sleeps += n
				}
			})
		}
	})
	if ran > 0 && sleeps == 0 {
		t.Errorf("no reader slept on its connection's channel in %d scenarios", len(rdmaCallerScenarios))
	}
}

// TestRDMACallerPollerTakes: osfperf's ping-pong waits in poll(2) on
// nonblocking sockets. Over the stand-in with OSF_RDMA_RX=caller the
// pollers of both ends must take their connection's completions
// themselves, asleep on its channel (selectmux/poll.c, ready.h chan),
// not leave each message to the engine (which took all but a handful
// while pollers slept on their wake sockets only).
func TestRDMACallerPollerTakes(t *testing.T) {
	t.Parallel()
	for _, rx := range []string{"caller", "lend"} {
		t.Run(rx, func(t *testing.T) {
			t.Parallel()
			rdmaCallerPollerTakes(t, rx)
		})
	}
}

// rdmaCallerPollerTakes is TestRDMACallerPollerTakes for OSF_RDMA_RX=rx;
// with lend the pollers' waits must also leave the engine's epoll alone:
// the channel lent between them, no epoll_ctl pair per wait.
func rdmaCallerPollerTakes(t *testing.T, rx string) {
	perf := testutil.Bin(t, "osfperf")
	port := strconv.Itoa(testutil.FreePort(t))
	dir := t.TempDir()
	env := func(log string) []string {
		return []string{"OSF_RDMA_RX=" + rx, "OSF_LOG_LEVEL=debug", "OSF_LOG_FILE=" + filepath.Join(dir, log)}
	}
	srv := osfRDMASim.cmd(t, env("server.log"), perf, "server", "-a", "127.0.0.1", "-p", port, "-1").Start()
	testutil.WaitListening(t, "127.0.0.1:"+port, shortRun)
	// The kernel listener comes before the core's RDMA one (sockets.c
	// listen_offload): a client in between is not offloaded (strict:
	// refused).
	testutil.WaitFor(t, shortRun, "the server's RDMA listener", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		return strings.Contains(string(b), ": RDMA listener via")
	})
	r := osfRDMASim.cmd(t, env("client.log"), perf, "client", "-a", "127.0.0.1", "-p", port,
		"-t", "pingpong", "-s", "64", "-n", "500", "--warmup", "50").Run(longRun)
	if !r.OK() {
		cl, _ := os.ReadFile(filepath.Join(dir, "client.log"))
		t.Fatalf("client: %s\n--- its osf log (why it was not offloaded):\n%s", r, cl)
	}
	if w := srv.Wait(longRun); !w.OK() {
		t.Fatalf("server: %s", w)
	}
	for _, name := range []string{"server.log", "client.log"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		log := string(b)
		if !strings.Contains(log, ": rdma via sim") {
			t.Errorf("%s: no connection over RDMA:\n%s", name, log)
		}
		m := callerEngineTakes.FindStringSubmatch(log)
		if m == nil {
			t.Errorf("%s: no release line:\n%s", name, log)
			continue
		}
		caller, _ := strconv.Atoi(m[1])
		engine, _ := strconv.Atoi(m[2])
		if caller <= engine {
			t.Errorf("%s: the pollers took %d completions, the engine %d: pollers must take most themselves:\n%s", name, caller, engine, log)
		}
		t.Logf("%s: completions taken by the pollers %d, by the engine %d", name, caller, engine)
		c := chanCtls.FindStringSubmatch(log)
		if c == nil {
			t.Errorf("%s: no count of the channel's epoll_ctl calls:\n%s", name, log)
			continue
		}
		// 550 round trips: a wait each at least (caller: two calls each).
		if ctls, _ := strconv.Atoi(c[1]); rx == "lend" && ctls > 55 {
			t.Errorf("%s: %d epoll_ctl calls on the engine's set for 550 round trips: the channel was not lent between the pollers' waits:\n%s", name, ctls, log)
		} else {
			t.Logf("%s: the channel's epoll_ctl calls %d", name, ctls)
		}
	}
}
