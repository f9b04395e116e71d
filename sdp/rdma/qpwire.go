package rdma

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// verbsWire is a link's queue pair on a device (a qpWire): an RC QP made
// by librdmacm on id, in a protection domain of the link's own (its
// streams' rings are registered there and nowhere else, so the peer
// process writes only the rings of its own link's streams, as with a
// connection's own domain: ringMRs), one CQ for sends and receives on a
// completion channel of its own that the engine watches, and the link's
// buffers, one mapping registered for local writes: qpLinkRecvs receive
// buffers, then qpLinkSends send buffers, of QPLinkMsgMax bytes each.
// Engine goroutine only.
type verbsWire struct {
	eng  *Engine
	id   *verbs.CMID
	dev  *device
	pd   *verbs.PD
	cq   *verbs.CQ
	cc   *verbs.CompChannel
	qp   *verbs.QP
	buf  []byte // mmap'd
	mr   *verbs.MR
	sent int // messages sent: the next send buffer

	mu   sync.Mutex // regs, pd and closed: streams deregister in the background
	regs int        // stream registrations not released

	chanFD       int // cc's fd while the engine watches it, else 0
	disconnected bool
	closed       bool
}

// newVerbsWire makes a link's QP on id (bound to dev's device) with its
// domain, CQ and buffers; on error everything made so far is released
// and id is left alone. (The cleanup holds the wire in a variable of its
// own: each error return sets the result to nil first.)
func newVerbsWire(eng *Engine, id *verbs.CMID, dev *device, hiddenBase int) (_ *verbsWire, err error) {
	w := &verbsWire{eng: eng, id: id, dev: dev}
	defer func() {
		if err != nil {
			w.release()
			err = resourceError(err)
		}
	}()
	if w.pd, err = dev.ctx.AllocPD(); err != nil {
		return nil, err
	}
	if w.cq, w.cc, err = newCQ(dev, hiddenBase, qpLinkSends+qpLinkRecvs); err != nil {
		return nil, err
	}
	// MAP_SHARED, as the segments: never copied on write after a fork,
	// so the device and this process keep seeing the same pages.
	if w.buf, err = unix.Mmap(-1, 0, (qpLinkRecvs+qpLinkSends)*QPLinkMsgMax, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS); err != nil {
		return nil, err
	}
	if w.mr, err = regLocal(w.pd, w.buf); err != nil {
		return nil, err
	}
	cfg := qpConfig(w.cq)
	cfg.MaxSendWR, cfg.MaxRecvWR = qpLinkSends, qpLinkRecvs
	if w.qp, err = id.CreateQP(w.pd, cfg); err != nil {
		return nil, err
	}
	return w, nil
}

// watch makes the engine take the link's completions (ql.ready) when its
// channel fires.
func (w *verbsWire) watch(ql *qpLink) error {
	fd := w.cc.Fd()
	err := w.eng.watch(fd, func() {
		for {
			cq, err := w.cc.GetEvent()
			if err != nil {
				break // EAGAIN: none left
			}
			cq.AckEvents(1)
		}
		ql.ready()
	})
	if err != nil {
		return err
	}
	w.eng.chans[fd] = true
	w.chanFD = fd
	return nil
}

// regStream may run on any goroutine (the link's pool registers on the
// engine's background goroutine): the domain is held while it registers.
func (w *verbsWire) regStream(seg *sdp.Segment, side int) (qpReg, error) {
	w.mu.Lock()
	pd := w.pd
	if w.closed || pd == nil {
		w.mu.Unlock()
		return qpReg{}, errors.New("rdma: the link is closed")
	}
	w.regs++
	w.mu.Unlock()
	m, err := regStreamRings(pd, seg, side)
	if err != nil {
		_ = w.unref()
		return qpReg{}, err
	}
	rx, tx := m.mr[1-side], m.mr[side]
	return qpReg{raddr: rx.Addr(), rkey: rx.RKey(), laddr: tx.Addr(), lkey: tx.LKey(), h: m}, nil
}

func (w *verbsWire) deregStream(r qpReg) error {
	m, ok := r.h.(*ringMRs)
	if !ok {
		return errors.New("rdma: not a registration of this link")
	}
	err := m.Close()
	if e := w.unref(); err == nil {
		err = e
	}
	return err
}

// unref counts a registration gone; the domain goes with the last one once
// the link is closed.
func (w *verbsWire) unref() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.regs--
	if w.closed && w.regs == 0 && w.pd != nil {
		err := w.pd.Close()
		w.pd = nil
		return err
	}
	return nil
}

func (w *verbsWire) postSend(wrid verbs.WRID, msg []byte) error {
	if len(msg) > QPLinkMsgMax {
		return fmt.Errorf("rdma: link message of %d bytes", len(msg))
	}
	// At most qpLinkSends requests are on the wire (qpLink.postWaiting),
	// so the buffer of the message qpLinkSends before this one is free.
	off := (qpLinkRecvs + w.sent%qpLinkSends) * QPLinkMsgMax
	w.sent++
	copy(w.buf[off:], msg)
	sge, err := w.mr.SGE(off, len(msg))
	if err != nil {
		return err
	}
	return w.qp.PostSend(verbs.SendWR{ID: uint64(wrid), Opcode: verbs.OpSend, Local: sge, Flags: verbs.SendSignaled | verbs.SendSolicited})
}

func (w *verbsWire) postWrite(wrid verbs.WRID, lkey uint32, laddr uint64, n uint32, raddr uint64, rkey uint32, imm uint32, withImm bool) error {
	wr := verbs.SendWR{ID: uint64(wrid), Opcode: verbs.OpWrite, RemoteAddr: raddr, RKey: rkey, Flags: verbs.SendSignaled}
	if n > 0 {
		wr.Local = verbs.SGE{Addr: laddr, Length: n, LKey: lkey}
	}
	if withImm {
		wr.Opcode, wr.Imm, wr.Flags = verbs.OpWriteImm, imm, immFlags(true)
	}
	return w.qp.PostSend(wr)
}

func (w *verbsWire) postRecv(wrid verbs.WRID, i int) error {
	sge, err := w.mr.SGE(i*QPLinkMsgMax, QPLinkMsgMax)
	if err != nil {
		return err
	}
	return w.qp.PostRecv(uint64(wrid), sge)
}

func (w *verbsWire) recvBuf(i int) []byte {
	return w.buf[i*QPLinkMsgMax : (i+1)*QPLinkMsgMax]
}

func (w *verbsWire) poll(wc []verbs.WC) (int, error) { return w.cq.Poll(wc) }

func (w *verbsWire) notify(all bool) error { return w.cq.ReqNotify(!all) }

func (w *verbsWire) disconnect() error {
	if w.disconnected || w.closed {
		return nil
	}
	w.disconnected = true
	return w.id.Disconnect()
}

// close destroys the QP and the id, the buffers' registration, the CQ and
// the buffers; the domain goes with the last stream's registration.
func (w *verbsWire) close() error {
	w.mu.Lock()
	closed := w.closed
	w.closed = true
	w.mu.Unlock()
	if closed {
		return nil
	}
	return w.release()
}

func (w *verbsWire) release() error {
	var errs []error
	if w.chanFD > 0 {
		w.eng.unwatch(w.chanFD)
		delete(w.eng.chans, w.chanFD)
		w.chanFD = 0
	}
	if w.qp != nil {
		errs = append(errs, w.qp.Close())
		w.qp = nil
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed { // else (newVerbsWire failed) id is the caller's
		errs = append(errs, w.id.Close())
	}
	if w.mr != nil {
		errs = append(errs, w.mr.Close())
		w.mr = nil
	}
	if w.cq != nil {
		errs = append(errs, closeCQ(w.cq, w.cc))
		w.cq = nil
	}
	if w.buf != nil {
		errs = append(errs, unix.Munmap(w.buf))
		w.buf = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pd != nil && w.regs == 0 {
		errs = append(errs, w.pd.Close())
		w.pd = nil
	}
	return errors.Join(errs...)
}
