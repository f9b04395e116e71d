package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// gatewayNet is three network namespaces standing for three hosts: a node
// (10.88.1.2) that can reach only the gateway, the gateway (10.88.1.1 to the
// node, 10.88.2.1 to the outside, no forwarding), and an outside host
// (10.88.2.2). The node has no route to the outside.
type gatewayNet struct {
	node, gw, out place
	key           string // the shared key file, mode 0600
	dir           string
}

const (
	gwNodeAddr = "10.88.1.2"
	gwAddr     = "10.88.1.1"
	gwOutAddr  = "10.88.2.2"
	gwOutAddr6 = "fd88:2::2"
	gwPort     = "7000"
)

var gwNetCount atomic.Int32

func newGatewayNet(t *testing.T) *gatewayNet {
	t.Helper()
	testutil.NeedRoot(t, "for ip netns")
	ip := testutil.Tool(t, "ip")
	tag := fmt.Sprintf("%d%d", os.Getpid()%100000, gwNetCount.Add(1)) // ≤ 15-byte interface names
	ns := [3]string{"osgn" + tag, "osgg" + tag, "osgo" + tag}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, n := range ns {
		run("netns", "add", n)
		t.Cleanup(func() {
			if out, err := exec.Command(ip, "netns", "del", n).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", n, err, out)
			}
		})
	}
	vn, vg, vh, vo := "osgv"+tag+"n", "osgv"+tag+"g", "osgv"+tag+"h", "osgv"+tag+"o"
	run("link", "add", vn, "type", "veth", "peer", "name", vg)
	run("link", "add", vh, "type", "veth", "peer", "name", vo)
	for _, x := range []struct{ ns, dev, addr string }{
		{ns[0], vn, gwNodeAddr}, {ns[1], vg, gwAddr}, {ns[1], vh, "10.88.2.1"}, {ns[2], vo, gwOutAddr},
	} {
		run("link", "set", x.dev, "netns", x.ns)
		run("-n", x.ns, "addr", "add", x.addr+"/24", "dev", x.dev)
		run("-n", x.ns, "link", "set", x.dev, "up")
		run("-n", x.ns, "link", "set", "lo", "up")
	}
	// A connect to an outside address nobody answers (10.88.2.99) fails
	// once ARP gives up: 3 probes 2.5 s apart, not 1 s, so that a test
	// on a loaded host still finds it pending at the gateway.
	run("-n", ns[1], "ntable", "change", "name", "arp_cache", "dev", vh, "retrans", "2500")
	// IPv6 between the gateway and the outside only.
	run("-n", ns[1], "addr", "add", "fd88:2::1/64", "dev", vh, "nodad")
	run("-n", ns[2], "addr", "add", gwOutAddr6+"/64", "dev", vo, "nodad")
	g := &gatewayNet{dir: t.TempDir()}
	g.node = place{name: ns[0], prefix: []string{ip, "netns", "exec", ns[0]}}
	g.gw = place{name: ns[1], prefix: []string{ip, "netns", "exec", ns[1]}}
	g.out = place{name: ns[2], prefix: []string{ip, "netns", "exec", ns[2]}}
	g.key = g.writeKey(t, "key", "the-node-and-gateway-secret-"+tag)
	return g
}

// writeKey writes a key file of mode 0600.
func (g *gatewayNet) writeKey(t *testing.T, name, key string) string {
	t.Helper()
	p := filepath.Join(g.dir, name)
	if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startGateway runs osfgw in the gateway namespace on port with extra
// arguments (the allow-list) and waits until it listens.
func (g *gatewayNet) startGateway(t *testing.T, port string, args ...string) *testutil.Process {
	t.Helper()
	all := append([]string{"--listen", gwAddr + ":" + port, "--key", g.key}, args...)
	p := g.gw.plain(t, testutil.Bin(t, "osfgw"), all...).Start()
	waitStderr(t, p, "listening on", 10*time.Second)
	return p
}

// waitStderr waits until p's standard error contains substr.
func waitStderr(t *testing.T, p *testutil.Process, substr string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !strings.Contains(p.Stderr(), substr); time.Sleep(10 * time.Millisecond) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("process %d did not write %q to stderr within %v:\n%s", p.Pid, substr, timeout, p.Stderr())
		}
	}
}

// nodeEnv is the osf configuration of a node that reaches 10.88.0.0/16
// through the gateways gws.
func (g *gatewayNet) nodeEnv(gws, key string) []string {
	return []string{"OSF_ROUTES=gateway " + gws + " 10.88.0.0/16; gateway " + gws + " [fd88::/16]", "OSF_GATEWAY_KEY=" + key, "OSF_GATEWAY_TIMEOUT_MS=15000"}
}

// gwStatus is what osfgw --status --json prints.
type gwStatus struct {
	Gateways []struct {
		Gateway     string `json:"gateway"`
		Connections []struct {
			Node   string `json:"node"`
			Dest   string `json:"destination"`
			State  string `json:"state"`
			ToDest int64  `json:"bytes_to_destination"`
			ToNode int64  `json:"bytes_to_node"`
		} `json:"connections"`
	} `json:"gateways"`
}

func (g *gatewayNet) status(t *testing.T) gwStatus {
	t.Helper()
	r := g.gw.plain(t, testutil.Bin(t, "osfgw"), "--status", "--json").MustRun(10 * time.Second)
	var s gwStatus
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
		t.Fatalf("osfgw --status --json: %v: %q", err, r.Stdout)
	}
	return s
}

// gwProbe connects as the program under test would and prints what connect
// and getpeername said: "connected HOST:PORT" or "error ERRNO-NAME";
// "nb" uses a non-blocking socket and poll, "echo" sends its standard input
// after connecting, shuts down writing and prints the reply.
const gwProbe = `
import socket, sys, errno, select, hashlib
host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET6 if ":" in host or mode == "v6" else socket.AF_INET)
if mode == "v6" and ":" not in host:
    host = "::ffff:" + host
name = lambda e: errno.errorcode.get(e, str(e))
if mode == "nb":
    s.setblocking(False)
    r = s.connect_ex((host, port))
    print("connect", name(r))
    if r == errno.EINPROGRESS:
        select.select([], [s], [], 20)
        e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        print("so_error", name(e))
        if e == 0:
            print("connected %s:%d" % s.getpeername())
            print("again", name(s.connect_ex((host, port))), name(s.connect_ex((host, port))))
    sys.exit(0)
try:
    s.connect((host, port))
except OSError as e:
    print("error", name(e.errno)); sys.exit(0)
print("connected %s:%d" % s.getpeername()[:2], flush=True)
if mode == "b":
    print("again", name(s.connect_ex((host, port))))
if mode == "echo":
    data = sys.stdin.buffer.read()
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(65536)
        if not b: break
        got += b
    print("reply", got.decode())
`

// gwOutServer is the outside server: "sink" reads to the end and answers
// the sha256 of what it read, then closes; "source" sends until the
// connection fails and says how it ended.
const gwOutServer = `
import socket, sys, hashlib, time, struct
ls = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2]))); ls.listen(16)
print("listening", flush=True)
while True:
    c, peer = ls.accept()
    print("accepted %s:%d" % peer[:2], flush=True)
    if sys.argv[3] == "sink":
        h = hashlib.sha256(); n = 0
        while True:
            b = c.recv(65536)
            if not b: break
            h.update(b); n += len(b)
        c.sendall(("%d %s" % (n, h.hexdigest())).encode()); c.close()
        continue
    if sys.argv[3] == "rst":
        c.sendall(b"y" * 100000); time.sleep(0.3)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); c.close()
        continue
    buf = b"x" * 65536
    try:
        while True:
            c.sendall(buf)
    except OSError as e:
        print("send ended:", type(e).__name__, flush=True)
`

// gwNames accepts one connection on port 8081 and prints the address accept
// returned and the socket's names, then echoes what it reads.
const gwNames = gwAcceptNames + `
c.sendall(c.recv(10)); c.close()
`

// gwAcceptNames listens on port PORT (replace it) and accepts connection
// c, printing the address accept returned and c's names.
const gwAcceptNames = `
import socket, hashlib, time
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", PORT)); ls.listen(4)
print("listening", flush=True)
c, a = ls.accept()
print("accept %s:%d peer %s:%d local %s:%d" % (a + c.getpeername() + c.getsockname()), flush=True)
`

// gwNodeReader connects and reads until the end; it prints how the stream
// ended: "eof N" or "reset N".
const gwNodeReader = `
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("connected", flush=True)
` + gwReadToEnd

// gwReadToEnd reads socket s until the end and prints how it ended: "eof
// N" or "reset N".
const gwReadToEnd = `
n = 0
try:
    while True:
        b = s.recv(65536)
        if not b:
            print("eof", n, flush=True); break
        n += len(b)
        time.sleep(0.002)
except ConnectionResetError:
    print("reset", n, flush=True)
`

func writeScript(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGatewayCurl downloads 10 MiB over HTTP from the outside host on a
// node that has no route there: plain curl cannot connect, curl under osf
// with a gateway route gets every byte through osfgw.
func TestGatewayCurl(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	curl := testutil.Tool(t, "curl")
	www := t.TempDir()
	_, sum := testutil.WriteRandomFile(t, www, "blob", 10<<20)
	srv := g.out.plain(t, python(t), "-u", "-m", "http.server", "8080", "--bind", gwOutAddr, "-d", www).Start()
	srv.WaitOutput("Serving HTTP", 10*time.Second)
	gw := g.startGateway(t, gwPort, "--allow", gwOutAddr+":8080")
	url := "http://" + gwOutAddr + ":8080/blob"

	if r := g.node.plain(t, curl, "-sS", "-o", "/dev/null", url).Run(20 * time.Second); r.ExitCode != 7 {
		t.Fatalf("plain curl on the node: want exit 7 (no route), got %s", r)
	}
	out := filepath.Join(t.TempDir(), "blob")
	r := g.node.cmd(t, g.nodeEnv(gwAddr+":"+gwPort, g.key), curl, "-sS", "-o", out, url).Run(60 * time.Second)
	if !r.OK() {
		t.Fatalf("curl through the gateway: %s", r)
	}
	if got := testutil.SHA256File(t, out); got != sum {
		t.Fatalf("sha256 %s, want %s", got, sum)
	}
	// The gateway relayed it: its log names the node, the destination and
	// at least the file's bytes to the node.
	log := gw.Stderr()
	if !strings.Contains(log, "node "+gwNodeAddr+":") || !strings.Contains(log, "-> "+gwOutAddr+":8080: connected") {
		t.Errorf("osfgw log lacks the relayed connection:\n%s", log)
	}
	var toDest, toNode int64
	for _, line := range strings.Split(log, "\n") {
		if i := strings.Index(line, ": closed; "); i >= 0 {
			fmt.Sscanf(line[i:], ": closed; %d bytes to the destination, %d to the node", &toDest, &toNode)
		}
	}
	if toNode < 10<<20 {
		t.Errorf("osfgw relayed %d bytes to the node, want at least %d:\n%s", toNode, 10<<20, log)
	}
}

// TestGatewayIperf3 runs iperf3 -c and -c -R from the node to an iperf3
// server outside: while each runs, osfstat shows its sockets on transport
// gateway and osfgw --status its connections; afterwards the bytes agree.
func TestGatewayIperf3(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	iperf := testutil.Tool(t, "iperf3")
	srv := g.out.plain(t, iperf, "-s", "-B", gwOutAddr, "-p", "5201", "--forceflush").Start()
	srv.WaitOutput("Server listening", 10*time.Second)
	g.startGateway(t, gwPort, "--allow", gwOutAddr+":5201")
	for _, reverse := range []bool{false, true} {
		args := []string{"-c", gwOutAddr, "-p", "5201", "-t", "3", "-J"}
		if reverse {
			args = append(args, "-R")
		}
		p := g.node.cmd(t, g.nodeEnv(gwAddr+":"+gwPort, g.key), iperf, args...).Start()
		// Both of iperf3's connections (control and data) are relayed.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st := g.status(t)
			if len(st.Gateways) == 1 && len(st.Gateways[0].Connections) >= 2 {
				break
			}
			if p.Exited() || time.Now().After(deadline) {
				t.Fatalf("osfgw --status: want the control and the data connection, got %+v", st)
			}
		}
		socks := testutil.AssertTransport(t, p.Pid, testutil.ByPeer(gwOutAddr+":5201"), testutil.TransportGateway)
		for _, s := range socks {
			if s.Gateway != gwAddr+":"+gwPort || s.GatewayLeg != "kernel" {
				t.Errorf("osfstat: %s: gateway %q leg %q, want %s:%s kernel", s, s.Gateway, s.GatewayLeg, gwAddr, gwPort)
			}
		}
		r := p.Wait(30 * time.Second)
		if !r.OK() {
			t.Fatalf("iperf3 %v: %s", args, r)
		}
		var res struct {
			End struct {
				Sent     struct{ Bytes int64 } `json:"sum_sent"`
				Received struct{ Bytes int64 } `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			t.Fatalf("iperf3 -J: %v", err)
		}
		t.Logf("iperf3 reverse=%v: sent %d, received %d bytes", reverse, res.End.Sent.Bytes, res.End.Received.Bytes)
		if res.End.Received.Bytes < 1<<20 || res.End.Received.Bytes > res.End.Sent.Bytes {
			t.Errorf("iperf3 reverse=%v: sent %d, received %d bytes", reverse, res.End.Sent.Bytes, res.End.Received.Bytes)
		}
	}
}

// TestGatewayErrors checks that connect through the gateway fails as a
// direct connect would (same errno), that the gateway refuses what it must
// with a log line, and the rest of the node side: non-blocking connect,
// getpeername, half-close, and several gateways with a dead one.
func TestGatewayErrors(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	dir := t.TempDir()
	probe := writeScript(t, dir, "probe.py", gwProbe)
	sink := g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr, "8080", "sink").Start()
	sink.WaitOutput("listening", 10*time.Second)
	sink6 := g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr6, "8080", "sink").Start()
	sink6.WaitOutput("listening", 10*time.Second)
	gw := g.startGateway(t, gwPort, "--allow", "10.0.0.0/8:8000-9000", "--allow", "[fd88::/16]:8000-9000")
	good := gwAddr + ":" + gwPort
	wrongKey := g.writeKey(t, "wrong", "another-secret-of-enough-length")
	for _, tt := range []struct {
		name, gws, key, dst, mode, stdin, want string
	}{
		{"connected", good, g.key, gwOutAddr + ":8080", "b", "", "connected " + gwOutAddr + ":8080\nagain EISCONN"},
		{"refused", good, g.key, gwOutAddr + ":8081", "b", "", "error ECONNREFUSED"},
		{"net-unreachable", good, g.key, "10.99.0.1:8080", "b", "", "error ENETUNREACH"},
		{"host-unreachable", good, g.key, "10.88.2.99:8080", "b", "", "error EHOSTUNREACH"},
		{"not-allowed", good, g.key, gwOutAddr + ":22", "b", "", "error EPERM"},
		{"wrong-key", good, wrongKey, gwOutAddr + ":8080", "b", "", "error EACCES"},
		{"no-gateway", gwAddr + ":7999", g.key, gwOutAddr + ":8080", "b", "", "error ENETUNREACH"},
		{"dead-gateway-skipped", gwAddr + ":7999," + good, g.key, gwOutAddr + ":8080", "b", "", "connected " + gwOutAddr + ":8080"},
		{"nonblocking", good, g.key, gwOutAddr + ":8080", "nb", "", "connect EINPROGRESS\nso_error 0\nconnected " + gwOutAddr + ":8080\nagain 0 EISCONN"},
		{"nonblocking-refused", good, g.key, gwOutAddr + ":8081", "nb", "", "connect EINPROGRESS\nso_error ECONNREFUSED"},
		{"half-close", good, g.key, gwOutAddr + ":8080", "echo", "hello through the gateway", "reply 25 "},
		{"ipv6-destination", good, g.key, "[" + gwOutAddr6 + "]:8080", "echo", "over IPv6 outside", "reply 17 "},
		{"ipv6-socket-v4-gateway", good, g.key, gwOutAddr + ":8080", "v6", "", "connected ::ffff:" + gwOutAddr + ":8080"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(tt.dst)
			c := g.node.cmd(t, g.nodeEnv(tt.gws, tt.key), python(t), probe, host, port, tt.mode)
			c.Cmd.Stdin = strings.NewReader(tt.stdin)
			r := c.Run(30 * time.Second)
			if !r.OK() || !strings.Contains(r.Stdout, tt.want) {
				t.Errorf("%s %s: want %q, got %s", tt.mode, tt.dst, tt.want, r)
			}
		})
	}
	// osfrun --explain names the gateway a connect would use, and why.
	r := g.node.plain(t, testutil.Bin(t, "osfrun"), "--routes", "gateway "+gwAddr+":7999,"+good+" 10.88.0.0/16",
		"--explain", gwOutAddr+":8080").MustRun(20 * time.Second)
	for _, want := range []string{
		"=> gateway " + gwAddr + ":7999," + good + ": through the gateway (rule 1)",
		gwAddr + ":7999  unreachable: ",
		"* " + good + "  reachable: a connect now would use it",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("osfrun --explain lacks %q:\n%s", want, r.Stdout)
		}
	}
	log := gw.Stderr()
	for _, want := range []string{
		"-> " + gwOutAddr + ":22: destination not allowed",
		"authentication failed",
		"-> " + gwOutAddr + ":8081: connect: connection refused",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("osfgw log lacks %q:\n%s", want, log)
		}
	}
}

// startTransfer starts an outside server that sends until its connection
// fails, osfgw, and a reader on the node that reads from it through the
// gateway; it returns once the reader's connection is on transport gateway
// and data has flowed a while.
func startTransfer(t *testing.T) (g *gatewayNet, dir string, src, gw, rd *testutil.Process) {
	t.Helper()
	g = newGatewayNet(t)
	dir = t.TempDir()
	src = g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr, "8080", "source").Start()
	src.WaitOutput("listening", 10*time.Second)
	gw = g.startGateway(t, gwPort, "--allow", gwOutAddr+":8080")
	rd = g.node.cmd(t, g.nodeEnv(gwAddr+":"+gwPort, g.key), python(t), "-u", writeScript(t, dir, "rd.py", gwNodeReader), gwOutAddr, "8080").Start()
	rd.WaitOutput("connected", 20*time.Second)
	testutil.AssertTransport(t, rd.Pid, testutil.ByPeer(gwOutAddr+":8080"), testutil.TransportGateway)
	time.Sleep(300 * time.Millisecond)
	return g, dir, src, gw, rd
}

// TestGatewayKilled kills osfgw in the middle of a transfer: the node's
// reader gets a reset (never a clean end, never a hang), the outside
// server's connection is reset too, and a new connect fails with
// ENETUNREACH.
func TestGatewayKilled(t *testing.T) {
	t.Parallel()
	g, dir, src, gw, rd := startTransfer(t)
	env := g.nodeEnv(gwAddr+":"+gwPort, g.key)
	killGateway(t, gw, rd, src)
	r := g.node.cmd(t, env, python(t), writeScript(t, dir, "probe.py", gwProbe), gwOutAddr, "8080", "b").Run(30 * time.Second)
	if !strings.Contains(r.Stdout, "error ENETUNREACH") {
		t.Errorf("connect with the gateway dead: want ENETUNREACH, got %s", r)
	}
}

// killGateway kills osfgw in the middle of a transfer from src to the
// node's reader rd: both get a reset, never a clean end or a hang.
func killGateway(t *testing.T, gw, rd, src *testutil.Process) {
	t.Helper()
	if err := gw.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	out := rd.WaitOutput("reset", 10*time.Second)
	t.Logf("the node's reader saw the reset %v after the kill: %s", time.Since(killed).Round(time.Millisecond), strings.TrimSpace(out))
	src.WaitOutput("send ended: ConnectionResetError", 10*time.Second)
}

// TestGatewayDestReset: the destination resets its connection (close with
// SO_LINGER 0) after sending; the node reads what was sent, then gets a
// reset, not a clean end.
func TestGatewayDestReset(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	dir := t.TempDir()
	srv := g.out.plain(t, python(t), "-u", writeScript(t, dir, "srv.py", gwOutServer), gwOutAddr, "8080", "rst").Start()
	srv.WaitOutput("listening", 10*time.Second)
	gw := g.startGateway(t, gwPort, "--allow", gwOutAddr+":8080")
	r := g.node.cmd(t, g.nodeEnv(gwAddr+":"+gwPort, g.key), python(t), "-u", writeScript(t, dir, "rd.py", gwNodeReader), gwOutAddr, "8080").Run(30 * time.Second)
	if !r.OK() || !strings.Contains(r.Stdout, "reset ") {
		t.Fatalf("node reader: want a reset, got %s", r)
	}
	var n int
	fmt.Sscanf(r.Stdout[strings.Index(r.Stdout, "reset "):], "reset %d", &n)
	if n > 100000 {
		t.Errorf("node read %d bytes, more than the 100000 sent", n)
	}
	if !strings.Contains(gw.Stderr(), "reset by the destination") {
		t.Errorf("osfgw log does not say the destination reset:\n%s", gw.Stderr())
	}
}

// TestGatewayNodeKilled kills the node's program in the middle of a
// transfer: the gateway closes the outside connection (the outside server's
// send fails) and forgets the relay.
func TestGatewayNodeKilled(t *testing.T) {
	t.Parallel()
	g, _, src, gw, rd := startTransfer(t)
	if st := g.status(t); len(st.Gateways) != 1 || len(st.Gateways[0].Connections) != 1 {
		t.Errorf("osfgw --status: want one connection, got %+v", st)
	}
	if err := rd.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	src.WaitOutput("send ended:", 10*time.Second)
	for deadline := time.Now().Add(shortRun); ; time.Sleep(50 * time.Millisecond) {
		st := g.status(t)
		if len(st.Gateways) == 1 && len(st.Gateways[0].Connections) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("osfgw still relays after the node died: %+v\n%s", st, gw.Stderr())
		}
	}
	if !strings.Contains(gw.Stderr(), "reset: the node is gone") && !strings.Contains(gw.Stderr(), "reset by the node") {
		t.Errorf("osfgw log does not say the node went away:\n%s", gw.Stderr())
	}
}

// TestGatewayRedis runs redis-benchmark (10 clients) and a 1 MiB SET/GET
// with redis-cli from the node against redis-server outside, through the
// gateway; the value comes back intact and every connection was relayed.
func TestGatewayRedis(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	server := testutil.Tool(t, "redis-server")
	bench := testutil.Tool(t, "redis-benchmark")
	cli := testutil.Tool(t, "redis-cli")
	srv := g.out.plain(t, server, "--port", "6379", "--bind", gwOutAddr, "--protected-mode", "no", "--save", "", "--appendonly", "no").Start()
	srv.WaitOutput("Ready to accept connections", 10*time.Second)
	gw := g.startGateway(t, gwPort, "--allow", gwOutAddr+":6379")
	env := g.nodeEnv(gwAddr+":"+gwPort, g.key)
	r := g.node.cmd(t, env, bench, "-h", gwOutAddr, "-p", "6379", "-c", "10", "-n", "5000", "-t", "set,get", "-q", "--csv").Run(60 * time.Second)
	if !r.OK() || !strings.Contains(r.Stdout, `"GET"`) || !strings.Contains(r.Stdout, `"SET"`) {
		t.Fatalf("redis-benchmark through the gateway: %s", r)
	}
	value := fmt.Sprintf("%x", testutil.RandomBytes(t, 512<<10)) // 1 MiB of hex
	c := g.node.cmd(t, env, cli, "-h", gwOutAddr, "-p", "6379", "-x", "SET", "big")
	c.Cmd.Stdin = strings.NewReader(value)
	if r := c.Run(30 * time.Second); !r.OK() || !strings.Contains(r.Stdout, "OK") {
		t.Fatalf("redis-cli SET: %s", r)
	}
	r = g.node.cmd(t, env, cli, "-h", gwOutAddr, "-p", "6379", "GET", "big").Run(30 * time.Second)
	if !r.OK() || strings.TrimSpace(r.Stdout) != value {
		t.Fatalf("redis-cli GET: %d bytes back, want the %d set (%s)", len(strings.TrimSpace(r.Stdout)), len(value), r.Err)
	}
	if n := strings.Count(gw.Stderr(), "-> "+gwOutAddr+":6379: connected"); n < 12 {
		t.Errorf("osfgw relayed %d connections, want at least 12 (10 benchmark clients, 2 redis-cli):\n%s", n, gw.Stderr())
	}
}

// TestGatewayListen runs an HTTP server on the node with a gateway rule for
// servers: the gateway listens on the same port, and curl on the outside
// host downloads 10 MiB from the gateway's address; the server sees the
// outside client as its peer, osfstat shows its listener on transport
// gateway; when the server dies the gateway stops listening.
func TestGatewayListen(t *testing.T) {
	t.Parallel()
	g := newGatewayNet(t)
	curl := testutil.Tool(t, "curl")
	www := t.TempDir()
	_, sum := testutil.WriteRandomFile(t, www, "blob", 10<<20)
	gw := g.startGateway(t, gwPort, "--allow-listen", "*:8080-8081")
	env := []string{"OSF_ROUTES=gateway " + gwAddr + ":" + gwPort + " server * *:8080-8081", "OSF_GATEWAY_KEY=" + g.key}
	srv := g.node.cmd(t, env, python(t), "-u", "-m", "http.server", "8080", "--bind", "0.0.0.0", "-d", www).Start()
	srv.WaitOutput("Serving HTTP", 20*time.Second)
	waitStderr(t, gw, "listening on 0.0.0.0:8080 for the node's "+gwNodeAddr+":8080", 10*time.Second)
	socks := testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportGateway)
	if socks[0].Gateway != gwAddr+":"+gwPort {
		t.Errorf("osfstat: listener's gateway %q, want %s:%s", socks[0].Gateway, gwAddr, gwPort)
	}
	out := filepath.Join(t.TempDir(), "blob")
	url := "http://10.88.2.1:8080/blob"
	if r := g.out.plain(t, curl, "-sS", "-o", out, url).Run(60 * time.Second); !r.OK() {
		t.Fatalf("curl from outside through the gateway: %s\nosfgw: %s", r, gw.Stderr())
	}
	if got := testutil.SHA256File(t, out); got != sum {
		t.Fatalf("sha256 %s, want %s", got, sum)
	}
	if !strings.Contains(srv.Stderr(), gwOutAddr+" - - ") {
		t.Errorf("the server did not see the outside client %s as its peer:\n%s", gwOutAddr, srv.Stderr())
	}
	// The accepted socket's names are those of the gateway's connection:
	// the outside client as peer, the gateway's outside address as local.
	dir := t.TempDir()
	names := g.node.cmd(t, env, python(t), "-u", writeScript(t, dir, "names.py", strings.Replace(gwNames, "PORT", "8081", 1))).Start()
	names.WaitOutput("listening", 20*time.Second)
	waitStderr(t, gw, "listening on 0.0.0.0:8081", 10*time.Second)
	cl := g.out.plain(t, python(t), "-c", `import socket; s = socket.create_connection(("10.88.2.1", 8081)); print("client %s:%d" % s.getsockname()); s.sendall(b"hi"); print(s.recv(10).decode())`).Run(20 * time.Second)
	r := names.Wait(20 * time.Second)
	client := strings.TrimPrefix(strings.SplitN(strings.TrimSpace(cl.Stdout), "\n", 2)[0], "client ")
	if !cl.OK() || !strings.Contains(cl.Stdout, "hi") || !strings.Contains(r.Stdout, "accept "+client+" peer "+client+" local 10.88.2.1:8081") {
		t.Errorf("names on the node: client %s\n%s\nnode: %s", cl, client, r)
	}
	if err := srv.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitStderr(t, gw, "stopped listening on 0.0.0.0:8080", 10*time.Second)
	if r := g.out.plain(t, curl, "-sS", "-o", "/dev/null", url).Run(20 * time.Second); r.ExitCode != 7 {
		t.Errorf("curl after the server died: want exit 7 (refused), got %s", r)
	}
}
