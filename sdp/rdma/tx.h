/* tx.h: the sending half of an RDMA stream (docs/ARCHITECTURE.md, "RDMA
 * transport", "Sending"), one implementation for both threads that post:
 * the application's own thread, right after it published bytes into its
 * send ring (libosf.so, preload/conn_rdma.c), and the progress engine
 * (sdp/rdma stream.go, through cgo), which sends what the application's
 * thread could not: bytes written by a fork child or another process,
 * bytes left when the send queue was full, everything while the
 * connection closes.
 *
 * struct osf_rdma_tx is process-private memory (calloc'd by the core,
 * never freed: a retired one is reused with its generation bumped, so a
 * stale pointer held by the C data path stays safe to look at). It holds
 * what the rule needs (bytes sent, the peer's last credit, work requests
 * posted and completed, FIN sent) and how to post: a C function of the
 * core (a verbs QP's, or the stand-in's) and its handles. Nothing in it is
 * ever read from the segment or from the peer: head and FIN come from the
 * application's own side, and are checked against what this process
 * recorded (a corrupt ring is left to the engine, which resets the
 * connection).
 *
 * Locking: lock serialises every post on the connection's send queue, so
 * that work requests reach the QP in the order of their sequence numbers
 * (completions are counted by them) and DATA immediates in the order of
 * their positions (the peer takes a head as proof that every byte below it
 * landed). Whoever wants to send data only tries it: one that finds it
 * busy raises again, and the holder, after letting go, sends once more
 * for it (osf_rdma_tx_push; the engine's transmit does the same), so no
 * thread waits for another's post, which under soft-RoCE is a system
 * call that does the device's work. The engine takes it for its own
 * requests (credits, CLOSE, probes) and to count completions, spinning,
 * and so do application's threads that take completions or post credits
 * (rx.h); those, which send no data, wake the engine for a push left to
 * them (osf_rdma_tx_leave).
 */
#ifndef OSF_SDP_RDMA_TX_H
#define OSF_SDP_RDMA_TX_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>

/* Queue depths of a stream's QP (the engine's sqDepth, signalEvery). One
 * send work request in OSF_RDMA_SIGNAL_EVERY is signaled, so a full send
 * queue always has signaled requests outstanding whose completions free
 * it. */
#define OSF_RDMA_SQ_DEPTH 64u
#define OSF_RDMA_SIGNAL_EVERY (OSF_RDMA_SQ_DEPTH / 4u)
/* The largest payload posted inline (copied into the work request: the
 * NIC need not read it from the ring), as rsocket does. */
#define OSF_RDMA_INLINE 64u

/* Work request kinds (the kind byte of a work request id, sdp/rdma
 * link.go's wrWrite ... wrProbe) and immediate kinds (imm.go). */
#define OSF_RDMA_WR_WRITE 1u /* plain RDMA WRITE: the first part of wrapped data */
#define OSF_RDMA_WR_DATA 2u  /* WRITE WITH IMMEDIATE: data and new head */
#define OSF_RDMA_WR_FLAGS 4u /* zero-length WRITE WITH IMMEDIATE: FIN */
#define OSF_RDMA_IMM_DATA 0u
#define OSF_RDMA_IMM_FLAGS 2u
#define OSF_RDMA_IMM_FIN 1u
#define OSF_RDMA_IMM_BITS 28
#define OSF_RDMA_IMM_MASK ((1u << OSF_RDMA_IMM_BITS) - 1u)
#define OSF_RDMA_WRID_CONN_MASK 0xffffffu

/* One send work request the rule decided. off is the offset in ring
 * ring's region, the same on both hosts. */
struct osf_rdma_wr {
	uint64_t wr_id;
	uint32_t off, len;
	uint32_t imm; /* host order */
	uint8_t kind;
	uint8_t with_imm;
	uint8_t signaled;
	uint8_t inl; /* post inline */
	int32_t ring;
	int32_t pad;
};

struct osf_rdma_tx;

/* A poster posts n (1..3) work requests as one chain, without blocking:
 * 0 when all are posted, else an errno and none is (EAGAIN: not now, the
 * engine will). */
typedef int (*osf_rdma_post_fn)(struct osf_rdma_tx *tx,
				const struct osf_rdma_wr *wr, int n);

struct osf_rdma_tx {
	uint32_t lock;  /* 0 free, 1 held */
	uint32_t live;  /* 1: the application's threads (of pid) may post */
	uint32_t gen;   /* bumped when retired, so a stale pointer fails */
	int32_t pid;    /* the process whose threads may post */
	uint32_t id;    /* connection number (work request ids) */
	uint32_t size;  /* bytes per ring */
	int32_t side;   /* the ring the application sends into */
	uint32_t bias;  /* osf_seg_ring_bias of that ring */
	uint32_t max_chunk; /* most payload bytes per work request */
	uint32_t max_inline; /* most bytes posted inline (0: never) */
	/* Under lock. */
	uint64_t sent;      /* bytes posted to the peer */
	uint64_t peer_tail; /* the peer's consumer position (its last credit) */
	uint32_t posted;    /* send work requests posted */
	uint32_t completed; /* send work requests known complete */
	uint32_t fin_sent;
	uint32_t again; /* a poster found the lock busy: the holder, before it
			   lets go, looks at head (and FIN) once more */
	/* How to post (set by the core before live). */
	osf_rdma_post_fn post;
	void *qp;          /* struct ibv_qp * (verbs), or NULL */
	uint64_t laddr;    /* the registered region of ring side */
	uint32_t lkey, rkey;
	uint64_t raddr;    /* the peer's region of that ring */
	int32_t sim_fd;    /* the stand-in's socket, or -1 */
	uint32_t sim_busy; /* the stand-in's link holds queued messages */
	uint32_t sim_done; /* 0, or 1 + the last signaled request of the chain
			      the stand-in's poster wrote: complete once
			      committed (under lock) */
	uint32_t pad2;
	/* Counters (relaxed; osfstat and tests). */
	uint64_t caller_posts; /* chains posted by the application's threads */
	uint64_t engine_posts; /* chains posted by the engine */
	uint64_t caller_left;  /* pushes that left bytes to the engine */
	/* The registry (sdp/rdma tx.c). */
	uint64_t dev, ino; /* the segment memfd's identity */
	struct osf_rdma_tx *next;
	/* Receiving (rx.h): the connection's completions, taken by whoever
	 * holds rx_lock (an application's thread waiting for data, or the
	 * engine). */
	struct osf_rdma_rx *rx;
};

static inline uint64_t osf_rdma_wrid(uint32_t kind, uint32_t conn, uint32_t seq)
{
	return (uint64_t)kind << 56 | (uint64_t)(conn & OSF_RDMA_WRID_CONN_MASK) << 32 |
	       seq;
}

static inline uint32_t osf_rdma_imm(uint32_t kind, uint64_t value)
{
	return kind << OSF_RDMA_IMM_BITS | ((uint32_t)value & OSF_RDMA_IMM_MASK);
}

/* osf_rdma_tx_sq_free returns the free send queue slots. */
static inline uint32_t osf_rdma_tx_sq_free(const struct osf_rdma_tx *tx)
{
	uint32_t used = tx->posted - tx->completed;

	return used >= OSF_RDMA_SQ_DEPTH ? 0 : OSF_RDMA_SQ_DEPTH - used;
}

/* osf_rdma_tx_signaled: whether send work request seq asks for a
 * completion (one in OSF_RDMA_SIGNAL_EVERY, or force). */
static inline int osf_rdma_tx_signaled(uint32_t seq, int force)
{
	return force || (seq + 1) % OSF_RDMA_SIGNAL_EVERY == 0;
}

/* osf_rdma_tx_next decides the next chain to post, under lock, for the
 * application's side whose head (and FIN flag, read before it) the caller
 * read: the bytes between sent and head, at most what the peer's ring has
 * room for (size - (sent - peer_tail)) and max_chunk, as one WRITE WITH
 * IMMEDIATE whose payload lands at the same offset of the peer's ring, or,
 * wrapped, a plain WRITE of the ring's end then a WRITE WITH IMMEDIATE of
 * the rest from offset 0 (the peer's completion implies both landed); then
 * FLAGS(FIN) once the last byte is out. Data needs 2 free send queue
 * slots, FIN 1. It fills wr (3 entries) and returns how many, 0 when there
 * is nothing to post now, -1 when head is impossible (a corrupt ring: the
 * engine resets the connection). Nothing is recorded until
 * osf_rdma_tx_commit. */
static inline int osf_rdma_tx_next(const struct osf_rdma_tx *tx, uint64_t head,
				   int fin, struct osf_rdma_wr *wr)
{
	uint64_t sent = tx->sent, n, end, off, first;
	uint32_t seq = tx->posted, free = osf_rdma_tx_sq_free(tx);
	int k = 0;

	if (head - tx->peer_tail > tx->size || head - sent > tx->size ||
	    sent - tx->peer_tail > tx->size)
		return -1;
	n = head - sent;
	if (n > tx->size - (sent - tx->peer_tail))
		n = tx->size - (sent - tx->peer_tail);
	if (n > tx->max_chunk)
		n = tx->max_chunk;
	if (n > 0 && free >= 2) {
		end = sent + n;
		off = (sent + tx->bias) & (tx->size - 1);
		first = tx->size - off;
		if (first < n) {
			wr[k] = (struct osf_rdma_wr){
				.wr_id = osf_rdma_wrid(OSF_RDMA_WR_WRITE, tx->id, seq),
				.off = (uint32_t)off, .len = (uint32_t)first,
				.kind = OSF_RDMA_WR_WRITE, .ring = tx->side,
				.signaled = (uint8_t)osf_rdma_tx_signaled(seq, 0),
				.inl = first <= tx->max_inline};
			seq++, k++;
			off = 0;
			n -= first;
		}
		wr[k] = (struct osf_rdma_wr){
			.wr_id = osf_rdma_wrid(OSF_RDMA_WR_DATA, tx->id, seq),
			.off = (uint32_t)off, .len = (uint32_t)n,
			.imm = osf_rdma_imm(OSF_RDMA_IMM_DATA, end),
			.kind = OSF_RDMA_WR_DATA, .with_imm = 1, .ring = tx->side,
			.signaled = (uint8_t)osf_rdma_tx_signaled(seq, 0),
			.inl = n <= tx->max_inline};
		seq++, k++;
		sent = end;
		free -= (uint32_t)k;
	} else if (n > 0) {
		return 0; /* the send queue is full: completions free it */
	}
	if (fin && !tx->fin_sent && sent == head && free >= 1) {
		wr[k] = (struct osf_rdma_wr){
			.wr_id = osf_rdma_wrid(OSF_RDMA_WR_FLAGS, tx->id, seq),
			.imm = osf_rdma_imm(OSF_RDMA_IMM_FLAGS, OSF_RDMA_IMM_FIN),
			.kind = OSF_RDMA_WR_FLAGS, .with_imm = 1, .ring = tx->side,
			.signaled = (uint8_t)osf_rdma_tx_signaled(seq, 0)};
		k++;
	}
	return k;
}

static inline int osf_rdma_tx_complete(struct osf_rdma_tx *tx, uint32_t seq);

/* osf_rdma_tx_commit records a chain osf_rdma_tx_next decided once it is
 * posted (and what the poster completed as it posted). */
static inline void osf_rdma_tx_commit(struct osf_rdma_tx *tx,
				      const struct osf_rdma_wr *wr, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		if (wr[i].kind == OSF_RDMA_WR_DATA)
			tx->sent += (uint64_t)(((wr[i].imm - (uint32_t)tx->sent) &
						OSF_RDMA_IMM_MASK));
		else if (wr[i].kind == OSF_RDMA_WR_FLAGS)
			tx->fin_sent = 1;
	}
	tx->posted += (uint32_t)n;
	if (tx->sim_done) {
		(void)osf_rdma_tx_complete(tx, tx->sim_done - 1);
		tx->sim_done = 0;
	}
}

/* osf_rdma_tx_complete records the completion of send work request seq
 * (in order: everything before it is complete too): 0, or -1 for a
 * request never posted. A completion older than one already recorded (the
 * stand-in completes the application's threads' requests as it writes
 * them, while older ones still wait to be polled) changes nothing. */
static inline int osf_rdma_tx_complete(struct osf_rdma_tx *tx, uint32_t seq)
{
	uint32_t done = seq + 1;

	if ((int32_t)(done - tx->completed) <= 0)
		return 0;
	if (done - tx->completed > tx->posted - tx->completed)
		return -1;
	tx->completed = done;
	return 0;
}

static inline int osf_rdma_tx_trylock(struct osf_rdma_tx *tx)
{
	uint32_t free = 0;

	return __atomic_compare_exchange_n(&tx->lock, &free, 1, 0,
					   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static inline void osf_rdma_tx_unlock(struct osf_rdma_tx *tx)
{
	__atomic_store_n(&tx->lock, 0, __ATOMIC_RELEASE);
}

/* osf_rdma_tx_claim takes the lock for a data push, or hands the push to
 * the holder: 1 when the caller holds it now, 0 when the holder will send
 * what the caller published (again raised while it held the lock). */
static inline int osf_rdma_tx_claim(struct osf_rdma_tx *tx)
{
	if (osf_rdma_tx_trylock(tx))
		return 1;
	__atomic_store_n(&tx->again, 1, __ATOMIC_SEQ_CST);
	return osf_rdma_tx_trylock(tx); /* it may have let go before it looked */
}

/* osf_rdma_tx_begin starts a round of a data push under the lock: from
 * now on a busy poster's again is this holder's to honour. */
static inline void osf_rdma_tx_begin(struct osf_rdma_tx *tx)
{
	__atomic_store_n(&tx->again, 0, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* before head is read */
}

/* osf_rdma_tx_release lets go after a data push: 1 when a poster found
 * the lock busy meanwhile and the holder must push once more (claim
 * again). */
static inline int osf_rdma_tx_release(struct osf_rdma_tx *tx)
{
	__atomic_store_n(&tx->lock, 0, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&tx->again, __ATOMIC_SEQ_CST) != 0;
}

/* osf_rdma_tx_push is the application's thread's send: it posts what its
 * side published (the head word at headp, FIN in the flags word at
 * flagsp, both read under the lock, flags first: FIN is set after the
 * last write; read earlier, another thread's push could have sent past
 * them), as far as credits and the send queue allow, and returns 1 when
 * everything is out. When the lock is busy its holder (another writer, or
 * the engine) sends it (again), and it returns 1 too. It returns 0 when
 * it left something to the engine (the caller then wakes it through the
 * wake protocol): not this process's connection (a fork child: pid), the
 * connection no longer open to the caller (live 0), gen not the caller's
 * (retired), the send queue full, the poster refusing, or a corrupt ring.
 * It never blocks; the thread cannot be cancelled while it holds the
 * lock. */
static inline int osf_rdma_tx_push(struct osf_rdma_tx *tx, uint32_t gen,
				   int32_t pid, const uint64_t *headp,
				   const uint32_t *flagsp, uint32_t fin_flag)
{
	struct osf_rdma_wr wr[3];
	uint64_t head;
	int n, done, cs, fin;

	if (!__atomic_load_n(&tx->live, __ATOMIC_ACQUIRE) || tx->pid != pid)
		return 0;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	do {
		if (!osf_rdma_tx_claim(tx)) {
			done = 1; /* the holder sends it */
			break;
		}
		osf_rdma_tx_begin(tx);
		done = 0;
		if (__atomic_load_n(&tx->live, __ATOMIC_RELAXED) &&
		    __atomic_load_n(&tx->gen, __ATOMIC_RELAXED) == gen && tx->post) {
			fin = (__atomic_load_n(flagsp, __ATOMIC_ACQUIRE) & fin_flag) != 0;
			head = __atomic_load_n(headp, __ATOMIC_ACQUIRE);
			while ((n = osf_rdma_tx_next(tx, head, fin, wr)) > 0) {
				if (tx->post(tx, wr, n) != 0)
					break;
				osf_rdma_tx_commit(tx, wr, n);
				__atomic_add_fetch(&tx->caller_posts, 1, __ATOMIC_RELAXED);
			}
			done = n == 0 && tx->sent == head && (!fin || tx->fin_sent);
		}
		if (!done)
			__atomic_add_fetch(&tx->caller_left, 1, __ATOMIC_RELAXED);
	} while (osf_rdma_tx_release(tx) && done);
	pthread_setcancelstate(cs, NULL);
	return done;
}

#endif
