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

int osf_conn_rdma_credit(struct osf_conn *c, uint64_t tail)
{
	struct osf_rdma_tx *tx = __atomic_load_n(&c->rtx, __ATOMIC_ACQUIRE);

	if (!tx)
		return 0;
	return osf_rdma_credit_push(tx, __atomic_load_n(&c->rtx_gen, __ATOMIC_RELAXED),
				    (int32_t)osf_pid(), tail);
}

static long mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

int osf_conn_rdma_spin(struct osf_conn *c, unsigned spin_us, int64_t have)
{
	long end;
	int i;

	if (!rtx_get(c))
		return 0;
	if (!spin_us) /* no spin (it has not paid): one look before the sleep */
		return osf_conn_rdma_take(c, 0) && osf_side_rx_past(&c->s, have);
	end = mono_us() + (long)spin_us;
	for (i = 0;; i++) {
		if (osf_side_rx_past(&c->s, have))
			return 1;
		if (!osf_conn_rdma_take(c, 0))
			__builtin_ia32_pause();
		if ((i & 15) == 15 && mono_us() > end)
			return 0;
	}
}
