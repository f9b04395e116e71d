package shm

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs/devroute"
	"golang.org/x/sys/unix"
)

// Transport sets up offloaded connections between processes of this host;
// every call is non-blocking or bounded by the timeout it is given.
type Transport struct {
	// Gateway: the dialed companion is an osfgw gateway's, which holds no
	// kernel TCP listener in the node's namespace: a companion of root's
	// or of this process's user is trusted too (see trusted).
	Gateway bool
}

// Name returns "shm".
func (Transport) Name() string { return "shm" }

// Listen binds and listens on the companion of a listener bound to addr;
// the returned fd is non-blocking and close-on-exec. It fails with
// EADDRINUSE when another listener already serves the address (for
// example a second SO_REUSEPORT socket); that one then serves offloaded
// clients alone.
func (Transport) Listen(addr netip.AddrPort, backlog int, v6only bool) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("shm: listen: %w", err)
	}
	if err := unix.Bind(fd, abstract(ListenName(addr, v6only))); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shm: bind companion of %s: %w", addr, err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shm: listen companion of %s: %w", addr, err)
	}
	return fd, nil
}

func abstract(name string) *unix.SockaddrUnix { return &unix.SockaddrUnix{Name: "@" + name} }

// Dial connects to the companion serving dst, creates the segment and
// sends the hello. It never waits: a companion either takes the
// connection now or the caller uses kernel TCP. As the C connect
// (preload/setup_connect.c), it sends nothing to a companion whose owner
// does not hold a kernel TCP listener for dst (a squatter of the name),
// but moves on to the next name (t.Gateway: see Transport).
func (t Transport) Dial(dst, local netip.AddrPort, ringBytes uint32, timeout time.Duration) (*sdp.Endpoint, error) {
	return t.DialFirst(dst, local, ringBytes, nil)
}

// DialFirst is Dial with first already in the client's send ring when the
// server sees the hello (osfgw puts a delivery's notice there, so that the
// node's accept finds it without waiting).
func (t Transport) DialFirst(dst, local netip.AddrPort, ringBytes uint32, first []byte) (*sdp.Endpoint, error) {
	fd, err := connectCompanion(dst, t.Gateway)
	if err != nil {
		return nil, err
	}
	seg, err := sdp.CreateSegment(ringBytes)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	seg.InitHeader(local, dst, os.Getpid())
	if len(first) > 0 {
		if err := seg.WriteMsg(sdp.SideClient, fd, first); err != nil {
			seg.Close()
			unix.Close(fd)
			return nil, err
		}
	}
	// The writers' wake socket: this end here, the other to the server.
	wtx, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		seg.Close()
		unix.Close(fd)
		return nil, fmt.Errorf("%w: writers' wake socket: %w", sdp.ErrHandshake, err)
	}
	hello := sdp.Hello{RingBytes: ringBytes, Client: local, Server: dst}
	err = unix.Sendmsg(fd, hello.Marshal(), unix.UnixRights(seg.FD, wtx[1]), nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
	unix.Close(wtx[1])
	if err != nil {
		seg.Close()
		unix.Close(fd)
		unix.Close(wtx[0])
		return nil, fmt.Errorf("%w: send hello: %w", sdp.ErrHandshake, err)
	}
	return &sdp.Endpoint{WakeFD: fd, WakeTxFD: wtx[0], Segment: seg, Side: sdp.SideClient, Local: local, Remote: dst}, nil
}

// connectCompanion tries each name that could serve dst and returns the
// first trusted companion's connection; an untrusted one is closed before
// it gets anything.
func connectCompanion(dst netip.AddrPort, gateway bool) (int, error) {
	full := false
	for _, n := range dialNames(dst, policy.IsLocal(dst.Addr())) {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return -1, fmt.Errorf("%w: socket: %w", sdp.ErrHandshake, err)
		}
		err = unix.Connect(fd, abstract(n.name))
		if err == nil && trusted(fd, dst, n.wild, gateway) {
			return fd, nil
		}
		unix.Close(fd)
		if errors.Is(err, unix.EAGAIN) {
			full = true
		}
	}
	if full {
		return -1, sdp.ErrBacklog
	}
	return -1, sdp.ErrNoListener
}

// Accept reads the hello from a connection accepted on a companion
// listener, validates and maps the segment that came with it, and returns
// the server's endpoint. It waits at most timeout for the hello (a client
// sends it right after connecting). On error connFD is left open for the
// caller to close.
func (Transport) Accept(connFD int, listen netip.AddrPort, timeout time.Duration) (*sdp.Endpoint, error) {
	if err := waitReadable(connFD, timeout); err != nil {
		return nil, err
	}
	buf := make([]byte, sdp.SizeofHello+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(connFD, buf, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
	if err != nil {
		return nil, fmt.Errorf("%w: read hello: %w", sdp.ErrHandshake, err)
	}
	fds := rights(oob[:oobn])
	if len(fds) != 2 {
		closeAll(fds)
		return nil, fmt.Errorf("%w: hello carried %d fds, want 2", sdp.ErrHandshake, len(fds))
	}
	if err := checkWakeSocket(fds[1]); err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("%w: %w", sdp.ErrHandshake, err)
	}
	h, err := sdp.DecodeHello(buf[:n])
	if err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("%w: %w", sdp.ErrHandshake, err)
	}
	seg, err := sdp.OpenSegment(fds[0], h.RingBytes)
	if err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("%w: %w", sdp.ErrHandshake, err)
	}
	seg.SetServerPID(os.Getpid())
	return &sdp.Endpoint{
		WakeFD:   connFD,
		WakeTxFD: fds[1],
		Segment:  seg,
		Side:     sdp.SideServer,
		Local:    AsFamily(netip.AddrPortFrom(h.Server.Addr(), listen.Port()), listen.Addr()),
		Remote:   AsFamily(h.Client, listen.Addr()),
	}, nil
}

// checkWakeSocket accepts only a connected AF_UNIX stream socket as the
// writers' wake socket: the C data path sleeps in recv on it.
func checkWakeSocket(fd int) error {
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_STREAM {
		return fmt.Errorf("writers' wake socket: not a stream socket (%v)", err)
	}
	if d, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || d != unix.AF_UNIX {
		return fmt.Errorf("writers' wake socket: not AF_UNIX (%v)", err)
	}
	return nil
}

func waitReadable(fd int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms < 0 {
			return fmt.Errorf("%w: no hello within %v", sdp.ErrHandshake, timeout)
		}
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: wait for hello: %w", sdp.ErrHandshake, err)
		}
		if n > 0 {
			return nil
		}
	}
}

func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// AsFamily returns ap in the family of a socket whose address is like: an
// IPv4 address is mapped into IPv6 for an IPv6 socket (a dual-stack
// listener reports IPv4 clients as ::ffff:a.b.c.d, and an IPv6 client
// connected to ::ffff:a.b.c.d reports its own address the same way), and
// a v4-mapped address is unmapped for an IPv4 socket.
func AsFamily(ap netip.AddrPort, like netip.Addr) netip.AddrPort {
	a := ap.Addr()
	switch {
	case like.Is4() && a.Is4In6():
		a = a.Unmap()
	case like.Is6() && a.Is4():
		a = netip.AddrFrom16(a.As16())
	}
	return netip.AddrPortFrom(a, ap.Port())
}

// SourceFor returns the local address the kernel would use to reach dst,
// with a synthesized client port (see ClientPort).
func SourceFor(dst netip.AddrPort) (netip.AddrPort, error) {
	a, err := devroute.KernelSource(dst.Addr())
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("shm: %w", err)
	}
	return netip.AddrPortFrom(a, ClientPort()), nil
}

func sockaddr(ap netip.AddrPort) (int, unix.Sockaddr) {
	if ap.Addr().Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

var portSeq atomic.Uint32

// ClientPort returns the port an offloaded client reports as its own: no
// kernel socket holds one, so it is synthesized in the ephemeral range,
// stable for the connection and distinct among this process's connections
// until the range wraps (other processes' may coincide).
func ClientPort() uint16 {
	lo, hi := ephemeralRange()
	span := uint32(hi - lo + 1)
	seq := portSeq.Add(1)
	return lo + uint16((uint32(os.Getpid())*2654435761+seq*40503)%span)
}

func ephemeralRange() (uint16, uint16) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	var lo, hi int
	if err == nil {
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > 0 && hi <= 65535 && lo <= hi {
			return uint16(lo), uint16(hi)
		}
	}
	return 32768, 60999
}
