//go:build osf_make

/* conn_poll.c: readiness of offloaded connections, their operations
 * tables' (ops.h, selectmux/ready.h), for selectmux and qsock_*: the
 * stream protocol's readiness (sdp/side.h) behind a reference on fd's
 * connection.
 */
#include "conn_priv.h"
#include "setup.h"

/* lowat takes POLLIN away while fewer than SO_RCVLOWAT bytes are queued
 * and the stream goes on (tcp_poll: the end, an error or a shut-down
 * read side is readable whatever the mark). */
static short lowat(const struct osf_conn *c, short r)
{
	if (unlikely(c->zc_pending)) /* a MSG_ZEROCOPY notification */
		r |= POLLERR;
	if (__builtin_expect(c->rcvlowat <= 1, 1) || !(r & POLLIN) ||
	    (r & (POLLRDHUP | POLLERR)))
		return r;
	if (osf_side_rx_used(&c->s) < conn_rcvlowat(c))
		r &= (short)~(POLLIN | POLLRDNORM);
	return r;
}

short osf_conn_poll(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c;
	short r;

	c = conn_get(fd, e);
	if (!c)
		return POLLNVAL;
	osf_side_peer_closing(&c->s, fd); /* a reset nobody waited for */
	r = osf_side_revents(&c->s);
	/* RDMA: what arrived (data, credit) may still be in the completion
	 * queue: a poller takes it itself (conn_rdma.c). */
	if (conn_rdma_rx(c) && (r & (POLLIN | POLLOUT)) != (POLLIN | POLLOUT) &&
	    osf_conn_rdma_take(c, 0))
		r = osf_side_revents(&c->s);
	r = lowat(c, r);
	if (unlikely(c->gw))
		r = osf_conn_gw_revents(fd, c, r);
	conn_put(c);
	return r;
}

int osf_conn_arm_kinds(short events)
{
	int k = ((events & (POLLIN | POLLRDNORM | POLLRDHUP)) ? OSF_ARM_RX : 0) |
		((events & (POLLOUT | POLLWRNORM)) ? OSF_ARM_TX : 0);

	/* A wait for nothing (POLLHUP, POLLERR) sleeps on the wake socket
	 * too, and counts there, so that a shutdown wakes it. */
	return k ? k : OSF_ARM_RX;
}

int osf_conn_arm_kinds_fd(int fd, struct osf_fdt_entry *e, short events)
{
	int k = osf_conn_arm_kinds(events);

	/* Waiting for a gateway's reply: it arrives as data, and an RDMA
	 * engine wakes only readers for data (conn_gw.c). */
	if (unlikely(e && (e->flags & OSF_FDF_GATEWAY)) && !(k & OSF_ARM_RX) &&
	    osf_conn_gw_state(fd, e) == OSF_CONN_GW_WAIT)
		k |= OSF_ARM_RX;
	return k;
}

short osf_conn_arm(int fd, struct osf_fdt_entry *e, int kinds, int already,
		   int *trim_due)
{
	struct osf_conn *c;
	short r;

	c = conn_get(fd, e);
	if (!c)
		return POLLNVAL;
	if (kinds & OSF_ARM_RX) /* a poller that waits to read wants its server */
		conn_hello(c);
	osf_side_peer_closing(&c->s, fd);
	r = lowat(c, osf_side_arm(&c->s, fd, kinds, already));
	/* A poller for room sleeps as a blocked writer does. */
	if ((kinds & OSF_ARM_TX) && !(r & POLLOUT) && conn_rdma(c))
		osf_conn_rdma_blocked(c);
	if (unlikely(c->gw))
		r = osf_conn_gw_revents(fd, c, r);
	if ((kinds & OSF_ARM_RX) && osf_side_trim_due(&c->s))
		*trim_due = 1;
	conn_put(c);
	return r;
}

void osf_conn_disarm(int fd, struct osf_fdt_entry *e, int kinds, int woken)
{
	struct osf_conn *c;

	c = conn_get(fd, e);
	if (!c)
		return;
	osf_side_disarm(&c->s, fd, kinds, woken);
	conn_put(c);
}

void *osf_conn_hold(int fd, struct osf_fdt_entry *e)
{
	return conn_get(fd, e);
}

int osf_conn_chan(void *h, int how, struct osf_chan_wait *w)
{
	struct osf_conn *c = h;

	if (!c || !conn_rdma_rx(c))
		return -1;
	return osf_conn_rdma_chan(c, how, w);
}

/* Only connections hold (osf_conn_hold): a hold is one. */
void osf_ready_hold_disarm(void *h, int kinds)
{
	if (h && kinds)
		osf_side_disarm(&((struct osf_conn *)h)->s, -1, kinds, 0);
}

void osf_ready_unhold(void *h)
{
	if (h)
		conn_put(h);
}

/* Only connections have dups whose readiness osf computes (a socket
 * waiting for a gateway shares its file with the kernel's). */
int osf_ready_dup_fd(int fd, struct osf_fdt_entry *e, uint64_t ino)
{
	struct osf_fdt_entry *d;
	int dfd;

	if (e) {
		struct osf_conn *c = osf_kind_is_conn(e->kind) ? conn_get(fd, e) : NULL;
		int many = c && __atomic_load_n(&c->fds, __ATOMIC_ACQUIRE) > 1;
		if (c)
			conn_put(c);
		if (!many)
			return -1;
		ino = e->ino;
	}
	OSF_FDT_FOREACH(dfd, d)
		if (dfd != fd && osf_kind_is_conn(d->kind) && d->ino == ino)
			return dfd;
	return -1;
}

int osf_conn_wake_tx_fd(const struct osf_fdt_entry *e)
{
	return e->aux2_fd;
}

/* ON_SIDE is side_fn(&c->s) for fd's connection c, with a reference held
 * for the call; none when fd has no connection. */
#define ON_SIDE(fd, e, side_fn, none)                                          \
	({                                                                     \
		struct osf_conn *c_ = conn_get(fd, e);                         \
		__typeof__(side_fn(&c_->s)) r_ = (none);                       \
		if (c_) {                                                      \
			r_ = side_fn(&c_->s);                                  \
			conn_put(c_);                                          \
		}                                                              \
		r_;                                                            \
	})

short osf_conn_wake_events(int fd, struct osf_fdt_entry *e)
{
	return ON_SIDE(fd, e, osf_side_wake_events, POLLIN | POLLRDHUP);
}

int osf_conn_rx_blind(int fd, struct osf_fdt_entry *e)
{
	return ON_SIDE(fd, e, osf_side_rx_blind, 0);
}

uint64_t osf_conn_stamp(int fd, struct osf_fdt_entry *e)
{
	return ON_SIDE(fd, e, osf_side_stamp, 0);
}

void osf_conn_trim(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c;

	c = conn_get(fd, e);
	if (!c)
		return;
	if (osf_side_trim_due(&c->s))
		osf_side_trim(&c->s);
	conn_put(c);
	osf_spare_idle();
	osf_conn_unmap_due(0);
}
