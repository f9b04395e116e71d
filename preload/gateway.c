//go:build osf_make

/* gateway.c: the node side of a connection through an osfgw gateway; see
 * gateway.h. */
#include "gateway.h"
#include "../internal/gateway/gwwire.h"
#include "conn.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GW_REPLY_BYTES OSF_GW_REPLY_BYTES

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* read_reply reads exactly the reply's bytes (never any of the stream that
 * follows it) within ms milliseconds; 0 or an errno. */
static int read_reply(int fd, unsigned char *b, int64_t ms)
{
	int64_t deadline = now_ms() + ms;
	size_t got = 0;

	while (got < GW_REPLY_BYTES) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = deadline - now_ms();
		ssize_t n;
		int r;

		if (left <= 0)
			return ETIMEDOUT;
		r = REAL(poll)(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			return errno;
		if (r <= 0)
			continue;
		n = REAL(recv)(fd, b + got, GW_REPLY_BYTES - got, MSG_DONTWAIT);
		if (n > 0)
			got += (size_t)n;
		else if (n == 0)
			return ECONNRESET; /* the gateway went away */
		else if (errno != EAGAIN && errno != EINTR)
			return errno;
	}
	return 0;
}

/* unconnect dissolves fd's connection to the gateway, so that the socket
 * may connect again. */
static void unconnect(int fd)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	REAL(connect)(fd, &sa, sizeof(sa));
}

/* record_gateway makes fd's entry a kernel stream through a gateway to
 * the destination sa, adding flags. */
static struct osf_fdt_entry *record_gateway(int fd, const struct sockaddr *sa,
					    socklen_t len,
					    const struct osf_core_conn *cc,
					    uint32_t flags)
{
	struct osf_fdt_entry *e = osf_fdt_get(fd);
	struct stat st;

	if (!e)
		return NULL;
	e->transport = OSF_TP_GATEWAY;
	e->role = OSF_ROLE_CLIENT;
	e->reason = OSF_R_NONE;
	e->rule = cc->rule;
	e->reason_errno = 0;
	e->aux_fd = -1;
	e->ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
	memset(e->peer, 0, sizeof(e->peer));
	memcpy(e->peer, sa, len < sizeof(e->peer) ? len : sizeof(e->peer));
	__atomic_or_fetch(&e->flags, flags, __ATOMIC_RELEASE);
	__atomic_store_n(&e->kind, OSF_FD_KERNEL, __ATOMIC_RELEASE);
	if (flags & OSF_FDF_GWWAIT) /* last: the hooks dispatch on it */
		__atomic_store_n(&e->ops, OSF_OPS_GW_PENDING, __ATOMIC_RELEASE);
	osf_fdt_touch();
	return e;
}

int osf_gateway_connect(int fd, const struct sockaddr *sa, socklen_t len,
			const struct osf_core_conn *cc)
{
	unsigned char b[GW_REPLY_BYTES];
	int err, fl;

	if (cc->reason_errno)
		return OSF_FAIL(cc->reason_errno);
	fl = REAL(fcntl)(fd, F_GETFL, NULL);
	if (fl >= 0 && (fl & O_NONBLOCK)) {
		/* As TCP: in progress; poll, select, epoll, SO_ERROR,
		 * connect, recv and send take the reply when it comes. */
		if (!record_gateway(fd, sa, len, cc,
				    OSF_FDF_INPROGRESS | OSF_FDF_GWWAIT))
			return OSF_FAIL(ENOBUFS); /* no room to remember it */
		osf_mux_offloaded(fd); /* registered in an epoll before */
		return OSF_FAIL(EINPROGRESS);
	}
	err = read_reply(fd, b, cc->gw_wait_ms);
	if (!err)
		err = osf_gw_reply_errno(b);
	if (err) {
		unconnect(fd);
		return OSF_FAIL(err);
	}
	record_gateway(fd, sa, len, cc, 0);
	return 0;
}

/* take_reply takes the gateway's reply to a non-blocking connect over a
 * kernel leg (OSF_FDF_GWWAIT) when it is all there: 1 while it is awaited
 * (or another thread is taking it; or another process sharing the socket
 * took it and no byte followed yet), 0 once settled: OK, or failed with
 * the reply's errno (ECONNRESET: the gateway went away first), kept as
 * SO_ERROR (OSF_FDF_GWERR, reason_errno), the socket unconnected. Never
 * takes a byte of the stream that follows the reply. */
static int take_reply(int fd, struct osf_fdt_entry *e)
{
	unsigned char b[GW_REPLY_BYTES];
	int err, saved = errno;
	ssize_t n;

	if (!(__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) & OSF_FDF_GWWAIT))
		return 0;
	if (__atomic_fetch_or(&e->flags, OSF_FDF_GWTAKE, __ATOMIC_ACQUIRE) &
	    OSF_FDF_GWTAKE)
		return 1;
	if (!(__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) & OSF_FDF_GWWAIT)) {
		__atomic_and_fetch(&e->flags, ~OSF_FDF_GWTAKE, __ATOMIC_RELEASE);
		return 0;
	}
	n = REAL(recv)(fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	if (n >= 4 && memcmp(b, "OSFA", 4) != 0) {
		/* Stream bytes: a process sharing the socket (fork) took an
		 * OK reply; an error one would have disconnected it. */
		err = 0;
	} else if (n == GW_REPLY_BYTES &&
	    REAL(recv)(fd, b, sizeof(b), MSG_DONTWAIT) == GW_REPLY_BYTES) {
		err = osf_gw_reply_errno(b);
	} else if (n == 0) {
		err = ECONNRESET; /* the gateway went away */
	} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
		err = errno;
	} else {
		/* Nothing yet, or part of it: unless the stream ended. */
		struct pollfd p = {.fd = fd, .events = POLLRDHUP};
		if (n <= 0 || REAL(poll)(&p, 1, 0) <= 0 ||
		    !(p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			__atomic_and_fetch(&e->flags, ~OSF_FDF_GWTAKE,
					   __ATOMIC_RELEASE);
			errno = saved;
			return 1;
		}
		err = ECONNRESET;
	}
	if (err) {
		unconnect(fd);
		e->reason_errno = err;
		__atomic_or_fetch(&e->flags, OSF_FDF_GWERR, __ATOMIC_RELEASE);
		__atomic_and_fetch(&e->flags, ~OSF_FDF_INPROGRESS, __ATOMIC_RELEASE);
	}
	__atomic_and_fetch(&e->flags, ~(OSF_FDF_GWWAIT | OSF_FDF_GWTAKE),
			   __ATOMIC_RELEASE);
	if (!err) /* the kernel's socket from now on */
		__atomic_store_n(&e->ops, OSF_OPS_NONE, __ATOMIC_RELEASE);
	osf_fdt_touch();
	errno = saved;
	return 0;
}

/* clear_error ends a failed gateway connect once its error was reported
 * (SO_ERROR, connect): the socket is an unconnected TCP socket again,
 * which a later connect routes anew. */
static void clear_error(int fd, struct osf_fdt_entry *e)
{
	if (!(__atomic_fetch_and(&e->flags, ~OSF_FDF_GWERR, __ATOMIC_ACQ_REL) &
	      OSF_FDF_GWERR))
		return;
	__atomic_store_n(&e->ops, OSF_OPS_NONE, __ATOMIC_RELEASE);
	if (__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) & OSF_FDF_MUXITEMS)
		osf_mux_kernel_ready(fd);
	__atomic_and_fetch(&e->flags, ~OSF_FDF_MUXITEMS, __ATOMIC_RELEASE);
	e->transport = OSF_TP_NONE;
	e->reason_errno = 0;
	memset(e->peer, 0, sizeof(e->peer));
	__atomic_store_n(&e->kind, OSF_FD_INET, __ATOMIC_RELEASE);
	osf_fdt_touch();
}

int osf_gateway_settle(int fd, struct osf_fdt_entry *e)
{
	if (take_reply(fd, e))
		return 1;
	if ((__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) &
	     (OSF_FDF_MUXITEMS | OSF_FDF_GWERR)) == OSF_FDF_MUXITEMS) {
		osf_mux_kernel_ready(fd);
		__atomic_and_fetch(&e->flags, ~OSF_FDF_MUXITEMS, __ATOMIC_RELEASE);
	}
	return 0;
}

short osf_gateway_poll(int fd, struct osf_fdt_entry *e)
{
	struct pollfd p = {.fd = fd,
			   .events = POLLIN | POLLOUT | POLLRDHUP | POLLPRI};
	uint32_t fl;

	if (take_reply(fd, e))
		return 0;
	fl = __atomic_load_n(&e->flags, __ATOMIC_ACQUIRE);
	if (REAL(poll)(&p, 1, 0) < 0)
		return POLLNVAL;
	/* A failed connect: unconnected, POLLERR until SO_ERROR is read,
	 * as the kernel's socket after a refused one. */
	return p.revents | ((fl & OSF_FDF_GWERR) ? POLLERR : 0);
}

int osf_gateway_sockerr(int fd, struct osf_fdt_entry *e, void *val,
			socklen_t *len)
{
	int err = 0, kerr = 0;
	socklen_t kl = sizeof(kerr);

	if (!val || !len)
		return OSF_FAIL(EFAULT);
	if ((int)*len < 0)
		return OSF_FAIL(EINVAL);
	if (osf_gateway_settle(fd, e) == 0) {
		/* Taken: the unconnect's own (ECONNRESET), or the stream's. */
		if (REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &kerr, &kl) < 0)
			return -1;
		err = kerr;
		if (__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) & OSF_FDF_GWERR) {
			err = e->reason_errno;
			clear_error(fd, e);
		}
	}
	if (*len > sizeof(err))
		*len = sizeof(err);
	memcpy(val, &err, *len);
	return 0;
}

int osf_gateway_pending_connect(int fd, struct osf_fdt_entry *e)
{
	int err;

	if (osf_gateway_settle(fd, e))
		return OSF_FAIL(EALREADY);
	if (__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) & OSF_FDF_GWERR) {
		err = e->reason_errno;
		clear_error(fd, e);
		return OSF_FAIL(err);
	}
	if (__atomic_fetch_and(&e->flags, ~OSF_FDF_INPROGRESS, __ATOMIC_ACQ_REL) &
	    OSF_FDF_INPROGRESS)
		return 0;
	return OSF_FAIL(EISCONN);
}

int osf_gateway_pending_io(int fd, struct osf_fdt_entry *e, int nonblock)
{
	while (osf_gateway_settle(fd, e)) {
		/* A blocking call waits, as TCP's for the handshake (the
		 * gateway bounds its connect; a leg that ends ends it). */
		struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
		if (nonblock)
			return OSF_FAIL(EAGAIN);
		if (REAL(poll)(&p, 1, 1000) < 0 && errno == EINTR)
			return OSF_FAIL(EINTR);
	}
	if (__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) & OSF_FDF_GWERR) {
		int err = e->reason_errno;
		clear_error(fd, e); /* as TCP: the error once, by read or write */
		return OSF_FAIL(err);
	}
	return 0;
}

/* ---- the operations of a socket waiting for the reply (OSF_OPS_GW_PENDING) --
 *
 * It is not a ring: its readiness is osf_gateway_poll, it is woken by the
 * reply arriving as data on the socket itself (so a wait arms OSF_ARM_RX
 * and sleeps on fd), and it has no tokens, stamps but its state's, pages
 * or hold. Once settled (ops none again) it is the kernel's. */

/* gw_io is recv (send) on such a socket: once settled, the kernel's. */
static ssize_t gw_io(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		     int iovcnt, int flags, int send)
{
	struct msghdr m;
	int fl = REAL(fcntl)(fd, F_GETFL, NULL);

	if (osf_gateway_pending_io(fd, e, (flags & MSG_DONTWAIT) ||
						  (fl >= 0 && (fl & O_NONBLOCK))) < 0)
		return -1;
	memset(&m, 0, sizeof(m));
	m.msg_iov = (struct iovec *)iov;
	m.msg_iovlen = (size_t)iovcnt;
	return send ? REAL(sendmsg)(fd, &m, flags) : REAL(recvmsg)(fd, &m, flags);
}

static ssize_t gw_recv(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		       int iovcnt, int flags)
{
	return gw_io(fd, e, iov, iovcnt, flags, 0);
}

static ssize_t gw_send(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		       int iovcnt, int flags)
{
	return gw_io(fd, e, iov, iovcnt, flags, 1);
}

static int gw_arm_kinds(int fd, struct osf_fdt_entry *e, short events)
{
	(void)fd, (void)e, (void)events;
	return OSF_ARM_RX; /* the reply arrives as data */
}

static short gw_arm(int fd, struct osf_fdt_entry *e, int kinds, int already,
		    int *trim_due)
{
	(void)kinds, (void)already, (void)trim_due;
	return osf_gateway_poll(fd, e);
}

static void gw_disarm(int fd, struct osf_fdt_entry *e, int kinds, int woken)
{
	(void)fd, (void)e, (void)kinds, (void)woken;
}

/* gw_stamp: waiting, failed, settled: each an edge. */
static uint64_t gw_stamp(int fd, struct osf_fdt_entry *e)
{
	(void)fd;
	return __atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) &
	       (OSF_FDF_GWWAIT | OSF_FDF_GWERR);
}

static void gw_trim(int fd, struct osf_fdt_entry *e) { (void)fd, (void)e; }

static int gw_rx_blind(int fd, struct osf_fdt_entry *e)
{
	(void)fd, (void)e;
	return 0;
}

static short gw_wake_events(int fd, struct osf_fdt_entry *e)
{
	(void)fd, (void)e;
	return POLLIN | POLLRDHUP;
}

static int gw_wake_tx_fd(const struct osf_fdt_entry *e)
{
	(void)e;
	return -1;
}

static void *gw_hold(int fd, struct osf_fdt_entry *e)
{
	(void)fd, (void)e;
	return NULL;
}

const struct osf_fd_ops osf_ops_gw_pending = {
	.ready = {
		.poll = osf_gateway_poll,
		.arm_kinds = gw_arm_kinds,
		.arm = gw_arm,
		.disarm = gw_disarm,
		.stamp = gw_stamp,
		.trim = gw_trim,
		.rx_blind = gw_rx_blind,
		.wake_events = gw_wake_events,
		.wake_tx_fd = gw_wake_tx_fd,
		.hold = gw_hold,
	},
	.recv = gw_recv,
	.send = gw_send,
	.close = NULL, /* the kernel's socket: nothing of osf's to release */
};

void osf_gateway_leg_begin(int fd, struct osf_fdt_entry *e)
{
	osf_conn_gw_begin(fd, e);
	__atomic_or_fetch(&e->flags, OSF_FDF_GATEWAY, __ATOMIC_RELEASE);
	osf_fdt_touch();
}

/* take_error clears SO_ERROR of a connection through a gateway, returning
 * it. */
static int take_error(int fd, struct osf_fdt_entry *e)
{
	int err = 0;
	socklen_t l = sizeof(err);

	if (osf_conn_getsockopt(fd, e, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
		return errno;
	return err;
}

int osf_gateway_leg_connect(int fd, struct osf_fdt_entry *e, int nonblock,
			    uint32_t wait_ms)
{
	int err;

	if (nonblock) {
		e->flags |= OSF_FDF_INPROGRESS;
		return OSF_FAIL(EINPROGRESS);
	}
	err = osf_conn_gw_settle(fd, e, wait_ms > (uint32_t)OSF_CONN_GW_FOREVER
						? OSF_CONN_GW_FOREVER
						: (int)wait_ms);
	if (err > 0) {
		(void)take_error(fd, e); /* a failed blocking connect leaves none */
		return OSF_FAIL(err);
	}
	return 0;
}

int osf_gateway_connect_again(int fd, struct osf_fdt_entry *e)
{
	int err;

	if (osf_conn_gw_settle(fd, e, 0) < 0)
		return OSF_FAIL(EALREADY);
	if (osf_conn_gw_state(fd, e) == OSF_CONN_GW_FAILED) {
		e->flags &= ~OSF_FDF_INPROGRESS;
		err = take_error(fd, e);
		return OSF_FAIL(err ? err : ECONNABORTED);
	}
	if (e->flags & OSF_FDF_INPROGRESS) {
		e->flags &= ~OSF_FDF_INPROGRESS;
		return 0;
	}
	return OSF_FAIL(EISCONN);
}

/* sa_len returns the length of the sockaddr_in/in6 stored in b. */
static socklen_t sa_len(const uint8_t *b)
{
	return ((const struct sockaddr *)b)->sa_family == AF_INET6
		       ? sizeof(struct sockaddr_in6)
		       : sizeof(struct sockaddr_in);
}

int osf_gateway_getname(int fd, struct osf_fdt_entry *e, int peer,
			struct sockaddr *sa, socklen_t *len)
{
	const uint8_t *b = peer ? e->peer : e->local;
	socklen_t n;

	if (peer && osf_gw_pending(e) && (osf_gateway_settle(fd, e) ||
					  osf_gw_pending(e)))
		return OSF_FAIL(ENOTCONN); /* as TCP's, connecting or failed */

	if (!peer && e->role != OSF_ROLE_SERVER)
		return REAL(getsockname)(fd, sa, len);
	n = sa_len(b);
	return osf_addr_out(sa, len, b, n);
}

void osf_gateway_listen(int fd, const struct osf_core_listen_out *out,
			const struct sockaddr_storage *ss, socklen_t sl)
{
	struct osf_fdt_entry *e = osf_fdt_get(fd);
	struct stat st;
	int hfd = -1;

	if (out->fd >= 0 && (hfd = osf_fdt_hide(out->fd, fd)) < 0)
		REAL(close)(out->fd); /* no room: a node-local listener */
	if (!e) {
		if (hfd >= 0)
			osf_fdt_close_hidden(hfd);
		return;
	}
	e->transport = hfd >= 0 ? OSF_TP_GATEWAY : OSF_TP_KERNEL;
	e->role = OSF_ROLE_LISTENER;
	e->reason = hfd >= 0 ? OSF_R_NONE : (out->fd >= 0 ? OSF_R_RESOURCE : out->reason);
	e->reason_errno = hfd >= 0 ? 0 : out->reason_errno;
	e->rule = out->rule;
	e->aux_fd = hfd;
	e->ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
	memset(e->local, 0, sizeof(e->local));
	memcpy(e->local, ss, sl < sizeof(e->local) ? sl : sizeof(e->local));
	memcpy(e->peer, out->gateway, sizeof(e->peer));
	__atomic_store_n(&e->kind, OSF_FD_KERNEL, __ATOMIC_RELEASE);
	osf_fdt_touch();
}

#define GW_NOTICE_BYTES OSF_GW_NOTICE_BYTES

/* same_host reports whether sockaddrs a and b (in/in6, v4-mapped allowed)
 * name the same address. */
static int same_host(const struct sockaddr *a, const uint8_t *b)
{
	const struct sockaddr *s[2] = { a, (const struct sockaddr *)b };
	uint8_t x[2][16];
	int i;

	for (i = 0; i < 2; i++) {
		memset(x[i], 0, 16);
		x[i][10] = x[i][11] = 0xff;
		if (s[i]->sa_family == AF_INET)
			memcpy(&x[i][12], &((const struct sockaddr_in *)s[i])->sin_addr, 4);
		else if (s[i]->sa_family == AF_INET6)
			memcpy(x[i], &((const struct sockaddr_in6 *)s[i])->sin6_addr, 16);
		else
			return 0;
	}
	return memcmp(x[0], x[1], 16) == 0;
}

void osf_gateway_accepted(const struct osf_fdt_entry *l, int nfd,
			  struct sockaddr *sa, socklen_t *len)
{
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	uint8_t b[GW_NOTICE_BYTES];
	struct osf_fdt_entry *e;
	int64_t deadline = now_ms() + 1000;
	int saved = errno, v6;
	ssize_t n = 0;

	if (nfd < 0 || REAL(getpeername)(nfd, (struct sockaddr *)&peer, &pl) < 0 ||
	    !same_host((struct sockaddr *)&peer, l->peer))
		goto out;
	/* The gateway sends the notice as it connects: wait for it (1 s at
	 * most), without taking any byte that is not one. */
	while ((n = REAL(recv)(nfd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT)) <
	       (ssize_t)sizeof(b)) {
		struct pollfd p = { .fd = nfd, .events = POLLIN };
		int64_t left = deadline - now_ms();
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || left <= 0)
			goto out;
		if (n > 0 && memcmp(b, "OSFN", n < 4 ? n : 4) != 0)
			goto out;
		REAL(poll)(&p, 1, (int)left); /* more, or the end */
		if (n > 0) /* data there but short: wait for the rest briefly */
			usleep(1000);
	}
	if (!osf_gw_notice_ok(b) ||
	    REAL(recv)(nfd, b, sizeof(b), MSG_DONTWAIT) != (ssize_t)sizeof(b))
		goto out;
	e = osf_fdt_lookup(nfd);
	if (!e)
		goto out;
	v6 = (l->flags & OSF_FDF_V6) != 0;
	osf_gw_put_addr(e->peer, v6, b[5], b + 8, b + 16);
	osf_gw_put_addr(e->local, v6, b[6], b + 10, b + 32);
	e->transport = OSF_TP_GATEWAY;
	e->reason = OSF_R_NONE;
	e->rule = l->rule;
	osf_fdt_touch();
	if (sa && len) {
		socklen_t sl = sa_len(e->peer);
		memcpy(sa, e->peer, *len < sl ? *len : sl);
		*len = sl;
	}
out:
	errno = saved;
}

/* The delivery tokens of this process's gateway listeners, by the inode
 * of the listener's companion; process-private (never in the fd table,
 * which other processes read). A listener's slot is reused round-robin
 * once GW_TOKENS newer ones were made. */
#define GW_TOKENS 32
static struct {
	uint64_t ino;
	uint8_t token[32];
} gw_tokens[GW_TOKENS];
static unsigned gw_tokens_next;
static int gw_tokens_lock;

static uint64_t fd_ino(int fd)
{
	struct stat st;

	return fd >= 0 && fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

void osf_gateway_token_set(int companion, const uint8_t token[32])
{
	uint64_t ino = fd_ino(companion);
	unsigned i;

	if (!ino)
		return;
	while (__atomic_exchange_n(&gw_tokens_lock, 1, __ATOMIC_ACQUIRE))
		;
	i = gw_tokens_next++ % GW_TOKENS;
	gw_tokens[i].ino = ino;
	memcpy(gw_tokens[i].token, token, 32);
	__atomic_store_n(&gw_tokens_lock, 0, __ATOMIC_RELEASE);
}

/* gw_token_get copies the token of the listener whose companion is fd:
 * 0, or -1 when there is none. */
static int gw_token_get(int companion, uint8_t token[32])
{
	uint64_t ino = fd_ino(companion);
	int i, rc = -1;

	if (!ino)
		return -1;
	while (__atomic_exchange_n(&gw_tokens_lock, 1, __ATOMIC_ACQUIRE))
		;
	for (i = 0; i < GW_TOKENS; i++)
		if (gw_tokens[i].ino == ino) {
			memcpy(token, gw_tokens[i].token, 32);
			rc = 0;
		}
	__atomic_store_n(&gw_tokens_lock, 0, __ATOMIC_RELEASE);
	return rc;
}

void osf_gateway_ring_accepted(const struct osf_fdt_entry *l, int nfd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(nfd);
	uint8_t b[GW_NOTICE_BYTES], token[32];
	int v6;

	/* Only a stream that starts with a notice and the listener's
	 * delivery token comes from the gateway; any other offloaded client
	 * is an ordinary one. */
	if (!e || !osf_kind_is_conn(e->kind) || gw_token_get(l->aux_fd, token) < 0 ||
	    osf_conn_gw_notice(nfd, e, b, token) < 0)
		return;
	v6 = (l->flags & OSF_FDF_V6) != 0;
	osf_gw_put_addr(e->peer, v6, b[5], b + 8, b + 16);
	osf_gw_put_addr(e->local, v6, b[6], b + 10, b + 32);
	e->rule = l->rule;
	__atomic_or_fetch(&e->flags, OSF_FDF_GATEWAY, __ATOMIC_RELEASE);
	osf_fdt_touch();
}
