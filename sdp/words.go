package sdp

/*
#include "segment.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SideFlags are the state flags a side sets in its half of the segment
// header (osf_seg_side.flags, OSF_SIDE_*); only the side itself sets them.
type SideFlags uint32

// The side flags.
const (
	// SideFIN: the side shut down writing; no data follows its head.
	SideFIN SideFlags = C.OSF_SIDE_FIN
	// SideReset: the side closed abortively (SO_LINGER 0); once its last
	// holder is gone the other side reports ECONNRESET.
	SideReset SideFlags = C.OSF_SIDE_RESET
	// SideRDShut: the side shut down reading (local meaning only).
	SideRDShut SideFlags = C.OSF_SIDE_RDSHUT
	// SideRDSock and SideWRSock: the side shut its end of its wake
	// socket (writers' wake socket) for reading, to wake the readers
	// (writers) asleep there at a shutdown; tokens sent there fail.
	SideRDSock SideFlags = C.OSF_SIDE_RDSOCK
	SideWRSock SideFlags = C.OSF_SIDE_WRSOCK
	// SideTimedOut: with SideReset, an RDMA engine gave up on the remote
	// peer (its device stopped answering): the end is ETIMEDOUT.
	SideTimedOut SideFlags = C.OSF_SIDE_TIMEDOUT
)

// Header and hello flags.
const (
	// SegRDMA marks a segment whose other side is an RDMA progress engine.
	SegRDMA = C.OSF_SEG_F_RDMA
	// SegLink marks an RDMA segment carried as a stream on a link: the
	// engine posts its writes and takes its completions.
	SegLink = C.OSF_SEG_F_LINK
	// HelloRDMA marks a hello sent by an RDMA progress engine.
	HelloRDMA = C.OSF_HELLO_F_RDMA
)

// FIN reports whether the side shut down writing.
func (f SideFlags) FIN() bool { return f&SideFIN != 0 }

// Reset reports whether the side closed abortively.
func (f SideFlags) Reset() bool { return f&SideReset != 0 }

// RdShut reports whether the side shut down reading.
func (f SideFlags) RdShut() bool { return f&SideRDShut != 0 }

// String names the flags that are set, "FIN|RESET" for example, "-" for
// none; bits without a name are shown in hex.
func (f SideFlags) String() string {
	var names []string
	for _, n := range []struct {
		bit  SideFlags
		name string
	}{{SideFIN, "FIN"}, {SideReset, "RESET"}, {SideRDShut, "RDSHUT"}, {SideRDSock, "RDSOCK"}, {SideWRSock, "WRSOCK"}, {SideTimedOut, "TIMEDOUT"}} {
		if f&n.bit != 0 {
			names = append(names, n.name)
			f &^= n.bit
		}
	}
	if f != 0 {
		names = append(names, fmt.Sprintf("%#x", uint32(f)))
	}
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, "|")
}

// The control words of a segment are shared with the C data path, which
// accesses them with __atomic builtins; every accessor below is a Go atomic
// operation, which is sequentially consistent, so a store followed by a
// load of another word is ordered as the C side's SEQ_CST fences expect
// (the "publish, fence, look at the other side's want flag" protocol of
// preload/conn.c). Side and ring numbers must be 0 or 1; anything else
// panics, as an index out of range would.

func (s *Segment) side(i int) *RawSide { return &s.header().side[i] }

func (s *Segment) ring(i int) *C.struct_osf_seg_ring { return &s.header().ring[i] }

func u64(p *C.uint64_t) *uint64 { return (*uint64)(unsafe.Pointer(p)) }

func u32(p *C.uint32_t) *uint32 { return (*uint32)(unsafe.Pointer(p)) }

// Head returns ring r's producer position (acquire).
func (s *Segment) Head(r int) uint64 { return atomic.LoadUint64(u64(&s.ring(r).head)) }

// SetHead publishes ring r's producer position (release).
func (s *Segment) SetHead(r int, v uint64) { atomic.StoreUint64(u64(&s.ring(r).head), v) }

// Tail returns ring r's consumer position (acquire).
func (s *Segment) Tail(r int) uint64 { return atomic.LoadUint64(u64(&s.ring(r).tail)) }

// SetTail publishes ring r's consumer position (release).
func (s *Segment) SetTail(r int, v uint64) { atomic.StoreUint64(u64(&s.ring(r).tail), v) }

// SideFlags returns side i's state flags.
func (s *Segment) SideFlags(i int) SideFlags {
	return SideFlags(atomic.LoadUint32(u32(&s.side(i).flags)))
}

// OrSideFlags sets flags in side i's state word.
func (s *Segment) OrSideFlags(i int, flags SideFlags) {
	atomic.OrUint32(u32(&s.side(i).flags), uint32(flags))
}

// Want names one of a side's two "wake me" words.
type Want int

// The want words: WantRx asks the other side for a wake token on the wake
// socket (the application's fd) when data (or the end) arrives, WantTx for
// one on the writers' wake socket when room appears.
const (
	WantRx Want = iota
	WantTx
)

func (s *Segment) want(i int, w Want) *uint32 {
	if w == WantTx {
		return u32(&s.side(i).tx_want)
	}
	return u32(&s.side(i).rx_want)
}

// SetWant stores v into side i's want word w.
func (s *Segment) SetWant(i int, w Want, v uint32) { atomic.StoreUint32(s.want(i, w), v) }

// LoadWant returns side i's want word w.
func (s *Segment) LoadWant(i int, w Want) uint32 { return atomic.LoadUint32(s.want(i, w)) }

// TakeWant clears side i's want word w and reports whether it was set: the
// caller then owes that side a wake token.
func (s *Segment) TakeWant(i int, w Want) bool {
	p := s.want(i, w)
	return atomic.LoadUint32(p) != 0 && atomic.SwapUint32(p, 0) != 0
}

func (s *Segment) waiters(i int, w Want) *uint32 {
	if w == WantTx {
		return u32(&s.side(i).tx_waiters)
	}
	return u32(&s.side(i).rx_waiters)
}

// Waiters returns how many threads of side i wait for what want word w
// asks for (rx_waiters or tx_waiters): the other side sends that many wake
// tokens, at least one, on the socket of that kind.
func (s *Segment) Waiters(i int, w Want) uint32 { return atomic.LoadUint32(s.waiters(i, w)) }

func (s *Segment) tokens(i int, w Want) *uint32 {
	if w == WantTx {
		return u32(&s.side(i).tx_tokens)
	}
	return u32(&s.side(i).rx_tokens)
}

// TokensWord returns side i's count of tokens of kind w sent and not
// taken, for C code that takes them (segment.h osf_wake_take).
func (s *Segment) TokensWord(i int, w Want) *uint32 { return s.tokens(i, w) }

// Tokens returns side i's count of tokens of kind w sent and not taken.
func (s *Segment) Tokens(i int, w Want) uint32 { return atomic.LoadUint32(s.tokens(i, w)) }

// RingData returns ring r's region (mmap memory, written concurrently by
// the other side: copy out before trusting); position pos is at
// RingPos(r, pos) in it.
func (s *Segment) RingData(r int) []byte {
	off := RingOffset(s.RingBytes, r)
	return s.Mem[off : off+int(s.RingBytes) : off+int(s.RingBytes)]
}

// RingPos returns the offset of ring r's position pos in its region
// (RingData): masked, so always inside it.
func (s *Segment) RingPos(r int, pos uint64) uint32 {
	return uint32((pos + uint64(RingBias(s.RingBytes, r))) & uint64(s.RingBytes-1))
}

// DataOffset returns the offset of ring r's region in the segment.
func (s *Segment) DataOffset(r int) int { return RingOffset(s.RingBytes, r) }

// SetFlags sets header flags (Seg*); informational, before the segment is
// shared.
func (s *Segment) SetFlags(f uint32) { atomic.OrUint32(u32(&s.header().flags), f) }

// Flags returns the header flags.
func (s *Segment) Flags() uint32 { return atomic.LoadUint32(u32(&s.header().flags)) }

// LetGo returns the bits of the sides that let go of the segment for good
// (the header's slot_done: the C data path sets its side's bit when the
// side's last holder's connection object is gone in every process). It is
// a word the C side writes: compared only.
func (s *Segment) LetGo() uint32 { return atomic.LoadUint32(u32(&s.header().slot_done)) }

// SetLetGo sets side's bit in the header's slot_done, as the C data path
// does when its side lets go (tests play that side).
func (s *Segment) SetLetGo(side int) {
	atomic.OrUint32(u32(&s.header().slot_done), 1<<uint(side))
}

// MapSegment maps the memfd fd of a segment with rings of ringBytes (one
// this process made, so its size is known) and returns it as a Segment
// that owns fd and the mapping, which it may Release to the C data path
// as CreateSegment's. The header is left as it is.
func MapSegment(fd int, ringBytes uint32) (*Segment, error) {
	if !RingSizeOK(ringBytes) {
		return nil, fmt.Errorf("%w: %d", ErrRingSize, ringBytes)
	}
	p, err := unix.MmapPtr(fd, 0, nil, uintptr(Bytes(ringBytes)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("sdp: map segment: %w", err)
	}
	return MappedSegment(p, fd, ringBytes), nil
}

// Mirror maps s's memfd a second time and returns that mapping as a
// Segment that owns no fd (FD is -1; Close only unmaps). The RDMA engine
// keeps such a mapping of a segment whose first mapping and fd it hands to
// the C data path, which unmaps and closes those on its own schedule.
func (s *Segment) Mirror() (*Segment, error) {
	if s.FD < 0 || s.Mem == nil {
		return nil, fmt.Errorf("%w: mirror of a released segment", ErrSegment)
	}
	mem, err := unix.Mmap(s.FD, 0, len(s.Mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("sdp: map segment again: %w", err)
	}
	dev, ino := s.FileID()
	return &Segment{FD: -1, Mem: mem, RingBytes: s.RingBytes, dev: dev, ino: ino}, nil
}

// BumpCloseSeq tells side i's processes to look for the end of the
// connection: the C data path checks the other side's close_seq before
// each write and asks the kernel whether the wake socket reached its end
// when it changed.
func (s *Segment) BumpCloseSeq(i int) { atomic.AddUint32(u32(&s.side(i).close_seq), 1) }

// AddWaiters adds delta to side i's count of waiters of kind w.
func (s *Segment) AddWaiters(i int, w Want, delta int32) {
	atomic.AddUint32(s.waiters(i, w), uint32(delta))
}

// MaxWakeTokens is the most wake tokens sent at once (OSF_WAKE_MAX_TOKENS).
const MaxWakeTokens = C.OSF_WAKE_MAX_TOKENS

// WakeTokens returns how many wake tokens the other side sends to a side
// with waiters counted waiters: one each, at least one, at most
// MaxWakeTokens (osf_wake_tokens, the rule of the C data path).
func WakeTokens(waiters uint32) uint32 {
	return uint32(C.osf_wake_tokens(C.uint32_t(waiters)))
}

// WakeLowat returns the room a ring of ringBytes must have before a writer
// waiting for room is woken (osf_seg_lowat): half the ring.
func WakeLowat(ringBytes uint32) uint32 { return uint32(C.osf_seg_lowat(C.uint32_t(ringBytes))) }

// BufLimits returns side's SO_SNDBUF limit and the other side's SO_RCVBUF
// limit (osf_seg_side sndlim, rcvlim: 0 when unset), what TxLimit takes.
func (s *Segment) BufLimits(side int) (sndlim, rcvlim uint32) {
	return atomic.LoadUint32(u32(&s.side(side).sndlim)), atomic.LoadUint32(u32(&s.side(1 - side).rcvlim))
}

// TxLimit returns the bytes a side may have in flight in a ring of
// ringBytes (osf_seg_tx_limit: the ring, or less once either program set a
// buffer size) and the room that makes it writable (osf_seg_tx_lowat): a
// writer with less waits for the peer. sndlim and rcvlim are BufLimits'.
func TxLimit(ringBytes, sndlim, rcvlim uint32) (limit, lowat uint64) {
	l := C.osf_seg_tx_limit(C.uint32_t(ringBytes), C.uint32_t(sndlim), C.uint32_t(rcvlim))
	return uint64(l), uint64(C.osf_seg_tx_lowat(C.uint32_t(ringBytes), l))
}

// EndIsReset reports whether the end of a side whose last holder is gone
// is a reset rather than a FIN: it closed abortively (gone has SideReset)
// or left unread bytes the other side had sent it (osf_end_is_reset).
func EndIsReset(gone SideFlags, unread bool) bool {
	return C.osf_end_is_reset(C.uint32_t(gone), cbool(unread)) != 0
}

// TCPState is a TCP state as Linux numbers it (include/net/tcp_states.h).
type TCPState uint8

// The states an offloaded connection can be in (osf_tcp_state).
const (
	TCPEstablished TCPState = C.OSF_TCP_ESTABLISHED
	TCPFinWait2    TCPState = C.OSF_TCP_FIN_WAIT2
	TCPClose       TCPState = C.OSF_TCP_CLOSE
	TCPCloseWait   TCPState = C.OSF_TCP_CLOSE_WAIT
)

// StateOf returns the state Linux TCP would report for one end of an
// offloaded connection, the one TCP_INFO reports in libosf.so: me and peer
// are the two sides' flags, peerGone says the peer's last holder closed,
// reset that the connection ended with a reset (see EndIsReset).
func StateOf(me, peer SideFlags, peerGone, reset bool) TCPState {
	return TCPState(C.osf_tcp_state(C.uint32_t(me), C.uint32_t(peer), cbool(peerGone), cbool(reset)))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
