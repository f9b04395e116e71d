package sidetest

/*
#cgo CFLAGS: -O2 -std=gnu11 -D_GNU_SOURCE -fno-strict-aliasing
#include "../side.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static void side_set_flags(struct osf_side *s, uint32_t f)
{
	__atomic_or_fetch(&s->me->flags, f, __ATOMIC_ACQ_REL);
}

static void side_hold(struct osf_side *s)
{
	__atomic_add_fetch(&s->me->holders, 1, __ATOMIC_RELAXED);
}

static struct osf_side *side_new(void) { return calloc(1, sizeof(struct osf_side)); }

// Guards: shared memory, as any mapping of the process may be, filled with
// GUARD_BYTE before and after the segment: a punch or a write that leaves
// the segment shows there.
#define GUARD (64u << 10)
#define GUARD_BYTE 0xa5

static void *seg_new(uint32_t ring)
{
	size_t n = osf_seg_bytes(ring) + 2 * GUARD;
	uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, GUARD_BYTE, GUARD);
	memset(p + n - GUARD, GUARD_BYTE, GUARD);
	return p + GUARD;
}

static void seg_free(void *seg, uint32_t ring)
{
	munmap((uint8_t *)seg - GUARD, osf_seg_bytes(ring) + 2 * GUARD);
}

static int all_bytes(const uint8_t *p, size_t n, uint8_t b)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != b)
			return 0;
	return 1;
}

static int seg_guards_intact(void *seg, uint32_t ring)
{
	uint8_t *p = (uint8_t *)seg;

	return all_bytes(p - GUARD, GUARD, GUARD_BYTE) &&
	       all_bytes(p + osf_seg_bytes(ring), GUARD, GUARD_BYTE);
}

// seg_scribble writes b over what side's process may write of the
// segment's header: its struct osf_seg_side, then its ring's head and
// tail words, in turn.
static void seg_scribble(void *seg, uint32_t ring, int side, const uint8_t *b, size_t n)
{
	struct osf_seg_hdr *h = osf_seg_hdr(seg, ring);
	uint8_t *w = (uint8_t *)&h->side[side];
	size_t k = n < sizeof(h->side[side]) ? n : sizeof(h->side[side]);

	memcpy(w, b, k);
	b += k;
	n -= k;
	if (n >= 8)
		memcpy(&h->ring[side].head, b, 8), b += 8, n -= 8;
	if (n >= 8)
		memcpy(&h->ring[1 - side].tail, b, 8);
}

// ring_is reports whether ring r's region holds byte b everywhere.
static int ring_is(void *seg, uint32_t ring, int r, uint8_t b)
{
	return all_bytes((uint8_t *)seg + osf_seg_ring_off(ring, r), ring, b);
}

static void ring_fill(void *seg, uint32_t ring, int r, uint8_t b)
{
	memset((uint8_t *)seg + osf_seg_ring_off(ring, r), b, ring);
}

// side_write copies n bytes into the tx ring as conn_io.c does and wakes
// the peer's readers; it returns the bytes written.
static size_t side_write(struct osf_side *s, int fd, const void *b, size_t n)
{
	int64_t room;
	uint64_t head;

	if (osf_seg_lock(&s->me->tx_lock) < 0)
		return 0;
	room = osf_side_tx_room(s);
	if (room <= 0) {
		osf_seg_unlock(&s->me->tx_lock);
		return 0;
	}
	if ((size_t)room < n)
		n = (size_t)room;
	head = s->tx->head;
	osf_side_tx_copy(s, head, b, n);
	__atomic_store_n(&s->tx->head, head + n, __ATOMIC_RELEASE);
	osf_seg_unlock(&s->me->tx_lock);
	osf_side_wake_reader(s, fd);
	return n;
}

// side_hold_back writes n bytes after the producer's head and holds them
// back, as TCP_CORK does (preload/conn_io.c, send_corked).
static void side_hold_back(struct osf_side *s, const void *b, size_t n)
{
	uint32_t held;

	if (osf_seg_lock(&s->me->tx_lock) < 0)
		return;
	held = s->me->cork & OSF_CORK_HELD;
	osf_side_tx_copy(s, s->tx->head + held, b, n);
	__atomic_store_n(&s->me->cork, OSF_CORK_ON | (held + (uint32_t)n), __ATOMIC_RELAXED);
	osf_seg_unlock(&s->me->tx_lock);
}

// side_read copies up to n bytes out of the rx ring and wakes the peer's
// writers; it returns the bytes read, or -1 for a corrupt ring.
static long side_read(struct osf_side *s, void *b, size_t n)
{
	int64_t used;
	uint64_t tail;

	if (osf_seg_lock(&s->me->rx_lock) < 0)
		return -1;
	used = osf_side_rx_used(s);
	if (used <= 0) {
		osf_seg_unlock(&s->me->rx_lock);
		return used < 0 ? -1 : 0;
	}
	if ((size_t)used < n)
		n = (size_t)used;
	tail = s->rx->tail;
	osf_side_rx_copy(s, tail, b, n);
	__atomic_store_n(&s->rx->tail, tail + n, __ATOMIC_RELEASE);
	osf_seg_unlock(&s->me->rx_lock);
	osf_side_wake_writer(s, tail + (uint64_t)used, tail + n);
	return (long)n;
}

// rx_resident counts the rx ring's own pages present in memory
// (mincore): those of its region but the shared page, with the unused
// bytes next to it (segment.h).
static long rx_resident(struct osf_side *s)
{
	size_t pages = s->size / 4096, i;
	unsigned char *v = malloc(pages);
	int ring = 1 - s->side;
	uint8_t *base = s->rxd - osf_seg_ring_off(s->size, ring);
	uint8_t *own = ring ? base + s->size + OSF_SEG_PAGE : base;
	long n = 0;

	if (!v || mincore(own, s->size, v) < 0) {
		free(v);
		return -1;
	}
	for (i = 0; i < pages; i++)
		n += v[i] & 1;
	free(v);
	return n;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	_ "github.com/osfproject/osf/sdp" // links the C side (sdp/cside.go); its headers (sdp/headers.go)
	"golang.org/x/sys/unix"
)

// Kinds of wait (OSF_ARM_*).
const (
	ArmRx = int(C.OSF_ARM_RX)
	ArmTx = int(C.OSF_ARM_TX)
)

// Connection states an end learns (OSF_CS_*).
const (
	StateGone   = uint32(C.OSF_CS_GONE)
	StateBroken = uint32(C.OSF_CS_BROKEN)
	StateReset  = uint32(C.OSF_CS_RESET)
)

// Side flags (OSF_SIDE_*).
const (
	FlagFin    = uint32(C.OSF_SIDE_FIN)
	FlagReset  = uint32(C.OSF_SIDE_RESET)
	FlagRdShut = uint32(C.OSF_SIDE_RDSHUT)
	// FlagTimedOut: with FlagReset, the engine gave up on the remote peer.
	FlagTimedOut = uint32(C.OSF_SIDE_TIMEDOUT)
)

// MaxTokens is OSF_WAKE_MAX_TOKENS.
const MaxTokens = int(C.OSF_WAKE_MAX_TOKENS)

// Pair is one segment seen from both ends. The segment is shared
// anonymous memory from mmap, never the Go heap (C writes it).
type Pair struct {
	seg    unsafe.Pointer
	ring   uint32
	Client *End
	Server *End
}

// End is one side of a Pair: its struct osf_side (C memory), the
// application's wake socket FD and the writers' wake socket WFD.
type End struct {
	s   *C.struct_osf_side
	FD  int
	WFD int
}

// NewPair maps a segment with rings of ring bytes and makes both ends,
// each with its wake sockets, as a handshake would.
func NewPair(ring uint32) (*Pair, error) {
	if !bool(C.osf_ring_size_ok(C.uint32_t(ring)) != 0) {
		return nil, fmt.Errorf("sidetest: ring size %d", ring)
	}
	seg := C.seg_new(C.uint32_t(ring))
	if seg == nil {
		return nil, errors.New("sidetest: mmap failed")
	}
	app, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sidetest: socketpair: %w", err)
	}
	wr, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(app[0])
		unix.Close(app[1])
		return nil, fmt.Errorf("sidetest: socketpair: %w", err)
	}
	p := &Pair{seg: seg, ring: ring}
	p.Client = newEnd(seg, ring, int(C.OSF_SIDE_CLIENT), app[0], wr[0])
	p.Server = newEnd(seg, ring, int(C.OSF_SIDE_SERVER), app[1], wr[1])
	return p, nil
}

// NewRegionPairs makes n pairs whose writers wake on one eventfd, as the
// slots of a region do (osf_side_use_efd): each pair has its segment and
// its application's wake sockets, and no writers' sockets (WFD -1). The
// eventfd is EFD; Close of the last pair does not close it: the caller
// does.
func NewRegionPairs(ring uint32, n int) (pairs []*Pair, efd int, err error) {
	efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, -1, fmt.Errorf("sidetest: eventfd: %w", err)
	}
	for i := 0; i < n; i++ {
		if !bool(C.osf_ring_size_ok(C.uint32_t(ring)) != 0) {
			err = fmt.Errorf("sidetest: ring size %d", ring)
			break
		}
		seg := C.seg_new(C.uint32_t(ring))
		if seg == nil {
			err = errors.New("sidetest: mmap failed")
			break
		}
		app, e := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if e != nil {
			C.seg_free(seg, C.uint32_t(ring))
			err = fmt.Errorf("sidetest: socketpair: %w", e)
			break
		}
		p := &Pair{seg: seg, ring: ring}
		p.Client = newEnd(seg, ring, int(C.OSF_SIDE_CLIENT), app[0], -1)
		p.Server = newEnd(seg, ring, int(C.OSF_SIDE_SERVER), app[1], -1)
		C.osf_side_use_efd(p.Client.s, C.int(efd))
		C.osf_side_use_efd(p.Server.s, C.int(efd))
		pairs = append(pairs, p)
	}
	if err != nil {
		for _, p := range pairs {
			p.Close()
		}
		unix.Close(efd)
		return nil, -1, err
	}
	return pairs, efd, nil
}

func newEnd(seg unsafe.Pointer, ring uint32, side, fd, wfd int) *End {
	e := &End{s: C.side_new(), FD: fd, WFD: wfd}
	C.osf_side_init(e.s, (*C.uint8_t)(seg), C.uint32_t(ring), C.int(side), C.int(wfd))
	C.side_hold(e.s) // as an install does: a side never held was never accepted
	return e
}

// Close releases the segment, both ends and their sockets.
func (p *Pair) Close() {
	for _, e := range []*End{p.Client, p.Server} {
		if e.FD >= 0 {
			unix.Close(e.FD)
		}
		if e.WFD >= 0 {
			unix.Close(e.WFD)
		}
		C.free(unsafe.Pointer(e.s))
	}
	C.seg_free(p.seg, C.uint32_t(p.ring))
}

// GuardsIntact reports whether the shared memory mapped right before and
// after the segment is as it was made: nothing punched or wrote outside.
func (p *Pair) GuardsIntact() bool { return C.seg_guards_intact(p.seg, C.uint32_t(p.ring)) != 0 }

// Scribble writes b, as a hostile process of side would, over its side's
// words of the header (struct osf_seg_side), then its ring's head and the
// other ring's tail.
func (p *Pair) Scribble(side int, b []byte) {
	if len(b) == 0 {
		return
	}
	cb := C.CBytes(b)
	defer C.free(cb)
	C.seg_scribble(p.seg, C.uint32_t(p.ring), C.int(side), (*C.uint8_t)(cb), C.size_t(len(b)))
}

// FillRing sets every byte of ring r's region to b; RingIs reports whether
// they all still are.
func (p *Pair) FillRing(r int, b byte) {
	C.ring_fill(p.seg, C.uint32_t(p.ring), C.int(r), C.uint8_t(b))
}
func (p *Pair) RingIs(r int, b byte) bool {
	return C.ring_is(p.seg, C.uint32_t(p.ring), C.int(r), C.uint8_t(b)) != 0
}

// CloseFD closes the end's application socket, as the last holder's close
// does: the peer's wake socket sees end-of-file.
func (e *End) CloseFD() {
	unix.Close(e.FD)
	e.FD = -1
}

// Write puts b into the end's send ring (as much as fits) and wakes the
// peer's readers if they asked; it returns the bytes written.
func (e *End) Write(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	cb := C.CBytes(b)
	defer C.free(cb)
	return int(C.side_write(e.s, C.int(e.FD), cb, C.size_t(len(b))))
}

// Read takes up to len(b) bytes from the end's receive ring and wakes the
// peer's writers if they asked; -1 for a corrupt ring.
func (e *End) Read(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	cb := C.malloc(C.size_t(len(b)))
	defer C.free(cb)
	n := int(C.side_read(e.s, cb, C.size_t(len(b))))
	if n > 0 {
		copy(b, C.GoBytes(cb, C.int(n)))
	}
	return n
}

// RxUsed is osf_side_rx_used; TxFree is osf_side_tx_free.
func (e *End) RxUsed() int64 { return int64(C.osf_side_rx_used(e.s)) }
func (e *End) TxFree() int64 { return int64(C.osf_side_tx_free(e.s)) }

// State returns the OSF_CS_* bits the end has learnt.
func (e *End) State() uint32 { return uint32(C.osf_side_state(e.s)) }

// SetFlags raises OSF_SIDE_* flags of this end, as shutdown or close does.
func (e *End) SetFlags(f uint32) {
	C.side_set_flags(e.s, C.uint32_t(f))
}

// ShutWake is osf_side_shut_wake on FD for shutdown(how), whose flags the
// caller set (SetFlags).
func (e *End) ShutWake(how int) { C.osf_side_shut_wake(e.s, C.int(e.FD), C.int(how)) }

// MarkGone is osf_side_mark_gone; CheckEnd osf_side_check_end on FD.
func (e *End) MarkGone() { C.osf_side_mark_gone(e.s) }
func (e *End) CheckEnd() { C.osf_side_check_end(e.s, C.int(e.FD)) }

// Broken is osf_side_broken.
func (e *End) Broken() { C.osf_side_broken(e.s) }

// TakePending and TakeRecvError return the pending error (SO_ERROR) as a
// write and a read at the end of the stream take it.
func (e *End) TakePending() unix.Errno   { return unix.Errno(C.osf_side_take_pending(e.s)) }
func (e *End) TakeRecvError() unix.Errno { return unix.Errno(C.osf_side_take_recv_error(e.s)) }

// SetPending is osf_side_set_pending.
func (e *End) SetPending(err unix.Errno) { C.osf_side_set_pending(e.s, C.int(err)) }

// TCPState is the Linux TCP state TCP_INFO reports.
func (e *End) TCPState() int { return int(C.osf_side_tcp_state(e.s)) }

// Revents, Arm and Disarm are the readiness calls a poller makes.
func (e *End) Revents() int16 { return int16(C.osf_side_revents(e.s)) }
func (e *End) Arm(kinds, already int) int16 {
	return int16(C.osf_side_arm(e.s, C.int(e.FD), C.int(kinds), C.int(already)))
}
func (e *End) Disarm(kinds, woken int) {
	C.osf_side_disarm(e.s, C.int(e.FD), C.int(kinds), C.int(woken))
}

// ArmRx is the flag a read that got EAGAIN raises.
func (e *End) ArmRx() bool { return C.osf_side_arm_rx(e.s) != 0 }

// Drain is osf_side_drain of the readers' socket.
func (e *End) Drain() { C.osf_side_drain(e.s, C.int(e.FD), &e.s.me.rx_waiters) }

// WaitData blocks until a read would not block: 0 or a negative errno.
func (e *End) WaitData(spinUs uint) int {
	return int(C.osf_side_wait_data(e.s, C.int(e.FD), C.unsigned(spinUs)))
}

// WaitRoom blocks until a write would not block: 0 or a negative errno.
func (e *End) WaitRoom(spinUs uint) int {
	return int(C.osf_side_wait_room(e.s, C.int(e.FD), C.unsigned(spinUs)))
}

// Waiters returns the end's counted readers and writers.
func (e *End) Waiters() (rx, tx uint32) {
	return uint32(e.s.me.rx_waiters), uint32(e.s.me.tx_waiters)
}

// Want returns the end's want flags; Tokens its counts of tokens sent to
// it and not taken.
func (e *End) Want() (rx, tx uint32) { return uint32(e.s.me.rx_want), uint32(e.s.me.tx_want) }
func (e *End) Tokens() (rx, tx uint32) {
	return uint32(e.s.me.rx_tokens), uint32(e.s.me.tx_tokens)
}

// SetWaiters overwrites the end's reader count, as a hostile peer may.
func (e *End) SetWaiters(rx uint32) { e.s.me.rx_waiters = C.uint32_t(rx) }

// Stamp is osf_side_stamp.
func (e *End) Stamp() uint64 { return uint64(C.osf_side_stamp(e.s)) }

// CorruptRx writes impossible positions into the end's receive ring, as
// a hostile peer could.
func (e *End) CorruptRx() { e.s.rx.head = e.s.rx.tail + C.uint64_t(e.s.size) + 1 }

// SetTrim is osf_side_set_trim; Trim osf_side_trim (the bytes given
// back); TrimDue osf_side_trim_due.
func (e *End) SetTrim(on bool) {
	v := 0
	if on {
		v = 1
	}
	C.osf_side_set_trim(e.s, C.int(v))
}
func (e *End) Trim() int     { return int(C.osf_side_trim(e.s)) }
func (e *End) TrimDue() bool { return C.osf_side_trim_due(e.s) != 0 }

// RxResident returns how many pages of the end's receive ring are in
// memory (mincore), -1 on error.
func (e *End) RxResident() int { return int(C.rx_resident(e.s)) }

// PeerTxLockWord returns the other side's producer lock word, which a
// trim takes.
func (e *End) PeerTxLockWord() *uint32 { return (*uint32)(unsafe.Pointer(&e.s.peer.tx_lock)) }

// HoldBack writes b after the end's head and holds it back (TCP_CORK).
func (e *End) HoldBack(b []byte) {
	cb := C.CBytes(b)
	defer C.free(cb)
	C.side_hold_back(e.s, cb, C.size_t(len(b)))
}

// CorkWord returns the end's cork word (C memory).
func (e *End) CorkWord() *uint32 { return (*uint32)(unsafe.Pointer(&e.s.me.cork)) }

// TxLockWord returns the end's producer lock word (C memory).
func (e *End) TxLockWord() *uint32 { return (*uint32)(unsafe.Pointer(&e.s.me.tx_lock)) }

// Lock and Unlock take and release a segment lock word: 0 or -1.
func Lock(w *uint32) int {
	if C.osf_seg_lock((*C.uint32_t)(unsafe.Pointer(w))) < 0 {
		return -1
	}
	return 0
}

// Results of LockWait besides 0.
var (
	LockAgain  = int(C.OSF_LOCK_AGAIN)
	LockBroken = int(C.OSF_LOCK_BROKEN)
)

// LockWait is osf_seg_lock_wait: nonblock, SO_RCVTIMEO of timeoFD (-1:
// none) and the stuck clock *since (C memory from NewClock, kept across
// calls as a connection keeps it).
func LockWait(w *uint32, nonblock bool, timeoFD int, since *Clock) int {
	how := C.struct_osf_lock_wait{nonblock: 0, timeo_fd: C.int(timeoFD), since: since.p}
	if nonblock {
		how.nonblock = 1
	}
	return int(C.osf_seg_lock_wait((*C.uint32_t)(unsafe.Pointer(w)), &how))
}

// Clock is a lock's stuck clock in C memory.
type Clock struct{ p *C.long }

// NewClock returns a zeroed Clock; Free releases it.
func NewClock() *Clock { return &Clock{(*C.long)(C.calloc(1, C.size_t(unsafe.Sizeof(C.long(0)))))} }
func (c *Clock) Free() { C.free(unsafe.Pointer(c.p)) }
func Unlock(w *uint32) { C.osf_seg_unlock((*C.uint32_t)(unsafe.Pointer(w))) }

// Tid is the calling thread's id as the locks record it.
func Tid() uint32 { return uint32(C.osf_lock_tid()) }
