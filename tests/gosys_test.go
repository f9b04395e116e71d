package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// Go programs under osf (preload/gosys.c): their system calls reach the
// hooks only with OSF_GO=1. Each test runs the Go program of
// tests/goprogs/gonet (built here with `go build`: a dynamically linked
// binary) under osf with OSF_GO=1, where every connection must be shm,
// and under osf without it, where every connection stays on kernel TCP.

var (
	goOn  = goMode{"OSF_GO=1", true}
	goOff = goMode{"OSF_GO-unset", false}
)

// goMode is osf with (on) or without OSF_GO=1.
type goMode struct {
	name string
	on   bool
}

func (g goMode) extra() []string {
	if g.on {
		return []string{"OSF_GO=1"}
	}
	return nil
}

type goBuild struct {
	once sync.Once
	path string
	err  error
}

var gonetBuilds = map[string]*goBuild{"gonet": {}, "gonet-stripped": {}, "gonet-pie": {}}

// gonet returns the gonet program, built once per test run into the build
// directory (build/tests/gonet); it fails the test unless the binary is
// dynamically linked, as LD_PRELOAD needs.
func gonet(t *testing.T) string { return buildGonet(t, "gonet") }

// buildGonet builds gonet as name: "gonet", "gonet-stripped" (linked
// with -s: no symbol table) or "gonet-pie" (position-independent: osf
// finds Go's functions at the load bias).
func buildGonet(t *testing.T, name string) string {
	t.Helper()
	b := gonetBuilds[name]
	out := filepath.Join(testutil.BuildDir(t), "tests", name)
	args := []string{"build", "-o", out + ".tmp"}
	switch name {
	case "gonet-stripped":
		args = append(args, "-ldflags=-s")
	case "gonet-pie":
		args = append(args, "-buildmode=pie")
	}
	cmd := exec.Command("go", append(args, "./goprogs/gonet")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b.build(cmd, out); b.err != nil {
		t.Fatalf("go build ./goprogs/gonet (%s): %v", name, b.err)
	}
	if !dynamicallyLinked(t, b.path) {
		t.Fatalf("%s is statically linked (no cgo?): LD_PRELOAD cannot reach it", b.path)
	}
	return b.path
}

// build runs cmd, which writes out+".tmp", once, and renames its output
// to out.
func (b *goBuild) build(cmd *exec.Cmd, out string) {
	b.once.Do(func() {
		if o, err := cmd.CombinedOutput(); err != nil {
			b.err = &buildError{string(o), err}
			return
		}
		if b.err = os.Rename(out+".tmp", out); b.err == nil {
			b.path = out
		}
	})
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// gonetCmd prepares `gonet ARGS` under osf in g.
func gonetCmd(t *testing.T, g goMode, args ...string) *testutil.Command {
	t.Helper()
	return underOsf.cmd(t, g.extra(), gonet(t), args...)
}

// assertGoState checks what osfstat says of Go process pid: offloaded,
// with its Go version, or on the kernel for reason (policy.Reason).
func assertGoState(t *testing.T, pid int, reason policy.Reason) {
	t.Helper()
	g := testutil.OsfStat(t, pid).Go
	switch {
	case g == nil:
		t.Errorf("osfstat: process %d: no Go state", pid)
	case reason == policy.ReasonNone && (!g.Offloaded || !strings.HasPrefix(g.Detail, "go1.26")):
		t.Errorf("osfstat: Go process %d: %+v, want offloaded, go1.26", pid, *g)
	case reason != policy.ReasonNone && (g.Offloaded || g.ReasonID != int(reason)):
		t.Errorf("osfstat: Go process %d: %+v, want reason %d (%s)", pid, *g, reason, reason)
	}
}

// assertGoSockets checks a Go process's connections: under OSF_GO=1 osfstat
// shows every one with role (client or server) on shm; without it osf
// tracks none of its sockets and the kernel lists its sockets as TCP.
func assertGoSockets(t *testing.T, g goMode, pid int, role string) {
	t.Helper()
	if g.on {
		testutil.AssertTransport(t, pid, testutil.ByRole(role), testutil.TransportShm)
		assertGoState(t, pid, policy.ReasonNone)
		return
	}
	assertGoState(t, pid, policy.ReasonGoOff)
	if p := testutil.OsfStat(t, pid); len(p.Sockets) != 0 {
		t.Errorf("OSF_GO unset: osf tracks sockets of Go process %d: %v", pid, p.Sockets)
	}
	tabs, err := testutil.SocketTables(pid)
	if err != nil {
		t.Fatal(err)
	}
	tcp := 0
	for fd, tab := range tabs {
		switch tab {
		case testutil.TableTCP:
			tcp++
		case testutil.TableUnix:
			t.Errorf("OSF_GO unset: fd %d of Go process %d is a unix socket (offloaded?)", fd, pid)
		}
	}
	if tcp == 0 {
		t.Errorf("OSF_GO unset: Go process %d has no kernel TCP socket: %v", pid, tabs)
	}
}

// holdClient starts `gonet hold` against addr and waits until it is
// connected; closing its standard input ends it.
func holdClient(t *testing.T, g goMode, addr string) *tcpxProc {
	t.Helper()
	h := startPiped(t, gonetCmd(t, g, "hold", addr))
	h.WaitOutput("connected", shortRun)
	return h
}

// endHold closes a hold client's standard input and waits for it.
func endHold(t *testing.T, h *tcpxProc) {
	t.Helper()
	h.stdin.Close()
	if r := h.Wait(shortRun); !r.OK() {
		t.Errorf("gonet hold: %s", r)
	}
}

// goEcho runs gonet's echo client: 16 connections of 1 MiB each, every
// byte checked.
func goEcho(t *testing.T, g goMode, addr string) {
	t.Helper()
	goEchoWith(t, g, gonet(t), addr)
}

// goEchoWith is goEcho with the gonet binary bin.
func goEchoWith(t *testing.T, g goMode, bin, addr string) {
	t.Helper()
	r := underOsf.cmd(t, g.extra(), bin, "echo", addr, "16", strconv.Itoa(1<<20)).Run(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "ok") {
		t.Fatalf("gonet echo: %s", r)
	}
	noOsfMessages(t, "gonet echo", r.Stderr)
}

// TestGoEcho: a Go echo server and a Go client, 16 connections at once.
func TestGoEcho(t *testing.T) {
	for _, g := range []goMode{goOn, goOff} {
		t.Run(g.name, func(t *testing.T) {
			srv := startPiped(t, gonetCmd(t, g, "serve", "127.0.0.1:0"))
			addr := "127.0.0.1:" + srv.port(t)
			h := holdClient(t, g, addr)
			assertGoSockets(t, g, h.Pid, "client")
			assertGoSockets(t, g, srv.Pid, "server")
			endHold(t, h)
			goEcho(t, g, addr)
		})
	}
}

// transportsRE reads tcpx's "transports" line: offloaded ("unix", or
// "kfd" once one is a kernel TCP socket osf offloads) and kernel TCP.
var transportsRE = regexp.MustCompile(`(?m)^transports (?:unix|kfd)=(\d+) tcp=(\d+)$`)

// TestGoServerCClient: a Go echo server and tcpx's echo client (C, epoll,
// 8 connections, random message sizes checked), and curl uploading to a Go
// net/http server.
func TestGoServerCClient(t *testing.T) {
	for _, g := range []goMode{goOn, goOff} {
		t.Run(g.name, func(t *testing.T) {
			srv := startPiped(t, gonetCmd(t, g, "serve", "127.0.0.1:0"))
			port := srv.port(t)
			cli := startTcpx(t, underOsf, "client", "-w", "-m", "epoll",
				"-c", "8", "-k", "200", "-M", "70000", "-S", "5", "-t", "50", "echo", "127.0.0.1", port)
			cli.WaitOutput("ready", shortRun)
			m := transportsRE.FindStringSubmatch(cli.Stdout())
			if g.on && (m == nil || m[1] != "8") || !g.on && (m == nil || m[2] != "8") {
				t.Errorf("tcpx client (osf, server OSF_GO=%v): %q", g.on, cli.Stdout())
			}
			assertGoSockets(t, g, srv.Pid, "server")
			if g.on {
				testutil.AssertTransport(t, cli.Pid, testutil.ByRole("client"), testutil.TransportShm)
			}
			cli.proceed(t)
			r := cli.Wait(longRun)
			if !r.OK() || !strings.Contains(r.Stdout, "pattern ok") {
				t.Fatalf("tcpx client: %s", r)
			}

			hs := startPiped(t, gonetCmd(t, g, "http", "127.0.0.1:0"))
			hport := hs.port(t)
			body := testutil.RandomBytes(t, 3<<20)
			file := filepath.Join(t.TempDir(), "body")
			if err := os.WriteFile(file, body, 0o600); err != nil {
				t.Fatal(err)
			}
			r = underOsf.cmd(t, nil, testutil.Tool(t, "curl"), "-sS", "--data-binary", "@"+file,
				"http://127.0.0.1:"+hport+"/hello").Run(longRun)
			if want := "hello " + strconv.Itoa(len(body)) + "\n"; !r.OK() || r.Stdout != want {
				t.Fatalf("curl: %s (want %q)", r, want)
			}
			if g.on {
				testutil.AssertTransport(t, hs.Pid, testutil.ByRole("listener"), testutil.TransportShm)
			}
		})
	}
}

// TestGoClientCServer: tcpx's epoll echo server (C) and Go clients.
func TestGoClientCServer(t *testing.T) {
	for _, g := range []goMode{goOn, goOff} {
		t.Run(g.name, func(t *testing.T) {
			srv := startTcpx(t, underOsf, "server", "-n", "17", "echo", "127.0.0.1", "0")
			addr := "127.0.0.1:" + srv.port(t)
			h := holdClient(t, g, addr)
			assertGoSockets(t, g, h.Pid, "client")
			want := testutil.TransportKernel
			if g.on {
				want = testutil.TransportShm
			}
			testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), want)
			endHold(t, h)
			goEcho(t, g, addr)
		})
	}
}

// TestGoExec: a Go client runs /bin/true through os/exec (a vfork child
// whose system calls must bypass osf) between blocks of an exchange on an
// offloaded connection, which goes on byte-exact.
func TestGoExec(t *testing.T) {
	srv := startPiped(t, gonetCmd(t, goOn, "serve", "127.0.0.1:0"))
	addr := "127.0.0.1:" + srv.port(t)
	c := startPiped(t, gonetCmd(t, goOn, "exec", addr))
	c.WaitOutput("paused", shortRun)
	assertGoSockets(t, goOn, c.Pid, "client")
	assertGoSockets(t, goOn, srv.Pid, "server")
	c.proceed(t)
	r := c.Wait(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "ok") {
		t.Fatalf("gonet exec: %s", r)
	}
	noOsfMessages(t, "gonet exec", r.Stderr)
}

// TestGoStripped: a Go program without a symbol table stays on kernel TCP
// under OSF_GO=1, says so on stderr, and osfstat gives the reason.
func TestGoStripped(t *testing.T) {
	goRefused(t, buildGonet(t, "gonet-stripped"), policy.ReasonGoStripped, "no symbol table")
}

// TestGoVersionUnknown: a Go program whose runtime says another version
// (gonet with "go1.26" replaced by "go1.99" in its bytes) stays on kernel
// TCP under OSF_GO=1, with reason and detail.
func TestGoVersionUnknown(t *testing.T) {
	b, err := os.ReadFile(gonet(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gonet")
	if err := os.WriteFile(bin, bytes.ReplaceAll(b, []byte("go1.26"), []byte("go1.99")), 0o755); err != nil {
		t.Fatal(err)
	}
	goRefused(t, bin, policy.ReasonGoUnknown, "Go version go1.99")
}

// goRefused runs bin, a gonet that osf must not hook, as a client of a Go
// server under OSF_GO=1: osfstat gives reason and osf tracks none of its
// sockets, the server's connection is kernel TCP, and stderr says why
// (detail).
func goRefused(t *testing.T, bin string, reason policy.Reason, detail string) {
	t.Helper()
	srv := startPiped(t, gonetCmd(t, goOn, "serve", "127.0.0.1:0"))
	addr := "127.0.0.1:" + srv.port(t)
	c := startPiped(t, underOsf.cmd(t, goOn.extra(), bin, "hold", addr))
	c.WaitOutput("connected", shortRun)
	assertGoState(t, c.Pid, reason)
	p := testutil.OsfStat(t, c.Pid)
	if len(p.Sockets) != 0 {
		t.Errorf("osf tracks the sockets of a Go program it did not hook: %v", p.Sockets)
	}
	if p.Go != nil && !strings.Contains(p.Go.Reason, detail) {
		t.Errorf("osfstat: reason %q does not name %q", p.Go.Reason, detail)
	}
	testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportKernel)
	c.stdin.Close()
	r := c.Wait(shortRun)
	if !r.OK() || !strings.Contains(r.Stderr, "osf: OSF_GO=1, but this Go program's sockets stay on kernel TCP: "+detail) {
		t.Errorf("gonet hold: %s", r)
	}
}

// TestGoPIE: a position-independent Go client (osf finds Go's functions at
// its load bias) against tcpx's echo server, over shm.
func TestGoPIE(t *testing.T) {
	pie := buildGonet(t, "gonet-pie")
	srv := startTcpx(t, underOsf, "server", "-n", "17", "echo", "127.0.0.1", "0")
	addr := "127.0.0.1:" + srv.port(t)
	h := startPiped(t, underOsf.cmd(t, goOn.extra(), pie, "hold", addr))
	h.WaitOutput("connected", shortRun)
	assertGoSockets(t, goOn, h.Pid, "client")
	testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
	endHold(t, h)
	goEchoWith(t, goOn, pie, addr)
}

// TestGoStackUse: the trampoline writes no more of the goroutine's stack
// than Syscall6 itself (NOSPLIT, no frame): a hooked system call
// (getsockname) and a passed one (getpid), made through the same nosplit
// chain from gonet's stackuse_amd64.s, write the same number of bytes
// below the caller's stack pointer, in a plain and a position-independent
// executable (the thread's g found another way).
func TestGoStackUse(t *testing.T) {
	for _, name := range []string{"gonet", "gonet-pie"} {
		r := underOsf.cmd(t, goOn.extra(), buildGonet(t, name), "stackuse", "-").Run(shortRun)
		var pass, hooked int
		if !r.OK() {
			t.Fatalf("%s stackuse: %s", name, r)
		}
		if _, err := fmt.Sscanf(r.Stdout, "stackuse passthrough=%d hooked=%d", &pass, &hooked); err != nil {
			t.Fatalf("%s stackuse: %v: %q", name, err, r.Stdout)
		}
		noOsfMessages(t, name+" stackuse", r.Stderr)
		if pass <= 0 || hooked != pass {
			t.Errorf("%s: a hooked system call writes %d bytes below the caller's SP, a passed one %d", name, hooked, pass)
		}
	}
}

var childRE = regexp.MustCompile(`child (\d+)`)

// goChild waits for p's "child PID" line (gonet passconn, passlisten).
func goChild(t *testing.T, p *tcpxProc) int {
	t.Helper()
	var pid int
	testutil.WaitFor(t, shortRun, "the child's pid", func() bool {
		if m := childRE.FindStringSubmatch(p.Stdout()); m != nil {
			pid, _ = strconv.Atoi(m[1])
			return true
		}
		if p.Exited() {
			t.Fatalf("parent exited: %s", p.Wait(0))
		}
		return false
	})
	return pid
}

// TestGoExecPassConn: a Go server hands an accepted connection to cat
// through os/exec (Stdin and Stdout: the vfork child's dup3s onto 0 and 1,
// which no hook sees) and closes its own copies; cat finds the connection
// at fds 0 and 1 by inode, over shm, and echoes tcpx's messages, every
// byte checked. Also with cat's environment reduced to PATH (osf adds
// LD_PRELOAD, as its exec hooks do).
func TestGoExecPassConn(t *testing.T) {
	for _, env := range []string{"inherit", "clearenv"} {
		t.Run(env, func(t *testing.T) {
			srv := startPiped(t, gonetCmd(t, goOn, "passconn", "127.0.0.1:0", env))
			port := srv.port(t)
			c := startTcpx(t, underOsf, "client", "-w", "-c", "1", "-k", "50", "-M", "65536", "echo", "127.0.0.1", port)
			c.WaitOutput("ready", shortRun)
			child := goChild(t, srv)
			// cat exists before it has loaded osf and adopted the table
			checkHolders(t, underOsf, child, []holder{{"cat", []int{0, 1}}})
			testutil.AssertTransport(t, child, testutil.ByFD(0), testutil.TransportShm)
			testutil.AssertTransport(t, child, testutil.ByFD(1), testutil.TransportShm)
			c.proceed(t)
			r := c.Wait(longRun)
			if !r.OK() || !strings.Contains(r.Stdout, "transports "+testutil.ShmTransport()+"=1 tcp=0") || !strings.Contains(r.Stdout, "pattern ok") {
				t.Fatalf("tcpx client: %s", r)
			}
			if r := srv.Wait(shortRun); !r.OK() || !strings.Contains(r.Stdout, "ok") {
				t.Fatalf("gonet passconn: %s", r)
			}
		})
	}
}

// TestGoExecPassListener: a graceful restart. A Go server hands its
// listener to a new gonet (os/exec ExtraFiles: fd 3) and closes its own;
// the child accepts tcpx's connections over shm. Also with the child's
// environment reduced to PATH (osf adds LD_PRELOAD and its parent's OSF_*
// variables, OSF_GO=1, as its exec hooks do for C programs), and through
// /bin/sh, which execs gonet (the listener arrives at fd 3 by a dup3
// without close-on-exec, from a File Go made close-on-exec: sh must hand
// it on; Go's net/http TestLinuxSendfile runs its server through strace).
func TestGoExecPassListener(t *testing.T) {
	for _, env := range []string{"inherit", "clearenv", "sh"} {
		t.Run(env, func(t *testing.T) {
			srv := startPiped(t, gonetCmd(t, goOn, "passlisten", "127.0.0.1:0", env))
			port := srv.port(t)
			child := goChild(t, srv)
			srv.WaitOutput("serving", shortRun)
			c := startTcpx(t, underOsf, "client", "-w", "-c", "3", "-k", "50", "-M", "65536", "echo", "127.0.0.1", port)
			c.WaitOutput("ready", shortRun)
			testutil.AssertTransport(t, child, testutil.ByFD(3), testutil.TransportShm)
			testutil.AssertTransport(t, child, testutil.ByRole("server"), testutil.TransportShm)
			c.proceed(t)
			r := c.Wait(longRun)
			if !r.OK() || !strings.Contains(r.Stdout, "transports "+testutil.ShmTransport()+"=3 tcp=0") || !strings.Contains(r.Stdout, "pattern ok") {
				t.Fatalf("tcpx client: %s", r)
			}
			assertGoState(t, child, policy.ReasonNone)
			if err := unix.Kill(child, unix.SIGTERM); err != nil {
				t.Fatal(err)
			}
			srv.Wait(shortRun)
		})
	}
}
