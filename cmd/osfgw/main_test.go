package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/gateway"
	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { testutil.MainInNetns(m) }

// fixture is a gateway on loopback with a log, and a destination listener.
type fixture struct {
	g    *gw
	addr string
	key  []byte
	dst  *net.TCPListener
	log  *syncBuf
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newFixture(t *testing.T, allow ...string) *fixture {
	return newFixtureListen(t, nil, allow...)
}

func newFixtureListen(t *testing.T, listens []string, allow ...string) *fixture {
	t.Helper()
	if !testutil.InNetns() {
		t.Skip("needs a private network namespace (root)")
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("0123456789abcdef-test-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	if len(allow) == 0 {
		allow = []string{dst.Addr().String()}
	}
	port := testutil.FreePort(t)
	f := &fixture{addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String(), dst: dst, log: &syncBuf{}}
	f.g, err = newGateway(&options{listen: f.addr, key: keyFile, allow: allow, allowListen: listens, connectTimeout: 5 * time.Second}, log.New(f.log, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	f.key = f.g.key
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.g.serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	testutil.WaitListening(t, f.addr, 5*time.Second)
	return f
}

func (f *fixture) dial(t *testing.T, dst string) (net.Conn, gateway.Reply) {
	t.Helper()
	c, r, err := gateway.Dial(f.addr, f.key, gateway.Request{Op: gateway.OpConnect, Dest: netip.MustParseAddrPort(dst), Timeout: 5 * time.Second}, 5*time.Second)
	if err != nil {
		t.Fatalf("gateway.Dial: %v", err)
	}
	return c, r
}

// TestRelayHalfClose: the node sends, shuts down writing; the destination
// reads to the end, answers the checksum and closes; the node reads the
// answer and the end. Then the relay is gone from the status.
func TestRelayHalfClose(t *testing.T) {
	f := newFixture(t)
	go func() {
		c, err := f.dst.Accept()
		if err != nil {
			return
		}
		h := sha256.New()
		io.Copy(h, c)
		c.Write([]byte(string(h.Sum(nil))))
		c.Close()
	}()
	c, r := f.dial(t, f.dst.Addr().String())
	if r.Errno != 0 || !r.Local.IsValid() {
		t.Fatalf("reply %+v", r)
	}
	data := bytes.Repeat([]byte("gateway "), 1<<20) // 8 MiB
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	want := sha256.Sum256(data)
	if err != nil || !bytes.Equal(got, want[:]) {
		t.Fatalf("answer %x, %v; want %x", got, err, want)
	}
	c.Close()
	waitNoRelays(t, f)
	if !strings.Contains(f.log.String(), ": closed; 8388608 bytes to the destination, 32 to the node") {
		t.Errorf("log:\n%s", f.log)
	}
}

func waitNoRelays(t *testing.T, f *fixture) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(f.g.snapshot().Connections) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("relays left: %+v", f.g.snapshot())
		}
	}
}

// TestRelayBackPressure: a destination that never reads holds back the
// node's writes; the gateway buffers a bounded amount (its pipe and the
// sockets' buffers), never everything the node offers.
func TestRelayBackPressure(t *testing.T) {
	f := newFixture(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := f.dst.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, _ := f.dial(t, f.dst.Addr().String())
	defer c.Close()
	dc := <-accepted
	defer dc.Close()
	chunk := make([]byte, 64<<10)
	var sent int
	for sent < 256<<20 {
		c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := c.Write(chunk)
		sent += n
		if err != nil {
			break
		}
	}
	if sent >= 256<<20 {
		t.Fatalf("the node wrote %d bytes to a destination that reads nothing", sent)
	}
	relayed := f.g.snapshot().Connections[0].ToDest
	t.Logf("node wrote %d bytes before blocking; the gateway passed %d to the destination's socket", sent, relayed)
	// Now the destination reads everything: nothing lost.
	c.(*net.TCPConn).CloseWrite()
	n, err := io.Copy(io.Discard, dc)
	if err != nil || int(n) != sent {
		t.Errorf("destination read %d, %v; want %d", n, err, sent)
	}
}

// TestResetBothWays: a reset by the destination reaches the node as a
// reset, and a reset by the node reaches the destination.
func TestResetBothWays(t *testing.T) {
	f := newFixture(t)
	for _, who := range []string{"destination", "node"} {
		accepted := make(chan *net.TCPConn, 1)
		go func() {
			c, err := f.dst.AcceptTCP()
			if err == nil {
				accepted <- c
			}
		}()
		c, _ := f.dial(t, f.dst.Addr().String())
		dc := <-accepted
		resetter, other := dc, c.(*net.TCPConn)
		if who == "node" {
			resetter, other = other, dc
		}
		resetter.Write([]byte("x"))
		time.Sleep(50 * time.Millisecond)
		resetter.SetLinger(0)
		resetter.Close()
		other.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(other)
		if !errors.Is(err, unix.ECONNRESET) {
			t.Errorf("%s reset: the other side read %v, want ECONNRESET", who, err)
		}
		other.Close()
		waitNoRelays(t, f)
	}
}

// TestRefusals: each refusal is its errno at the node and a log line here.
func TestRefusals(t *testing.T) {
	f := newFixture(t, "127.0.0.1:1-1000")
	req := func(key []byte, op gateway.Op, dst string) unix.Errno {
		t.Helper()
		c, r, err := gateway.Dial(f.addr, key, gateway.Request{Op: op, Dest: netip.MustParseAddrPort(dst)}, 5*time.Second)
		if err != nil {
			t.Fatalf("%v", err)
		}
		if c != nil {
			c.Close()
		}
		return r.Errno
	}
	for _, tt := range []struct {
		name string
		key  []byte
		op   gateway.Op
		dst  string
		want unix.Errno
		log  string
	}{
		{"wrong key", []byte("not the gateway's key!"), gateway.OpConnect, "127.0.0.1:1", unix.EACCES, "authentication failed"},
		{"not allowed", f.key, gateway.OpConnect, f.dst.Addr().String(), unix.EPERM, "destination not allowed"},
		{"refused", f.key, gateway.OpConnect, "127.0.0.1:1", unix.ECONNREFUSED, "connect: connection refused"},
		{"listen not allowed", f.key, gateway.OpListen, "127.0.0.1:80", unix.EPERM, "listen on 127.0.0.1:80 not allowed"},
		{"unknown op", f.key, 9, "127.0.0.1:80", unix.EOPNOTSUPP, "operation 9 not supported"},
	} {
		if got := req(tt.key, tt.op, tt.dst); got != tt.want {
			t.Errorf("%s: errno %v, want %v", tt.name, got, tt.want)
		}
		if !strings.Contains(f.log.String(), tt.log) {
			t.Errorf("%s: log lacks %q:\n%s", tt.name, tt.log, f.log)
		}
	}
	// Not the protocol at all: EACCES, and the gateway goes on serving.
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(make([]byte, gateway.RequestSize))
	b, _ := io.ReadAll(io.LimitReader(c, gateway.ChallengeSize+gateway.ReplySize))
	c.Close()
	if r, err := gateway.ParseReply(b[gateway.ChallengeSize:]); err != nil || r.Errno != unix.EACCES {
		t.Errorf("garbage request: reply %+v, %v", r, err)
	}
}

// TestListen: a node's LISTEN makes the gateway listen; a client's
// connection to the gateway reaches the node's listener prefixed by a
// notice naming the client, and is relayed both ways; closing the control
// connection stops the gateway's listener.
func TestListen(t *testing.T) {
	port := testutil.FreePort(t)
	f := newFixtureListen(t, []string{"*"})
	nodeLn, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer nodeLn.Close()
	req := gateway.Request{Op: gateway.OpListen, Dest: netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)),
		NodePort: uint16(nodeLn.Addr().(*net.TCPAddr).Port)}
	ctl, r, err := gateway.Dial(f.addr, f.key, req, 5*time.Second)
	if err != nil || r.Errno != 0 || r.Local.Port() != uint16(port) {
		t.Fatalf("listen: %+v, %v", r, err)
	}
	if st := f.g.snapshot(); len(st.Connections) != 1 || st.Connections[0].State != "LISTEN" {
		t.Errorf("status while listening: %+v", st)
	}
	client, err := net.Dial("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	nc, err := nodeLn.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b := make([]byte, gateway.NoticeSize)
	if _, err := io.ReadFull(nc, b); err != nil {
		t.Fatal(err)
	}
	n, err := gateway.ParseNotice(b)
	if err != nil || n.Remote.String() != client.LocalAddr().String() || n.Local.Port() != uint16(port) {
		t.Fatalf("notice %+v, %v; client %s", n, err, client.LocalAddr())
	}
	client.Write([]byte("ping"))
	if _, err := io.ReadFull(nc, b[:4]); err != nil || string(b[:4]) != "ping" {
		t.Fatalf("node read %q, %v", b[:4], err)
	}
	nc.Write([]byte("pong"))
	if _, err := io.ReadFull(client, b[:4]); err != nil || string(b[:4]) != "pong" {
		t.Fatalf("client read %q, %v", b[:4], err)
	}
	ctl.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if !strings.Contains(f.log.String(), "stopped listening") {
			if time.Now().After(deadline) {
				t.Fatalf("the gateway still listens after the node closed its control connection:\n%s", f.log)
			}
			continue
		}
		break
	}
	if _, err := net.Dial("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String()); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("connect after the node stopped listening: %v, want ECONNREFUSED", err)
	}
}

// TestStatusWhileConnecting asks for the status (snapshot) over and over
// while nodes connect through the gateway and are accepted: with -race
// (make test runs this package so), a relay's local address and leg
// written after it was listed raced with the status reading them.
func TestStatusWhileConnecting(t *testing.T) {
	f := newFixture(t)
	go func() {
		for {
			c, err := f.dst.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	stop := make(chan struct{})
	polled := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				polled <- n
				return
			default:
			}
			for _, c := range f.g.snapshot().Connections {
				_ = c.Local + c.Leg
			}
			n++
		}
	}()
	for i := 0; i < 20; i++ {
		c, r := f.dial(t, f.dst.Addr().String())
		if !r.Local.IsValid() {
			t.Errorf("dial %d: reply without the local address: %+v", i, r)
		}
		c.Close()
	}
	close(stop)
	if n := <-polled; n == 0 {
		t.Fatal("status never read")
	}
}
