//go:build osf_make

/* conn_io.c: the data calls on an offloaded connection: recv/read,
 * send/write and shutdown, over the rings (sendfile and splice:
 * conn_fill.c). Every call
 * follows Linux TCP's errno and signal behaviour for the same situation
 * and makes no system call while data (or room) is there; waiting and
 * waking are the stream protocol's (sdp/side.h).
 */
#include "conn_priv.h"
#include "spin.h"
#include "setup.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- iovec helpers ------------------------------------------------------- */

static ssize_t iov_total(const struct iovec *iov, int cnt)
{
	size_t total = 0;
	int i;

	if (cnt < 0 || cnt > IOV_MAX)
		return -1;
	for (i = 0; i < cnt; i++) {
		if (iov[i].iov_len > (size_t)SSIZE_MAX - total)
			return -1;
		total += iov[i].iov_len;
	}
	return (ssize_t)total;
}

struct iovcur {
	const struct iovec *iov;
	int cnt, i;
	size_t off;
};

static void cur_skip_empty(struct iovcur *cur)
{
	while (cur->i < cur->cnt && cur->off == cur->iov[cur->i].iov_len) {
		cur->i++;
		cur->off = 0;
	}
}

/* ring_iov copies n bytes between ring position pos, seen through view v
 * (segment.h), and the iovecs: out of
 * the ring into them (to_iov), or from them into the ring. It returns -1
 * (nothing copied) when the program's buffers cannot take or give them
 * all, as the kernel fails a copy to or from a bad buffer with EFAULT
 * (fault.c). Inlined, so each caller gets its direction's copy only. */
static inline __attribute__((always_inline)) int
ring_iov(struct iovcur *cur, struct osf_ring_view v, uint64_t pos,
	 size_t n, int to_iov)
{
	uint8_t *data = v.d;
	uint32_t mask = v.mask;

	pos += v.bias;
	if (osf_probe_iov(cur->iov, cur->cnt, cur->i, cur->off, n, to_iov) < 0)
		return -1;
	while (n > 0) {
		size_t room, k;
		uint8_t *buf;
		cur_skip_empty(cur);
		room = cur->iov[cur->i].iov_len - cur->off;
		k = n < room ? n : room;
		buf = (uint8_t *)cur->iov[cur->i].iov_base + cur->off;
		if (to_iov)
			osf_ring_copy_out(data, mask, pos, buf, k);
		else
			osf_ring_copy_in(data, mask, pos, buf, k);
		cur->off += k;
		pos += k;
		n -= k;
	}
	return 0;
}

static void raise_sigpipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		syscall(SYS_tgkill, getpid(), (pid_t)osf_lock_tid(), SIGPIPE);
}

/* ---- receiving ------------------------------------------------------------ */

/* recv_end decides what an empty ring means: 0 (end of file), or -1 with
 * errno, or 1 when the caller should wait. */
static int recv_end(int fd, struct osf_conn *c, int nonblock)
{
	uint32_t st;
	int err;

	conn_hello(c); /* a reader that waits wants its server */
	st = osf_side_state(&c->s);
	if (st & OSF_CS_BROKEN) {
		err = osf_side_take_recv_error(&c->s);
		return err ? OSF_FAIL(err) : 0;
	}
	if (osf_side_peer_flags(&c->s) & OSF_SIDE_FIN)
		return osf_side_rx_used(&c->s) != 0 ? 2 : 0; /* data raced in: read it */
	if (osf_side_my_flags(&c->s) & OSF_SIDE_RDSHUT)
		return 0;
	if (!(st & OSF_CS_GONE) && nonblock) {
		/* RDMA: what arrived may still be in the completion queue. */
		if (conn_rdma_rx(c) && osf_conn_rdma_take(c, 1) && osf_side_rx_used(&c->s) != 0)
			return 2;
		/* The wake socket's end and stale tokens: over RDMA, with the
		 * engine in this process, the end comes after a bump of
		 * close_seq (a look without a system call) and tokens are
		 * counted before they are sent, so a poll of the socket per
		 * EAGAIN found nothing. Not with the kernel's socket as the fd
		 * (OSF_SHM_KFD): the peer's end comes there. */
		if (conn_rdma_rx(c) && !c->kfd && osf_conn_rdma_own(c)) {
			osf_side_peer_closing(&c->s, fd);
			if (__atomic_load_n(&c->s.me->rx_tokens, __ATOMIC_ACQUIRE) >
			    __atomic_load_n(&c->s.me->rx_waiters, __ATOMIC_ACQUIRE))
				osf_side_drain(&c->s, fd, &c->s.me->rx_waiters);
		} else {
			osf_side_drain(&c->s, fd, &c->s.me->rx_waiters);
		}
		st = osf_side_state(&c->s);
		if (!(st & OSF_CS_GONE) && osf_side_arm_rx(&c->s))
			return 2;
	}
	if (st & OSF_CS_GONE) {
		if (osf_side_rx_used(&c->s) != 0)
			return 2;
		err = osf_side_take_recv_error(&c->s);
		return err ? OSF_FAIL(err) : 0;
	}
	return nonblock ? OSF_FAIL(EAGAIN) : 1;
}

/* spin_begin returns the spin the adaptive policy allows a recv or send
 * wait (spin.h), noting in *sleeps the side's sleeps so far; spin_end
 * tells the policy whether that spin paid (no sleep was counted). */
static unsigned spin_begin(struct osf_conn *c, uint64_t *sleeps)
{
	*sleeps = __atomic_load_n(&c->s.me->sleeps, __ATOMIC_RELAXED);
	return osf_spin_budget(osf.spin_us, 4);
}

static void spin_end(struct osf_conn *c, unsigned spin, uint64_t sleeps)
{
	if (spin)
		osf_spin_paid(__atomic_load_n(&c->s.me->sleeps, __ATOMIC_RELAXED) ==
			      sleeps);
}

/* wait_data and conn_wait_room are osf_side_wait_data and _room with the
 * adaptive spin. */
static int wait_data(struct osf_conn *c, int fd)
{
	uint64_t sleeps;
	unsigned spin;
	int r;

	if (__atomic_load_n(&osf_spare_wanted, __ATOMIC_RELAXED))
		osf_spare_fill(); /* the next connect's segment, while we wait */
	osf_conn_unmap_due(0); /* closed connections' segments (conn.c) */
	osf_reap_kick();
	spin = spin_begin(c, &sleeps);
	if (conn_rdma_rx(c) && osf_conn_rdma_spin(c, spin, 0))
		r = 0; /* this thread took what arrived (conn_rdma.c) */
	else if (!conn_rdma_rx(c) || (r = osf_conn_rdma_sleep(c, fd, 0)) == 1)
		r = osf_side_wait_data(&c->s, fd, conn_rdma_rx(c) && c->rtx ? 0 : spin);

	spin_end(c, spin, sleeps);
	return r;
}

/* wait_more waits until more than have bytes are queued (or the end). */
static int wait_more(struct osf_conn *c, int fd, int64_t have)
{
	uint64_t sleeps;
	unsigned spin;
	int r;

	osf_reap_kick();
	spin = spin_begin(c, &sleeps);
	if (conn_rdma_rx(c) && osf_conn_rdma_spin(c, spin, have))
		r = 0;
	else if (!conn_rdma_rx(c) || (r = osf_conn_rdma_sleep(c, fd, have)) == 1)
		r = osf_side_wait_more(&c->s, fd, conn_rdma_rx(c) && c->rtx ? 0 : spin, have);

	spin_end(c, spin, sleeps);
	return r;
}

/* peek_ended: no more data can come to s for a reader (the peer's FIN,
 * the end, an error, or this side shut for reading). */
static int peek_ended(const struct osf_side *s)
{
	return (osf_side_peer_flags(s) & OSF_SIDE_FIN) ||
	       (osf_side_state(s) & OSF_CS_GONE) || s->pending_err ||
	       (osf_side_my_flags(s) & OSF_SIDE_RDSHUT);
}

int conn_wait_room(struct osf_conn *c, int fd)
{
	uint64_t sleeps;
	unsigned spin;
	int r;

	osf_reap_kick();
	if (conn_rdma(c))
		osf_conn_rdma_blocked(c);
	/* RDMA: room comes as the peer's credit, a completion this thread
	 * takes itself, asleep on the connection's channel (conn_rdma.c).
	 * Not with the kernel's socket as the fd (OSF_SHM_KFD): its end
	 * comes there. */
	if (conn_rdma_rx(c) && !c->kfd && (r = osf_conn_rdma_sleep_room(c, fd)) != 1)
		return r;
	spin = spin_begin(c, &sleeps);
	/* OSF_SHM_KFD, not accepted yet: the server's reset of a connection
	 * whose hello it could not find comes on the kernel socket only. */
	r = osf_side_wait_room_or(&c->s, fd, spin,
				  c->kfd && !__atomic_load_n(&c->s.peer->holders, __ATOMIC_ACQUIRE) &&
						  !__atomic_load_n(&c->s.peer->close_seq, __ATOMIC_ACQUIRE)
					  ? fd : -1);

	spin_end(c, spin, sleeps);
	return r;
}

/* recv_none is a recvmsg of 0 bytes: TCP waits as for 1 byte and returns
 * 0 once there is data (read(2) of 0 bytes does not get here). */
static int recv_none(int fd, struct osf_conn *c, int nonblock)
{
	int r;

	for (;;) {
		r = osf_side_rx_used(&c->s) != 0 ? 2 : recv_end(fd, c, nonblock);
		if (r != 1) /* 2: data; 0: end; -1: errno set */
			break;
		if ((r = wait_data(c, fd)) < 0)
			return OSF_FAIL(-r);
	}
	return r == 2 ? 0 : r;
}

/* osf_conn_recv is one loop on purpose (about 95 lines): taking the
 * consumers' lock, copying, publishing tail, waking writers and deciding
 * what an empty ring means share the iovec cursor and the count so far,
 * which MSG_WAITALL, MSG_PEEK and a fault part-way must all see. */
/* recv_target returns what a blocking recv of total bytes waits for
 * before it takes any: SO_RCVLOWAT (at most total), or the whole length
 * for a peek with MSG_WAITALL; MSG_WAITALL without MSG_PEEK takes as it
 * goes instead (1). Off the fast path: the caller asks only for
 * MSG_WAITALL or a mark above 1. */
static __attribute__((noinline, cold)) int64_t
recv_target(const struct osf_conn *c, int flags, ssize_t total)
{
	if (flags & MSG_WAITALL)
		return (flags & MSG_PEEK) ? total : 1;
	return conn_rcvlowat(c) < total ? conn_rcvlowat(c) : total;
}

/* urg_passed is called when the read position leaves the urgent byte
 * behind, or it is read out of band: the wake socket's out-of-band byte
 * (send_urgent) is taken, so that the kernel's POLLPRI ends too. */
static void urg_passed(int fd)
{
	int saved = errno;
	char b;

	(void)REAL(recv)(fd, &b, 1, MSG_OOB | MSG_DONTWAIT);
	errno = saved;
}

/* recv_oob is a recv with MSG_OOB (tcp_recv_urg): the urgent byte, once,
 * unless SO_OOBINLINE keeps it in the stream; EINVAL when there is none,
 * or it was read already or passed. */
static __attribute__((noinline, cold)) ssize_t
recv_oob(int fd, struct osf_conn *c, struct iovcur *cur, ssize_t total, int flags)
{
	uint64_t u;
	int r;

	if (c->s.oobinline)
		return OSF_FAIL(EINVAL);
	r = osf_side_lock_rx(&c->s, fd, 1);
	if (r != 0)
		return OSF_FAIL(r == OSF_LOCK_AGAIN ? EAGAIN : EINVAL);
	u = osf_side_urg_now(&c->s);
	if (!u || __atomic_load_n(&c->s.me->urg_read, __ATOMIC_RELAXED) == u) {
		osf_seg_unlock(&c->s.me->rx_lock);
		return OSF_FAIL(EINVAL);
	}
	if (total > 0 && !(flags & MSG_TRUNC) &&
	    ring_iov(cur, osf_side_rx_view(&c->s), u - 1, 1, 1) < 0) {
		osf_seg_unlock(&c->s.me->rx_lock);
		return OSF_FAIL(EFAULT);
	}
	if (!(flags & MSG_PEEK) && total > 0) {
		__atomic_store_n(&c->s.me->urg_read, u, __ATOMIC_RELAXED);
		urg_passed(fd);
	}
	osf_seg_unlock(&c->s.me->rx_lock);
	return total > 0 ? 1 : 0;
}

/* recv_urgent applies urgent data to a read that finds used bytes at its
 * position (rx_lock held, an urgent pointer set): urgent bytes replaced
 * while the reader sat at them are skipped (urg_hole); the read stops
 * before the urgent byte (*at_mark); one that starts at it skips it
 * (SO_OOBINLINE: reads it), taking the wake socket's out-of-band byte.
 * For a peek, skipped bytes are only stepped over (*peek_skip). It returns
 * the bytes the read may take, or -1 when it is at the urgent byte with
 * bytes read already (it stops there). The peer's words count only inside
 * the unread bytes. */
static __attribute__((noinline, cold)) int64_t
recv_urgent(int fd, struct osf_conn *c, int flags, int have, int64_t used,
	    uint64_t *peek_skip, int *at_mark)
{
	uint64_t t0 = c->s.rx->tail, h, u;

	h = __atomic_load_n(&c->s.peer->urg_hole, __ATOMIC_ACQUIRE);
	if (!c->s.oobinline && h > t0 && h - t0 <= (uint64_t)used) {
		if (!(flags & MSG_PEEK)) {
			__atomic_store_n(&c->s.rx->tail, h, __ATOMIC_RELEASE);
			used -= (int64_t)(h - t0);
			t0 = h;
		} else {
			*peek_skip = h - t0;
			return used - (int64_t)(h - t0); /* a peek past a hole: as it is */
		}
	}
	if (used <= 0 || !(u = osf_side_urg(&c->s, t0, t0 + (uint64_t)used)))
		return used;
	if (u - 1 > t0) { /* up to the mark, not past it */
		*at_mark = 1;
		return (int64_t)(u - 1 - t0);
	}
	if (have)
		return -1;
	if (!(flags & MSG_PEEK) &&
	    __atomic_load_n(&c->s.me->urg_read, __ATOMIC_RELAXED) != u)
		urg_passed(fd);
	if (c->s.oobinline)
		return used;
	if (!(flags & MSG_PEEK))
		__atomic_store_n(&c->s.rx->tail, t0 + 1, __ATOMIC_RELEASE);
	else
		*peek_skip = 1;
	return used - 1;
}

/* conn_recv is osf_conn_recv; raw: a peek of osf's own (splice), which
 * SO_PEEK_OFF neither moves nor offsets. */
static inline __attribute__((always_inline)) ssize_t
conn_recv(int fd, struct osf_fdt_entry *e, const struct iovec *iov, int iovcnt,
	  int flags, int raw)
{
	struct osf_conn *c;
	struct iovcur cur = {iov, iovcnt, 0, 0};
	ssize_t total, got = 0;
	int64_t target;
	int nonblock, r, settled = 0;
	unsigned intr = osf_intr_count();

	c = conn_get(fd, e);
	if (!c)
		return OSF_FAIL(EBADF);
	total = iov_total(iov, iovcnt);
	if (total < 0) {
		conn_put(c);
		return OSF_FAIL(EINVAL);
	}
	if (unlikely(flags & (MSG_OOB | MSG_ERRQUEUE))) {
		struct iovcur oc = {iov, iovcnt, 0, 0};
		ssize_t r0 = (flags & MSG_OOB) ? recv_oob(fd, c, &oc, total, flags)
					       : OSF_FAIL(EAGAIN);
		conn_put(c);
		return r0;
	}
	nonblock = c->nonblock || (flags & MSG_DONTWAIT);
	if (unlikely(c->gw == OSF_CONN_GW_WAIT) &&
	    osf_conn_gw_settle(fd, e, nonblock ? 0 : OSF_CONN_GW_FOREVER) < 0) {
		conn_put(c);
		return OSF_FAIL(EAGAIN); /* as TCP's SYN_SENT */
	}
	if (total == 0) {
		r = recv_none(fd, c, nonblock);
		conn_put(c);
		return r;
	}
	__atomic_add_fetch(&c->s.me->recv_calls, 1, __ATOMIC_RELAXED);
	target = 1;
	if (unlikely((flags & MSG_WAITALL) || c->rcvlowat > 1))
		target = recv_target(c, flags, total);
	for (;;) {
		int64_t used;
		uint64_t peek_skip = 0;
		int at_mark = 0; /* the read stops at the urgent byte */
		r = osf_side_lock_rx(&c->s, fd, nonblock);
		if (r == OSF_LOCK_AGAIN) {
			/* Another holder of this side is reading (or stopped
			 * while it was): as a busy kernel socket would. */
			if (got > 0)
				break;
			conn_put(c);
			return OSF_FAIL(EAGAIN);
		}
		if (r < 0) {
			osf_side_broken(&c->s);
			used = 0;
			goto empty;
		}
		used = osf_side_rx_used(&c->s);
		if (used < 0) {
			osf_seg_unlock(&c->s.me->rx_lock);
			osf_side_broken(&c->s);
			goto empty;
		}
		if (unlikely(used < target) && used > 0 && !nonblock && !settled &&
		    !peek_ended(&c->s)) {
			/* TCP takes data once target bytes are there (the
			 * whole length for a peek with MSG_WAITALL, else
			 * SO_RCVLOWAT), or at the end; after a signal or the
			 * timeout, what is there. */
			osf_seg_unlock(&c->s.me->rx_lock);
			if (wait_more(c, fd, used) < 0)
				settled = 1;
			continue;
		}
		if ((flags & MSG_PEEK) && unlikely(c->peek_off > 0) && !raw) {
			/* SO_PEEK_OFF: the peek starts that far in, and waits
			 * for data past it. */
			int64_t off = c->peek_off;
			if (used <= off) {
				osf_seg_unlock(&c->s.me->rx_lock);
				if (got > 0)
					break;
				if (peek_ended(&c->s)) {
					r = osf_side_take_recv_error(&c->s);
					conn_put(c);
					return r ? OSF_FAIL(r) : 0;
				}
				if (nonblock || (r = wait_more(c, fd, off)) < 0) {
					conn_put(c);
					return OSF_FAIL(nonblock ? EAGAIN : -r);
				}
				continue;
			}
			peek_skip = (uint64_t)off;
			used -= off;
		}
		if (unlikely(__atomic_load_n(&c->s.peer->urg, __ATOMIC_RELAXED)) &&
		    used > 0 && !peek_skip) {
			used = recv_urgent(fd, c, flags, got > 0, used, &peek_skip, &at_mark);
			if (used < 0) { /* at the urgent byte, with bytes read */
				osf_seg_unlock(&c->s.me->rx_lock);
				break;
			}
		}
		if (used > 0) {
			uint64_t tail = c->s.rx->tail + peek_skip, head = tail + (uint64_t)used;
			size_t n = (size_t)used < (size_t)(total - got)
					   ? (size_t)used
					   : (size_t)(total - got);
			if (!(flags & MSG_TRUNC) &&
			    ring_iov(&cur, osf_side_rx_view(&c->s), tail, n, 1) < 0) {
				osf_seg_unlock(&c->s.me->rx_lock);
				if (got > 0) /* MSG_WAITALL: what it has */
					break;
				conn_put(c);
				return OSF_FAIL(EFAULT);
			}
			if (!(flags & MSG_PEEK)) {
				__atomic_store_n(&c->s.rx->tail, tail + n,
						 __ATOMIC_RELEASE);
				if (unlikely(c->peek_off > 0)) /* sk_peek_offset_bwd */
					c->peek_off = (size_t)c->peek_off > n ? c->peek_off - (int)n : 0;
				osf_seg_unlock(&c->s.me->rx_lock);
				osf_side_wake_writer(&c->s, head, tail + n);
				conn_consumed(c, tail + n);
				if (unlikely(c->async)) /* SIGIO for what comes */
					(void)osf_side_arm_rx(&c->s);
			} else {
				if (unlikely(c->peek_off >= 0) && !raw) /* sk_peek_offset_fwd */
					c->peek_off += (int)n;
				osf_seg_unlock(&c->s.me->rx_lock);
			}
			got += (ssize_t)n;
			if (got == total || !(flags & MSG_WAITALL) ||
			    (flags & MSG_PEEK) || at_mark)
				break;
			continue;
		}
		osf_seg_unlock(&c->s.me->rx_lock);
	empty:
		/* MSG_WAITALL ends with what it has once a handler ran
		 * (TCP's signal_pending), SA_RESTART or not. */
		if (got > 0 && (!(flags & MSG_WAITALL) || osf_intr_count() != intr))
			break;
		r = recv_end(fd, c, nonblock);
		if (r == 2)
			continue;
		if (r <= 0) {
			if (got > 0) /* MSG_WAITALL cut short: what we have */
				break;
			conn_put(c);
			return r;
		}
		r = wait_data(c, fd);
		if (r < 0) {
			if (got > 0)
				break;
			conn_put(c);
			return OSF_FAIL(-r);
		}
		if (got > 0 && osf_intr_count() != intr)
			break; /* the sleep restarted after an SA_RESTART handler */
	}
	conn_put(c);
	return got;
}

ssize_t osf_conn_recv(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags)
{
	return conn_recv(fd, e, iov, iovcnt, flags, 0);
}

ssize_t conn_peek_raw(int fd, struct osf_fdt_entry *e, const struct iovec *iov, int iovcnt)
{
	return conn_recv(fd, e, iov, iovcnt, MSG_PEEK, 1);
}

/* ---- sending --------------------------------------------------------------- */

/* conn_send_end handles a write on a connection whose other side is gone (or
 * broken, or shut down here): 1 to go on writing, else the result. */
ssize_t conn_send_end(struct osf_conn *c, size_t total, int flags)
{
	int err;

	if (osf_side_my_flags(&c->s) & OSF_SIDE_FIN) {
		raise_sigpipe(flags);
		return OSF_FAIL(EPIPE);
	}
	if (!(osf_side_state(&c->s) & OSF_CS_GONE))
		return 1;
	err = osf_side_take_pending(&c->s);
	if (err) {
		/* The error the reset left; EPIPE (a reset in CLOSE_WAIT)
		 * raises SIGPIPE as any EPIPE from a write does. */
		if (err == EPIPE)
			raise_sigpipe(flags);
		return OSF_FAIL(err);
	}
	if (!(__atomic_fetch_or(&c->s.state, OSF_CS_WROTE_GONE, __ATOMIC_ACQ_REL) &
	      OSF_CS_WROTE_GONE) &&
	    !(osf_side_state(&c->s) & OSF_CS_RESET)) {
		/* TCP accepts one write after the peer's FIN; the peer,
		 * closed, answers it with a reset, which in CLOSE_WAIT
		 * leaves EPIPE for the next call. The write takes what the
		 * send buffer has room for (the ring's room here), as the
		 * kernel returns the part it queued before the reset came:
		 * a writer of 1 GiB in one call sees a short count, then
		 * the error. */
		int64_t room = osf_side_tx_room(&c->s);
		osf_side_set_pending(&c->s, EPIPE);
		osf_side_set_state(&c->s, OSF_CS_RESET);
		return room > 0 && (uint64_t)room < total ? (ssize_t)room : (ssize_t)total;
	}
	raise_sigpipe(flags);
	return OSF_FAIL(EPIPE);
}

/* conn_send_over: a write that waits for room stops: the other side is gone
 * (or the connection broken), or another thread shut this side down for
 * writing meanwhile (conn_send_end says EPIPE; TCP returns what it took). */
int conn_send_over(struct osf_conn *c)
{
	return osf_side_state(&c->s) || (osf_side_my_flags(&c->s) & OSF_SIDE_FIN);
}

/* send_corked is a write while TCP_CORK is in, with MSG_MORE (TCP corks
 * that one write), or while bytes are held back (conn_cork.c): as TCP, it
 * sends the whole segments (TCP_MAXSEG) of what is held plus this write
 * and holds the rest back, written in the ring after the published head.
 * It returns the count, -1 with errno, or -2 when the write does not fit
 * beside what is held (or neither cork nor MSG_MORE holds it): then what
 * is held is published and the normal path sends the write. */
static __attribute__((noinline, cold)) ssize_t
send_corked(int fd, struct osf_conn *c, struct iovcur *cur,
			   size_t total, int nonblock, int more)
{
	uint32_t w, held, seg;
	uint64_t head, pub;
	int64_t room;

	if (osf_side_lock_tx(&c->s, fd, nonblock) != 0)
		return -2; /* the normal path says why */
	w = __atomic_load_n(&c->s.me->cork, __ATOMIC_RELAXED);
	held = w & OSF_CORK_HELD;
	room = osf_side_tx_room(&c->s);
	if (!((w & OSF_CORK_ON) || more) || room < (int64_t)held ||
	    total > (uint64_t)room - held) {
		int sent = osf_conn_cork_publish(c);
		osf_seg_unlock(&c->s.me->tx_lock);
		if (sent)
			conn_wake_reader(c, fd);
		return -2;
	}
	head = c->s.tx->head;
	if (ring_iov(cur, osf_side_tx_view(&c->s), head + held, total, 0) < 0) {
		osf_seg_unlock(&c->s.me->tx_lock);
		return OSF_FAIL(EFAULT);
	}
	seg = (uint32_t)osf_conn_maxseg(c);
	pub = (uint64_t)held + total;
	held = (uint32_t)(pub % seg);
	pub -= held;
	__atomic_store_n(&c->s.me->cork, (w & OSF_CORK_ON) | held, __ATOMIC_RELAXED);
	if (pub)
		__atomic_store_n(&c->s.tx->head, head + pub, __ATOMIC_RELEASE);
	osf_seg_unlock(&c->s.me->tx_lock);
	if (pub)
		conn_wake_reader(c, fd);
	if (held)
		osf_conn_cork_arm(c, fd);
	return (ssize_t)total;
}

/* send_urgent makes the last byte written urgent
 * data (MSG_OOB: TCP's urgent pointer; a later one replaces it, and the
 * earlier byte is ordinary data then) and tells the peer with an
 * out-of-band byte on the wake socket, which raises SIGURG for its owner
 * and POLLPRI on its fd in the kernel (docs/ARCHITECTURE.md, "Urgent
 * data"). */
static __attribute__((noinline, cold)) void send_urgent(int fd, struct osf_conn *c)
{
	uint64_t end = __atomic_load_n(&c->s.tx->head, __ATOMIC_RELAXED);
	uint64_t old = __atomic_load_n(&c->s.me->urg, __ATOMIC_RELAXED),
		 at = __atomic_load_n(&c->s.tx->tail, __ATOMIC_ACQUIRE),
		 hole = __atomic_load_n(&c->s.me->urg_hole, __ATOMIC_RELAXED);
	int saved = errno;

	/* A reader that sits at the urgent byte this one replaces (past the
	 * ones it skips already) skips it, unless it keeps urgent bytes
	 * inline (tcp_check_urg moves its read position at once). */
	if (hole > at)
		at = hole;
	if (old && !(osf_side_peer_flags(&c->s) & OSF_SIDE_OOBINLINE) && at == old - 1)
		__atomic_store_n(&c->s.me->urg_hole, old, __ATOMIC_RELEASE);
	__atomic_store_n(&c->s.me->urg, end, __ATOMIC_RELEASE);
	(void)REAL(send)(fd, "!", 1, MSG_OOB | MSG_DONTWAIT | MSG_NOSIGNAL);
	errno = saved;
}

/* osf_conn_send is one loop on purpose (about 90 lines), the producer's
 * mirror of osf_conn_recv: lock, room, copy, publish, wake, and the end's
 * rules share the cursor and the count already sent. */
ssize_t osf_conn_send(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags)
{
	struct osf_conn *c;
	struct iovcur cur = {iov, iovcnt, 0, 0};
	ssize_t total, sent = 0, end;
	int nonblock, r;
	unsigned intr = osf_intr_count();

	c = conn_get(fd, e);
	if (!c)
		return OSF_FAIL(EBADF);
	total = iov_total(iov, iovcnt);
	if (total < 0) {
		conn_put(c);
		return OSF_FAIL(EINVAL);
	}
	if (unlikely(c->gw == OSF_CONN_GW_WAIT) &&
	    osf_conn_gw_settle(fd, e, c->nonblock || (flags & MSG_DONTWAIT)
					      ? 0
					      : OSF_CONN_GW_FOREVER) < 0) {
		conn_put(c);
		return OSF_FAIL(EAGAIN); /* as TCP's SYN_SENT */
	}
	osf_side_peer_closing(&c->s, fd);
	osf_side_peer_unborn_check(&c->s, fd);
	end = conn_send_end(c, (size_t)total, flags);
	if (end != 1 || total == 0) {
		conn_put(c);
		return end != 1 ? end : 0;
	}
	nonblock = c->nonblock || (flags & MSG_DONTWAIT);
	__atomic_add_fetch(&c->s.me->send_calls, 1, __ATOMIC_RELAXED);
	if (unlikely(__atomic_load_n(&c->s.me->cork, __ATOMIC_RELAXED) ||
		     (flags & (MSG_MORE | MSG_OOB)))) {
		if (flags & MSG_OOB) { /* urgent data is pushed, as TCP's */
			osf_conn_cork_flush(c, fd);
		} else {
			end = send_corked(fd, c, &cur, (size_t)total, nonblock,
					  flags & MSG_MORE);
			if (end != -2) {
				conn_put(c);
				return end;
			}
		}
	}
	while (sent < total) {
		int64_t room;
		r = osf_side_lock_tx(&c->s, fd, nonblock);
		if (r == OSF_LOCK_AGAIN) {
			if (sent > 0)
				break;
			conn_put(c);
			return OSF_FAIL(EAGAIN);
		}
		if (r < 0) {
			osf_side_broken(&c->s);
			break;
		}
		room = osf_side_tx_room(&c->s);
		if (room < 0) {
			osf_seg_unlock(&c->s.me->tx_lock);
			osf_side_broken(&c->s);
			break;
		}
		if (room > 0) {
			uint64_t head = c->s.tx->head;
			size_t n = (size_t)room < (size_t)(total - sent)
					   ? (size_t)room
					   : (size_t)(total - sent);
			if (ring_iov(&cur, osf_side_tx_view(&c->s), head, n, 0) < 0) {
				osf_seg_unlock(&c->s.me->tx_lock);
				if (sent > 0) /* earlier rounds went out */
					break;
				conn_put(c);
				return OSF_FAIL(EFAULT);
			}
			__atomic_store_n(&c->s.tx->head, head + n,
					 __ATOMIC_RELEASE);
			osf_seg_unlock(&c->s.me->tx_lock);
			conn_wake_reader(c, fd);
			sent += (ssize_t)n;
			continue;
		}
		osf_seg_unlock(&c->s.me->tx_lock);
		if (conn_send_over(c))
			break;
		if (nonblock) {
			osf_side_drain(&c->s, c->s.wfd, &c->s.me->tx_waiters);
			if (osf_side_state(&c->s))
				break;
			if (osf_side_arm_tx(&c->s))
				continue;
			if (sent == 0) {
				conn_put(c);
				return OSF_FAIL(EAGAIN);
			}
			break;
		}
		r = conn_wait_room(c, fd);
		if (r < 0) {
			if (sent == 0) {
				conn_put(c);
				return OSF_FAIL(-r);
			}
			break;
		}
		/* A handler ran while it waited (the sleep restarts after
		 * one with SA_RESTART): TCP returns what went out. */
		if (sent > 0 && osf_intr_count() != intr)
			break;
	}
	if (sent == 0 && conn_send_over(c)) {
		end = conn_send_end(c, (size_t)total, flags);
		conn_put(c);
		return end == 1 ? OSF_FAIL(EPIPE) : end;
	}
	if (unlikely(flags & (MSG_OOB | MSG_ZEROCOPY)) && sent > 0) {
		if (flags & MSG_OOB)
			send_urgent(fd, c);
		if ((flags & MSG_ZEROCOPY) && c->zerocopy)
			osf_conn_zc_sent(c);
	}
	conn_put(c);
	return sent;
}

/* ---- shutdown --------------------------------------------------------------- */

int osf_conn_shutdown(int fd, struct osf_fdt_entry *e, int how)
{
	struct osf_conn *c;
	int closed;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return OSF_FAIL(EINVAL);
	c = conn_get(fd, e);
	if (!c)
		return OSF_FAIL(EBADF);
	conn_hello(c); /* its FIN ends a deferral too; the socket is shut below */
	closed = osf_side_tcp_closed(&c->s); /* TCP still records the shutdown */
	if (how != SHUT_WR)
		__atomic_or_fetch(&c->s.me->flags, OSF_SIDE_RDSHUT,
				  __ATOMIC_ACQ_REL);
	if (how != SHUT_RD) {
		/* After every byte already written: take the producers' lock
		 * (as long as a blocking send would wait for it). */
		int locked = osf_side_lock_tx(&c->s, fd, 0) == 0;
		if (locked) /* TCP_CORK: what is held goes before the FIN */
			(void)osf_conn_cork_publish(c);
		__atomic_or_fetch(&c->s.me->flags, OSF_SIDE_FIN,
				  __ATOMIC_ACQ_REL);
		if (locked)
			osf_seg_unlock(&c->s.me->tx_lock);
		conn_wake_reader(c, fd);
		if (c->kfd) /* the kernel's FIN too: TIME_WAIT goes to who sent it first */
			(void)REAL(shutdown)(fd, SHUT_WR);
	}
	/* This process's epoll items first: one edge each, as the kernel's
	 * one wake-up. Then readers (writers) asleep in any thread or
	 * process wake up, as the kernel wakes a TCP socket's: recv returns
	 * 0, send EPIPE. The other way round a wait woken by the shut
	 * wake socket could report the item before osf_mux_changed put it
	 * back on the ready list, and the next wait reported it again; this
	 * way the socket's wake-up finds the stamp already reported. */
	osf_mux_changed(fd, __atomic_load_n(&c->fds, __ATOMIC_RELAXED) > 1, OSF_MUX_ALL);
	osf_side_shut_wake(&c->s, fd, how);
	conn_put(c);
	return closed ? OSF_FAIL(ENOTCONN) : 0;
}
