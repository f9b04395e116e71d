/* side.c: the stream protocol's C side (side.h): end and reset
 * bookkeeping, wake tokens, sleeping and readiness of one connection end.
 */
#include "side.h"

#include "sys.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <limits.h>
#include <stdint.h>
#include <time.h>

void osf_side_init(struct osf_side *s, uint8_t *base, uint32_t ring_bytes,
		   int side, int wfd)
{
	struct osf_seg_hdr *h = osf_seg_hdr(base, ring_bytes);

	s->size = ring_bytes;
	s->lowat = osf_seg_lowat(ring_bytes);
	s->side = side;
	s->wfd = wfd;
	s->efd = -1;
	s->kfd = 0;
	s->me = &h->side[side];
	s->peer = &h->side[1 - side];
	s->tx = &h->ring[side];
	s->rx = &h->ring[1 - side];
	s->txd = base + osf_seg_ring_off(ring_bytes, side);
	s->rxd = base + osf_seg_ring_off(ring_bytes, 1 - side);
	s->rebase = 0;
	s->state = 0;
	s->pending_err = 0;
	s->lock_since[0] = s->lock_since[1] = 0;
	s->seen_close_seq = __atomic_load_n(&s->peer->close_seq, __ATOMIC_RELAXED);
	s->trim = 0;
	s->oobinline = 0;
	/* A ring behind: the first trim looks at the whole ring. Unless
	 * nothing was ever consumed (tail 0: a new connection): a producer
	 * cannot wrap before the consumer moves, so no page behind the tail
	 * was written, and a short client's reader that consumes less than
	 * OSF_TRIM_BYTES has nothing to give back (osf_side_trim_due: no
	 * reaper thread for it). */
	s->trim_tail = __atomic_load_n(&s->rx->tail, __ATOMIC_RELAXED);
	if (s->trim_tail)
		s->trim_tail -= ring_bytes;
	s->trim_base = __atomic_load_n(&s->rx->base, __ATOMIC_RELAXED);
}

/* ---- state of the other side ------------------------------------------ */

void osf_side_set_pending(struct osf_side *s, int err)
{
	int zero = 0;

	__atomic_compare_exchange_n(&s->pending_err, &zero, err, 0,
				    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

int osf_side_take_pending(struct osf_side *s)
{
	return __atomic_exchange_n(&s->pending_err, 0, __ATOMIC_ACQ_REL);
}

int osf_side_take_recv_error(struct osf_side *s)
{
	int err = __atomic_load_n(&s->pending_err, __ATOMIC_ACQUIRE);

	while (err != 0 && err != EPIPE &&
	       !__atomic_compare_exchange_n(&s->pending_err, &err, 0, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
	return err == EPIPE ? 0 : err;
}

_Static_assert(OSF_TCP_ESTABLISHED == TCP_ESTABLISHED &&
		       OSF_TCP_FIN_WAIT2 == TCP_FIN_WAIT2 &&
		       OSF_TCP_CLOSE == TCP_CLOSE &&
		       OSF_TCP_CLOSE_WAIT == TCP_CLOSE_WAIT,
	       "segment.h numbers TCP states as Linux does");

/* The one mapping, osf_tcp_state (segment.h), which osfstat uses too. */
int osf_side_tcp_state(const struct osf_side *s)
{
	uint32_t st = osf_side_state(s);

	return osf_tcp_state(osf_side_my_flags(s), osf_side_peer_flags(s),
			     (st & OSF_CS_GONE) != 0, (st & OSF_CS_RESET) != 0);
}

int osf_side_tcp_closed(const struct osf_side *s)
{
	return osf_side_tcp_state(s) == OSF_TCP_CLOSE;
}

void osf_side_broken(struct osf_side *s)
{
	if (!(osf_side_state(s) & OSF_CS_BROKEN)) {
		osf_side_set_pending(s, ECONNRESET);
		osf_side_set_state(s, OSF_CS_BROKEN | OSF_CS_GONE | OSF_CS_RESET);
	}
}

void osf_side_mark_gone(struct osf_side *s)
{
	uint64_t head, tail;
	uint32_t cork, held, pf;

	if (osf_side_state(s) & OSF_CS_GONE)
		return;
	/* TCP_CORK: what the peer held back when its last holder went is
	 * sent, as TCP sends a dead process's queue before its FIN. The
	 * holder of this side that swaps the word for OSF_CORK_HELD (being
	 * published) publishes it, and clears the word only after head has
	 * moved: a trim (osf_side_trim) that reads the word then head never
	 * takes the held bytes for free room. */
	cork = __atomic_load_n(&s->peer->cork, __ATOMIC_ACQUIRE);
	held = cork & OSF_CORK_HELD;
	if (held && held != OSF_CORK_HELD &&
	    __atomic_compare_exchange_n(&s->peer->cork, &cork, OSF_CORK_HELD, 0,
					__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		head = __atomic_load_n(&s->rx->head, __ATOMIC_ACQUIRE);
		if (osf_ring_used(head + held, __atomic_load_n(&s->rx->tail, __ATOMIC_ACQUIRE),
				  s->size) >= 0)
			__atomic_store_n(&s->rx->head, head + held, __ATOMIC_RELEASE);
		__atomic_store_n(&s->peer->cork, 0, __ATOMIC_RELEASE);
	}
	head = __atomic_load_n(&s->tx->head, __ATOMIC_ACQUIRE);
	tail = __atomic_load_n(&s->tx->tail, __ATOMIC_ACQUIRE);
	pf = osf_side_peer_flags(s);
	/* A peer that never held its side was never accepted: its listener
	 * closed (or its process died) with the connection in its queue,
	 * which TCP resets. Nobody wrote the flags of such a side: one
	 * with its FIN was held, by a last holder now between letting go
	 * of its count and bumping close_seq (osf_conn_close), whose FIN a
	 * TCP wake socket (OSF_SHM_KFD) showed at its shutdown(SHUT_WR). */
	if (osf_end_is_reset(pf, head != tail) ||
	    (!(pf & OSF_SIDE_FIN) && !__atomic_load_n(&s->peer->holders, __ATOMIC_ACQUIRE) &&
	     !__atomic_load_n(&s->peer->close_seq, __ATOMIC_ACQUIRE))) {
		/* A reset in CLOSE_WAIT (the peer's FIN came, this side's
		 * did not go) is EPIPE to TCP (tcp_reset): a peer killed
		 * after its shutdown(SHUT_WR). */
		osf_side_set_pending(s, (pf & OSF_SIDE_TIMEDOUT) ? ETIMEDOUT
					: (pf & OSF_SIDE_FIN) && !(osf_side_my_flags(s) & OSF_SIDE_FIN)
						? EPIPE
						: ECONNRESET);
		osf_side_set_state(s, OSF_CS_GONE | OSF_CS_RESET);
		return;
	}
	osf_side_set_state(s, OSF_CS_GONE);
}

/* ---- the end, seen on a wake socket ------------------------------------ */

/* The kernel counts the holders of each end of both wake sockets, and the
 * last close of the other side's end shuts this end both ways: POLLHUP
 * and POLLRDHUP, end-of-file (the other side is gone). A shutdown here
 * uses the same bits to wake this side's sleepers (osf_side_shut_wake):
 * SHUT_RD shuts the application's wake socket for reading (RCV_SHUTDOWN
 * here, SEND_SHUTDOWN at the other end), SHUT_WR the writers' socket.
 * That stays: the socket reads end-of-file and polls POLLRDHUP for ever,
 * and a token sent to it fails with EPIPE (nobody here sleeps for one any
 * more: reads after SHUT_RD do not block, writes after SHUT_WR fail). So
 * on a socket this side shut (flag RDSOCK or WRSOCK, set before the
 * socket is shut) only POLLHUP tells of the other side's end, and that
 * only while the other side did not shut its end of the same socket too
 * (its flag). When both did, nothing tells, and nothing needs to: both
 * sides shut that direction down both ways. */
static int end_seen(const struct osf_side *s, int sock, short revents)
{
	uint32_t shut = sock == s->wfd ? OSF_SIDE_WRSOCK : OSF_SIDE_RDSOCK;

	if (__builtin_expect(__atomic_load_n(&s->unborn, __ATOMIC_ACQUIRE), 0) && sock != s->wfd)
		return 0; /* not connected yet: its POLLHUP says nothing */
	if (__builtin_expect(!(osf_side_my_flags(s) & shut), 1)) {
		if (revents & (POLLHUP | POLLERR))
			return 1;
		/* Only the read side shut: a unix wake socket never is so
		 * by the other side; a TCP one (OSF_SHM_KFD) is by its
		 * shutdown(SHUT_WR), after its FIN flag, while it still
		 * holds its side: the end is its last holder's close, which
		 * lets go of its side first. */
		return (revents & POLLRDHUP) &&
		       !((osf_side_peer_flags(s) & OSF_SIDE_FIN) &&
			 __atomic_load_n(&s->peer->holders, __ATOMIC_ACQUIRE));
	}
	return (revents & POLLHUP) && !(osf_side_peer_flags(s) & shut);
}

void osf_side_check_end(struct osf_side *s, int fd)
{
	struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
	int saved = errno;

	/* Seen already (the end is for good): a token's end-of-file, a
	 * disarm after it and the next readiness look each asked. */
	if (osf_side_state(s) & OSF_CS_GONE)
		return;
	if (osf_sys_poll(&p, 1, 0) > 0 && end_seen(s, fd, p.revents))
		osf_side_mark_gone(s);
	errno = saved;
}

/* shut_sock shuts sock (fd or the writers' socket) for reading, once,
 * flag first (end_seen). */
static void shut_sock(struct osf_side *s, int sock, uint32_t flag, uint32_t *want)
{
	if (__atomic_fetch_or(&s->me->flags, flag, __ATOMIC_ACQ_REL) & flag)
		return;
	(void)osf_sys_shutdown(sock, SHUT_RD);
	__atomic_store_n(want, 0, __ATOMIC_RELEASE); /* no token can come */
}

/* osf_side_shut_wake shuts a wake socket only while a waiter of its kind
 * is counted: a waiter counts itself, fences and looks at the flags, the
 * shutdown set the flag and fences before it looks at the count, so one of
 * them sees the other. Without waiters the socket stays as it was and
 * keeps carrying tokens: an edge-triggered epoll armed later still learns
 * of each arrival after SHUT_RD, as the kernel's does. */
void osf_side_shut_wake(struct osf_side *s, int fd, int how)
{
	int saved = errno;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (how != SHUT_WR && __atomic_load_n(&s->me->rx_waiters, __ATOMIC_RELAXED))
		shut_sock(s, fd, OSF_SIDE_RDSOCK, &s->me->rx_want);
	if (how != SHUT_RD && s->wfd >= 0 &&
	    __atomic_load_n(&s->me->tx_waiters, __ATOMIC_RELAXED))
		shut_sock(s, s->wfd, OSF_SIDE_WRSOCK, &s->me->tx_want);
	else if (how != SHUT_RD && s->efd >= 0 &&
		 __atomic_load_n(&s->me->tx_waiters, __ATOMIC_RELAXED))
		/* Every writer of the region wakes; this side's find the
		 * FIN flag the caller set (writable: EPIPE), the others
		 * sleep again. */
		osf_side_wake_efd(s);
	errno = saved;
}

/* ---- the region's writers' eventfd (osf_side_use_efd) -------------------- */

void osf_side_use_efd(struct osf_side *s, int efd)
{
	s->wfd = -1;
	s->efd = efd;
}

void osf_side_wake_efd(struct osf_side *s)
{
	uint64_t one = 1, was;
	int saved = errno;

	if (s->efd < 0)
		return;
	__atomic_add_fetch(&s->me->wakes_sent, 1, __ATOMIC_RELAXED);
	/* The counter is nobody's to read, but anyone holding the eventfd
	 * may write it up to its maximum (2^64 - 2), where a write fails
	 * with EAGAIN: then it is read back to 0 (what it says does not
	 * matter: a wake-up is a write, an edge) and written again. A
	 * write that still fails (a broken fd) leaves the flag up, so the
	 * next publish tries again. */
	if (osf_sys_write(s->efd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		goto out;
	if (errno == EAGAIN && osf_sys_read(s->efd, &was, sizeof(was)) >= 0 &&
	    osf_sys_write(s->efd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		goto out;
	__atomic_store_n(&s->peer->tx_want, 1, __ATOMIC_RELEASE);
out:
	errno = saved;
}

int osf_side_probe_peer(struct osf_side *s, int fd)
{
	int saved;

	if (!s->kfd || s->wfd >= 0 || !(osf_side_peer_flags(s) & OSF_SIDE_FIN) ||
	    osf_side_state(s))
		return 0;
	if (__atomic_load_n(&s->peer->rx_tokens, __ATOMIC_ACQUIRE))
		return 1; /* one is queued (or on its way): the peer's word, a hint */
	saved = errno;
	__atomic_add_fetch(&s->peer->rx_tokens, 1, __ATOMIC_SEQ_CST);
	/* The count before the look, as osf_wake_claim: a closing peer
	 * (OSF_WANT_CLOSED) either waits for this byte or gets none. */
	if (__atomic_load_n(&s->peer->rx_want, __ATOMIC_SEQ_CST) == OSF_WANT_CLOSED) {
		osf_wake_sub(&s->peer->rx_tokens, 1);
		errno = saved;
		return 1; /* its kernel close tells the end */
	}
	if (osf_sys_send(fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
		osf_wake_sub(&s->peer->rx_tokens, 1);
		if (errno == EPIPE || errno == ECONNRESET)
			osf_side_check_end(s, fd);
	}
	errno = saved;
	return 1;
}

/* ---- wake tokens ------------------------------------------------------ */

/* Token accounting. The peer adds to rx_tokens (tx_tokens) of a side what
 * it sends there and the side subtracts what it takes, so the count says,
 * without a system call, whether tokens nobody will take are queued: a
 * poller that found the ring ready right after arming, a wait ended by
 * EPOLL_CTL_MOD or DEL, the flag a non-blocking call raised on EAGAIN.
 * Every waiter sheds those before it raises the flag again, so tokens
 * never pile up; a token send that fails all the same (the socket's
 * buffer full) raises the flag again, so the next publish retries instead
 * of losing the wake-up. The counts are hints written by both sides: a
 * wrong one costs at most a system call or wake-ups of this connection. */

static uint32_t *tokens_of(struct osf_seg_side *sd, const uint32_t *waiters)
{
	return waiters == &sd->tx_waiters ? &sd->tx_tokens : &sd->rx_tokens;
}

void osf_side_send_tokens(struct osf_side *s, int sock, uint32_t *waiters)
{
	int saved = errno;
	int tx = waiters == &s->peer->tx_waiters;

	if (osf_wake_send(sock, tx ? &s->peer->tx_want : &s->peer->rx_want, waiters,
			  tokens_of(s->peer, waiters), &s->me->wakes_sent, osf_sys_send) < 0 &&
	    (errno == EPIPE || errno == ECONNRESET))
		/* Gone, or its end shut by its own shutdown, where nobody
		 * waits for a token any more. */
		osf_side_check_end(s, sock);
	errno = saved;
}

unsigned osf_side_debug_wake_us;

void osf_side_claim_readers(struct osf_side *s, int fd)
{
	int saved = errno;
	uint32_t n;

	if (!osf_wake_claim(&s->peer->rx_want, &s->peer->rx_waiters, &s->peer->rx_tokens, &n))
		return;
	if (s->kfd)
		osf_debug_pause_us(osf_side_debug_wake_us);
	if (osf_wake_put(fd, &s->peer->rx_want, &s->peer->rx_tokens, n, &s->me->wakes_sent,
			 osf_sys_send) < 0 &&
	    (errno == EPIPE || errno == ECONNRESET))
		osf_side_check_end(s, fd); /* as osf_side_send_tokens */
	errno = saved;
}

void osf_side_drain(struct osf_side *s, int sock, uint32_t *waiters)
{
	int avail = 0, end, saved = errno;
	uint32_t keep;
	struct pollfd p = {sock, POLLIN | POLLRDHUP, 0};

	if (sock < 0 || osf_sys_poll(&p, 1, 0) <= 0) /* -1: the eventfd's, no tokens */
		goto out;
	if (end_seen(s, sock, p.revents)) {
		osf_side_mark_gone(s);
		/* Gone for good: nobody waits on a unix wake socket again
		 * (it reads end-of-file), so its tokens may stay. A TCP one
		 * (OSF_SHM_KFD) is read to the end: an unread byte would
		 * make its close a reset. */
		if (!s->kfd)
			goto out;
	}
	if (!(p.revents & POLLIN) || osf_sys_ioctl(sock, FIONREAD, &avail) < 0)
		goto out;
	/* The count is in the segment, which the peer can write: compared
	 * unsigned, never subtracted past what FIONREAD reported (a count
	 * above INT_MAX would overflow avail). */
	keep = __atomic_load_n(waiters, __ATOMIC_RELAXED);
	if (avail <= 0 || keep >= (uint32_t)avail)
		goto out;
	/* The end, if reached, was seen by the poll above. */
	(void)osf_wake_take(sock, tokens_of(s->me, waiters), (uint32_t)avail - keep, &end,
			    osf_sys_recv);
out:
	errno = saved;
}

/* shed drains the stale tokens on sock (those beyond the waiters counted
 * in *waiters) when the count says there are any: a waiter calls it before
 * it counts itself and raises the flag. */
static void shed(struct osf_side *s, int sock, uint32_t *waiters)
{
	if (sock >= 0 && __builtin_expect(__atomic_load_n(tokens_of(s->me, waiters),
					     __ATOMIC_ACQUIRE) >
				     __atomic_load_n(waiters, __ATOMIC_RELAXED),
			     0))
		osf_side_drain(s, sock, waiters);
}

void osf_side_uncount(uint32_t *waiters)
{
	uint32_t v = __atomic_load_n(waiters, __ATOMIC_RELAXED);

	while (v && !__atomic_compare_exchange_n(waiters, &v, v - 1, 0,
						 __ATOMIC_ACQ_REL,
						 __ATOMIC_RELAXED))
		;
}

void osf_side_take_token(struct osf_side *s, int sock)
{
	char b;
	int saved = errno;
	ssize_t r = sock < 0 ? -1 : osf_sys_recv(sock, &b, 1, MSG_DONTWAIT);

	if (r == 0)
		osf_side_check_end(s, sock);
	else if (r == 1)
		osf_wake_sub(sock == s->wfd ? &s->me->tx_tokens : &s->me->rx_tokens, 1);
	errno = saved;
}

/* call_back: a waiter that counted itself (and fenced) and will not sleep
 * on an RDMA connection's completion channel calls the engine back when
 * the channel is lent to the application's waiters (segment.h chan_lent,
 * docs/ARCHITECTURE.md "The lent channel"): the engine's epoll does not
 * watch it then, so the completions this waiter waits for would wake
 * nobody. It takes the word from 1 (one call-back per lending) and sends
 * the engine one token on sock (the wake socket of the kind it waits for),
 * counted in the engine's tokens of that kind; the engine, woken, takes
 * its completions and the channel back. The word is 0 on shm. */
static void call_back(struct osf_side *s, int sock, uint32_t *tokens)
{
	uint32_t one = 1, no_want = 0;

	if (__builtin_expect(!__atomic_load_n(&s->peer->chan_lent, __ATOMIC_SEQ_CST), 1) ||
	    sock < 0 ||
	    !__atomic_compare_exchange_n(&s->peer->chan_lent, &one, 0, 0, __ATOMIC_SEQ_CST,
					 __ATOMIC_RELAXED))
		return;
	__atomic_add_fetch(tokens, 1, __ATOMIC_ACQ_REL);
	(void)osf_wake_put(sock, &no_want, tokens, 1, &s->me->wakes_sent, osf_sys_send);
}

int osf_side_arm_rx(struct osf_side *s)
{
	__atomic_store_n(&s->me->rx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return osf_side_rx_ready(s);
}

int osf_side_arm_tx(struct osf_side *s)
{
	__atomic_store_n(&s->me->tx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return osf_side_tx_ready(s);
}

/* ---- sleeping ------------------------------------------------------------ */


/* SPIN_UNTIL waits in user space for up to spin_us for cond. */
#define SPIN_UNTIL(spin_us, cond)                                              \
	({                                                                     \
		int ok_ = 0;                                                   \
		if (spin_us) {                                                 \
			long end_ = osf_mono_us() + (long)(spin_us);                \
			for (int i_ = 0;; i_++) {                              \
				if (cond) {                                    \
					ok_ = 1;                               \
					break;                                 \
				}                                              \
				__builtin_ia32_pause();                        \
				if ((i_ & 63) == 63 && osf_mono_us() > end_)        \
					break;                                 \
			}                                                      \
		}                                                              \
		ok_;                                                           \
	})

/* sleep_token blocks in the kernel for one wake token on sock. It returns
 * 0 when woken (a token, the other side gone, or sock shut down here),
 * else -errno from the recv:
 * -EINTR for a signal (the kernel restarted it if the handler had
 * SA_RESTART and no timeout is set on sock), -EAGAIN when the timeout
 * expired. */
static int sleep_token(struct osf_side *s, int sock)
{
	char b;
	ssize_t r;
	int err;

	__atomic_add_fetch(&s->me->sleeps, 1, __ATOMIC_RELAXED);
	r = osf_sys_recv(sock, &b, 1, 0);
	err = errno;
	if (r == 0) {
		osf_side_check_end(s, sock);
		return 0;
	}
	if (r < 0 && err == ECONNRESET) {
		osf_side_mark_gone(s);
		return 0;
	}
	if (r == 1)
		osf_wake_sub(sock == s->wfd ? &s->me->tx_tokens : &s->me->rx_tokens, 1);
	return r < 0 ? -err : 0;
}

int osf_side_wait_data(struct osf_side *s, int fd, unsigned spin_us)
{
	return osf_side_wait_more(s, fd, spin_us, 0);
}

int osf_side_wait_more(struct osf_side *s, int fd, unsigned spin_us,
		       int64_t have)
{
	int r;

	if (SPIN_UNTIL(spin_us, osf_side_rx_past(s, have)))
		return 0;
	shed(s, fd, &s->me->rx_waiters);
	__atomic_add_fetch(&s->me->rx_waiters, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&s->me->rx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (osf_side_rx_past(s, have)) {
		r = 0;
	} else {
		call_back(s, fd, &s->peer->rx_tokens);
		r = sleep_token(s, fd);
	}
	osf_side_uncount(&s->me->rx_waiters);
	return r;
}

/* clear_dead_stop clears the trim stop of this side's producers when the
 * consumer that set it is gone (killed in a trim: it would never clear it)
 * or none claims it: it takes the claim itself first, so that a trimmer
 * claiming meanwhile keeps its stop. */
static void clear_dead_stop(struct osf_side *s)
{
	uint32_t owner = __atomic_load_n(&s->me->trim_owner, __ATOMIC_ACQUIRE);

	if (owner != 0 && !osf_lock_holder_gone(owner))
		return;
	if (!__atomic_compare_exchange_n(&s->me->trim_owner, &owner, osf_lock_tid(),
					 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&s->me->trim_stop, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->me->trim_owner, 0, __ATOMIC_RELEASE);
}

/* sleep_limited is sleep_token for a writer held back by the buffer sizes
 * or a trim's stop rather than a full ring: a larger SO_SNDBUF (here) or
 * SO_RCVBUF (at the peer), or the trim's end, makes room without a token,
 * so it looks again every few milliseconds. The send timeout (SO_RCVTIMEO of the writers' socket)
 * still ends it with -EAGAIN, a signal with -EINTR. With end >= 0 it also
 * ends when socket end reports an error or hang-up (osf_side_wait_room_or). */
static int sleep_limited(struct osf_side *s, int end)
{
	long left_ms = osf_sock_timeout_ms(s->wfd, 0);
	char b;

	__atomic_add_fetch(&s->me->sleeps, 1, __ATOMIC_RELAXED);
	while (!osf_side_tx_ready(s)) {
		struct pollfd p[2] = {{s->wfd, POLLIN, 0}, {end, 0, 0}};
		int slice = left_ms < 0 || left_ms > 20 ? 20 : (int)left_ms, n;
		if (left_ms == 0)
			return -EAGAIN;
		if (osf_side_tx_stopped(s))
			clear_dead_stop(s);
		n = osf_sys_poll(p, end >= 0 ? 2 : 1, slice);
		if (n < 0)
			return -errno;
		if (end >= 0 && (p[1].revents & (POLLERR | POLLHUP))) {
			osf_side_check_end(s, end);
			return 0;
		}
		if (n > 0) { /* a token, or the end */
			ssize_t r = osf_sys_recv(s->wfd, &b, 1, MSG_DONTWAIT);
			if (r == 0)
				osf_side_check_end(s, s->wfd);
			return 0;
		}
		if (left_ms > 0)
			left_ms -= slice;
	}
	return 0;
}

/* wait_room_efd is osf_side_wait_room's sleep on the region's eventfd
 * (osf_side_use_efd): in an epoll of its own holding the eventfd and fd,
 * both edge-triggered, made before the flag goes up, so that every
 * wake-up after the flag is an edge there (the eventfd's counter is
 * never read: level-triggered it would be readable for ever; the first
 * wait may return at once for the edges already there: spurious). Each
 * round raises tx_want again (a waker clears it) and looks at the ring
 * before it sleeps; a POLLHUP of fd is the other side's end (end_seen),
 * and so is a POLLRDHUP of a TCP socket (OSF_SHM_KFD: its peer's FIN)
 * unless the peer said FIN itself and still holds its side; after that
 * FIN, a byte kept queued at the peer (osf_side_probe_peer) makes the
 * death of its last holder a reset here (POLLERR | POLLHUP).
 * Held back by the buffer sizes or a trim's stop, or without an epoll (no
 * fd left for it), it looks again every 20 ms: late, never lost. */
static int wait_room_efd(struct osf_side *s, int fd)
{
	struct epoll_event ev[2], in = {EPOLLIN | EPOLLET, {.u64 = 0}},
				  hup = {EPOLLRDHUP | EPOLLET, {.u64 = 1}};
	long deadline = osf_sock_timeout_ms(fd, 1);
	int ep, r = 0, n, i;

	if (deadline >= 0) /* in µs: a deadline in whole ms ended up to 1 ms early */
		deadline = osf_mono_us() + deadline * 1000;
	ep = osf_sys_epoll_create1(EPOLL_CLOEXEC);
	if (ep >= 0 && (osf_sys_epoll_ctl(ep, EPOLL_CTL_ADD, s->efd, &in) < 0 ||
			osf_sys_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &hup) < 0)) {
		osf_sys_close(ep);
		ep = -1;
	}
	__atomic_add_fetch(&s->me->tx_waiters, 1, __ATOMIC_ACQ_REL);
	__atomic_add_fetch(&s->me->sleeps, 1, __ATOMIC_RELAXED);
	osf_sys_intr_begin();
	for (;;) {
		int ms = -1, end = ep < 0;

		__atomic_store_n(&s->me->tx_want, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (osf_side_tx_ready(s))
			break;
		if (osf_side_tx_stopped(s))
			clear_dead_stop(s);
		if (deadline >= 0) {
			long left = osf_wait_ms(deadline);
			if (!left) {
				r = -EAGAIN;
				break;
			}
			ms = left > INT_MAX ? INT_MAX : (int)left;
		}
		if ((ep < 0 || osf_side_tx_limit(s) < s->size || osf_side_tx_stopped(s)) &&
		    (ms < 0 || ms > 20))
			ms = 20;
		if (osf_side_probe_peer(s, fd)) {
			if (osf_side_state(s))
				continue; /* the probe met the end: tx_ready */
			if (ms < 0 || ms > OSF_PROBE_MS)
				ms = OSF_PROBE_MS;
		}
		n = ep >= 0 ? osf_sys_epoll_wait(ep, ev, 2, ms) : osf_sys_poll(NULL, 0, ms);
		if (n < 0) {
			if (errno == EINTR && deadline < 0 && osf_sys_intr_restart()) {
				osf_sys_intr_begin();
				continue;
			}
			r = -errno;
			break;
		}
		for (i = 0; i < n && ep >= 0; i++)
			end |= ev[i].data.u64 == 1;
		if (end)
			osf_side_check_end(s, fd);
	}
	osf_side_uncount(&s->me->tx_waiters);
	if (ep >= 0)
		osf_sys_close(ep);
	return r;
}

int osf_side_wait_room(struct osf_side *s, int fd, unsigned spin_us)
{
	return osf_side_wait_room_or(s, fd, spin_us, -1);
}

int osf_side_wait_room_or(struct osf_side *s, int fd, unsigned spin_us, int end)
{
	int r;

	if (SPIN_UNTIL(spin_us, osf_side_tx_ready(s)))
		return 0;
	if (s->wfd < 0)
		return wait_room_efd(s, fd);
	shed(s, s->wfd, &s->me->tx_waiters);
	__atomic_add_fetch(&s->me->tx_waiters, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&s->me->tx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!osf_side_tx_ready(s))
		call_back(s, s->wfd, &s->peer->tx_tokens);
	if (osf_side_tx_ready(s))
		r = 0;
	else if (end >= 0 || osf_side_tx_limit(s) < s->size || osf_side_tx_stopped(s))
		r = sleep_limited(s, end);
	else
		r = sleep_token(s, s->wfd);
	osf_side_uncount(&s->me->tx_waiters);
	return r;
}

/* ---- readiness ------------------------------------------------------------- */

/* tx_lowat is the room that makes a side writable (osf_seg_tx_lowat). */
static uint64_t tx_lowat(const struct osf_side *s)
{
	return osf_seg_tx_lowat(s->size, osf_side_tx_limit(s));
}

short osf_side_revents(struct osf_side *s)
{
	uint32_t st = osf_side_state(s), pf = osf_side_peer_flags(s),
		 mf = osf_side_my_flags(s);
	int64_t used = osf_side_rx_used(s), room = osf_side_tx_free(s);
	int rdhup = (pf & OSF_SIDE_FIN) || (st & OSF_CS_GONE) ||
		    (mf & OSF_SIDE_RDSHUT);
	int wrshut = (mf & OSF_SIDE_FIN) != 0;
	short r = 0;

	if (used < 0 || room < 0 || (st & OSF_CS_BROKEN))
		return POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLERR |
		       POLLHUP | POLLRDHUP;
	if (__builtin_expect(used > 0, 1) && !s->oobinline &&
	    __atomic_load_n(&s->peer->urg, __ATOMIC_RELAXED)) {
		/* The urgent byte at the read position is not data to read
		 * (tcp_poll's target + 1); POLLPRI until it is read. */
		uint64_t tail = __atomic_load_n(&s->rx->tail, __ATOMIC_ACQUIRE),
			 u = osf_side_urg(s, tail, tail + (uint64_t)used);
		if (u == tail + 1)
			used--;
	}
	if (osf_side_urg_unread(s))
		r |= POLLPRI;
	if (used > 0 || rdhup || s->pending_err)
		r |= POLLIN | POLLRDNORM;
	if (rdhup)
		r |= POLLRDHUP;
	if ((uint64_t)room >= tx_lowat(s) || wrshut || (st & OSF_CS_GONE))
		r |= POLLOUT | POLLWRNORM;
	else
		__atomic_store_n(&s->nospace, 1, __ATOMIC_RELEASE);
	if ((rdhup && wrshut) || osf_side_tcp_closed(s))
		r |= POLLHUP;
	if (s->pending_err)
		r |= POLLERR;
	return r;
}

short osf_side_arm(struct osf_side *s, int fd, int kinds, int already)
{
	short r;

	if ((kinds & OSF_ARM_RX) && !(already & OSF_ARM_RX)) {
		shed(s, fd, &s->me->rx_waiters);
		__atomic_add_fetch(&s->me->rx_waiters, 1, __ATOMIC_ACQ_REL);
	}
	if ((kinds & OSF_ARM_TX) && !(already & OSF_ARM_TX)) {
		shed(s, s->wfd, &s->me->tx_waiters);
		__atomic_add_fetch(&s->me->tx_waiters, 1, __ATOMIC_ACQ_REL);
	}
	/* A wake socket shut here takes no more tokens (osf_side_shut_wake):
	 * no flag for it. */
	if ((kinds & OSF_ARM_RX) && !(osf_side_my_flags(s) & OSF_SIDE_RDSOCK))
		__atomic_store_n(&s->me->rx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	r = osf_side_revents(s);
	/* A poller asleep on the channel entered it first (no lending then). */
	if (kinds & OSF_ARM_RX)
		call_back(s, fd, &s->peer->rx_tokens);
	else if (kinds & OSF_ARM_TX)
		call_back(s, s->wfd, &s->peer->tx_tokens);
	/* Room is asked for only when there is none, as TCP's writers get
	 * write_space only after SOCK_NOSPACE: a poller armed for POLLOUT
	 * while the side is writable (an edge-triggered epoll item holding
	 * EPOLLOUT, Go's netpoller's every connection) would otherwise make
	 * each read of the other side write the region's eventfd, waking
	 * every poller of the region in both processes. A writer that later
	 * finds no room raises the flag itself (send's EAGAIN, a blocked
	 * write), which wakes this poller too. */
	if ((kinds & OSF_ARM_TX) && !(r & POLLOUT) &&
	    !(osf_side_my_flags(s) & OSF_SIDE_WRSOCK)) {
		__atomic_store_n(&s->me->tx_want, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		r = osf_side_revents(s);
	}
	if ((kinds & OSF_ARM_TX) && !(r & POLLOUT) && osf_side_probe_peer(s, fd))
		r = osf_side_revents(s); /* the probe may have found the end */
	return r;
}

void osf_side_disarm(struct osf_side *s, int fd, int kinds, int woken)
{
	if (woken & kinds & OSF_ARM_RX)
		osf_side_take_token(s, fd);
	if (woken & kinds & OSF_ARM_TX)
		osf_side_take_token(s, s->wfd);
	if (woken) /* a hang-up wakes too: the end, even behind tokens */
		osf_side_check_end(s, (woken & OSF_ARM_RX) || s->wfd < 0 ? fd : s->wfd);
	if (kinds & OSF_ARM_RX)
		osf_side_uncount(&s->me->rx_waiters);
	if (kinds & OSF_ARM_TX)
		osf_side_uncount(&s->me->tx_waiters);
}

uint64_t osf_side_stamp(struct osf_side *s)
{
	/* The state is 4 bits, and so are the flags but WRSOCK, which only
	 * ever comes with FIN: all of them count. */
	uint64_t flags = (osf_side_peer_flags(s) & 0xfu) |
			 (osf_side_my_flags(s) & 0xfu) << 4 |
			 (osf_side_state(s) & 0xfu) << 8;
	int64_t room;

	/* Room is an edge once after nospace, as TCP's write_space wakes
	 * only a socket marked SOCK_NOSPACE: the peer's reads (credits over
	 * RDMA, which may trickle in after the wake-up) while the side is
	 * writable are none. */
	if (__atomic_load_n(&s->nospace, __ATOMIC_ACQUIRE) &&
	    (room = osf_side_tx_free(s)) >= 0 && (uint64_t)room >= tx_lowat(s) &&
	    __atomic_exchange_n(&s->nospace, 0, __ATOMIC_ACQ_REL))
		__atomic_add_fetch(&s->room_edges, 1, __ATOMIC_ACQ_REL);
	/* The urgent pointer too: it moves after the bytes it ends were
	 * published (and woke the readers), and its own wake-up is an edge.
	 * And the end of a trim that held this side's producers back: a
	 * writer that got EAGAIN at the trim's stop has room again, with
	 * the same tail. */
	return __atomic_load_n(&s->rx->head, __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&s->room_edges, __ATOMIC_ACQUIRE) *
		       0x9e3779b97f4a7c15ULL +
	       __atomic_load_n(&s->tx->trims, __ATOMIC_ACQUIRE) *
		       0xff51afd7ed558ccdULL +
	       __atomic_load_n(&s->peer->urg, __ATOMIC_ACQUIRE) * 0xc2b2ae3d27d4eb4fULL +
	       (flags << 52);
}

/* ---- messages before the data path owns the connection ------------------ */

int osf_side_put_msg(struct osf_side *s, int fd, const void *b, size_t n)
{
	uint64_t head;

	if (osf_side_lock_tx(s, fd, 0) != 0)
		return -1;
	if (osf_side_tx_room(s) < (int64_t)n) {
		osf_seg_unlock(&s->me->tx_lock);
		return -1;
	}
	head = s->tx->head; /* under the lock, as every writer's */
	osf_side_tx_copy(s, head, b, n);
	__atomic_store_n(&s->tx->head, head + n, __ATOMIC_RELEASE);
	osf_seg_unlock(&s->me->tx_lock);
	osf_side_wake_reader(s, fd);
	osf_side_wake_writer(s, __atomic_load_n(&s->rx->head, __ATOMIC_ACQUIRE),
			     s->rx->tail);
	return 0;
}

int osf_side_get_msg(struct osf_side *s, int fd, void *b, size_t n)
{
	for (;;) {
		int64_t used = osf_side_rx_used(s);
		int r;

		if (used < 0)
			return -ECONNRESET;
		if ((size_t)used >= n) {
			uint64_t tail = s->rx->tail;
			osf_side_rx_copy(s, tail, b, n);
			__atomic_store_n(&s->rx->tail, tail + n, __ATOMIC_RELEASE);
			osf_side_wake_writer(s, tail + (uint64_t)used, tail + n);
			return 0;
		}
		if ((osf_side_peer_flags(s) & (OSF_SIDE_FIN | OSF_SIDE_RESET)) ||
		    (osf_side_state(s) & (OSF_CS_GONE | OSF_CS_BROKEN)))
			return -ECONNRESET;
		r = osf_side_wait_data(s, fd, 0);
		if (r < 0 && r != -EINTR)
			return r;
	}
}
