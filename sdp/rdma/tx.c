// tx.c: the core's side of tx.h, C in libosfcore.so: where the
// application's threads find a connection's struct osf_rdma_tx (a registry
// keyed by the segment memfd's identity), and the posters they call (a
// verbs QP's, the stand-in's). Called from the application's threads:
// nothing here touches Go.

#include "rx.h"

#include <endian.h>
#include <infiniband/verbs.h>
#include <sched.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct osf_rdma_tx *reg_live, *reg_free;

// osf_rdma_tx_new returns a zeroed struct (a retired one, or new memory)
// keeping its generation; NULL when out of memory.
int osf_rdma_rx_take(struct osf_rdma_tx *tx, uint32_t gen, int32_t pid);

struct osf_rdma_tx *osf_rdma_tx_new(void)
{
	struct osf_rdma_tx *tx;
	struct osf_rdma_rx *rx;
	uint32_t gen = 0;

	pthread_mutex_lock(&reg_mu);
	tx = reg_free;
	if (tx) {
		reg_free = tx->next;
		gen = tx->gen;
	}
	pthread_mutex_unlock(&reg_mu);
	if (!tx) {
		tx = calloc(1, sizeof(*tx));
		if (tx && !(tx->rx = calloc(1, sizeof(*tx->rx)))) {
			free(tx);
			tx = NULL;
		}
	}
	if (!tx)
		return NULL;
	// Only this thread has it: the fields a stale reader looks at
	// (live, gen, lock, rx's lock) are already 0, gen, 0, 0.
	rx = tx->rx;
	memset(tx, 0, sizeof(*tx));
	memset(rx, 0, offsetof(struct osf_rdma_rx, sim_buf));
	tx->gen = gen;
	tx->sim_fd = -1;
	tx->rx = rx;
	rx->tx = tx;
	rx->wake = rx->wake_tx = rx->kick = rx->sim_fd = -1;
	rx->take = osf_rdma_rx_take;
	osf_rdma_ep_lock(rx);
	rx->chan_fd = rx->ep_fd = -1;
	rx->ep_want = rx->ep_set = rx->sleepers = rx->arm_all = 0;
	rx->cq_armed = OSF_RDMA_ARMED_NONE;
	rx->chan_arm = rx->chan_drain = NULL;
	rx->chan = NULL;
	rx->chan_sleeps = 0;
	osf_rdma_ep_unlock(rx);
	return tx;
}

// osf_rdma_tx_publish makes tx findable by the segment memfd's identity.
void osf_rdma_tx_publish(struct osf_rdma_tx *tx, uint64_t dev, uint64_t ino)
{
	pthread_mutex_lock(&reg_mu);
	tx->dev = dev;
	tx->ino = ino;
	tx->next = reg_live;
	reg_live = tx;
	pthread_mutex_unlock(&reg_mu);
}

// osf_rdma_tx_retire stops the application's threads from posting and
// taking completions (waiting for one that holds either lock), bumps the
// generation and keeps the memory for the next connection.
void osf_rdma_tx_retire(struct osf_rdma_tx *tx)
{
	struct osf_rdma_tx **p;
	struct osf_rdma_rx *rx = tx->rx;

	__atomic_store_n(&tx->live, 0, __ATOMIC_RELEASE);
	while (!osf_rdma_rx_trylock(rx))
		sched_yield();
	while (!osf_rdma_tx_trylock(tx))
		sched_yield();
	__atomic_add_fetch(&tx->gen, 1, __ATOMIC_RELEASE);
	tx->post = NULL;
	tx->qp = NULL;
	tx->sim_fd = -1;
	__atomic_store_n(&rx->down, 1, __ATOMIC_RELEASE);
	rx->poll = NULL;
	rx->post_recv = NULL;
	rx->cq = rx->qp = NULL;
	rx->hdr = NULL;
	rx->wake = rx->wake_tx = rx->sim_fd = -1;
	osf_rdma_tx_unlock(tx);
	osf_rdma_rx_unlock(rx);
	osf_rdma_chan_forget(tx);
	pthread_mutex_lock(&reg_mu);
	for (p = &reg_live; *p; p = &(*p)->next)
		if (*p == tx) {
			*p = tx->next;
			break;
		}
	tx->next = reg_free;
	reg_free = tx;
	pthread_mutex_unlock(&reg_mu);
}

// osfcore_rdma_find returns the struct of the connection whose segment
// memfd is (dev, ino) and its generation, or NULL: libosf.so's lookup
// (preload/core.c). Exported from libosfcore.so (core.map).
struct osf_rdma_tx *osfcore_rdma_find(uint64_t dev, uint64_t ino, uint32_t *gen)
{
	struct osf_rdma_tx *tx;

	pthread_mutex_lock(&reg_mu);
	for (tx = reg_live; tx; tx = tx->next)
		if (tx->ino == ino && tx->dev == dev) {
			*gen = __atomic_load_n(&tx->gen, __ATOMIC_ACQUIRE);
			break;
		}
	pthread_mutex_unlock(&reg_mu);
	return tx;
}

// osf_rdma_verbs_post posts a chain on the QP: payloads from the
// registered region of the sending ring (inline when small), written to
// the same offsets of the peer's region.
int osf_rdma_verbs_post(struct osf_rdma_tx *tx, const struct osf_rdma_wr *w, int n)
{
	struct ibv_sge sge[3];
	struct ibv_send_wr wr[3], *bad = NULL;
	int i, rc;

	if (n < 1 || n > 3 || !tx->qp)
		return EINVAL;
	memset(wr, 0, sizeof(wr));
	for (i = 0; i < n; i++) {
		if ((uint64_t)w[i].off + w[i].len > tx->size)
			return EINVAL;
		sge[i].addr = tx->laddr + w[i].off;
		sge[i].length = w[i].len;
		sge[i].lkey = tx->lkey;
		wr[i].wr_id = w[i].wr_id;
		wr[i].sg_list = w[i].len ? &sge[i] : NULL;
		wr[i].num_sge = w[i].len ? 1 : 0;
		wr[i].opcode = w[i].with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
		// Every immediate is solicited: the peer's CQ, armed for
		// solicited completions (rx.c osf_rdma_verbs_arm), wakes its
		// waiter for our DATA, FIN, CREDIT and CLOSE, not for its own
		// sends' completions.
		wr[i].send_flags = (w[i].signaled ? IBV_SEND_SIGNALED : 0) |
				   (w[i].inl && w[i].len ? IBV_SEND_INLINE : 0) |
				   (w[i].with_imm ? IBV_SEND_SOLICITED : 0);
		if (w[i].with_imm)
			wr[i].imm_data = htobe32(w[i].imm);
		wr[i].wr.rdma.remote_addr = tx->raddr + w[i].off;
		wr[i].wr.rdma.rkey = tx->rkey;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	errno = 0;
	rc = ibv_post_send((struct ibv_qp *)tx->qp, wr, &bad);
	if (rc == 0)
		return 0;
	// A partial chain only fails on a broken QP, whose requests all
	// flush: the engine finds the link down.
	return rc > 0 ? rc : (errno ? errno : EIO);
}

// The stand-in's message header (sim.go): kind 1 (write), ring, flags (1:
// with immediate), 0, offset, payload bytes, immediate; little endian.
static void sim_header(uint8_t *h, const struct osf_rdma_wr *w)
{
	uint32_t v[3] = {htole32(w->off), htole32(w->len), htole32(w->imm)};

	h[0] = 1;
	h[1] = (uint8_t)w->ring;
	h[2] = w->with_imm ? 1 : 0;
	h[3] = 0;
	memcpy(h + 4, v, sizeof(v));
}

// osf_rdma_sim_post writes a chain to the stand-in's socket in one
// sendmsg, which a unix stream socket takes whole or not at all for a
// message this small (one buffer: tx->max_chunk keeps it below 16 KiB),
// and completes its signaled requests as written, as the stand-in's link
// does (through sim_done: osf_rdma_tx_commit completes them once they
// count as posted). EAGAIN, with nothing written, when the link has
// messages queued (they go first) or the socket is full.
int osf_rdma_sim_post(struct osf_rdma_tx *tx, const struct osf_rdma_wr *w, int n)
{
	uint8_t hdr[3][16];
	struct iovec iov[6];
	struct msghdr m;
	size_t total = 0;
	ssize_t r;
	int i, k = 0;

	if (n < 1 || n > 3 || tx->sim_fd < 0)
		return EINVAL;
	if (__atomic_load_n(&tx->sim_busy, __ATOMIC_ACQUIRE))
		return EAGAIN;
	for (i = 0; i < n; i++) {
		if ((uint64_t)w[i].off + w[i].len > tx->size)
			return EINVAL;
		sim_header(hdr[i], &w[i]);
		iov[k++] = (struct iovec){hdr[i], 16};
		if (w[i].len)
			iov[k++] = (struct iovec){(void *)(uintptr_t)(tx->laddr + w[i].off), w[i].len};
		total += 16 + w[i].len;
	}
	memset(&m, 0, sizeof(m));
	m.msg_iov = iov;
	m.msg_iovlen = (size_t)k;
	do
		r = sendmsg(tx->sim_fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return errno == EWOULDBLOCK ? EAGAIN : errno;
	while ((size_t)r < total) {
		// Not expected (see above); finish the message, else the
		// stream of messages is broken.
		struct iovec rest[6];
		struct pollfd p = {tx->sim_fd, POLLOUT, 0};
		size_t skip = (size_t)r;
		ssize_t more;
		int j = 0;

		for (i = 0; i < k; i++) {
			if (skip >= iov[i].iov_len) {
				skip -= iov[i].iov_len;
				continue;
			}
			rest[j++] = (struct iovec){(uint8_t *)iov[i].iov_base + skip,
						   iov[i].iov_len - skip};
			skip = 0;
		}
		m.msg_iov = rest;
		m.msg_iovlen = (size_t)j;
		(void)poll(&p, 1, 10);
		more = sendmsg(tx->sim_fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (more < 0 && errno != EAGAIN && errno != EINTR)
			return 0; // the link broke: its read side flushes everything
		if (more > 0)
			r += more;
	}
	for (i = 0; i < n; i++)
		if (w[i].signaled)
			tx->sim_done = (uint32_t)w[i].wr_id + 1; // osf_rdma_tx_commit completes it
	return 0;
}
