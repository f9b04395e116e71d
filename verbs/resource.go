package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PD is a protection domain (struct ibv_pd). Memory regions and queue pairs
// are created in a PD and may only be used with others of the same PD.
//
// Close fails with an error wrapping unix.EBUSY while MRs or QPs of the PD
// are still open. A second Close returns ErrClosed. Close must not run
// concurrently with other methods.
type PD struct {
	pd       *C.struct_ibv_pd
	ctx      *Context
	children atomic.Int32
}

// AllocPD allocates a protection domain on c; it does not block.
func (c *Context) AllocPD() (*PD, error) {
	if c == nil || c.ctx == nil {
		return nil, closedError("alloc pd")
	}
	pd, err := C.ibv_alloc_pd(c.ctx)
	if pd == nil {
		return nil, opError("alloc pd", errnoOf(err, unix.ENOMEM))
	}
	c.children.Add(1)
	return &PD{pd: pd, ctx: c}, nil
}

// Context returns the device context the PD was allocated on.
func (p *PD) Context() *Context { return p.ctx }

// Close deallocates the PD. See the type's comment for when it fails.
func (p *PD) Close() error {
	if p == nil || p.pd == nil {
		return closedError("dealloc pd")
	}
	if n := p.children.Load(); n > 0 {
		return fmt.Errorf("verbs: dealloc pd: %d MRs or QPs still open: %w", n, unix.EBUSY)
	}
	if rc, err := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return opError("dealloc pd", rcErrno(int(rc), err))
	}
	p.pd = nil
	p.ctx.children.Add(-1)
	return nil
}

// Access is a set of memory region access rights (ibv_access_flags).
type Access int

// Access rights. Remote write requires local write.
const (
	AccessLocalWrite  Access = C.IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite Access = C.IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead  Access = C.IBV_ACCESS_REMOTE_READ
)

// MR is a registered memory region (struct ibv_mr).
//
// The memory must come from mmap (including unix.Mmap and memfd mappings) or
// C.malloc, never from the Go heap: the NIC keeps reading and writing it
// after RegMR returns, which cgo's pointer rules forbid for Go memory, and
// the garbage collector cannot see the NIC's reference. The memory must
// stay mapped until Close returns.
//
// A second Close returns ErrClosed. LKey, RKey, Addr and Len stay readable
// after Close.
type MR struct {
	mr   *C.struct_ibv_mr
	pd   *PD
	addr uint64
	len  int
	lkey uint32
	rkey uint32
}

// RegMR registers length bytes at addr with the given access rights; addr
// must point into memory from mmap or C.malloc (see MR). It pins the pages
// and may sleep in the kernel, but does not wait for the network. It fails
// with an error wrapping unix.EINVAL for an empty range or for
// AccessRemoteWrite without AccessLocalWrite.
func (p *PD) RegMR(addr unsafe.Pointer, length int, access Access) (*MR, error) {
	if p == nil || p.pd == nil {
		return nil, closedError("reg mr")
	}
	if addr == nil || length <= 0 {
		return nil, opError("reg mr", unix.EINVAL)
	}
	if access&AccessRemoteWrite != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("verbs: reg mr: remote write needs local write: %w", unix.EINVAL)
	}
	var e C.int
	mr := C.osf_reg_mr(p.pd, addr, C.size_t(length), C.int(access), &e)
	if mr == nil {
		return nil, opError("reg mr", unix.Errno(e))
	}
	p.children.Add(1)
	return &MR{
		mr:   mr,
		pd:   p,
		addr: uint64(uintptr(addr)),
		len:  length,
		lkey: uint32(mr.lkey),
		rkey: uint32(mr.rkey),
	}, nil
}

// LKey returns the local key, for SGEs that name this region.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key a peer needs to RDMA into this region.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr returns the region's start address as the NIC sees it; a peer adds
// offsets to it to form remote addresses.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length in bytes.
func (m *MR) Len() int { return m.len }

// SGE returns the scatter/gather entry for length bytes at offset off in the
// region. It fails with an error wrapping unix.EINVAL when the range is
// outside the region or longer than 4 GiB - 1.
func (m *MR) SGE(off, length int) (SGE, error) {
	if off < 0 || length < 0 || off > m.len || length > m.len-off || uint64(length) > 1<<32-1 {
		return SGE{}, fmt.Errorf("verbs: mr sge [%d,+%d) outside %d bytes: %w", off, length, m.len, unix.EINVAL)
	}
	return SGE{Addr: m.addr + uint64(off), Length: uint32(length), LKey: m.lkey}, nil
}

// Close deregisters the region; the memory itself is the caller's to
// unmap or free afterwards.
func (m *MR) Close() error {
	if m == nil || m.mr == nil {
		return closedError("dereg mr")
	}
	if rc, err := C.ibv_dereg_mr(m.mr); rc != 0 {
		return opError("dereg mr", rcErrno(int(rc), err))
	}
	m.mr = nil
	m.pd.children.Add(-1)
	return nil
}

// SGE is one scatter/gather entry: Length bytes at Addr inside a region
// with local key LKey. A zero Length means no data (a bare immediate).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// CompChannel is a completion event channel (struct ibv_comp_channel): a
// file descriptor that becomes readable when a CQ attached to it, armed
// with CQ.ReqNotify, gets a completion. Use Fd with poll/epoll to sleep.
//
// Close fails with an error wrapping unix.EBUSY while CQs attached to the
// channel are open. A second Close returns ErrClosed. Close must not run
// concurrently with other methods.
type CompChannel struct {
	ch  *C.struct_ibv_comp_channel
	ctx *Context

	mu  sync.Mutex
	cqs map[*C.struct_ibv_cq]*CQ
}

// CreateCompChannel creates a completion event channel on c. Its fd is
// blocking and close-on-exec; see SetNonblock.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	if c == nil || c.ctx == nil {
		return nil, closedError("create comp channel")
	}
	ch, err := C.ibv_create_comp_channel(c.ctx)
	if ch == nil {
		return nil, opError("create comp channel", errnoOf(err, unix.ENOMEM))
	}
	unix.CloseOnExec(int(ch.fd))
	c.children.Add(1)
	return &CompChannel{ch: ch, ctx: c, cqs: map[*C.struct_ibv_cq]*CQ{}}, nil
}

// Fd returns the channel's file descriptor, or -1 after Close. It is
// readable when GetEvent has an event to return.
func (ch *CompChannel) Fd() int {
	if ch == nil || ch.ch == nil {
		return -1
	}
	return int(ch.ch.fd)
}

// Raw returns the struct ibv_comp_channel * itself, for C code of this
// process that reads its events (sdp/rdma rx.c: an application's thread
// asleep on its connection's channel). It stays valid until Close; nil
// once closed.
func (ch *CompChannel) Raw() unsafe.Pointer {
	if ch == nil {
		return nil
	}
	return unsafe.Pointer(ch.ch)
}

// MoveFD makes the channel use fd, a duplicate of its fd that the caller
// made (at a number of its choosing), and closes the old one. It must not
// run concurrently with other methods.
func (ch *CompChannel) MoveFD(fd int) error {
	if ch == nil || ch.ch == nil {
		return closedError("comp channel move fd")
	}
	old := int(ch.ch.fd)
	if fd == old {
		return nil
	}
	ch.ch.fd = C.int(fd)
	return unix.Close(old)
}

// SetNonblock switches GetEvent between blocking (the default) and
// non-blocking mode, by setting O_NONBLOCK on the fd.
func (ch *CompChannel) SetNonblock(nonblocking bool) error {
	if ch == nil || ch.ch == nil {
		return closedError("comp channel set nonblock")
	}
	if err := unix.SetNonblock(int(ch.ch.fd), nonblocking); err != nil {
		return opError("comp channel set nonblock", errnoOf(err, unix.EINVAL))
	}
	return nil
}

// GetEvent returns the CQ that has a completion event. In blocking mode it
// blocks (holding an OS thread) until there is one; in non-blocking mode it
// returns an error wrapping ErrWouldBlock and unix.EAGAIN when there is
// none. Every event must be acknowledged with CQ.AckEvents (CQ.Close
// acknowledges the remainder), and the CQ must be re-armed with ReqNotify
// to get the next event.
func (ch *CompChannel) GetEvent() (*CQ, error) {
	if ch == nil || ch.ch == nil {
		return nil, closedError("get cq event")
	}
	var cq *C.struct_ibv_cq
	var cqctx unsafe.Pointer
	if rc, err := C.ibv_get_cq_event(ch.ch, &cq, &cqctx); rc != 0 {
		return nil, opError("get cq event", rcErrno(int(rc), err))
	}
	ch.mu.Lock()
	q := ch.cqs[cq]
	ch.mu.Unlock()
	if q == nil {
		// Not a CQ this package created on this channel: acknowledge it
		// here so that whoever destroys it does not hang.
		C.ibv_ack_cq_events(cq, 1)
		return nil, fmt.Errorf("verbs: get cq event: event for unknown cq: %w", unix.EINVAL)
	}
	q.unacked.Add(1)
	return q, nil
}

// Close destroys the channel. See the type's comment for when it fails.
func (ch *CompChannel) Close() error {
	if ch == nil || ch.ch == nil {
		return closedError("destroy comp channel")
	}
	ch.mu.Lock()
	n := len(ch.cqs)
	ch.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("verbs: destroy comp channel: %d CQs still attached: %w", n, unix.EBUSY)
	}
	if rc, err := C.ibv_destroy_comp_channel(ch.ch); rc != 0 {
		return opError("destroy comp channel", rcErrno(int(rc), err))
	}
	ch.ch = nil
	ch.ctx.children.Add(-1)
	return nil
}

// CQ is a completion queue (struct ibv_cq).
//
// Poll is safe for concurrent use; ReqNotify and AckEvents may be called
// from any goroutine. Close acknowledges outstanding channel events, then
// destroys the CQ; it fails with an error wrapping unix.EBUSY while a QP
// still uses the CQ. A second Close returns ErrClosed. Close must not run
// concurrently with other methods.
type CQ struct {
	cq      *C.struct_ibv_cq
	ctx     *Context
	ch      *CompChannel
	unacked atomic.Uint32

	mu      sync.Mutex       // guards scratch
	scratch *C.struct_osf_wc // C.malloc'ed, OSF_POLL_BATCH entries
}

// Raw returns the struct ibv_cq * itself, for C code of this process that
// polls the CQ (sdp/rdma rx.c: the application's threads take their
// completions). It stays valid until Close; nil once closed.
func (q *CQ) Raw() unsafe.Pointer {
	if q == nil {
		return nil
	}
	return unsafe.Pointer(q.cq)
}

// CreateCQ creates a completion queue with room for at least cqe entries on
// completion vector vector (0 is always valid). ch may be nil when the CQ
// will only be polled. It does not block.
func (c *Context) CreateCQ(cqe int, ch *CompChannel, vector int) (*CQ, error) {
	if c == nil || c.ctx == nil {
		return nil, closedError("create cq")
	}
	if cqe <= 0 {
		return nil, opError("create cq", unix.EINVAL)
	}
	var cch *C.struct_ibv_comp_channel
	if ch != nil {
		if ch.ch == nil {
			return nil, closedError("create cq")
		}
		cch = ch.ch
	}
	scratch := (*C.struct_osf_wc)(C.calloc(C.OSF_POLL_BATCH, C.size_t(unsafe.Sizeof(C.struct_osf_wc{}))))
	if scratch == nil {
		return nil, opError("create cq", unix.ENOMEM)
	}
	cq, err := C.ibv_create_cq(c.ctx, C.int(cqe), nil, cch, C.int(vector))
	if cq == nil {
		e := errnoOf(err, unix.ENOMEM)
		C.free(unsafe.Pointer(scratch))
		return nil, opError("create cq", e)
	}
	q := &CQ{cq: cq, ctx: c, ch: ch, scratch: scratch}
	if ch != nil {
		ch.mu.Lock()
		ch.cqs[cq] = q
		ch.mu.Unlock()
	}
	c.children.Add(1)
	return q, nil
}

// Size returns the number of entries the CQ actually has (at least what
// CreateCQ asked for), or 0 after Close.
func (q *CQ) Size() int {
	if q == nil || q.cq == nil {
		return 0
	}
	return int(q.cq.cqe)
}

// Poll drains up to len(wc) completions without blocking; it returns 0, nil
// when the CQ is empty. A completion with a non-success Status is returned
// like any other, not as an error; an error means the CQ itself failed.
func (q *CQ) Poll(wc []WC) (int, error) {
	if q == nil || q.cq == nil {
		return 0, closedError("poll cq")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	raw := unsafe.Slice(q.scratch, C.OSF_POLL_BATCH)
	n := 0
	for n < len(wc) {
		want := min(len(wc)-n, C.OSF_POLL_BATCH)
		got := int(C.osf_poll_cq(q.cq, C.int(want), q.scratch))
		if got < 0 {
			return n, opError("poll cq", unix.Errno(-got))
		}
		for i := range got {
			r := &raw[i]
			wc[n] = WC{
				WRID:      uint64(r.wr_id),
				Status:    WCStatus(r.status),
				Opcode:    WCOpcode(r.opcode),
				VendorErr: uint32(r.vendor_err),
				ByteLen:   uint32(r.byte_len),
				ImmData:   uint32(r.imm_data),
				HasImm:    r.wc_flags&C.IBV_WC_WITH_IMM != 0,
				QPNum:     uint32(r.qp_num),
			}
			n++
		}
		if got < want {
			break
		}
	}
	return n, nil
}

// ReqNotify arms the CQ so that its completion channel gets an event for
// the next completion (solicitedOnly: the next solicited or error
// completion). It does not block. Poll after arming to close the race with
// completions that arrived before it.
func (q *CQ) ReqNotify(solicitedOnly bool) error {
	if q == nil || q.cq == nil {
		return closedError("req notify cq")
	}
	so := C.int(0)
	if solicitedOnly {
		so = 1
	}
	if rc := C.osf_req_notify_cq(q.cq, so); rc != 0 {
		return opError("req notify cq", unix.Errno(rc))
	}
	return nil
}

// AckEvents acknowledges n events that CompChannel.GetEvent returned for
// this CQ. Acknowledging in batches is cheaper; n larger than the number
// outstanding is clamped.
func (q *CQ) AckEvents(n int) {
	if q == nil || q.cq == nil || n <= 0 {
		return
	}
	for {
		cur := q.unacked.Load()
		k := min(uint32(n), cur)
		if k == 0 {
			return
		}
		if q.unacked.CompareAndSwap(cur, cur-k) {
			C.ibv_ack_cq_events(q.cq, C.uint(k))
			return
		}
	}
}

// Close destroys the CQ. See the type's comment for when it fails.
func (q *CQ) Close() error {
	if q == nil || q.cq == nil {
		return closedError("destroy cq")
	}
	if k := q.unacked.Swap(0); k > 0 {
		C.ibv_ack_cq_events(q.cq, C.uint(k))
	}
	if rc, err := C.ibv_destroy_cq(q.cq); rc != 0 {
		return opError("destroy cq", rcErrno(int(rc), err))
	}
	if q.ch != nil {
		q.ch.mu.Lock()
		delete(q.ch.cqs, q.cq)
		q.ch.mu.Unlock()
	}
	q.cq = nil
	C.free(unsafe.Pointer(q.scratch))
	q.scratch = nil
	q.ctx.children.Add(-1)
	return nil
}

// WC is one work completion, copied out of the CQ.
type WC struct {
	WRID      uint64   // the wrID given when the work request was posted
	Status    WCStatus // WCSuccess or why the request failed
	Opcode    WCOpcode // what completed; only valid when Status is WCSuccess
	VendorErr uint32   // vendor-specific detail for a failed Status
	ByteLen   uint32   // bytes received (receive completions only)
	ImmData   uint32   // immediate data in host byte order, when HasImm
	HasImm    bool     // the completion carries immediate data
	QPNum     uint32   // the local QP the work request was posted on
}

// WCStatus is the status of a work completion (ibv_wc_status).
type WCStatus int

// Work completion statuses.
const (
	WCSuccess          WCStatus = C.IBV_WC_SUCCESS
	WCLocLenErr        WCStatus = C.IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr       WCStatus = C.IBV_WC_LOC_QP_OP_ERR
	WCLocEECOpErr      WCStatus = C.IBV_WC_LOC_EEC_OP_ERR
	WCLocProtErr       WCStatus = C.IBV_WC_LOC_PROT_ERR
	WCWRFlushErr       WCStatus = C.IBV_WC_WR_FLUSH_ERR
	WCMWBindErr        WCStatus = C.IBV_WC_MW_BIND_ERR
	WCBadRespErr       WCStatus = C.IBV_WC_BAD_RESP_ERR
	WCLocAccessErr     WCStatus = C.IBV_WC_LOC_ACCESS_ERR
	WCRemInvReqErr     WCStatus = C.IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr     WCStatus = C.IBV_WC_REM_ACCESS_ERR
	WCRemOpErr         WCStatus = C.IBV_WC_REM_OP_ERR
	WCRetryExcErr      WCStatus = C.IBV_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr   WCStatus = C.IBV_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr    WCStatus = C.IBV_WC_LOC_RDD_VIOL_ERR
	WCRemInvRdReqErr   WCStatus = C.IBV_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr      WCStatus = C.IBV_WC_REM_ABORT_ERR
	WCInvEECNErr       WCStatus = C.IBV_WC_INV_EECN_ERR
	WCInvEECStateErr   WCStatus = C.IBV_WC_INV_EEC_STATE_ERR
	WCFatalErr         WCStatus = C.IBV_WC_FATAL_ERR
	WCRespTimeoutErr   WCStatus = C.IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr       WCStatus = C.IBV_WC_GENERAL_ERR
	WCTMErr            WCStatus = C.IBV_WC_TM_ERR
	WCTMRndvIncomplete WCStatus = C.IBV_WC_TM_RNDV_INCOMPLETE
)

// wcStatusNames are the strings ibv_wc_status_str returns (checked by a
// test).
var wcStatusNames = [...]string{
	WCSuccess:          "success",
	WCLocLenErr:        "local length error",
	WCLocQPOpErr:       "local QP operation error",
	WCLocEECOpErr:      "local EE context operation error",
	WCLocProtErr:       "local protection error",
	WCWRFlushErr:       "Work Request Flushed Error",
	WCMWBindErr:        "memory management operation error",
	WCBadRespErr:       "bad response error",
	WCLocAccessErr:     "local access error",
	WCRemInvReqErr:     "remote invalid request error",
	WCRemAccessErr:     "remote access error",
	WCRemOpErr:         "remote operation error",
	WCRetryExcErr:      "transport retry counter exceeded",
	WCRNRRetryExcErr:   "RNR retry counter exceeded",
	WCLocRDDViolErr:    "local RDD violation error",
	WCRemInvRdReqErr:   "remote invalid RD request",
	WCRemAbortErr:      "aborted error",
	WCInvEECNErr:       "invalid EE context number",
	WCInvEECStateErr:   "invalid EE context state",
	WCFatalErr:         "fatal error",
	WCRespTimeoutErr:   "response timeout error",
	WCGeneralErr:       "general error",
	WCTMErr:            "TM error",
	WCTMRndvIncomplete: "TM software rendezvous",
}

// String returns the status as ibv_wc_status_str describes it, e.g.
// "transport retry counter exceeded".
func (s WCStatus) String() string {
	if s >= 0 && int(s) < len(wcStatusNames) && wcStatusNames[s] != "" {
		return wcStatusNames[s]
	}
	return "WCStatus(" + strconv.Itoa(int(s)) + ")"
}

// OK reports whether the work request completed successfully.
func (s WCStatus) OK() bool { return s == WCSuccess }

// Flushed reports whether the work request was flushed because the QP went
// to the error state (after a disconnect or an earlier error), rather than
// failing itself.
func (s WCStatus) Flushed() bool { return s == WCWRFlushErr }

// wcStatusStrC returns libibverbs' own string for s; tests compare it with
// String.
func wcStatusStrC(s WCStatus) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(s)))
}

// WCOpcode says what kind of work request a completion is for
// (ibv_wc_opcode). Receive-side opcodes have the WCRecv bit set.
type WCOpcode int

// Work completion opcodes.
const (
	WCSend            WCOpcode = C.IBV_WC_SEND
	WCRDMAWrite       WCOpcode = C.IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = C.IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = C.IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = C.IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = C.IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = C.IBV_WC_LOCAL_INV
	WCRecv            WCOpcode = C.IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = C.IBV_WC_RECV_RDMA_WITH_IMM
)

var wcOpcodeNames = map[WCOpcode]string{
	WCSend:            "SEND",
	WCRDMAWrite:       "RDMA_WRITE",
	WCRDMARead:        "RDMA_READ",
	WCCompSwap:        "COMP_SWAP",
	WCFetchAdd:        "FETCH_ADD",
	WCBindMW:          "BIND_MW",
	WCLocalInv:        "LOCAL_INV",
	WCRecv:            "RECV",
	WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
}

// String returns the opcode's name without the IBV_WC_ prefix, e.g.
// "RECV_RDMA_WITH_IMM".
func (o WCOpcode) String() string {
	if s, ok := wcOpcodeNames[o]; ok {
		return s
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

// Recv reports whether the completion is for a receive work request
// (including the receive consumed by an RDMA WRITE WITH IMMEDIATE).
func (o WCOpcode) Recv() bool { return o&WCRecv != 0 }
