package sdp

/*
#include "segment.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"runtime/debug"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SideView is a copy of one side's control words and counters.
type SideView struct {
	Flags     SideFlags
	CloseSeq  uint32 // bumped each time a process drops its last fd for the side
	Holders   uint32 // processes holding the side (a hint: see segment.h)
	RxWaiters uint32 // threads waiting for data (asleep in recv, or polling)
	TxWaiters uint32 // threads waiting for room
	RxWant    uint32
	TxWant    uint32
	SendCalls uint64
	RecvCalls uint64
	Sleeps    uint64
	WakesSent uint64
}

// RingView is a copy of one ring's positions: free-running byte counts.
type RingView struct {
	Head uint64 // bytes the producer has written, ever
	Tail uint64 // bytes the consumer has read, ever
}

// Used returns the bytes queued in the ring (head - tail, as a signed
// number so that a tail beyond the head shows as negative) and whether
// that is possible for a ring of size bytes.
func (r RingView) Used(size uint32) (used int64, ok bool) {
	return int64(r.Head - r.Tail), C.osf_ring_used(C.uint64_t(r.Head), C.uint64_t(r.Tail), C.uint32_t(size)) >= 0
}

// HeaderView is a copy of a segment header, read with one atomic load per
// word. The words are each read whole, but not all at the same instant: a
// view of a live connection is a sample, not a consistent snapshot.
type HeaderView struct {
	Magic     uint64
	Version   uint32
	HdrBytes  uint32
	RingBytes uint32
	Flags     uint32
	ClientPID int32
	ServerPID int32
	Side      [2]SideView // indexed by SideClient, SideServer
	Ring      [2]RingView // ring s carries what side s sends
	// Client and Server are the addresses the segment's creator recorded
	// (informational; for a connection through a gateway, Server is the
	// gateway).
	Client, Server netip.AddrPort
}

// Check returns the ways the header differs from what a segment with rings
// of ringBytes must hold (magic, version, sizes); none for a good header.
// The header is written by both peers, so anything is possible.
func (h *HeaderView) Check(ringBytes uint32) []string {
	var bad []string
	if h.Magic != Magic {
		bad = append(bad, fmt.Sprintf("magic %#x, want %#x", h.Magic, uint64(Magic)))
	}
	if h.Version != Version {
		bad = append(bad, fmt.Sprintf("version %d, want %d", h.Version, Version))
	}
	if h.HdrBytes != SizeofHeader {
		bad = append(bad, fmt.Sprintf("header bytes %d, want %d", h.HdrBytes, SizeofHeader))
	}
	if h.RingBytes != ringBytes {
		bad = append(bad, fmt.Sprintf("ring bytes %d, want %d", h.RingBytes, ringBytes))
	}
	return bad
}

// ReadHeader copies the header at the start of mem, which must be a
// mapping of at least SizeofHeader bytes (never Go heap memory: peers
// write it concurrently). It only loads; it never writes or locks.
func ReadHeader(mem []byte) (HeaderView, error) {
	if len(mem) < SizeofHeader {
		return HeaderView{}, fmt.Errorf("%w: %d bytes, want at least %d", ErrSegment, len(mem), SizeofHeader)
	}
	h := (*RawHeader)(unsafe.Pointer(&mem[0]))
	v := HeaderView{
		Magic:     load64(&h.magic),
		Version:   load32(&h.version),
		HdrBytes:  load32(&h.hdr_bytes),
		RingBytes: load32(&h.ring_bytes),
		Flags:     load32(&h.flags),
		ClientPID: int32(load32((*C.uint32_t)(unsafe.Pointer(&h.client_pid)))),
		ServerPID: int32(load32((*C.uint32_t)(unsafe.Pointer(&h.server_pid)))),
	}
	var raw [28]byte
	for i := range raw {
		raw[i] = byte(h.client_addr[i])
	}
	v.Client, _ = Sockaddr(raw[:])
	for i := range raw {
		raw[i] = byte(h.server_addr[i])
	}
	v.Server, _ = Sockaddr(raw[:])
	for i := range v.Side {
		s := &h.side[i]
		v.Side[i] = SideView{
			Flags:     SideFlags(load32(&s.flags)),
			CloseSeq:  load32(&s.close_seq),
			Holders:   load32(&s.holders),
			RxWaiters: load32(&s.rx_waiters),
			TxWaiters: load32(&s.tx_waiters),
			RxWant:    load32(&s.rx_want),
			TxWant:    load32(&s.tx_want),
			SendCalls: load64(&s.send_calls),
			RecvCalls: load64(&s.recv_calls),
			Sleeps:    load64(&s.sleeps),
			WakesSent: load64(&s.wakes_sent),
		}
	}
	for i := range v.Ring {
		v.Ring[i] = readRing(&h.ring[i])
	}
	return v, nil
}

// readRing samples a ring's positions so that an honest pair always gives
// 0 <= head - tail <= size: the tail is read before and after the head and
// the sample is kept once the tail did not move meanwhile (positions only
// grow, so an unchanged tail was that value when the head was read). A
// ring that keeps moving gives the last sample with the earlier tail, for
// which head - tail >= 0 still holds.
func readRing(r *C.struct_osf_seg_ring) RingView {
	var v RingView
	for try := 0; try < 8; try++ {
		tail := load64(&r.tail)
		v = RingView{Head: load64(&r.head), Tail: tail}
		if load64(&r.tail) == tail {
			break
		}
	}
	return v
}

func load32(p *C.uint32_t) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(p))) }
func load64(p *C.uint64_t) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(p))) }

// PeekHeader reads the header of a segment that belongs to another
// process, through a path such as /proc/PID/fd/N, without disturbing it:
// the file is checked before it is opened (a regular file, identity ino
// when ino is not 0 — the fd number may have been reused since the caller
// learned it), opened read-only and non-blocking, checked again (the same
// file, size Bytes(ringBytes), sealed against shrinking so that
// reading cannot fault), and only its shared page (the header's) is mapped, read-only,
// for the time of one ReadHeader. It never writes, locks or keeps
// anything. Errors wrap ErrSegment when the file is not a segment of that
// size, or the errno of the failing call.
func PeekHeader(path string, ringBytes uint32, ino uint64) (HeaderView, error) {
	return PeekSlot(path, ringBytes, -1, ino)
}

// PeekSlot is PeekHeader for slot slot of a region (OSF_SHM_POOL: a whole
// number of segments, at most C.OSF_REGION_SLOTS_MAX), or of a segment of
// its own when slot is -1.
func PeekSlot(path string, ringBytes uint32, slot int, ino uint64) (HeaderView, error) {
	if !RingSizeOK(ringBytes) {
		return HeaderView{}, fmt.Errorf("%w: %w: %d", ErrSegment, ErrRingSize, ringBytes)
	}
	var before unix.Stat_t
	if err := unix.Stat(path, &before); err != nil {
		if err == unix.ENOENT {
			return HeaderView{}, fmt.Errorf("%w: %w", ErrSegmentGone, err)
		}
		return HeaderView{}, fmt.Errorf("sdp: stat segment: %w", err)
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG || (ino != 0 && before.Ino != ino) {
		return HeaderView{}, fmt.Errorf("%w: %w: not the segment (fd reused)", ErrSegment, ErrSegmentGone)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if err == unix.ENOENT {
			return HeaderView{}, fmt.Errorf("%w: %w", ErrSegmentGone, err)
		}
		return HeaderView{}, fmt.Errorf("sdp: open segment: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return HeaderView{}, fmt.Errorf("sdp: stat segment: %w", err)
	}
	if st.Dev != before.Dev || st.Ino != before.Ino {
		return HeaderView{}, fmt.Errorf("%w: %w: not the segment (fd reused)", ErrSegment, ErrSegmentGone)
	}
	off := int64(0)
	if slot >= 0 {
		n := int64(C.osf_region_slots(C.uint64_t(st.Size), C.uint32_t(ringBytes)))
		if st.Size <= 0 || int64(slot) >= n {
			return HeaderView{}, fmt.Errorf("%w: region of %d bytes has no slot %d", ErrSegment, st.Size, slot)
		}
		off = int64(slot) * int64(Bytes(ringBytes))
	} else if st.Size != int64(Bytes(ringBytes)) {
		return HeaderView{}, fmt.Errorf("%w: size %d, want %d", ErrSegment, st.Size, Bytes(ringBytes))
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return HeaderView{}, fmt.Errorf("sdp: segment seals: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return HeaderView{}, fmt.Errorf("%w: not sealed against shrinking", ErrSegment)
	}
	// The shared page starts at ringBytes (segment.h).
	mem, err := unix.Mmap(fd, off+int64(ringBytes), PageBytes, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return HeaderView{}, fmt.Errorf("sdp: map segment: %w", err)
	}
	defer unix.Munmap(mem)
	return readGuarded(mem[HeaderOffset(ringBytes)-int(ringBytes):])
}

// readGuarded is ReadHeader with memory faults turned into an error. The
// seals make a fault impossible; this is the second line of defence.
func readGuarded(mem []byte) (v HeaderView, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: fault while reading the header: %v", ErrSegment, r)
		}
	}()
	return ReadHeader(mem)
}
