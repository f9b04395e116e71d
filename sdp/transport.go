package sdp

import (
	"errors"
	"net/netip"

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
