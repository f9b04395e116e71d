package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
	"github.com/osfproject/osf/verbs"
)

// The transport conformance suite: the same stream tests (ping-pong,
// bulk both ways with checksums, half-close, resets, EPIPE, non-blocking
// EAGAIN, names) through every transport, with server and client under
// osf, plus a check through osfstat (and the core's log) that the
// connection really took the transport under test: a fallback to kernel
// TCP must not pass for shm or RDMA.

// conformanceLeg is one transport.
type conformanceLeg struct {
	name string
	// setup skips the leg when it cannot run here, and returns where the
	// programs run, the host address to use and the OSF_* variables.
	setup func(t *testing.T) (pl place, host string, env []string)
	// path checks, while a connection is held open, that it took the
	// transport: the client's and server's pids and logs.
	path func(t *testing.T, s *streamServer, clientPID int, clientLog, serverLog string)
}

func conformanceLegs() []conformanceLeg {
	legs := []conformanceLeg{
		{
			name: "kernel",
			setup: func(t *testing.T) (place, string, []string) {
				return place{}, "127.0.0.1", []string{"OSF_TRANSPORT=kernel"}
			},
			path: func(t *testing.T, s *streamServer, pid int, _, _ string) {
				for _, sock := range testutil.AssertTransport(t, pid, testutil.ByRole("client"), testutil.TransportKernel) {
					if sock.Reason != "OSF_TRANSPORT=kernel" {
						t.Errorf("client socket reason %q, want OSF_TRANSPORT=kernel", sock.Reason)
					}
				}
				testutil.AssertTransport(t, s.p.Pid, testutil.ByRole("server"), testutil.TransportKernel)
			},
		},
		{
			name: "shm",
			setup: func(t *testing.T) (place, string, []string) {
				return place{}, "127.0.0.1", []string{"OSF_TRANSPORT=shm"}
			},
			path: func(t *testing.T, s *streamServer, pid int, _, _ string) {
				testutil.AssertTransport(t, pid, testutil.ByRole("client"), testutil.TransportShm)
				testutil.AssertTransport(t, s.p.Pid, testutil.ByRole("server"), testutil.TransportShm)
			},
		},
	}
	// The RDMA engine (both ends as the C data path's peer), wire data,
	// credits, FIN, CLOSE and listener replication through the companion,
	// over the software stand-in for a device (OSF_DEBUG_RDMA_SIM):
	// everything of the rdma leg but libibverbs and librdmacm, on any
	// machine. Each RDMA leg runs twice: the engine taking every
	// completion (OSF_RDMA_RX=engine), and the application's waiting
	// threads taking their connections' (caller, the default;
	// docs/DESIGN.md D4), and caller with the channel lent between
	// waits (lend).
	sim := func(t *testing.T) (place, string, []string) {
		return place{}, "127.0.0.1", []string{"OSF_TRANSPORT=rdma", "OSF_DEBUG_RDMA_SIM=1"}
	}
	for _, rx := range []string{"engine", "caller", "lend"} {
		sfx := map[string]string{"engine": "", "caller": "-caller", "lend": "-lend"}[rx]
		legs = append(legs,
			conformanceLeg{name: "rdma-sim" + sfx, setup: withEnv(sim, "OSF_RDMA_RX="+rx), path: rdmaPath(": rdma via sim ", rx != "engine")},
			conformanceLeg{name: "rdma" + sfx, setup: withEnv(rdmaLeg, "OSF_RDMA_RX="+rx), path: rdmaPath(": rdma via ", rx != "engine")})
	}
	// Streams on a link (OSF_RDMA_LINKS=1, the stand-in only): the
	// client's connection is a stream on its link to the server process,
	// moved by the engines alone (docs/RDMA.md, "Links").
	legs = append(legs, conformanceLeg{name: "rdma-sim-links", setup: withEnv(sim, "OSF_RDMA_LINKS=1"),
		path: func(t *testing.T, s *streamServer, pid int, clientLog, serverLog string) {
			assertRDMA(t, s, pid)
			assertLog(t, clientLog, ": rdma via sim ")
			assertLog(t, clientLog, " on link ")
			assertLog(t, serverLog, "rdma: accepted ")
			assertLog(t, serverLog, "(sim, link ")
		}})
	return legs
}

// withEnv is setup with more variables for both programs.
func withEnv(setup func(t *testing.T) (place, string, []string), env ...string) func(t *testing.T) (place, string, []string) {
	return func(t *testing.T) (place, string, []string) {
		pl, host, e := setup(t)
		return pl, host, append(e, env...)
	}
}

// rdmaPath checks an RDMA leg's connections: RDMA at both ends, the
// client's log naming the device (via), the application's threads
// posting sends, and taking completions exactly when caller: on some
// connection of either end (a client process often exits before its
// engine logs the release, and whether a thread finds a completion in
// the queue before it sleeps is timing), on none of either without it.
func rdmaPath(via string, caller bool) func(t *testing.T, s *streamServer, pid int, clientLog, serverLog string) {
	return func(t *testing.T, s *streamServer, pid int, clientLog, serverLog string) {
		assertRDMA(t, s, pid)
		assertLog(t, clientLog, via)
		assertLog(t, serverLog, "rdma: accepted ")
		assertCallerPosts(t, clientLog)
		assertCallerPosts(t, serverLog)
		assertCallerTakes(t, clientLog+serverLog, caller)
	}
}

// rdmaLeg runs the programs in the host's initial network namespace, where
// the RDMA device's network interface is (the tests themselves run in a
// private one with only lo), on an address of that interface; OSFTEST_RDMA_ADDR
// overrides the address.
func rdmaLeg(t *testing.T) (place, string, []string) {
	testutil.SkipIfNoRDMA(t)
	pl := place{name: "host", prefix: []string{"nsenter", "-t", "1", "-n", "--"}}
	host := os.Getenv("OSFTEST_RDMA_ADDR")
	if host == "" {
		host = rdmaHostAddr(t, pl)
	}
	return pl, host, []string{"OSF_TRANSPORT=rdma", "OSF_ROUTES=offload both * *"}
}

// rdmaHostAddr finds an IPv4 address of a network interface served by an
// active RDMA port, in the namespace of pl.
func rdmaHostAddr(t *testing.T, pl place) string {
	devs, err := verbs.Devices()
	if err != nil {
		t.Skip(err)
	}
	for _, d := range devs {
		for _, p := range d.Ports {
			if !p.State.Active() {
				continue
			}
			for _, nd := range p.Netdevs {
				r := pl.plain(t, "ip", "-4", "-o", "addr", "show", "dev", nd).Run(shortRun)
				for _, f := range strings.Fields(r.Stdout) {
					if a, _, ok := strings.Cut(f, "/"); ok && strings.Count(a, ".") == 3 {
						return a
					}
				}
			}
		}
	}
	t.Skip("no IPv4 address on a network interface served by an active RDMA port (set OSFTEST_RDMA_ADDR)")
	return ""
}

// assertRDMA checks through osfstat that the client's connection and the
// server's are RDMA connections (libosf.so records a connection as RDMA
// when an engine made its segment), while the server's listener is shm's
// (its companion, where the engine hands connections over).
func assertRDMA(t *testing.T, s *streamServer, clientPID int) {
	t.Helper()
	testutil.AssertTransport(t, clientPID, testutil.ByRole("client"), testutil.TransportRDMA)
	testutil.AssertTransport(t, s.p.Pid, testutil.ByRole("server"), testutil.TransportRDMA)
	testutil.AssertTransport(t, s.p.Pid, testutil.ByRole("listener"), testutil.TransportShm)
}

func assertLog(t *testing.T, log, want string) {
	t.Helper()
	if !strings.Contains(log, want) {
		t.Errorf("the core's log has no %q:\n%s", want, log)
	}
}

// callerPosts and callerTakes match the counts of sends an RDMA
// connection's application threads posted themselves and of completions
// they took themselves (sdp/rdma/tx.h, rx.h), in the line the engine logs
// when it releases the connection.
var (
	callerPosts = regexp.MustCompile(`sends posted by the application's threads ([0-9]+)`)
	callerTakes = regexp.MustCompile(`completions taken by the application's threads ([0-9]+)`)
	chanSleeps  = regexp.MustCompile(`sleeps on the connection's channel ([0-9]+)`)
	// both counts of completions: the application's threads', the engine's
	callerEngineTakes = regexp.MustCompile(`completions taken by the application's threads ([0-9]+), by the engine ([0-9]+)`)
	// the epoll_ctl calls on the engine's set for a connection's channel
	// (the engine's line when it releases the connection)
	chanCtls = regexp.MustCompile(`the channel's epoll_ctl calls ([0-9]+)`)
)

// assertCallerPosts checks that the application's own threads posted
// RDMA writes on some connection (docs/DESIGN.md D4), not only the engine.
func assertCallerPosts(t *testing.T, log string) {
	t.Helper()
	assertCallerCount(t, log, callerPosts, "sends were posted")
}

// assertCallerTakes checks that the application's own threads received
// on some connection when want (they took completions, DATA and credits,
// from the connection's queue, not only the engine), else on none.
func assertCallerTakes(t *testing.T, log string, want bool) {
	t.Helper()
	if want {
		assertCallerCount(t, log, callerTakes, "completions were taken")
		// A reader that found nothing slept on its connection's
		// channel (preload/conn_rdma.c), not on its wake socket.
		assertCallerCount(t, log, chanSleeps, "readers slept on the connection's channel")
		return
	}
	for _, m := range chanSleeps.FindAllStringSubmatch(log, -1) {
		if m[1] != "0" {
			t.Errorf("with OSF_RDMA_RX=engine, readers slept %s times on the connection's channel:\n%s", m[1], log)
			return
		}
	}
	for _, m := range callerTakes.FindAllStringSubmatch(log, -1) {
		if m[1] != "0" {
			t.Errorf("with OSF_RDMA_RX=engine, the application's threads took %s completions:\n%s", m[1], log)
			return
		}
	}
}

func assertCallerCount(t *testing.T, log string, re *regexp.Regexp, what string) {
	t.Helper()
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		if m[1] != "0" {
			return
		}
	}
	t.Errorf("no connection's %s by the application's threads:\n%s", what, log)
}

func readLog(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func TestConformance(t *testing.T) {
	for _, leg := range conformanceLegs() {
		t.Run(leg.name, func(t *testing.T) {
			t.Parallel()
			pl, host, env := leg.setup(t)
			dir := t.TempDir()
			clientLog, serverLog := filepath.Join(dir, "client.log"), filepath.Join(dir, "server.log")
			debug := []string{"OSF_LOG_LEVEL=debug"}
			serverEnv := append(append(append([]string{}, env...), debug...), "OSF_LOG_FILE="+serverLog)
			clientEnv := append(append(append([]string{}, env...), debug...), "OSF_LOG_FILE="+clientLog)
			s := startStreamServer(t, pl, serverEnv, host)
			runStreamCases(t, s, pl, clientEnv, 8<<20)
			t.Run("path", func(t *testing.T) {
				pid, _, _, release := s.hold(t, pl, clientEnv)
				defer release()
				leg.path(t, s, pid, readLog(t, clientLog), readLog(t, serverLog))
			})
			s.client(t, pl, clientEnv, "quit", 0, 1)
			if r := s.p.Wait(shortRun); !r.OK() {
				t.Errorf("stream server: %s", r)
			}
		})
	}
}
