package shm

/*
#cgo CFLAGS: -O2 -std=gnu11 -D_GNU_SOURCE -fno-strict-aliasing
#include <errno.h>
#include "../sdp/setup.h"

// shm_companion connects to the first trusted companion serving a:port
// (osf_dial_companion, with a census taken now): the socket, or -1 with
// *why (OSF_DIAL_*) and *err.
static int shm_companion(const uint8_t *a, uint16_t port, int gateway, int *why, int *err)
{
	struct osf_census c;
	struct osf_dial d;
	int s;

	memset(&d, 0, sizeof(d));
	memcpy(d.addr, a, 16);
	d.port = port;
	d.local = osf_addr_local(a);
	d.gateway = gateway;
	if (osf_census_read(port, &c) == 0)
		d.census = &c;
	s = osf_dial_companion(&d);
	*why = d.why;
	*err = errno;
	return s;
}

static void listen_name(const uint8_t *a, uint16_t port, int v6only, char *out)
{
	osf_listen_name(a, port, v6only, out, OSF_NAME_MAX);
}

struct dial_names {
	char name[3][OSF_NAME_MAX];
	int wild[3];
	int n;
};

static void dial_names(const uint8_t *a, uint16_t port, int local, struct dial_names *d)
{
	d->n = osf_dial_names(a, port, local, d->name, d->wild);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs/devroute"
	"golang.org/x/sys/unix"
)

// Transport sets up offloaded connections between processes of this host
// with libosf.so's own set-up (sdp/setup.h: the companion, whom to trust,
// the segment, the hello and its checks, one implementation in C); every
// call is non-blocking or bounded by the timeout it is given.
type Transport struct {
	// Gateway: the dialed companion is an osfgw gateway's, which holds no
	// kernel TCP listener in the node's namespace: a companion of root's
	// or of this process's user is trusted too.
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
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@" + ListenName(addr, v6only)}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shm: bind companion of %s: %w", addr, err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shm: listen companion of %s: %w", addr, err)
	}
	return fd, nil
}

// Dial connects to the companion serving dst, creates the segment and
// sends the hello, as libosf.so's connect does (osf_dial_companion,
// osf_seg_new, osf_hello_send). It never waits: a companion either takes
// the connection now or the caller uses kernel TCP (sdp.ErrNoListener,
// sdp.ErrBacklog). It sends nothing to a companion whose owner does not
// hold a kernel TCP listener for dst (a squatter of the name), but moves
// on to the next name (t.Gateway: see Transport). The timeout is unused:
// nothing here waits.
func (t Transport) Dial(dst, local netip.AddrPort, ringBytes uint32, timeout time.Duration) (*sdp.Endpoint, error) {
	return t.DialFirst(dst, local, ringBytes, nil)
}

// DialFirst is Dial with first already in the client's send ring when the
// server sees the hello (osfgw puts a delivery's notice there, so that the
// node's accept finds it without waiting).
func (t Transport) DialFirst(dst, local netip.AddrPort, ringBytes uint32, first []byte) (*sdp.Endpoint, error) {
	if !sdp.RingSizeOK(ringBytes) {
		return nil, fmt.Errorf("%w: %d", sdp.ErrRingSize, ringBytes)
	}
	fd, err := connectCompanion(dst, t.Gateway)
	if err != nil {
		return nil, err
	}
	var client, server [28]C.uint8_t
	putSockaddr(&client, local)
	putSockaddr(&server, dst)
	var segFD C.int
	var wtx [2]C.int
	m, err := C.osf_seg_parts(C.uint32_t(ringBytes), &client[0], &server[0], C.int32_t(os.Getpid()), &segFD, &wtx[0])
	if m == nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: segment: %w", sdp.ErrHandshake, err)
	}
	ep := &sdp.Endpoint{WakeFD: fd, WakeTxFD: int(wtx[0]), Segment: sdp.MappedSegment(m, int(segFD), ringBytes),
		Side: sdp.SideClient, Local: local, Remote: dst}
	fail := func(err error) (*sdp.Endpoint, error) {
		ep.Close()
		unix.Close(int(wtx[1]))
		return nil, err
	}
	if err := ep.WriteMsg(first); err != nil {
		return fail(err)
	}
	if r, err := C.osf_hello_send(C.int(fd), C.uint32_t(ringBytes), 0, &client[0], &server[0], segFD, wtx[1]); r < 0 {
		return fail(fmt.Errorf("%w: send hello: %w", sdp.ErrHandshake, err))
	}
	unix.Close(int(wtx[1]))
	return ep, nil
}

// connectCompanion returns the connected socket of the first trusted
// companion that serves dst (osf_dial_companion, with a census of the
// kernel TCP listeners on dst's port taken now in the calling thread's
// network namespace).
func connectCompanion(dst netip.AddrPort, gateway bool) (int, error) {
	a := dst.Addr().WithZone("").As16()
	var why, cerr C.int
	fd := C.shm_companion((*C.uint8_t)(unsafe.Pointer(&a[0])), C.uint16_t(dst.Port()), cbool(gateway), &why, &cerr)
	switch {
	case fd >= 0:
		return int(fd), nil
	case why == C.OSF_DIAL_BACKLOG:
		return -1, sdp.ErrBacklog
	case why == C.OSF_DIAL_RESOURCE:
		return -1, fmt.Errorf("%w: socket: %w", sdp.ErrHandshake, unix.Errno(cerr))
	}
	return -1, sdp.ErrNoListener
}

// Accept reads the hello from a connection accepted on a companion
// listener, validates and maps the segment that came with it (everything
// libosf.so's accept checks: osf_hello_take), and returns the server's
// endpoint. It waits at most timeout for the hello (a client sends it
// right after connecting). On error connFD is left open for the caller to
// close. A client may make it map rings of up to sdp.MaxRing.
func (Transport) Accept(connFD int, listen netip.AddrPort, timeout time.Duration) (*sdp.Endpoint, error) {
	if err := waitReadable(connFD, timeout); err != nil {
		return nil, err
	}
	var in C.struct_osf_hello_in
	var why [160]C.char
	switch rc := C.osf_hello_take(C.int(connFD), C.uint32_t(sdp.MaxRing), &in, &why[0], C.size_t(len(why))); {
	case rc == C.EAGAIN:
		return nil, fmt.Errorf("%w: no hello", sdp.ErrHandshake)
	case rc != 0 && why[0] != 0:
		return nil, fmt.Errorf("%w: %s", sdp.ErrHandshake, C.GoString(&why[0]))
	case rc != 0:
		return nil, fmt.Errorf("%w: read hello: %w", sdp.ErrHandshake, unix.Errno(rc))
	}
	ring := uint32(in.h.ring_bytes)
	seg := sdp.MappedSegment(in.seg, int(in.seg_fd), ring)
	seg.SetServerPID(os.Getpid())
	client, _ := sdp.Sockaddr(C.GoBytes(unsafe.Pointer(&in.h.client[0]), 28))
	server, _ := sdp.Sockaddr(C.GoBytes(unsafe.Pointer(&in.h.server[0]), 28))
	return &sdp.Endpoint{
		WakeFD:   connFD,
		WakeTxFD: int(in.wake_tx_fd),
		Segment:  seg,
		Side:     sdp.SideServer,
		Local:    AsFamily(netip.AddrPortFrom(server.Addr(), listen.Port()), listen.Addr()),
		Remote:   AsFamily(client, listen.Addr()),
	}, nil
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

// IsLocal reports whether a connection to a stays on this host: loopback,
// unspecified, or an address of an interface (osf_addr_local, libosf.so's
// own rule). policy.IsLocal is the same rule in Go for osfrun, which is
// built without cgo; FuzzIsLocalAgree holds the two together.
func IsLocal(a netip.Addr) bool {
	b := a.WithZone("").As16()
	return C.osf_addr_local((*C.uint8_t)(unsafe.Pointer(&b[0]))) != 0
}

// ListenName is the abstract socket name (without the leading NUL) of the
// companion of a listener bound to addr (sdp/names.h). v6only is the
// IPV6_V6ONLY option of an IPv6 listener.
func ListenName(addr netip.AddrPort, v6only bool) string {
	a := addr.Addr().WithZone("").As16()
	var out [C.OSF_NAME_MAX]C.char
	C.listen_name((*C.uint8_t)(unsafe.Pointer(&a[0])), C.uint16_t(addr.Port()), cbool(v6only), &out[0])
	return C.GoString(&out[0])
}

// DialNames returns, in order, the companion names that could serve a
// connection to dst (sdp/names.h): a listener bound to dst itself, and,
// when dst is an address of this host, wildcard listeners of its family
// and dual-stack ones.
func DialNames(dst netip.AddrPort, local bool) []string {
	a := dst.Addr().WithZone("").As16()
	var d C.struct_dial_names
	C.dial_names((*C.uint8_t)(unsafe.Pointer(&a[0])), C.uint16_t(dst.Port()), cbool(local), &d)
	names := make([]string, 0, int(d.n))
	for i := 0; i < int(d.n); i++ {
		names = append(names, C.GoString(&d.name[i][0]))
	}
	return names
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// putSockaddr writes ap into dst, a C struct's 28-byte sockaddr (C.uint8_t
// is a byte).
func putSockaddr(dst *[28]C.uint8_t, ap netip.AddrPort) {
	sdp.PutSockaddr((*[28]byte)(unsafe.Pointer(dst))[:], ap)
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
