package verbs

// A fake libibverbs provider for tests. ibv_poll_cq, ibv_req_notify_cq,
// ibv_post_send and ibv_post_recv are inline calls through
// cq->context->ops / qp->context->ops, so a hand-built context whose ops
// record their arguments lets the tests check the shim's work request and
// completion translation (opcodes, byte order of immediates, empty SGEs)
// on machines without an RDMA device. Nothing outside tests uses it.

/*
#include "shim.h"

struct osf_fake_send {
	uint64_t wr_id;
	int num_sge;
	int opcode;
	unsigned int send_flags;
	uint32_t imm_be;      // raw wr.imm_data, network byte order
	uint64_t remote_addr;
	uint32_t rkey;
	uint64_t sge_addr;
	uint32_t sge_len;
	uint32_t sge_lkey;
	int has_next;
};

struct osf_fake {
	struct ibv_context ctx;  // first: ops find the fake from ->context
	struct ibv_cq cq;
	struct ibv_qp qp;
	struct ibv_wc pending[64];
	int npending;
	int poll_fail;           // ibv_poll_cq returns this when nonzero
	int post_fail;           // post_send/post_recv return this when nonzero
	struct osf_fake_send send;
	int nsend;
	struct osf_fake_send recv;
	int nrecv;
	int notify_solicited;
	int nnotify;
};

static int osf_fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	struct osf_fake *f = (struct osf_fake *)cq->context;
	int i, k;

	if (f->poll_fail)
		return f->poll_fail;
	k = n < f->npending ? n : f->npending;
	for (i = 0; i < k; i++)
		wc[i] = f->pending[i];
	memmove(f->pending, f->pending + k, (f->npending - k) * sizeof f->pending[0]);
	f->npending -= k;
	return k;
}

static int osf_fake_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
	struct osf_fake *f = (struct osf_fake *)cq->context;

	f->notify_solicited = solicited_only;
	f->nnotify++;
	return f->post_fail;
}

static void osf_fake_record_sge(struct osf_fake_send *s, struct ibv_sge *sg, int n) {
	s->num_sge = n;
	if (n > 0 && sg) {
		s->sge_addr = sg->addr;
		s->sge_len = sg->length;
		s->sge_lkey = sg->lkey;
	}
}

static int osf_fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			      struct ibv_send_wr **bad) {
	struct osf_fake *f = (struct osf_fake *)qp->context;
	struct osf_fake_send *s = &f->send;

	memset(s, 0, sizeof *s);
	s->wr_id = wr->wr_id;
	s->opcode = wr->opcode;
	s->send_flags = wr->send_flags;
	s->imm_be = wr->imm_data;
	s->remote_addr = wr->wr.rdma.remote_addr;
	s->rkey = wr->wr.rdma.rkey;
	s->has_next = wr->next != NULL;
	osf_fake_record_sge(s, wr->sg_list, wr->num_sge);
	f->nsend++;
	if (f->post_fail) {
		*bad = wr;
		return f->post_fail;
	}
	return 0;
}

static int osf_fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			      struct ibv_recv_wr **bad) {
	struct osf_fake *f = (struct osf_fake *)qp->context;
	struct osf_fake_send *s = &f->recv;

	memset(s, 0, sizeof *s);
	s->wr_id = wr->wr_id;
	s->has_next = wr->next != NULL;
	osf_fake_record_sge(s, wr->sg_list, wr->num_sge);
	f->nrecv++;
	if (f->post_fail) {
		*bad = wr;
		return f->post_fail;
	}
	return 0;
}

static struct osf_fake *osf_fake_new(void) {
	struct osf_fake *f = calloc(1, sizeof *f);

	if (!f)
		return NULL;
	f->ctx.ops.poll_cq = osf_fake_poll_cq;
	f->ctx.ops.req_notify_cq = osf_fake_req_notify_cq;
	f->ctx.ops.post_send = osf_fake_post_send;
	f->ctx.ops.post_recv = osf_fake_post_recv;
	f->cq.context = &f->ctx;
	f->cq.cqe = 8;
	f->qp.context = &f->ctx;
	f->qp.qp_num = 0x1234;
	return f;
}

// osf_fake_add_wc queues a completion; imm is in host order and stored in
// network order, as a provider would.
static int osf_fake_add_wc(struct osf_fake *f, uint64_t wr_id, int status,
			   int opcode, uint32_t byte_len, uint32_t imm,
			   int with_imm, uint32_t qp_num) {
	struct ibv_wc *wc;

	if (f->npending == 64)
		return -1;
	wc = &f->pending[f->npending++];
	memset(wc, 0, sizeof *wc);
	wc->wr_id = wr_id;
	wc->status = (enum ibv_wc_status)status;
	wc->opcode = (enum ibv_wc_opcode)opcode;
	wc->byte_len = byte_len;
	wc->qp_num = qp_num;
	if (with_imm) {
		wc->wc_flags = IBV_WC_WITH_IMM;
		wc->imm_data = htobe32(imm);
	} else {
		wc->imm_data = htobe32(0xffffffff); // garbage the shim must ignore
	}
	return 0;
}
*/
import "C"

import (
	"encoding/binary"
	"unsafe"
)

// fakeProvider owns one fake context with a CQ and a QP.
type fakeProvider struct {
	f *C.struct_osf_fake
}

// fakeSend is what the fake provider saw in the last posted work request.
type fakeSend struct {
	WRID       uint64
	NumSGE     int
	Opcode     WROpcode
	Flags      SendFlags
	ImmWire    [4]byte // the immediate as it would go on the wire
	RemoteAddr uint64
	RKey       uint32
	SGE        SGE
	HasNext    bool
}

func newFakeProvider() *fakeProvider {
	f := C.osf_fake_new()
	if f == nil {
		panic("fake provider: out of memory")
	}
	return &fakeProvider{f: f}
}

// cq returns a CQ over the fake; release it with releaseCQ, not Close.
func (p *fakeProvider) cq() *CQ {
	scratch := (*C.struct_osf_wc)(C.calloc(C.OSF_POLL_BATCH, C.size_t(unsafe.Sizeof(C.struct_osf_wc{}))))
	return &CQ{cq: &p.f.cq, ctx: &Context{}, scratch: scratch}
}

func (p *fakeProvider) releaseCQ(q *CQ) {
	C.free(unsafe.Pointer(q.scratch))
	q.scratch = nil
	q.cq = nil
}

// qp returns a QP over the fake; drop it without Close.
func (p *fakeProvider) qp() *QP {
	return &QP{qp: &p.f.qp, num: uint32(p.f.qp.qp_num)}
}

func (p *fakeProvider) addWC(wc WC) bool {
	imm := C.int(0)
	if wc.HasImm {
		imm = 1
	}
	return C.osf_fake_add_wc(p.f, C.uint64_t(wc.WRID), C.int(wc.Status), C.int(wc.Opcode),
		C.uint32_t(wc.ByteLen), C.uint32_t(wc.ImmData), imm, C.uint32_t(wc.QPNum)) == 0
}

func (p *fakeProvider) setPollFail(rc int) { p.f.poll_fail = C.int(rc) }
func (p *fakeProvider) setPostFail(rc int) { p.f.post_fail = C.int(rc) }
func (p *fakeProvider) pending() int       { return int(p.f.npending) }
func (p *fakeProvider) sends() int         { return int(p.f.nsend) }
func (p *fakeProvider) recvs() int         { return int(p.f.nrecv) }
func (p *fakeProvider) notifies() (n int, solicited bool) {
	return int(p.f.nnotify), p.f.notify_solicited != 0
}

func convertFakeSend(s *C.struct_osf_fake_send) fakeSend {
	out := fakeSend{
		WRID:       uint64(s.wr_id),
		NumSGE:     int(s.num_sge),
		Opcode:     WROpcode(s.opcode),
		Flags:      SendFlags(s.send_flags),
		RemoteAddr: uint64(s.remote_addr),
		RKey:       uint32(s.rkey),
		SGE:        SGE{Addr: uint64(s.sge_addr), Length: uint32(s.sge_len), LKey: uint32(s.sge_lkey)},
		HasNext:    s.has_next != 0,
	}
	// imm_be holds the bytes in memory (wire) order; read them as such.
	binary.NativeEndian.PutUint32(out.ImmWire[:], uint32(s.imm_be))
	return out
}

func (p *fakeProvider) lastSend() fakeSend { return convertFakeSend(&p.f.send) }
func (p *fakeProvider) lastRecv() fakeSend { return convertFakeSend(&p.f.recv) }

func (p *fakeProvider) free() {
	C.free(unsafe.Pointer(p.f))
	p.f = nil
}

// Fake is the fake provider for other packages' tests (sdp/rdma's C rule
// arms, polls and posts through the same inline verbs calls): one CQ and
// one QP over a context whose ops record what they were asked.
type Fake struct {
	p  *fakeProvider
	cq *CQ
}

// NewFake makes a fake CQ and QP; Free releases them.
func NewFake() *Fake {
	p := newFakeProvider()
	return &Fake{p: p, cq: p.cq()}
}

func (f *Fake) CQ() *CQ { return f.cq }
func (f *Fake) QP() *QP { return f.p.qp() }

// AddWC queues a completion for the CQ's next poll.
func (f *Fake) AddWC(wc WC) bool { return f.p.addWC(wc) }

// Notifies reports how often the CQ was armed, and whether the last arm
// asked for solicited completions only.
func (f *Fake) Notifies() (n int, solicitedOnly bool) { return f.p.notifies() }

// LastSend reports the opcode and flags of the first work request of the
// last chain posted.
func (f *Fake) LastSend() (WROpcode, SendFlags) {
	s := f.p.lastSend()
	return s.Opcode, s.Flags
}

func (f *Fake) Free() {
	f.p.releaseCQ(f.cq)
	f.p.free()
}
