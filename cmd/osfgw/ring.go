package main

// The offloaded node leg: the gateway is the accepting side of an osf
// connection (shm on this host; RDMA connections arrive the same way
// through the companion) and relays straight between the rings and the
// destination's kernel socket — recv(2) from the destination into the
// ring, send(2) from the ring to the destination, no copy in between —
// with the stream protocol's own C side (sdp/side.c, the code libosf.so
// runs), so end, reset and wake-up rules are the data path's by
// construction.

/*
#cgo CFLAGS: -O2 -std=gnu11 -D_GNU_SOURCE -fno-strict-aliasing
#include "../../sdp/side.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

// A relayed connection's ring end: the side, its wake sockets, counters.
struct leg {
	struct osf_side s;
	int fd;  // the wake socket (the connection accepted on the companion)
	int64_t to_dest, to_node;
};

// Outcomes of a relay direction.
enum { LEG_FIN = 0, LEG_RESET = 1, LEG_WRITE = 2 };

static struct leg *leg_new(void *base, uint32_t ring, int side, int fd, int wfd)
{
	struct leg *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	osf_side_init(&l->s, base, ring, side, wfd);
	l->fd = fd;
	__atomic_add_fetch(&l->s.me->holders, 1, __ATOMIC_RELAXED);
	return l;
}

// leg_to_dest sends what the node writes to dest until the node's end:
// LEG_FIN (shut down or closed), LEG_RESET (reset, or a corrupt segment),
// LEG_WRITE with *err when dest cannot take it.
static int leg_to_dest(struct leg *l, int dest, unsigned spin, int *err)
{
	struct osf_side *s = &l->s;

	for (;;) {
		int64_t used = osf_side_rx_used(s);
		int r;

		if (used < 0)
			return LEG_RESET;
		if (used > 0) {
			uint64_t tail = s->rx->tail;
			struct osf_ring_view v = osf_side_rx_view(s);
			size_t n = osf_ring_span(v.mask, tail + v.bias, (size_t)used);
			ssize_t w = send(dest, v.d + ((tail + v.bias) & v.mask), n, MSG_NOSIGNAL);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				*err = errno;
				return LEG_WRITE;
			}
			__atomic_store_n(&s->rx->tail, tail + (uint64_t)w, __ATOMIC_RELEASE);
			__atomic_add_fetch(&l->to_dest, w, __ATOMIC_RELAXED);
			osf_side_wake_writer(s, tail + (uint64_t)used, tail + (uint64_t)w);
			continue;
		}
		if (osf_side_peer_flags(s) & OSF_SIDE_FIN) {
			if (osf_side_rx_used(s) != 0)
				continue;
			return LEG_FIN;
		}
		osf_side_peer_closing(s, l->fd);
		if (osf_side_state(s) & (OSF_CS_GONE | OSF_CS_BROKEN)) {
			if (osf_side_rx_used(s) > 0)
				continue;
			return osf_side_take_recv_error(s) ? LEG_RESET : LEG_FIN;
		}
		r = osf_side_wait_data(s, l->fd, spin);
		if (r < 0 && r != -EINTR)
			return LEG_RESET;
	}
}

// leg_from_dest writes what dest sends into the ring until dest's end:
// LEG_FIN (its FIN, passed on), LEG_RESET with *err (dest reset or
// failed), LEG_WRITE when the node is gone.
static int leg_from_dest(struct leg *l, int dest, unsigned spin, int *err)
{
	struct osf_side *s = &l->s;

	for (;;) {
		int64_t room;
		uint64_t head;
		struct osf_ring_view v;
		ssize_t r;

		osf_side_peer_closing(s, l->fd);
		if (osf_side_state(s) & (OSF_CS_GONE | OSF_CS_BROKEN))
			return LEG_WRITE;
		room = osf_side_tx_free(s);
		if (room < 0)
			return LEG_WRITE;
		if (room == 0) {
			int w = osf_side_wait_room(s, l->fd, spin);
			if (w < 0 && w != -EINTR)
				return LEG_WRITE;
			continue;
		}
		// The copy into the ring under this side's tx_lock, as every
		// producer's: the node's trim (osf_side_trim) holds it while
		// it gives the free pages back (and gives it up to us at
		// once). So never blocking with it.
		if (osf_side_lock_tx(s, l->fd, 0) != 0)
			return LEG_WRITE;
		head = s->tx->head;
		v = osf_side_tx_view(s);
		r = recv(dest, v.d + ((head + v.bias) & v.mask),
			 osf_ring_span(v.mask, head + v.bias, (size_t)room), MSG_DONTWAIT);
		if (r > 0)
			__atomic_store_n(&s->tx->head, head + (uint64_t)r, __ATOMIC_RELEASE);
		osf_seg_unlock(&s->me->tx_lock);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = {dest, POLLIN, 0};
			if (poll(&p, 1, -1) < 0 && errno != EINTR) {
				*err = errno;
				return LEG_RESET;
			}
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			*err = errno;
			return LEG_RESET;
		}
		if (r == 0) {
			__atomic_or_fetch(&s->me->flags, OSF_SIDE_FIN, __ATOMIC_ACQ_REL);
			osf_side_wake_reader(s, l->fd);
			return LEG_FIN;
		}
		__atomic_add_fetch(&l->to_node, r, __ATOMIC_RELAXED);
		osf_side_wake_reader(s, l->fd);
	}
}

// leg_abort makes the node see a reset once the gateway closes its end,
// and wakes both directions (a blocked recv on dest or on a wake socket
// returns; nothing goes on the wire).
static void leg_abort(struct leg *l, int dest)
{
	__atomic_or_fetch(&l->s.me->flags, OSF_SIDE_RESET, __ATOMIC_ACQ_REL);
	if (dest >= 0)
		shutdown(dest, SHUT_RD);
	shutdown(l->fd, SHUT_RD);
	shutdown(l->s.wfd, SHUT_RD);
}

// leg_linger0 sets (on) or clears the side's reset flag: with it, the node
// sees a reset whenever the gateway's end goes away, a gateway killed
// included (as SO_LINGER 0 on a kernel leg).
static void leg_linger0(struct leg *l, int on)
{
	if (on)
		__atomic_or_fetch(&l->s.me->flags, OSF_SIDE_RESET, __ATOMIC_ACQ_REL);
	else
		__atomic_and_fetch(&l->s.me->flags, ~OSF_SIDE_RESET, __ATOMIC_ACQ_REL);
}

static int64_t leg_count(int64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
	"unsafe"

	"github.com/osfproject/osf/sdp"
	"golang.org/x/sys/unix"
)

// ringLeg is a node connected through the rings of an offloaded
// connection.
type ringLeg struct {
	ep    *sdp.Endpoint
	l     *C.struct_leg
	from  string
	via   string // "shm", or "rdma" when an RDMA engine handed it over
	reset bool   // from the reply on, an abnormal end resets the node
}

// newRingLeg takes over an endpoint: accepted (server side), or dialled
// to a node's listener (client side, deliverRing).
func newRingLeg(ep *sdp.Endpoint) (*ringLeg, error) {
	for _, fd := range []int{ep.WakeFD, ep.WakeTxFD} {
		if err := unix.SetNonblock(fd, false); err != nil {
			return nil, fmt.Errorf("osfgw: wake socket: %w", err)
		}
	}
	l := C.leg_new(unsafe.Pointer(&ep.Segment.Mem[0]), C.uint32_t(ep.Segment.RingBytes), C.int(ep.Side), C.int(ep.WakeFD), C.int(ep.WakeTxFD))
	if l == nil {
		return nil, errors.New("osfgw: out of memory")
	}
	via := "shm"
	if ep.Segment.Flags()&sdp.SegRDMA != 0 {
		via = "rdma"
	}
	r := &ringLeg{ep: ep, l: l, from: ep.Remote.String(), via: via}
	r.timeout(handshakeTimeout)
	return r, nil
}

// timeout bounds each wait for the node's bytes (0: none).
func (r *ringLeg) timeout(d time.Duration) {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	unix.SetsockoptTimeval(r.ep.WakeFD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
}

func (r *ringLeg) node() string      { return r.from }
func (r *ringLeg) transport() string { return r.via }

func (r *ringLeg) send(b []byte) error {
	if C.osf_side_put_msg(&r.l.s, r.l.fd, unsafe.Pointer(&b[0]), C.size_t(len(b))) != 0 {
		return errors.New("osfgw: no room in the ring for a control message")
	}
	return nil
}

func (r *ringLeg) recv(b []byte) error {
	if e := C.osf_side_get_msg(&r.l.s, r.l.fd, unsafe.Pointer(&b[0]), C.size_t(len(b))); e < 0 {
		return fmt.Errorf("osfgw: read from the ring: %w", unix.Errno(-e))
	}
	return nil
}

func (r *ringLeg) established() {
	r.reset = true
	C.leg_linger0(r.l, 1)
	r.timeout(0)
}

// close releases the ring end; an abnormal end after the reply resets the
// node (its reads then say ECONNRESET, as TCP would).
func (r *ringLeg) close() {
	if r.reset {
		C.leg_abort(r.l, -1)
	}
	r.release()
}

func (r *ringLeg) release() {
	r.ep.Close()
	C.free(unsafe.Pointer(r.l))
	r.l = nil
}

func (r *ringLeg) counts() (toDest, toNode int64) {
	return int64(C.leg_count(&r.l.to_dest)), int64(C.leg_count(&r.l.to_node))
}

// ringSpin is how long a relay direction polls the ring before it sleeps
// (µs): none, so that an idle connection costs no CPU.
const ringSpin = 0

// relay moves both directions between the rings and dest until both have
// ended; it closes both and returns how the connection ended.
func (r *ringLeg) relay(st *relay, dest *net.TCPConn) string {
	f, err := dest.File() // a blocking descriptor of its own for C
	dest.Close()
	if err != nil {
		r.close()
		return "reset: " + err.Error()
	}
	dfd := int(f.Fd())
	unix.SetNonblock(dfd, false)
	st.setCounts(r.counts)
	var once sync.Once
	var how string
	abort := func(why string) {
		once.Do(func() {
			how = why
			C.leg_abort(r.l, C.int(dfd))
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // node -> destination
		defer wg.Done()
		var e C.int
		switch C.leg_to_dest(r.l, C.int(dfd), ringSpin, &e) {
		case C.LEG_FIN:
			if err := unix.Shutdown(dfd, unix.SHUT_WR); err != nil {
				abort(fmt.Sprintf("destination gone after the node's FIN: %v", err))
				return
			}
			st.fin(stateNodeFin)
		case C.LEG_WRITE:
			abort(fmt.Sprintf("reset: the destination is gone (%v)", unix.Errno(e)))
		default:
			abort("reset by the node")
		}
	}()
	go func() { // destination -> node
		defer wg.Done()
		var e C.int
		switch C.leg_from_dest(r.l, C.int(dfd), ringSpin, &e) {
		case C.LEG_FIN:
			st.fin(stateDestFin)
		case C.LEG_WRITE:
			abort("reset: the node is gone")
		default:
			abort(fmt.Sprintf("reset by the destination (%v)", unix.Errno(e)))
		}
	}()
	wg.Wait()
	once.Do(func() { // both ended with FINs: a clean close on both sides
		how = "closed"
		unix.SetsockoptLinger(dfd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{})
		C.leg_linger0(r.l, 0)
		r.reset = false
	})
	st.toDest.Store(int64(C.leg_count(&r.l.to_dest)))
	st.toNode.Store(int64(C.leg_count(&r.l.to_node)))
	st.setCounts(nil)
	f.Close() // SO_LINGER 0 unless clean: a reset
	r.release()
	return how
}
