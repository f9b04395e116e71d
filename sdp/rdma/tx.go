package rdma

/*
#include "rx.h"
#include <stdlib.h>

struct osf_rdma_tx *osf_rdma_tx_new(void);
void osf_rdma_tx_publish(struct osf_rdma_tx *tx, uint64_t dev, uint64_t ino);
void osf_rdma_tx_retire(struct osf_rdma_tx *tx);
int osf_rdma_verbs_post(struct osf_rdma_tx *tx, const struct osf_rdma_wr *w, int n);
int osf_rdma_sim_post(struct osf_rdma_tx *tx, const struct osf_rdma_wr *w, int n);

static void osf_rdma_tx_use_verbs(struct osf_rdma_tx *tx, void *qp, uint64_t laddr,
				  uint32_t lkey, uint64_t raddr, uint32_t rkey,
				  uint32_t max_inline)
{
	tx->qp = qp;
	tx->laddr = laddr;
	tx->lkey = lkey;
	tx->raddr = raddr;
	tx->rkey = rkey;
	tx->max_inline = max_inline;
	tx->post = osf_rdma_verbs_post;
}

static void osf_rdma_tx_use_sim(struct osf_rdma_tx *tx, int fd, uint64_t laddr)
{
	tx->sim_fd = fd;
	tx->laddr = laddr;
	tx->post = osf_rdma_sim_post;
}

// osf_rdma_tx_engine_push is the engine's transmit through the C poster,
// the lock held: 0, -1 for a corrupt ring, else the poster's errno.
static int osf_rdma_tx_engine_push(struct osf_rdma_tx *tx, uint64_t head, int fin)
{
	struct osf_rdma_wr wr[3];
	int n, rc;

	while ((n = osf_rdma_tx_next(tx, head, fin, wr)) > 0) {
		rc = tx->post(tx, wr, n);
		if (rc)
			return rc;
		osf_rdma_tx_commit(tx, wr, n);
		__atomic_add_fetch(&tx->engine_posts, 1, __ATOMIC_RELAXED);
	}
	return n < 0 ? -1 : 0;
}

// osf_rdma_tx_push_go is an application's thread's push of head (and
// FIN), as libosf.so's writers make it (tests).
static int osf_rdma_tx_push_go(struct osf_rdma_tx *tx, uint64_t head, int fin)
{
	uint32_t flags = fin ? 1u : 0u;

	return osf_rdma_tx_push(tx, __atomic_load_n(&tx->gen, __ATOMIC_ACQUIRE), tx->pid,
				&head, &flags, 1u);
}

// osf_rdma_rx_take_go is an application's thread's take of the
// connection's completions, as libosf.so's readers make it (tests).
static int osf_rdma_rx_take_go(struct osf_rdma_tx *tx)
{
	return tx->rx->take(tx, __atomic_load_n(&tx->gen, __ATOMIC_ACQUIRE), tx->pid);
}

static int osf_rdma_tx_next_go(const struct osf_rdma_tx *tx, uint64_t head, int fin,
			       struct osf_rdma_wr *wr)
{
	return osf_rdma_tx_next(tx, head, fin, wr);
}

static void osf_rdma_tx_commit_go(struct osf_rdma_tx *tx, const struct osf_rdma_wr *wr, int n)
{
	osf_rdma_tx_commit(tx, wr, n);
	__atomic_add_fetch(&tx->engine_posts, 1, __ATOMIC_RELAXED);
}

static int osf_rdma_tx_complete_go(struct osf_rdma_tx *tx, uint32_t seq)
{
	return osf_rdma_tx_complete(tx, seq);
}

static int osf_rdma_tx_signaled_go(uint32_t seq, int force)
{
	return osf_rdma_tx_signaled(seq, force);
}

// osf_rdma_wake_take is the engine's osf_wake_take (segment.h): every
// token waiting on sock, uncounted from tokens; 1 at the socket's end.
static int osf_rdma_wake_take(int sock, uint32_t *tokens)
{
	int end;

	(void)osf_wake_take(sock, tokens, UINT32_MAX, &end, recv);
	return end;
}

int osf_rdma_verbs_poll(struct osf_rdma_rx *rx, struct osf_rdma_wc *out, int n);
int osf_rdma_verbs_recv(struct osf_rdma_rx *rx, uint64_t wr_id);
int osf_rdma_sim_poll(struct osf_rdma_rx *rx, struct osf_rdma_wc *wc, int n);
int osf_rdma_sim_recv(struct osf_rdma_rx *rx, uint64_t wr_id);

static void osf_rdma_rx_init(struct osf_rdma_tx *tx, void *base, int side, int wake,
			     int wake_tx)
{
	struct osf_rdma_rx *rx = tx->rx;

	rx->hdr = osf_seg_hdr(base, tx->size);
	rx->side = side;
	rx->size = tx->size;
	rx->lowat = osf_seg_lowat(tx->size);
	rx->wake = wake;
	rx->wake_tx = wake_tx;
}

static void osf_rdma_rx_use_verbs(struct osf_rdma_tx *tx, void *cq, void *qp)
{
	tx->rx->cq = cq;
	tx->rx->qp = qp;
	tx->rx->post_recv = osf_rdma_verbs_recv;
	tx->rx->poll = osf_rdma_verbs_poll;
}

static void osf_rdma_rx_use_sim(struct osf_rdma_tx *tx, int fd, uint64_t ring)
{
	tx->rx->sim_fd = fd;
	tx->rx->sim_ring = ring;
	tx->rx->post_recv = osf_rdma_sim_recv;
	tx->rx->poll = osf_rdma_sim_poll;
}

// osf_rdma_rx_fill posts receives until the queue is full: 0, an errno,
// or -1 without a C receive poster (the Go link posts).
static int osf_rdma_rx_fill(struct osf_rdma_tx *tx)
{
	struct osf_rdma_rx *rx = tx->rx;
	int rc;

	if (!rx->post_recv)
		return -1;
	while (rx->recvs < OSF_RDMA_RQ_DEPTH) {
		rc = rx->post_recv(rx, osf_rdma_wrid(OSF_RDMA_WR_RECV, tx->id, rx->recv_seq));
		if (rc)
			return rc;
		rx->recv_seq++;
		rx->recvs++;
	}
	return 0;
}

static int osf_rdma_rx_engine_poll(struct osf_rdma_tx *tx)
{
	tx->rx->engine_due = 0; // it pumps after polling
	return osf_rdma_rx_poll(tx->rx, 0, &tx->rx->engine_wcs);
}

static int osf_rdma_rx_one_go(struct osf_rdma_tx *tx, uint64_t wr_id, uint32_t status,
			      uint32_t imm, int has_imm)
{
	struct osf_rdma_wc wc = {wr_id, status, imm, (uint32_t)has_imm, 0};

	__atomic_add_fetch(&tx->rx->engine_wcs, 1, __ATOMIC_RELAXED);
	return osf_rdma_rx_one(tx->rx, &wc);
}

// osf_rdma_credit_engine is the engine's credit for tail (tx's lock
// taken here): 0 when posted or not due, -1 when the send queue is full,
// else the poster's errno.
static int osf_rdma_credit_engine(struct osf_rdma_tx *tx, uint64_t tail, int force)
{
	int rc = 0;

	if (!osf_rdma_credit_due(tx->rx, tail, force))
		return 0;
	osf_rdma_tx_lock_spin(tx);
	if (osf_rdma_credit_due(tx->rx, tail, force))
		rc = osf_rdma_credit_post(tx->rx, tail);
	if (rc == 0)
		__atomic_add_fetch(&tx->engine_posts, 1, __ATOMIC_RELAXED);
	osf_rdma_tx_leave(tx->rx);
	return rc;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// txState is a stream's sending state, shared with the application's
// threads (sdp/rdma/tx.h: the one sending rule, in C). Its memory is C's
// (calloc'd, never freed, reused once retired): the application's threads
// read and write it. The engine holds its lock around everything it posts
// on the send queue and around the counts the rule reads.
type txState struct {
	p *C.struct_osf_rdma_tx
	// cpost: the engine posts data through the C poster too (a verbs
	// QP), not through its Link.
	cpost bool
}

// errSQFull means the send queue has no slot for the request: it is
// retried when completions free one.
var errSQFull = errors.New("rdma: send queue full")

// errNoTx means the C sending state could not be allocated.
var errNoTx = errors.New("rdma: no memory for the sending state")

// newTx allocates the sending state of connection id whose application
// sends into ring side of size bytes.
func newTx(id uint32, size uint32, side int) (*txState, error) {
	p := C.osf_rdma_tx_new()
	if p == nil {
		return nil, errNoTx
	}
	p.id = C.uint32_t(id)
	p.size = C.uint32_t(size)
	p.side = C.int32_t(side)
	p.bias = C.uint32_t(sdp.RingBias(size, side))
	p.max_chunk = C.uint32_t(size)
	return &txState{p: p}, nil
}

func (t *txState) word(w *C.uint32_t) *uint32 { return (*uint32)(unsafe.Pointer(w)) }

// lock takes the lock, spinning: an application's thread holds it for one
// chain of posts at most.
func (t *txState) lock() {
	for i := 0; !atomic.CompareAndSwapUint32(t.word(&t.p.lock), 0, 1); i++ {
		if i > 64 {
			runtime.Gosched()
		}
	}
}

func (t *txState) unlock() { atomic.StoreUint32(t.word(&t.p.lock), 0) }

// tryLock takes the lock if it is free.
func (t *txState) tryLock() bool { return atomic.CompareAndSwapUint32(t.word(&t.p.lock), 0, 1) }

// claim, begin and release are tx.h's osf_rdma_tx_claim, _begin and
// _release (Go's atomics are sequentially consistent): a data push takes
// the lock or hands its work to the holder, and a holder pushes once more
// when someone did.
func (t *txState) claim() bool {
	if t.tryLock() {
		return true
	}
	atomic.StoreUint32(t.word(&t.p.again), 1)
	return t.tryLock()
}

func (t *txState) begin() { atomic.StoreUint32(t.word(&t.p.again), 0) }

func (t *txState) release() bool {
	atomic.StoreUint32(t.word(&t.p.lock), 0)
	return atomic.LoadUint32(t.word(&t.p.again)) != 0
}

// callerPosting reports whether an application's thread may be posting
// right now (the lock is held while callers may post): it posts what it
// read, and a writer that finds the lock busy wakes the engine.
func (t *txState) callerPosting() bool {
	return atomic.LoadUint32(t.word(&t.p.lock)) != 0 && t.callersLive()
}

// The counts, read by the engine (exact under the lock, a recent value
// otherwise: the application's threads change sent and posted).
func (t *txState) sent() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.sent)))
}
func (t *txState) peerTail() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.peer_tail)))
}
func (t *txState) posted() uint32    { return atomic.LoadUint32(t.word(&t.p.posted)) }
func (t *txState) completed() uint32 { return atomic.LoadUint32(t.word(&t.p.completed)) }
func (t *txState) finSent() bool     { return atomic.LoadUint32(t.word(&t.p.fin_sent)) != 0 }

// sqFree returns the free send queue slots.
func (t *txState) sqFree() int {
	used := t.posted() - t.completed()
	if used >= sqDepth {
		return 0
	}
	return sqDepth - int(used)
}

// setSent records the bytes sent (tests).
func (t *txState) setSent(v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&t.p.sent)), v)
}

// setSimDone is what the stand-in's poster does for a chain whose
// request seq = v - 1 was signaled (tests).
func (t *txState) setSimDone(v uint32) { atomic.StoreUint32(t.word(&t.p.sim_done), v) }

// setPeerTail records the peer's credit; the lock held.
func (t *txState) setPeerTail(v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&t.p.peer_tail)), v)
}

// next decides the next chain to post (the lock held): how many of wr,
// 0 for none, -1 for a corrupt ring.
func (t *txState) next(head uint64, fin bool, wr *[3]C.struct_osf_rdma_wr) int {
	return int(C.osf_rdma_tx_next_go(t.p, C.uint64_t(head), b2i(fin), &wr[0]))
}

func (t *txState) commit(wr *[3]C.struct_osf_rdma_wr, n int) {
	C.osf_rdma_tx_commit_go(t.p, &wr[0], C.int(n))
}

// enginePush transmits with the C poster (the lock held): 0, -1 for a
// corrupt ring, else the poster's errno.
func (t *txState) enginePush(head uint64, fin bool) int {
	return int(C.osf_rdma_tx_engine_push(t.p, C.uint64_t(head), b2i(fin)))
}

// complete records a send completion (the lock held).
func (t *txState) complete(seq uint32) bool {
	return C.osf_rdma_tx_complete_go(t.p, C.uint32_t(seq)) == 0
}

// signaled is the rule's selective signalling.
func signaled(seq uint32, force bool) bool {
	return C.osf_rdma_tx_signaled_go(C.uint32_t(seq), b2i(force)) != 0
}

// useVerbs lets the application's threads (and the engine) post on qp:
// payloads from the registered region laddr/lkey of the sending ring to
// the peer's region raddr/rkey.
func (t *txState) useVerbs(qp *verbs.QP, laddr uint64, lkey uint32, raddr uint64, rkey uint32) {
	inl := min(qp.Cap().MaxInlineData, C.OSF_RDMA_INLINE)
	C.osf_rdma_tx_use_verbs(t.p, qp.Raw(), C.uint64_t(laddr), C.uint32_t(lkey),
		C.uint64_t(raddr), C.uint32_t(rkey), C.uint32_t(inl))
	t.cpost = true
}

// simChunk bounds a stand-in message: a unix stream socket takes a
// message in one buffer whole or not at all, and 16 KiB is one buffer
// whatever the socket's SO_SNDBUF (tx.c osf_rdma_sim_post).
const simChunk = 16<<10 - 3*simHdr

// useSim lets the application's threads post on the stand-in's socket fd
// (the engine keeps posting through its link, which queues what the
// socket does not take).
func (t *txState) useSim(fd int, laddr uint64) {
	C.osf_rdma_tx_use_sim(t.p, C.int(fd), C.uint64_t(laddr))
	t.p.max_chunk = simChunk
}

// setSimBusy tells the application's threads whether the stand-in's link
// has messages queued (or is down): they must not write ahead of them.
func (t *txState) setSimBusy(busy bool) {
	atomic.StoreUint32(t.word(&t.p.sim_busy), uint32(b2u(busy)))
}

// publish makes the state findable by the C data path through the
// segment memfd's identity, for this process's threads, and lets them post.
func (t *txState) publish(dev, ino uint64) {
	t.p.pid = C.int32_t(unix.Getpid())
	C.osf_rdma_tx_publish(t.p, C.uint64_t(dev), C.uint64_t(ino))
	atomic.StoreUint32(t.word(&t.p.live), 1)
}

// stopCallers makes the application's threads leave everything to the
// engine from now on (the connection closes, or failed).
func (t *txState) stopCallers() { atomic.StoreUint32(t.word(&t.p.live), 0) }

// callersLive reports whether the application's threads may post.
func (t *txState) callersLive() bool { return atomic.LoadUint32(t.word(&t.p.live)) != 0 }

// retire waits for any application's thread that is posting, stops them
// for good and keeps the memory for another connection. The state must
// not be used afterwards.
func (t *txState) retire() {
	if t.p != deadTx {
		C.osf_rdma_tx_retire(t.p)
		t.p = deadTx
		t.cpost = false
	}
}

// counts returns the chains posted by the application's threads and by
// the engine, and the pushes that left bytes to the engine.
func (t *txState) counts() (caller, engine, left uint64) {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.caller_posts))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.engine_posts))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.caller_left)))
}

func b2i(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// deadTx stands in for a retired state: nothing can post through it
// (live 0, no poster), and what a released stream still reads is zero.
var deadTx = func() *C.struct_osf_rdma_tx {
	p := C.osf_rdma_tx_new()
	if p == nil {
		panic("rdma: out of memory")
	}
	return p
}()

// bumpPosted counts one send work request the engine posted (the lock
// held).
func (t *txState) bumpPosted() { atomic.AddUint32(t.word(&t.p.posted), 1) }

// pushVia transmits through link (a Link without a C poster: the
// stand-in, test fakes), the lock held: the same chains the C poster
// would post, one request at a time. It returns -1 for a corrupt ring.
func (t *txState) pushVia(link Link, head uint64, fin bool) (int, error) {
	var wr [3]C.struct_osf_rdma_wr
	for {
		n := t.next(head, fin, &wr)
		if n <= 0 {
			return n, nil
		}
		for i := 0; i < n; i++ {
			w := &wr[i]
			id := verbs.WRID(w.wr_id)
			var err error
			if w.len == 0 {
				err = link.PostImm(id, uint32(w.imm), w.signaled != 0)
			} else {
				err = link.PostWrite(id, int(w.ring), uint32(w.off), uint32(w.len), uint32(w.imm), w.with_imm != 0, w.signaled != 0)
			}
			if err != nil {
				return 0, err
			}
		}
		t.commit(&wr, n)
	}
}

// ringAddr is the address of ring r's region in seg (the engine's
// mapping).
func ringAddr(seg *sdp.Segment, r int) uint64 {
	return uint64(uintptr(unsafe.Pointer(&seg.RingData(r)[0])))
}

// txWR is a work request of the rule, in Go (tests).
type txWR struct {
	ID                     verbs.WRID
	Off, Len, Imm          uint32
	WithImm, Signaled, Inl bool
	Ring                   int
}

// plan is next, in Go types (tests): the chain the rule would post now
// and its length, 0 for none, -1 for a corrupt ring.
func (t *txState) plan(head uint64, fin bool) ([]txWR, int) {
	var wr [3]C.struct_osf_rdma_wr
	n := t.next(head, fin, &wr)
	var out []txWR
	for i := 0; i < n; i++ {
		w := &wr[i]
		out = append(out, txWR{ID: verbs.WRID(w.wr_id), Off: uint32(w.off), Len: uint32(w.len), Imm: uint32(w.imm),
			WithImm: w.with_imm != 0, Signaled: w.signaled != 0, Inl: w.inl != 0, Ring: int(w.ring)})
	}
	return out, n
}

// push is an application's thread's push of head (and FIN) through the
// C poster (tests): true when nothing is left to the engine, as
// osf_rdma_tx_push reports it.
func (t *txState) push(head uint64, fin bool) bool {
	return C.osf_rdma_tx_push_go(t.p, C.uint64_t(head), b2i(fin)) != 0
}

// commitPlan records the chain plan returned as posted (tests).
func (t *txState) commitPlan(head uint64, fin bool) {
	var wr [3]C.struct_osf_rdma_wr
	if n := t.next(head, fin, &wr); n > 0 {
		t.commit(&wr, n)
	}
}

// The receiving half (rx.h): the rule is C, shared with the
// application's threads; the engine calls it through these.

// rxEvent is what the rule left to the engine (struct osf_rdma_ev).
type rxEvent struct {
	what  uint32
	value uint32
	wc    verbs.WC
	why   string
}

// Events (OSF_RDMA_EV_*).
const (
	evBroken    = C.OSF_RDMA_EV_BROKEN
	evClose     = C.OSF_RDMA_EV_CLOSE
	evSent      = C.OSF_RDMA_EV_SENT
	evViolation = C.OSF_RDMA_EV_VIOLATION
	evFail      = C.OSF_RDMA_EV_FAIL
)

func (t *txState) rx() *C.struct_osf_rdma_rx { return t.p.rx }

// rxInit points the rule at the engine's mapping of the segment and the
// engine's ends of the wake sockets.
func (t *txState) rxInit(seg *sdp.Segment, side, wake, wakeTx int) {
	C.osf_rdma_rx_init(t.p, unsafe.Pointer(&seg.Mem[0]), C.int(side), C.int(wake), C.int(wakeTx))
}

// rxUseVerbs makes the rule take completions from cq and post receives on qp.
func (t *txState) rxUseVerbs(cq *verbs.CQ, qp *verbs.QP) {
	C.osf_rdma_rx_use_verbs(t.p, cq.Raw(), qp.Raw())
}

// rxUseSim makes the rule read the stand-in's socket fd, placing payloads
// into the ring at ring.
func (t *txState) rxUseSim(fd int, ring uint64) {
	C.osf_rdma_rx_use_sim(t.p, C.int(fd), C.uint64_t(ring))
}

// chanUse hands the connection's own channel to the rule (rx.h chan_fd):
// fd, a verbs completion channel ch (nil: the stand-in's socket), now
// registered in the engine's epoll ep for set, the engine wanting want.
// An application's thread that waits for data sleeps on it, and the
// engine's epoll leaves it alone meanwhile.
func (t *txState) chanUse(fd int, ch unsafe.Pointer, ep int, want, set uint32) {
	C.osf_rdma_chan_use(t.p, C.int(fd), ch, C.int(ep), C.uint32_t(want), C.uint32_t(set))
}

// chanWant sets the events the engine wants on the channel and returns
// those registered now (none while a thread sleeps on it).
func (t *txState) chanWant(want uint32) uint32 {
	return uint32(C.osf_rdma_chan_want(t.p, C.uint32_t(want)))
}

// chanEngineArm arms the CQ for the engine through the rule (no system
// call when it is armed already); -1 when the channel is not the rule's,
// else ibv_req_notify_cq's result.
func (t *txState) chanEngineArm() int { return int(C.osf_rdma_chan_engine_arm(t.p)) }

// callerTake takes the connection's completions as an application's
// thread does (rx.c osf_rdma_rx_take): how many, or its negative answer.
func (t *txState) callerTake() int { return int(C.osf_rdma_rx_take_go(t.p)) }

// setArmAll says whether the engine waits for a completion of its own
// sends: the CQ is armed for every completion then, else for the peer's
// solicited immediates only (rx.c osf_rdma_chan_arm_all).
func (t *txState) setArmAll(all bool) { C.osf_rdma_chan_arm_all(t.p, b2i(all)) }

// chanEngineDrain reads the channel's events for the engine, unless a
// thread sleeps on it; false when the channel is not the rule's.
func (t *txState) chanEngineDrain() bool { return C.osf_rdma_chan_engine_drain(t.p) != 0 }

// callerWCs counts the completions the application's threads took
// (OSF_RDMA_RX=caller): signs of the peer's life the engine does not see.
func (t *txState) callerWCs() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.rx.caller_wcs)))
}

// chanSleeps counts the sleeps of application's threads on the channel.
func (t *txState) chanSleeps() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.rx.chan_sleeps)))
}

// chanHeld reports whether an application's thread counts itself asleep
// on the channel (rx.h sleepers), or the channel is lent to the
// application's waiters (segment.h chan_lent): the connection's completion
// events then wake that thread, or wait for the next, not the engine; an
// epoll item keeps the channel armed between the program's waits
// (relaxed: the engine's look only).
func (t *txState) chanHeld() bool {
	return atomic.LoadUint32(t.word(&t.p.rx.sleepers)) != 0 || t.chanLent()
}

// chanLent reports whether the channel is lent to the application's
// waiters (segment.h chan_lent; relaxed).
func (t *txState) chanLent() bool {
	rx := t.p.rx
	return rx.hdr != nil && atomic.LoadUint32(t.word(&rx.hdr.side[1-rx.side].chan_lent)) != 0
}

// chanReclaim takes a lent channel back into the engine's epoll.
func (t *txState) chanReclaim() { C.osf_rdma_chan_reclaim(t.p) }

// wakeTake reads every token waiting on sock, if it is open, without
// blocking, uncounts them from tokens (a word of the segment: mmap'd
// memory) with the wake protocol's one implementation (segment.h
// osf_wake_take), and reports whether it reached the socket's end.
func wakeTake(sock int, tokens *uint32) bool {
	if sock < 0 {
		return false
	}
	return C.osf_rdma_wake_take(C.int(sock), (*C.uint32_t)(unsafe.Pointer(tokens))) != 0
}

// live reports whether the state has not been retired.
func (t *txState) live() bool { return t.p != deadTx }

// setKick gives the application's threads the engine's eventfd, which
// they write when they leave it an event, and its looks word.
func (t *txState) setKick(fd int, looks looksWord) {
	t.p.rx.kick = C.int32_t(fd)
	t.p.rx.eng_looks = looks.p
}

// looksWord is the engine's word that tells the application's threads it
// will look at every stream within about a second (rx.h eng_looks): a
// writer about to sleep for room then need not kick it. C memory, never
// freed (a retired struct may still point to it); nil-safe.
type looksWord struct{ p *C.uint32_t }

func newLooksWord() looksWord { return looksWord{(*C.uint32_t)(C.calloc(1, 4))} }

// set publishes whether the engine's coming sleep is bounded by heldLook
// (at most), or false when it wakes.
func (w looksWord) set(bounded bool) {
	if w.p == nil {
		return
	}
	v := uint32(0)
	if bounded {
		v = 1
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(w.p)), v)
}

// rxLock takes rx_lock, spinning (an application's thread holds it for
// one batch of completions), rxTryLock only if free.
func (t *txState) rxTryLock() bool {
	return atomic.CompareAndSwapUint32(t.word(&t.p.rx.lock), 0, 1)
}

func (t *txState) rxLock() {
	for i := 0; !t.rxTryLock(); i++ {
		if i > 64 {
			runtime.Gosched()
		}
	}
}

func (t *txState) rxUnlock() { atomic.StoreUint32(t.word(&t.p.rx.lock), 0) }

// rxFill posts receives until the queue is full through the C poster:
// false when there is none (the Go link posts).
func (t *txState) rxFill() (bool, error) {
	switch rc := C.osf_rdma_rx_fill(t.p); {
	case rc < 0:
		return false, nil
	case rc > 0:
		return true, fmt.Errorf("rdma: post receive: %w", unix.Errno(rc))
	}
	return true, nil
}

// countRecv counts a receive the Go link posted.
func (t *txState) countRecv() {
	t.p.rx.recv_seq++
	t.p.rx.recvs++
}

// rxPoll takes and applies the device's completions, rx_lock held: how
// many.
func (t *txState) rxPoll() int { return int(C.osf_rdma_rx_engine_poll(t.p)) }

// rxOne applies a completion the Go link made, rx_lock held.
func (t *txState) rxOne(wc *verbs.WC) {
	C.osf_rdma_rx_one_go(t.p, C.uint64_t(wc.WRID), C.uint32_t(wc.Status), C.uint32_t(wc.ImmData), b2i(wc.HasImm))
}

// event returns the event waiting for the engine and clears it, rx_lock
// held; nil when none.
func (t *txState) event() *rxEvent {
	ev := &t.p.rx.ev
	if ev.what == 0 {
		return nil
	}
	e := &rxEvent{what: uint32(ev.what), value: uint32(ev.value),
		wc: verbs.WC{WRID: uint64(ev.wc.wr_id), Status: verbs.WCStatus(ev.wc.status),
			ImmData: uint32(ev.wc.imm), HasImm: ev.wc.has_imm != 0},
		why: C.GoString(&ev.why[0])}
	ev.what = 0
	return e
}

// rxDown tells the rule that the link is down or the stream dead: receive
// completions are only counted from now on.
func (t *txState) rxDown() { atomic.StoreUint32(t.word(&t.p.rx.down), 1) }

// dropWake makes the rule forget fd, one of the wake socket ends the
// engine is about to close (rx_lock held).
func (t *txState) dropWake(fd int) {
	if int(t.p.rx.wake) == fd {
		t.p.rx.wake = -1
	}
	if int(t.p.rx.wake_tx) == fd {
		t.p.rx.wake_tx = -1
	}
}

// What the rule knows (recent values, exact under rx_lock).
func (t *txState) rxHead() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.rx.head)))
}
func (t *txState) credited() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.rx.credited)))
}
func (t *txState) setCredited(v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&t.p.rx.credited)), v)
}
func (t *txState) peerFin() bool { return atomic.LoadUint32(t.word(&t.p.rx.peer_fin)) != 0 }
func (t *txState) recvs() int    { return int(atomic.LoadUint32(t.word(&t.p.rx.recvs))) }
func (t *txState) bytesIn() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.rx.bytes_in)))
}

// rxCounts returns the completions taken by the application's threads
// and by the engine, and the credits the application's threads posted.
func (t *txState) rxCounts() (caller, engine, credits uint64) {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.rx.caller_wcs))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.rx.engine_wcs))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.p.rx.caller_credits)))
}

// waitCounts returns what the application's threads' waits cost the
// connection (rx.h): takes that held rx_lock, those that found nothing,
// epoll_ctl calls on the engine's set for its channel, CQ arms.
func (t *txState) waitCounts() (takes, empty, ctls, arms uint64) {
	rx := t.p.rx
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&rx.caller_takes))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&rx.caller_empty))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&rx.chan_ctls))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&rx.cq_arms)))
}

// creditC posts the credit for tail through the C poster when due: 0,
// -1 when the send queue is full, else the poster's errno.
func (t *txState) creditC(tail uint64, force bool) int {
	return int(C.osf_rdma_credit_engine(t.p, C.uint64_t(tail), b2i(force)))
}

// creditDue is the rule's osf_rdma_credit_due.
func (t *txState) creditDue(tail uint64, force bool) bool {
	return C.osf_rdma_credit_due(t.p.rx, C.uint64_t(tail), b2i(force)) != 0
}
