package rdma

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/testutil"
	"github.com/osfproject/osf/sdp"
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
// will do; see README): listener replication through an shm companion,
// dial, the server's accept from the companion, a bidirectional stream
// with FIN, close, release; and the fallbacks' errors.
func TestDeviceConnection(t *testing.T) {
	testutil.SkipIfNoRDMA(t)
	ip := deviceAddr(t)
	tr, err := Start(Config{PollSpin: 20 * time.Microsecond, PID: unix.Getpid(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	addr := netip.AddrPortFrom(ip, 20000+uint16(rand.IntN(20000)))

	// Nobody listens: the peer's CM rejects.
	if _, err := tr.Dial(addr, netip.AddrPortFrom(ip, 40001), 4096, 2*time.Second); !errors.Is(err, sdp.ErrNoListener) {
		t.Fatalf("dial without a listener: %v, want ErrNoListener", err)
	}

	lfd, err := tr.Listen(addr, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	local := netip.AddrPortFrom(ip, 40002)
	cep, err := tr.Dial(addr, local, 64<<10, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := []unix.PollFd{{Fd: int32(lfd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(p, 2000); n != 1 {
		t.Fatal("no connection on the companion")
	}
	cfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	sep, err := tr.Accept(cfd, addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if sep.Remote != local || sep.Local != addr {
		t.Errorf("server endpoint %v <- %v, want %v <- %v", sep.Local, sep.Remote, addr, local)
	}
	if sep.Segment.Flags()&sdp.SegRDMA == 0 {
		t.Error("server segment not marked RDMA")
	}
	for _, ep := range []*sdp.Endpoint{cep, sep} {
		if err := unix.SetNonblock(ep.WakeFD, false); err != nil {
			t.Fatal(err)
		}
	}
	apps := [2]*fakeApp{
		{seg: cep.Segment, side: 0, peer: 1, fd: cep.WakeFD, wfd: cep.WakeTxFD, size: uint64(cep.Segment.RingBytes)},
		{seg: sep.Segment, side: 1, peer: 0, fd: sep.WakeFD, wfd: sep.WakeTxFD, size: uint64(sep.Segment.RingBytes)},
	}
	const total = 3 << 20
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for side := range 2 {
		out := make([]byte, total)
		for i := range out {
			out[i] = pattern(uint64(side), uint64(i))
		}
		check := func(pos int, b []byte) error {
			for i, c := range b {
				if c != pattern(uint64(1-side), uint64(pos+i)) {
					return fmt.Errorf("byte %d", pos+i)
				}
			}
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := apps[side].exchange(out, check, 30*time.Second, rand.New(rand.NewPCG(uint64(side), 9)))
			if err == nil && got != total {
				err = fmt.Errorf("received %d bytes", got)
			}
			if err != nil {
				errs <- fmt.Errorf("side %d: %w", side, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	apps[0].close(false)
	apps[1].close(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		_ = tr.eng.Do(func() { n = len(tr.eng.streams) + len(tr.conns) })
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
	_ = tr.eng.Do(func() {
		if len(tr.listeners) != 0 {
			t.Errorf("%d RDMA listeners left", len(tr.listeners))
		}
	})
}
