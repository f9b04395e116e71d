//go:build osf_make

/* conn.c: the data path of offloaded connections.
 *
 * An offloaded connection is the application's fd, which is a connected
 * AF_UNIX stream socket (the "wake socket"), plus a mapped segment with
 * two byte rings (sdp/segment.h). Bytes only ever move through the rings;
 * the wake socket carries one-byte wake tokens, and its end-of-file tells
 * that the last holder of the other side is gone (the kernel counts the
 * holders across fork, exec and crashes).
 *
 * Sleeping and waking (DESIGN.md D2): a side about to sleep counts itself
 * as a waiter, raises its rx_want (or tx_want) flag in the segment,
 * fences, and checks the ring once more; the other side publishes, fences,
 * and if it sees the flag clears it and sends as many tokens as there are
 * waiters. Readers' tokens travel on the application's fd, writers' on a
 * second, hidden socket pair, so neither kind can take the other's. A
 * blocked reader sleeps in a real blocking recv() of one token on the
 * application's fd, so the kernel applies SO_RCVTIMEO, SA_RESTART and
 * EINTR exactly as it would for TCP; a blocked writer does the same on the
 * writers' socket, which carries the application's SO_SNDTIMEO as its
 * SO_RCVTIMEO. Before sleeping, a blocking call spins for OSF_SPIN_US.
 *
 * The end of a connection follows Linux TCP: data already received is
 * readable first; then a peer that closed with data it never read (or with
 * SO_LINGER 0) gives ECONNRESET once, else end-of-file; the first write
 * after the peer closed is accepted, later ones get EPIPE and SIGPIPE.
 *
 * Everything in the segment may be written by the peer: positions are
 * checked and masked, so a hostile peer can at most break its own
 * connection (ECONNRESET), never make this process read or write outside
 * the segment.
 */
#include "conn.h"

#include "../sdp/segment.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define CS_GONE 0x1u       /* the last holder of the other side is gone */
#define CS_BROKEN 0x2u     /* the segment is corrupt: reset */
#define CS_WROTE_GONE 0x4u /* the one write TCP accepts after the peer
			      closed has been accepted */
#define CS_RESET 0x8u      /* TCP would have received a reset: the socket
			      is in state CLOSE (ENOTCONN, POLLHUP) */

#define LOCK_STUCK_MS 5000 /* a segment lock held this long is corrupt */
#define TCP_OPTS 40        /* IPPROTO_TCP option numbers answered */
#define IP_OPTS 8          /* IP/IPv6 options remembered */

struct ipopt {
	int level, name, value;
};

/* struct osf_conn is process-private: one per connection per process,
 * shared by the fds (dups) that refer to it. Instances are type-stable
 * (never returned to the system), so a lookup may take a reference on a
 * recycled one and then notice that the table entry moved on. */
struct osf_conn {
	uint32_t refs; /* table entries and calls in flight; 0 = free */
	uint32_t fds;  /* table entries in this process */
	struct osf_conn *next_free;
	uint8_t *base;
	size_t map_bytes;
	uint32_t size, mask, lowat;
	int side;
	int seg_fd; /* hidden: the segment's memfd */
	int wfd;    /* hidden: the writers' wake socket */
	struct osf_seg_side *me, *peer;
	struct osf_seg_ring *tx, *rx;
	uint8_t *txd, *rxd;
	uint32_t state; /* CS_* */
	int pending_err;
	uint32_t seen_close_seq;
	int nonblock;
	int bufset;      /* SO_RCVBUF/SO_SNDBUF set by the application */
	int tcpopt[TCP_OPTS];
	int tcpset[TCP_OPTS];
	struct ipopt ipopt[IP_OPTS];
	int v6;
	uint32_t fork_round; /* osf_conn_fork_holders' de-duplication */
};

/* Per-thread tid, for lock ownership (reset in a fork child). */
static __thread uint32_t tls_tid __attribute__((tls_model("initial-exec")));

static inline uint32_t my_tid(void)
{
	uint32_t t = tls_tid;

	if (unlikely(t == 0))
		t = tls_tid = (uint32_t)syscall(SYS_gettid);
	return t;
}

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- the pool of connection structs ---------------------------------- */

#define POOL_CHUNK 256

static struct osf_conn *free_list;
static int pool_lock;

static void pool_acquire(void)
{
	while (__atomic_exchange_n(&pool_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void pool_release(void) { __atomic_store_n(&pool_lock, 0, __ATOMIC_RELEASE); }

static struct osf_conn *conn_alloc(void)
{
	struct osf_conn *c;

	pool_acquire();
	if (!free_list) {
		struct osf_conn *chunk =
			mmap(NULL, POOL_CHUNK * sizeof(*chunk),
			     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			     -1, 0);
		int i;
		if (chunk == MAP_FAILED) {
			pool_release();
			return NULL;
		}
		for (i = 0; i < POOL_CHUNK; i++) {
			chunk[i].next_free = free_list;
			free_list = &chunk[i];
		}
	}
	c = free_list;
	free_list = c->next_free;
	pool_release();
	return c;
}

static void conn_free(struct osf_conn *c)
{
	pool_acquire();
	c->next_free = free_list;
	free_list = c;
	pool_release();
}

/* conn_init fills a fresh struct (refs still 0) for a mapped segment. */
static void conn_init(struct osf_conn *c, uint8_t *base, uint32_t ring_bytes,
		      int side, int seg_fd, int wfd, int v6)
{
	struct osf_seg_hdr *h = (struct osf_seg_hdr *)base;
	int i;

	c->fds = 1;
	c->base = base;
	c->map_bytes = (size_t)osf_seg_bytes(ring_bytes);
	c->size = ring_bytes;
	c->mask = ring_bytes - 1;
	c->lowat = ring_bytes / 2;
	c->side = side;
	c->seg_fd = seg_fd;
	c->wfd = wfd;
	c->me = &h->side[side];
	c->peer = &h->side[1 - side];
	c->tx = &h->ring[side];
	c->rx = &h->ring[1 - side];
	c->txd = base + OSF_SEG_HDR_BYTES + (size_t)side * ring_bytes;
	c->rxd = base + OSF_SEG_HDR_BYTES + (size_t)(1 - side) * ring_bytes;
	c->state = 0;
	c->pending_err = 0;
	c->seen_close_seq = __atomic_load_n(&c->peer->close_seq, __ATOMIC_RELAXED);
	c->nonblock = 0;
	c->bufset = 0;
	c->v6 = v6;
	memset(c->tcpopt, 0, sizeof(c->tcpopt));
	memset(c->tcpset, 0, sizeof(c->tcpset));
	for (i = 0; i < IP_OPTS; i++)
		c->ipopt[i].level = -1;
	__atomic_store_n(&c->refs, 1, __ATOMIC_RELEASE);
}

static void conn_destroy(struct osf_conn *c)
{
	munmap(c->base, c->map_bytes);
	osf_fdt_close_hidden(c->seg_fd);
	osf_fdt_close_hidden(c->wfd);
	c->base = NULL;
	conn_free(c);
}

static inline void conn_put(struct osf_conn *c)
{
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
		conn_destroy(c);
}

static int rebuild(int fd, struct osf_fdt_entry *e);

/* conn_get returns fd's connection with a reference held, or NULL (EBADF)
 * when fd stopped being one meanwhile. */
static struct osf_conn *conn_get(int fd, struct osf_fdt_entry *e)
{
	int tries;

	for (tries = 0; tries < 8; tries++) {
		struct osf_conn *c;
		uint64_t priv;
		uint32_t r;

		if (unlikely(__atomic_load_n(&e->image, __ATOMIC_ACQUIRE) !=
			     osf.image)) {
			if (rebuild(fd, e) < 0)
				return NULL;
			continue;
		}
		priv = __atomic_load_n(&e->priv, __ATOMIC_ACQUIRE);
		c = (struct osf_conn *)(uintptr_t)priv;
		if (!c)
			return NULL;
		r = __atomic_load_n(&c->refs, __ATOMIC_RELAXED);
		do {
			if (r == 0)
				goto again;
		} while (!__atomic_compare_exchange_n(&c->refs, &r, r + 1, 1,
						      __ATOMIC_ACQUIRE,
						      __ATOMIC_RELAXED));
		if (__atomic_load_n(&e->priv, __ATOMIC_ACQUIRE) == priv &&
		    e->kind >= OSF_FD_SHM)
			return c;
		conn_put(c);
	again:;
	}
	return NULL;
}

/* ---- segment locks ---------------------------------------------------- */

static long futex_shared(uint32_t *w, int op, uint32_t val, int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	return syscall(SYS_futex, w, op, val, ms >= 0 ? &ts : NULL, NULL, 0);
}

/* holder_gone reports whether thread tid no longer runs: it does not exist,
 * or (asked only of a holder seen across a whole wait, as it costs a read
 * of /proc) it is dead and not yet reaped: a SIGKILLed child stays a
 * zombie while its parent, the other writer, waits for this very lock. */
static int holder_gone(pid_t tid, int held_long)
{
	char path[48], buf[256], *p;
	ssize_t n;
	int fd;

	if (kill(tid, 0) < 0 && errno == ESRCH)
		return 1;
	if (!held_long)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	n = REAL(read)(fd, buf, sizeof(buf) - 1);
	REAL(close)(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')'); /* the name may hold anything but ends here */
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* lock_slow waits for a segment lock. A holder that no longer exists is
 * replaced; one that holds it impossibly long means the peer wrote the
 * lock word: -1, the connection is broken. */
static int lock_slow(uint32_t *w, uint32_t me)
{
	uint32_t stuck_owner = 0;
	long stuck_since = 0;
	int spins = 0;

	for (;;) {
		uint32_t cur = __atomic_load_n(w, __ATOMIC_RELAXED), owner;
		if (cur == 0) {
			if (__atomic_compare_exchange_n(w, &cur, me, 0,
							__ATOMIC_ACQUIRE,
							__ATOMIC_RELAXED))
				return 0;
			continue;
		}
		owner = cur & ~OSF_LOCK_WAITERS;
		if (owner == me)
			return -1; /* re-entered from a signal handler */
		if (spins++ < 256) {
			cpu_relax();
			continue;
		}
		if (holder_gone((pid_t)owner, owner == stuck_owner)) {
			if (__atomic_compare_exchange_n(w, &cur, me, 0,
							__ATOMIC_ACQUIRE,
							__ATOMIC_RELAXED))
				return 0;
			continue;
		}
		if (owner != stuck_owner) {
			stuck_owner = owner;
			stuck_since = now_ms();
		} else if (now_ms() - stuck_since > LOCK_STUCK_MS) {
			return -1;
		}
		if (!(cur & OSF_LOCK_WAITERS) &&
		    !__atomic_compare_exchange_n(w, &cur, cur | OSF_LOCK_WAITERS,
						 0, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
			continue;
		futex_shared(w, FUTEX_WAIT, cur | OSF_LOCK_WAITERS, 10);
	}
}

static inline int seg_lock(uint32_t *w)
{
	uint32_t me = my_tid(), cur = 0;

	if (likely(__atomic_compare_exchange_n(w, &cur, me, 0, __ATOMIC_ACQUIRE,
					       __ATOMIC_RELAXED)))
		return 0;
	return lock_slow(w, me);
}

static inline void seg_unlock(uint32_t *w)
{
	uint32_t old = __atomic_exchange_n(w, 0, __ATOMIC_RELEASE);

	if (unlikely(old & OSF_LOCK_WAITERS))
		futex_shared(w, FUTEX_WAKE, INT_MAX, -1);
}

/* ---- state of the other side ------------------------------------------ */

static inline uint32_t cstate(struct osf_conn *c)
{
	return __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
}

static void set_state(struct osf_conn *c, uint32_t bits)
{
	__atomic_or_fetch(&c->state, bits, __ATOMIC_ACQ_REL);
}

static void set_pending(struct osf_conn *c, int err)
{
	int zero = 0;

	__atomic_compare_exchange_n(&c->pending_err, &zero, err, 0,
				    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* take_pending returns and clears the pending error (SO_ERROR). */
static int take_pending(struct osf_conn *c)
{
	return __atomic_exchange_n(&c->pending_err, 0, __ATOMIC_ACQ_REL);
}

/* take_recv_error is take_pending for a read at the end of the stream.
 * EPIPE (the reset that answers a write to a peer that had closed) is
 * left for the next write: TCP's read sees the peer's FIN first and
 * returns 0. */
static int take_recv_error(struct osf_conn *c)
{
	int err = __atomic_load_n(&c->pending_err, __ATOMIC_ACQUIRE);

	while (err != 0 && err != EPIPE &&
	       !__atomic_compare_exchange_n(&c->pending_err, &err, 0, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
	return err == EPIPE ? 0 : err;
}

/* tcp_closed: TCP would be in state CLOSE (or TIME_WAIT, which the
 * application sees as CLOSE): reset, or both directions shut down. */
static int tcp_closed(struct osf_conn *c)
{
	uint32_t st = cstate(c);

	if (st & CS_RESET)
		return 1;
	return (__atomic_load_n(&c->me->flags, __ATOMIC_ACQUIRE) & OSF_SIDE_FIN) &&
	       ((__atomic_load_n(&c->peer->flags, __ATOMIC_ACQUIRE) & OSF_SIDE_FIN) ||
		(st & CS_GONE));
}

static void broken(struct osf_conn *c)
{
	if (!(cstate(c) & CS_BROKEN)) {
		set_pending(c, ECONNRESET);
		set_state(c, CS_BROKEN | CS_GONE | CS_RESET);
	}
}

/* mark_gone records that the last holder of the other side closed. As TCP
 * would have sent a reset: when it closed with bytes it never read, or
 * with SO_LINGER 0. */
static void mark_gone(struct osf_conn *c)
{
	uint64_t head, tail;

	if (cstate(c) & CS_GONE)
		return;
	head = __atomic_load_n(&c->tx->head, __ATOMIC_ACQUIRE);
	tail = __atomic_load_n(&c->tx->tail, __ATOMIC_ACQUIRE);
	if (head != tail ||
	    (__atomic_load_n(&c->peer->flags, __ATOMIC_ACQUIRE) &
	     OSF_SIDE_RESET)) {
		set_pending(c, ECONNRESET);
		set_state(c, CS_GONE | CS_RESET);
		return;
	}
	set_state(c, CS_GONE);
}

/* check_end asks the kernel whether the other side is gone (one poll). */
static void check_end(int fd, struct osf_conn *c)
{
	struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
	int saved = errno;

	if (REAL(poll)(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP)))
		mark_gone(c);
	errno = saved;
}

/* peer_closing checks, without a system call, whether a holder of the
 * other side dropped its descriptor since we last looked; if so it asks
 * the kernel whether that was the last one. */
static inline void peer_closing(int fd, struct osf_conn *c)
{
	uint32_t seq = __atomic_load_n(&c->peer->close_seq, __ATOMIC_ACQUIRE);

	if (likely(seq == c->seen_close_seq))
		return;
	c->seen_close_seq = seq;
	check_end(fd, c);
}

/* ---- wake tokens ------------------------------------------------------ */

/* Each side has two wake sockets, one per kind of waiter, so that a reader
 * never takes a token meant for a writer (or the other way round): the
 * application's fd carries the tokens that wake readers (data or the end
 * arrived), the hidden writers' socket c->wfd those that wake writers
 * (room appeared). A waiter counts itself in its side's rx_waiters or
 * tx_waiters, sets the want flag, looks at the ring again, and only then
 * sleeps; the other side, after publishing, clears the flag and sends as
 * many tokens as there are waiters of that kind; each waiter takes one. */

/* send_tokens sends the waiters counted in *waiters their tokens on sock. */
static void send_tokens(int sock, struct osf_conn *c, uint32_t *waiters)
{
	static const char tok[32];
	uint32_t n = __atomic_load_n(waiters, __ATOMIC_RELAXED);
	int saved = errno;
	ssize_t r;

	if (n == 0) /* a waiter osf does not count: an application's own */
		n = 1;
	if (n > sizeof(tok))
		n = sizeof(tok);
	r = REAL(send)(sock, tok, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (r < 0 && (errno == EPIPE || errno == ECONNRESET))
		mark_gone(c);
	__atomic_add_fetch(&c->me->wakes_sent, 1, __ATOMIC_RELAXED);
	errno = saved;
}

/* wake_reader wakes the other side's readers if they asked for it; the
 * caller has published what it changed (data, FIN). */
static inline void wake_reader(int fd, struct osf_conn *c)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (likely(!__atomic_load_n(&c->peer->rx_want, __ATOMIC_RELAXED)))
		return;
	if (__atomic_exchange_n(&c->peer->rx_want, 0, __ATOMIC_ACQ_REL))
		send_tokens(fd, c, &c->peer->rx_waiters);
}

/* wake_writer wakes the other side's writers waiting for room, once there
 * is at least the low-water mark of it (as TCP wakes writers only for a
 * useful amount of space). */
static inline void wake_writer(struct osf_conn *c, uint64_t head,
			       uint64_t tail)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (likely(!__atomic_load_n(&c->peer->tx_want, __ATOMIC_RELAXED)))
		return;
	if (c->size - (head - tail) < c->lowat)
		return;
	if (__atomic_exchange_n(&c->peer->tx_want, 0, __ATOMIC_ACQ_REL))
		send_tokens(c->wfd, c, &c->peer->tx_waiters);
}

/* drain reads from sock the tokens no counted waiter of this side will
 * take (keep: the waiters counted in *waiters), and notices the other
 * side's end. */
static void drain(int sock, struct osf_conn *c, uint32_t *waiters)
{
	char buf[256];
	int avail = 0, saved = errno;
	struct pollfd p = {sock, POLLIN | POLLRDHUP, 0};

	if (REAL(poll)(&p, 1, 0) <= 0)
		goto out;
	if (p.revents & (POLLHUP | POLLRDHUP))
		mark_gone(c);
	if (!(p.revents & POLLIN) || REAL(ioctl)(sock, FIONREAD, &avail) < 0)
		goto out;
	avail -= (int)__atomic_load_n(waiters, __ATOMIC_RELAXED);
	while (avail > 0) {
		ssize_t r = REAL(recv)(sock, buf,
				       avail < (int)sizeof(buf) ? (size_t)avail
								: sizeof(buf),
				       MSG_DONTWAIT);
		if (r <= 0)
			break;
		avail -= (int)r;
	}
out:
	errno = saved;
}

/* uncount removes a waiter from a count, never below 0 (a fork child may
 * end a wait its parent counted, and the peer may write anything). */
static void uncount(uint32_t *waiters)
{
	uint32_t v = __atomic_load_n(waiters, __ATOMIC_RELAXED);

	while (v && !__atomic_compare_exchange_n(waiters, &v, v - 1, 0,
						 __ATOMIC_ACQ_REL,
						 __ATOMIC_RELAXED))
		;
}

/* take_token takes the one token a waiter that was woken on sock is
 * owed, if it is there (a poller: poll does not consume). */
static void take_token(int sock, struct osf_conn *c)
{
	char b;
	int saved = errno;

	if (REAL(recv)(sock, &b, 1, MSG_DONTWAIT) == 0)
		mark_gone(c);
	errno = saved;
}

/* ---- ring state --------------------------------------------------------- */

/* rx_used returns the bytes waiting to be read, -1 if corrupt. */
static inline int64_t rx_used(struct osf_conn *c)
{
	uint64_t head = __atomic_load_n(&c->rx->head, __ATOMIC_ACQUIRE);
	uint64_t tail = __atomic_load_n(&c->rx->tail, __ATOMIC_RELAXED);

	return osf_ring_used(head, tail, c->size);
}

/* tx_free returns the room in the send ring, -1 if corrupt. */
static inline int64_t tx_free(struct osf_conn *c)
{
	uint64_t head = __atomic_load_n(&c->tx->head, __ATOMIC_RELAXED);
	uint64_t tail = __atomic_load_n(&c->tx->tail, __ATOMIC_ACQUIRE);
	int64_t used = osf_ring_used(head, tail, c->size);

	return used < 0 ? -1 : (int64_t)c->size - used;
}

static inline uint32_t peer_flags(struct osf_conn *c)
{
	return __atomic_load_n(&c->peer->flags, __ATOMIC_ACQUIRE);
}

static inline uint32_t my_flags(struct osf_conn *c)
{
	return __atomic_load_n(&c->me->flags, __ATOMIC_ACQUIRE);
}

/* rx_ready: a read would not block (data, end or error). */
static int rx_ready(struct osf_conn *c)
{
	/* OSF_SIDE_RESET alone is not readiness: it says how the side ends
	 * once its last holder is gone (mark_gone), and a process that closed
	 * with linger 0 may not have been the last (a fork child serves on). */
	return rx_used(c) != 0 || (peer_flags(c) & OSF_SIDE_FIN) ||
	       (cstate(c) & CS_GONE) || c->pending_err;
}

/* arm_rx and arm_tx ask the other side for a wake token at the next data
 * (room), as a caller that got EAGAIN will wait for readiness (edge-
 * triggered epoll included); they return 1 when the state changed while
 * arming, so that the caller must look again instead of failing. */
static int arm_rx(struct osf_conn *c)
{
	__atomic_store_n(&c->me->rx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return rx_ready(c);
}

static int arm_tx(struct osf_conn *c)
{
	__atomic_store_n(&c->me->tx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return tx_free(c) != 0 || cstate(c) != 0;
}

/* ---- sleeping ------------------------------------------------------------ */

/* spin waits in user space for up to OSF_SPIN_US for cond. */
#define SPIN_UNTIL(cond)                                                       \
	({                                                                     \
		int ok_ = 0;                                                   \
		if (osf.spin_us) {                                             \
			long end_ = now_us() + (long)osf.spin_us;              \
			for (int i_ = 0;; i_++) {                              \
				if (cond) {                                    \
					ok_ = 1;                               \
					break;                                 \
				}                                              \
				cpu_relax();                                   \
				if ((i_ & 63) == 63 && now_us() > end_)        \
					break;                                 \
			}                                                      \
		}                                                              \
		ok_;                                                           \
	})

/* sleep_token blocks in the kernel for one wake token on sock. It returns
 * 0 when woken (or the other side is gone), else -errno from the recv:
 * -EINTR for a signal (the kernel restarted it if the handler had
 * SA_RESTART and no timeout is set on sock), -EAGAIN when the timeout
 * expired. */
static int sleep_token(int sock, struct osf_conn *c)
{
	char b;
	ssize_t r;
	int err;

	__atomic_add_fetch(&c->me->sleeps, 1, __ATOMIC_RELAXED);
	r = REAL(recv)(sock, &b, 1, 0);
	err = errno;
	if (r == 0 || (r < 0 && err == ECONNRESET)) {
		mark_gone(c);
		return 0;
	}
	return r < 0 ? -err : 0;
}

/* wait_data waits until a read would not block. */
static int wait_data(int fd, struct osf_conn *c)
{
	int r;

	if (SPIN_UNTIL(rx_ready(c)))
		return 0;
	__atomic_add_fetch(&c->me->rx_waiters, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&c->me->rx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	r = rx_ready(c) ? 0 : sleep_token(fd, c);
	uncount(&c->me->rx_waiters);
	return r;
}

/* tx_ready: a write would not block (room, or the end). */
static inline int tx_ready(struct osf_conn *c)
{
	return tx_free(c) != 0 || cstate(c);
}

/* wait_room waits until there is room to write (or the end), sleeping on
 * the writers' socket: -EAGAIN when SO_SNDTIMEO (set on it as
 * SO_RCVTIMEO) expired, -EINTR for a signal as a blocking send gets it. */
static int wait_room(struct osf_conn *c)
{
	int r;

	if (SPIN_UNTIL(tx_ready(c)))
		return 0;
	__atomic_add_fetch(&c->me->tx_waiters, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&c->me->tx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	r = tx_ready(c) ? 0 : sleep_token(c->wfd, c);
	uncount(&c->me->tx_waiters);
	return r;
}

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

/* ring_to_iov copies n bytes at ring position pos into the iovecs. */
static void ring_to_iov(struct iovcur *cur, const uint8_t *data, uint32_t mask,
			uint64_t pos, size_t n)
{
	while (n > 0) {
		size_t room, k;
		cur_skip_empty(cur);
		room = cur->iov[cur->i].iov_len - cur->off;
		k = n < room ? n : room;
		osf_ring_copy_out(data, mask, pos,
				  (uint8_t *)cur->iov[cur->i].iov_base + cur->off,
				  k);
		cur->off += k;
		pos += k;
		n -= k;
	}
}

static void iov_to_ring(struct iovcur *cur, uint8_t *data, uint32_t mask,
			uint64_t pos, size_t n)
{
	while (n > 0) {
		size_t room, k;
		cur_skip_empty(cur);
		room = cur->iov[cur->i].iov_len - cur->off;
		k = n < room ? n : room;
		osf_ring_copy_in(data, mask, pos,
				 (const uint8_t *)cur->iov[cur->i].iov_base +
					 cur->off,
				 k);
		cur->off += k;
		pos += k;
		n -= k;
	}
}

static void raise_sigpipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		syscall(SYS_tgkill, getpid(), (pid_t)my_tid(), SIGPIPE);
}

/* ---- receiving ------------------------------------------------------------ */

/* recv_end decides what an empty ring means: 0 (end of file), or -1 with
 * errno, or 1 when the caller should wait. */
static int recv_end(int fd, struct osf_conn *c, int nonblock)
{
	uint32_t st = cstate(c);
	int err;

	if (st & CS_BROKEN) {
		err = take_recv_error(c);
		return err ? OSF_FAIL(err) : 0;
	}
	if (peer_flags(c) & OSF_SIDE_FIN)
		return rx_used(c) != 0 ? 2 : 0; /* data raced in: read it */
	if (my_flags(c) & OSF_SIDE_RDSHUT)
		return 0;
	if (!(st & CS_GONE) && nonblock) {
		drain(fd, c, &c->me->rx_waiters);
		st = cstate(c);
		if (!(st & CS_GONE) && arm_rx(c))
			return 2;
	}
	if (st & CS_GONE) {
		if (rx_used(c) != 0)
			return 2;
		err = take_recv_error(c);
		return err ? OSF_FAIL(err) : 0;
	}
	return nonblock ? OSF_FAIL(EAGAIN) : 1;
}

ssize_t osf_conn_recv(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags)
{
	struct osf_conn *c = conn_get(fd, e);
	struct iovcur cur = {iov, iovcnt, 0, 0};
	ssize_t total, got = 0;
	int nonblock, r;

	if (!c)
		return OSF_FAIL(EBADF);
	total = iov_total(iov, iovcnt);
	if (total < 0) {
		conn_put(c);
		return OSF_FAIL(EINVAL);
	}
	if (flags & (MSG_OOB | MSG_ERRQUEUE)) {
		conn_put(c);
		return OSF_FAIL((flags & MSG_OOB) ? EINVAL : EAGAIN);
	}
	nonblock = c->nonblock || (flags & MSG_DONTWAIT);
	if (total == 0) {
		/* TCP's recvmsg of 0 bytes waits as for 1 byte and returns 0
		 * once there is data (read(2) of 0 bytes does not get here). */
		for (;;) {
			r = rx_used(c) != 0 ? 2 : recv_end(fd, c, nonblock);
			if (r != 1) /* 2: data; 0: end; -1: errno set */
				break;
			if ((r = wait_data(fd, c)) < 0) {
				r = OSF_FAIL(-r);
				break;
			}
		}
		conn_put(c);
		return r == 2 ? 0 : r;
	}
	__atomic_add_fetch(&c->me->recv_calls, 1, __ATOMIC_RELAXED);
	for (;;) {
		int64_t used;
		if (seg_lock(&c->me->rx_lock) < 0) {
			broken(c);
			used = 0;
			goto empty;
		}
		used = rx_used(c);
		if (used < 0) {
			seg_unlock(&c->me->rx_lock);
			broken(c);
			goto empty;
		}
		if (used > 0) {
			uint64_t tail = c->rx->tail, head = tail + (uint64_t)used;
			size_t n = (size_t)used < (size_t)(total - got)
					   ? (size_t)used
					   : (size_t)(total - got);
			if (!(flags & MSG_TRUNC))
				ring_to_iov(&cur, c->rxd, c->mask, tail, n);
			if (!(flags & MSG_PEEK)) {
				__atomic_store_n(&c->rx->tail, tail + n,
						 __ATOMIC_RELEASE);
				seg_unlock(&c->me->rx_lock);
				wake_writer(c, head, tail + n);
			} else {
				seg_unlock(&c->me->rx_lock);
			}
			got += (ssize_t)n;
			if (got == total || !(flags & MSG_WAITALL) ||
			    (flags & MSG_PEEK))
				break;
			continue;
		}
		seg_unlock(&c->me->rx_lock);
	empty:
		if (got > 0 && !(flags & MSG_WAITALL))
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
		r = wait_data(fd, c);
		if (r < 0) {
			if (got > 0)
				break;
			conn_put(c);
			return OSF_FAIL(-r);
		}
	}
	conn_put(c);
	return got;
}

/* ---- sending --------------------------------------------------------------- */

/* send_end handles a write on a connection whose other side is gone (or
 * broken, or shut down here): 1 to go on writing, else the result. */
static ssize_t send_end(struct osf_conn *c, size_t total, int flags)
{
	int err;

	if (my_flags(c) & OSF_SIDE_FIN) {
		raise_sigpipe(flags);
		return OSF_FAIL(EPIPE);
	}
	if (!(cstate(c) & CS_GONE))
		return 1;
	err = take_pending(c);
	if (err) {
		/* The error the reset left; EPIPE (a reset in CLOSE_WAIT)
		 * raises SIGPIPE as any EPIPE from a write does. */
		if (err == EPIPE)
			raise_sigpipe(flags);
		return OSF_FAIL(err);
	}
	if (!(__atomic_fetch_or(&c->state, CS_WROTE_GONE, __ATOMIC_ACQ_REL) &
	      CS_WROTE_GONE) &&
	    !(cstate(c) & CS_RESET)) {
		/* TCP accepts one write after the peer's FIN; the peer,
		 * closed, answers it with a reset, which in CLOSE_WAIT
		 * leaves EPIPE for the next call. */
		set_pending(c, EPIPE);
		set_state(c, CS_RESET);
		return (ssize_t)total;
	}
	raise_sigpipe(flags);
	return OSF_FAIL(EPIPE);
}

ssize_t osf_conn_send(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags)
{
	struct osf_conn *c = conn_get(fd, e);
	struct iovcur cur = {iov, iovcnt, 0, 0};
	ssize_t total, sent = 0, end;
	int nonblock, r;

	if (!c)
		return OSF_FAIL(EBADF);
	total = iov_total(iov, iovcnt);
	if (total < 0) {
		conn_put(c);
		return OSF_FAIL(EINVAL);
	}
	peer_closing(fd, c);
	end = send_end(c, (size_t)total, flags);
	if (end != 1 || total == 0) {
		conn_put(c);
		return end != 1 ? end : 0;
	}
	nonblock = c->nonblock || (flags & MSG_DONTWAIT);
	__atomic_add_fetch(&c->me->send_calls, 1, __ATOMIC_RELAXED);
	while (sent < total) {
		int64_t room;
		if (seg_lock(&c->me->tx_lock) < 0) {
			broken(c);
			break;
		}
		room = tx_free(c);
		if (room < 0) {
			seg_unlock(&c->me->tx_lock);
			broken(c);
			break;
		}
		if (room > 0) {
			uint64_t head = c->tx->head;
			size_t n = (size_t)room < (size_t)(total - sent)
					   ? (size_t)room
					   : (size_t)(total - sent);
			iov_to_ring(&cur, c->txd, c->mask, head, n);
			__atomic_store_n(&c->tx->head, head + n,
					 __ATOMIC_RELEASE);
			seg_unlock(&c->me->tx_lock);
			wake_reader(fd, c);
			sent += (ssize_t)n;
			continue;
		}
		seg_unlock(&c->me->tx_lock);
		if (cstate(c))
			break;
		if (nonblock) {
			drain(c->wfd, c, &c->me->tx_waiters);
			if (cstate(c))
				break;
			if (arm_tx(c))
				continue;
			if (sent == 0) {
				conn_put(c);
				return OSF_FAIL(EAGAIN);
			}
			break;
		}
		r = wait_room(c);
		if (r < 0) {
			if (sent == 0) {
				conn_put(c);
				return OSF_FAIL(-r);
			}
			break;
		}
	}
	if (sent == 0 && cstate(c)) {
		end = send_end(c, (size_t)total, flags);
		conn_put(c);
		return end == 1 ? OSF_FAIL(EPIPE) : end;
	}
	conn_put(c);
	return sent;
}

/* fill_from reads from in_fd straight into the send ring: sendfile (a
 * file, from *offset or the file position, until count bytes are sent) or
 * splice from a pipe (splice: return after the first read that moved
 * anything; pipe_nb: the pipe may not make it wait). As in the kernel, the
 * connection's own O_NONBLOCK alone decides whether it waits for room. */
static ssize_t fill_from(int fd, struct osf_fdt_entry *e, int in_fd,
			 off_t *offset, size_t count, int splice, int pipe_nb)
{
	struct osf_conn *c;
	ssize_t sent = 0, end;
	int err = 0;

	c = conn_get(fd, e);
	if (!c)
		return OSF_FAIL(EBADF);
	peer_closing(fd, c);
	end = send_end(c, count, 0);
	if (end != 1 || count == 0) {
		conn_put(c);
		return end != 1 ? end : 0;
	}
	__atomic_add_fetch(&c->me->send_calls, 1, __ATOMIC_RELAXED);
	while ((size_t)sent < count) {
		int64_t room;
		uint64_t head;
		size_t span;
		ssize_t n;
		if (seg_lock(&c->me->tx_lock) < 0) {
			broken(c);
			break;
		}
		room = tx_free(c);
		if (room <= 0) {
			seg_unlock(&c->me->tx_lock);
			if (room < 0) {
				broken(c);
				break;
			}
			if (cstate(c))
				break;
			if (c->nonblock) {
				drain(c->wfd, c, &c->me->tx_waiters);
				if (!cstate(c) && arm_tx(c))
					continue;
				if (sent == 0 && !cstate(c))
					err = EAGAIN;
				break;
			}
			if ((err = -wait_room(c)) != 0)
				break;
			continue;
		}
		head = c->tx->head;
		span = osf_ring_span(c->mask, head,
				     (size_t)room < count - (size_t)sent
					     ? (size_t)room
					     : count - (size_t)sent);
		if (splice && pipe_nb) {
			struct pollfd p = {in_fd, POLLIN, 0};
			if (REAL(poll)(&p, 1, 0) == 0) {
				seg_unlock(&c->me->tx_lock);
				if (sent == 0)
					err = EAGAIN;
				break;
			}
		}
		if (offset)
			n = pread(in_fd, c->txd + (head & c->mask), span,
				  *offset + sent);
		else
			n = REAL(read)(in_fd, c->txd + (head & c->mask), span);
		if (n <= 0) {
			seg_unlock(&c->me->tx_lock);
			if (n < 0)
				err = errno;
			break;
		}
		__atomic_store_n(&c->tx->head, head + (uint64_t)n,
				 __ATOMIC_RELEASE);
		seg_unlock(&c->me->tx_lock);
		wake_reader(fd, c);
		sent += n;
		if (splice)
			break;
	}
	if (offset)
		*offset += sent;
	if (sent == 0 && cstate(c) && !err) {
		end = send_end(c, count, 0);
		conn_put(c);
		return end == 1 ? OSF_FAIL(EPIPE) : end;
	}
	conn_put(c);
	if (sent == 0 && err)
		return OSF_FAIL(err);
	return sent;
}

ssize_t osf_conn_sendfile(int fd, struct osf_fdt_entry *e, int in_fd,
			  off_t *offset, size_t count)
{
	struct stat st;

	if (REAL(fcntl)(in_fd, F_GETFL, NULL) < 0)
		return -1; /* EBADF, as the kernel says first */
	if (fstat(in_fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
		return OSF_FAIL(EINVAL);
	return fill_from(fd, e, in_fd, offset, count, 0, 0);
}

/* osf_conn_splice: from a pipe, the bytes are read straight into the ring;
 * to a pipe, they are peeked at, written to the pipe, and only the bytes
 * the pipe took are consumed, so that a full pipe never costs data. As in
 * the kernel, SPLICE_F_NONBLOCK (or the pipe's O_NONBLOCK) concerns the
 * pipe; the connection waits according to its own O_NONBLOCK. Without
 * O_NONBLOCK on the pipe, a SPLICE_F_NONBLOCK call writes at most PIPE_BUF
 * bytes once poll says the pipe has room, which a pipe then takes whole. */
ssize_t osf_conn_splice(int fd, struct osf_fdt_entry *e, int pfd, int to_pipe,
			size_t len, unsigned int flags)
{
	int pfl = REAL(fcntl)(pfd, F_GETFL, NULL);
	int pipe_nb = (flags & SPLICE_F_NONBLOCK) || (pfl >= 0 && (pfl & O_NONBLOCK));
	size_t chunk = len < 65536 ? len : 65536;
	struct iovec iov;
	ssize_t n, w;
	char *buf;

	if (!to_pipe)
		return fill_from(fd, e, pfd, NULL, len, 1, pipe_nb);
	buf = malloc(chunk);
	if (!buf)
		return OSF_FAIL(ENOMEM);
	iov.iov_base = buf;
	iov.iov_len = chunk;
	n = osf_conn_recv(fd, e, &iov, 1, MSG_PEEK);
	if (n > 0) {
		struct pollfd p = {pfd, POLLOUT, 0};
		if (pipe_nb && !(pfl & O_NONBLOCK)) {
			if (n > PIPE_BUF)
				n = PIPE_BUF;
			if (REAL(poll)(&p, 1, 0) == 0) {
				free(buf);
				return OSF_FAIL(EAGAIN);
			}
		}
		w = REAL(write)(pfd, buf, (size_t)n);
		if (w > 0) { /* consume what the pipe took, copying nothing */
			iov.iov_len = (size_t)w;
			(void)osf_conn_recv(fd, e, &iov, 1, MSG_DONTWAIT | MSG_TRUNC);
		}
		n = w;
	}
	free(buf);
	return n;
}

/* ---- shutdown, options, names --------------------------------------------- */

int osf_conn_shutdown(int fd, struct osf_fdt_entry *e, int how)
{
	struct osf_conn *c;
	int closed;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return OSF_FAIL(EINVAL);
	c = conn_get(fd, e);
	if (!c)
		return OSF_FAIL(EBADF);
	closed = tcp_closed(c); /* TCP still records the shutdown */
	if (how != SHUT_WR)
		__atomic_or_fetch(&c->me->flags, OSF_SIDE_RDSHUT,
				  __ATOMIC_ACQ_REL);
	if (how != SHUT_RD) {
		/* After every byte already written: take the producers' lock. */
		int locked = seg_lock(&c->me->tx_lock) == 0;
		__atomic_or_fetch(&c->me->flags, OSF_SIDE_FIN,
				  __ATOMIC_ACQ_REL);
		if (locked)
			seg_unlock(&c->me->tx_lock);
		wake_reader(fd, c);
	}
	conn_put(c);
	return closed ? OSF_FAIL(ENOTCONN) : 0;
}

static int put_int(void *val, socklen_t *len, int v)
{
	if (!len || !val)
		return OSF_FAIL(EFAULT);
	if (*len < sizeof(int)) {
		if (*len == 0)
			return OSF_FAIL(EINVAL);
		*(char *)val = (char)v;
		*len = 1;
		return 0;
	}
	*(int *)val = v;
	*len = sizeof(int);
	return 0;
}

static int get_int(const void *val, socklen_t len, int *v)
{
	if (!val)
		return OSF_FAIL(EFAULT);
	if (len >= sizeof(int))
		*v = *(const int *)val;
	else if (len > 0)
		*v = *(const char *)val;
	else
		return OSF_FAIL(EINVAL);
	return 0;
}

/* tcp_default is what Linux answers for a TCP option never set. */
static int tcp_default(int name)
{
	switch (name) {
	case TCP_MAXSEG:
		return 32741; /* what Linux reports on loopback */
	case TCP_KEEPIDLE:
		return 7200;
	case TCP_KEEPINTVL:
		return 75;
	case TCP_KEEPCNT:
		return 9;
	case TCP_SYNCNT:
		return 6;
	case TCP_LINGER2:
		return 60;
	case TCP_QUICKACK:
		return 1;
	case TCP_NOTSENT_LOWAT:
		return 0;
	default:
		return 0;
	}
}

static int tcp_info(struct osf_conn *c, void *val, socklen_t *len)
{
	struct tcp_info ti;
	socklen_t n;

	memset(&ti, 0, sizeof(ti));
	if (tcp_closed(c))
		ti.tcpi_state = TCP_CLOSE;
	else if (my_flags(c) & OSF_SIDE_FIN)
		ti.tcpi_state = TCP_FIN_WAIT2;
	else if ((peer_flags(c) & OSF_SIDE_FIN) || (cstate(c) & CS_GONE))
		ti.tcpi_state = TCP_CLOSE_WAIT;
	else
		ti.tcpi_state = TCP_ESTABLISHED;
	ti.tcpi_snd_mss = ti.tcpi_rcv_mss = 65483;
	ti.tcpi_advmss = 65483;
	ti.tcpi_pmtu = 65536;
	ti.tcpi_snd_cwnd = 10;
	ti.tcpi_rtt = 1;
	ti.tcpi_rcv_space = c->size;
	ti.tcpi_snd_ssthresh = 0x7fffffff;
	ti.tcpi_rcv_ssthresh = c->size;
	n = *len < sizeof(ti) ? *len : (socklen_t)sizeof(ti);
	memcpy(val, &ti, n);
	*len = n;
	return 0;
}

static struct ipopt *ip_slot(struct osf_conn *c, int level, int name, int add)
{
	int i;

	for (i = 0; i < IP_OPTS; i++)
		if (c->ipopt[i].level == level && c->ipopt[i].name == name)
			return &c->ipopt[i];
	if (!add)
		return NULL;
	for (i = 0; i < IP_OPTS; i++)
		if (c->ipopt[i].level < 0) {
			c->ipopt[i].level = level;
			c->ipopt[i].name = name;
			return &c->ipopt[i];
		}
	return &c->ipopt[IP_OPTS - 1];
}

static int ip_default(int level, int name)
{
	if ((level == IPPROTO_IP && name == IP_TTL) ||
	    (level == IPPROTO_IPV6 && name == IPV6_UNICAST_HOPS))
		return 64;
	return 0;
}

/* default_buf is what TCP reports for SO_RCVBUF/SO_SNDBUF never set: osf
 * buffers a ring of this size in each direction. */
static int default_buf(struct osf_conn *c) { return (int)c->size; }

int osf_conn_getsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			void *val, socklen_t *len)
{
	struct osf_conn *c = conn_get(fd, e);
	struct ipopt *o;
	int r;

	if (!c)
		return OSF_FAIL(EBADF);
	if (!len) {
		conn_put(c);
		return OSF_FAIL(EFAULT);
	}
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_DOMAIN:
			r = put_int(val, len, c->v6 ? AF_INET6 : AF_INET);
			break;
		case SO_PROTOCOL:
			r = put_int(val, len, IPPROTO_TCP);
			break;
		case SO_ERROR:
			r = put_int(val, len, take_pending(c));
			break;
		case SO_RCVBUF:
		case SO_SNDBUF:
			if (c->bufset & (name == SO_RCVBUF ? 1 : 2))
				r = REAL(getsockopt)(fd, level, name, val, len);
			else
				r = put_int(val, len, default_buf(c));
			break;
		case SO_REUSEPORT:
			r = put_int(val, len, 0);
			break;
		case SO_PEERCRED: { /* TCP has no peer credentials */
			struct ucred u = {0, (uid_t)-1, (gid_t)-1};
			socklen_t n = *len < sizeof(u) ? *len : sizeof(u);
			if (val)
				memcpy(val, &u, n);
			*len = n;
			r = 0;
			break;
		}
		default:
			r = REAL(getsockopt)(fd, level, name, val, len);
		}
		break;
	case IPPROTO_TCP:
		if (name == TCP_INFO) {
			r = val ? tcp_info(c, val, len) : OSF_FAIL(EFAULT);
		} else if (name == TCP_CONGESTION) {
			socklen_t n = *len < 6 ? *len : 6;
			if (val)
				memcpy(val, "cubic", n);
			*len = n;
			r = 0;
		} else if (name >= 0 && name < TCP_OPTS) {
			r = put_int(val, len,
				    c->tcpset[name] ? c->tcpopt[name]
						    : tcp_default(name));
		} else {
			r = OSF_FAIL(ENOPROTOOPT);
		}
		break;
	case IPPROTO_IP:
	case IPPROTO_IPV6:
		o = ip_slot(c, level, name, 0);
		r = put_int(val, len, o ? o->value : ip_default(level, name));
		break;
	default:
		r = OSF_FAIL(ENOPROTOOPT);
	}
	conn_put(c);
	return r;
}

int osf_conn_setsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len)
{
	struct osf_conn *c = conn_get(fd, e);
	int r = 0, v = 0;

	if (!c)
		return OSF_FAIL(EBADF);
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_RCVBUF:
		case SO_SNDBUF:
		case SO_RCVBUFFORCE:
		case SO_SNDBUFFORCE:
			r = REAL(setsockopt)(fd, level, name, val, len);
			if (r == 0)
				c->bufset |= (name == SO_RCVBUF ||
					      name == SO_RCVBUFFORCE)
						     ? 1
						     : 2;
			break;
		case SO_SNDTIMEO:
			/* A blocked writer sleeps in recv on the writers'
			 * socket: the send timeout is its receive timeout. */
			r = REAL(setsockopt)(fd, level, name, val, len);
			if (r == 0)
				(void)REAL(setsockopt)(c->wfd, SOL_SOCKET,
						       SO_RCVTIMEO, val, len);
			break;
		case SO_LINGER: {
			const struct linger *l = val;
			r = REAL(setsockopt)(fd, level, name, val, len);
			if (r == 0 && l && len >= sizeof(*l)) {
				if (l->l_onoff)
					e->flags |= OSF_FDF_LINGER;
				else
					e->flags &= ~OSF_FDF_LINGER;
				e->linger_secs = (uint32_t)l->l_linger;
				/* An earlier holder's close with linger 0
				 * no longer decides how the last one ends. */
				if (!l->l_onoff || l->l_linger != 0)
					__atomic_and_fetch(&c->me->flags,
							   ~OSF_SIDE_RESET,
							   __ATOMIC_ACQ_REL);
			}
			break;
		}
		case SO_REUSEPORT:
			r = get_int(val, len, &v);
			break;
		default:
			r = REAL(setsockopt)(fd, level, name, val, len);
		}
		break;
	case IPPROTO_TCP:
		if (name == TCP_CONGESTION || name == TCP_ULP ||
		    name == TCP_MD5SIG) {
			r = 0;
		} else if (name >= 0 && name < TCP_OPTS) {
			r = get_int(val, len, &v);
			if (r == 0) {
				c->tcpopt[name] = v;
				c->tcpset[name] = 1;
				if (name == TCP_NODELAY)
					e->flags = v ? (e->flags | OSF_FDF_NODELAY)
						     : (e->flags & ~OSF_FDF_NODELAY);
			}
		} else {
			r = OSF_FAIL(ENOPROTOOPT);
		}
		break;
	case IPPROTO_IP:
	case IPPROTO_IPV6:
		r = get_int(val, len, &v);
		if (r == 0)
			ip_slot(c, level, name, 1)->value = v;
		break;
	default:
		r = OSF_FAIL(ENOPROTOOPT);
	}
	conn_put(c);
	return r;
}

int osf_conn_getname(int fd, struct osf_fdt_entry *e, int peer,
		     struct sockaddr *sa, socklen_t *len)
{
	const uint8_t *src = peer ? e->peer : e->local;
	socklen_t full;
	sa_family_t fam;

	if (!len)
		return OSF_FAIL(EFAULT);
	if (peer) { /* a closed TCP socket has no peer */
		struct osf_conn *c = conn_get(fd, e);
		int closed = c && tcp_closed(c);
		if (c)
			conn_put(c);
		if (closed)
			return OSF_FAIL(ENOTCONN);
	}
	memcpy(&fam, src, sizeof(fam));
	full = fam == AF_INET6 ? sizeof(struct sockaddr_in6)
			       : sizeof(struct sockaddr_in);
	if (sa)
		memcpy(sa, src, *len < full ? *len : full);
	*len = full;
	return 0;
}

int osf_conn_ioctl(int fd, struct osf_fdt_entry *e, unsigned long req,
		   void *arg)
{
	struct osf_conn *c = conn_get(fd, e);
	int r = 0;
	int64_t v;

	if (!c)
		return OSF_FAIL(EBADF);
	switch (req) {
	case FIONREAD: /* SIOCINQ */
		v = rx_used(c);
		*(int *)arg = v < 0 ? 0 : (int)v;
		break;
	case SIOCOUTQ:
	case SIOCOUTQNSD:
		v = tx_free(c);
		*(int *)arg = v < 0 ? 0 : (int)(c->size - (uint64_t)v);
		break;
	case SIOCATMARK:
		*(int *)arg = 0;
		break;
	case FIONBIO:
		r = REAL(ioctl)(fd, req, arg);
		if (r == 0)
			c->nonblock = *(int *)arg != 0;
		break;
	default:
		r = REAL(ioctl)(fd, req, arg);
	}
	conn_put(c);
	return r;
}

void osf_conn_setfl(struct osf_fdt_entry *e, int nonblock)
{
	struct osf_conn *c = conn_get(-1, e);

	if (c) {
		c->nonblock = nonblock;
		conn_put(c);
	}
}

/* ---- life cycle --------------------------------------------------------------- */

/* release_handed closes what the core handed over and install did not
 * take, and marks it gone in cc. */
static void release_handed(struct osf_core_conn *cc)
{
	if (cc->seg_addr)
		munmap((void *)(uintptr_t)cc->seg_addr,
		       (size_t)osf_seg_bytes(cc->ring_bytes));
	if (cc->seg_fd >= 0)
		REAL(close)(cc->seg_fd);
	if (cc->wake_tx_fd >= 0)
		REAL(close)(cc->wake_tx_fd);
	cc->seg_addr = 0;
	cc->seg_fd = cc->wake_tx_fd = -1;
}

int osf_conn_install(int fd, struct osf_core_conn *cc, int role, int cloexec,
		     int nonblock, int dup_wake)
{
	struct osf_fdt_entry ent;
	struct osf_conn *c;
	struct stat st;
	int hfd, hwfd, fl;
	uint32_t seg_flags;
	sa_family_t fam;

	c = conn_alloc();
	if (!c) {
		release_handed(cc);
		return OSF_FAIL(ENOMEM);
	}
	fl = REAL(fcntl)(cc->wake_fd, F_GETFL, NULL);
	if (fl < 0 ||
	    REAL(fcntl)(cc->wake_fd, F_SETFL,
			(void *)(long)(nonblock ? (fl | O_NONBLOCK)
						: (fl & ~O_NONBLOCK))) < 0)
		goto fail;
	if (dup_wake) {
		if (REAL(dup3)(cc->wake_fd, fd, cloexec ? O_CLOEXEC : 0) < 0)
			goto fail;
		REAL(close)(cc->wake_fd);
		cc->wake_fd = -1;
	} else if (REAL(fcntl)(fd, F_SETFD,
			       (void *)(long)(cloexec ? FD_CLOEXEC : 0)) < 0) {
		goto fail;
	}
	hfd = osf_fdt_hide(cc->seg_fd, fd);
	if (hfd < 0)
		hfd = cc->seg_fd; /* keep it where it is */
	hwfd = osf_fdt_hide(cc->wake_tx_fd, fd);
	if (hwfd < 0)
		hwfd = cc->wake_tx_fd;
	memcpy(&fam, cc->peer, sizeof(fam));
	/* Informational, set by the segment's creator before it was shared:
	 * an RDMA progress engine's segments say so, for osfstat. */
	seg_flags = __atomic_load_n(
		&((struct osf_seg_hdr *)(uintptr_t)cc->seg_addr)->flags,
		__ATOMIC_RELAXED);
	conn_init(c, (uint8_t *)(uintptr_t)cc->seg_addr, cc->ring_bytes,
		  cc->side, hfd, hwfd, fam == AF_INET6);
	cc->seg_addr = 0; /* the connection owns them now */
	cc->seg_fd = cc->wake_tx_fd = -1;
	c->nonblock = nonblock;
	__atomic_add_fetch(&c->me->holders, 1, __ATOMIC_RELAXED);

	memset(&ent, 0, sizeof(ent));
	ent.kind = OSF_FD_SHM;
	ent.transport = (seg_flags & OSF_SEG_F_RDMA) ? OSF_TP_RDMA : OSF_TP_SHM;
	ent.role = (uint8_t)role;
	ent.flags = (cloexec ? OSF_FDF_CLOEXEC : 0) |
		    (fam == AF_INET6 ? OSF_FDF_V6 : 0);
	ent.aux_fd = hfd;
	ent.aux2_fd = hwfd;
	ent.rule = cc->rule;
	ent.ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
	ent.image = osf.image;
	ent.priv = (uint64_t)(uintptr_t)c;
	ent.ring_bytes = cc->ring_bytes;
	memcpy(ent.local, cc->local, sizeof(ent.local));
	memcpy(ent.peer, cc->peer, sizeof(ent.peer));
	if (osf_fdt_set(fd, &ent) < 0) {
		conn_put(c); /* unmaps, closes both hidden fds */
		return -1;
	}
	return 0;
fail:
	conn_free(c);
	release_handed(cc);
	return -1;
}

void osf_conn_dup(struct osf_fdt_entry *e)
{
	struct osf_conn *c = conn_get(-1, e);

	if (!c)
		return;
	__atomic_add_fetch(&c->fds, 1, __ATOMIC_ACQ_REL);
	/* keep the reference: it belongs to the new table entry */
}

void osf_conn_close(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c;

	(void)fd;
	if (__atomic_load_n(&e->image, __ATOMIC_ACQUIRE) != osf.image)
		return; /* never used in this image: nothing mapped */
	c = (struct osf_conn *)(uintptr_t)e->priv;
	if (!c)
		return;
	if (__atomic_sub_fetch(&c->fds, 1, __ATOMIC_ACQ_REL) == 0) {
		/* This process drops its last descriptor for this side. */
		if ((e->flags & OSF_FDF_LINGER) && e->linger_secs == 0)
			__atomic_or_fetch(&c->me->flags, OSF_SIDE_RESET,
					  __ATOMIC_ACQ_REL);
		__atomic_sub_fetch(&c->me->holders, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&c->me->close_seq, 1, __ATOMIC_ACQ_REL);
	}
	__atomic_store_n(&e->priv, 0, __ATOMIC_RELEASE);
	conn_put(c); /* the table entry's reference */
}

/* rebuild maps the segment of an fd inherited across exec, sharing the
 * struct with other fds (dups) of the same connection. */
static int rebuild_lock;

static int rebuild(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c = NULL;
	struct stat st;
	unsigned i, j;
	void *base;
	int fl;

	while (__atomic_exchange_n(&rebuild_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
	if (__atomic_load_n(&e->image, __ATOMIC_ACQUIRE) == osf.image)
		goto out;
	for (i = 0; i < OSF_FDT_MAX_CHUNKS && !c; i++) {
		struct osf_fdt_entry *ch = osf_fdt_chunks[i];
		if (!ch)
			continue;
		for (j = 0; j < OSF_FDT_CHUNK_ENTRIES; j++)
			if (ch[j].kind >= OSF_FD_SHM && ch[j].image == osf.image &&
			    ch[j].aux_fd == e->aux_fd && ch[j].priv) {
				c = (struct osf_conn *)(uintptr_t)ch[j].priv;
				__atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
				__atomic_add_fetch(&c->fds, 1, __ATOMIC_ACQ_REL);
				break;
			}
	}
	if (!c) {
		if (!osf_ring_size_ok(e->ring_bytes) || fstat(e->aux_fd, &st) < 0 ||
		    (uint64_t)st.st_size != osf_seg_bytes(e->ring_bytes))
			goto fail;
		base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
			    MAP_SHARED, e->aux_fd, 0);
		if (base == MAP_FAILED)
			goto fail;
		c = conn_alloc();
		if (!c) {
			munmap(base, (size_t)st.st_size);
			goto fail;
		}
		conn_init(c, base, e->ring_bytes,
			  e->role == OSF_ROLE_SERVER ? OSF_SIDE_SERVER
						     : OSF_SIDE_CLIENT,
			  e->aux_fd, e->aux2_fd, (e->flags & OSF_FDF_V6) != 0);
		fl = fd >= 0 ? REAL(fcntl)(fd, F_GETFL, NULL) : 0;
		c->nonblock = fl > 0 && (fl & O_NONBLOCK);
	}
	__atomic_store_n(&e->priv, (uint64_t)(uintptr_t)c, __ATOMIC_RELEASE);
	__atomic_store_n(&e->image, osf.image, __ATOMIC_RELEASE);
out:
	__atomic_store_n(&rebuild_lock, 0, __ATOMIC_RELEASE);
	return 0;
fail:
	__atomic_store_n(&rebuild_lock, 0, __ATOMIC_RELEASE);
	return OSF_FAIL(EBADF);
}

void osf_conn_fork_holders(int delta)
{
	static uint32_t round;
	unsigned i, j;

	round++;
	for (i = 0; i < OSF_FDT_MAX_CHUNKS; i++)
		for (j = 0; osf_fdt_chunks[i] && j < OSF_FDT_CHUNK_ENTRIES; j++) {
			struct osf_fdt_entry *e = &osf_fdt_chunks[i][j];
			struct osf_conn *c;
			if (e->kind < OSF_FD_SHM || e->image != osf.image || !e->priv)
				continue;
			c = (struct osf_conn *)(uintptr_t)e->priv;
			if (c->fork_round == round)
				continue; /* a dup of one already counted */
			c->fork_round = round;
			__atomic_add_fetch(&c->me->holders, (uint32_t)delta,
					   __ATOMIC_RELAXED);
		}
}

void osf_conn_child_after_fork(void)
{
	tls_tid = 0;
	pool_lock = 0;
	rebuild_lock = 0;
}

/* ---- readiness ------------------------------------------------------------- */

static short revents(struct osf_conn *c)
{
	uint32_t st = cstate(c), pf = peer_flags(c), mf = my_flags(c);
	int64_t used = rx_used(c), room = tx_free(c);
	int rdhup = (pf & OSF_SIDE_FIN) || (st & CS_GONE) || (mf & OSF_SIDE_RDSHUT);
	int wrshut = (mf & OSF_SIDE_FIN) != 0;
	short r = 0;

	if (used < 0 || room < 0 || (st & CS_BROKEN))
		return POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLERR |
		       POLLHUP | POLLRDHUP;
	if (used > 0 || rdhup || c->pending_err)
		r |= POLLIN | POLLRDNORM;
	if (rdhup)
		r |= POLLRDHUP;
	if ((uint64_t)room >= c->lowat || wrshut || (st & CS_GONE))
		r |= POLLOUT | POLLWRNORM;
	if ((rdhup && wrshut) || tcp_closed(c))
		r |= POLLHUP;
	if (c->pending_err)
		r |= POLLERR;
	return r;
}

short osf_conn_poll(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c = conn_get(fd, e);
	short r;

	if (!c)
		return POLLNVAL;
	r = revents(c);
	conn_put(c);
	return r;
}

int osf_conn_arm_kinds(short events)
{
	return ((events & (POLLIN | POLLRDNORM | POLLRDHUP)) ? OSF_ARM_RX : 0) |
	       ((events & (POLLOUT | POLLWRNORM)) ? OSF_ARM_TX : 0);
}

short osf_conn_arm(int fd, struct osf_fdt_entry *e, int kinds, int already)
{
	struct osf_conn *c = conn_get(fd, e);
	short r;

	if (!c)
		return POLLNVAL;
	if ((kinds & OSF_ARM_RX) && !(already & OSF_ARM_RX))
		__atomic_add_fetch(&c->me->rx_waiters, 1, __ATOMIC_ACQ_REL);
	if ((kinds & OSF_ARM_TX) && !(already & OSF_ARM_TX))
		__atomic_add_fetch(&c->me->tx_waiters, 1, __ATOMIC_ACQ_REL);
	if (kinds & OSF_ARM_RX)
		__atomic_store_n(&c->me->rx_want, 1, __ATOMIC_RELAXED);
	if (kinds & OSF_ARM_TX)
		__atomic_store_n(&c->me->tx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	r = revents(c);
	conn_put(c);
	return r;
}

void osf_conn_disarm(int fd, struct osf_fdt_entry *e, int kinds, int woken)
{
	struct osf_conn *c = conn_get(fd, e);

	if (!c)
		return;
	if (woken & kinds & OSF_ARM_RX)
		take_token(fd, c);
	if (woken & kinds & OSF_ARM_TX)
		take_token(c->wfd, c);
	if (woken) /* a hang-up wakes too: the end, even behind tokens */
		check_end((woken & OSF_ARM_RX) ? fd : c->wfd, c);
	if (kinds & OSF_ARM_RX)
		uncount(&c->me->rx_waiters);
	if (kinds & OSF_ARM_TX)
		uncount(&c->me->tx_waiters);
	conn_put(c);
}

uint64_t osf_conn_stamp(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c = conn_get(fd, e);
	uint64_t st;

	if (!c)
		return 0;
	st = __atomic_load_n(&c->rx->head, __ATOMIC_ACQUIRE) +
	     __atomic_load_n(&c->tx->tail, __ATOMIC_ACQUIRE) * 0x9e3779b97f4a7c15ULL +
	     ((uint64_t)(peer_flags(c) | cstate(c) << 8) << 56);
	conn_put(c);
	return st;
}

void *osf_conn_cookie(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c = conn_get(fd, e);
	void *p = c;

	if (c)
		conn_put(c);
	return p;
}

short osf_conn_cookie_poll(void *cookie)
{
	return revents((struct osf_conn *)cookie);
}
