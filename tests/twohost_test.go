package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/internal/testutil"
)

// twoHosts is a pair of network namespaces joined by a veth pair, standing
// for two hosts: server 10.77.0.1/24 in a, client 10.77.0.2/24 in b.
type twoHosts struct {
	a, b place
}

const (
	twoHostServer = "10.77.0.1"
	twoHostClient = "10.77.0.2"
	twoHostNet    = "10.77.0.0/24"
)

// newTwoHosts creates the namespaces, with names unique to this test run;
// they are deleted when the test ends, whether it passed or not.
func newTwoHosts(t *testing.T) *twoHosts {
	t.Helper()
	testutil.NeedRoot(t, "for ip netns")
	ip := testutil.Tool(t, "ip")
	tag := fmt.Sprintf("%d%x", os.Getpid()%100000, testutil.Seed(t)%0xfff)
	nsA, nsB := "osft"+tag+"a", "osft"+tag+"b"
	vA, vB := "osfv"+tag+"a", "osfv"+tag+"b"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{nsA, nsB} {
		run("netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command(ip, "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
	}
	run("link", "add", vA, "type", "veth", "peer", "name", vB)
	run("link", "set", vA, "netns", nsA)
	run("link", "set", vB, "netns", nsB)
	for _, x := range []struct{ ns, dev, addr string }{{nsA, vA, twoHostServer}, {nsB, vB, twoHostClient}} {
		run("-n", x.ns, "addr", "add", x.addr+"/24", "dev", x.dev)
		run("-n", x.ns, "link", "set", x.dev, "up")
		run("-n", x.ns, "link", "set", "lo", "up")
	}
	return &twoHosts{
		a: place{name: nsA, prefix: []string{ip, "netns", "exec", nsA}},
		b: place{name: nsB, prefix: []string{ip, "netns", "exec", nsB}},
	}
}

// TestTwoHosts runs a server under osf on one "host" and a client under
// osf on another (network namespaces joined by veth). Both offload the
// subnet, but without an RDMA device the connection must fall back to
// kernel TCP with data intact, and say why in the same words everywhere:
// osfstat of the client, the client's core log and osfrun --explain.
func TestTwoHosts(t *testing.T) {
	t.Parallel()
	h := newTwoHosts(t)
	if _, err := os.Stat("/sys/class/infiniband"); err == nil {
		t.Log("this machine has RDMA support; the fallback checks below assume no device serves the veth pair")
	}
	dir := t.TempDir()
	clientLog := filepath.Join(dir, "client.log")
	routes := "OSF_ROUTES=offload both * " + twoHostNet
	serverEnv := []string{routes}
	clientEnv := []string{routes, "OSF_LOG_LEVEL=debug", "OSF_LOG_FILE=" + clientLog}

	s := startStreamServer(t, h.a, serverEnv, twoHostServer)
	runStreamCases(t, s, h.b, clientEnv, 8<<20)

	pid, local, peer, release := s.hold(t, h.b, clientEnv)
	defer func() { release() }()
	if !strings.HasPrefix(local, twoHostClient+":") || peer != s.addr() {
		t.Errorf("client's names %s -> %s, want %s:* -> %s", local, peer, twoHostClient, s.addr())
	}

	// osfstat (run here: same pid namespace) on the client.
	wantReason := policy.ReasonNoRDMADevice.String()
	socks := testutil.AssertTransport(t, pid, testutil.ByRole("client"), testutil.TransportKernel)
	for _, sock := range socks {
		if sock.Reason != wantReason || sock.ReasonCode != int(policy.ReasonNoRDMADevice) {
			t.Errorf("client socket %s; want reason %q (code %d)", sock, wantReason, policy.ReasonNoRDMADevice)
		}
	}
	if !strings.HasPrefix(wantReason, "peer is another host and no RDMA device") {
		t.Fatalf("reason text changed: %q", wantReason)
	}
	// The server accepted it over kernel TCP; its listener is offloaded
	// (shm companion) without an RDMA listener.
	for _, sock := range testutil.AssertTransport(t, s.p.Pid, testutil.ByRole("server"), testutil.TransportKernel) {
		if sock.ReasonCode != int(policy.ReasonPeerKernel) {
			t.Errorf("server socket %s, want reason %q", sock, policy.ReasonPeerKernel)
		}
	}
	testutil.AssertTransport(t, s.p.Pid, testutil.ByRole("listener"), testutil.TransportShm)

	// The detail: the client's core log and osfrun --explain, run on the
	// client's "host", give the same.
	logLine := ""
	for _, line := range strings.Split(readLog(t, clientLog), "\n") {
		if strings.Contains(line, "connect "+s.addr()+": kernel: ") {
			logLine = line
		}
	}
	if logLine == "" {
		t.Fatalf("the client's log has no kernel decision for %s:\n%s", s.addr(), readLog(t, clientLog))
	}
	decision := logLine[strings.Index(logLine, "kernel: "):]
	if i := strings.Index(decision, "\t"); i >= 0 {
		decision = decision[:i]
	}
	r := h.b.plain(t, testutil.Bin(t, "osfrun"), "--routes", strings.TrimPrefix(routes, "OSF_ROUTES="), "--explain", s.addr()).Run(shortRun)
	if !r.OK() {
		t.Fatalf("osfrun --explain: %s", r)
	}
	var explained string
	for _, line := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "=> kernel: ") && explained == "" {
			explained = strings.TrimPrefix(strings.TrimSpace(line), "=> ")
		}
	}
	if explained == "" || !strings.HasPrefix(explained, "kernel: "+wantReason) {
		t.Fatalf("osfrun --explain %s does not choose kernel with reason %q:\n%s", s.addr(), wantReason, r.Stdout)
	}
	if decision != explained {
		t.Errorf("the client's core logged %q; osfrun --explain says %q", decision, explained)
	}
	t.Logf("client: %s", decision)

	release()
	release = func() {}
	s.client(t, h.b, clientEnv, "quit", 0, 1)
	if r := s.p.Wait(shortRun); !r.OK() {
		t.Errorf("stream server: %s", r)
	}
}
