/* rx.h: the receiving half of an RDMA stream (docs/ARCHITECTURE.md, "RDMA
 * transport", "Receiving"), one implementation for both threads that take
 * a connection's completions: an application's thread that found no data
 * (libosf.so, preload/conn_rdma.c, through rx->take: plain C of the core,
 * sdp/rdma rx.c; only with OSF_RDMA_RX=caller, docs/DESIGN.md D4) and the
 * progress engine (stream.go, through cgo).
 *
 * The rule (osf_rdma_rx_one) applies one completion: the peer's DATA
 * (the new head of the ring it writes, published into the local segment
 * after the payload, which landed before the completion), CREDIT (its
 * consumer position of the ring we write), FLAGS (FIN), the completion of
 * our own sends (counted for tx.h), and reposts the receive the peer's
 * message used. Everything the peer sent is checked against what this
 * process knows: a head at most one ring beyond the credit we gave, a
 * credit at most what we sent, known kinds and flags; the peer's values
 * are positions, never addresses, and are only compared and stored. What
 * the rule does not do itself it leaves, in order, to the engine as one
 * event (struct osf_rdma_ev): a failed or flushed completion, the peer's
 * CLOSE, a probe's or CLOSE's completion, a violation (the engine resets
 * the connection). While an event waits nobody takes more completions.
 *
 * It wakes the local side's waiters as a peer process would (segment.h,
 * the wake protocol): a reader that asked (rx_want) gets tokens on the
 * engine's end of the application's wake socket after a DATA or FIN, a
 * writer waiting for room on the writers' socket after a CREDIT.
 *
 * struct osf_rdma_rx lives and dies with its struct osf_rdma_tx (tx.c: the
 * same reuse, the same generation). Locking: rx_lock serialises taking
 * completions; an application's thread only tries it (a thread that
 * finds it busy looks at its ring again: the holder publishes whatever it
 * takes), the engine spins for it. The engine sets the wake sockets to -1
 * under rx_lock before it closes them, and retires the struct under it,
 * so a holder never sends on a closed number or writes an unmapped
 * segment.
 */
#ifndef OSF_SDP_RDMA_RX_H
#define OSF_SDP_RDMA_RX_H

#include "tx.h"
#include "../segment.h"

#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* More work request and immediate kinds (link.go, imm.go). */
#define OSF_RDMA_WR_CREDIT 3u /* zero-length WRITE WITH IMMEDIATE: credit */
#define OSF_RDMA_WR_CLOSE 5u
#define OSF_RDMA_WR_RECV 6u
#define OSF_RDMA_WR_PROBE 7u
#define OSF_RDMA_IMM_CREDIT 1u
#define OSF_RDMA_IMM_CLOSE 3u
#define OSF_RDMA_CLOSE_GRACEFUL 0u
#define OSF_RDMA_CLOSE_ABORT 1u
/* Receives kept posted (the engine's rqDepth): a peer with a full send
 * queue in flight never finds none. */
#define OSF_RDMA_RQ_DEPTH (2u * OSF_RDMA_SQ_DEPTH)
/* Completion status: success, and the flush of a broken queue pair
 * (ibv_wc_status). */
#define OSF_RDMA_WC_OK 0u
#define OSF_RDMA_WC_FLUSH 5u

/* One completion, from a verbs CQ or the stand-in. */
struct osf_rdma_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t imm; /* host order; valid with has_imm */
	uint32_t has_imm;
	uint32_t pad;
};

/* How the CQ is armed (rx->cq_armed): not, for the next solicited
 * completion (every immediate the peer sends is solicited, tx.c: its
 * DATA, FIN, CREDIT and CLOSE; our own sends' completions are not), or
 * for the next completion of any kind. */
#define OSF_RDMA_ARMED_NONE 0u
#define OSF_RDMA_ARMED_SOLICITED 1u
#define OSF_RDMA_ARMED_ALL 2u

/* What the rule leaves to the engine. */
#define OSF_RDMA_EV_NONE 0u
#define OSF_RDMA_EV_BROKEN 1u    /* a completion failed: wc.status */
#define OSF_RDMA_EV_CLOSE 2u     /* the peer's CLOSE: value is its code */
#define OSF_RDMA_EV_SENT 3u      /* our probe or CLOSE completed: wc.wr_id */
#define OSF_RDMA_EV_VIOLATION 4u /* the peer broke the protocol: why */
#define OSF_RDMA_EV_FAIL 5u      /* a local failure: why */
struct osf_rdma_ev {
	uint32_t what;
	uint32_t value;
	struct osf_rdma_wc wc;
	char why[120];
};

struct osf_rdma_rx;

/* A taker takes up to n completions without blocking: how many, or
 * -errno (the link broke). */
typedef int (*osf_rdma_poll_fn)(struct osf_rdma_rx *rx, struct osf_rdma_wc *wc, int n);
/* A receive poster posts the receive wr_id: 0 or an errno. */
typedef int (*osf_rdma_recv_fn)(struct osf_rdma_rx *rx, uint64_t wr_id);
/* The application's threads' entry (rx.c osf_rdma_rx_take): takes and
 * applies what completions there are, for the caller of pid holding
 * generation gen: how many, 0 when there were none or the engine must
 * act, -2 when another thread (or the engine) holds the lock, -1 when this
 * thread may not (another process, a retired or closing connection). */
typedef int (*osf_rdma_take_fn)(struct osf_rdma_tx *tx, uint32_t gen, int32_t pid);
/* A channel operation (rx.c), under ep_lock: arm the CQ for its next
 * completion event, or read and acknowledge the channel's event (at most
 * one waits: rx.c) without blocking; 0 or an errno. */
typedef int (*osf_rdma_chan_fn)(struct osf_rdma_rx *rx);

struct osf_rdma_rx {
	uint32_t lock;   /* rx_lock: 0 free, 1 held */
	uint32_t down;   /* the engine: the link is down, or the stream dead */
	struct osf_rdma_tx *tx;
	/* The local segment (the engine's mapping, mapped until retired). */
	struct osf_seg_hdr *hdr;
	int32_t side;  /* the application's side; the engine plays 1 - side */
	uint32_t size; /* bytes per ring */
	uint32_t lowat;
	int32_t wake;    /* the engine's end of the application's wake socket, or -1 */
	int32_t wake_tx; /* of the writers' wake socket, or -1 */
	int32_t kick;    /* the engine's eventfd: an event waits */
	/* The engine's word (C memory of its own, never freed): 1 while it
	 * sleeps at most heldLook (sleep.go), so that it will look at every
	 * stream within about a second without being kicked; 0 while it is
	 * awake or sleeps without such a bound. NULL: no engine (fakes). */
	const uint32_t *eng_looks;
	/* Under lock. */
	uint64_t head;     /* the peer's producer position of ring 1 - side */
	uint64_t credited; /* our consumer position last reported (tx.h's lock
			      for writing: see osf_rdma_credit_push) */
	uint32_t peer_fin, peer_closed;
	uint32_t engine_due; /* an application's thread applied a CREDIT while
				bytes (or FIN) wait to be sent, or a send
				completion the engine waits for (arm_all): the
				engine may have been left work */
	uint32_t recvs;    /* receives posted, not completed */
	uint32_t recv_seq; /* receives ever posted */
	struct osf_rdma_ev ev; /* the event waiting for the engine */
	/* How to take completions and post receives (NULL: the engine's Go
	 * link does, as fakes in tests). */
	osf_rdma_poll_fn poll;
	osf_rdma_recv_fn post_recv;
	osf_rdma_take_fn take; /* rx.c osf_rdma_rx_take */
	void *cq, *qp;       /* verbs */
	int32_t sim_fd;      /* the stand-in's socket, or -1 */
	uint32_t sim_rq;     /* the stand-in: receives posted and not used */
	uint64_t sim_ring;   /* the stand-in: the address of ring 1 - side */
	uint32_t sim_have;   /* the stand-in: bytes in sim_buf */
	uint32_t sim_left;   /* payload bytes of the current write still to come */
	uint8_t sim_hdr[16]; /* its header */
	uint32_t sim_cur;    /* 1: a write's header is in sim_hdr */
	uint32_t sim_eof;
	/* Counters (relaxed; osfstat, logs and tests). */
	uint64_t bytes_in;
	uint64_t caller_wcs; /* completions taken by the application's threads */
	uint64_t engine_wcs; /* by the engine */
	uint64_t caller_credits; /* credits posted by the application's threads */
	uint64_t caller_takes;   /* takes by the application's threads that held rx_lock */
	uint64_t caller_empty;   /* of them, those that found no completion */
	uint64_t chan_ctls;      /* epoll_ctl calls on the engine's set for chan_fd */
	uint64_t cq_arms;        /* ibv_req_notify_cq calls */
	/* Completions taken from the device and not applied yet (an event
	 * stopped the rule before them): stash[stash_i, stash_n). */
	uint32_t stash_i, stash_n;
	struct osf_rdma_wc stash[16];
	uint8_t sim_buf[4096];
	/* The connection's own channel (docs/ARCHITECTURE.md, "A reader
	 * sleeps on its connection's channel"): an fd readable when
	 * completions may wait (a verbs completion channel of this CQ alone,
	 * or the stand-in's socket), which the engine's epoll watches while
	 * no application thread sleeps on it. Past sim_buf: a reuse's memset
	 * never clears ep_lock under a thread that holds it. Under ep_lock: */
	uint32_t ep_lock;
	int32_t chan_fd;  /* -1: none (the thread sleeps on its wake socket) */
	int32_t ep_fd;    /* the engine's epoll */
	uint32_t ep_want; /* events the engine wants on chan_fd */
	uint32_t ep_set;  /* events chan_fd is registered with (0: not in the set) */
	uint32_t sleepers; /* application threads asleep on chan_fd */
	osf_rdma_chan_fn chan_arm;   /* verbs: ibv_req_notify_cq unless cq_armed;
					NULL: stand-in */
	osf_rdma_chan_fn chan_drain; /* verbs: ibv_get_cq_event and ack */
	uint32_t cq_armed; /* how chan_arm armed the CQ (OSF_RDMA_ARMED_*)
			      since chan_drain last read an event: the CQ is
			      armed so, or its event waits on chan_fd
			      (whoever watches it wakes), so arming again as
			      much would be a system call for nothing */
	uint32_t arm_all; /* the engine waits for a completion of its own
			     sends (send-queue slots, a probe, CLOSE): the CQ
			     is armed for every completion, not only the
			     peer's solicited immediates; a thread that takes
			     a send completion then kicks the engine */
	void *chan;                  /* verbs: the struct ibv_comp_channel */
	uint64_t chan_sleeps; /* sleeps on chan_fd (relaxed; tests, osfstat) */
};

/* osf_rdma_rx_kick wakes the engine (its eventfd): it has work an
 * application's thread could not do, and may be asleep (a CQ event or the
 * stand-in's socket that would have woken it was taken by that thread). */
static inline void osf_rdma_rx_kick(const struct osf_rdma_rx *rx)
{
	uint64_t one = 1;
	int k = __atomic_load_n(&rx->kick, __ATOMIC_RELAXED), saved = errno;

	if (k >= 0)
		(void)!write(k, &one, sizeof(one));
	errno = saved;
}

/* osf_rdma_tx_leave lets go of tx's lock taken for anything but a data
 * push: counting a send completion, applying a CREDIT, posting a credit.
 * A writer (or the engine's transmit) that found the lock busy meanwhile
 * raised again and left its bytes to the holder (osf_rdma_tx_claim); a
 * holder that pushes sends them once more (osf_rdma_tx_release), this one
 * does not, so it wakes the engine, which pumps every stream when it
 * wakes. Held by an application's thread, which takes completions or
 * posts credits while another thread (or the engine) writes, the lock
 * would otherwise leave those bytes unsent until the engine woke for
 * something else. again is cleared here: whoever pushes next reads head
 * afresh. */
static inline void osf_rdma_tx_leave(struct osf_rdma_rx *rx)
{
	struct osf_rdma_tx *tx = rx->tx;

	__atomic_store_n(&tx->lock, 0, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&tx->again, __ATOMIC_SEQ_CST) &&
	    __atomic_exchange_n(&tx->again, 0, __ATOMIC_SEQ_CST))
		osf_rdma_rx_kick(rx);
}

static inline struct osf_seg_side *osf_rdma_rx_app(const struct osf_rdma_rx *rx)
{
	return &rx->hdr->side[rx->side];
}

/* osf_rdma_rx_tokens sends the local side's waiters of one kind (want,
 * waiters and tokens words) their wake tokens on sock, as a peer process
 * does (segment.h osf_wake_send, side.c's too), counted in the engine's
 * side's wakes_sent; the end of the socket (EPIPE, ECONNRESET) is the
 * engine's to see, on its end. */
static inline void osf_rdma_rx_tokens(struct osf_rdma_rx *rx, int sock, uint32_t *want,
				      uint32_t *waiters, uint32_t *tokens)
{
	int saved = errno;

	if (sock >= 0)
		(void)osf_wake_send(sock, want, waiters, tokens,
				    &rx->hdr->side[1 - rx->side].wakes_sent, send);
	errno = saved;
}

/* osf_rdma_rx_wake_reader wakes the application's readers if they asked
 * (after a DATA or FIN was published). */
static inline void osf_rdma_rx_wake_reader(struct osf_rdma_rx *rx)
{
	struct osf_seg_side *a = osf_rdma_rx_app(rx);

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&a->rx_want, __ATOMIC_RELAXED) ||
	    !__atomic_exchange_n(&a->rx_want, 0, __ATOMIC_ACQ_REL))
		return;
	osf_rdma_rx_tokens(rx, rx->wake, &a->rx_want, &a->rx_waiters, &a->rx_tokens);
}

/* osf_rdma_rx_wake_writer wakes an application's writer waiting for room
 * once its ring (head of ours, tail the peer's credit) has the low-water
 * mark free. */
static inline void osf_rdma_rx_wake_writer(struct osf_rdma_rx *rx, uint64_t tail)
{
	struct osf_seg_side *a = osf_rdma_rx_app(rx);
	uint64_t head;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&a->tx_want, __ATOMIC_RELAXED))
		return;
	head = __atomic_load_n(&rx->hdr->ring[rx->side].head, __ATOMIC_ACQUIRE);
	if (head - tail > rx->size || rx->size - (head - tail) < rx->lowat)
		return;
	if (__atomic_exchange_n(&a->tx_want, 0, __ATOMIC_ACQ_REL))
		osf_rdma_rx_tokens(rx, rx->wake_tx, &a->tx_want, &a->tx_waiters, &a->tx_tokens);
}

/* osf_rdma_advance is imm.go's Advance: the position whose low 28 bits
 * are low, nearest at or after from. */
static inline uint64_t osf_rdma_advance(uint64_t from, uint32_t low)
{
	return from + (uint64_t)((low - (uint32_t)from) & OSF_RDMA_IMM_MASK);
}

/* osf_rdma_rx_event records what the engine must do and returns 1. */
static inline int osf_rdma_rx_event(struct osf_rdma_rx *rx, uint32_t what, uint32_t value,
				    const struct osf_rdma_wc *wc)
{
	rx->ev.what = what;
	rx->ev.value = value;
	rx->ev.wc = *wc;
	return 1;
}

#define OSF_RDMA_RX_BAD(rx, what, wc, ...)                                     \
	(snprintf((rx)->ev.why, sizeof((rx)->ev.why), __VA_ARGS__),            \
	 osf_rdma_rx_event((rx), (what), 0, (wc)))

static inline void osf_rdma_tx_lock_spin(struct osf_rdma_tx *tx)
{
	int i;

	for (i = 0; !osf_rdma_tx_trylock(tx); i++)
		if (i > 64)
			sched_yield();
}

/* osf_rdma_rx_repost posts a receive for the one the peer used (the
 * engine's Go link does it where there is no poster). */
static inline int osf_rdma_rx_repost(struct osf_rdma_rx *rx, const struct osf_rdma_wc *wc)
{
	int rc;

	if (!rx->post_recv || rx->recvs >= OSF_RDMA_RQ_DEPTH)
		return 0;
	rc = rx->post_recv(rx, osf_rdma_wrid(OSF_RDMA_WR_RECV, rx->tx->id, rx->recv_seq));
	if (rc)
		return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_FAIL, wc, "rdma: post receive: errno %d", rc);
	rx->recv_seq++;
	rx->recvs++;
	return 0;
}

/* osf_rdma_rx_data applies the immediate of a receive completion. */
static inline int osf_rdma_rx_imm(struct osf_rdma_rx *rx, const struct osf_rdma_wc *wc)
{
	struct osf_rdma_tx *tx = rx->tx;
	uint32_t kind = wc->imm >> OSF_RDMA_IMM_BITS, v = wc->imm & OSF_RDMA_IMM_MASK;
	static const char *const names[] = {"DATA", "CREDIT", "FLAGS", "CLOSE"};
	uint64_t head, tail, peer_tail, sent;

	if (rx->peer_closed)
		return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_VIOLATION, wc, "%s after CLOSE",
				       kind < 4 ? names[kind] : "immediate");
	switch (kind) {
	case OSF_RDMA_IMM_DATA:
		if (rx->peer_fin)
			return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_VIOLATION, wc, "DATA after FIN");
		head = osf_rdma_advance(rx->head, v);
		if (head == rx->head ||
		    head - __atomic_load_n(&rx->credited, __ATOMIC_ACQUIRE) > rx->size)
			return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_VIOLATION, wc,
					       "DATA to %llu with head %llu and credit %llu (ring %u)",
					       (unsigned long long)head,
					       (unsigned long long)rx->head,
					       (unsigned long long)rx->credited, rx->size);
		__atomic_add_fetch(&rx->bytes_in, head - rx->head, __ATOMIC_RELAXED);
		__atomic_store_n(&rx->head, head, __ATOMIC_RELAXED);
		/* Release: after the payload, which landed before this
		 * completion. */
		__atomic_store_n(&rx->hdr->ring[1 - rx->side].head, head, __ATOMIC_RELEASE);
		osf_rdma_rx_wake_reader(rx);
		return 0;
	case OSF_RDMA_IMM_CREDIT:
		osf_rdma_tx_lock_spin(tx);
		peer_tail = tx->peer_tail;
		sent = tx->sent;
		tail = osf_rdma_advance(peer_tail, v);
		if (tail - peer_tail > sent - peer_tail) {
			osf_rdma_tx_leave(rx);
			return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_VIOLATION, wc,
					       "CREDIT to %llu beyond %llu sent",
					       (unsigned long long)tail, (unsigned long long)sent);
		}
		__atomic_store_n(&tx->peer_tail, tail, __ATOMIC_RELAXED);
		if (sent != __atomic_load_n(&rx->hdr->ring[rx->side].head, __ATOMIC_ACQUIRE) ||
		    ((__atomic_load_n(&rx->hdr->side[rx->side].flags, __ATOMIC_ACQUIRE) &
		      OSF_SIDE_FIN) && !tx->fin_sent))
			rx->engine_due = 1;
		osf_rdma_tx_leave(rx);
		__atomic_store_n(&rx->hdr->ring[rx->side].tail, tail, __ATOMIC_RELEASE);
		osf_rdma_rx_wake_writer(rx, tail);
		return 0;
	case OSF_RDMA_IMM_FLAGS:
		if (v != OSF_RDMA_IMM_FIN)
			return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_VIOLATION, wc, "FLAGS %#x", v);
		rx->peer_fin = 1;
		__atomic_or_fetch(&rx->hdr->side[1 - rx->side].flags, OSF_SIDE_FIN,
				  __ATOMIC_SEQ_CST);
		osf_rdma_rx_wake_reader(rx);
		return 0;
	case OSF_RDMA_IMM_CLOSE:
		if (v != OSF_RDMA_CLOSE_GRACEFUL && v != OSF_RDMA_CLOSE_ABORT)
			return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_VIOLATION, wc, "CLOSE %#x", v);
		rx->peer_closed = 1;
		return osf_rdma_rx_event(rx, OSF_RDMA_EV_CLOSE, v, wc);
	}
	return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_VIOLATION, wc, "immediate kind %u", kind);
}

/* osf_rdma_rx_one applies one completion, rx_lock held: 0 when done, 1
 * when it left an event to the engine (rx->ev). */
static inline int osf_rdma_rx_one(struct osf_rdma_rx *rx, const struct osf_rdma_wc *wc)
{
	struct osf_rdma_tx *tx = rx->tx;
	uint32_t kind = (uint32_t)(wc->wr_id >> 56), seq = (uint32_t)wc->wr_id, conn;
	int bad;

	conn = (uint32_t)(wc->wr_id >> 32) & OSF_RDMA_WRID_CONN_MASK;
	if (conn != (tx->id & OSF_RDMA_WRID_CONN_MASK))
		return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_FAIL, wc,
				       "rdma: completion for connection %u on connection %u",
				       conn, tx->id);
	if (kind == OSF_RDMA_WR_RECV) {
		if (rx->recvs > 0)
			rx->recvs--;
		if (wc->status != OSF_RDMA_WC_OK)
			return __atomic_load_n(&rx->down, __ATOMIC_ACQUIRE)
				       ? 0
				       : osf_rdma_rx_event(rx, OSF_RDMA_EV_BROKEN, 0, wc);
		if (__atomic_load_n(&rx->down, __ATOMIC_ACQUIRE))
			return 0;
		if (!wc->has_imm)
			return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_VIOLATION, wc,
					       "message without immediate");
		bad = osf_rdma_rx_imm(rx, wc);
		if (bad || rx->peer_closed)
			return bad;
		return osf_rdma_rx_repost(rx, wc);
	}
	/* A send: in order, so everything up to it is complete. */
	if (wc->status != OSF_RDMA_WC_OK)
		return __atomic_load_n(&rx->down, __ATOMIC_ACQUIRE)
			       ? 0
			       : osf_rdma_rx_event(rx, OSF_RDMA_EV_BROKEN, 0, wc);
	osf_rdma_tx_lock_spin(tx);
	bad = osf_rdma_tx_complete(tx, seq);
	osf_rdma_tx_leave(rx);
	/* The engine waits for it (send-queue slots, ...) and no event of
	 * the channel will say that a thread took it. */
	if (__atomic_load_n(&rx->arm_all, __ATOMIC_RELAXED))
		rx->engine_due = 1;
	if (bad)
		return OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_FAIL, wc,
				       "rdma: completion for unposted work request %u (posted %u)",
				       seq, tx->posted);
	if (kind == OSF_RDMA_WR_PROBE || kind == OSF_RDMA_WR_CLOSE)
		return osf_rdma_rx_event(rx, OSF_RDMA_EV_SENT, kind, wc);
	return 0;
}

/* osf_rdma_rx_poll takes and applies completions, rx_lock held, at most
 * max (0: until there are none): how many it applied; it stops at an
 * event (rx->ev.what), and does nothing while one waits. A taker's error
 * is an event too. Completions taken and not applied wait in the stash,
 * first in line. */
static inline int osf_rdma_rx_poll(struct osf_rdma_rx *rx, int max, uint64_t *counter)
{
	int n, done = 0;

	if (!rx->poll)
		return 0;
	while (rx->ev.what == OSF_RDMA_EV_NONE && (!max || done < max)) {
		if (rx->stash_i == rx->stash_n) {
			rx->stash_i = rx->stash_n = 0;
			n = rx->poll(rx, rx->stash, 16);
			if (n < 0) {
				struct osf_rdma_wc none = {0, 0, 0, 0, 0};

				OSF_RDMA_RX_BAD(rx, OSF_RDMA_EV_FAIL, &none,
						"rdma: poll: errno %d", -n);
				break;
			}
			if (n == 0)
				break;
			rx->stash_n = (uint32_t)n;
		}
		done++;
		__atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
		(void)osf_rdma_rx_one(rx, &rx->stash[rx->stash_i++]);
	}
	return done;
}

static inline int osf_rdma_rx_trylock(struct osf_rdma_rx *rx)
{
	uint32_t free = 0;

	return __atomic_compare_exchange_n(&rx->lock, &free, 1, 0, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

static inline void osf_rdma_rx_unlock(struct osf_rdma_rx *rx)
{
	__atomic_store_n(&rx->lock, 0, __ATOMIC_RELEASE);
}

/* ep_lock guards the channel's fields and its registration in the
 * engine's epoll: held for one epoll_ctl, a CQ arm or a channel read. */
static inline void osf_rdma_ep_lock(struct osf_rdma_rx *rx)
{
	uint32_t free;
	int i;

	for (i = 0;; i++) {
		free = 0;
		if (__atomic_compare_exchange_n(&rx->ep_lock, &free, 1, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
		if (i > 64)
			sched_yield();
	}
}

static inline void osf_rdma_ep_unlock(struct osf_rdma_rx *rx)
{
	__atomic_store_n(&rx->ep_lock, 0, __ATOMIC_RELEASE);
}

/* osf_rdma_chan_lent is the segment's word saying the channel is lent
 * (segment.h chan_lent, in the engine's side), or NULL without a segment
 * (fakes). */
static inline uint32_t *osf_rdma_chan_lent(const struct osf_rdma_rx *rx)
{
	return rx->hdr ? &rx->hdr->side[1 - rx->side].chan_lent : NULL;
}

/* osf_rdma_chan_unlend_locked takes the channel back from the
 * application's waiters (under ep_lock; osf_rdma_chan_apply_locked then
 * puts it in the engine's epoll). */
static inline void osf_rdma_chan_unlend_locked(struct osf_rdma_rx *rx)
{
	uint32_t *lent = osf_rdma_chan_lent(rx);

	if (lent && __atomic_load_n(lent, __ATOMIC_RELAXED))
		__atomic_store_n(lent, 0, __ATOMIC_SEQ_CST);
}

/* osf_rdma_chan_lend_locked, by the last sleeper to leave the channel
 * (under ep_lock; the CQ unarmed when its channel fired for that sleeper:
 * the next enter arms it and takes), lends it to the application's waiters
 * (docs/ARCHITECTURE.md, "The lent channel"): it stays out of the engine's
 * epoll, so that a completion landing before the next wait's enter waits
 * for that enter (which takes it at once) instead of waking the engine,
 * and the enter and leave make no epoll_ctl. Not while another waiter is
 * counted (any process: a reader or writer asleep on its wake socket, a
 * poller without the channel, a fork child's), nor while the engine
 * waits for a completion of its own sends. A waiter that counts itself
 * later and does not sleep on the channel calls the engine back
 * (side.c call_back): it counts itself, then reads the word; this sets
 * the word, then reads the counts; one of the two sees the other. */
static inline void osf_rdma_chan_lend_locked(struct osf_rdma_rx *rx)
{
	struct osf_seg_side *a;
	uint32_t *lent = osf_rdma_chan_lent(rx);

	if (!lent || rx->chan_fd < 0 || rx->sleepers ||
	    __atomic_load_n(&rx->arm_all, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&rx->down, __ATOMIC_RELAXED))
		return;
	a = osf_rdma_rx_app(rx);
	__atomic_store_n(lent, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&a->rx_waiters, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&a->tx_waiters, __ATOMIC_SEQ_CST))
		__atomic_store_n(lent, 0, __ATOMIC_SEQ_CST);
}

/* osf_rdma_chan_apply_locked makes the engine's epoll watch chan_fd for
 * ep_want while no application thread sleeps on it and it is not lent,
 * and not for input otherwise (the connection's completions then wake
 * that thread alone, or wait for the next one, not the engine; the
 * stand-in's engine still waits for room to write on it). Under ep_lock. */
static inline void osf_rdma_chan_apply_locked(struct osf_rdma_rx *rx)
{
	const uint32_t *lent = osf_rdma_chan_lent(rx);
	uint32_t want = rx->sleepers || (lent && __atomic_load_n(lent, __ATOMIC_SEQ_CST))
				? rx->ep_want & ~(uint32_t)(EPOLLIN | EPOLLRDHUP)
				: rx->ep_want;
	struct epoll_event ev;
	int op, saved = errno;

	if (rx->chan_fd < 0 || rx->ep_fd < 0 || want == rx->ep_set)
		return;
	/* Deleted rather than watched for nothing: a stand-in socket's
	 * hang-up would be reported with no events asked for. */
	op = want == 0 ? EPOLL_CTL_DEL : rx->ep_set == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
	memset(&ev, 0, sizeof(ev));
	ev.events = want;
	ev.data.u64 = (uint32_t)rx->chan_fd; /* the engine's EpollEvent.Fd */
	__atomic_add_fetch(&rx->chan_ctls, 1, __ATOMIC_RELAXED);
	if (epoll_ctl(rx->ep_fd, op, rx->chan_fd, &ev) == 0 || op == EPOLL_CTL_DEL)
		rx->ep_set = want;
	errno = saved;
}

/* osf_rdma_credit_due reports whether the consumption up to tail is worth
 * reporting to the peer (SMC-R's rule): a quarter ring or more consumed
 * since the last report, or the peer's view of the ring more than half
 * full (a writer there may wait for room); always with force. */
static inline int osf_rdma_credit_due(const struct osf_rdma_rx *rx, uint64_t tail, int force)
{
	uint64_t credited = __atomic_load_n(&rx->credited, __ATOMIC_ACQUIRE);
	/* The rule's head, not the segment's: the struct outlives the
	 * connection (a reader may still hold it), the mapping does not. */
	uint64_t head = __atomic_load_n(&rx->head, __ATOMIC_RELAXED);

	if (tail == credited || tail - credited > head - credited)
		return 0;
	return force || tail - credited >= rx->size / 4 || head - credited > rx->size / 2;
}

/* osf_rdma_credit_post posts a CREDIT for tail, tx's lock held: 0, -1
 * when the send queue has no slot (later), else the poster's errno.
 * credited moves before the post, so that the peer's next DATA, which may
 * come before the post returns, is checked against it (moved back when
 * the post fails). */
static inline int osf_rdma_credit_post(struct osf_rdma_rx *rx, uint64_t tail)
{
	struct osf_rdma_tx *tx = rx->tx;
	struct osf_rdma_wr wr;
	uint64_t was = rx->credited;
	uint32_t seq = tx->posted;
	int rc;

	if (osf_rdma_tx_sq_free(tx) < 1 || !tx->post)
		return -1;
	wr = (struct osf_rdma_wr){
		.wr_id = osf_rdma_wrid(OSF_RDMA_WR_CREDIT, tx->id, seq),
		.imm = osf_rdma_imm(OSF_RDMA_IMM_CREDIT, tail),
		.kind = OSF_RDMA_WR_CREDIT, .with_imm = 1, .ring = tx->side,
		.signaled = (uint8_t)osf_rdma_tx_signaled(seq, 0)};
	__atomic_store_n(&rx->credited, tail, __ATOMIC_RELEASE);
	rc = tx->post(tx, &wr, 1);
	if (rc) {
		__atomic_store_n(&rx->credited, was, __ATOMIC_RELEASE);
		return rc;
	}
	osf_rdma_tx_commit(tx, &wr, 1);
	return 0;
}

/* osf_rdma_credit_push is the reader's thread's credit, after it consumed
 * up to tail: posted here when due and the send lock free (else the
 * engine, woken by the wake protocol as today, sends it): 1 when nothing
 * is owed any more. */
static inline int osf_rdma_credit_push(struct osf_rdma_tx *tx, uint32_t gen, int32_t pid,
				       uint64_t tail)
{
	struct osf_rdma_rx *rx = tx->rx;
	int cs, ok = 0;

	if (!rx || !osf_rdma_credit_due(rx, tail, 0))
		return 1;
	if (!__atomic_load_n(&tx->live, __ATOMIC_ACQUIRE) || tx->pid != pid)
		return 0; /* the engine's, woken by the wake protocol */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	if (osf_rdma_tx_trylock(tx)) {
		if (__atomic_load_n(&tx->live, __ATOMIC_RELAXED) &&
		    __atomic_load_n(&tx->gen, __ATOMIC_RELAXED) == gen &&
		    osf_rdma_credit_due(rx, tail, 0) && osf_rdma_credit_post(rx, tail) == 0) {
			__atomic_add_fetch(&rx->caller_credits, 1, __ATOMIC_RELAXED);
			ok = 1;
		}
		osf_rdma_tx_leave(rx);
	}
	/* Not posted (the lock busy, the send queue full, the stand-in's link
	 * busy): the engine posts it, which may be asleep with nothing asking
	 * it to (this thread may have taken the DATA itself). */
	if (!ok)
		osf_rdma_rx_kick(rx);
	pthread_setcancelstate(cs, NULL);
	return ok;
}

/* The channel's set-up, in libosfcore.so (rx.c), for the engine: */
void osf_rdma_chan_use(struct osf_rdma_tx *tx, int fd, void *chan, int ep, uint32_t want,
		       uint32_t set);
uint32_t osf_rdma_chan_want(struct osf_rdma_tx *tx, uint32_t want);
int osf_rdma_chan_engine_drain(struct osf_rdma_tx *tx);
int osf_rdma_chan_engine_arm(struct osf_rdma_tx *tx);
void osf_rdma_chan_arm_all(struct osf_rdma_tx *tx, int all);
void osf_rdma_chan_forget(struct osf_rdma_tx *tx);
void osf_rdma_chan_reclaim(struct osf_rdma_tx *tx);

#endif
