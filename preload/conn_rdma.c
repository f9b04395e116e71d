//go:build osf_make

/* conn_rdma.c: an RDMA connection's writes posted on the writer's own
 * thread (docs/DESIGN.md D4, docs/ARCHITECTURE.md "RDMA transport",
 * "Sending"): right after a write published bytes (or FIN) into the send
 * ring, this thread posts the WRITE WITH IMMEDIATE itself, through the
 * QP the Go core made (sdp/rdma/tx.h, the one sending rule the progress
 * engine uses too). Whatever it cannot post (a fork child's write, a busy
 * send queue, a connection closing) is left to the engine, woken by the
 * wake protocol as on any other connection. */
#include "conn_priv.h"
#include "osf.h"

#include <sys/stat.h>

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
