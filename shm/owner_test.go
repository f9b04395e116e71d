package shm

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/osfproject/osf/sdp"
	"golang.org/x/sys/unix"
)

// squat binds and listens on the companion name for dst, as a process that
// holds no kernel TCP listener there could; it returns the fd.
func squat(t *testing.T, dst netip.AddrPort) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, abstract(DialNames(dst, true)[0])); err != nil {
		t.Fatalf("bind companion name: %v", err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestDialTrustsOnlyTheListenersOwner: Dial sends its hello (the segment
// the client will write into) only to a companion whose owner holds a
// kernel TCP listener for the address, as the C connect does; a squatter
// on the name gets nothing and the client falls back to kernel TCP.
func TestDialTrustsOnlyTheListenersOwner(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	local := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 40000)

	// A kernel listener of this uid: its companion is trusted.
	sq := squat(t, dst)
	ep, err := Transport{}.Dial(dst, local, 64<<10, 0)
	if err != nil {
		t.Fatalf("Dial with the owner's kernel listener there: %v", err)
	}
	ep.Close()
	if nfd, _, err := unix.Accept(sq); err == nil {
		unix.Close(nfd)
	}

	// No kernel listener any more: the same companion is a squatter.
	l.Close()
	_, err = Transport{}.Dial(dst, local, 64<<10, 0)
	if !errors.Is(err, sdp.ErrNoListener) {
		t.Errorf("Dial to a companion nobody's kernel listener stands for: %v, want %v", err, sdp.ErrNoListener)
	}
	nfd, _, err := unix.Accept(sq)
	if err == nil {
		defer unix.Close(nfd)
		var b [64]byte
		oob := make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := unix.Recvmsg(nfd, b[:], oob, unix.MSG_DONTWAIT)
		if err == nil && (n > 0 || oobn > 0) {
			t.Errorf("the squatter received a hello (%d bytes, %d of fds)", n, oobn)
		}
	}
}
