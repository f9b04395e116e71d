package sdp

/*
#include "side.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrMsgTimeout means the other side did not send a whole message in time.
var ErrMsgTimeout = errors.New("sdp: message timed out")

// side returns the C view of e's side of its segment (side.h), for a
// message carried in the stream before the C data path owns the
// connection.
func (e *Endpoint) side() *C.struct_osf_side {
	s := new(C.struct_osf_side) // no Go pointers in it: the segment is mmap'd
	C.osf_side_init(s, (*C.uint8_t)(unsafe.Pointer(&e.Segment.Mem[0])), C.uint32_t(e.Segment.RingBytes),
		C.int(e.Side), C.int(e.WakeTxFD))
	return s
}

// ReadMsg reads exactly len(b) bytes that the other side sent, before the C
// data path owns the connection (a handshake carried in the stream, such
// as a gateway's challenge), with the wake protocol's one implementation
// (osf_side_get_msg, side.c): it sleeps on the wake socket until deadline
// (ErrMsgTimeout). It fails when the other side ends first (its FIN, its
// reset, the wake socket's end) or the ring's positions are impossible.
func (e *Endpoint) ReadMsg(b []byte, deadline time.Time) error {
	if len(b) == 0 {
		return nil
	}
	s := e.side()
	// The sleeps are blocking recvs bounded by SO_RCVTIMEO (side.c), on
	// a socket no one else uses yet: both are put back after.
	fl, err := unix.FcntlInt(uintptr(e.WakeFD), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("sdp: wait for a message: %w", err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		unix.FcntlInt(uintptr(e.WakeFD), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		defer unix.FcntlInt(uintptr(e.WakeFD), unix.F_SETFL, fl)
	}
	defer unix.SetsockoptTimeval(e.WakeFD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{})
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return ErrMsgTimeout
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(e.WakeFD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return fmt.Errorf("sdp: wait for a message: %w", err)
		}
		switch r := C.osf_side_get_msg(s, C.int(e.WakeFD), unsafe.Pointer(&b[0]), C.size_t(len(b))); {
		case r == 0:
			return nil
		case r == -C.EAGAIN:
			continue // the deadline decides
		case r == -C.ECONNRESET:
			return fmt.Errorf("%w: the other side ended before a %d-byte message", ErrHandshake, len(b))
		default:
			return fmt.Errorf("sdp: wait for a message: %w", unix.Errno(-r))
		}
	}
}

// WriteMsg writes b, whole, into the send ring and wakes the other side's
// readers, before the C data path owns the connection (osf_side_put_msg,
// side.c). It never waits: without room for all of b it fails.
func (e *Endpoint) WriteMsg(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if C.osf_side_put_msg(e.side(), C.int(e.WakeFD), unsafe.Pointer(&b[0]), C.size_t(len(b))) != 0 {
		return fmt.Errorf("%w: no room for a %d-byte message", ErrHandshake, len(b))
	}
	return nil
}
