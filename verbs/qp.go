package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// QPConfig sizes a reliable-connected queue pair for CMID.CreateQP.
type QPConfig struct {
	SendCQ *CQ // completions of posted sends, writes and reads; required
	RecvCQ *CQ // completions of posted receives; required (may equal SendCQ)

	MaxSendWR uint32 // outstanding send work requests; required
	MaxRecvWR uint32 // outstanding receive work requests; required
	// MaxSendSGE and MaxRecvSGE are scatter/gather entries per request;
	// zero means 1 (the Post methods use at most one).
	MaxSendSGE uint32
	MaxRecvSGE uint32
	// MaxInlineData is the largest payload that may be posted with
	// SendInline; the device may grant more (see QP.Cap).
	MaxInlineData uint32
	// SignalAll makes every send work request generate a completion,
	// whatever the Post call's signaled flag says.
	SignalAll bool
}

// QPCap is what the device actually granted for a QP; each value is at
// least what QPConfig asked for.
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QP is a reliable-connected queue pair created on a CMID with
// rdma_create_qp. librdmacm moves it through its states as the connection
// is made (INIT on creation, so receives may be posted at once; RTR/RTS on
// connect or accept; ERR on disconnect).
//
// The Post methods are safe for concurrent use (the provider serialises
// them) and never block. Close destroys the QP (as rdma_destroy_qp does); posted
// work requests that have not completed are lost, so disconnect and drain
// first. CMID.Close closes the id's QP if it is still open. A second Close
// returns ErrClosed. Close must not run concurrently with other methods.
type QP struct {
	qp     *C.struct_ibv_qp
	id     *CMID
	pd     *PD
	sendCQ *CQ
	recvCQ *CQ
	cap    QPCap
	num    uint32
}

// QPState is the state of a queue pair (ibv_qp_state).
type QPState int

// Queue pair states.
const (
	QPReset   QPState = C.IBV_QPS_RESET
	QPInit    QPState = C.IBV_QPS_INIT
	QPRTR     QPState = C.IBV_QPS_RTR
	QPRTS     QPState = C.IBV_QPS_RTS
	QPSQD     QPState = C.IBV_QPS_SQD
	QPSQE     QPState = C.IBV_QPS_SQE
	QPErr     QPState = C.IBV_QPS_ERR
	QPUnknown QPState = C.IBV_QPS_UNKNOWN
)

var qpStateNames = map[QPState]string{
	QPReset:   "RESET",
	QPInit:    "INIT",
	QPRTR:     "RTR",
	QPRTS:     "RTS",
	QPSQD:     "SQD",
	QPSQE:     "SQE",
	QPErr:     "ERR",
	QPUnknown: "UNKNOWN",
}

// String returns the state's short name, e.g. "RTS".
func (s QPState) String() string {
	if n, ok := qpStateNames[s]; ok {
		return n
	}
	return "QPState(" + strconv.Itoa(int(s)) + ")"
}

// CanReceive reports whether receives posted in this state will be
// consumed by arriving messages (RTR and later, short of ERR).
func (s QPState) CanReceive() bool { return s == QPRTR || s == QPRTS || s == QPSQD || s == QPSQE }

// CanSend reports whether sends posted in this state are executed (RTS).
func (s QPState) CanSend() bool { return s == QPRTS }

// Failed reports whether the QP is in the error state: every posted and
// future work request completes with WCWRFlushErr.
func (s QPState) Failed() bool { return s == QPErr }

// CreateQP creates the id's RC queue pair in pd with rdma_create_qp. The id
// must be bound to a device (after ResolveAddr's ADDR_RESOLVED event, or a
// connection request's new id), and pd, the CQs and the id must belong to
// the same device. An id has at most one QP. It does not block on the
// network.
func (id *CMID) CreateQP(pd *PD, cfg QPConfig) (*QP, error) {
	if id == nil || id.id == nil {
		return nil, closedError("create qp")
	}
	if pd == nil || pd.pd == nil || cfg.SendCQ == nil || cfg.SendCQ.cq == nil ||
		cfg.RecvCQ == nil || cfg.RecvCQ.cq == nil || cfg.MaxSendWR == 0 || cfg.MaxRecvWR == 0 {
		return nil, opError("create qp", unix.EINVAL)
	}
	if id.qp != nil {
		return nil, opError("create qp: id already has a qp", unix.EEXIST)
	}
	if id.id.verbs == nil {
		return nil, opError("create qp: id not bound to a device", unix.EINVAL)
	}
	if pd.pd.context != id.id.verbs {
		return nil, opError("create qp: pd is on another device", unix.EINVAL)
	}
	var attr C.struct_ibv_qp_init_attr
	attr.send_cq = cfg.SendCQ.cq
	attr.recv_cq = cfg.RecvCQ.cq
	attr.qp_type = C.IBV_QPT_RC
	attr.cap.max_send_wr = C.uint32_t(cfg.MaxSendWR)
	attr.cap.max_recv_wr = C.uint32_t(cfg.MaxRecvWR)
	attr.cap.max_send_sge = C.uint32_t(max(cfg.MaxSendSGE, 1))
	attr.cap.max_recv_sge = C.uint32_t(max(cfg.MaxRecvSGE, 1))
	attr.cap.max_inline_data = C.uint32_t(cfg.MaxInlineData)
	if cfg.SignalAll {
		attr.sq_sig_all = 1
	}
	if rc, err := C.rdma_create_qp(id.id, pd.pd, &attr); rc != 0 {
		return nil, opError("create qp", errnoOf(err, unix.EINVAL))
	}
	qp := &QP{
		qp:     id.id.qp,
		id:     id,
		pd:     pd,
		sendCQ: cfg.SendCQ,
		recvCQ: cfg.RecvCQ,
		num:    uint32(id.id.qp.qp_num),
		cap: QPCap{
			MaxSendWR:     uint32(attr.cap.max_send_wr),
			MaxRecvWR:     uint32(attr.cap.max_recv_wr),
			MaxSendSGE:    uint32(attr.cap.max_send_sge),
			MaxRecvSGE:    uint32(attr.cap.max_recv_sge),
			MaxInlineData: uint32(attr.cap.max_inline_data),
		},
	}
	id.qp = qp
	pd.children.Add(1)
	return qp, nil
}

// Num returns the QP number (also available after Close).
func (qp *QP) Num() uint32 { return qp.num }

// Cap returns the capacities the device granted.
func (qp *QP) Cap() QPCap { return qp.cap }

// Raw returns the struct ibv_qp * itself, for C code of this process that
// posts on the QP (sdp/rdma tx.c: the application's threads post their
// writes). It stays valid until Close; nil once closed.
func (qp *QP) Raw() unsafe.Pointer {
	if qp == nil {
		return nil
	}
	return unsafe.Pointer(qp.qp)
}

// State queries the QP's current state; it does not block.
func (qp *QP) State() (QPState, error) {
	if qp == nil || qp.qp == nil {
		return QPUnknown, closedError("query qp")
	}
	var st C.int
	if rc := C.osf_query_qp_state(qp.qp, &st); rc != 0 {
		return QPUnknown, opError("query qp", unix.Errno(rc))
	}
	return QPState(st), nil
}

// WROpcode is the operation of a send work request (ibv_wr_opcode).
type WROpcode int

// Send work request opcodes.
const (
	OpWrite    WROpcode = C.IBV_WR_RDMA_WRITE
	OpWriteImm WROpcode = C.IBV_WR_RDMA_WRITE_WITH_IMM
	OpSend     WROpcode = C.IBV_WR_SEND
	OpSendImm  WROpcode = C.IBV_WR_SEND_WITH_IMM
	OpRead     WROpcode = C.IBV_WR_RDMA_READ
)

var wrOpcodeNames = map[WROpcode]string{
	OpWrite:    "RDMA_WRITE",
	OpWriteImm: "RDMA_WRITE_WITH_IMM",
	OpSend:     "SEND",
	OpSendImm:  "SEND_WITH_IMM",
	OpRead:     "RDMA_READ",
}

// String returns the opcode's name without the IBV_WR_ prefix.
func (o WROpcode) String() string {
	if s, ok := wrOpcodeNames[o]; ok {
		return s
	}
	return "WROpcode(" + strconv.Itoa(int(o)) + ")"
}

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags uint

// Send flags.
const (
	// SendSignaled asks for a completion even when the QP does not signal
	// all requests. Unsignaled requests still use a send queue slot until
	// a later signaled request on the same QP completes.
	SendSignaled SendFlags = C.IBV_SEND_SIGNALED
	// SendFence waits for earlier RDMA READs to complete first.
	SendFence SendFlags = C.IBV_SEND_FENCE
	// SendSolicited raises a solicited event at the receiver (SEND and
	// WRITE WITH IMMEDIATE only).
	SendSolicited SendFlags = C.IBV_SEND_SOLICITED
	// SendInline copies the payload into the work request at post time, so
	// the buffer may be reused at once and needs no LKey; the length must
	// not exceed QP.Cap().MaxInlineData.
	SendInline SendFlags = C.IBV_SEND_INLINE
)

// SendWR is one send work request for QP.PostSend.
type SendWR struct {
	ID         uint64   // returned as WC.WRID
	Opcode     WROpcode // OpWriteImm, OpWrite, OpSend, OpSendImm or OpRead
	Local      SGE      // local buffer; zero Length posts no data
	RemoteAddr uint64   // target address for OpWrite*, source for OpRead
	RKey       uint32   // remote key for RemoteAddr
	Imm        uint32   // immediate data (host byte order) for *Imm opcodes
	Flags      SendFlags
}

// PostSend posts one send work request without blocking. It fails with an
// error wrapping unix.ENOMEM when the send queue is full and unix.EINVAL
// for a malformed request; failures of the request itself are reported
// later as a WC with a non-success Status.
func (qp *QP) PostSend(wr SendWR) error {
	if qp == nil || qp.qp == nil {
		return closedError("post send")
	}
	switch wr.Opcode {
	case OpWrite, OpWriteImm, OpSend, OpSendImm, OpRead:
	default:
		return opError("post send: bad opcode "+wr.Opcode.String(), unix.EINVAL)
	}
	rc := C.osf_post_send(qp.qp, C.uint64_t(wr.ID),
		C.uint64_t(wr.Local.Addr), C.uint32_t(wr.Local.Length), C.uint32_t(wr.Local.LKey),
		C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey), C.uint32_t(wr.Imm),
		C.int(wr.Opcode), C.uint(wr.Flags))
	if rc != 0 {
		return opError("post send", unix.Errno(rc))
	}
	return nil
}

// PostWriteImm posts an RDMA WRITE WITH IMMEDIATE without blocking: it
// writes local (which may be empty) to remoteAddr in the peer's region with
// key rkey, then consumes one receive posted on the peer's QP, whose
// completion has Opcode WCRecvRDMAWithImm, HasImm set, ImmData imm (host
// byte order on both sides) and ByteLen local.Length. signaled asks for a
// local completion with wrID. Errors are as for PostSend.
func (qp *QP) PostWriteImm(wrID uint64, local SGE, remoteAddr uint64, rkey uint32, imm uint32, signaled bool) error {
	if qp == nil || qp.qp == nil {
		return closedError("post write imm")
	}
	var flags C.uint
	if signaled {
		flags = C.IBV_SEND_SIGNALED
	}
	rc := C.osf_post_send(qp.qp, C.uint64_t(wrID),
		C.uint64_t(local.Addr), C.uint32_t(local.Length), C.uint32_t(local.LKey),
		C.uint64_t(remoteAddr), C.uint32_t(rkey), C.uint32_t(imm),
		C.IBV_WR_RDMA_WRITE_WITH_IMM, flags)
	if rc != 0 {
		return opError("post write imm", unix.Errno(rc))
	}
	return nil
}

// PostRecv posts one receive work request without blocking. For RDMA
// WRITE WITH IMMEDIATE the data lands at the writer's remote address, so
// local may be empty (SGE{}); for a SEND it must be large enough for the
// message. It fails with an error wrapping unix.ENOMEM when the receive
// queue is full.
func (qp *QP) PostRecv(wrID uint64, local SGE) error {
	if qp == nil || qp.qp == nil {
		return closedError("post recv")
	}
	rc := C.osf_post_recv(qp.qp, C.uint64_t(wrID),
		C.uint64_t(local.Addr), C.uint32_t(local.Length), C.uint32_t(local.LKey))
	if rc != 0 {
		return opError("post recv", unix.Errno(rc))
	}
	return nil
}

// Close destroys the QP. See the type's comment.
func (qp *QP) Close() error {
	if qp == nil || qp.qp == nil {
		return closedError("destroy qp")
	}
	// This is rdma_destroy_qp (ibv_destroy_qp, then clear id->qp; the CQs
	// are ours, so there are no rdma_cm-owned CQs to free) except that the
	// error is not dropped: on failure the QP stays open.
	if rc, err := C.ibv_destroy_qp(qp.qp); rc != 0 {
		return opError("destroy qp", rcErrno(int(rc), err))
	}
	if qp.id.id != nil {
		qp.id.id.qp = nil
	}
	qp.qp = nil
	qp.id.qp = nil
	qp.pd.children.Add(-1)
	return nil
}
