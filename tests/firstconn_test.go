package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// shortServerScript accepts one connection on 127.0.0.1:PORT: to "1" it
// answers 64 bytes after 100 ms; to "2" 8 KiB at once and 64 bytes more
// after 100 ms; then it reads until the client closes.
const shortServerScript = `
import socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(4)
print("listening", flush=True)
c, _ = l.accept()
assert c.recv(1) == b"1"
time.sleep(0.1); c.sendall(b"a" * 64)
assert c.recv(1) == b"2"
c.sendall(b"b" * 8192); time.sleep(0.1); c.sendall(b"c" * 64)
while c.recv(4096): pass
`

// shortClientScript connects, asks for the short reply and for the long
// one, each read sleeping in a blocking recv, and prints the process's
// threads after each ("threads short: NAMES", "threads long: NAMES"); it
// checks the bytes, prints "ready" and waits for its standard input to
// close.
const shortClientScript = `
import os, socket, sys
def threads():
    d = "/proc/self/task"
    return ",".join(sorted(open("%s/%s/comm" % (d, t)).read().strip() for t in os.listdir(d)))
def recv_exactly(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x: sys.exit("early end")
        b += x
    return b
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"1")
assert recv_exactly(c, 64) == b"a" * 64
print("threads short:", threads(), flush=True)
c.sendall(b"2")
assert recv_exactly(c, 8192 + 64) == b"b" * 8192 + b"c" * 64
print("threads long:", threads(), flush=True)
print("ready", flush=True)
sys.stdin.read()
`

// TestShortClientStartsNoThread: a short client's reader consumes less
// than a page of a new ring, which then has no page to give back, so osf
// starts no thread for it (the reaper, which trims the rings of idle
// connections, would cost a short client its creation and an exit that
// must reap it); once a reader has consumed a page, the reaper runs
// (issues 12, 28). The connection is shm (OSF_STRICT=1, osfstat), the bytes checked.
func TestShortClientStartsNoThread(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := strconv.Itoa(testutil.FreePort(t))
			srv := m.cmd(t, nil, python(t), "-c", shortServerScript, port).Start()
			srv.WaitOutput("listening", 10*time.Second)
			cl := m.cmd(t, []string{"OSF_STRICT=1"}, python(t), "-c", shortClientScript, port)
			stdin, err := cl.Cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			p := cl.Start()
			out := p.WaitOutput("ready\n", longRun)
			if m.osf {
				testutil.AssertTransport(t, p.Pid, testutil.ByRole("client"), testutil.TransportShm)
			}
			stdin.Close()
			if r := p.Wait(shortRun); !r.OK() {
				t.Fatalf("client: %s", r)
			}
			if r := srv.Wait(shortRun); !r.OK() {
				t.Fatalf("server: %s", r)
			}
			short, long := threadLine(out, "short"), threadLine(out, "long")
			if short != "python3" {
				t.Errorf("after a 64-byte reply read in a blocking recv the client has threads %q, want only python3", short)
			}
			want := "python3"
			if m.osf {
				want = "osf-reaper,python3"
			}
			if long != want {
				t.Errorf("after 8 KiB read and a blocking recv the client has threads %q, want %q", long, want)
			}
		})
	}
}

// threadLine returns the thread names printed as "threads WHAT: NAMES".
func threadLine(out, what string) string {
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, "threads "+what+": "); ok {
			return s
		}
	}
	return "(no line)"
}

// TestFirstConnectSystemCalls: the first connection of a short client
// (`churn once`: connect, 64 B each way, close, exit; OSF_STRICT=1 against
// an osf server, so it is shm or fails; the trace shows its companion
// connect) reads nothing of the host that its set-up does not need: no
// RDMA device probe (/sys/class/infiniband: the route to a local address
// is shm whatever the devices), no ephemeral port range (the kernel gives
// the port; the range is for synthesizing one) and no unprivileged port
// start (a server's question); its census of the port's listeners is one
// netlink dump for both address families; and osf starts no thread in it
// (issue 12).
func TestFirstConnectSystemCalls(t *testing.T) {
	t.Parallel()
	port := strconv.Itoa(testutil.FreePort(t))
	tr := traceFirstConnect(t, port, testutil.Prog(t, "churn"), "once", port)
	for _, path := range []string{"/sys/class/infiniband", "ip_local_port_range", "ip_unprivileged_port_start"} {
		if strings.Contains(tr, path) {
			t.Errorf("the short client's first connection read %s", path)
		}
	}
	if n := len(regexp.MustCompile(`sendto\(\d+, \[\{nlmsg_len=`).FindAllString(tr, -1)); n != 1 {
		t.Errorf("the short client's census made %d netlink dumps, want 1", n)
	}
	if n := len(regexp.MustCompile(`(?m)^\d+ +clone`).FindAllString(tr, -1)); n != 0 {
		t.Errorf("osf started %d threads in the short client", n)
	}
	if t.Failed() {
		t.Logf("trace:\n%s", tr)
	}
}

// TestCurlConnectCarriesOnlySetOptions: curl sets TCP_NODELAY,
// SO_KEEPALIVE, TCP_KEEPIDLE and TCP_KEEPINTVL on its socket before
// connect. The offloaded connection carries them over (TestSemantics/
// inherit checks the values); osf reads back only those four from the
// socket (the table notes which were set through it) and takes them
// without asking a kernel socket of its own whether they are valid: the
// connection makes no TCP socket but curl's own and at most 5 getsockopt
// (SO_PEERCRED and the four), where it made 5 and 36 (issue 12). The body
// curl fetched is checked.
func TestCurlConnectCarriesOnlySetOptions(t *testing.T) {
	t.Parallel()
	curl := testutil.OptionalTool(t, "curl", "fetch through an offloaded connection")
	port := strconv.Itoa(testutil.FreePort(t))
	tr := traceFirstConnect(t, port, curl, "-s", "http://127.0.0.1:"+port+"/")
	if n := strings.Count(tr, "socket(AF_INET,"); n != 1 {
		t.Errorf("curl's process made %d TCP sockets, want 1 (its own)", n)
	}
	// OSF_SHM_KFD=1: two more, its bind's IP_BIND_ADDRESS_NO_PORT and
	// the SYN mark's IP_TOS (preload/kfd.c), both put back on failure.
	most := 5
	if testutil.KfdRun() {
		most = 7
	}
	if n := strings.Count(tr, "getsockopt("); n > most {
		t.Errorf("curl's process made %d getsockopt calls, want at most %d", n, most)
	}
	if t.Failed() {
		t.Logf("trace:\n%s", tr)
	}
}

// TestNodelayAfterConnectMakesNoSocket: TCP_NODELAY set on an offloaded
// connection (wrk, node and nginx set it after connect or accept) is taken
// as kernel TCP takes it, any int of at least an int's length, with no
// scratch TCP socket to ask (preload/kopt.c, any_int): the client's
// process makes one TCP socket, its own, and no TCP_NODELAY reaches the
// kernel; it made 2 and 1 (a socket, a setsockopt and a close per
// connection). The reply read after it is checked; gVisor's
// tcp_socket_test checks the option's lengths and values.
func TestNodelayAfterConnectMakesNoSocket(t *testing.T) {
	t.Parallel()
	py := testutil.OptionalTool(t, "python3", "set TCP_NODELAY after connect")
	port := strconv.Itoa(testutil.FreePort(t))
	const script = `import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"q" * 46)
b = b""
while len(b) < 64:
    d = s.recv(64 - len(b))
    if not d:
        break
    b += d
sys.stdout.write(b.split(b"\r\n\r\n", 1)[1].rstrip(b"\0").decode())
`
	tr := traceFirstConnect(t, port, py, "-c", script, port)
	if n := strings.Count(tr, "socket(AF_INET,"); n != 1 {
		t.Errorf("the client made %d TCP sockets, want 1 (its own)", n)
	}
	// OSF_SHM_KFD=1: osf's own at connect, on the kernel socket that
	// carries the wake tokens (preload/kfd.c nodelay), not the program's.
	want := 0
	if testutil.KfdRun() {
		want = 1
	}
	if n := strings.Count(tr, "TCP_NODELAY"); n != want {
		t.Errorf("%d TCP_NODELAY calls reached the kernel, want %d", n, want)
	}
	if t.Failed() {
		t.Logf("trace:\n%s", tr)
	}
}

// traceFirstConnect runs prog (a client of 127.0.0.1:port) under strace -f
// with osf (OSF_STRICT=1) against an osf `churn server` on port, checks
// that it exited 0 and that its connection was shm (the trace shows the
// companion connect; strict mode fails a fallback), and that what it
// printed is churn's reply body when it printed anything; it returns the
// trace.
func traceFirstConnect(t *testing.T, port, prog string, args ...string) string {
	t.Helper()
	strace := testutil.OptionalTool(t, "strace", "trace a client's first connection")
	srv := underOsf.cmd(t, nil, testutil.Prog(t, "churn"), "server", port).Start()
	srv.WaitOutput("listening", 10*time.Second)
	defer func() {
		_ = srv.Signal(unix.SIGTERM)
		srv.Wait(shortRun)
	}()
	trace := filepath.Join(t.TempDir(), "trace")
	sargs := append([]string{"-f", "-qq", "-s", "64", "-o", trace}, testutil.StraceEnv(t, "OSF_STRICT=1")...)
	r := testutil.Cmd(t, nil, strace, append(append(sargs, prog), args...)...).Run(longRun)
	if !r.OK() {
		t.Fatalf("%s under strace: %s", prog, r)
	}
	if r.Stdout != "" && r.Stdout != "churn: 64-byte reply\n" {
		t.Errorf("%s printed %q, want churn's reply body", prog, r.Stdout)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	tr := string(b)
	if !regexp.MustCompile(`connect\(\d+, \{sa_family=AF_UNIX, sun_path=@"osf1/4/127\.0\.0\.1/` + port + `"\}, \d+\) = 0`).MatchString(tr) {
		t.Fatalf("no companion connect in the trace (not shm?):\n%s", tr)
	}
	return tr
}

// listenEchoServerScript listens on 127.0.0.1:PORT, prints "listening",
// echoes the 64 bytes of the one connection it accepts and waits for its
// standard input to close.
const listenEchoServerScript = `
import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(4)
print("listening", flush=True)
c, _ = l.accept()
b = b""
while len(b) < 64:
    x = c.recv(64 - len(b))
    if not x: sys.exit("early end")
    b += x
c.sendall(b)
sys.stdin.read()
`

// echoClientScript connects to 127.0.0.1:PORT, sends 64 bytes, checks
// they come back, prints "ready" and waits for its standard input to close.
const echoClientScript = `
import os, socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
m = os.urandom(64); c.sendall(m)
b = b""
while len(b) < 64:
    x = c.recv(64 - len(b))
    if not x: sys.exit("early end")
    b += x
assert b == m
print("ready", flush=True)
sys.stdin.read()
`

// TestListenCompanionFirst: a listener on a bound port that nobody listens
// on yet makes osf's companion before the kernel's listener, so a client
// that connects the moment the port shows in /proc/net/tcp (iperf3's first
// connection in TestShmIperf3, started by WaitListening) finds the
// companion: it is offloaded, not left to kernel TCP. The server runs under
// strace (listen calls only, with their sockets): under osf the companion's
// listen comes first. The bytes are checked with and without osf, and the
// client's connection is shm under osf.
func TestListenCompanionFirst(t *testing.T) {
	t.Parallel()
	strace := testutil.OptionalTool(t, "strace", "see the order of a server's listen calls")
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := strconv.Itoa(testutil.FreePort(t))
			trace := filepath.Join(t.TempDir(), "trace")
			sc := m.cmd(t, nil, strace, "-f", "-qq", "-yy", "-e", "trace=listen", "-o", trace,
				python(t), "-c", listenEchoServerScript, port)
			sin, err := sc.Cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			srv := sc.Start()
			srv.WaitOutput("listening", shortRun)
			cc := m.cmd(t, nil, python(t), "-c", echoClientScript, port)
			cin, err := cc.Cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			cl := cc.Start()
			cl.WaitOutput("ready\n", longRun)
			if m.osf {
				testutil.AssertTransport(t, cl.Pid, testutil.ByRole("client"), testutil.TransportShm)
			}
			cin.Close()
			sin.Close()
			if r := cl.Wait(shortRun); !r.OK() {
				t.Fatalf("client: %s", r)
			}
			if r := srv.Wait(shortRun); !r.OK() {
				t.Fatalf("server: %s", r)
			}
			b, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			tr := string(b)
			kernel := regexp.MustCompile(`listen\(\d+<TCP:\[127\.0\.0\.1:` + port + `\]>, 4\) = 0`).FindStringIndex(tr)
			// a stream companion, or (OSF_SHM_KFD=1) a SOCK_SEQPACKET one,
			// which strace -yy names UNIX
			companion := regexp.MustCompile(`listen\(\d+<UNIX(?:-STREAM)?:\[\d+,@"osf1/[^"]*/127\.0\.0\.1/` + port + `"\]>, 4\) = 0`).FindStringIndex(tr)
			switch {
			case kernel == nil:
				t.Errorf("no kernel listen in the server's trace:\n%s", tr)
			case m.osf && companion == nil:
				t.Errorf("no companion listen in the server's trace:\n%s", tr)
			case m.osf && companion[0] > kernel[0]:
				t.Errorf("the kernel listener came before osf's companion:\n%s", tr)
			case !m.osf && companion != nil:
				t.Errorf("a companion without osf:\n%s", tr)
			}
		})
	}
}
