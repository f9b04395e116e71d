//go:build osf_make

/* conn_gw.c: an offloaded connection to an osfgw gateway (shm leg) while
 * it waits for the gateway's reply, which is the first 32 bytes of the
 * stream (docs/ARCHITECTURE.md, "Gateways"). Until the reply is taken the
 * connection is "connecting" as TCP's SYN_SENT is: poll reports nothing,
 * recv and send say EAGAIN (or wait), a second connect EALREADY. The
 * reply is taken by whoever looks first (poll, epoll, select, connect,
 * recv, send, SO_ERROR): an OK makes the connection established; an error
 * makes it a connect that failed with the reply's errno, reported by
 * SO_ERROR (POLLOUT|POLLERR|POLLHUP, as the kernel's refused connect). The
 * gateway wakes the node's readers and writers after the reply, so a
 * poller armed for POLLOUT alone wakes up too.
 */
#include "conn_priv.h"
#include "../internal/gateway/gwwire.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#define GW_REPLY_BYTES OSF_GW_REPLY_BYTES
#define GW_NOTICE_BYTES OSF_GW_NOTICE_BYTES

static int64_t gw_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* gw_settled records the outcome err of the wait (0: OK). */
static void gw_settled(struct osf_conn *c, int err)
{
	if (err) {
		/* A connect that failed: SO_ERROR says why; no byte may be
		 * written or read on it. */
		osf_side_set_pending(&c->s, err);
		osf_side_set_state(&c->s, OSF_CS_GONE | OSF_CS_RESET |
						  OSF_CS_WROTE_GONE);
	}
	__atomic_store_n(&c->gw, err ? OSF_CONN_GW_FAILED : OSF_CONN_GW_NONE,
			 __ATOMIC_RELEASE);
}

/* gw_take takes the reply when it is all there and records the outcome
 * (*err: its errno, or ECONNRESET when the gateway went away first): 0;
 * or 1 when it is not there yet (or another thread is reading). Under the
 * consumers' lock, so that only one thread takes it, and never data. */
static int gw_take(int fd, struct osf_conn *c, int *err)
{
	uint8_t b[GW_REPLY_BYTES];
	int64_t used;

	if (osf_side_lock_rx(&c->s, fd, 1) != 0)
		return 1;
	if (__atomic_load_n(&c->gw, __ATOMIC_ACQUIRE) != OSF_CONN_GW_WAIT) {
		osf_seg_unlock(&c->s.me->rx_lock);
		*err = 0; /* another thread took it */
		return 0;
	}
	used = osf_side_rx_used(&c->s);
	if (used >= GW_REPLY_BYTES) {
		uint64_t tail = c->s.rx->tail;
		osf_side_rx_copy(&c->s, tail, b, GW_REPLY_BYTES);
		__atomic_store_n(&c->s.rx->tail, tail + GW_REPLY_BYTES,
				 __ATOMIC_RELEASE);
		*err = osf_gw_reply_errno(b);
		gw_settled(c, *err);
		osf_seg_unlock(&c->s.me->rx_lock);
		osf_side_wake_writer(&c->s, tail + (uint64_t)used,
				     tail + GW_REPLY_BYTES);
		return 0;
	}
	osf_side_peer_closing(&c->s, fd);
	if (used < 0 || (osf_side_state(&c->s) & (OSF_CS_GONE | OSF_CS_BROKEN)) ||
	    (osf_side_peer_flags(&c->s) & OSF_SIDE_FIN)) {
		*err = ECONNRESET;
		gw_settled(c, *err);
		osf_seg_unlock(&c->s.me->rx_lock);
		return 0;
	}
	osf_seg_unlock(&c->s.me->rx_lock);
	return 1;
}

/* gw_wait sleeps until the reply (or the end) may have arrived, at most
 * ms milliseconds: armed as a poller, on the wake socket. */
static void gw_wait(int fd, struct osf_conn *c, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	short ready = osf_side_arm(&c->s, fd, OSF_ARM_RX, 0);
	int woken = 0;

	if (!(ready & (POLLERR | POLLHUP)) && osf_side_rx_used(&c->s) < GW_REPLY_BYTES) {
		if (osf_side_rx_used(&c->s) > 0) /* a partial reply: look again soon */
			ms = ms > 1 ? 1 : ms;
		if (REAL(poll)(&p, 1, ms) > 0)
			woken = OSF_ARM_RX;
	}
	osf_side_disarm(&c->s, fd, OSF_ARM_RX, woken);
}

int osf_conn_gw_settle(int fd, struct osf_fdt_entry *e, int wait_ms)
{
	struct osf_conn *c = conn_get(fd, e);
	int64_t deadline = gw_now_ms() + (wait_ms > 0 ? wait_ms : 0);
	int err = 0;

	if (!c)
		return EBADF;
	while (__atomic_load_n(&c->gw, __ATOMIC_ACQUIRE) == OSF_CONN_GW_WAIT) {
		int64_t left = deadline - gw_now_ms();
		if (gw_take(fd, c, &err) == 0)
			break;
		if (wait_ms == 0) {
			conn_put(c);
			return -1;
		}
		if (left <= 0) {
			err = ETIMEDOUT;
			if (osf_side_lock_rx(&c->s, fd, 0) == 0) {
				if (__atomic_load_n(&c->gw, __ATOMIC_ACQUIRE) ==
				    OSF_CONN_GW_WAIT)
					gw_settled(c, err);
				else
					err = 0;
				osf_seg_unlock(&c->s.me->rx_lock);
			}
			break;
		}
		gw_wait(fd, c, left > 1000 ? 1000 : (int)left);
	}
	conn_put(c);
	return err;
}

int osf_conn_gw_state(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c = conn_get(fd, e);
	int st;

	if (!c)
		return OSF_CONN_GW_NONE;
	st = __atomic_load_n(&c->gw, __ATOMIC_ACQUIRE);
	conn_put(c);
	return st;
}

void osf_conn_gw_begin(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c = conn_get(fd, e);

	if (!c)
		return;
	__atomic_store_n(&c->gw, OSF_CONN_GW_WAIT, __ATOMIC_RELEASE);
	conn_put(c);
}

short osf_conn_gw_revents(int fd, struct osf_conn *c, short r)
{
	int err;

	if (__atomic_load_n(&c->gw, __ATOMIC_ACQUIRE) == OSF_CONN_GW_WAIT &&
	    gw_take(fd, c, &err) == 0)
		r = osf_side_revents(&c->s);
	switch (__atomic_load_n(&c->gw, __ATOMIC_ACQUIRE)) {
	case OSF_CONN_GW_WAIT:
		return 0;
	case OSF_CONN_GW_FAILED: /* as the kernel's socket after a failed connect */
		return POLLOUT | POLLWRNORM | POLLHUP |
		       (c->s.pending_err ? POLLERR : 0);
	}
	return r;
}

int osf_conn_gw_notice(int fd, struct osf_fdt_entry *e, uint8_t b[48],
		       const uint8_t token[32])
{
	struct osf_conn *c = conn_get(fd, e);
	uint8_t m[GW_NOTICE_BYTES + 32], diff = 0;
	uint64_t tail = 0;
	int64_t used = 0;
	int rc = -1, i;

	if (!c)
		return -1;
	if (osf_side_lock_rx(&c->s, fd, 1) == 0) {
		used = osf_side_rx_used(&c->s);
		tail = c->s.rx->tail;
		if (used >= (int64_t)sizeof(m)) {
			osf_side_rx_copy(&c->s, tail, m, sizeof(m));
			for (i = 0; i < 32; i++) /* constant time */
				diff |= m[GW_NOTICE_BYTES + i] ^ token[i];
			if (osf_gw_notice_ok(m) && !diff) {
				__atomic_store_n(&c->s.rx->tail, tail + sizeof(m),
						 __ATOMIC_RELEASE);
				memcpy(b, m, GW_NOTICE_BYTES);
				rc = 0;
			}
		}
		osf_seg_unlock(&c->s.me->rx_lock);
	}
	if (rc == 0)
		osf_side_wake_writer(&c->s, tail + (uint64_t)used, tail + sizeof(m));
	conn_put(c);
	return rc;
}
