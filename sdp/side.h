/* side.h: one end of an offloaded stream, the C side of the stream
 * protocol (the layout is segment.h; the RDMA engine in sdp/rdma is the
 * other implementation, in Go).
 *
 * A side is a mapped segment seen from one end: the ring it produces into
 * (tx), the ring it consumes (rx), its own flags and the peer's, and two
 * wake sockets: the application's fd carries the tokens that wake readers
 * (data or the end arrived), the writers' socket (wfd) those that wake
 * writers (room appeared), so that a reader never takes a writer's token;
 * or, in place of the writers' socket, the eventfd of the region the
 * segment is a slot of (osf_side_use_efd).
 *
 * Sleeping and waking: a side about to sleep counts itself as a waiter,
 * raises its rx_want (or tx_want) flag in the segment, fences, and checks
 * the ring once more; the other side publishes, fences, and if it sees the
 * flag clears it and sends as many tokens as there are waiters (at most
 * OSF_WAKE_MAX_TOKENS), counting them in the side's rx_tokens (tx_tokens);
 * a waiter first sheds tokens nobody will take (side.c, "Token
 * accounting"), so they never pile up, and a send that fails raises the
 * flag again, so no wake-up is lost. A blocked reader sleeps in a real blocking recv()
 * of one token on the application's fd, so the kernel applies SO_RCVTIMEO,
 * SA_RESTART and EINTR exactly as it would for TCP; a blocked writer does
 * the same on the writers' socket, which carries the application's
 * SO_SNDTIMEO as its SO_RCVTIMEO.
 *
 * The end follows Linux TCP: data already received is readable first; then
 * a peer that closed with data it never read (or with SO_LINGER 0) gives
 * ECONNRESET once (EPIPE after its shutdown(SHUT_WR), in CLOSE_WAIT),
 * else end-of-file; the first write after the peer closed
 * is accepted, later ones get EPIPE.
 *
 * Everything in the segment may be written by the peer: positions are
 * checked and masked, so a hostile peer can at most break its own
 * connection (ECONNRESET), never make this process touch memory outside
 * the segment.
 *
 * The embedder (libosf.so) keeps one struct osf_side per connection per
 * process, shares it between threads, and provides the system calls
 * (sys.h). Nothing here depends on the embedder otherwise.
 */
#ifndef OSF_SDP_SIDE_H
#define OSF_SDP_SIDE_H

#include "lock.h"
#include "segment.h"

#include <poll.h>
#include <stdint.h>

/* Connection state this process has learnt (struct osf_side.state). */
#define OSF_CS_GONE 0x1u       /* the last holder of the other side is gone */
#define OSF_CS_BROKEN 0x2u     /* the segment is corrupt: reset */
#define OSF_CS_WROTE_GONE 0x4u /* the one write TCP accepts after the peer
				  closed has been accepted */
#define OSF_CS_RESET 0x8u      /* TCP would have received a reset: the
				  socket is in state CLOSE (ENOTCONN, POLLHUP) */

struct osf_side {
	uint32_t size, lowat;
	int side;   /* OSF_SIDE_CLIENT or OSF_SIDE_SERVER */
	int wfd;    /* the writers' wake socket, or -1: writers wake on efd */
	int efd;    /* the writers' eventfd of the segment's region, shared by
		       its slots and both ends (osf_side_use_efd), or -1; not
		       the side's to close */
	int kfd;    /* 1: the application's wake socket is the connection's
		       kernel TCP socket (OSF_SHM_KFD; osf_side_probe_peer) */
	int unborn; /* 1: the wake socket is not connected yet (a client's
		       connection that waits for its first byte to reach its
		       companion: preload/setup.h): its hang-up is no end */
	struct osf_seg_side *me, *peer;
	struct osf_seg_ring *tx, *rx;
	uint8_t *txd, *rxd; /* the rings' regions; positions map into them
			       from the rings' bases (osf_side_tx_view) */
	int rebase;     /* 1: this side's producers move the tx ring's base
			   (a shm connection; never an RDMA one, whose
			   engine maps positions without it) */
	uint32_t state; /* OSF_CS_* */
	int pending_err; /* SO_ERROR */
	uint32_t seen_close_seq;
	int trim;           /* 1: idle, the rx ring gives its free pages back */
	uint64_t trim_tail; /* the rx tail at the last trim */
	uint64_t trim_base; /* the rx ring's base then */
	long lock_since[2]; /* the stuck clocks of rx_lock and tx_lock
			       (struct osf_lock_wait) */
	int oobinline; /* SO_OOBINLINE: the urgent byte stays in the stream */
	uint32_t nospace;    /* TCP's SOCK_NOSPACE: a writer found no room, or
				readiness found the side not writable, since
				room last appeared (osf_side_stamp) */
	uint64_t room_edges; /* times room appeared after nospace */
};

/* osf_side_init points s at the segment mapped at base (rings of
 * ring_bytes), seen from side, with writers' wake socket wfd. The rx ring
 * gives its pages back when idle (osf_side_trim) once osf_side_set_trim
 * allows it. */
void osf_side_init(struct osf_side *s, uint8_t *base, uint32_t ring_bytes,
		   int side, int wfd);

/* osf_side_use_efd makes s's writers wake on efd, the eventfd of the
 * region its segment is a slot of, in place of a writers' socket (s was
 * initialised with wfd -1). One eventfd serves every slot of the region
 * and both ends: a reader that makes room adds 1 to it when the writers'
 * tx_want is up, and its counter is never read, so it stays readable
 * after its first wake-up and every write is an edge for each epoll that
 * holds it edge-triggered. A writer sleeps in an epoll of its own that
 * holds the eventfd (EPOLLIN | EPOLLET) and the application's wake socket
 * (the other side's end: POLLHUP), so no writer takes another's wake-up
 * whatever slot or process it is in; a wake-up for another slot is a
 * spurious one (it looks at its ring and sleeps again). Level-triggered
 * pollers cannot sleep on it (readable for ever): they poll such an epoll
 * instead (docs/D2-PROPOSAL.md, step 2). */
void osf_side_use_efd(struct osf_side *s, int efd);

/* osf_side_probe_peer keeps a byte queued on the peer's kernel TCP socket
 * while a writer or a poller for room of s (kfd: OSF_SHM_KFD) waits after
 * the peer's FIN. Such a peer (its shutdown(SHUT_WR)) sent its FIN
 * already, so the death of its last holder makes no event on fd, the only
 * file the two ends share per connection; with a byte unread there, that
 * death is the kernel's close of a socket holding unread data: a reset
 * (RFC 2525, as TCP's, whose peer dies with this side's unread data),
 * which fd reports to every waiter (POLLERR | POLLHUP) and which ends the
 * wait as the peer's end (osf_side_check_end). The byte is a readers'
 * token, counted in the peer's rx_tokens before it is sent: a live peer's
 * readers shed it, its close reads it first (its FIN stays a FIN), and
 * none is sent while the count says one is queued. Returns 1 when the
 * wait needs the byte (then it looks again now and then, every
 * OSF_PROBE_MS: a poller of the peer may take it as a spurious wake-up),
 * else 0: no kfd, writers on a socket pair (its hang-up tells), no FIN
 * from the peer yet (its death would be a FIN or a reset on fd by
 * itself), or the end known already. */
#define OSF_PROBE_MS 100
int osf_side_probe_peer(struct osf_side *s, int fd);

/* ---- state ------------------------------------------------------------- */

static inline uint32_t osf_side_state(const struct osf_side *s)
{
	return __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
}

static inline void osf_side_set_state(struct osf_side *s, uint32_t bits)
{
	__atomic_or_fetch(&s->state, bits, __ATOMIC_ACQ_REL);
}

static inline uint32_t osf_side_peer_flags(const struct osf_side *s)
{
	return __atomic_load_n(&s->peer->flags, __ATOMIC_ACQUIRE);
}

static inline uint32_t osf_side_my_flags(const struct osf_side *s)
{
	return __atomic_load_n(&s->me->flags, __ATOMIC_ACQUIRE);
}

/* osf_side_set_pending records err as the pending error unless one is. */
void osf_side_set_pending(struct osf_side *s, int err);

/* osf_side_take_pending returns and clears the pending error (SO_ERROR). */
int osf_side_take_pending(struct osf_side *s);

/* osf_side_take_recv_error is take_pending for a read at the end of the
 * stream: EPIPE (the reset that answers a write to a peer that had
 * closed) is left for the next write, as TCP's read sees the FIN first. */
int osf_side_take_recv_error(struct osf_side *s);

/* osf_side_tcp_closed: TCP would be in state CLOSE (or TIME_WAIT, which
 * the application sees as CLOSE): reset, or both directions shut down. */
int osf_side_tcp_closed(const struct osf_side *s);

/* osf_side_tcp_state returns the Linux TCP state (TCP_ESTABLISHED, ...)
 * that TCP_INFO reports for this side. */
int osf_side_tcp_state(const struct osf_side *s);

/* osf_side_broken records a corrupt segment: the connection is reset. */
void osf_side_broken(struct osf_side *s);

/* osf_side_mark_gone records that the last holder of the other side
 * closed; as TCP would have sent a reset when it closed with bytes it
 * never read, or with SO_LINGER 0, or never accepted the connection. */
void osf_side_mark_gone(struct osf_side *s);

/* osf_side_check_end asks the kernel (one poll of a wake socket: fd, the
 * application's, or the writers' socket s->wfd) whether the other side is
 * gone. */
void osf_side_check_end(struct osf_side *s, int fd);

/* osf_side_shut_wake wakes this side's sleepers for a shutdown(how) whose
 * flags the caller set: SHUT_RD (or RDWR) shuts the application's wake
 * socket fd for reading, SHUT_WR (or RDWR) the writers' socket, when a
 * waiter of that kind is counted, so that every reader (writer) asleep in
 * a recv of a token there, or a poll on it, returns at once, in any
 * thread or process, as the kernel wakes those of a TCP socket (side.c,
 * "The end, seen on a wake socket"). */
void osf_side_shut_wake(struct osf_side *s, int fd, int how);

/* osf_side_peer_closing checks, without a system call, whether a holder of
 * the other side dropped its descriptor since we last looked; if so it
 * asks the kernel whether that was the last one. */
static inline void osf_side_peer_closing(struct osf_side *s, int fd)
{
	uint32_t seq = __atomic_load_n(&s->peer->close_seq, __ATOMIC_ACQUIRE);

	if (__builtin_expect(seq == s->seen_close_seq, 1))
		return;
	s->seen_close_seq = seq;
	osf_side_check_end(s, fd);
}

/* ---- urgent data (MSG_OOB) ---------------------------------------------- */

/* osf_side_urg returns the position just past the urgent byte the peer
 * sent last, when that byte is still unread in the rx ring (tail, head:
 * positions read under the consumers' lock, or a look), else 0. The word
 * is the peer's: it counts only inside [tail, head). */
static inline uint64_t osf_side_urg(const struct osf_side *s, uint64_t tail,
				    uint64_t head)
{
	uint64_t u = __atomic_load_n(&s->peer->urg, __ATOMIC_ACQUIRE);

	return __builtin_expect(u == 0, 1) || u <= tail || u > head ? 0 : u;
}

/* osf_side_urg_now is osf_side_urg at this moment (0 too when the ring is
 * corrupt). */
static inline uint64_t osf_side_urg_now(const struct osf_side *s)
{
	uint64_t tail, head;

	if (__builtin_expect(!__atomic_load_n(&s->peer->urg, __ATOMIC_RELAXED), 1))
		return 0;
	tail = __atomic_load_n(&s->rx->tail, __ATOMIC_ACQUIRE);
	head = __atomic_load_n(&s->rx->head, __ATOMIC_ACQUIRE);
	return osf_ring_used(head, tail, s->size) < 0 ? 0 : osf_side_urg(s, tail, head);
}

/* osf_side_urg_unread tells whether urgent data waits to be read out of
 * band (TCP's POLLPRI): an urgent byte not read past, nor read already. */
static inline int osf_side_urg_unread(const struct osf_side *s)
{
	uint64_t u = osf_side_urg_now(s);

	return u && __atomic_load_n(&s->me->urg_read, __ATOMIC_RELAXED) != u;
}

/* osf_side_peer_unborn_check asks the kernel whether the other side, which
 * never held its side (not accepted yet), never will: its listener closed,
 * or its process died, with the connection queued, which TCP resets (the
 * segment cannot say so: nobody on that side ever mapped it). One poll,
 * only until the peer takes its side or the end is known. */
static inline void osf_side_peer_unborn_check(struct osf_side *s, int fd)
{
	if (__builtin_expect(__atomic_load_n(&s->peer->holders, __ATOMIC_RELAXED) != 0, 1) ||
	    __atomic_load_n(&s->peer->close_seq, __ATOMIC_RELAXED) || osf_side_state(s))
		return;
	osf_side_check_end(s, fd);
}

/* ---- locks ------------------------------------------------------------- */

/* osf_side_lock_rx and osf_side_lock_tx take this side's consumers' lock
 * (timeout: SO_RCVTIMEO of fd, the application's wake socket) or
 * producers' lock (SO_SNDTIMEO, kept on the writers' socket) for a call
 * that is nonblock or not: 0, OSF_LOCK_AGAIN or OSF_LOCK_BROKEN. */
static inline int osf_side_lock_rx(struct osf_side *s, int fd, int nonblock)
{
	struct osf_lock_wait how = {nonblock, fd, &s->lock_since[0], 0};

	return osf_seg_lock_wait(&s->me->rx_lock, &how);
}

static inline int osf_side_lock_tx(struct osf_side *s, int fd, int nonblock)
{
	/* SO_SNDTIMEO: the writers' socket's receive timeout (a copy), else
	 * the application's socket's own. */
	struct osf_lock_wait how = {nonblock, s->wfd >= 0 ? s->wfd : fd, &s->lock_since[1],
				    s->wfd < 0};

	return osf_seg_lock_wait(&s->me->tx_lock, &how);
}

/* ---- rings ------------------------------------------------------------- */

/* osf_side_rx_used returns the bytes waiting to be read, -1 if corrupt. */
static inline int64_t osf_side_rx_used(const struct osf_side *s)
{
	uint64_t head = __atomic_load_n(&s->rx->head, __ATOMIC_ACQUIRE);
	uint64_t tail = __atomic_load_n(&s->rx->tail, __ATOMIC_RELAXED);

	return osf_ring_used(head, tail, s->size);
}

/* osf_side_tx_view returns the tx ring's view (segment.h) for a producer
 * holding tx_lock. */
static inline struct osf_ring_view osf_side_tx_view(const struct osf_side *s)
{
	return osf_seg_view(s->txd, s->size, s->side,
			    __atomic_load_n(&s->tx->base, __ATOMIC_RELAXED));
}

/* osf_side_rx_view returns the rx ring's view for a consumer, read after
 * head (the producer stores a new base before the head that follows). */
static inline struct osf_ring_view osf_side_rx_view(const struct osf_side *s)
{
	return osf_seg_view(s->rxd, s->size, 1 - s->side,
			    __atomic_load_n(&s->rx->base, __ATOMIC_ACQUIRE));
}

/* osf_side_rx_copy copies n bytes from position pos of the rx ring (a
 * consumer, after it read head). */
static inline void osf_side_rx_copy(const struct osf_side *s, uint64_t pos,
				    void *dst, size_t n)
{
	struct osf_ring_view v = osf_side_rx_view(s);

	osf_ring_copy_out(v.d, v.mask, pos + v.bias, dst, n);
}

/* osf_side_tx_copy copies n bytes into the tx ring at position pos (a
 * producer holding tx_lock). */
static inline void osf_side_tx_copy(const struct osf_side *s, uint64_t pos,
				    const void *src, size_t n)
{
	struct osf_ring_view v = osf_side_tx_view(s);

	osf_ring_copy_in(v.d, v.mask, pos + v.bias, src, n);
}

/* osf_side_peer_rcv_part returns the part of the bytes in flight that the
 * peer's receive buffer holds (osf_seg_rcv_part). */
static inline uint64_t osf_side_peer_rcv_part(const struct osf_side *s)
{
	return osf_seg_rcv_part(s->size, __atomic_load_n(&s->peer->rcvlim,
							 __ATOMIC_RELAXED));
}

/* osf_side_tx_limit returns the bytes this side may have in flight
 * (osf_seg_tx_limit with this side's SO_SNDBUF and the peer's SO_RCVBUF). */
static inline uint64_t osf_side_tx_limit(const struct osf_side *s)
{
	return osf_seg_tx_limit(s->size,
				__atomic_load_n(&s->me->sndlim, __ATOMIC_RELAXED),
				__atomic_load_n(&s->peer->rcvlim, __ATOMIC_RELAXED));
}

/* osf_side_rx_limit returns the bytes the peer may have in flight towards
 * this side (its osf_side_tx_limit): what a reader can wait for. */
static inline uint64_t osf_side_rx_limit(const struct osf_side *s)
{
	return osf_seg_tx_limit(s->size,
				__atomic_load_n(&s->peer->sndlim, __ATOMIC_RELAXED),
				__atomic_load_n(&s->me->rcvlim, __ATOMIC_RELAXED));
}

/* osf_side_tx_free returns the room to write (osf_side_tx_limit less
 * what is in flight, and only below the trim stop while a consumer gives
 * pages back: osf_side_trim), -1 if the ring is corrupt. A producer calls
 * it with its tx_lock held and writes no more than it returned. */
static inline int64_t osf_side_tx_free(const struct osf_side *s)
{
	uint64_t head = __atomic_load_n(&s->tx->head, __ATOMIC_RELAXED);
	uint64_t tail = __atomic_load_n(&s->tx->tail, __ATOMIC_ACQUIRE);
	int64_t used = osf_ring_used(head, tail, s->size);
	uint64_t lim = osf_side_tx_limit(s), stop;

	if (used < 0)
		return -1;
	if ((uint64_t)used >= lim)
		return 0;
	lim -= (uint64_t)used;
	stop = __atomic_load_n(&s->me->trim_stop, __ATOMIC_ACQUIRE);
	if (__builtin_expect(stop != 0, 0)) /* a bound only, whatever its value */
		lim = stop <= head ? 0 : stop - head < lim ? stop - head : lim;
	return (int64_t)lim;
}

/* osf_side_tx_stopped tells whether a trim of the tx ring holds this
 * side's producers below its stop (osf_side_trim). */
static inline int osf_side_tx_stopped(const struct osf_side *s)
{
	return __atomic_load_n(&s->me->trim_stop, __ATOMIC_RELAXED) != 0;
}

/* osf_side_tx_rebase moves the tx ring's base to head (segment.h,
 * "bases") unless TCP_CORK holds bytes back, a trim owns the ring or an
 * urgent byte was sent; the ring is empty and tx_lock held. */
void osf_side_tx_rebase(struct osf_side *s, uint64_t head);

/* osf_side_tx_room is osf_side_tx_free for a producer about to write
 * (tx_lock held), which first moves the base of an empty ring to head. */
static inline int64_t osf_side_tx_room(struct osf_side *s)
{
	int64_t room;

	if (__builtin_expect(s->rebase, 1)) {
		uint64_t head = __atomic_load_n(&s->tx->head, __ATOMIC_RELAXED);
		if (head == __atomic_load_n(&s->tx->tail, __ATOMIC_ACQUIRE) &&
		    head != __atomic_load_n(&s->tx->base, __ATOMIC_RELAXED))
			osf_side_tx_rebase(s, head);
	}
	room = osf_side_tx_free(s);
	if (__builtin_expect(room == 0, 0))
		__atomic_store_n(&s->nospace, 1, __ATOMIC_RELEASE);
	return room;
}

/* osf_side_tx_queued returns the bytes written and not yet read. */
static inline int64_t osf_side_tx_queued(const struct osf_side *s)
{
	return osf_ring_used(__atomic_load_n(&s->tx->head, __ATOMIC_RELAXED),
			     __atomic_load_n(&s->tx->tail, __ATOMIC_ACQUIRE),
			     s->size);
}

/* osf_side_tx_unacked returns what TCP would count in SIOCOUTQ: the bytes
 * written beyond what the peer's receive buffer holds (kernel TCP on
 * loopback acknowledges data as soon as it is queued at the receiver, so
 * unread bytes there are not counted), -1 if the ring is corrupt. */
static inline int64_t osf_side_tx_unacked(const struct osf_side *s)
{
	int64_t q = osf_side_tx_queued(s);
	uint64_t part = osf_side_peer_rcv_part(s);

	if (q < 0)
		return -1;
	return (uint64_t)q > part ? q - (int64_t)part : 0;
}

/* osf_side_rx_past: more than have bytes to read, or the end, an error,
 * or this side shut down for reading (a read of more than have bytes
 * would not block for ever). */
static inline int osf_side_rx_past(const struct osf_side *s, int64_t have)
{
	/* OSF_SIDE_RESET alone is not readiness: it says how the side ends
	 * once its last holder is gone (mark_gone), and a process that closed
	 * with linger 0 may not have been the last (a fork child serves on). */
	return osf_side_rx_used(s) > have ||
	       (osf_side_peer_flags(s) & OSF_SIDE_FIN) ||
	       (osf_side_my_flags(s) & OSF_SIDE_RDSHUT) ||
	       (osf_side_state(s) & OSF_CS_GONE) || s->pending_err;
}

/* osf_side_rx_ready: a read would not block (data, end, error, or this
 * side shut down for reading). */
static inline int osf_side_rx_ready(const struct osf_side *s)
{
	return osf_side_rx_past(s, 0);
}

/* osf_side_rx_blind: this side shut its wake socket for reading
 * (osf_side_shut_wake), so no token tells its pollers of data that
 * arrives from now on. */
static inline int osf_side_rx_blind(const struct osf_side *s)
{
	return (osf_side_my_flags(s) & OSF_SIDE_RDSOCK) != 0;
}

/* osf_side_tx_ready: a write would not block (room, the end, or this side
 * shut down for writing: EPIPE). */
static inline int osf_side_tx_ready(const struct osf_side *s)
{
	return osf_side_tx_free(s) != 0 || osf_side_state(s) ||
	       (osf_side_my_flags(s) & OSF_SIDE_FIN);
}

/* ---- memory -------------------------------------------------------------- */

/* An idle ring gives its pages back (docs/ARCHITECTURE.md, "Memory"). The
 * pages of a ring that hold no unread data, from head to tail + size, are
 * dead until the producer writes there again. Its consumer gives them back
 * to the kernel (madvise MADV_REMOVE on the shared mapping: a hole in the
 * segment's memfd, freed for both processes), in rounds that each set the
 * producers' trim stop under their tx_lock (osf_side_trim: it only tries
 * that lock, and never waits for it). Only the pages consumed since the
 * last trim are looked at. Never for an RDMA engine's segment: its rings
 * are registered (pinned) memory that the NIC writes.
 *
 * When: a page given back costs the producer a page fault and a zeroed
 * page when it writes there again (measured: 16 KiB blocking ping-pong
 * went from 6 to 30 µs when every sleep trimmed), so a ring is trimmed only
 * once the side consumed OSF_TRIM_BYTES since the last trim and it has
 * been idle for OSF_TRIM_IDLE_MS: by a poller whose wait slept that long
 * with the connection armed and nothing arriving (selectmux), or by the
 * embedder's reaper thread, which watches the ring positions of every
 * such side (libosf.so: preload/reaper.c). */
#ifndef OSF_TRIM_BYTES
#define OSF_TRIM_BYTES 4096u
#endif
#define OSF_TRIM_IDLE_MS 100

/* osf_side_set_trim allows (on) or forbids giving the rx ring's pages
 * back; the segment must be a shared mapping of a memfd (or of shared
 * anonymous memory), and not an RDMA engine's. */
void osf_side_set_trim(struct osf_side *s, int on);

/* osf_side_trim gives back the whole pages of the rx ring that hold no
 * unread data: the bytes given back, 0 when the producer's lock was not
 * free at once (next time) or there was nothing to give. */
size_t osf_side_trim(struct osf_side *s);

/* osf_side_trim_due reports whether the rx ring has pages to give back:
 * this side consumed OSF_TRIM_BYTES since the last trim. */
static inline int osf_side_trim_due(const struct osf_side *s)
{
	return s->trim && __atomic_load_n(&s->rx->tail, __ATOMIC_RELAXED) -
				       __atomic_load_n(&s->trim_tail,
						       __ATOMIC_RELAXED) >=
			       OSF_TRIM_BYTES;
}

/* ---- waking the other side ---------------------------------------------- */

/* osf_side_send_tokens sends the waiters counted in *waiters (at least
 * one: a waiter osf does not count, the application's own) their tokens
 * on sock, without blocking. */
void osf_side_send_tokens(struct osf_side *s, int sock, uint32_t *waiters);

/* osf_side_claim_readers sends the other side's readers, whose rx_want
 * the caller saw up, their tokens on fd if it takes the flag
 * (segment.h osf_wake_claim: counted before the flag is taken, so that
 * a kernel TCP socket's closer sees them; OSF_WANT_CLOSED is never
 * taken). */
void osf_side_claim_readers(struct osf_side *s, int fd);

/* osf_side_debug_wake_us (tests: OSF_DEBUG_KFD_WAKE_US, libosf.so's
 * init): a reader's wake-up on a kernel TCP socket (kfd) sleeps that long
 * between taking the flag and sending its tokens, as a sender preempted
 * there would; 0 in production. */
extern unsigned osf_side_debug_wake_us;

/* osf_side_wake_reader wakes the other side's readers if they asked for
 * it, on fd (the application's wake socket); the caller has published
 * what it changed (data, FIN). */
static inline void osf_side_wake_reader(struct osf_side *s, int fd)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__builtin_expect(!__atomic_load_n(&s->peer->rx_want,
					      __ATOMIC_RELAXED),
			     1))
		return;
	osf_side_claim_readers(s, fd);
}

/* osf_side_wake_efd wakes the writers asleep on the region's eventfd
 * (osf_side_use_efd): all of them, of every slot and both ends. */
void osf_side_wake_efd(struct osf_side *s);

/* osf_side_wake_writer wakes the other side's writers waiting for room,
 * once the rx ring (positions head, tail) has the low-water mark free. */
static inline void osf_side_wake_writer(struct osf_side *s, uint64_t head,
					uint64_t tail)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__builtin_expect(!__atomic_load_n(&s->peer->tx_want,
					      __ATOMIC_RELAXED),
			     1))
		return;
	if (s->size - (head - tail) < s->lowat)
		return;
	if (!__atomic_exchange_n(&s->peer->tx_want, 0, __ATOMIC_ACQ_REL))
		return;
	if (__builtin_expect(s->wfd >= 0, 1))
		osf_side_send_tokens(s, s->wfd, &s->peer->tx_waiters);
	else
		osf_side_wake_efd(s);
}

/* ---- waiting -------------------------------------------------------------- */

/* osf_side_drain reads from sock the tokens no counted waiter of this side
 * will take (keep: the waiters counted in *waiters), and notices the other
 * side's end. */
void osf_side_drain(struct osf_side *s, int sock, uint32_t *waiters);

/* osf_side_uncount removes a waiter from a count, never below 0 (a fork
 * child may end a wait its parent counted, and the peer may write
 * anything). */
void osf_side_uncount(uint32_t *waiters);

/* osf_side_take_token takes the one token a waiter woken on sock is owed,
 * if it is there (a poller: poll does not consume). */
void osf_side_take_token(struct osf_side *s, int sock);

/* osf_side_arm_rx and osf_side_arm_tx ask the other side for a wake token
 * at the next data (room), as a caller that got EAGAIN will wait for
 * readiness (edge-triggered epoll included); they return 1 when the state
 * changed while arming, so that the caller must look again. */
int osf_side_arm_rx(struct osf_side *s);
int osf_side_arm_tx(struct osf_side *s);

/* osf_side_wait_data waits until a read would not block, spinning for up
 * to spin_us first, then sleeping on fd: 0, or -errno of the sleep
 * (-EINTR for a signal, -EAGAIN when SO_RCVTIMEO expired). */
int osf_side_wait_data(struct osf_side *s, int fd, unsigned spin_us);

/* osf_side_wait_more is osf_side_wait_data for a reader that needs more
 * than the have bytes already queued (MSG_PEEK with MSG_WAITALL): it
 * returns once osf_side_rx_past(s, have). */
int osf_side_wait_more(struct osf_side *s, int fd, unsigned spin_us,
		       int64_t have);

/* osf_side_wait_room waits until there is room to write (or the end),
 * spinning for up to spin_us, then sleeping on the writers' socket, or
 * on the region's eventfd and the application's wake socket fd (its
 * POLLHUP is the other side's end; its SO_SNDTIMEO the send timeout): 0,
 * or -EAGAIN when SO_SNDTIMEO expired, -EINTR for a signal (on the
 * eventfd: after a handler, the sleep goes on when osf_sys_intr_restart
 * says every handler that ran had SA_RESTART and no timeout is set, as
 * the kernel restarts a send). */
int osf_side_wait_room(struct osf_side *s, int fd, unsigned spin_us);

/* osf_side_wait_room_or is osf_side_wait_room that also ends, the side
 * then gone, when socket end reports an error or hang-up: a connection
 * whose fd is its kernel TCP socket (OSF_SHM_KFD) and whose server never
 * took its side, where the writers' socket's far end may sit in a hello
 * no process reads and the server's answer is the kernel's reset. It
 * looks every few milliseconds (a signal ends it with -EINTR). On the
 * region's eventfd end is fd or -1, and fd's hang-up is watched anyway. */
int osf_side_wait_room_or(struct osf_side *s, int fd, unsigned spin_us, int end);

/* ---- messages before the data path owns the connection ------------------ */

/* osf_side_put_msg puts n bytes, whole, into the send ring (a handshake
 * carried in the stream: a gateway's challenge, request, reply or notice)
 * and wakes the other side's readers, and its writers (a connect waiting
 * to complete may poll for POLLOUT only), on fd, the application's wake
 * socket: 0, or -1 without room for all of them (never waits). */
int osf_side_put_msg(struct osf_side *s, int fd, const void *b, size_t n);

/* osf_side_get_msg takes exactly n bytes from the receive ring once they
 * are all there, sleeping on fd (its SO_RCVTIMEO bounds each sleep): 0,
 * -ECONNRESET when the other side ends first or the ring's positions are
 * impossible, -EAGAIN when a sleep timed out, or the sleep's -errno. */
int osf_side_get_msg(struct osf_side *s, int fd, void *b, size_t n);

/* ---- readiness ------------------------------------------------------------ */

/* Kinds of wait a poller arms (osf_side_arm). */
#define OSF_ARM_RX 0x1 /* data or the end: a token on the fd itself */
#define OSF_ARM_TX 0x2 /* room: a token on the writers' socket */

/* osf_side_revents returns the poll(2) events the side would report now,
 * computed from the rings; not writable, it notes nospace (as tcp_poll
 * sets SOCK_NOSPACE). */
short osf_side_revents(struct osf_side *s);

/* osf_side_arm counts the caller as a waiter of kinds not in already
 * (first shedding stale tokens on fd, the application's wake socket, or
 * the writers' socket), asks the peer to wake it, and returns the events
 * ready after arming. */
short osf_side_arm(struct osf_side *s, int fd, int kinds, int already);

/* osf_side_wake_events returns the events a poller asks of the
 * application's wake socket: tokens and the end (POLLIN | POLLRDHUP). Once
 * this side shut it for reading (osf_side_shut_wake) it polls readable for
 * ever: then 0 (POLLHUP, the other side's end, still comes), or -1 when
 * the other side shut its end the same way (POLLHUP for ever too): leave
 * the socket out; the writers' socket still tells the end. So does a TCP
 * socket (kfd) once the peer's shutdown(SHUT_WR) sent its FIN, after its
 * slot's FIN flag: no token is owed to a reader after that flag, and the
 * end there is POLLERR | POLLHUP (osf_side_probe_peer): 0, not a poll
 * that returns at once for ever while it waits for room. */
static inline short osf_side_wake_events(const struct osf_side *s)
{
	if (__builtin_expect(!(osf_side_my_flags(s) & OSF_SIDE_RDSOCK), 1))
		return s->kfd && (osf_side_peer_flags(s) & OSF_SIDE_FIN) ? 0
								       : POLLIN | POLLRDHUP;
	return (osf_side_peer_flags(s) & OSF_SIDE_RDSOCK) ? -1 : 0;
}

/* osf_side_disarm ends a poller's wait of kinds: it takes the token owed
 * from each armed socket the kernel reported readable (woken), notes the
 * other side's end, and stops counting the caller. fd is the
 * application's wake socket. */
void osf_side_disarm(struct osf_side *s, int fd, int kinds, int woken);

/* osf_side_stamp returns a value that changes whenever data arrives, room
 * appears after nospace (TCP wakes writers only then: room that a credit
 * or a read makes while the side is writable is no edge) or the other
 * side's state changes. */
uint64_t osf_side_stamp(struct osf_side *s);

#endif
