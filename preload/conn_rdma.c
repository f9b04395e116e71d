//go:build osf_make

/* conn_rdma.c: an RDMA connection's data path run to completion on the
 * application's own thread (docs/DESIGN.md D4, docs/ARCHITECTURE.md "RDMA
 * transport", "Sending", "Receiving"):
 * - right after a write published bytes (or FIN) into the send ring, this
 *   thread posts the WRITE WITH IMMEDIATE itself, through the QP the Go
 *   core made (sdp/rdma/tx.h, the one sending rule the progress engine
 *   uses too);
 * - with OSF_RDMA_RX=caller (conn_rdma_rx; docs/DESIGN.md D4), a reader
 *   or poller that finds no data takes the connection's completions
 *   itself (sdp/rdma/rx.h, the one receiving rule), spinning within the
 *   wait's spin budget before it sleeps as on any connection, and a
 *   reader that consumed a quarter ring posts the credit itself.
 * Whatever it cannot do (a fork child's connection, a busy send queue, a
 * connection closing) is left to the engine, woken by the wake protocol
 * as on any other connection, and the engine still takes the completions
 * that come while nobody here waits. */
#include "conn_priv.h"
#include "osf.h"
#include "../sdp/rdma/rx.h"

#include <sys/epoll.h>
#include <sys/stat.h>
#include <time.h>

/* rtx_find looks up c's sending state through the core, once found kept
 * for the connection's life; a connection not found after
 * OSF_CONN_RTX_LOOKS writes (inherited across exec, or served by another
 * process's engine) stops asking. */
static struct osf_rdma_tx *rtx_find(struct osf_conn *c)
{
	struct osf_rdma_tx *tx;
	struct stat st;
	uint32_t gen = 0;
	int left = __atomic_load_n(&c->rtx_look, __ATOMIC_RELAXED);

	if (left <= 0)
		return NULL;
	__atomic_store_n(&c->rtx_look, left - 1, __ATOMIC_RELAXED);
	if (fstat(c->seg_fd, &st) != 0)
		return NULL;
	tx = osf_core_rdma_find((uint64_t)st.st_dev, (uint64_t)st.st_ino, &gen);
	if (!tx)
		return NULL;
	/* Threads racing here store the same two values. */
	__atomic_store_n(&c->rtx_gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&c->rtx, tx, __ATOMIC_RELEASE);
	__atomic_store_n(&c->rtx_look, 0, __ATOMIC_RELAXED);
	return tx;
}

int osf_conn_rdma_push(struct osf_conn *c)
{
	struct osf_rdma_tx *tx = __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);

	if (!tx && !(tx = rtx_find(c)))
		return 0;
	return osf_rdma_tx_push(tx, __atomic_load_n(&c->rtx_gen, __ATOMIC_RELAXED),
				(int32_t)osf_pid(), &c->s.tx->head, &c->s.me->flags,
				OSF_SIDE_FIN);
}

/* rtx_get returns c's state, looked up if need be, or NULL. */
static struct osf_rdma_tx *rtx_get(struct osf_conn *c)
{
	struct osf_rdma_tx *tx = __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);

	return tx ? tx : rtx_find(c);
}

int osf_conn_rdma_take(struct osf_conn *c, int look)
{
	struct osf_rdma_tx *tx = look ? rtx_get(c) : __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);

	if (!tx || !tx->rx || !tx->rx->take)
		return 0;
	return tx->rx->take(tx, __atomic_load_n(&c->rtx_gen, __ATOMIC_RELAXED),
			    (int32_t)osf_pid()) > 0;
}

int osf_conn_rdma_own(struct osf_conn *c)
{
	struct osf_rdma_tx *tx = __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);

	return tx && tx->pid == (int32_t)osf_pid();
}

int osf_conn_rdma_credit(struct osf_conn *c, uint64_t tail)
{
	struct osf_rdma_tx *tx = __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);

	if (!tx)
		return 0;
	return osf_rdma_credit_push(tx, __atomic_load_n(&c->rtx_gen, __ATOMIC_RELAXED),
				    (int32_t)osf_pid(), tail);
}

int osf_conn_rdma_spin(struct osf_conn *c, unsigned spin_us, int64_t have)
{
	long end;
	int i;

	if (!rtx_get(c))
		return 0;
	if (!spin_us) /* no spin (it has not paid): one look before the sleep */
		return osf_conn_rdma_take(c, 0) && osf_side_rx_past(&c->s, have);
	end = osf_mono_us() + (long)spin_us;
	for (i = 0;; i++) {
		if (osf_side_rx_past(&c->s, have))
			return 1;
		if (!osf_conn_rdma_take(c, 0))
			__builtin_ia32_pause();
		if ((i & 15) == 15 && osf_mono_us() > end)
			return 0;
	}
}

void osf_conn_rdma_blocked(struct osf_conn *c)
{
	struct osf_rdma_tx *tx = __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);
	const uint32_t *looks;
	uint64_t mark;

	if (!tx || !tx->rx || tx->pid != (int32_t)osf_pid() ||
	    !__atomic_load_n(&tx->live, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&tx->gen, __ATOMIC_ACQUIRE) !=
		    __atomic_load_n(&c->rtx_gen, __ATOMIC_RELAXED))
		return;
	/* The engine sleeps at most a second (rx.h eng_looks: a thread holds
	 * a channel, or it is hot): its next look sees the stall without a
	 * kick. The bytes this writer waits to send were published before
	 * (the fence); a look after this read comes after them. A poller
	 * for room holds its own channel meanwhile, so a stream's writer
	 * kicks the engine no more (it did once per credit of the peer). */
	looks = __atomic_load_n(&tx->rx->eng_looks, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (looks && __atomic_load_n(looks, __ATOMIC_RELAXED))
		return;
	/* Once per credit: a writer that blocks again before the peer's
	 * next credit adds nothing the engine does not know. */
	mark = __atomic_load_n(&tx->peer_tail, __ATOMIC_RELAXED) + 1;
	if (__atomic_exchange_n(&c->blocked_at, mark, __ATOMIC_RELAXED) != mark)
		osf_rdma_rx_kick(tx->rx);
}

/* ---- sleeping on the connection's own channel ------------------------ */

/* take_sure takes c's completions, waiting (yielding) while another
 * thread holds the lock: a completion that came before this thread armed
 * the channel raises no event, so it must be taken now, by this thread
 * or the holder. It kicks the engine when the holder keeps the lock. */
static int take_sure(struct osf_rdma_tx *tx, uint32_t gen)
{
	int i, r;

	for (i = 0; i < 64; i++) {
		r = tx->rx->take(tx, gen, (int32_t)osf_pid());
		if (r != -2)
			return r;
		sched_yield();
	}
	osf_rdma_rx_kick(tx->rx);
	return 0;
}

/* chan_enter counts this thread as asleep on the channel (the engine's
 * epoll then leaves it alone; a lent channel is out of it already) and
 * arms the CQ; the channel's fd, or -1
 * when the connection has none (any more). With ep >= 0 (an epoll wait's
 * inner epoll) it registers the channel there, edge-triggered with key,
 * under ep_lock: the fd is surely the channel's then (the engine closes
 * it only after taking it from the rule, under that lock). chan_leave
 * undoes it; the last sleeper arms the CQ and gives the channel back to
 * the engine, or with OSF_RDMA_RX=lend lends it to the next wait (rx.h
 * osf_rdma_chan_lend_locked). */
static int chan_enter(struct osf_rdma_tx *tx, uint32_t gen, int ep, uint64_t key)
{
	struct osf_rdma_rx *rx = tx->rx;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = key};
	int fd = -1;

	osf_rdma_ep_lock(rx);
	if (__atomic_load_n(&tx->gen, __ATOMIC_ACQUIRE) == gen &&
	    __atomic_load_n(&tx->live, __ATOMIC_ACQUIRE) && rx->chan_fd >= 0 &&
	    (ep < 0 || REAL(epoll_ctl)(ep, EPOLL_CTL_ADD, rx->chan_fd, &ev) == 0 ||
	     (errno == EEXIST && REAL(epoll_ctl)(ep, EPOLL_CTL_MOD, rx->chan_fd, &ev) == 0))) {
		if (rx->sleepers++ == 0)
			osf_rdma_chan_unlend_locked(rx); /* lent: no epoll_ctl */
		osf_rdma_chan_apply_locked(rx);
		if (rx->chan_arm)
			(void)rx->chan_arm(rx);
		fd = rx->chan_fd;
	}
	osf_rdma_ep_unlock(rx);
	return fd;
}

static void chan_leave(struct osf_rdma_tx *tx, uint32_t gen, int fd, int ep)
{
	struct osf_rdma_rx *rx = tx->rx;
	const uint32_t *lent;

	osf_rdma_ep_lock(rx);
	if (__atomic_load_n(&tx->gen, __ATOMIC_ACQUIRE) == gen && rx->chan_fd == fd &&
	    rx->sleepers > 0) {
		if (ep >= 0)
			(void)REAL(epoll_ctl)(ep, EPOLL_CTL_DEL, fd, NULL);
		if (--rx->sleepers == 0) {
			if (osf.rdma_lend)
				osf_rdma_chan_lend_locked(rx);
			/* Lent, it waits for the next enter, which arms
			 * the CQ and then takes (rsocket arms before it
			 * sleeps, not after it woke); back in the engine's
			 * epoll it must announce what comes. */
			lent = osf_rdma_chan_lent(rx);
			if (rx->chan_arm && !(lent && __atomic_load_n(lent, __ATOMIC_SEQ_CST)))
				(void)rx->chan_arm(rx);
		}
		osf_rdma_chan_apply_locked(rx);
	}
	osf_rdma_ep_unlock(rx);
}

/* chan_drain_fired reads the event of the channel that fired for this
 * thread, its sleeper. The CQ stays unarmed while this thread was its
 * only sleeper: the arm (a system call on soft-RoCE) would sit between
 * the peer's message and the reply the program is about to send, and
 * this thread's next sleep arms it anyway, then takes what came
 * meanwhile (chan_enter, chan_arm_again), as rsocket arms only before
 * it sleeps. Another sleeper still waits on the channel's next event:
 * then it arms at once. */
static void chan_drain_fired(struct osf_rdma_tx *tx, uint32_t gen, int fd)
{
	struct osf_rdma_rx *rx = tx->rx;

	osf_rdma_ep_lock(rx);
	if (__atomic_load_n(&tx->gen, __ATOMIC_ACQUIRE) == gen && rx->chan_fd == fd &&
	    rx->chan_drain) {
		(void)rx->chan_drain(rx);
		if (rx->sleepers > 1)
			(void)rx->chan_arm(rx);
	}
	osf_rdma_ep_unlock(rx);
}

/* chan_arm_again arms the CQ before this thread, a sleeper that drained
 * it, sleeps on the channel once more: 1 when it armed it now (what came
 * before must then be taken), 0 when it was armed as much already (or
 * cannot be). */
static int chan_arm_again(struct osf_rdma_tx *tx, uint32_t gen, int fd)
{
	struct osf_rdma_rx *rx = tx->rx;
	uint64_t arms;
	int armed = 0;

	osf_rdma_ep_lock(rx);
	if (__atomic_load_n(&tx->gen, __ATOMIC_ACQUIRE) == gen && rx->chan_fd == fd &&
	    rx->chan_arm) {
		arms = __atomic_load_n(&rx->cq_arms, __ATOMIC_RELAXED);
		armed = rx->chan_arm(rx) == 0 &&
			__atomic_load_n(&rx->cq_arms, __ATOMIC_RELAXED) != arms;
	}
	osf_rdma_ep_unlock(rx);
	return armed;
}

/* own_take_quiet lowers c's want flag of a kind (want and waiters: its
 * rx_ or tx_ words) before this thread, a counted reader, poller or
 * writer whose channel fired, takes the completions itself: its own take
 * then sends it no token (a send, and the recv that drains it: two
 * system calls a message). Not when another waiter counts on the flag:
 * one that arms meanwhile raises it after counting itself
 * (osf_side_arm), so either it is seen here and the flag goes back up,
 * or its raise comes after the lowering. want_again raises it before
 * this thread sleeps once more, unless the socket of the kind is shut
 * here (shut: OSF_SIDE_RDSOCK or _WRSOCK). */
static int own_take_quiet(uint32_t *want, const uint32_t *waiters)
{
	if (!__atomic_exchange_n(want, 0, __ATOMIC_SEQ_CST))
		return 0;
	if (__atomic_load_n(waiters, __ATOMIC_SEQ_CST) > 1)
		__atomic_store_n(want, 1, __ATOMIC_SEQ_CST);
	return 1;
}

static void want_again(struct osf_side *s, uint32_t *want, uint32_t shut)
{
	if (!(osf_side_my_flags(s) & shut))
		__atomic_store_n(want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* sleep_done: for a reader (kind OSF_ARM_RX), more than have bytes or
 * nothing more can come; for a writer, room or the end (a write would
 * not block). */
static int sleep_done(const struct osf_side *s, int kind, int64_t have)
{
	if (kind == OSF_ARM_TX)
		return osf_side_tx_ready(s) || s->pending_err;
	return osf_side_rx_past(s, have) ||
	       (osf_side_peer_flags(s) & (OSF_SIDE_FIN | OSF_SIDE_RESET)) ||
	       (osf_side_state(s) & (OSF_CS_GONE | OSF_CS_BROKEN)) ||
	       (osf_side_my_flags(s) & OSF_SIDE_RDSHUT) || s->pending_err;
}

/* chan_drop stops sleeping on the channel (this thread sleeps on its wake
 * socket only from now on) and takes what came before the last arm. */
static void chan_drop(struct osf_rdma_tx *tx, uint32_t gen, int *cfd)
{
	if (*cfd < 0)
		return;
	chan_leave(tx, gen, *cfd, -1);
	*cfd = -1;
	(void)take_sure(tx, gen);
}

/* still_ours reports whether fd still names c (another thread may have
 * closed it, or put another file at its number). */
static int still_ours(int fd, const struct osf_conn *c)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	return e && __atomic_load_n(&e->priv, __ATOMIC_ACQUIRE) == (uint64_t)(uintptr_t)c;
}

/* hold_lock holds the word with this process's pid: a fork child, alone
 * in its process, takes over a lock that a thread of its parent held at
 * the fork (the holder is not there to let it go). */
static void hold_lock(struct osf_conn *c)
{
	uint32_t me = (uint32_t)osf_pid(), cur = 0;

	while (!__atomic_compare_exchange_n(&c->hold_lock, &cur, me, 0, __ATOMIC_ACQUIRE,
					    __ATOMIC_RELAXED)) {
		if (cur != me && __atomic_compare_exchange_n(&c->hold_lock, &cur, me, 0,
							     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return;
		sched_yield();
		cur = 0;
	}
}

static void hold_unlock(struct osf_conn *c)
{
	__atomic_store_n(&c->hold_lock, 0, __ATOMIC_RELEASE);
}

/* hold_get returns c's wake socket holder (conn_priv.h hold_fd), made
 * from fd on first use, counting this thread as its user; -1 when there
 * is none to be had (fd is not c's any more, no fd left). */
static int hold_get(struct osf_conn *c, int fd)
{
	int h;

	hold_lock(c);
	if (c->hold_fd < 0 && !c->hold_closed && still_ours(fd, c)) {
		h = osf_fdt_dup_high(fd, 1);
		c->hold_fd = h >= 0 ? osf_fdt_keep_hidden(h, fd) : -1;
	}
	h = c->hold_closed ? -1 : c->hold_fd;
	if (h >= 0)
		c->hold_users++;
	hold_unlock(c);
	return h;
}

static void hold_close_locked(struct osf_conn *c)
{
	if (c->hold_users == 0 && c->hold_closed && c->hold_fd >= 0) {
		osf_fdt_close_hidden(c->hold_fd);
		c->hold_fd = -1;
	}
}

/* hold_put uncounts this thread. It never closes the holder: when the
 * connection's last close came while this thread slept, the bytes it
 * woke for are still unread, and the holder is the wake socket's last
 * reference, whose end is the engine's sign of the application's close
 * (with unread data, a reset). The last reference to the connection,
 * after the reader consumed, closes it (osf_conn_destroy). */
static void hold_put(struct osf_conn *c)
{
	hold_lock(c);
	c->hold_users--;
	hold_unlock(c);
}

void osf_conn_rdma_unhold(struct osf_conn *c, int last)
{
	if (c->hold_fd < 0 && !last)
		return;
	hold_lock(c);
	c->hold_closed = 1;
	if (last)
		c->hold_users = 0;
	hold_close_locked(c);
	hold_unlock(c);
}

int osf_conn_rdma_chan(struct osf_conn *c, int how, struct osf_chan_wait *w)
{
	struct osf_rdma_tx *tx = __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);
	uint32_t gen = __atomic_load_n(&c->rtx_gen, __ATOMIC_RELAXED);

	if (!tx || !tx->rx || tx->pid != (int32_t)osf_pid())
		return -1;
	switch (how) {
	case OSF_CHAN_ENTER:
		w->fd = -1;
		if (__atomic_load_n(&tx->rx->chan_fd, __ATOMIC_RELAXED) < 0 ||
		    (w->fd = chan_enter(tx, gen, w->ep, w->key)) < 0)
			return -1;
		if (take_sure(tx, gen) < 0) { /* retired or closing: the engine's */
			chan_leave(tx, gen, w->fd, w->ep);
			w->fd = -1;
			return -1;
		}
		__atomic_add_fetch(&tx->rx->chan_sleeps, 1, __ATOMIC_RELAXED);
		return 0;
	case OSF_CHAN_FIRED: { /* disarm follows: no sleep before the next arm */
		int took;

		chan_drain_fired(tx, gen, w->fd);
		/* Not a wait for room alone: the readers' flag is theirs,
		 * and lowered here their data would send them no token. */
		if (w->reader)
			(void)own_take_quiet(&c->s.me->rx_want, &c->s.me->rx_waiters);
		took = take_sure(tx, gen);
		/* Tokens are counted before they are sent (segment.h
		 * osf_wake_send): none counted, none waits on the socket. */
		if (took > 0 && !__atomic_load_n(&c->s.me->rx_tokens, __ATOMIC_ACQUIRE))
			return 1;
		return took > 0 ? 2 : took;
	}
	default:
		chan_leave(tx, gen, w->fd, w->ep);
		return 0;
	}
}

/* rcv_timeout is recv's timeout in ms, the wake socket's SO_RCVTIMEO,
 * where the program set it (0: none). It is read once and kept in
 * c->rcvtimeo with the side's opts_seq, which every holder's
 * setsockopt(SO_RCVTIMEO) bumps (conn_tcp.c set_socket), a fork child's
 * too: a getsockopt per sleep was one more system call per message. A
 * timeout too long to keep (OSF_CONN_RCVTIMEO_MS) is read every time. */
#define OSF_CONN_RCVTIMEO_KNOWN (1ull << 31)
#define OSF_CONN_RCVTIMEO_MS 0x7fffffffl
static long rcv_timeout(struct osf_conn *c, int fd)
{
	uint32_t seq = __atomic_load_n(&c->s.me->opts_seq, __ATOMIC_SEQ_CST);
	uint64_t v = __atomic_load_n(&c->rcvtimeo, __ATOMIC_ACQUIRE);
	long ms;

	if ((v & OSF_CONN_RCVTIMEO_KNOWN) && (uint32_t)(v >> 32) == seq)
		return (long)(v & OSF_CONN_RCVTIMEO_MS);
	ms = osf_sock_timeout_ms(fd, 0);
	if (ms < 0)
		ms = 0;
	else if (ms >= OSF_CONN_RCVTIMEO_MS)
		return ms;
	/* Kept only if no other thread kept a value read after this one's. */
	(void)__atomic_compare_exchange_n(&c->rcvtimeo, &v,
					  (uint64_t)seq << 32 | OSF_CONN_RCVTIMEO_KNOWN |
						  (uint64_t)ms,
					  0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	return ms;
}

/* chan_sleep is osf_conn_rdma_sleep (kind OSF_ARM_RX) and
 * osf_conn_rdma_sleep_room (OSF_ARM_TX): asleep in poll on c's channel
 * and the wake socket of the kind (a reader's: the holder of fd; a
 * writer's: the writers' socket, held by the writer's reference to c). */
static int chan_sleep(struct osf_conn *c, int fd, int kind, int64_t have)
{
	struct osf_rdma_tx *tx = __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);
	uint32_t gen = __atomic_load_n(&c->rtx_gen, __ATOMIC_RELAXED);
	struct osf_seg_side *me = c->s.me;
	uint32_t *want = kind == OSF_ARM_TX ? &me->tx_want : &me->rx_want;
	uint32_t *waiters = kind == OSF_ARM_TX ? &me->tx_waiters : &me->rx_waiters;
	uint32_t shut = kind == OSF_ARM_TX ? OSF_SIDE_WRSOCK : OSF_SIDE_RDSOCK;
	long deadline = -1, tmo;
	int cfd, wfd, took, woken = 0, stuck = 0, r = 0, n, ms, quiet = 0;

	if (!tx || !tx->rx || __atomic_load_n(&tx->rx->chan_fd, __ATOMIC_RELAXED) < 0 ||
	    tx->pid != (int32_t)osf_pid())
		return 1;
	/* recv's SO_RCVTIMEO; send's SO_SNDTIMEO is the writers' socket's
	 * SO_RCVTIMEO (conn_tcp.c), read per sleep (once per credit). */
	tmo = kind == OSF_ARM_TX ? osf_sock_timeout_ms(c->s.wfd, 0) : rcv_timeout(c, fd);
	if (tmo > 0) /* in µs: a deadline in whole ms ended early */
		deadline = osf_mono_us() + tmo * 1000;
	/* The wake socket, through the holder: poll holds a file only while
	 * it sleeps, and this thread may poll several times. */
	if ((wfd = kind == OSF_ARM_TX ? c->s.wfd : hold_get(c, fd)) < 0)
		return 1;
	if ((cfd = chan_enter(tx, gen, -1, 0)) < 0) {
		if (kind == OSF_ARM_RX)
			hold_put(c);
		return 1;
	}
	/* Counted as a waiter with its flag up, as any: whoever else takes
	 * this connection's completions (the engine, another thread) and
	 * publishes (data, or a credit that makes room) wakes this thread
	 * with a token. */
	(void)osf_side_arm(&c->s, kind == OSF_ARM_TX ? fd : wfd, kind, 0);
	if (kind == OSF_ARM_TX) /* osf_side_arm raises it only with no room */
		want_again(&c->s, want, shut);
	__atomic_add_fetch(&me->sleeps, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&tx->rx->chan_sleeps, 1, __ATOMIC_RELAXED);
	osf_intr_begin();
	took = take_sure(tx, gen);
	for (;;) {
		struct pollfd p[2] = {{wfd, POLLIN, 0}, {cfd, POLLIN, 0}};

		if (sleep_done(&c->s, kind, have))
			break;
		if (took < 0) /* retired or closing: the engine's, and the wake socket's */
			chan_drop(tx, gen, &cfd);
		if (quiet) { /* asleep again: whoever publishes wakes it */
			quiet = 0;
			want_again(&c->s, want, shut);
			if (sleep_done(&c->s, kind, have))
				break;
		}
		/* Drained when it fired: armed before this sleep, then what
		 * came meanwhile taken (a completion queued before the arm
		 * raises no event). */
		if (cfd >= 0 && chan_arm_again(tx, gen, cfd)) {
			took = take_sure(tx, gen);
			continue;
		}
		ms = -1;
		if (deadline >= 0) {
			long left = osf_wait_ms(deadline);
			if (!left) {
				r = -EAGAIN;
				break;
			}
			ms = left > 1000000000L ? 1000000000 : (int)left;
		}
		p[1].fd = cfd;
		n = REAL(poll)(p, cfd >= 0 ? 2 : 1, ms);
		if (n < 0) {
			/* As recv and send: restarted after SA_RESTART
			 * handlers, unless a timeout is set. */
			if (errno == EINTR && deadline < 0 && osf_intr_restart()) {
				osf_intr_begin();
				took = 0;
				continue;
			}
			r = -errno;
			break;
		}
		if (n == 0) {
			r = -EAGAIN;
			break;
		}
		if (p[0].revents) { /* a token, or the end */
			woken = 1;
			break;
		}
		if (p[1].revents & (POLLERR | POLLHUP | POLLNVAL)) {
			chan_drop(tx, gen, &cfd); /* the stand-in's end: the engine's */
			took = 0;
			continue;
		}
		chan_drain_fired(tx, gen, cfd);
		quiet = own_take_quiet(want, waiters);
		took = take_sure(tx, gen);
		/* The stand-in's socket stays readable while what it holds
		 * waits for a receive to be posted (RNR): this thread leaves
		 * it to the engine then and sleeps on its wake socket. */
		stuck = took > 0 ? 0 : stuck + 1;
		if (stuck > 2)
			chan_drop(tx, gen, &cfd);
	}
	osf_side_disarm(&c->s, wfd, kind, woken ? kind : 0);
	chan_drop(tx, gen, &cfd);
	if (kind == OSF_ARM_RX)
		hold_put(c);
	return r;
}

int osf_conn_rdma_sleep(struct osf_conn *c, int fd, int64_t have)
{
	return chan_sleep(c, fd, OSF_ARM_RX, have);
}

int osf_conn_rdma_sleep_room(struct osf_conn *c, int fd)
{
	/* Held back by the buffer sizes or a trim's stop, room comes without
	 * a credit (side.c sleep_limited looks again every 20 ms). */
	if (c->s.wfd < 0 || osf_side_tx_limit(&c->s) < c->s.size || osf_side_tx_stopped(&c->s))
		return 1;
	return chan_sleep(c, fd, OSF_ARM_TX, 0);
}
