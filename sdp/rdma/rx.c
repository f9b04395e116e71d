// rx.c: the core's side of rx.h, C in libosfcore.so: the application's
// threads' entry (osf_rdma_rx_take, through rx->take), and the takers and
// receive posters of a verbs CQ and QP and of the stand-in's socket.
// Called from the application's threads: nothing here touches Go.

#include "rx.h"

#include <endian.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

// osf_rdma_rx_take is rx->take (rx.h osf_rdma_take_fn): an application's
// thread that found no data takes what completions there are, at most a
// CQ's depth, when no other thread (nor the engine) is taking them. What
// it leaves (an event, completions it took and did not apply, bytes a
// CREDIT lets out) kicks the engine, which may be asleep on a completion
// channel this thread already emptied.
int osf_rdma_rx_take(struct osf_rdma_tx *tx, uint32_t gen, int32_t pid)
{
	struct osf_rdma_rx *rx = tx->rx;
	int n = 0, cs;

	if (!rx || !__atomic_load_n(&tx->live, __ATOMIC_ACQUIRE) || tx->pid != pid)
		return -1;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	n = -2;
	if (osf_rdma_rx_trylock(rx)) {
		n = 0;
		if (!__atomic_load_n(&tx->live, __ATOMIC_RELAXED) ||
		    __atomic_load_n(&tx->gen, __ATOMIC_RELAXED) != gen ||
		    __atomic_load_n(&rx->down, __ATOMIC_RELAXED)) {
			n = -1;
		} else {
			n = osf_rdma_rx_poll(rx, 3 * (int)OSF_RDMA_SQ_DEPTH, &rx->caller_wcs);
			__atomic_add_fetch(&rx->caller_takes, 1, __ATOMIC_RELAXED);
			if (n == 0)
				__atomic_add_fetch(&rx->caller_empty, 1, __ATOMIC_RELAXED);
			/* Completions it took from the device and stopped
			 * before (the stash: its bound, or an event) are
			 * the engine's now, and no completion event will
			 * say so. */
			if (rx->ev.what != OSF_RDMA_EV_NONE || rx->engine_due ||
			    rx->stash_i != rx->stash_n) {
				rx->engine_due = 0;
				osf_rdma_rx_kick(rx);
			}
		}
		osf_rdma_rx_unlock(rx);
	}
	pthread_setcancelstate(cs, NULL);
	return n;
}

// osf_rdma_verbs_poll takes completions from the connection's CQ.
int osf_rdma_verbs_poll(struct osf_rdma_rx *rx, struct osf_rdma_wc *out, int n)
{
	struct ibv_wc wc[16];
	int got, i;

	if (n > 16)
		n = 16;
	got = ibv_poll_cq((struct ibv_cq *)rx->cq, n, wc);
	if (got < 0)
		return -EIO;
	for (i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = (uint32_t)wc[i].status;
		out[i].has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
		out[i].imm = out[i].has_imm ? be32toh(wc[i].imm_data) : 0;
		out[i].pad = 0;
	}
	return got;
}

// osf_rdma_verbs_recv posts one receive (no buffer: every message is a
// WRITE WITH IMMEDIATE) on the QP.
int osf_rdma_verbs_recv(struct osf_rdma_rx *rx, uint64_t wr_id)
{
	struct ibv_recv_wr wr, *bad = NULL;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	errno = 0;
	rc = ibv_post_recv((struct ibv_qp *)rx->qp, &wr, &bad);
	return rc == 0 ? 0 : (rc > 0 ? rc : (errno ? errno : EIO));
}

// osf_rdma_sim_recv counts a receive posted on the stand-in's link.
int osf_rdma_sim_recv(struct osf_rdma_rx *rx, uint64_t wr_id)
{
	(void)wr_id;
	rx->sim_rq++;
	return 0;
}

// osf_rdma_sim_poll plays the device for the stand-in's socket (sim.go,
// the message format): it places each write's payload into the receiving
// ring at its offset and completes a posted receive for each immediate,
// in order; with none posted it stops (RNR). A message that does not fit
// the ring (or names the ring we send) breaks the link (-EPROTO); the
// socket's end is one flushed receive, after everything the peer sent.
int osf_rdma_sim_poll(struct osf_rdma_rx *rx, struct osf_rdma_wc *wc, int n)
{
	uint8_t *h = rx->sim_hdr;
	uint32_t off, len, imm, take;
	int got = 0;
	ssize_t r;

	while (got < n) {
		uint32_t used = 0;

		while (got < n) {
			if (!rx->sim_cur) {
				if (rx->sim_have - used < 16)
					break;
				memcpy(h, rx->sim_buf + used, 16);
				used += 16;
				memcpy(&off, h + 4, 4);
				memcpy(&len, h + 8, 4);
				off = le32toh(off);
				len = le32toh(len);
				if (h[0] != 1 || h[1] > 1 || (uint64_t)off + len > rx->size ||
				    (len > 0 && h[1] != 1 - rx->side)) {
					rx->sim_have = 0;
					return -EPROTO;
				}
				rx->sim_cur = 1;
				rx->sim_left = len;
			}
			if (rx->sim_left) {
				memcpy(&off, h + 4, 4);
				memcpy(&len, h + 8, 4);
				off = le32toh(off);
				len = le32toh(len);
				take = rx->sim_have - used;
				if (take > rx->sim_left)
					take = rx->sim_left;
				if (take == 0)
					break;
				memcpy((uint8_t *)(uintptr_t)rx->sim_ring + off + (len - rx->sim_left),
				       rx->sim_buf + used, take);
				used += take;
				rx->sim_left -= take;
				if (rx->sim_left)
					break;
			}
			if (h[2] & 1) {
				if (rx->sim_rq == 0)
					break; // RNR: until a receive is posted
				rx->sim_rq--;
				memcpy(&imm, h + 12, 4);
				wc[got++] = (struct osf_rdma_wc){
					.wr_id = osf_rdma_wrid(OSF_RDMA_WR_RECV, rx->tx->id, 0),
					.status = OSF_RDMA_WC_OK, .imm = le32toh(imm), .has_imm = 1};
			}
			rx->sim_cur = 0;
		}
		if (used) {
			memmove(rx->sim_buf, rx->sim_buf + used, rx->sim_have - used);
			rx->sim_have -= used;
		}
		if (got == n || (rx->sim_cur && !rx->sim_left && rx->sim_rq == 0))
			break;
		if (rx->sim_eof || rx->sim_fd < 0)
			break;
		do
			r = recv(rx->sim_fd, rx->sim_buf + rx->sim_have,
				 sizeof(rx->sim_buf) - rx->sim_have, MSG_DONTWAIT);
		while (r < 0 && errno == EINTR);
		if (r > 0) {
			rx->sim_have += (uint32_t)r;
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		rx->sim_eof = 1; // the peer's end, after everything it sent
		break;
	}
	if (rx->sim_eof == 1 && got == 0) {
		rx->sim_eof = 2;
		wc[got++] = (struct osf_rdma_wc){
			.wr_id = osf_rdma_wrid(OSF_RDMA_WR_RECV, rx->tx->id, 0),
			.status = OSF_RDMA_WC_FLUSH};
	}
	return got;
}

// ---- the connection's own channel (rx.h chan_fd) ----------------------

// osf_rdma_verbs_arm is rx->chan_arm for a verbs CQ (under ep_lock): its
// next solicited completion (the peer's immediates), or with arm_all its
// next completion of any kind, raises an event on the connection's
// completion channel. Our own sends' completions (one in 16 signaled)
// then wake nobody unless the engine waits for one: they came while a
// poller was between waits and woke the engine, or woke the poller for
// nothing. Armed already as much (cq_armed), it makes no system call: a
// sleeper's enter, its leave and the engine's every sleep each armed the
// CQ, three ibv_req_notify_cq per message where one is needed. A request
// for every completion after one for solicited ones widens the arm (the
// verbs' rule; rxe keeps the wider of the two).
static int osf_rdma_verbs_arm(struct osf_rdma_rx *rx)
{
	uint32_t how = rx->arm_all ? OSF_RDMA_ARMED_ALL : OSF_RDMA_ARMED_SOLICITED;
	int rc;

	if (!rx->cq)
		return EINVAL;
	if (rx->cq_armed >= how)
		return 0;
	__atomic_add_fetch(&rx->cq_arms, 1, __ATOMIC_RELAXED);
	rc = ibv_req_notify_cq((struct ibv_cq *)rx->cq, how == OSF_RDMA_ARMED_SOLICITED);
	if (rc == 0)
		rx->cq_armed = how;
	return rc;
}

// osf_rdma_verbs_drain is rx->chan_drain (under ep_lock): it reads
// (non-blocking: the channel's fd is) and acknowledges the event waiting
// on the channel, which disarmed the CQ. One read: the channel is this
// CQ's alone and every arm goes through chan_arm, once per event
// (cq_armed), so at most one event waits; a read until EAGAIN was a
// second system call per message that found nothing. Were another left,
// the channel would stay readable (the engine's and a poller's waits are
// level-triggered) and the next drain would take it.
static int osf_rdma_verbs_drain(struct osf_rdma_rx *rx)
{
	struct ibv_cq *cq;
	void *ctx;
	int saved = errno;

	if (rx->chan && ibv_get_cq_event((struct ibv_comp_channel *)rx->chan, &cq, &ctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		rx->cq_armed = OSF_RDMA_ARMED_NONE;
	}
	errno = saved;
	return 0;
}

// osf_rdma_chan_use hands the connection's channel to the rule: fd (a
// verbs completion channel, chan non-NULL, or the stand-in's socket),
// registered in the engine's epoll ep for set, the engine wanting want.
void osf_rdma_chan_use(struct osf_rdma_tx *tx, int fd, void *chan, int ep, uint32_t want,
		       uint32_t set)
{
	struct osf_rdma_rx *rx = tx->rx;

	osf_rdma_ep_lock(rx);
	rx->chan_fd = fd;
	rx->chan = chan;
	rx->ep_fd = ep;
	rx->ep_want = want;
	rx->ep_set = set;
	rx->sleepers = 0;
	rx->cq_armed = OSF_RDMA_ARMED_NONE;
	rx->arm_all = 0;
	rx->chan_arm = chan ? osf_rdma_verbs_arm : NULL;
	rx->chan_drain = chan ? osf_rdma_verbs_drain : NULL;
	osf_rdma_chan_unlend_locked(rx);
	osf_rdma_chan_apply_locked(rx);
	osf_rdma_ep_unlock(rx);
}

// osf_rdma_chan_want sets the events the engine wants on the channel
// (registered at once unless a thread sleeps on it); it returns the
// events registered now.
uint32_t osf_rdma_chan_want(struct osf_rdma_tx *tx, uint32_t want)
{
	struct osf_rdma_rx *rx = tx->rx;
	uint32_t set;

	osf_rdma_ep_lock(rx);
	rx->ep_want = want;
	osf_rdma_chan_apply_locked(rx);
	set = rx->ep_set;
	osf_rdma_ep_unlock(rx);
	return set;
}

// osf_rdma_chan_engine_drain is the engine's read of the channel's events
// when it woke for them: none while an application's thread sleeps on
// the channel (the event is that thread's; the engine only looks at the
// CQ). It reports whether the channel is the rule's.
int osf_rdma_chan_engine_drain(struct osf_rdma_tx *tx)
{
	struct osf_rdma_rx *rx = tx->rx;
	int mine;

	osf_rdma_ep_lock(rx);
	mine = rx->chan_fd >= 0;
	if (mine && rx->sleepers == 0 && rx->chan_drain)
		(void)rx->chan_drain(rx);
	osf_rdma_ep_unlock(rx);
	return mine;
}

// osf_rdma_chan_engine_arm is the engine's arm of the connection's CQ
// before it sleeps, through chan_arm (none when armed already); -1 when
// the channel is not the rule's (the engine arms the CQ itself). A
// channel whose lending a waiter ended (side.c call_back: the token that
// woke the engine) goes back into the engine's epoll here, and one the
// engine needs (it waits for its own sends) is taken back.
int osf_rdma_chan_engine_arm(struct osf_rdma_tx *tx)
{
	struct osf_rdma_rx *rx = tx->rx;
	int rc = -1;

	osf_rdma_ep_lock(rx);
	if (__atomic_load_n(&rx->arm_all, __ATOMIC_RELAXED))
		osf_rdma_chan_unlend_locked(rx);
	osf_rdma_chan_apply_locked(rx);
	if (rx->chan_fd >= 0 && rx->chan_arm)
		rc = rx->chan_arm(rx);
	osf_rdma_ep_unlock(rx);
	return rc;
}

// osf_rdma_chan_arm_all says whether the engine waits for a completion
// of its own sends (send-queue slots, a probe, CLOSE): every arm from now
// on (the engine's before it sleeps, a sleeper's) asks for every
// completion, else for solicited ones only.
void osf_rdma_chan_arm_all(struct osf_rdma_tx *tx, int all)
{
	struct osf_rdma_rx *rx = tx->rx;

	osf_rdma_ep_lock(rx);
	__atomic_store_n(&rx->arm_all, all ? 1u : 0u, __ATOMIC_RELAXED);
	if (all) { /* the engine needs the channel: it takes it back */
		osf_rdma_chan_unlend_locked(rx);
		osf_rdma_chan_apply_locked(rx);
	}
	osf_rdma_ep_unlock(rx);
}

// osf_rdma_chan_reclaim takes a lent channel back into the engine's
// epoll (the engine needs its completions: bytes wait for the peer's
// credit).
void osf_rdma_chan_reclaim(struct osf_rdma_tx *tx)
{
	struct osf_rdma_rx *rx = tx->rx;

	osf_rdma_ep_lock(rx);
	osf_rdma_chan_unlend_locked(rx);
	osf_rdma_chan_apply_locked(rx);
	osf_rdma_ep_unlock(rx);
}

// osf_rdma_chan_forget takes the channel out of the engine's epoll and
// out of the rule's hands, before it is closed: a thread asleep on it
// is woken by its wake socket's end, and finds it gone.
void osf_rdma_chan_forget(struct osf_rdma_tx *tx)
{
	struct osf_rdma_rx *rx = tx->rx;

	osf_rdma_ep_lock(rx);
	rx->sleepers = 0;
	rx->ep_want = 0;
	osf_rdma_chan_unlend_locked(rx);
	osf_rdma_chan_apply_locked(rx);
	rx->chan_fd = rx->ep_fd = -1;
	rx->ep_set = 0;
	rx->chan = NULL;
	rx->chan_arm = rx->chan_drain = NULL;
	rx->cq_armed = OSF_RDMA_ARMED_NONE;
	rx->arm_all = 0;
	osf_rdma_ep_unlock(rx);
}
