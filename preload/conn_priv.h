/* conn_priv.h: the connection object shared by preload/conn*.c (not by
 * the rest of libosf.so, which sees conn.h).
 *
 * struct osf_conn is process-private: one per connection per process,
 * shared by the fds (dups) that refer to it. It is the stream protocol's
 * end (struct osf_side, sdp/side.h) plus what only this process knows:
 * references, the mapping, O_NONBLOCK and the socket options TCP would
 * remember. Instances are type-stable (never returned to the system), so a
 * lookup may take a reference on a recycled one and then notice that the
 * table entry moved on.
 */
#ifndef OSF_PRELOAD_CONN_PRIV_H
#define OSF_PRELOAD_CONN_PRIV_H

#include "conn.h"

#include "../sdp/rdma/tx.h"
#include "../sdp/side.h"

#define OSF_CONN_OPTS 16 /* TCP, IP and IPv6 options remembered */
/* Writes that look up an RDMA connection's sending state before giving
 * up (conn_rdma.c): the stand-in's server hands the connection over a
 * moment before it registers it. */
#define OSF_CONN_RTX_LOOKS 64

struct osf_conn {
	struct osf_side s; /* the protocol's view of the segment */
	uint32_t refs;     /* table entries and calls in flight; 0 = free */
	uint32_t fds;      /* table entries in this process */
	struct osf_conn *next_free;
	uint8_t *base;
	size_t map_bytes;
	int seg_fd; /* hidden: the segment's memfd, or its region's */
	int seg_shared; /* seg_fd is the region's one memfd (pool.c's, named
			   by every connection of it): never closed here */
	int port_fd; /* hidden: the application's TCP socket, kept bound to
			the local port the connection holds (sockets.c), or -1 */
	int gone; /* this process's side let go for good (its holders fell
		     to 0 here): a slot's slot_done gets its bit at the end */
	int port_kept; /* port_fd keeps a closed listener's port: passed on
			  at the end (osf_port_pass_on) */
	int nonblock;
	int bufset; /* SO_RCVBUF/SO_SNDBUF set by the application */
	struct osf_kopt opts[OSF_CONN_OPTS]; /* as set, replayed (kopt.c) */
	int cm_ts;  /* 0, or the SO_TIMESTAMP* option whose cmsg recvmsg adds */
	int cm_inq; /* TCP_INQ: recvmsg adds the bytes left to read */
	int rcvlowat; /* SO_RCVLOWAT as TCP keeps it; 0 or 1: the default */
	int zerocopy; /* SO_ZEROCOPY: MSG_ZEROCOPY sends are notified */
	int zc_pending; /* a notification [zc_lo, zc_hi] waits in the error queue */
	uint32_t zc_next, zc_lo, zc_hi; /* MSG_ZEROCOPY send ids */
	int peek_off; /* SO_PEEK_OFF: where the next MSG_PEEK starts past the
			 unread data's start; -1: off (TCP's default) */
	int async; /* O_ASYNC: every read asks the peer for a wake token, which
		      raises SIGIO on the wake socket (the application's fd) */
	int v6;
	uint32_t fork_round; /* osf_conn_fork_holders' de-duplication */
	uint32_t spawn_round; /* osf_conn_spawn_holders' de-duplication */
	int kfd; /* the wake socket is the application's kernel TCP socket
		    (OSF_INSTALL_KFD): its last close drains tokens first.
		    OSF_KFD_CLIENT until the first publish has looked
		    whether the server accepted (osf_kfd_poke) */
	int gw; /* OSF_CONN_GW_*: a stream to a gateway waiting for its reply
		   (conn_gw.c) */
	/* RDMA: where this process's threads post what they write
	 * (sdp/rdma/tx.h; conn_rdma.c), found through the core by the
	 * segment memfd's identity; NULL until found. rtx_look counts the
	 * lookups left before giving up (0: shm, or given up). */
	struct osf_rdma_tx *rtx;
	uint32_t rtx_gen;
	int rtx_look;
	/* RDMA, a reader asleep on the connection's channel (conn_rdma.c):
	 * a hidden duplicate of the wake socket that holds it while a reader
	 * sleeps, as a recv blocked in the kernel holds its socket (a close
	 * by another thread meanwhile does not end the connection); made at
	 * the first such sleep, closed with this process's last fd of the
	 * connection or, if a reader sleeps then, by the last one to wake.
	 * Under hold_lock (the holder's pid). */
	int hold_fd;
	uint32_t hold_users, hold_closed, hold_lock;
	/* RDMA, that reader's SO_RCVTIMEO as last read from the wake socket
	 * (conn_rdma.c rcv_timeout): the side's opts_seq then << 32 |
	 * OSF_CONN_RCVTIMEO_KNOWN | the timeout in ms (0: none); 0: not
	 * read yet. */
	uint64_t rcvtimeo;
	/* RDMA: the peer's credit (+ 1) when a writer of this process last
	 * blocked for room and told the engine (osf_conn_rdma_blocked). */
	uint64_t blocked_at;
	/* The companion connection and hello that wait for the connection's
	 * first byte (its listener defers: setup.h osf_setup_hello_take),
	 * made by conn_hello; NULL once made or when there was none. */
	struct osf_hello_wait *hello;
	uint64_t reap; /* the reaper's slot naming it (reaper.c), 0: none, or
			  OSF_REAP_NEVER: its rings are never trimmed */
	uint64_t reap_at; /* the rx tail from which a read (re)lists it:
			     UINT64_MAX while listed (written by
			     osf_reap_list and the reaper, read by
			     conn_consumed; only ever compared, as the
			     peer can write the tail it comes from) */
};

/* osf_conn_rdma_push posts what c's side published (conn_rdma.c): 1 when
 * everything is on its way to the peer (or with the thread posting on the
 * connection, which posts it next), 0 when the engine must be woken for
 * it. */
int osf_conn_rdma_push(struct osf_conn *c);

/* conn_rdma reports whether c may be an RDMA connection this process
 * runs the data path of (conn_rdma.c). */
static inline int conn_rdma(const struct osf_conn *c)
{
	return __builtin_expect(c->rtx_look != 0 || c->rtx != NULL, 0);
}

/* conn_rdma_rx reports whether this thread may run c's receiving rule
 * itself (conn_rdma.c): c may be an RDMA connection and OSF_RDMA_RX is
 * caller; else the progress engine takes every completion (the default,
 * docs/DESIGN.md D4). */
static inline int conn_rdma_rx(const struct osf_conn *c)
{
	return __builtin_expect(osf.rdma_rx_caller, 0) && conn_rdma(c);
}

/* osf_conn_rdma_take takes c's completions on this thread (rx.h): 1 when
 * it applied any; with look, it may look c's state up first (a system
 * call, a bounded number of times per connection), else only a state
 * already found is used (a poller's loop). osf_conn_rdma_spin does it
 * until more than have bytes are readable (or the end), for at most
 * spin_us, once when spin_us is 0 (a blocking reader about to sleep): 1
 * when they are.
 * osf_conn_rdma_credit posts the credit for c's consumption up to tail
 * when due: 0 when it is left to the engine. */
int osf_conn_rdma_take(struct osf_conn *c, int look);
/* osf_conn_rdma_own reports whether c's engine runs in this process (its
 * sending state found, made by this process): the engine then bumps
 * close_seq before it closes its end of the wake socket (sdp/rdma
 * stream.go endLocal). */
int osf_conn_rdma_own(struct osf_conn *c);
int osf_conn_rdma_spin(struct osf_conn *c, unsigned spin_us, int64_t have);
int osf_conn_rdma_credit(struct osf_conn *c, uint64_t tail);

/* osf_conn_rdma_blocked tells the progress engine that a writer of this
 * process is about to sleep for room on c (conn_rdma.c): the engine, which
 * may be asleep with nothing due (the writer posted everything itself),
 * then watches the stream for a stall on the peer's credit and probes a
 * peer that stays silent (docs/ARCHITECTURE.md, Teardown). Once per credit
 * of the peer; nothing on other connections. */
void osf_conn_rdma_blocked(struct osf_conn *c);

/* osf_conn_rdma_sleep is osf_side_wait_more for a reader of an RDMA
 * connection whose process owns the QP and whose link offers a channel of
 * its own (conn_rdma.c; docs/ARCHITECTURE.md, "A reader sleeps on its
 * connection's channel"): it sleeps in poll on that channel and its wake
 * socket, takes the completions itself when the channel fires, and gives
 * recv's answers: 0 when woken, -EAGAIN when SO_RCVTIMEO expired, -EINTR
 * for a signal (restarted after an SA_RESTART handler when no timeout is
 * set). 1 when it cannot sleep so: the caller sleeps on the wake socket. */
int osf_conn_rdma_sleep(struct osf_conn *c, int fd, int64_t have);

/* osf_conn_rdma_sleep_room is osf_side_wait_room for a writer of such a
 * connection: asleep in poll on the channel and the writers' wake socket,
 * it takes the completions itself (the peer's credit makes the room), so
 * that a blocked writer wakes neither the engine nor a Go thread. It
 * gives send's answers (0, -EAGAIN after SO_SNDTIMEO, -EINTR), or 1 when
 * it cannot sleep so (also while SO_SNDBUF or the peer's SO_RCVBUF, or a
 * trim's stop, holds the writer back: room then comes without a credit):
 * the caller sleeps on the writers' socket as before. */
int osf_conn_rdma_sleep_room(struct osf_conn *c, int fd);

/* osf_conn_rdma_chan is a poller's sleep on c's channel (selectmux/ready.h
 * chan, how OSF_CHAN_*; docs/ARCHITECTURE.md "A poller sleeps on its
 * connection's channel"): ENTER counts the thread asleep on the channel
 * (the engine lets go of it), arms the CQ, takes what came before and
 * sets w->fd to the channel's fd (registered in w->ep when that is not
 * -1), or -1 when this thread cannot (another process's QP, no channel,
 * a retired or closing connection); FIRED reads the channel's events,
 * arms again and takes (> 0: took any); LEAVE undoes ENTER. */
int osf_conn_rdma_chan(struct osf_conn *c, int how, struct osf_chan_wait *w);

/* osf_conn_rdma_unhold closes c's wake socket holder (conn_rdma.c) once no
 * reader sleeps: this process closed its last fd of c (last 0), or c is
 * destroyed (last 1). */
void osf_conn_rdma_unhold(struct osf_conn *c, int last);

/* conn_wake_reader follows a publish into c's tx ring (data, FIN): on an
 * RDMA connection this thread posts it itself when it can
 * (docs/DESIGN.md D4), else, and on shm, it wakes the reader on the other
 * side (the peer process, or the RDMA progress engine) if it asked. */
#define OSF_KFD_CLIENT 2

/* osf_kfd_poke sends the kernel socket fd of a client's connection whose
 * server has not accepted it yet one token (kfd.c): the byte that ends
 * TCP_DEFER_ACCEPT's wait, as the first byte of data would. */
void osf_kfd_poke(struct osf_conn *c, int fd);

/* conn_hello connects c and sends its hello if they wait (conn_defer.c
 * osf_conn_hello_go, through its own hidden copy of c's wake socket): its
 * first publish (data, FIN), its close, a wait to read. */
void osf_conn_hello_go(struct osf_conn *c);
void osf_conn_hello_drop(struct osf_conn *c);
/* conn_defer.c's state a fork child resets (conn.c child_after_fork,
 * fork text): its lock, whether osf-defer runs, how many wait; with any,
 * osf_conn_hello_after_fork lets the child's copies go (its parent
 * connects them). */
extern int osf_hello_n, osf_hello_lk, osf_hello_thread;
void osf_conn_hello_after_fork(void);
static inline void conn_hello(struct osf_conn *c)
{
	if (__builtin_expect(__atomic_load_n(&c->hello, __ATOMIC_RELAXED) != NULL, 0))
		osf_conn_hello_go(c);
}

static inline void conn_wake_reader(struct osf_conn *c, int fd)
{
	conn_hello(c);
	if (conn_rdma(c) && osf_conn_rdma_push(c))
		return;
	if (__builtin_expect(c->kfd == OSF_KFD_CLIENT, 0))
		osf_kfd_poke(c, fd);
	osf_side_wake_reader(&c->s, fd);
}

/* The reaper's list of connections whose readers consumed pages since
 * their rings' last trim (reaper.c). OSF_REAP_PARKED in a reap word: the
 * reaper found nothing more to give back and lets the slot go at its
 * next look, unless a reader unparks it. */
#define OSF_REAP_PARKED ((uint64_t)1 << 31)
#define OSF_REAP_NEVER (~(uint64_t)0 & ~OSF_REAP_PARKED)

/* osf_reap_list puts c on the reaper's list, or unparks it, starting or
 * waking the reaper thread if need be (conn_consumed); the caller holds
 * a reference. osf_reap_forget takes c out of the list before its segment
 * is unmapped, waiting while the reaper looks at it. */
void osf_reap_list(struct osf_conn *c);
void osf_reap_forget(struct osf_conn *c);

/* conn_reap_at returns the rx tail from which a read must list c again:
 * OSF_TRIM_BYTES past the ring's last trim (now, if that is behind). */
static inline uint64_t conn_reap_at(const struct osf_conn *c)
{
	uint64_t tail = __atomic_load_n(&c->s.rx->tail, __ATOMIC_ACQUIRE),
		 last = __atomic_load_n(&c->s.trim_tail, __ATOMIC_RELAXED);

	return tail - last >= OSF_TRIM_BYTES ? tail : last + OSF_TRIM_BYTES;
}

/* conn_consumed follows a reader of c that moved the rx ring's tail to
 * tail: once OSF_TRIM_BYTES were consumed since the ring's last trim, the
 * connection must be on the reaper's list, which gives the pages back
 * when it idles, whatever the program does then (a comparison per read). */
static inline void conn_consumed(struct osf_conn *c, uint64_t tail)
{
	if (__builtin_expect(tail >= __atomic_load_n(&c->reap_at, __ATOMIC_RELAXED), 0))
		osf_reap_list(c);
	if (conn_rdma_rx(c))
		(void)osf_conn_rdma_credit(c, tail);
}

/* osf_conn_gw_revents turns r, the events of c's rings, into what a
 * connection through a gateway reports (conn_gw.c), taking the reply if
 * it is there: nothing while it waits for the reply, a failed connect's
 * events after an error. */
short osf_conn_gw_revents(int fd, struct osf_conn *c, short r);

/* TCP_CORK (conn_cork.c). osf_conn_cork_publish publishes the bytes held
 * back, the caller holding the tx_lock: 1 if there were any (the caller
 * then wakes the reader). osf_conn_cork_flush does it under the lock and
 * wakes the reader on fd. osf_conn_cork_option follows setsockopt of
 * TCP_CORK or TCP_NODELAY to value v. osf_conn_cork_arm starts the 200 ms
 * timer for held bytes written through fd. osf_conn_cork_closed flushes
 * and stops the timer when this process closes its last descriptor. */
int osf_conn_cork_publish(struct osf_conn *c);
/* osf_conn_maxseg is the MSS kernel TCP reports (and sends by) here. */
int osf_conn_maxseg(const struct osf_conn *c);
void osf_conn_cork_flush(struct osf_conn *c, int fd);
void osf_conn_cork_option(struct osf_conn *c, int fd, int name, int v);
void osf_conn_cork_arm(struct osf_conn *c, int fd);
void osf_conn_cork_closed(struct osf_conn *c, int fd);

/* conn_destroy unmaps and frees a connection whose last reference went. */
void osf_conn_destroy(struct osf_conn *c);

/* osf_conn_rebuild maps the segment of an fd inherited across exec. */
int osf_conn_rebuild(int fd, struct osf_fdt_entry *e);

/* conn_rcvlowat returns the bytes a reader of c waits for before it
 * counts as readable (SO_RCVLOWAT), at most what the peer can have in
 * flight towards it; 1 unless the application set the option. */
static inline int64_t conn_rcvlowat(const struct osf_conn *c)
{
	uint64_t lim;

	if (__builtin_expect(c->rcvlowat <= 1, 1))
		return 1;
	lim = osf_side_rx_limit(&c->s);
	return (uint64_t)c->rcvlowat < lim ? c->rcvlowat : (int64_t)lim;
}

/* conn_set_async follows O_ASYNC (F_SETFL, FIOASYNC): the kernel raises
 * SIGIO for the wake socket when a token arrives, so while it is on the
 * readers always ask the peer for one (TCP signals every arrival). */
static inline void conn_set_async(struct osf_conn *c, int on)
{
	c->async = on;
	if (on)
		(void)osf_side_arm_rx(&c->s);
}

static inline void conn_put(struct osf_conn *c)
{
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
		osf_conn_destroy(c);
}

/* conn_get returns fd's connection with a reference held, or NULL (EBADF)
 * when fd stopped being one meanwhile. */
static inline struct osf_conn *conn_get(int fd, struct osf_fdt_entry *e)
{
	int tries;

	for (tries = 0; tries < 8; tries++) {
		struct osf_conn *c;
		uint64_t priv;
		uint32_t r;

		if (unlikely(__atomic_load_n(&e->image, __ATOMIC_ACQUIRE) !=
			     osf.image)) {
			if (osf_conn_rebuild(fd, e) < 0)
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
		    osf_kind_is_conn(e->kind))
			return c;
		conn_put(c);
	again:;
	}
	return NULL;
}

/* Shared by conn_io.c (send, recv) and conn_fill.c (sendfile, splice).
 * conn_send_end: a write on a connection whose other side is gone (or
 * broken, or shut down here): 1 to go on writing, else the result.
 * conn_send_over: a write that waits for room stops. conn_wait_room: sleep
 * until the tx ring has room (0, or -errno; fd is the application's).
 * conn_peek_raw: a peek of osf's own, which SO_PEEK_OFF neither moves nor
 * offsets. */
ssize_t conn_send_end(struct osf_conn *c, size_t total, int flags);
int conn_send_over(struct osf_conn *c);
int conn_wait_room(struct osf_conn *c, int fd);
ssize_t conn_peek_raw(int fd, struct osf_fdt_entry *e, const struct iovec *iov, int iovcnt);

#endif
