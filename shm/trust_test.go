package shm

import (
	"errors"
	"net/netip"
	"os"
	"runtime"
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
// deliveries), which run libosf.so's own C (osf_dial_companion), send
// nothing to a companion whose owner holds no kernel TCP listener there
// (tests/TestCompanionSquatter for libosf.so's connect); a gateway's
// companion may be root's or the dialer's own user's instead.
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

// listenAs binds the companion of dst with this thread's effective uid
// set to uid for the call (SO_PEERCRED reports who called listen), and
// returns its fd.
func listenAs(t *testing.T, dst netip.AddrPort, uid int) int {
	t.Helper()
	runtime.LockOSThread()
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		runtime.UnlockOSThread()
		t.Skipf("setresuid: %v", e)
	}
	fd, err := Transport{}.Listen(dst, 4, false)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)); e != 0 {
		t.Fatalf("setresuid back: %v", e) // the thread dies locked
	}
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestDialTrustsNoOtherOwner: a kernel TCP listener is there, but the
// companion of its address belongs to another user (a squatter that bound
// the name first): neither a node's dial nor a gateway's sends it
// anything.
func TestDialTrustsNoOtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind a companion as another user")
	}
	lfd, port := tcpListen(t, 0)
	defer unix.Close(lfd)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	cfd := listenAs(t, dst, 65534)
	defer unix.Close(cfd)
	for _, gateway := range []bool{false, true} {
		if fd, err := connectCompanion(dst, gateway); !errors.Is(err, sdp.ErrNoListener) {
			if err == nil {
				unix.Close(fd)
			}
			t.Fatalf("gateway %v: companion of uid 65534 before root's kernel listener: got fd %d, %v; want ErrNoListener",
				gateway, fd, err)
		}
	}
	if _, err := (Transport{}).Dial(dst, dst, 4096, 0); !errors.Is(err, sdp.ErrNoListener) {
		t.Fatalf("Dial to a squatted companion: %v, want ErrNoListener", err)
	}
}
