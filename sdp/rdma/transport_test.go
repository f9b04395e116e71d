package rdma

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/testutil"
	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/shm"
	"github.com/osfproject/osf/verbs"
)

func TestStartWithoutDevice(t *testing.T) {
	if devs, err := verbs.Devices(); err == nil {
		t.Skipf("this machine has %d RDMA devices", len(devs))
	}
	tr, err := Start(Config{})
	if err == nil {
		tr.Stop()
		t.Fatal("Start succeeded without a device")
	}
	if !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("Start: %v, want ErrNoDevice", err)
	}
	if InheritedState() {
		t.Error("InheritedState in a process that never opened a device")
	}
}

// deviceAddr returns an IPv4 address of an interface that an active RDMA
// port serves (soft-RoCE's netdev, for one).
func deviceAddr(t *testing.T) netip.Addr {
	t.Helper()
	devs, err := verbs.Devices()
	if err != nil {
		t.Skip(err)
	}
	for _, d := range devs {
		for _, p := range d.Ports {
			if !p.State.Active() {
				continue
			}
			for _, nd := range p.Netdevs {
				ifi, err := net.InterfaceByName(nd)
				if err != nil {
					continue
				}
				addrs, _ := ifi.Addrs()
				for _, a := range addrs {
					if ipn, ok := a.(*net.IPNet); ok {
						if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() {
							return ip.Unmap()
						}
					}
				}
			}
		}
	}
	t.Skip("no IPv4 address on an interface served by an active RDMA port")
	return netip.Addr{}
}

// TestDeviceConnection runs a connection through a real device (soft-RoCE
// will do; see README): see checkConnection.
func TestDeviceConnection(t *testing.T) {
	tr, ip := startDevice(t)
	checkConnection(t, tr, ip, func() (conns, listeners int) {
		_ = tr.eng.Do(func() { conns, listeners = len(tr.eng.streams)+len(tr.conns), len(tr.listeners) })
		return conns, listeners
	})
}

// startDevice starts a transport on this host's device (stopped at the
// test's end) and returns it with an address the device serves; it skips
// without a device.
func startDevice(t *testing.T) (*Transport, netip.Addr) {
	t.Helper()
	testutil.SkipIfNoRDMA(t)
	ip := deviceAddr(t)
	tr, err := Start(Config{PollSpin: 20 * time.Microsecond, PID: unix.Getpid(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	return tr, ip
}

// startServerClient starts two transports on this host's device, a
// server listening (listenBoth) on a random port of an address the device
// serves and a client, as two processes; it returns the client, the
// server's companion listener (closed at the test's end) and its address.
func startServerClient(t *testing.T) (cli *Transport, lfd int, addr netip.AddrPort) {
	t.Helper()
	srv, ip := startDevice(t)
	cli, _ = startDevice(t)
	addr = netip.AddrPortFrom(ip, 20000+uint16(rand.IntN(20000)))
	lfd = listenBoth(t, srv, addr)
	t.Cleanup(func() { unix.Close(lfd) })
	return cli, lfd, addr
}

// acceptBoth takes the connection the companion listener lfd (of addr) has
// for the client endpoint cep, and returns the two applications' views of
// it, the client's first.
func acceptBoth(t *testing.T, lfd int, addr netip.AddrPort, cep *sdp.Endpoint) [2]*fakeApp {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(lfd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 5000)
	for i := 0; errors.Is(err, unix.EINTR) && i < 100; i++ { // the runtime's SIGURG
		n, err = unix.Poll(p, 5000)
	}
	if n != 1 {
		t.Fatalf("no connection on the companion (poll: %d, %v)", n, err)
	}
	cfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	sep, err := shm.Transport{}.Accept(cfd, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if sep.Remote != cep.Local || sep.Local != addr {
		t.Errorf("server endpoint %v <- %v, want %v <- %v", sep.Local, sep.Remote, addr, cep.Local)
	}
	for _, ep := range []*sdp.Endpoint{cep, sep} {
		if ep.Segment.Flags()&sdp.SegRDMA == 0 {
			t.Errorf("side %d segment not marked RDMA", ep.Side)
		}
		if ep.WakeFD < 0 || ep.WakeTxFD < 0 {
			t.Fatalf("endpoint without both wake sockets: %+v", ep)
		}
		if err := unix.SetNonblock(ep.WakeFD, false); err != nil {
			t.Fatal(err)
		}
	}
	return [2]*fakeApp{
		{seg: cep.Segment, side: 0, peer: 1, fd: cep.WakeFD, wfd: cep.WakeTxFD, size: uint64(cep.Segment.RingBytes)},
		{seg: sep.Segment, side: 1, peer: 0, fd: sep.WakeFD, wfd: sep.WakeTxFD, size: uint64(sep.Segment.RingBytes)},
	}
}

// listenBoth makes an shm companion listener on addr and replicates it
// over tr; it returns the companion's fd.
func listenBoth(t *testing.T, tr connTransport, addr netip.AddrPort) int {
	t.Helper()
	lfd, err := shm.Transport{}.Listen(addr, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Replicate(addr, false, 16); err != nil {
		unix.Close(lfd)
		t.Fatal(err)
	}
	return lfd
}

// TestSimConnection runs the same through the software stand-in.
func TestSimConnection(t *testing.T) {
	s, err := StartSim(Config{PollSpin: 20 * time.Microsecond, PID: unix.Getpid(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	checkConnection(t, s, netip.MustParseAddr("127.0.0.1"), func() (conns, listeners int) {
		_ = s.eng.Do(func() { conns, listeners = len(s.eng.streams), len(s.listeners) })
		return conns, listeners
	})
}

// connTransport is what checkConnection uses of Transport or Sim.
type connTransport interface {
	Dial(dst, local netip.AddrPort, ringBytes uint32, timeout time.Duration) (*sdp.Endpoint, error)
	Replicate(addr netip.AddrPort, v6only bool, backlog int) error
}

// checkConnection runs connections on ip through tr: listener replication
// through an shm companion, dial, the server's accept from the companion
// (an endpoint with both wake sockets), a bidirectional stream with FIN,
// close, release; and the fallbacks' errors, without a listener and after
// the application closed it. open counts the connections and RDMA
// listeners tr still has.
func checkConnection(t *testing.T, tr connTransport, ip netip.Addr, open func() (conns, listeners int)) {
	addr := netip.AddrPortFrom(ip, 20000+uint16(rand.IntN(20000)))

	// Nobody listens: the peer refuses.
	if _, err := tr.Dial(addr, netip.AddrPortFrom(ip, 40001), 4096, 2*time.Second); !errors.Is(err, sdp.ErrNoListener) {
		t.Fatalf("dial without a listener: %v, want ErrNoListener", err)
	}

	lfd := listenBoth(t, tr, addr)
	defer unix.Close(lfd)
	local := netip.AddrPortFrom(ip, 40002)
	cep, err := tr.Dial(addr, local, 64<<10, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	apps := acceptBoth(t, lfd, addr, cep)
	exchangeBoth(t, apps, 3<<20, 9, 30*time.Second)
	apps[0].close(false)
	apps[1].close(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := open()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d streams or connections left after both sides closed", n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The application closes its listener: the next request is refused
	// and the RDMA listener goes away.
	unix.Close(lfd)
	if _, err := tr.Dial(addr, local, 4096, 2*time.Second); !errors.Is(err, sdp.ErrNoListener) {
		t.Fatalf("dial after the listener closed: %v, want ErrNoListener", err)
	}
	if _, n := open(); n != 0 {
		t.Errorf("%d RDMA listeners left", n)
	}
}

// TestRouteCache: DeviceFor's answers are reused (a connect asks each
// time), per address.
func TestRouteCache(t *testing.T) {
	var c routeCache
	asked := map[netip.Addr]int{}
	find := func(a netip.Addr) (string, bool, string) {
		asked[a]++
		if a.Is4() {
			return "rxe0 port 1", true, ""
		}
		return "", false, "no route"
	}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")
	for i := 0; i < 3; i++ {
		if dev, ok, _ := c.get(a, find); !ok || dev != "rxe0 port 1" {
			t.Fatalf("get(%s) = %q, %v", a, dev, ok)
		}
		if _, ok, why := c.get(b, find); ok || why != "no route" {
			t.Fatalf("get(%s) = %v, %q", b, ok, why)
		}
	}
	if asked[a] != 1 || asked[b] != 1 {
		t.Errorf("asked %v, want each address once", asked)
	}
}

// TestRouteCacheRenews: an answer used in the second half of its life is
// renewed in the background (the caller gets the current one at once);
// past routeTTL without renewal, the caller asks itself.
func TestRouteCacheRenews(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	c := routeCache{clock: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	asked := make(chan string, 10)
	answer := "rxe0 port 1"
	find := func(netip.Addr) (string, bool, string) {
		mu.Lock()
		defer mu.Unlock()
		asked <- answer
		return answer, true, ""
	}
	a := netip.MustParseAddr("10.0.0.1")
	if dev, _, _ := c.get(a, find); dev != "rxe0 port 1" || len(asked) != 1 {
		t.Fatalf("first get: %q, asked %d times", dev, len(asked))
	}
	<-asked
	mu.Lock()
	answer = "rxe1 port 1"
	mu.Unlock()
	advance(routeTTL * 3 / 4)
	if dev, _, _ := c.get(a, find); dev != "rxe0 port 1" {
		t.Fatalf("get in the second half: %q, want the current answer", dev)
	}
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the answer was not renewed")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if dev, _, _ := c.get(a, find); dev == "rxe1 port 1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed answer is not used")
		}
		time.Sleep(time.Millisecond)
	}
	if len(asked) != 0 {
		t.Errorf("asked %d more times, want none", len(asked))
	}
	advance(routeTTL) // past the renewed answer's life: asked in the call
	c.get(a, find)
	if len(asked) != 1 {
		t.Errorf("an expired answer: asked %d times, want 1", len(asked))
	}
}

// TestDeviceSpare: once a connection was set up, the transport keeps a
// spare (a registered segment) ready; the next dial or accept with the
// same ring size takes it, and its connection carries bytes both ways.
func TestDeviceSpare(t *testing.T) {
	tr, ip := startDevice(t)
	addr := netip.AddrPortFrom(ip, 20000+uint16(rand.IntN(20000)))
	lfd := listenBoth(t, tr, addr)
	defer unix.Close(lfd)
	spares := func() (ready bool, taken int) {
		tr.spares.mu.Lock()
		defer tr.spares.mu.Unlock()
		return tr.spares.ready != nil, tr.spares.taken
	}
	for i := 0; i < 4; i++ {
		for j := 0; i > 0 && j < 1000; j++ {
			if ready, _ := spares(); ready {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cep, err := tr.Dial(addr, netip.AddrPortFrom(ip, 40003), 64<<10, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		apps := acceptBoth(t, lfd, addr, cep)
		exchangeBoth(t, apps, 256<<10, uint64(20+i), 30*time.Second)
		apps[0].close(false)
		apps[1].close(false)
	}
	if _, n := spares(); n < 2 {
		t.Errorf("%d of 8 set-ups took a spare, want at least 2", n)
	}
}

// TestDeviceSpareQP: a process that only dials keeps its spare with a
// connection manager id bound to the dial's source address and the QP on
// it; the next dial from that address resolves its destination on that id
// and uses that QP (not made on the dial's path), and its connection
// carries bytes both ways.
func TestDeviceSpareQP(t *testing.T) {
	cli, lfd, addr := startServerClient(t)
	ip := addr.Addr()
	ready := func() bool {
		cli.spares.mu.Lock()
		defer cli.spares.mu.Unlock()
		return cli.spares.ready != nil && cli.spares.ready.qp != nil
	}
	for i := 0; i < 3; i++ {
		for j := 0; i > 0 && j < 1000 && !ready(); j++ {
			time.Sleep(10 * time.Millisecond)
		}
		if i > 0 && !ready() {
			t.Fatalf("dial %d: no spare with a QP after 10 s", i)
		}
		cep, err := cli.Dial(addr, netip.AddrPortFrom(ip, 40004), 64<<10, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		apps := acceptBoth(t, lfd, addr, cep)
		exchangeBoth(t, apps, 256<<10, uint64(40+i), 30*time.Second)
		apps[0].close(false)
		apps[1].close(false)
	}
	cli.spares.mu.Lock()
	n := cli.spares.withQP
	cli.spares.mu.Unlock()
	if n != 2 {
		t.Errorf("%d of 2 dials used the spare's QP", n)
	}
}
