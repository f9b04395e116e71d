package shm

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/osfproject/osf/sdp"
	"golang.org/x/sys/unix"
)

// tcpListen listens on 127.0.0.1:port (0: any) and returns the fd and port.
func tcpListen(t *testing.T, port uint16) (int, uint16) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 4); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, uint16(sa.(*unix.SockaddrInet4).Port)
}

// TestDialTrustsOnlyTheListenersOwner: the Go dialers (the core's, osfgw's
// deliveries) send nothing to a companion whose owner holds no kernel TCP
// listener there, as libosf.so's connect (tests/TestCompanionSquatter);
// a gateway's companion may be root's or the dialer's own user's instead.
func TestDialTrustsOnlyTheListenersOwner(t *testing.T) {
	lfd, port := tcpListen(t, 0)
	unix.Close(lfd) // the port now has no kernel listener
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	cfd, err := Transport{}.Listen(dst, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cfd)

	if fd, err := connectCompanion(dst, false); !errors.Is(err, sdp.ErrNoListener) {
		if err == nil {
			unix.Close(fd)
		}
		t.Fatalf("companion without a kernel listener behind it: got fd %d, %v; want ErrNoListener", fd, err)
	}
	if fd, err := connectCompanion(dst, true); err != nil {
		t.Fatalf("a gateway's companion of this user: %v", err)
	} else {
		unix.Close(fd)
	}
	lfd, _ = tcpListen(t, port)
	defer unix.Close(lfd)
	if fd, err := connectCompanion(dst, false); err != nil {
		t.Fatalf("companion whose owner holds the kernel listener: %v", err)
	} else {
		unix.Close(fd)
	}
}
