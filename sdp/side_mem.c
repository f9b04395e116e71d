/* side_mem.c: the memory of one connection end (side.h): giving the
 * pages a reader consumed back to the kernel (the trim) and moving the tx
 * ring's base. Split from side.c. */
#include "side.h"

#include "sys.h"

#include <errno.h>
#include <sys/mman.h>
#include <stdint.h>

/* ---- memory ------------------------------------------------------------- */

#define TRIM_PAGE OSF_SEG_PAGE

void osf_side_set_trim(struct osf_side *s, int on)
{
	__atomic_store_n(&s->trim, on, __ATOMIC_RELAXED);
}

#define TRIM_CHUNK (256u << 10) /* ring bytes given back per round: the
				   producer keeps the room below them */

/* page_down rounds position p of the rx ring, seen through view v, down
 * to where a page of the segment starts. */
static uint64_t page_down(struct osf_ring_view v, uint64_t p)
{
	uint64_t ph = (uint64_t)((uintptr_t)v.d + v.bias) & (TRIM_PAGE - 1);

	return ((p + ph) & ~(uint64_t)(TRIM_PAGE - 1)) - ph;
}

/* punch gives back the segment pages that hold only positions [from, to)
 * of the rx ring (at most a ring long), seen through view v: whole pages
 * inside each piece of the ring's region the range covers (up to the
 * region's end, then from its start), never the shared page, which holds the header and the other
 * ring too; the unused bytes before ring 0's region and after ring 1's
 * count as free. Addresses come from this process's own mapping (rxd,
 * size) and positions are taken modulo the ring, so no value the peer
 * wrote can move a punch outside the ring's pages. The bytes given back,
 * or -1 when a punch failed (not shared memory). */
static ssize_t punch(struct osf_side *s, struct osf_ring_view v,
		     uint64_t from, uint64_t to)
{
	const uintptr_t pg = TRIM_PAGE - 1;
	const uintptr_t first = (uintptr_t)s->rxd & ~pg,
			last = ((uintptr_t)s->rxd + s->size + pg) & ~pg;
	int ring = 1 - s->side;
	size_t given = 0;

	while (from < to) {
		size_t off = (size_t)((from + v.bias) & v.mask), len = (size_t)(to - from);
		uintptr_t lo, hi;
		if (len > s->size - off)
			len = s->size - off; /* up to the region's end, then from 0 */
		lo = (uintptr_t)(s->rxd + off);
		hi = lo + len;
		lo = off == 0 && ring == 0 ? lo & ~pg : (lo + pg) & ~pg;
		hi = off + len == s->size && ring == 1 ? (hi + pg) & ~pg : hi & ~pg;
		from += len;
		if (lo >= hi)
			continue;
		if (lo < first || hi > last) /* cannot be: the ring's own pages only */
			return -1;
		osf_sys_debug_punch();
		if (madvise((void *)lo, hi - lo, MADV_REMOVE) < 0)
			return -1;
		given += hi - lo;
	}
	return (ssize_t)given;
}

/* claim_trim makes me the trimmer of the rx ring (the producing side's
 * trim_owner): 0 when another trim has it. An owner that is gone (killed
 * in a trim) is replaced, and its stop with it when the trim ends. */
static int claim_trim(struct osf_side *s, uint32_t me)
{
	uint32_t cur = 0;

	if (__atomic_compare_exchange_n(&s->peer->trim_owner, &cur, me, 0,
					__ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		return 1;
	return osf_lock_holder_gone(cur) &&
	       __atomic_compare_exchange_n(&s->peer->trim_owner, &cur, me, 0,
					   __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
}

/* unlock_if_mine releases the producers' lock unless it is no longer mine
 * (a producer replaced a holder it took for gone, or the peer wrote it). */
static void unlock_if_mine(uint32_t *w, uint32_t me)
{
	uint32_t cur = __atomic_load_n(w, __ATOMIC_RELAXED);

	while ((cur & ~OSF_LOCK_WAITERS) == me)
		if (__atomic_compare_exchange_n(w, &cur, 0, 0, __ATOMIC_RELEASE,
						__ATOMIC_RELAXED)) {
			if (cur & OSF_LOCK_WAITERS)
				osf_lock_wake(w);
			return;
		}
}

/* A trim gives back the free pages [from, hi) of the rx ring from the top
 * down, TRIM_CHUNK a round. Each round takes the producers' tx_lock with
 * one compare-and-swap (never waiting: a writer in the peer holds it for
 * a copy, a hostile peer may hold it for ever; either way, next time),
 * reads head, sets the producers' stop at the round's lowest position and
 * lets the lock go at once; then it punches, holding nothing. A producer
 * computes its room under its lock and writes only below the stop
 * (osf_side_tx_free), so no byte it writes meanwhile lies in a page being
 * punched, and it never waits for a trimmer, running or stopped: it has
 * the room below the stop, at least the ring less a round once the first
 * round is set. The head's own page, when nothing is unread, goes last,
 * with the stop at head (its top part is the free room's end, its bottom
 * part the room's start). The stop is cleared and waiting writers woken
 * when the trim ends. */
size_t osf_side_trim(struct osf_side *s)
{
	uint32_t *w = &s->peer->tx_lock, me = osf_lock_tid();
	uint64_t from = 0, hi = 0, head0 = 0, tail0 = 0, head = 0, tail = 0;
	uint64_t base = 0;
	struct osf_ring_view v = {0};
	int whole = 0, done = 0, stopped = 0, round;
	ssize_t given = 0;
	int saved = errno;

	if (!__atomic_load_n(&s->trim, __ATOMIC_RELAXED))
		return 0; /* never for an RDMA engine's (pinned) rings */
	if (!claim_trim(s, me))
		return 0;
	for (round = 0; round < (int)(s->size / TRIM_CHUNK) + 3; round++) {
		uint64_t lo, top, stop;
		uint32_t free_word = 0, held;
		ssize_t r;
		if (!__atomic_compare_exchange_n(w, &free_word, me, 0,
						 __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			break;
		/* With the lock, no producer writes and head stands still.
		 * Bytes a corked producer wrote after its head and holds back
		 * ([head, head + held)) are not free; the word is read before
		 * head: a consumer publishing a gone producer's held bytes
		 * (osf_side_mark_gone) moves head before it clears the word,
		 * so held 0 here means head already counts them. */
		held = __atomic_load_n(&s->peer->cork, __ATOMIC_ACQUIRE) & OSF_CORK_HELD;
		head = __atomic_load_n(&s->rx->head, __ATOMIC_ACQUIRE);
		tail = __atomic_load_n(&s->rx->tail, __ATOMIC_ACQUIRE);
		/* The base moves only under this lock, and not while a trim
		 * owns the ring (osf_side_tx_rebase). */
		if (round == 0) {
			base = __atomic_load_n(&s->rx->base, __ATOMIC_ACQUIRE);
			v = osf_seg_view(s->rxd, s->size, 1 - s->side, base);
		}
		if (held >= s->size || osf_ring_used(head + held, tail, s->size) < 0 ||
		    __atomic_load_n(&s->rx->base, __ATOMIC_ACQUIRE) != base ||
		    (round > 0 && (tail < tail0 || head < head0))) {
			/* being published (OSF_CORK_HELD), or corrupt: next time */
			unlock_if_mine(w, me);
			break;
		}
		if (round == 0) {
			/* Free: [head + held, tail + size), whole pages only (a
			 * reader of this side may move tail on meanwhile: that
			 * only frees more). Of it, only what was consumed since
			 * the last trim can hold pages: the rest was given back
			 * then, or never written (trim_tail starts a ring
			 * behind, or at 0 on a new ring); unless the base
			 * moved since, which moved those pages: then the
			 * whole ring. Nothing unread: the whole ring, the
			 * head's page last. */
			uint64_t last = page_down(v, __atomic_load_n(&s->trim_tail,
								     __ATOMIC_RELAXED));
			if (base != s->trim_base)
				last = tail - s->size;
			head0 = head;
			tail0 = tail;
			whole = head == tail && !held;
			from = tail - last < s->size ? last + s->size : tail;
			if (from < head + held)
				from = head + held;
			hi = whole ? page_down(v, head) + s->size : tail + s->size;
		} else if (from < head + held) {
			from = head + held; /* written since the last round */
		}
		if (whole && (head != head0 || held))
			whole = 0; /* written meanwhile: the head's page stays */
		if (hi > from) {
			lo = hi - from > TRIM_CHUNK ? page_down(v, hi - TRIM_CHUNK) : from;
			if (lo < from)
				lo = from;
			top = hi;
			stop = lo;
		} else if (whole && page_down(v, head) != head) {
			lo = page_down(v, head) + s->size;
			top = lo + TRIM_PAGE;
			stop = head;
			done = 1;
		} else {
			unlock_if_mine(w, me);
			done = 1;
			break;
		}
		__atomic_store_n(&s->peer->trim_stop, stop, __ATOMIC_SEQ_CST);
		stopped = 1;
		unlock_if_mine(w, me);
		r = punch(s, v, lo, top);
		if (r < 0) { /* not shared memory after all: stop trying */
			osf_side_set_trim(s, 0);
			break;
		}
		given += r;
		hi = lo;
		if (done)
			break;
	}
	__atomic_store_n(&s->peer->trim_stop, 0, __ATOMIC_SEQ_CST);
	if (done) {
		__atomic_store_n(&s->trim_tail, tail0, __ATOMIC_RELAXED);
		s->trim_base = base;
	}
	__atomic_store_n(&s->peer->trim_owner, 0, __ATOMIC_RELEASE);
	if (stopped) { /* writers a stop held back may wait for room: an
			  edge, though neither head nor tail moved */
		__atomic_fetch_add(&s->rx->trims, 1, __ATOMIC_RELEASE);
		osf_side_wake_writer(s, head, tail);
	}
	errno = saved;
	return (size_t)given;
}

/* ---- the tx ring's base ----------------------------------------------------- */

void osf_side_tx_rebase(struct osf_side *s, uint64_t head)
{
	/* Bytes held back after head were written through this base; a
	 * trimmer computes its pages through the base it read; a reader
	 * may still read an urgent byte behind its tail (recv_oob). */
	if ((__atomic_load_n(&s->me->cork, __ATOMIC_RELAXED) & OSF_CORK_HELD) ||
	    __atomic_load_n(&s->me->trim_owner, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&s->me->trim_stop, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&s->me->urg, __ATOMIC_RELAXED))
		return;
	/* Before the next head (a release): a consumer that reads that head
	 * reads this base. */
	__atomic_store_n(&s->tx->base, head, __ATOMIC_RELAXED);
}

