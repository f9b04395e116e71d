package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// Statically linked Go programs under osf (osfrun --static,
// preload/static.c and preload/static_go.c): tests/goprogs/gonet built
// with CGO_ENABLED=0, its Syscall6 patched to call the hooks, every
// connection shm, bytes checked; against Go and C peers, and with os/exec
// (a vfork child) in the middle of an exchange.

var gonetStaticBuild goBuild

// gonetStatic returns gonet built statically linked (CGO_ENABLED=0:
// build/tests/gonet-static).
func gonetStatic(t *testing.T) string {
	t.Helper()
	out := filepath.Join(testutil.BuildDir(t), "tests", "gonet-static")
	cmd := exec.Command("go", "build", "-o", out+".tmp", "./goprogs/gonet")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if gonetStaticBuild.build(cmd, out); gonetStaticBuild.err != nil {
		t.Fatalf("go build ./goprogs/gonet (CGO_ENABLED=0): %v", gonetStaticBuild.err)
	}
	if dynamicallyLinked(t, gonetStaticBuild.path) {
		t.Fatalf("%s is dynamically linked", gonetStaticBuild.path)
	}
	return gonetStaticBuild.path
}

// staticGo prepares the static gonet with args under osfrun --static.
func staticGo(t *testing.T, args ...string) *testutil.Command {
	t.Helper()
	return underOsf.cmd(t, nil, testutil.Bin(t, "osfrun"), append([]string{"--static", gonetStatic(t)}, args...)...)
}

// staticGoServer starts the static gonet's command (serve, http) and
// returns it with its address; it skips where Syscall User Dispatch is
// missing.
func staticGoServer(t *testing.T, cmd string) (*tcpxProc, string) {
	t.Helper()
	srv, port := staticServer(t, staticGo(t, cmd, "127.0.0.1:0"))
	return srv, "127.0.0.1:" + port
}

// assertGoPatched checks, in process pid's memory, that the static Go
// program's Syscall6 starts with the jump to osf's trampoline (movabs
// $to, %r11: preload/static_go.c), so that its calls do not trap.
func assertGoPatched(t *testing.T, pid int) {
	t.Helper()
	code := symbolCode(t, pid, gonetStatic(t), "internal/runtime/syscall/linux.Syscall6", 13)
	if !bytes.Equal(code[:2], []byte{0x49, 0xbb}) || !bytes.Equal(code[10:], []byte{0x41, 0xff, 0xe3}) {
		t.Errorf("Syscall6 of process %d is not patched: % x", pid, code)
	}
}

// staticGoEcho runs the static gonet's echo client (16 connections of 1
// MiB, every byte checked) against addr.
func staticGoEcho(t *testing.T, addr string) {
	t.Helper()
	r := staticGo(t, "echo", addr, "16", strconv.Itoa(1<<20)).Run(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "ok") {
		t.Fatalf("static gonet echo: %s", r)
	}
	noOsfMessages(t, "static gonet echo", r.Stderr)
}

// staticGoHold starts the static gonet's hold client against addr and
// waits until it is connected.
func staticGoHold(t *testing.T, addr string) *tcpxProc {
	t.Helper()
	h := startPiped(t, staticGo(t, "hold", addr))
	h.WaitOutput("connected", shortRun)
	return h
}

// TestStaticGoEcho: a static Go echo server and static Go clients, both
// under osfrun --static: shm at both ends, Syscall6 patched in both, 16
// connections of 1 MiB checked.
func TestStaticGoEcho(t *testing.T) {
	srv, addr := staticGoServer(t, "serve")
	h := staticGoHold(t, addr)
	testutil.AssertTransport(t, h.Pid, testutil.ByRole("client"), testutil.TransportShm)
	testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
	testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportShm)
	assertGoPatched(t, srv.Pid)
	assertGoPatched(t, h.Pid)
	endHold(t, h)
	staticGoEcho(t, addr)
	noOsfMessages(t, "static gonet serve", srv.Stderr())
}

// TestStaticGoC: a static Go server with tcpx's C client (epoll, 8
// connections, random sizes checked) and curl against its net/http
// server; tcpx's C server with static Go clients.
func TestStaticGoC(t *testing.T) {
	srv, addr := staticGoServer(t, "serve")
	cli := startTcpx(t, underOsf, "client", "-w", "-m", "epoll",
		"-c", "8", "-k", "200", "-M", "70000", "-S", "5", "-t", "50", "echo", "127.0.0.1",
		strings.TrimPrefix(addr, "127.0.0.1:"))
	cli.WaitOutput("ready", shortRun)
	if m := transportsRE.FindStringSubmatch(cli.Stdout()); m == nil || m[1] != "8" {
		t.Errorf("tcpx client against the static Go server: %q, want 8 %s", cli.Stdout(), testutil.ShmTransport())
	}
	testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
	testutil.AssertTransport(t, cli.Pid, testutil.ByRole("client"), testutil.TransportShm)
	cli.proceed(t)
	if r := cli.Wait(longRun); !r.OK() || !strings.Contains(r.Stdout, "pattern ok") {
		t.Fatalf("tcpx client: %s", r)
	}

	hs, haddr := staticGoServer(t, "http")
	body := testutil.RandomBytes(t, 3<<20)
	file := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	r := underOsf.cmd(t, nil, testutil.Tool(t, "curl"), "-sS", "--data-binary", "@"+file,
		"http://"+haddr+"/hello").Run(longRun)
	if want := "hello " + strconv.Itoa(len(body)) + "\n"; !r.OK() || r.Stdout != want {
		t.Fatalf("curl: %s (want %q)", r, want)
	}
	testutil.AssertTransport(t, hs.Pid, testutil.ByRole("listener"), testutil.TransportShm)

	csrv := startTcpx(t, underOsf, "server", "-n", "17", "echo", "127.0.0.1", "0")
	caddr := "127.0.0.1:" + csrv.port(t)
	h := staticGoHold(t, caddr)
	testutil.AssertTransport(t, h.Pid, testutil.ByRole("client"), testutil.TransportShm)
	testutil.AssertTransport(t, csrv.Pid, testutil.ByRole("server"), testutil.TransportShm)
	endHold(t, h)
	staticGoEcho(t, caddr)
}

// TestStaticGoExec: a static Go client runs /bin/true through os/exec (a
// vfork child, run in a copy of the memory, its calls on the kernel)
// between blocks of an exchange on a shm connection, which goes on
// byte-exact.
func TestStaticGoExec(t *testing.T) {
	srv, addr := staticGoServer(t, "serve")
	c := startPiped(t, staticGo(t, "exec", addr))
	c.WaitOutput("paused", shortRun)
	testutil.AssertTransport(t, c.Pid, testutil.ByRole("client"), testutil.TransportShm)
	testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
	c.proceed(t)
	if r := c.Wait(longRun); !r.OK() || !strings.Contains(r.Stdout, "ok") {
		t.Fatalf("static gonet exec: %s", r)
	}
	noOsfMessages(t, "static gonet exec", c.Stderr())
}

// TestStaticGoSigterm: a static Go server, idle with a connection open
// (the runtime's threads asleep in futex, the netpoller in epoll_pwait),
// ends on SIGTERM as on kernel TCP: Go's default, killed by the signal.
// Under osfrun --static every trapped call ran with every signal blocked,
// and the signal waited for ever (killed after 30 s). Bare and under osf
// (shm asserted) alike.
func TestStaticGoSigterm(t *testing.T) {
	for _, osf := range []bool{false, true} {
		name := map[bool]string{false: "bare", true: "osf"}[osf]
		t.Run(name, func(t *testing.T) {
			var srv, h *tcpxProc
			var addr string
			if osf {
				srv, addr = staticGoServer(t, "serve")
				h = staticGoHold(t, addr)
				testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
			} else {
				var port string
				srv, port = staticServer(t, bare.cmd(t, nil, gonetStatic(t), "serve", "127.0.0.1:0"))
				addr = "127.0.0.1:" + port
				h = startPiped(t, bare.cmd(t, nil, gonetStatic(t), "hold", addr))
				h.WaitOutput("connected", shortRun)
			}
			time.Sleep(300 * time.Millisecond) // every thread of the server asleep
			if err := srv.Signal(unix.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if r := srv.Wait(shortRun); r.TimedOut || r.Signal != unix.SIGTERM {
				t.Fatalf("the idle server after SIGTERM: %s", r)
			}
			h.stdin.Close()
			h.Wait(shortRun)
		})
	}
}
