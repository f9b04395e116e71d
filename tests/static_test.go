package tests

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// Statically linked programs under osf (osfrun --static, preload/static.c):
// tests/progs/static/echo.c built with gcc -static, run through osfload,
// must reach osf's hooks (shm, bytes checked); where that is impossible it
// runs on kernel TCP with the reason on stderr.

var echoBuilds = map[string]*goBuild{"staticecho": {}, "dynecho": {}}

// staticecho returns tests/progs/static/echo.c built statically linked
// (build/tests/staticecho); it skips the test where the C library has no
// static archive.
func staticecho(t *testing.T) string { return buildEcho(t, "staticecho") }

// buildEcho builds tests/progs/static/echo.c as name: "staticecho" (gcc
// -static) or "dynecho" (dynamically linked).
func buildEcho(t *testing.T, name string) string {
	t.Helper()
	b := echoBuilds[name]
	out := filepath.Join(testutil.BuildDir(t), "tests", name)
	args := []string{"-O2", "-o", out + ".tmp", filepath.Join(testutil.Root(t), "tests", "progs", "static", "echo.c")}
	if name == "staticecho" {
		args = append(args, "-static")
	}
	if b.build(exec.Command("gcc", args...), out); b.err != nil {
		t.Skipf("gcc %s (no libc.a?): %v", name, b.err)
	}
	if dynamic := dynamicallyLinked(t, b.path); dynamic != (name == "dynecho") {
		t.Fatalf("%s: dynamically linked %v", b.path, dynamic)
	}
	return b.path
}

// osfload is the loader osfrun --static runs a program through.
func osfload(t *testing.T) string {
	return filepath.Join(testutil.BuildDir(t), "osfload")
}

// skipIfNoDispatch skips the test when osfload could not run the program
// on this kernel (no Syscall User Dispatch); stderr is the program's.
func skipIfNoDispatch(t *testing.T, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "no Syscall User Dispatch") {
		t.Skipf("osfload: %s", strings.TrimSpace(stderr))
	}
}

// staticServer starts staticecho's server in m through cmd (osfload or
// osfrun --static) and returns it with its port.
func staticServer(t *testing.T, c *testutil.Command) (*tcpxProc, string) {
	t.Helper()
	srv := startPiped(t, c)
	testutil.WaitFor(t, shortRun, "server listening or refused", func() bool {
		return listeningRE.MatchString(srv.Stdout()) || srv.Exited() ||
			strings.Contains(srv.Stderr(), "osf: static:")
	})
	skipIfNoDispatch(t, srv.Stderr())
	return srv, srv.port(t)
}

// TestStaticEcho: a statically linked echo server (osfrun --static) and
// client (osfload under LD_PRELOAD), 4 MB in chunks of 1 byte to 64 KiB
// each read back and checked, both ends shm in osfstat; the same with the
// program dynamically linked, which osfload execs as it is (libosf.so
// preloaded as usual).
func TestStaticEcho(t *testing.T) {
	for _, name := range []string{"staticecho", "dynecho"} {
		t.Run(name, func(t *testing.T) {
			prog := buildEcho(t, name)
			srv, port := staticServer(t, underOsf.cmd(t, nil, testutil.Bin(t, "osfrun"), "--static", prog,
				"serve", "127.0.0.1"))
			cli := startPiped(t, underOsf.cmd(t, nil, osfload(t), prog, "client", "127.0.0.1", port, "4000000"))
			cli.WaitOutput("connected", shortRun)
			if name == "staticecho" {
				// "connected" went through write: its site now
				// jumps to a stub (no trap per call).
				assertRewritten(t, cli.Pid, prog, "__libc_write")
			}
			testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
			testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportShm)
			testutil.AssertTransport(t, cli.Pid, testutil.ByRole("client"), testutil.TransportShm)
			cli.proceed(t)
			if r := cli.Wait(longRun); !r.OK() || !strings.Contains(r.Stdout, "ok 4000000") {
				t.Fatalf("%s client: %s", name, r)
			}
			if r := srv.Wait(shortRun); !r.OK() {
				t.Fatalf("%s server: %s", name, r)
			}
			noOsfMessages(t, name+" server", srv.Stderr())
			noOsfMessages(t, name+" client", cli.Stderr())
		})
	}
}

// TestStaticFork: a static program's fork runs (the child is under
// dispatch again) and is waited for.
func TestStaticFork(t *testing.T) {
	prog := staticecho(t)
	r := underOsf.cmd(t, nil, osfload(t), prog, "fork").Run(shortRun)
	skipIfNoDispatch(t, r.Stderr)
	if !r.OK() || r.Stdout != "child 7\n" {
		t.Fatalf("staticecho fork: %s", r)
	}
	noOsfMessages(t, "staticecho fork", r.Stderr)
}

// TestStaticExecMask: an image a static program execs starts with the
// program's signal mask (nothing blocked), as on the kernel; an execve
// served inside the SIGSYS handler left it every signal blocked.
func TestStaticExecMask(t *testing.T) {
	prog := staticecho(t)
	args := []string{"exec", "/bin/grep", "SigBlk", "/proc/self/status"}
	for _, c := range []*testutil.Command{bare.cmd(t, nil, prog, args...),
		underOsf.cmd(t, nil, osfload(t), append([]string{prog}, args...)...)} {
		r := c.Run(shortRun)
		skipIfNoDispatch(t, r.Stderr)
		if !r.OK() || !strings.Contains(r.Stdout, "SigBlk:\t0000000000000000") {
			t.Fatalf("staticecho exec grep SigBlk: %s", r)
		}
		noOsfMessages(t, "staticecho exec", r.Stderr)
	}
}

// TestStaticAltStack: sigaltstack under dispatch (osf emulates it in the
// SIGSYS handler) takes and refuses the sizes the kernel does. It once
// applied glibc's MINSIGSTKSZ, sysconf(_SC_SIGSTKSZ), 47,808 bytes on a
// CPU with AMX: every static Go program died at start (its 32 KiB signal
// stacks refused, the runtime's deliberate fault).
func TestStaticAltStack(t *testing.T) {
	prog := staticecho(t)
	var want string
	for i, c := range []*testutil.Command{bare.cmd(t, nil, prog, "altstack"),
		underOsf.cmd(t, nil, osfload(t), prog, "altstack")} {
		r := c.Run(shortRun)
		skipIfNoDispatch(t, r.Stderr)
		if !r.OK() || !strings.Contains(r.Stdout, "32768 0 0 32768\n") {
			t.Fatalf("staticecho altstack: %s", r)
		}
		if i == 0 {
			want = r.Stdout
		} else if r.Stdout != want {
			t.Fatalf("staticecho altstack under osfload:\n%s\nbare:\n%s", r.Stdout, want)
		}
		noOsfMessages(t, "staticecho altstack", r.Stderr)
	}
}

// TestStaticThreads: a static server echoing 4 connections, a thread
// each, and a static client with 4 threads (each thread's system calls
// reach osf on a carrier thread of its own, preload/static.c sys_thread):
// 8 shm ends in osfstat, 2 MB per connection checked.
func TestStaticThreads(t *testing.T) {
	prog := staticecho(t)
	srv, port := staticServer(t, underOsf.cmd(t, nil, osfload(t), prog, "tserve", "127.0.0.1", "4"))
	cli := startPiped(t, underOsf.cmd(t, nil, osfload(t), prog, "tclient", "127.0.0.1", port, "4", "2000000"))
	cli.WaitOutput("connected", shortRun)
	// the client's connects return before the server's thread has
	// accepted the last one
	testutil.WaitFor(t, shortRun, "4 server connections", func() bool {
		return len(testutil.OsfStat(t, srv.Pid).Select(testutil.ByRole("server"))) == 4
	})
	for _, c := range []struct {
		pid  int
		role string
	}{{srv.Pid, "server"}, {cli.Pid, "client"}} {
		if got := testutil.AssertTransport(t, c.pid, testutil.ByRole(c.role), testutil.TransportShm); len(got) != 4 {
			t.Errorf("%s: %d connections, want 4", c.role, len(got))
		}
	}
	cli.proceed(t)
	if r := cli.Wait(longRun); !r.OK() || !strings.Contains(r.Stdout, "ok 8000000") {
		t.Fatalf("staticecho tclient: %s", r)
	}
	if r := srv.Wait(shortRun); !r.OK() {
		t.Fatalf("staticecho tserve: %s", r)
	}
	noOsfMessages(t, "staticecho tserve", srv.Stderr())
	noOsfMessages(t, "staticecho tclient", cli.Stderr())
}

// TestStaticFallback: without libosf.so preloaded osfload says why and
// execs the program, which runs on kernel TCP (TCP sockets in the
// kernel's table, bytes checked); a dynamically linked program under
// osfrun --static is offloaded as without it.
func TestStaticFallback(t *testing.T) {
	prog := staticecho(t)
	srv, port := staticServer(t, bare.cmd(t, nil, osfload(t), prog, "serve", "127.0.0.1"))
	if want := "osf: static: " + prog + ": libosf.so is not preloaded; it runs on kernel TCP"; !strings.Contains(srv.Stderr(), want) {
		t.Errorf("osfload without libosf.so: stderr %q, want %q", srv.Stderr(), want)
	}
	cli := startPiped(t, bare.cmd(t, nil, osfload(t), prog, "client", "127.0.0.1", port, "100000"))
	cli.WaitOutput("connected", shortRun)
	for _, pid := range []int{srv.Pid, cli.Pid} {
		tabs, err := testutil.SocketTables(pid)
		if err != nil {
			t.Fatal(err)
		}
		tcp := 0
		for fd, tab := range tabs {
			if tab != testutil.TableTCP {
				t.Errorf("fallback: fd %d of %d is %s, want TCP", fd, pid, tab)
			}
			tcp++
		}
		if tcp == 0 {
			t.Errorf("fallback: process %d has no kernel TCP socket", pid)
		}
	}
	cli.proceed(t)
	if r := cli.Wait(longRun); !r.OK() || !strings.Contains(r.Stdout, "ok 100000") {
		t.Fatalf("staticecho client: %s", r)
	}
	if r := srv.Wait(shortRun); !r.OK() {
		t.Fatalf("staticecho server: %s", r)
	}

}

// assertRewritten checks, in process pid's memory, that function fn of
// the static program prog (not a PIE: no load bias) has a rewritten system
// call site (`jmp rel32` and three nops, preload/static.c rewrite): its
// calls no longer trap.
func assertRewritten(t *testing.T, pid int, prog, fn string) {
	t.Helper()
	code := symbolCode(t, pid, prog, fn, 0)
	if len(code) < 16 {
		t.Fatalf("%s: symbol %s has %d bytes", prog, fn, len(code))
	}
	rewritten := 0
	for i := 0; i+8 <= len(code); i++ {
		if code[i] == 0xe9 && bytes.Equal(code[i+5:i+8], []byte{0x90, 0x90, 0x90}) {
			rewritten++
		}
	}
	if rewritten == 0 {
		t.Errorf("%s of process %d: no rewritten system call site: % x", fn, pid, code)
	}
}

// symbolCode reads n bytes (0: the symbol's size) at function fn of the
// static program prog (not a PIE) in process pid's memory.
func symbolCode(t *testing.T, pid int, prog, fn string, n int) []byte {
	t.Helper()
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var sym *elf.Symbol
	for i := range syms {
		if syms[i].Name == fn {
			sym = &syms[i]
		}
	}
	if sym == nil {
		t.Fatalf("%s: no symbol %s", prog, fn)
	}
	if n == 0 {
		n = int(sym.Size)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	code := make([]byte, n)
	if _, err := mem.ReadAt(code, int64(sym.Value)); err != nil {
		t.Fatalf("read %s of process %d: %v", fn, pid, err)
	}
	return code
}

// dynamicallyLinked says whether the executable at path has an
// interpreter (PT_INTERP).
func dynamicallyLinked(t *testing.T, path string) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}
