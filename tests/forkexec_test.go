package tests

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// Offloaded connections must live and die by the rules of kernel sockets
// across fork and exec: every process model servers use is run here with
// both ends under osf (asserting that the connection really was offloaded
// in every process that holds it) and bare, with the same data
// expectations (SHA-256 of what came back). The crash semantics are in
// forkexec_crash_test.go, the helpers in forkexec_util_test.go.

var bareAndOsf = []mode{bare, underOsf}

// coreModes adds osfLogged, where the set-up loads the core, for tests of
// how a fork child or an exec'd image gets its own copy.
var coreModes = []mode{bare, underOsf, osfLogged}

// TestForkExecInetd is the inetd model: the server accepts, forks, dup2s
// the connection onto 0 and 1 and execs cat (the bytes come back) or
// sha256sum (which reads its standard input through stdio: under osf the
// standard streams are replaced by streams that go through osf's hooks),
// three connections each.
func TestForkExecInetd(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name+"/cat", func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "fork", args: []string{"cat"}, conns: 3, size: sizes(3 << 20),
				holders: []holder{{"cat", []int{0, 1}}}, expect: echoed})
		})
		t.Run(m.name+"/sha256sum", func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "fork", args: []string{"sha256sum"}, conns: 3, size: sizes(3 << 20),
				holders: []holder{{"sha256sum", []int{0, 1}}}, expect: digest})
		})
	}
}

// TestForkExecPipeline hands the connection, as standard input and output,
// to shells that pass it on across further forks and execs: a pipeline
// whose first command reads the connection and whose last writes it, and
// an exec chain of two shells ending in sha256sum.
func TestForkExecPipeline(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name+"/tr|cat", func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "fork", args: []string{"sh", "-c", "tr a-z A-Z | cat"}, conns: 2,
				size:    sizes(2 << 20),
				holders: []holder{{"dash", []int{0, 1}}, {"tr", []int{0}}, {"cat", []int{1}}}, expect: upper})
		})
		t.Run(m.name+"/exec-sh-exec-sha256sum", func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "fork", args: []string{"sh", "-c", `exec sh -c "exec sha256sum"`}, conns: 2,
				size:    sizes(2 << 20),
				holders: []holder{{"sha256sum", []int{0, 1}}}, expect: digest})
		})
	}
}

// TestForkExecEnvReplaced hands the connection to a program whose
// environment was replaced: `env -i LD_PRELOAD=... sha256sum` (env's own
// exec goes through osf's hook, which puts osf's state back), and an
// execve system call made directly, which no hook sees, with an
// environment of only LD_PRELOAD: the new image must find its fd table
// without OSF_FDTABLE.
func TestForkExecEnvReplaced(t *testing.T) {
	t.Parallel()
	sha := testutil.Tool(t, "sha256sum")
	for _, m := range bareAndOsf {
		t.Run(m.name+"/env-i", func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "envi", args: []string{"sha256sum"}, conns: 2, size: sizes(1 << 20),
				holders: []holder{{"sha256sum", []int{0, 1}}}, expect: digest,
				check: func(t *testing.T, m mode, _, _, child int) {
					env, err := testutil.Environ(child)
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("sha256sum's environment: %q", env)
				}})
		})
		t.Run(m.name+"/raw-execve", func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "rawexec", args: []string{sha}, conns: 2, size: sizes(1 << 20),
				holders: []holder{{"sha256sum", []int{0, 1}}}, expect: digest,
				check: func(t *testing.T, m mode, _, _, child int) {
					env, err := testutil.Environ(child)
					if err != nil {
						t.Fatal(err)
					}
					want := []string{""}
					if m.osf {
						want = []string{"LD_PRELOAD=" + testutil.Lib(t)}
					}
					if !slices.Equal(env, want) {
						t.Errorf("sha256sum's environment %q, want %q", env, want)
					}
				}})
		})
	}
}

// TestForkExecCloseRange closes every fd above 2 in the child before exec
// (close_range, close_range with CLOSE_RANGE_CLOEXEC, closefrom), with the
// connection dup2'd onto 0 and 1 first: osf's own hidden fds (its fd
// table, the connection's segment) must survive the program closing
// everything.
func TestForkExecCloseRange(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		for _, mode := range []string{"closerange", "closerange-cloexec", "closefrom"} {
			t.Run(m.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				runHandoff(t, m, handoff{mode: mode, args: []string{"cat"}, conns: 2, size: sizes(2 << 20),
					holders: []holder{{"cat", []int{0, 1}}}, expect: echoed})
			})
		}
	}
}

// TestForkExecPosixSpawn hands 20 connections in a row to sha256sum with
// posix_spawnp and file actions (dup2 onto 0 and 1, close the original);
// the parent closes its copy as soon as posix_spawnp returns, which may be
// before the child has exec'd.
func TestForkExecPosixSpawn(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "spawn", args: []string{"sha256sum"}, conns: 20, size: sizes(256 << 10),
				holders: []holder{{"sha256sum", []int{0, 1}}}, expect: digest})
		})
	}
}

// TestForkExecSystem hands connections to cat through system() in a fork
// child: glibc spawns sh itself, past osf's hooks, and sh execs cat. sh
// adopts the fd table it inherited, which lies at the soft RLIMIT_NOFILE
// (a hidden fd), so its adoption must place its copy there in a window;
// it printed "inherited fd table ... is unusable" and cat got a plain
// wake socket instead of the connection.
func TestForkExecSystem(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "system", args: []string{"cat"}, conns: 3, size: sizes(1 << 20),
				holders: []holder{{"cat", []int{0, 1}}}, expect: echoed})
		})
	}
}

// TestForkExecVfork hands connections to cat from a real vfork child (bare)
// that dup2s and execve's; under osf vfork runs as fork.
func TestForkExecVfork(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "vfork", args: []string{"cat"}, conns: 3, size: sizes(2 << 20),
				holders: []holder{{"cat", []int{0, 1}}}, expect: echoed})
		})
	}
}

// TestForkExecActivate is socket activation (inetd "wait" mode, systemd
// sockets): a launcher listens and execs the server with the listener at
// fd 3; the exec'd image accepts on it (under osf: the listener and its
// companion crossed the exec, and the first accept loads the core in the
// new image) and hands each connection to cat.
func TestForkExecActivate(t *testing.T) {
	t.Parallel()
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			runHandoff(t, m, handoff{mode: "fork", activate: true, args: []string{"cat"}, conns: 2,
				size: sizes(1 << 20), holders: []holder{{"cat", []int{0, 1}}}, expect: echoed,
				check: func(t *testing.T, m mode, i, srv, _ int) {
					if !m.osf {
						return
					}
					p := testutil.AssertCoreLoaded(t, srv, m.log)
					if p.Program != "fxhand" {
						t.Errorf("server %d runs %q, want the exec'd fxhand", srv, p.Program)
					}
					if i == 0 { // it closes the listener after its last accept
						testutil.AssertTransport(t, srv, testutil.ByFD(3), testutil.TransportShm)
					}
				}})
		})
	}
}

// TestForkExecHold hands the connection to a program that does not know
// it has it: the child execs `sleep 2` with the connection left at its fd.
// Like a kernel socket, the connection then lives until sleep exits: the
// client (which sends nothing) sees end of file only after about 2 s. Made
// close-on-exec first, the connection must not reach sleep: the client
// sees end of file while sleep still runs.
func TestForkExecHold(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		for _, how := range []string{"hold", "hold-cloexec"} {
			t.Run(m.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				port := testutil.FreePort(t)
				srv := m.cmd(t, nil, testutil.Prog(t, "fxhand"), how, strconv.Itoa(port), "1", "sleep", "2").Start()
				srv.WaitOutput("listening\n", shortRun)
				empty := filepath.Join(t.TempDir(), "empty")
				if err := os.WriteFile(empty, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				cl := m.cmd(t, nil, testutil.Prog(t, "fxclient"), strconv.Itoa(port), empty, empty+".out").Start()
				var fd, child int
				if _, err := fmt.Sscanf(waitLine(t, srv, "conn 0 fd "), "conn 0 fd %d", &fd); err != nil {
					t.Fatal(err)
				}
				if _, err := fmt.Sscanf(waitLine(t, srv, "child 0 "), "child 0 %d", &child); err != nil {
					t.Fatal(err)
				}
				testutil.WaitFor(t, shortRun, "the child to exec sleep", func() bool { return testutil.ExeBase(child) == "sleep" })
				if how == "hold" {
					checkHolders(t, m, child, []holder{{"sleep", []int{fd}}})
				} else if _, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", child, fd)); err == nil {
					t.Errorf("sleep has fd %d, which was close-on-exec", fd)
				}
				r := cl.Wait(longRun)
				if !r.OK() || !strings.Contains(r.Stdout, "done sent 0 received 0\n") {
					t.Fatalf("client: %s", r)
				}
				st, err := testutil.ThreadState(child, child)
				sleepAlive := err == nil && st != 'Z'
				if how == "hold" && r.Elapsed < 1500*time.Millisecond {
					t.Errorf("the client saw end of file after %v, while sleep (2 s) still held the connection",
						r.Elapsed.Round(time.Millisecond))
				}
				if how == "hold-cloexec" && !sleepAlive {
					t.Errorf("the client saw end of file only after %v, when sleep had exited",
						r.Elapsed.Round(time.Millisecond))
				}
				t.Logf("%s: end of file after %v", how, r.Elapsed.Round(time.Millisecond))
				if r := srv.Wait(longRun); !r.OK() {
					t.Errorf("fxhand: %s", r)
				}
			})
		}
	}
}

// TestForkExecDaemon accepts a connection, calls daemon(1, 1) (which osf
// implements on its own fork) and serves the connection from the daemon,
// which then accepts a second connection itself (under osf, with a fresh
// copy of the core: the one inherited through daemon's fork is stale).
func TestForkExecDaemon(t *testing.T) {
	t.Parallel()
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := testutil.FreePort(t)
			dir := t.TempDir()
			pidfile := filepath.Join(dir, "pid")
			srv := m.cmd(t, nil, testutil.Prog(t, "fxhand"), "daemon", strconv.Itoa(port), "2", pidfile).Start()
			srv.WaitOutput("listening\n", shortRun)
			daemon := 0
			for i := range 2 {
				in := testutil.RandomBytes(t, 1<<20+i*4099)
				inPath, outPath := filepath.Join(dir, "in"), filepath.Join(dir, "out")
				if err := os.WriteFile(inPath, in, 0o644); err != nil {
					t.Fatal(err)
				}
				cl := m.cmd(t, nil, testutil.Prog(t, "fxclient"), strconv.Itoa(port), inPath, outPath, "pause")
				stdin, err := cl.Cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				p := cl.Start()
				waitLine(t, p, "half")
				if i == 0 {
					daemon = waitPidfile(t, pidfile)
					testutil.KillOnCleanup(t, daemon)
					// The process we started exits in daemon().
					if r := srv.Wait(shortRun); !r.OK() {
						t.Fatalf("fxhand before daemon(): %s", r)
					}
					checkDaemon(t, daemon)
					var fd int
					line := waitLine(t, srv, "conn 0 fd ")
					if _, err := fmt.Sscanf(line, "conn 0 fd %d", &fd); err != nil {
						t.Fatal(err)
					}
					checkConn(t, m, "daemon", daemon, fd)
					if m.osf {
						testutil.AssertCoreLoaded(t, daemon, false)
					}
				} else if m.osf {
					// The daemon accepted this one itself.
					st := testutil.WaitOsfStat(t, daemon, shortRun, "an offloaded server connection",
						func(p testutil.StatProc) bool {
							s := p.Select(testutil.ByRole("server"))
							return len(s) == 1 && s[0].Transport == testutil.TransportShm
						})
					if st.CoreLoaded != m.log {
						t.Errorf("daemon accepted an offloaded connection: core loaded %v, want %v: %+v",
							st.CoreLoaded, m.log, st)
					}
					if ok, _ := testutil.MapsContain(daemon, testutil.FreshCoreMapping); !ok && m.log {
						t.Errorf("daemon: no fresh copy of the core (%s) mapped", testutil.FreshCoreMapping)
					}
				}
				if _, err := io.WriteString(stdin, "go\n"); err != nil {
					t.Fatal(err)
				}
				stdin.Close()
				if r := p.Wait(longRun); !r.OK() {
					t.Fatalf("client %d: %s", i, r)
				}
				got, err := os.ReadFile(outPath)
				if err != nil {
					t.Fatal(err)
				}
				if testutil.SHA256(got) != testutil.SHA256(in) {
					t.Fatalf("connection %d: %d bytes came back for %d sent, sha256 differs", i, len(got), len(in))
				}
			}
			testutil.WaitFor(t, shortRun, "the daemon to exit after its last connection", func() bool {
				st, err := testutil.ThreadState(daemon, daemon)
				return err != nil || st == 'Z'
			})
		})
	}
}

// waitPidfile waits for a daemon's pid file and returns the pid.
func waitPidfile(t *testing.T, path string) int {
	t.Helper()
	pid := 0
	testutil.WaitFor(t, shortRun, "the daemon's pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// checkDaemon asserts that pid is a daemon: its own session leader.
func checkDaemon(t *testing.T, pid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if f[3] != strconv.Itoa(pid) {
		t.Errorf("daemon %d: session %s, want its own", pid, f[3])
	}
}

// preforkServer listens on 127.0.0.1:PORT and first measures, PROBES
// times, the first and second accept() of a fresh fork child with two
// connections already waiting (the parent made them): under osf the first
// accept of a child loads a fresh copy of the core (from a memfd; the
// parent's copy, mapped in the child too, is stale). It prints one line
// per probe, "probe R first_us F second_us S core_before B core_after A
// ok" (B, A: a fresh core mapped), then forks WORKERS workers that all
// accept on the listener and echo each connection, prints "worker W pid P
// core C" (C: a fresh core mapped after its first accept) at each
// worker's first connection, and waits for the workers.
const preforkServer = `
import os, socket, sys, time
port, workers, probes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def core():
    return int("/memfd:osfcore" in open("/proc/self/maps").read())

l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(512)
print("listening", flush=True)

for r in range(probes):
    a = socket.create_connection(("127.0.0.1", port)); a.sendall(b"a")
    b = socket.create_connection(("127.0.0.1", port)); b.sendall(b"b")
    pid = os.fork()
    if pid == 0:
        before = core()
        t0 = time.perf_counter_ns(); s1, _ = l.accept()
        t1 = time.perf_counter_ns(); s2, _ = l.accept()
        t2 = time.perf_counter_ns()
        ok = sorted(s1.recv(1) + s2.recv(1)) == sorted(b"ab")
        os.write(1, b"probe %d first_us %d second_us %d core_before %d core_after %d %s\n" % (
            r, (t1 - t0) // 1000, (t2 - t1) // 1000, before, core(), b"ok" if ok else b"BAD"))
        os._exit(0)
    os.waitpid(pid, 0)
    a.close(); b.close()

pids = []
for w in range(workers):
    pid = os.fork()
    if pid == 0:
        n = 0
        while True:
            s, _ = l.accept()
            n += 1
            if n == 1:
                os.write(1, b"worker %d pid %d core %d\n" % (w, os.getpid(), core()))
            while True:
                d = s.recv(65536)
                if not d:
                    break
                s.sendall(d)
            s.close()
    pids.append(pid)
print("workers", len(pids), flush=True)
for p in pids:
    os.waitpid(p, 0)
`

// preforkClients forks PROCS children that each make PER connections to
// 127.0.0.1:PORT one after the other, send 1..100,000 random bytes (from
// SEED), half-close and read the echo back, comparing SHA-256 digests, and
// note how each connection is carried (osf: offloaded, whatever its fd; tcp).
// Each child prints "client K ok N FAMILY=COUNT..."; the parent "done".
const preforkClients = pyFamily + `
import hashlib, os, random, socket, sys
port, procs, per, seed = map(int, sys.argv[1:5])


kids = []
for k in range(procs):
    pid = os.fork()
    if pid == 0:
        rnd = random.Random(seed * 1000 + k)
        ok, fams = 0, {}
        try:
            for i in range(per):
                data = rnd.randbytes(rnd.randint(1, 100000))
                c = socket.create_connection(("127.0.0.1", port))
                fam = family(c.fileno())
                fams[fam] = fams.get(fam, 0) + 1
                c.sendall(data)
                c.shutdown(socket.SHUT_WR)
                out = bytearray()
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    out += d
                c.close()
                if hashlib.sha256(out).digest() == hashlib.sha256(data).digest():
                    ok += 1
                else:
                    os.write(1, b"client %d conn %d: %d bytes came back for %d\n" % (k, i, len(out), len(data)))
        except Exception as e:
            os.write(1, ("client %d: %r\n" % (k, e)).encode())
        fam = " ".join("%s=%d" % kv for kv in sorted(fams.items()))
        os.write(1, ("client %d ok %d %s\n" % (k, ok, fam)).encode())
        os._exit(0)
    kids.append(pid)
for p in kids:
    os.waitpid(p, 0)
print("done", flush=True)
`

// TestForkExecPrefork is the pre-fork model: a listener, 4 forked workers
// that all accept on it (under osf each loads a fresh core at its first
// accept), and 400 clients (8 processes of 50 connections, random sizes)
// whose echoes must all come back intact. It also measures what the first
// accept of a fresh child costs with a client already waiting, against
// its second accept, and logs it.
func TestForkExecPrefork(t *testing.T) {
	t.Parallel()
	const workers, procs, per, probes = 4, 8, 50, 3
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := testutil.FreePort(t)
			srv := m.cmd(t, nil, python(t), "-c", preforkServer,
				strconv.Itoa(port), strconv.Itoa(workers), strconv.Itoa(probes)).Start()
			srv.WaitOutput(fmt.Sprintf("workers %d\n", workers), longRun)

			probeRe := regexp.MustCompile(`probe (\d+) first_us (\d+) second_us (\d+) core_before (\d) core_after (\d) (\w+)`)
			probes := probeRe.FindAllStringSubmatch(srv.Stdout(), -1)
			if len(probes) != 3 {
				t.Fatalf("want 3 probe lines: %q", srv.Stdout())
			}
			for _, p := range probes {
				t.Logf("%s: fresh child %s: first accept %s µs, second %s µs (core mapped before %s, after %s)",
					m.name, p[1], p[2], p[3], p[4], p[5])
				wantAfter := "0"
				if m.log {
					wantAfter = "1"
				}
				if p[4] != "0" || p[5] != wantAfter || p[6] != "ok" {
					t.Errorf("probe %s: core before %s after %s (want 0, %s), data %s", p[1], p[4], p[5], wantAfter, p[6])
				}
			}

			seed := testutil.Seed(t)
			start := time.Now()
			r := m.cmd(t, nil, python(t), "-c", preforkClients, strconv.Itoa(port), strconv.Itoa(procs),
				strconv.Itoa(per), strconv.FormatUint(seed%1000003, 10)).MustRun(longRun)
			t.Logf("%s: %d connections through %d workers in %v", m.name, procs*per, workers,
				time.Since(start).Round(time.Millisecond))
			fam := "tcp"
			if m.osf {
				fam = "osf"
			}
			for k := range procs {
				if line := fmt.Sprintf("client %d ok %d %s=%d\n", k, per, fam, per); !strings.Contains(r.Stdout, line) {
					t.Errorf("no %q in the clients' output:\n%s", strings.TrimSpace(line), r.Stdout)
				}
			}

			workerRe := regexp.MustCompile(`worker (\d+) pid (\d+) core (\d)`)
			ws := workerRe.FindAllStringSubmatch(srv.Stdout(), -1)
			if len(ws) != workers {
				t.Errorf("%d of %d workers accepted a connection:\n%s", len(ws), workers, srv.Stdout())
			}
			for _, w := range ws {
				pid, _ := strconv.Atoi(w[2])
				if !m.log {
					if w[3] != "0" {
						t.Errorf("%s worker %s has a core mapped", m.name, w[1])
					}
					if m.osf {
						testutil.AssertCoreLoaded(t, pid, false)
						testutil.AssertTransport(t, pid, testutil.ByRole("listener"), testutil.TransportShm)
					}
					continue
				}
				if w[3] != "1" {
					t.Errorf("worker %s: no core mapped after its first accept", w[1])
				}
				p := testutil.AssertCoreLoaded(t, pid, true)
				if ok, _ := testutil.MapsContain(pid, testutil.FreshCoreMapping); !ok {
					t.Errorf("worker %s: its core is not a fresh copy (%s)", w[1], testutil.FreshCoreMapping)
				}
				t.Logf("worker %s: core_loads %d", w[1], p.CoreLoads)
				testutil.AssertTransport(t, pid, testutil.ByRole("listener"), testutil.TransportShm)
			}
		})
	}
}

// TestForkExecSocat runs `socat TCP-LISTEN:PORT,fork,reuseaddr EXEC:cat`
// (one fork child per connection, which relays to cat) and five socat
// clients in a row, comparing the bytes; both ends under osf or both bare.
func TestForkExecSocat(t *testing.T) {
	t.Parallel()
	socat := testutil.Tool(t, "socat")
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := testutil.FreePort(t)
			dir := t.TempDir()
			srv := m.cmd(t, nil, socat, "-t", "10",
				fmt.Sprintf("TCP-LISTEN:%d,fork,reuseaddr,bind=127.0.0.1", port), "EXEC:cat").Start()
			testutil.WaitListening(t, fmt.Sprintf("127.0.0.1:%d", port), shortRun)
			if m.osf {
				// The kernel socket listens before listen() offloads it.
				waitRole(t, srv.Pid, "listener", 1)
				testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportShm)
			}
			for i := range 5 {
				in := testutil.RandomBytes(t, 512<<10+i*100003)
				outPath := filepath.Join(dir, fmt.Sprintf("out%d", i))
				out, err := os.Create(outPath)
				if err != nil {
					t.Fatal(err)
				}
				cl := m.cmd(t, nil, socat, "-t", "10", "-", fmt.Sprintf("TCP:127.0.0.1:%d", port))
				cl.Cmd.Stdout = out
				stdin, err := cl.Cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				p := cl.Start()
				out.Close()
				if _, err := stdin.Write(in[:len(in)/2]); err != nil {
					t.Fatal(err)
				}
				if i == 0 && m.osf {
					// Mid-transfer: the server's fork child and the
					// client both carry the connection offloaded.
					var child int
					testutil.WaitFor(t, shortRun, "socat's fork child", func() bool {
						for _, c := range testutil.Children(srv.Pid) {
							if testutil.ExeBase(c) == "socat" {
								child = c
								return true
							}
						}
						return false
					})
					testutil.WaitOsfStat(t, child, shortRun, "an offloaded server connection", func(p testutil.StatProc) bool {
						s := p.Select(testutil.ByRole("server"))
						return len(s) == 1 && s[0].Transport == testutil.TransportShm
					})
					testutil.AssertTransport(t, p.Pid, testutil.ByRole("client"), testutil.TransportShm)
				}
				if _, err := stdin.Write(in[len(in)/2:]); err != nil {
					t.Fatal(err)
				}
				stdin.Close()
				if r := p.Wait(longRun); !r.OK() {
					t.Fatalf("socat client %d: %s", i, r)
				}
				got, err := os.ReadFile(outPath)
				if err != nil {
					t.Fatal(err)
				}
				if testutil.SHA256(got) != testutil.SHA256(in) {
					t.Fatalf("client %d: %d bytes came back for %d sent, sha256 differs", i, len(got), len(in))
				}
			}
			if srv.Exited() {
				t.Errorf("socat server died: %s", srv.Wait(time.Second))
			}
		})
	}
}

// forkReadServer accepts the client's connection, reads "hello", then the
// payload the client's fork child writes on that same connection
// ("child N SHA" and N bytes; prints "child-payload ok|BAD"), accepts the
// child's own new connection and echoes it ("new-conn echoed N"), waits
// for a line on its standard input, and sends 1 MiB of random bytes (from
// SEED) on the first connection and closes it ("sent N SHA").
const forkReadServer = `
import hashlib, random, socket, sys
port, seed = int(sys.argv[1]), int(sys.argv[2])

def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            raise EOFError("end of file after %d of %d bytes" % (len(buf), n))
        buf += d
    return bytes(buf)

def recv_line(s):
    buf = bytearray()
    while not buf.endswith(b"\n"):
        buf += recv_exact(s, 1)
    return bytes(buf[:-1])

l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(8)
print("listening", flush=True)
s1, _ = l.accept()
assert recv_line(s1) == b"hello"
_, n, sha = recv_line(s1).split()
payload = recv_exact(s1, int(n))
print("child-payload", "ok" if hashlib.sha256(payload).hexdigest().encode() == sha else "BAD", flush=True)
s2, _ = l.accept()
data = bytearray()
while True:
    d = s2.recv(65536)
    if not d:
        break
    data += d
s2.sendall(data)
s2.close()
print("new-conn echoed", len(data), flush=True)
sys.stdin.readline()
wake = random.Random(seed).randbytes(1 << 20)
s1.sendall(wake)
s1.close()
print("sent", len(wake), hashlib.sha256(wake).hexdigest(), flush=True)
`

// forkReadClient connects, sends "hello", starts a thread that reads the
// connection to its end, and waits until that thread sleeps in recv
// ("reader blocked TID"). Then it forks: the child writes 256 KiB on the
// same connection, opens a connection of its own and checks its echo
// ("child echo ok|BAD family osf|tcp fresh_core 0|1"). The parent prints
// "child status S" and, once the reader has its data, "reader got N SHA".
const forkReadClient = pyFamily + `
import hashlib, os, random, socket, sys, threading, time
port, seed = int(sys.argv[1]), int(sys.argv[2])


c = socket.create_connection(("127.0.0.1", port))
c.sendall(b"hello\n")
got = {}
def reader():
    got["tid"] = threading.get_native_id()
    buf = bytearray()
    while True:
        d = c.recv(65536)
        if not d:
            break
        buf += d
    got["data"] = bytes(buf)
t = threading.Thread(target=reader, daemon=True)
t.start()
deadline = time.time() + 10
while "tid" not in got and time.time() < deadline:
    time.sleep(0.001)
def state():
    return open("/proc/self/task/%d/stat" % got["tid"]).read().rsplit(")", 1)[1].split()[0]
n = 0
while n < 5 and time.time() < deadline:
    n = n + 1 if state() == "S" else 0
    time.sleep(0.01)
print("reader blocked", got["tid"], flush=True)

pid = os.fork()
if pid == 0:
    code = 1
    try:
        p = random.Random(seed + 1).randbytes(256 * 1024)
        c.sendall(b"child %d %s\n" % (len(p), hashlib.sha256(p).hexdigest().encode()) + p)
        c2 = socket.create_connection(("127.0.0.1", port))
        fam = family(c2.fileno())
        q = random.Random(seed + 2).randbytes(128 * 1024)
        c2.sendall(q)
        c2.shutdown(socket.SHUT_WR)
        back = bytearray()
        while True:
            d = c2.recv(65536)
            if not d:
                break
            back += d
        fresh = int("/memfd:osfcore" in open("/proc/self/maps").read())
        os.write(1, b"child echo %s family %s fresh_core %d\n" % (
            b"ok" if bytes(back) == q else b"BAD", fam.encode(), fresh))
        code = 0
    except BaseException as e:
        os.write(2, repr(e).encode() + b"\n")
    os._exit(code)
_, st = os.waitpid(pid, 0)
print("child status", st, flush=True)
t.join(30)
if t.is_alive():
    print("reader still blocked", flush=True)
    sys.exit(1)
d = got["data"]
print("reader got", len(d), hashlib.sha256(d).hexdigest(), flush=True)
`

// TestForkExecBlockedReader forks while another thread of the parent is
// blocked in a read of the offloaded connection: the child writes on the
// same connection and opens a new one of its own (under osf, with a fresh
// core), and the blocked reader, still asleep through all that, gets the
// data the server sends afterwards.
func TestForkExecBlockedReader(t *testing.T) {
	t.Parallel()
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := testutil.FreePort(t)
			seed := strconv.FormatUint(testutil.Seed(t)%1000003, 10)
			sc := m.cmd(t, nil, python(t), "-c", forkReadServer, strconv.Itoa(port), seed)
			sin, err := sc.Cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			srv := sc.Start()
			srv.WaitOutput("listening\n", shortRun)
			cl := m.cmd(t, nil, python(t), "-c", forkReadClient, strconv.Itoa(port), seed).Start()
			var tid int
			if _, err := fmt.Sscanf(waitLine(t, cl, "reader blocked "), "reader blocked %d", &tid); err != nil {
				t.Fatal(err)
			}
			if line := waitLine(t, cl, "child status "); line != "child status 0" {
				t.Fatalf("fork child failed: %q; stderr %q", line, cl.Stderr())
			}
			fam, fresh := "tcp", 0
			if m.osf {
				fam = "osf"
			}
			if m.log {
				fresh = 1
			}
			if want := fmt.Sprintf("child echo ok family %s fresh_core %d\n", fam, fresh); !strings.Contains(cl.Stdout(), want) {
				t.Errorf("client output %q lacks %q", cl.Stdout(), want)
			}
			if line := waitLine(t, srv, "child-payload "); line != "child-payload ok" {
				t.Errorf("server: %q", line)
			}
			waitLine(t, srv, "new-conn echoed 131072")
			// The reader slept through the fork and the child's traffic:
			// asleep at five samples in a row (a loaded machine may show
			// a sleeper running for a moment, a busy loop never sleeps).
			asleep, last := 0, byte('?')
			for end := time.Now().Add(shortRun); asleep < 5 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				st, err := testutil.ThreadState(cl.Pid, tid)
				if err != nil {
					t.Fatalf("reader thread %d: %v", tid, err)
				}
				if last = st; st == 'S' {
					asleep++
				} else {
					asleep = 0
				}
			}
			if asleep < 5 {
				t.Errorf("reader thread %d: state %c, want S (asleep in recv)", tid, last)
			}
			if m.osf {
				testutil.AssertTransport(t, cl.Pid, testutil.ByRole("client"), testutil.TransportShm)
				testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
			}
			if _, err := io.WriteString(sin, "go\n"); err != nil {
				t.Fatal(err)
			}
			sent := waitLine(t, srv, "sent ")
			r := cl.Wait(longRun)
			if !r.OK() {
				t.Fatalf("client: %s", r)
			}
			if want := "reader got " + strings.TrimPrefix(sent, "sent "); !strings.Contains(r.Stdout, want+"\n") {
				t.Errorf("the blocked reader did not get what the server sent: %q, want %q", r.Stdout, want)
			}
		})
	}
}

// TestForkExecSharedWriters has a parent and its fork child write 10,000
// records each to one connection at once, one write() per record, as a
// parent and child share a stdout. The reader tells every byte's writer
// apart and requires each writer's records complete, uncorrupted and in
// order. Writes that did not land whole (another writer's bytes in the
// middle) are counted and logged: kernel TCP does not promise that a write
// lands whole either (a writer that waits for send-buffer room mid-write
// lets the other in), so the count is compared, not required to be 0.
//
// In the killed variant the child is SIGKILLed while both write 40,000
// records (under osf most likely while it holds its side's ring lock): the
// parent must go on and finish unhindered, and the reader gets all of the
// parent's records and an intact prefix of the child's.
func TestForkExecSharedWriters(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			const records = 10000
			r, _ := sharedWriters(t, m, records, false)
			for _, w := range []string{"P", "C"} {
				if want := fmt.Sprintf("writer %s records %d\n", w, records); !strings.Contains(r.Stdout, want) {
					t.Errorf("reader: %q lacks %q", r.Stdout, want)
				}
			}
		})
		t.Run(m.name+"/child-killed", func(t *testing.T) {
			t.Parallel()
			const records = 40000
			r, wr := sharedWriters(t, m, records, true)
			if want := fmt.Sprintf("writer P records %d\n", records); !strings.Contains(r.Stdout, want) {
				t.Errorf("reader: %q lacks %q", r.Stdout, want)
			}
			var c int
			if i := strings.Index(r.Stdout, "writer C records "); i < 0 {
				t.Errorf("reader: no count for the child: %q", r.Stdout)
			} else if fmt.Sscanf(r.Stdout[i:], "writer C records %d", &c); c >= records {
				t.Errorf("the killed child wrote all its %d records", c)
			}
			if !strings.Contains(wr.Stdout, "child failed: status 0x9\n") {
				t.Errorf("parent writer: %q, want the child killed by SIGKILL", wr.Stdout)
			}
			t.Logf("%s: child killed after %d records; %s", m.name, c, strings.ReplaceAll(strings.TrimSpace(r.Stdout), "\n", "; "))
		})
	}
}

// sharedWriters runs progs/fxwriters.c's reader and writers in mode m; with
// kill set it SIGKILLs the writing child once the reader got 64 MiB. It
// returns the reader's and the writers' results.
func sharedWriters(t *testing.T, m mode, records int, kill bool) (reader, writers testutil.Result) {
	t.Helper()
	port := testutil.FreePort(t)
	args := []string{"read", strconv.Itoa(port)}
	if kill {
		args = append(args, "allow-cut")
	}
	rd := m.cmd(t, nil, testutil.Prog(t, "fxwriters"), args...).Start()
	rd.WaitOutput("listening\n", shortRun)
	wc := m.cmd(t, nil, testutil.Prog(t, "fxwriters"), "write", strconv.Itoa(port), strconv.Itoa(records), "pause")
	stdin, err := wc.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	wr := wc.Start()
	var wpid, wfd int
	if _, err := fmt.Sscanf(waitLine(t, wr, "connected "), "connected %d %d", &wpid, &wfd); err != nil {
		t.Fatal(err)
	}
	checkConn(t, m, "writer", wpid, wfd)
	if m.osf {
		testutil.WaitOsfStat(t, rd.Pid, shortRun, "the reader's offloaded connection", func(p testutil.StatProc) bool {
			s := p.Select(testutil.ByRole("server"))
			return len(s) == 1 && s[0].Transport == testutil.TransportShm
		})
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if kill {
		var child int
		testutil.WaitFor(t, shortRun, "the writer's fork child", func() bool {
			kids := testutil.Children(wpid)
			if len(kids) == 1 {
				child = kids[0]
			}
			return child != 0
		})
		rd.WaitOutput("64 MiB read\n", shortRun)
		if err := unix.Kill(child, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	writers = wr.Wait(longRun)
	if !kill && !writers.OK() {
		t.Fatalf("writers: %s", writers)
	}
	if kill && (writers.TimedOut || writers.ExitCode != 1) {
		t.Fatalf("writers: %s", writers)
	}
	reader = rd.Wait(longRun)
	if !reader.OK() {
		t.Fatalf("reader: %s", reader)
	}
	var bytes, split int
	if _, err := fmt.Sscanf(waitLine(t, rd, "bytes "), "bytes %d split %d", &bytes, &split); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes; %d writes did not land whole; the writers ended %v after the go-ahead or the kill",
		m.name, bytes, split, time.Since(start).Round(time.Millisecond))
	return reader, writers
}

// TestForkExecDuplex has two waiters on one connection wait for different
// things, as every full-duplex program with a reader thread and a writer
// thread does, and as a parent and its fork child sharing a connection do:
// one waits for data that does not come (in a blocking read, in
// poll(POLLIN), or in a blocking read in a fork child), the other writes
// 64 MiB (blocking writes, or nonblocking writes and poll(POLLOUT)) to a
// peer that drains everything. The writer must never stall (progs/
// duplex.c gives up after 2 s without progress). Under osf the wake-up
// meant for the writer could be taken by the other waiter, so each case
// runs three times to catch it; with the RDMA engine as the peer too,
// which must wake readers and writers on their own sockets as well (and
// with the connection a stream on a link: docs/RDMA.md, "Links").
func TestForkExecDuplex(t *testing.T) {
	t.Parallel()
	for _, m := range []mode{bare, underOsf, osfRDMASim, osfLinks} {
		for _, how := range []string{"block", "poll", "fork"} {
			t.Run(m.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				for round := range 3 {
					r := m.cmd(t, nil, testutil.Prog(t, "duplex"), how).Run(longRun)
					if !r.OK() || r.Stdout != "result ok\n" {
						t.Fatalf("round %d: %s", round, r)
					}
				}
			})
		}
	}
}

// TestForkExecLingerZero sets SO_LINGER {1, 0} on an accepted connection,
// forks a worker to serve it and closes the parent's copy, as a
// fork-per-connection server with abortive close does (progs/
// lingerfork.c). As with kernel TCP, the parent's close must change
// nothing (the worker still holds the socket); the client, blocked in
// read, gets the worker's data and then, when the worker closes as the
// last holder, ECONNRESET, without burning CPU while it waits.
func TestForkExecLingerZero(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := m.cmd(t, nil, testutil.Prog(t, "lingerfork")).Run(shortRun)
			var cpu int
			i := strings.Index(r.Stdout, "client end ECONNRESET cpu_ms ")
			if !r.OK() || !strings.HasPrefix(r.Stdout, "client got 2 bytes\n") || i < 0 {
				t.Fatalf("want the 2 bytes, then ECONNRESET: %s", r)
			}
			fmt.Sscanf(r.Stdout[i:], "client end ECONNRESET cpu_ms %d", &cpu)
			if cpu > 200 {
				t.Errorf("the client used %d ms of CPU waiting about 0.6 s", cpu)
			}
		})
	}
}
