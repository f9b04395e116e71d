package tests

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// Offloaded connections must live and die by the rules of kernel sockets
// across fork and exec: every process model servers use is run here with
// both ends under osf (asserting that the connection really was offloaded
// in every process that holds it) and bare, with the same data
// expectations (SHA-256 of what came back). The crash semantics are in
// forkexec_crash_test.go, the helpers in forkexec_util_test.go.

var bareAndOsf = []mode{bare, underOsf}

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
				check: func(t *testing.T, m mode, child int) {
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
				check: func(t *testing.T, m mode, child int) {
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

// TestForkExecDaemon accepts a connection, calls daemon(1, 1) (which osf
// implements on its own fork) and serves the connection from the daemon,
// which then accepts a second connection itself (under osf, with a fresh
// copy of the core: the one inherited through daemon's fork is stale).
func TestForkExecDaemon(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
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
					if !st.CoreLoaded {
						t.Errorf("daemon accepted an offloaded connection without a core: %+v", st)
					}
					if ok, _ := testutil.MapsContain(daemon, testutil.FreshCoreMapping); !ok {
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
