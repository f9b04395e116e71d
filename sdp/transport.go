package sdp

import (
	"errors"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Errors a transport returns when a connection cannot be offloaded; the
// core maps each to a fallback reason (internal/policy.Reason).
var (
	// ErrNoListener: nothing at the peer accepts offloaded connections for
	// the address (a peer without osf, or nobody listening).
	ErrNoListener = errors.New("sdp: no offload listener at the peer")
	// ErrBacklog: the peer's offload listener has a full backlog.
	ErrBacklog = errors.New("sdp: offload listener backlog full")
	// ErrHandshake: the peer answered but the handshake failed.
	ErrHandshake = errors.New("sdp: handshake failed")
	// ErrNotLocal: the address is not on this host.
	ErrNotLocal = errors.New("sdp: address is not on this host")
)

// Endpoint is one side of an offloaded connection as the C data path needs
// it: a kernel-pollable wake socket (it becomes the application's fd; the
// tokens that wake readers and the end of the connection travel on it,
// never data), the writers' wake socket (tokens that wake writers: a
// separate queue, so that a reader never takes a writer's token) and the
// mapped segment holding the rings.
type Endpoint struct {
	WakeFD   int
	WakeTxFD int
	Segment  *Segment
	Side     int
	// Local and Remote are the addresses getsockname and getpeername
	// report, as TCP would.
	Local, Remote netip.AddrPort
}

// Close releases whatever the endpoint still owns.
func (e *Endpoint) Close() {
	if e.Segment != nil {
		e.Segment.Close()
	}
	if e.WakeFD >= 0 {
		unix.Close(e.WakeFD)
		e.WakeFD = -1
	}
	if e.WakeTxFD >= 0 {
		unix.Close(e.WakeTxFD)
		e.WakeTxFD = -1
	}
}

// Transport sets up offloaded connections; every call is non-blocking or
// bounded by the timeout it is given.
type Transport interface {
	// Name is "shm" or "rdma".
	Name() string
	// Listen prepares to accept offloaded connections for a kernel TCP
	// listener bound to addr and returns a pollable fd that becomes ready
	// when one arrives.
	Listen(addr netip.AddrPort, backlog int, v6only bool) (fd int, err error)
	// Dial opens an offloaded connection to dst from local, with rings of
	// ringBytes. It returns ErrNoListener, ErrBacklog or ErrHandshake
	// (wrapped) when the caller should use kernel TCP instead.
	Dial(dst, local netip.AddrPort, ringBytes uint32, timeout time.Duration) (*Endpoint, error)
	// Accept completes the handshake for a connection taken from a
	// listener fd (connFD is the accepted socket) and returns its endpoint.
	Accept(connFD int, listen netip.AddrPort, timeout time.Duration) (*Endpoint, error)
}
