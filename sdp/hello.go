package sdp

/*
#include "setup.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Hello is what the hello that introduces a segment to a companion says
// (segment.h struct osf_hello; the one writer is setup.c's
// osf_hello_send, the one reader osf_hello_take).
type Hello struct {
	RingBytes uint32
	Flags     uint32
	// Client is the address the server's getpeername reports.
	Client netip.AddrPort
	// Server is the address the client connected to.
	Server netip.AddrPort
}

// SendHello sends h on the connected companion socket fd with the segment
// segFD and txFD, the server's end of the writers' wake socket, attached
// (osf_hello_send). It never waits and never raises SIGPIPE; the fds stay
// the caller's.
func SendHello(fd int, h Hello, segFD, txFD int) error {
	var client, server [28]C.uint8_t
	putSockaddr(client[:], h.Client)
	putSockaddr(server[:], h.Server)
	if r, err := C.osf_hello_send(C.int(fd), C.uint32_t(h.RingBytes), C.uint32_t(h.Flags),
		&client[0], &server[0], C.int(segFD), C.int(txFD)); r < 0 {
		return fmt.Errorf("sdp: send hello: %w", err)
	}
	return nil
}

// PutSockaddr encodes ap as a sockaddr_in (IPv4) or sockaddr_in6 into the
// 28 bytes of b, in the layout the kernel uses.
func PutSockaddr(b []byte, ap netip.AddrPort) { putSockaddrBytes(b, ap) }

func putSockaddrBytes(b []byte, ap netip.AddrPort) {
	clear(b[:28])
	a := ap.Addr()
	if a.Is4() {
		binary.NativeEndian.PutUint16(b[0:], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:], ap.Port())
		v4 := a.As4()
		copy(b[4:8], v4[:])
		return
	}
	binary.NativeEndian.PutUint16(b[0:], unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	v6 := a.As16()
	copy(b[8:24], v6[:])
}

func putSockaddr(dst []C.uint8_t, ap netip.AddrPort) {
	var b [28]byte
	putSockaddrBytes(b[:], ap)
	for i := range b {
		dst[i] = C.uint8_t(b[i])
	}
}

// Sockaddr decodes a sockaddr_in or sockaddr_in6 from 28 bytes; ok is false
// for any other family.
func Sockaddr(b []byte) (netip.AddrPort, bool) {
	if len(b) < 28 {
		return netip.AddrPort{}, false
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch binary.NativeEndian.Uint16(b[0:]) {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), true
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), true
	}
	return netip.AddrPort{}, false
}
