package tests

import (
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// startShmGateway runs osfgw as startGateway does, serving the node's
// network namespace over shared memory too (--node-netns): the node and
// the gateway stand for a container and its host.
func (g *gatewayNet) startShmGateway(t *testing.T, port string, args ...string) *testutil.Process {
	t.Helper()
	return g.startGateway(t, port, append([]string{"--node-netns", "/run/netns/" + g.node.name}, args...)...)
}

// uploadChecked runs c (gwProbe echo to a sink) with n random bytes as
// its input and checks that the destination got exactly them.
func uploadChecked(t *testing.T, c *testutil.Command, n int, gw *testutil.Process) {
	t.Helper()
	up := testutil.RandomBytes(t, n)
	c.Cmd.Stdin = strings.NewReader(string(up))
	want := fmt.Sprintf("reply %d %x", len(up), sha256.Sum256(up))
	if r := c.Run(60 * time.Second); !r.OK() || !strings.Contains(r.Stdout, want) {
		t.Errorf("upload: want %q, got %s\nosfgw: %s", want, r, gw.Stderr())
	}
}

// assertLeg checks that process pid's connection to dst goes through the
// test's gateway over leg (osfstat on the node, osfgw --status).
func (g *gatewayNet) assertLeg(t *testing.T, pid int, dst, leg string) {
	t.Helper()
	socks := testutil.AssertTransport(t, pid, testutil.ByPeer(dst), testutil.TransportGateway)
	for _, s := range socks {
		if s.Gateway != gwAddr+":"+gwPort || s.GatewayLeg != leg {
			t.Errorf("osfstat: %s: gateway %q leg %q, want %s:%s %s", s, s.Gateway, s.GatewayLeg, gwAddr, gwPort, leg)
		}
	}
	r := g.gw.plain(t, testutil.Bin(t, "osfgw"), "--status", "--json").MustRun(10 * time.Second)
	if !strings.Contains(r.Stdout, `"leg":"`+leg+`"`) || !strings.Contains(r.Stdout, `"destination":"`+dst+`"`) {
		t.Errorf("osfgw --status: want the connection to %s with leg %s, got %s", dst, leg, r.Stdout)
	}
}

// gwNB connects without blocking, as event loops do, and reports what it
// saw: "connect ERRNO"; while the gateway has not answered yet (mode
// suffix "-slow": the destination takes seconds), what a second connect,
// recv, send and a zero-timeout wait say; then, after waiting for
// writability with poll, select, epoll (registered after connect) or epoll-pre
// (registered before connect), "ready OUT ERR HUP so_error ERRNO" (mode
// close-slow closes it while connecting instead; epoll-slow, after a
// failure, checks getpeername and connects the socket again, through
// the gateway again); on
// success it sends its standard input, shuts down writing and prints the
// reply.
const gwNB = `
import socket, sys, errno, select
host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
name = lambda e: errno.errorcode.get(e, str(e))
s = socket.socket(); s.setblocking(False)
ep = None
if mode.startswith("epoll-pre"):
    ep = select.epoll(); ep.register(s.fileno(), select.EPOLLOUT)
print("connect", name(s.connect_ex((host, port))), flush=True)
if mode.endswith("-slow"):
    print("again", name(s.connect_ex((host, port))))
    for what, f in (("recv", lambda: s.recv(10)), ("send", lambda: s.send(b"x"))):
        try:
            f(); print(what, "OK")
        except OSError as e:
            print(what, name(e.errno))
    p = select.poll(); p.register(s, select.POLLOUT | select.POLLIN)
    print("early", p.poll(0))
    if ep is not None:
        print("early", ep.poll(0))
    sys.stdout.flush()
    if len(sys.argv) > 4:  # the test looks at osfstat first
        import os, time
        for _ in range(3000):
            if os.path.exists(sys.argv[4]):
                break
            time.sleep(0.01)
if mode.startswith("close"):
    s.close(); print("closed"); sys.exit(0)
if mode.startswith("poll"):
    p = select.poll(); p.register(s, select.POLLOUT)
    ev = p.poll(30000)[0][1]
    out, err, hup = select.POLLOUT, select.POLLERR, select.POLLHUP
elif mode.startswith("select"):
    _, w, _ = select.select([], [s], [], 30)
    out, err, hup = 1, 2, 4
    ev = out if w else 0
else:
    if ep is None:
        ep = select.epoll(); ep.register(s.fileno(), select.EPOLLOUT | select.EPOLLET)
    ev = ep.poll(30)[0][1]
    out, err, hup = select.EPOLLOUT, select.EPOLLERR, select.EPOLLHUP
e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
print("ready", "OUT" if ev & out else "-", "ERR" if ev & err else "-", "HUP" if ev & hup else "-", "so_error", name(e), flush=True)
if e != 0 and mode.startswith("epoll-slow"):
    try:
        s.getpeername(); print("peer connected")
    except OSError as x:
        print("peer", name(x.errno))
    s.setblocking(True)  # the socket connects anew, routed again
    print("then", name(s.connect_ex((host, 8081))))
if e == 0:
    s.setblocking(True)
    print("peer %s:%d" % s.getpeername())
    s.sendall(sys.stdin.buffer.read()); s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(65536)
        if not b: break
        got += b
    print("reply", got.decode())
`

// TestGatewayShmLeg: with the gateway on the node's host, the node's
// stream to it is an offloaded shm connection (not kernel TCP): osfstat on
// the node shows transport gateway with leg shm, osfgw --status leg shm;
// bytes pass intact both ways (a 10 MiB download with curl, a 4 MiB
// upload checked by the destination), connect errors keep their errno,
// and killing the gateway resets the node's connection.
func TestGatewayShmLeg(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	dir := t.TempDir()
	curl := testutil.Tool(t, "curl")
	www := t.TempDir()
	_, sum := testutil.WriteRandomFile(t, www, "blob", 10<<20)
	web := g.out.plain(t, python(t), "-u", "-m", "http.server", "8000", "--bind", gwOutAddr, "-d", www).Start()
	web.WaitOutput("Serving HTTP", 10*time.Second)
	sink := g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr, "8080", "sink").Start()
	sink.WaitOutput("listening", 10*time.Second)
	src := g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr, "8082", "source").Start()
	src.WaitOutput("listening", 10*time.Second)
	gw := g.startShmGateway(t, gwPort, "--allow", "10.88.2.0/24:8000-8082")
	env := g.nodeEnv(gwAddr+":"+gwPort, g.key)

	out := filepath.Join(t.TempDir(), "blob")
	if r := g.node.cmd(t, env, curl, "-sS", "-o", out, "http://"+gwOutAddr+":8000/blob").Run(60 * time.Second); !r.OK() {
		t.Fatalf("curl through the gateway: %s\nosfgw: %s", r, gw.Stderr())
	}
	if got := testutil.SHA256File(t, out); got != sum {
		t.Fatalf("download: sha256 %s, want %s", got, sum)
	}
	if !strings.Contains(gw.Stderr(), "-> "+gwOutAddr+":8000: connected from 10.88.2.1:") ||
		!strings.Contains(gw.Stderr(), "(node leg shm)") {
		t.Errorf("osfgw did not relay the download over an shm leg:\n%s", gw.Stderr())
	}

	probe := writeScript(t, dir, "probe.py", gwProbe)
	uploadChecked(t, g.node.cmd(t, env, python(t), probe, gwOutAddr, "8080", "echo"), 4<<20, gw)

	for _, tt := range []struct{ dst, want string }{
		{gwOutAddr + ":8081", "error ECONNREFUSED"},
		{gwOutAddr + ":22", "error EPERM"},
		{"10.88.2.99:8080", "error EHOSTUNREACH"},
	} {
		host, port, _ := net.SplitHostPort(tt.dst)
		if r := g.node.cmd(t, env, python(t), probe, host, port, "b").Run(30 * time.Second); !strings.Contains(r.Stdout, tt.want) {
			t.Errorf("connect %s: want %q, got %s", tt.dst, tt.want, r)
		}
	}

	rd := g.node.cmd(t, env, python(t), "-u", writeScript(t, dir, "rd.py", gwNodeReader), gwOutAddr, "8082").Start()
	rd.WaitOutput("connected", 20*time.Second)
	g.assertLeg(t, rd.Pid, gwOutAddr+":8082", "shm")
	time.Sleep(200 * time.Millisecond)
	killGateway(t, gw, rd, src)
}

// TestGatewayNonblockingConnect: a non-blocking connect through a gateway
// (shm leg) returns EINPROGRESS at once and the socket becomes writable
// when the gateway answers — SO_ERROR 0 and the bytes pass, or the
// destination's errno — under poll and epoll, as kernel TCP's does. While
// the gateway has not answered, the socket is "connecting": a second
// connect says EALREADY, recv and send EAGAIN, poll reports nothing.
func TestGatewayNonblockingConnect(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	gw := g.startShmGateway(t, gwPort, "--allow", "10.88.2.0/24:8080-8081")
	g.nonblockingConnects(t, gw, "shm")
}

// TestGatewayNonblockingConnectKernelLeg: the same over a kernel TCP leg
// (no --node-netns: the node reaches the gateway over kernel TCP). The
// connect returns EINPROGRESS before the gateway has answered (a
// destination that takes seconds shows it), recv and send say EAGAIN
// meanwhile, a second connect EALREADY, and poll and epoll report the
// outcome with SO_ERROR the destination's errno.
func TestGatewayNonblockingConnectKernelLeg(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	gw := g.startGateway(t, gwPort, "--allow", "10.88.2.0/24:8080-8081")
	g.nonblockingConnects(t, gw, "kernel")
}

// nonblockingConnects runs non-blocking connects from the node through
// gateway gw, whose leg to the node is of transport leg.
func (g *gatewayNet) nonblockingConnects(t *testing.T, gw *testutil.Process, leg string) {
	dir := t.TempDir()
	sink := g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr, "8080", "sink").Start()
	sink.WaitOutput("listening", 10*time.Second)
	env := g.nodeEnv(gwAddr+":"+gwPort, g.key)
	nb := writeScript(t, dir, "nb.py", gwNB)
	payload := "bytes after a non-blocking connect"
	ok := fmt.Sprintf("reply %d %x", len(payload), sha256.Sum256([]byte(payload)))
	for _, tt := range []struct {
		mode, dst string
		want      []string
	}{
		{"poll", gwOutAddr + ":8080", []string{"connect EINPROGRESS", "ready OUT - - so_error 0", "peer " + gwOutAddr + ":8080", ok}},
		{"epoll", gwOutAddr + ":8080", []string{"connect EINPROGRESS", "ready OUT - - so_error 0", ok}},
		{"epoll-pre", gwOutAddr + ":8080", []string{"connect EINPROGRESS", "ready OUT - - so_error 0", ok}},
		{"select", gwOutAddr + ":8080", []string{"connect EINPROGRESS", "ready OUT - - so_error 0", ok}},
		{"poll", gwOutAddr + ":8081", []string{"connect EINPROGRESS", "ready OUT ERR HUP so_error ECONNREFUSED"}},
		{"select", gwOutAddr + ":8081", []string{"connect EINPROGRESS", "ready OUT - - so_error ECONNREFUSED"}},
		{"epoll", gwOutAddr + ":8081", []string{"connect EINPROGRESS", "ready OUT ERR HUP so_error ECONNREFUSED"}},
		// No such host outside: the gateway's connect takes seconds (ARP).
		{"poll-slow", "10.88.2.99:8080", []string{"connect EINPROGRESS", "again EALREADY", "recv EAGAIN", "send EAGAIN", "early []", "ready OUT ERR HUP so_error EHOSTUNREACH"}},
		{"epoll-slow", "10.88.2.99:8080", []string{"connect EINPROGRESS", "again EALREADY", "ready OUT ERR HUP so_error EHOSTUNREACH", "peer ENOTCONN"}},
		{"select-slow", "10.88.2.99:8080", []string{"connect EINPROGRESS", "again EALREADY", "ready OUT - - so_error EHOSTUNREACH"}},
		{"epoll-pre-slow", "10.88.2.99:8080", []string{"connect EINPROGRESS", "again EALREADY", "early []", "ready OUT ERR HUP so_error EHOSTUNREACH"}},
		{"close-slow", "10.88.2.99:8080", []string{"connect EINPROGRESS", "closed"}},
	} {
		t.Run(tt.mode+"-"+tt.dst, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(tt.dst)
			// A slow connect's script waits for file go before it
			// looks at the socket again, so that osfstat sees the
			// connect still pending however late this test runs.
			goFile := filepath.Join(t.TempDir(), "go")
			c := g.node.cmd(t, env, python(t), nb, host, port, tt.mode, goFile)
			c.Cmd.Stdin = strings.NewReader(payload)
			p := c.Start()
			if strings.HasSuffix(tt.mode, "-slow") && !strings.HasPrefix(tt.mode, "close") {
				p.WaitOutput("early", 20*time.Second)
				testutil.AssertTransport(t, p.Pid, testutil.ByPeer(tt.dst), testutil.TransportGateway)
				g.assertLeg(t, p.Pid, tt.dst, leg)
				// While the reply is awaited, the hooks dispatch a
				// kernel leg's socket to the gateway-pending
				// operations, an offloaded leg's to its rings'.
				ops := leg
				if leg == "kernel" {
					ops = "gateway-pending"
				}
				for _, s := range testutil.OsfStat(t, p.Pid).Select(testutil.ByPeer(tt.dst)) {
					if s.Ops != ops {
						t.Errorf("osfstat: %s: operations %q, want %q", s, s.Ops, ops)
					}
				}
			}
			if err := os.WriteFile(goFile, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			r := p.Wait(40 * time.Second)
			if tt.mode == "epoll-slow" && leg == "kernel" {
				// A socket whose connect failed connects again
				// (through the gateway: the node has no route).
				// An offloaded leg's says ECONNABORTED.
				tt.want = append(tt.want, "then EHOSTUNREACH")
			}
			for _, w := range tt.want {
				if !strings.Contains(r.Stdout, w) {
					t.Errorf("%s %s: want %q, got %s", tt.mode, tt.dst, w, r)
				}
			}
		})
	}
	if t.Failed() {
		t.Logf("osfgw: %s", gw.Stderr())
	}
}

// TestGatewayRDMALeg: the node's stream to the gateway over RDMA, on the
// software stand-in (OSF_DEBUG_RDMA_SIM=1, which joins processes of one
// network namespace, so the node runs on the gateway host with
// OSF_TRANSPORT=rdma, which rules shm out): osfstat shows leg rdma,
// osfgw --status too; the bytes pass intact both ways; a non-blocking
// connect completes through poll, with the destination's errno when it
// refuses.
func TestGatewayRDMALeg(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	dir := t.TempDir()
	sink := g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr, "8080", "sink").Start()
	sink.WaitOutput("listening", 10*time.Second)
	src := g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr, "8082", "source").Start()
	src.WaitOutput("listening", 10*time.Second)
	gw := g.gw.plain(t, "env", "OSF_DEBUG_RDMA_SIM=1", testutil.Bin(t, "osfgw"), "--listen", gwAddr+":"+gwPort, "--key", g.key,
		"--allow", gwOutAddr+":8080-8082").Start()
	waitStderr(t, gw, "over RDMA), allowing", 10*time.Second)
	env := append(g.nodeEnv(gwAddr+":"+gwPort, g.key), "OSF_TRANSPORT=rdma", "OSF_DEBUG_RDMA_SIM=1")

	uploadChecked(t, g.gw.cmd(t, env, python(t), writeScript(t, dir, "probe.py", gwProbe), gwOutAddr, "8080", "echo"), 4<<20, gw)
	if !strings.Contains(gw.Stderr(), "(node leg rdma)") {
		t.Errorf("osfgw did not relay over an RDMA leg:\n%s", gw.Stderr())
	}
	nb := writeScript(t, dir, "nb.py", gwNB)
	payload := "over RDMA"
	for _, tt := range []struct{ port, want string }{
		{"8080", fmt.Sprintf("ready OUT - - so_error 0\npeer %s:8080\nreply %d %x", gwOutAddr, len(payload), sha256.Sum256([]byte(payload)))},
		{"8081", "ready OUT ERR HUP so_error ECONNREFUSED"},
	} {
		c := g.gw.cmd(t, env, python(t), nb, gwOutAddr, tt.port, "poll")
		c.Cmd.Stdin = strings.NewReader(payload)
		if r := c.Run(30 * time.Second); !strings.Contains(r.Stdout, "connect EINPROGRESS") || !strings.Contains(r.Stdout, tt.want) {
			t.Errorf("non-blocking connect to %s: want %q, got %s", tt.port, tt.want, r)
		}
	}

	rd := g.gw.cmd(t, env, python(t), "-u", writeScript(t, dir, "rd.py", gwNodeReader), gwOutAddr, "8082").Start()
	rd.WaitOutput("connected", 20*time.Second)
	g.assertLeg(t, rd.Pid, gwOutAddr+":8082", "rdma")
	if err := rd.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	src.WaitOutput("send ended:", 10*time.Second)
}

// gwListenEcho listens on the node on port 8083 (a gateway server rule),
// echoes its first connection's bytes and prints their count and sha256,
// then holds a second connection, reading until it ends ("eof N" or
// "reset N").
const gwListenEcho = gwAcceptNames + `
h = hashlib.sha256(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    h.update(b); n += len(b); c.sendall(b)
print("got %d %s" % (n, h.hexdigest()), flush=True)
c.close()
s, a = ls.accept()
print("held", flush=True)
` + gwReadToEnd

// gwListenClient connects from outside, prints its own address, waits
// for the file argv[3] (the test's go-ahead), then sends 4 MiB of random
// bytes while reading the echo, and prints the sha256 of both.
const gwListenClient = `
import socket, sys, os, time, hashlib, threading
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("client %s:%d" % s.getsockname(), flush=True)
for _ in range(1200):
    if os.path.exists(sys.argv[3]): break
    time.sleep(0.05)
data = os.urandom(4 << 20)
def send():
    s.sendall(data); s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send); t.start()
h = hashlib.sha256(); n = 0
while True:
    b = s.recv(65536)
    if not b: break
    h.update(b); n += len(b)
t.join()
print("sent %d %s" % (len(data), hashlib.sha256(data).hexdigest()))
print("echo %d %s" % (n, h.hexdigest()), flush=True)
`

// gwOutSender connects from outside and sends until the connection fails.
const gwOutSender = `
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("connected", flush=True)
try:
    for _ in range(100000):
        s.sendall(b"x" * 65536); time.sleep(0.01)
    print("send ended: done", flush=True)
except OSError as e:
    print("send ended:", type(e).__name__, flush=True)
`

// TestGatewayListenShmLeg: a node's listener through a gateway on the
// node's host gets the gateway's accepted connections over shared memory,
// not kernel TCP: osfstat on the node shows the accepted connection as
// transport gateway with leg shm, osfgw --status leg shm; the names are
// the outside client (accept, getpeername) and the gateway's outside
// address (getsockname); 4 MiB pass intact both ways (sha256); killing the
// gateway resets a held connection on the node.
func TestGatewayListenShmLeg(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	dir := t.TempDir()
	gw := g.startShmGateway(t, gwPort, "--allow-listen", "*:8083")
	env := []string{"OSF_ROUTES=gateway " + gwAddr + ":" + gwPort + " server * *:8083", "OSF_GATEWAY_KEY=" + g.key}
	srv := g.node.cmd(t, env, python(t), "-u", writeScript(t, dir, "echo.py", strings.Replace(gwListenEcho, "PORT", "8083", 1))).Start()
	srv.WaitOutput("listening", 20*time.Second)
	waitStderr(t, gw, "listening on 0.0.0.0:8083 for the node's "+gwNodeAddr+":8083", 10*time.Second)

	goFile := filepath.Join(dir, "go")
	cl := g.out.plain(t, python(t), "-u", writeScript(t, dir, "cl.py", gwListenClient), "10.88.2.1", "8083", goFile).Start()
	line := strings.TrimSpace(cl.WaitOutput("client ", 20*time.Second))
	client := strings.TrimPrefix(strings.SplitN(line[strings.Index(line, "client "):], "\n", 2)[0], "client ")
	acc := srv.WaitOutput("accept ", 20*time.Second)
	if !strings.Contains(acc, "accept "+client+" peer "+client+" local 10.88.2.1:8083") {
		t.Errorf("names on the node: want the client %s as peer and 10.88.2.1:8083 as local, got %q", client, acc)
	}
	g.assertLeg(t, srv.Pid, client, "shm")
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := cl.Wait(60 * time.Second)
	var n int
	var sent, echo string
	for _, l := range strings.Split(r.Stdout, "\n") {
		fmt.Sscanf(l, "sent %d %s", &n, &sent)
		fmt.Sscanf(l, "echo %d %s", &n, &echo)
	}
	if !r.OK() || sent == "" || echo != sent {
		t.Fatalf("outside client: echo differs from what it sent: %s\nosfgw: %s", r, gw.Stderr())
	}
	if got := srv.WaitOutput("got ", 20*time.Second); !strings.Contains(got, fmt.Sprintf("got %d %s", 4<<20, sent)) {
		t.Errorf("node server: want \"got %d %s\", got %q", 4<<20, sent, got)
	}
	if !strings.Contains(gw.Stderr(), client+" -> node "+gwNodeAddr+":8083: accepted on 10.88.2.1:8083 (node leg shm)") {
		t.Errorf("osfgw did not deliver over shm:\n%s", gw.Stderr())
	}

	src := g.out.plain(t, python(t), "-u", "-c", gwOutSender, "10.88.2.1", "8083").Start()
	src.WaitOutput("connected", 20*time.Second)
	srv.WaitOutput("held", 20*time.Second)
	time.Sleep(200 * time.Millisecond)
	killGateway(t, gw, srv, src)
}
