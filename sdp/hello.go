package sdp

/*
#include "segment.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrHello means a hello message is malformed.
var ErrHello = errors.New("sdp: malformed hello")

// Hello is the message a client sends with a new segment.
type Hello struct {
	RingBytes uint32
	Flags     uint32
	// Client is the address the server's getpeername reports.
	Client netip.AddrPort
	// Server is the address the client connected to.
	Server netip.AddrPort
}

// Marshal encodes h as a struct osf_hello (segment.h; host byte order:
// both ends are on this host).
func (h Hello) Marshal() []byte {
	var raw RawHello
	raw.magic = HelloMagic
	raw.version = Version
	raw.size = SizeofHello
	raw.ring_bytes = C.uint32_t(h.RingBytes)
	raw.flags = C.uint32_t(h.Flags)
	putSockaddr(raw.client[:], h.Client)
	putSockaddr(raw.server[:], h.Server)
	return C.GoBytes(unsafe.Pointer(&raw), SizeofHello)
}

// DecodeHello parses a hello; it never trusts lengths or sizes inside it
// beyond checking them.
func DecodeHello(b []byte) (Hello, error) {
	var h Hello
	if len(b) != SizeofHello {
		return h, fmt.Errorf("%w: %d bytes", ErrHello, len(b))
	}
	var raw RawHello
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&raw)), SizeofHello), b)
	if raw.magic != HelloMagic || raw.version != Version || raw.size != SizeofHello {
		return h, fmt.Errorf("%w: bad magic or version", ErrHello)
	}
	h.RingBytes = uint32(raw.ring_bytes)
	h.Flags = uint32(raw.flags)
	if !RingSizeOK(h.RingBytes) {
		return h, fmt.Errorf("%w: %w: %d", ErrHello, ErrRingSize, h.RingBytes)
	}
	var ok1, ok2 bool
	h.Client, ok1 = Sockaddr(unsafe.Slice((*byte)(unsafe.Pointer(&raw.client[0])), len(raw.client)))
	h.Server, ok2 = Sockaddr(unsafe.Slice((*byte)(unsafe.Pointer(&raw.server[0])), len(raw.server)))
	if !ok1 || !ok2 {
		return h, fmt.Errorf("%w: bad address", ErrHello)
	}
	return h, nil
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
