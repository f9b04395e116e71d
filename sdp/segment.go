package sdp

/*
#include "segment.h"
#include "setup.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sizes and constants of the shared layout (segment.h).
const (
	SizeofHeader = C.OSF_SEG_HDR_BYTES
	PageBytes    = C.OSF_SEG_PAGE
	SizeofHello  = C.sizeof_struct_osf_hello
	MinRing      = C.OSF_SEG_MIN_RING
	MaxRing      = C.OSF_SEG_MAX_RING
	Magic        = C.OSF_SEG_MAGIC
	Version      = C.OSF_SEG_VERSION
	HelloMagic   = C.OSF_HELLO_MAGIC
	SideClient   = C.OSF_SIDE_CLIENT
	SideServer   = C.OSF_SIDE_SERVER
	SegmentName  = C.OSF_SEG_NAME
)

// RawHeader, RawSide and RawHello are the C layouts.
type (
	RawHeader = C.struct_osf_seg_hdr
	RawSide   = C.struct_osf_seg_side
	RawHello  = C.struct_osf_hello
)

// Errors about segments; they wrap unix errnos where a system call failed.
var (
	// ErrRingSize means a ring size is not a power of two in [MinRing, MaxRing].
	ErrRingSize = errors.New("sdp: bad ring size")
	// ErrSegment means a segment failed validation.
	ErrSegment = errors.New("sdp: invalid segment")
	// ErrSegmentGone means the fd a segment was read through no longer
	// holds it: the connection was closed (and the fd maybe reused)
	// while it was being read.
	ErrSegmentGone = errors.New("sdp: segment gone (connection closed)")
)

// RingSizeOK reports whether n is a usable ring size.
func RingSizeOK(n uint32) bool { return C.osf_ring_size_ok(C.uint32_t(n)) != 0 }

// Bytes returns the size of a segment whose rings have ringBytes each.
func Bytes(ringBytes uint32) int { return int(C.osf_seg_bytes(C.uint32_t(ringBytes))) }

// HeaderOffset returns the header's offset in a segment whose rings have
// ringBytes each; the page that holds it starts at ringBytes (segment.h).
func HeaderOffset(ringBytes uint32) int { return int(C.osf_seg_hdr_off(C.uint32_t(ringBytes))) }

// RingOffset returns the offset of ring r's region in a segment whose
// rings have ringBytes each.
func RingOffset(ringBytes uint32, r int) int {
	return int(C.osf_seg_ring_off(C.uint32_t(ringBytes), C.int(r)))
}

// RingBias returns what ring r adds to a position before masking it: the
// offset of position pos in the ring's region is (pos + bias) & (ringBytes
// - 1), the one position-to-offset function of both ends (segment.h).
func RingBias(ringBytes uint32, r int) uint32 {
	return uint32(C.osf_seg_ring_bias(C.uint32_t(ringBytes), C.int(r)))
}

// Segment is a mapped connection segment. Its memory comes from mmap, never
// the Go heap: the peer writes it concurrently.
type Segment struct {
	FD        int
	Mem       []byte
	RingBytes uint32
	// dev and ino identify the memfd (FileID), kept by a mirror mapping
	// that has no fd of its own.
	dev, ino uint64
	// cmapped: Mem was mapped by C (MappedSegment), not unix.Mmap.
	cmapped bool
}

// FileID returns the identity (device, inode) of the segment's memfd,
// which the C data path, holding the same memfd, finds its RDMA
// connection by (sdp/rdma/tx.c); 0, 0 when unknown.
func (s *Segment) FileID() (dev, ino uint64) {
	if s.ino == 0 && s.FD >= 0 {
		var st unix.Stat_t
		if unix.Fstat(s.FD, &st) == nil {
			s.dev, s.ino = st.Dev, st.Ino
		}
	}
	return s.dev, s.ino
}

// CreateSegment makes a new sealed memfd segment with rings of ringBytes
// and maps it (osf_seg_new, the builder libosf.so's set-up uses); the
// header is zero until InitHeader.
func CreateSegment(ringBytes uint32) (*Segment, error) {
	if !RingSizeOK(ringBytes) {
		return nil, fmt.Errorf("%w: %d", ErrRingSize, ringBytes)
	}
	var fd C.int
	m, err := C.osf_seg_new(C.uint32_t(ringBytes), &fd)
	if m == nil {
		return nil, fmt.Errorf("sdp: new segment: %w", err)
	}
	return MappedSegment(m, int(fd), ringBytes), nil
}

// MappedSegment is the segment C made or validated and mapped (setup.h:
// osf_seg_parts for a client, osf_hello_take for a server), fd its memfd:
// the Segment owns both from now on.
func MappedSegment(mem unsafe.Pointer, fd int, ringBytes uint32) *Segment {
	s := &Segment{FD: fd, Mem: unsafe.Slice((*byte)(mem), Bytes(ringBytes)), RingBytes: ringBytes, cmapped: true}
	s.FileID()
	return s
}

func (s *Segment) header() *RawHeader {
	return (*RawHeader)(unsafe.Pointer(&s.Mem[HeaderOffset(s.RingBytes)]))
}

// InitHeader writes the header of a new segment (osf_seg_init): sizes,
// the two addresses (informational) and the client's pid; the magic last.
func (s *Segment) InitHeader(client, server netip.AddrPort, pid int) {
	var c, v [28]C.uint8_t
	putSockaddr(c[:], client)
	putSockaddr(v[:], server)
	C.osf_seg_init(unsafe.Pointer(&s.Mem[0]), C.uint32_t(s.RingBytes), &c[0], &v[0], C.int32_t(pid))
}

// SetServerPID records the accepting process (informational).
func (s *Segment) SetServerPID(pid int) { s.header().server_pid = C.int32_t(pid) }

// Addr returns the address of the mapping, for the C data path.
func (s *Segment) Addr() uintptr { return uintptr(unsafe.Pointer(&s.Mem[0])) }

// Unmap releases the mapping; the fd stays open.
func (s *Segment) Unmap() {
	if s.Mem != nil {
		if s.cmapped {
			unix.MunmapPtr(unsafe.Pointer(&s.Mem[0]), uintptr(len(s.Mem)))
		} else {
			unix.Munmap(s.Mem)
		}
		s.Mem = nil
	}
}

// Close unmaps the segment and closes its fd.
func (s *Segment) Close() error {
	s.Unmap()
	if s.FD < 0 {
		return nil
	}
	err := unix.Close(s.FD)
	s.FD = -1
	return err
}

// Release gives the mapping and fd to the C data path: s no longer owns
// them and Close becomes a no-op.
func (s *Segment) Release() (addr uintptr, fd int) {
	addr, fd = s.Addr(), s.FD
	s.Mem, s.FD = nil, -1
	return addr, fd
}
