package rdma

// #include "tx.h"
import "C"

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// verbsLink is a Link over an RC queue pair made by librdmacm: one CQ for
// sends and receives (on a completion channel of its own), the segment's
// two rings registered as one MR each in the segment's protection domain
// (the QP's too: ringMRs), and the peer's region address and rkey from the
// handshake. It is used by the engine goroutine only.
type verbsLink struct {
	t    *Transport
	id   *verbs.CMID
	qp   *verbs.QP
	cq   *verbs.CQ
	cc   *verbs.CompChannel // the CQ's own: an application's thread sleeps on it
	mr   *ringMRs
	dev  *device
	ring uint64 // bytes per ring

	rbase uint64 // the address of the peer's ring region we write
	rkey  uint32

	disconnected bool
	closed       bool
	detached     bool     // the engine forgot it: Close may run elsewhere
	chanFD       int      // cc's fd once the engine's handler is registered, else 0
	rx           *txState // the rule's state the channel was handed to (useRx)

	reuse *reuse // how its segment may be reused once released, or nil
	tear  *laps  // the stream's teardown laps, for Close's steps (or nil)
}

// newVerbsLink creates the CQ, registers seg's rings and creates the QP on
// id (bound to dev's device). On error everything made so far is released
// and id is left alone.
func newVerbsLink(t *Transport, id *verbs.CMID, dev *device, seg *sdp.Segment, lp *laps) (*verbsLink, error) {
	l := &verbsLink{t: t, id: id, dev: dev, ring: uint64(seg.RingBytes)}
	var err error
	if l.cq, l.cc, err = newCQ(dev, t.cfg.HiddenBase, cqDepth); err != nil {
		return nil, resourceError(err)
	}
	lp.lap("cq")
	if l.mr, err = regRings(dev.ctx, seg); err != nil {
		closeCQ(l.cq, l.cc)
		return nil, resourceError(err)
	}
	lp.lap("mr")
	return l.createQP(lp)
}

// newVerbsLinkFrom is newVerbsLink with a spare's CQ and registration
// (on dev, of the segment the link is for), and its QP when the spare
// made it on id (a dial took the spare's id). On error they are released
// and id is left alone.
func newVerbsLinkFrom(t *Transport, id *verbs.CMID, dev *device, sp *spare, lp *laps) (*verbsLink, error) {
	l := &verbsLink{t: t, id: id, dev: dev, ring: uint64(sp.ring), cq: sp.cq, cc: sp.cc, mr: sp.mr}
	sp.cq, sp.cc, sp.mr = nil, nil, nil
	if sp.qp != nil && sp.id == nil && id.QP() == sp.qp {
		l.qp = sp.qp
		sp.qp = nil
		t.spares.mu.Lock()
		t.spares.withQP++
		t.spares.mu.Unlock()
		lp.lap("spare+qp")
		return l, nil
	}
	sp.closeID()
	lp.lap("spare")
	return l.createQP(lp)
}

// qpConfig is a link's QP, with one CQ for sends and receives.
func qpConfig(cq *verbs.CQ) verbs.QPConfig {
	return verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: sqDepth, MaxRecvWR: rqDepth, MaxInlineData: C.OSF_RDMA_INLINE}
}

// createQP creates the link's QP on its id; on error the MR and the CQ
// are released.
func (l *verbsLink) createQP(lp *laps) (*verbsLink, error) {
	var err error
	l.qp, err = l.id.CreateQP(l.mr.pd, qpConfig(l.cq))
	if err != nil {
		l.mr.Close()
		closeCQ(l.cq, l.cc)
		return nil, qpError(err)
	}
	lp.lap("qp")
	return l, nil
}

// setPeer records the peer's region from the handshake.
func (l *verbsLink) setPeer(base uint64, rkey uint32) { l.rbase, l.rkey = base, rkey }

// localBase and localKey are the address and rkey of our ring r's region,
// the one the peer writes: ring 1 at a dial (our application is the
// client), ring 0 at an accept.
func (l *verbsLink) localBase(r int) uint64 { return l.mr.mr[r].Addr() }
func (l *verbsLink) localKey(r int) uint32  { return l.mr.mr[r].RKey() }

// useTx lets the application's threads post on the QP (tx.h): payloads
// from the registered region of ring side to the peer's.
func (l *verbsLink) useTx(tx *txState, side int) bool {
	if l.qp == nil || l.closed || l.disconnected || l.rkey == 0 && l.rbase == 0 {
		return false
	}
	tx.useVerbs(l.qp, l.mr.mr[side].Addr(), l.mr.mr[side].LKey(), l.rbase, l.rkey)
	return true
}

func (l *verbsLink) PostWrite(wrid verbs.WRID, ring int, off, n uint32, imm uint32, withImm, signaled bool) error {
	if ring < 0 || ring > 1 || n == 0 || uint64(off)+uint64(n) > l.ring {
		return fmt.Errorf("rdma: write ring %d [%d,+%d) outside a %d-byte ring", ring, off, n, l.ring)
	}
	pos := uint64(off) // in both ends' ring regions alike
	sge, err := l.mr.mr[ring].SGE(int(pos), int(n))
	if err != nil {
		return err
	}
	op, flags := verbs.OpWrite, verbs.SendFlags(0)
	if signaled {
		flags = verbs.SendSignaled
	}
	if withImm {
		op, flags = verbs.OpWriteImm, immFlags(signaled)
	}
	return l.qp.PostSend(verbs.SendWR{
		ID: uint64(wrid), Opcode: op, Local: sge,
		RemoteAddr: l.rbase + pos, RKey: l.rkey, Imm: imm, Flags: flags,
	})
}

// immFlags are the flags of a WRITE WITH IMMEDIATE: solicited, as the C
// poster's (tx.c osf_rdma_verbs_post): the peer's CQ is armed for
// solicited completions (rx.c osf_rdma_verbs_arm).
func immFlags(signaled bool) verbs.SendFlags {
	if signaled {
		return verbs.SendSolicited | verbs.SendSignaled
	}
	return verbs.SendSolicited
}

func (l *verbsLink) PostImm(wrid verbs.WRID, imm uint32, signaled bool) error {
	return l.qp.PostSend(verbs.SendWR{ID: uint64(wrid), Opcode: verbs.OpWriteImm,
		RemoteAddr: l.rbase, RKey: l.rkey, Imm: imm, Flags: immFlags(signaled)})
}

func (l *verbsLink) PostProbe(wrid verbs.WRID) error {
	return l.qp.PostSend(verbs.SendWR{ID: uint64(wrid), Opcode: verbs.OpWrite, RemoteAddr: l.rbase, RKey: l.rkey, Flags: verbs.SendSignaled})
}

func (l *verbsLink) PostRecv(wrid verbs.WRID) error {
	return l.qp.PostRecv(uint64(wrid), verbs.SGE{})
}

// useRx lets the rule's C code take the CQ's completions and post the
// QP's receives (rx.h), on the engine's thread and the application's, and
// hands it the CQ's channel, which the engine's epoll watches from now on
// (while no application's thread sleeps on it). Engine goroutine.
func (l *verbsLink) useRx(tx *txState, _ int) {
	tx.rxUseVerbs(l.cq, l.qp)
	if l.cc == nil {
		return
	}
	e, fd := l.t.eng, l.cc.Fd()
	e.sources[fd] = func() { tx.chanEngineDrain() } // the engine polls every stream after waking
	e.chans[fd] = true
	l.chanFD = fd
	l.rx = tx
	tx.chanUse(fd, l.cc.Raw(), e.epfd, unix.EPOLLIN|unix.EPOLLRDHUP, 0)
}

// Poll returns nothing: the device's completions are the rule's to take
// (useRx).
func (l *verbsLink) Poll([]verbs.WC) (int, error) { return 0, nil }

// Notify arms the CQ: through the rule while the channel is its own
// (which knows when the CQ is armed already, and arms it for solicited
// completions only unless the engine waits for its own sends: useArmAll),
// else directly, for every completion.
func (l *verbsLink) Notify() error {
	if l.chanFD > 0 && l.rx != nil {
		if rc := l.rx.chanEngineArm(); rc >= 0 {
			if rc != 0 {
				return unix.Errno(rc)
			}
			return nil
		}
	}
	return l.cq.ReqNotify(false)
}

// Disconnect moves the QP to the error state and tells the peer
// (rdma_disconnect), once.
func (l *verbsLink) Disconnect() error {
	if l.disconnected || l.closed {
		return nil
	}
	l.disconnected = true
	return l.id.Disconnect()
}

// detach makes the engine forget the link's id (no more events for its
// stream), so that Close can run on another goroutine. Engine goroutine
// only.
func (l *verbsLink) detach() {
	delete(l.t.conns, l.id)
	l.forgetChan()
	l.detached = true
}

// forgetChan takes the channel's handler out of the engine (its epoll
// registration went when the stream's state was retired). Engine
// goroutine only.
func (l *verbsLink) forgetChan() {
	if l.chanFD > 0 {
		_ = unix.EpollCtl(l.t.eng.epfd, unix.EPOLL_CTL_DEL, l.chanFD, nil)
		delete(l.t.eng.sources, l.chanFD)
		delete(l.t.eng.chans, l.chanFD)
		l.chanFD = 0
		l.rx = nil
	}
}

// Close destroys the QP and the id, then the MRs with their protection
// domain, and the CQ. Once detached
// it may be called from any goroutine (libibverbs and librdmacm are
// thread-safe; the id's events were acknowledged when they were read).
func (l *verbsLink) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	if !l.detached {
		delete(l.t.conns, l.id)
		l.forgetChan()
	}
	var err error
	if qp := l.id.QP(); qp != nil {
		err = qp.Close()
		l.tear.lap("qp")
	}
	if e := l.id.Close(); err == nil {
		err = e
	}
	l.tear.lap("id")
	if l.mr != nil { // nil: closeHolding keeps it
		if e := l.mr.Close(); err == nil {
			err = e
		}
		l.tear.lap("mr")
	}
	if e := closeCQ(l.cq, l.cc); err == nil {
		err = e
	}
	l.tear.lap("cq")
	if l.reuse != nil {
		closeKeep(l.reuse.keep)
		l.reuse = nil
	}
	return err
}

// closeHolding is Close for a released stream whose segment is mirror
// (the engine's mapping) and whose application plays side: when the
// segment may be reused it keeps the registration and hands both to the
// transport to hold until the application lets go (recycle.go), after the
// QP is destroyed; held reports that (mirror is then not the caller's to
// unmap).
func (l *verbsLink) closeHolding(mirror *sdp.Segment, side int) (kept bool, err error) {
	r, mr := l.reuse, l.mr
	if r == nil || l.closed || mr == nil {
		return false, l.Close()
	}
	l.reuse, l.mr = nil, nil
	err = l.Close() // the QP and the id first: the peer can no longer write here
	h := &held{dev: l.dev, ring: uint32(l.ring), mirror: mirror, mr: mr, keep: r.keep,
		side: side, peer: r.peer, src: r.src, dst: r.dst, since: time.Now()}
	if err != nil || !l.t.hold(h) {
		h.free()
		return true, err
	}
	// Looked at after this release is done (and logged): the background
	// goroutine takes its work in order.
	_ = l.t.eng.post(func() { l.t.eng.background(l.t.sweep) })
	return true, nil
}

// newCQ makes a CQ on dev with a completion channel of its own (non-
// blocking, its fd moved to the hidden range from hiddenBase): the
// engine's epoll watches the channel while no application's thread
// sleeps on it (rx.h chan_fd). depth is the CQ's: cqDepth for a
// connection's.
func newCQ(dev *device, hiddenBase, depth int) (*verbs.CQ, *verbs.CompChannel, error) {
	cc, err := dev.ctx.CreateCompChannel()
	if err != nil {
		return nil, nil, err
	}
	if err := cc.SetNonblock(true); err != nil {
		cc.Close()
		return nil, nil, err
	}
	if hiddenBase > 0 && cc.Fd() < hiddenBase {
		// As hideFD, but the channel keeps its fd in its struct.
		if fd, err := unix.FcntlInt(uintptr(cc.Fd()), unix.F_DUPFD_CLOEXEC, hiddenBase); err == nil {
			if err := cc.MoveFD(fd); err != nil {
				cc.Close()
				return nil, nil, err
			}
		}
	}
	cq, err := dev.ctx.CreateCQ(depth, cc, 0)
	if err != nil {
		cc.Close()
		return nil, nil, err
	}
	return cq, cc, nil
}

// closeCQ destroys cq, then its channel cc.
func closeCQ(cq *verbs.CQ, cc *verbs.CompChannel) error {
	err := cq.Close()
	if cc != nil {
		if e := cc.Close(); err == nil {
			err = e
		}
	}
	return err
}

// ErrResource means a local resource (locked memory, queue pairs, memory)
// ran out; the connection uses kernel TCP.
var ErrResource = errors.New("rdma: out of resources")

func resourceError(err error) error {
	return fmt.Errorf("%w: %w", ErrResource, err)
}

// qpError wraps a failed QP creation: ErrResource when the errno says a
// resource ran out; otherwise (EINVAL: the id's connection request is no
// longer valid, its client gave up) not.
func qpError(err error) error {
	for _, e := range []unix.Errno{unix.ENOMEM, unix.ENOSPC, unix.EAGAIN, unix.EMFILE, unix.ENFILE, unix.ENOBUFS} {
		if errors.Is(err, e) {
			return resourceError(err)
		}
	}
	return fmt.Errorf("rdma: %w", err)
}
