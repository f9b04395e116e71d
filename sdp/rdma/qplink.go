package rdma

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// Streams on a link over a device (OSF_RDMA_LINKS=1, docs/RDMA.md
// "Links"): one RC queue pair between two processes carries many streams,
// as muxLink does over the stand-in's socket. The streams' writes are RDMA
// WRITEs (WITH IMMEDIATE) from the local stream's send ring to the peer's
// copy of it, their immediates in MakeLinkImm's layout; the link's own
// messages are SENDs into the link's receive buffers:
//
//	byte 0     kind: 1 OPEN, 2 ACCEPT, 3 REJECT, 4 END
//	byte 1     stream slot, 1-255
//	bytes 2-3  zero
//	then       OPEN: ConnectData; ACCEPT: AcceptData; REJECT: the reject
//	           block; END: nothing
//
// A stream-open thus carries the registration (RingBase, RKey) of the
// ring the server is to write, as a connection's hello does, and the
// accept the server's: each
// stream's rings are registered in the link's protection domain (only the
// ring the peer writes with remote write access), so a stream costs one
// registration and one message, not a queue pair and a handshake.
// Everything in a message and in an immediate is the peer's word: the
// parser bounds it (parseQPLinkMsg, fuzzed), an immediate must name an
// open stream, and its position is checked by that stream's own rule
// (rx.h) against that stream's ring only. A stream's registration stays
// (and its mapping with it) until both ends said END and its last work
// request completed: the peer's writes in flight land in memory still
// registered, and our writes in flight read memory still registered, so
// a stream's end never breaks its link.
//
// The queue pair's send queue is shared: every work request is posted
// signaled (the stream sees the completions it asked for), so the link
// knows which slots are free; what does not fit waits in order. Its
// receive queue is the link's (qpLinkRecvs buffers), reposted as each
// completes; a stream's receives are counted (linkRecvs) and matched with
// its immediates.
const (
	qpLinkOpen   = 1
	qpLinkAccept = 2
	qpLinkReject = 3
	qpLinkEnd    = 4

	qpLinkHdr = 4
	// QPLinkMsgMax is the largest message on a link: the size of each
	// of its receive buffers.
	QPLinkMsgMax = qpLinkHdr + SizeofConnectData
	// qpLinkRecvs is the depth of a link's receive queue.
	qpLinkRecvs = 2 * rqDepth
	// qpLinkSends is the depth of a link's send queue.
	qpLinkSends = 2 * sqDepth
)

// Work request kinds of a link's own work.
const (
	wrLinkMsg  uint8 = 8 // SEND of a link message
	wrLinkRecv uint8 = 9 // receive of the link; seq is the buffer
)

// qpReg is a stream's registration on a link: the ring the peer writes
// (raddr, rkey: what the stream-open or accept carries) and the ring our
// writes come from (laddr, lkey); h is the wire's own handle.
type qpReg struct {
	raddr uint64
	rkey  uint32
	laddr uint64
	lkey  uint32
	h     any
}

// qpWire is the queue pair a link posts on: an RC QP with its CQ, its
// protection domain and its receive buffers, or a fake in tests. Post
// methods never block. Engine goroutine only, but for regStream and
// deregStream (any goroutine: the link's pool).
type qpWire interface {
	// regStream registers seg's rings (the engine's mapping) for a
	// stream whose local application plays side: ring 1-side with
	// remote write access, ring side for local reads only. It fails
	// once the wire is closed.
	regStream(seg *sdp.Segment, side int) (qpReg, error)
	// deregStream releases a registration; no work request using it
	// may be outstanding.
	deregStream(r qpReg) error
	// postSend sends msg (at most QPLinkMsgMax bytes), signaled.
	postSend(wrid verbs.WRID, msg []byte) error
	// postWrite writes n bytes from laddr (lkey) to raddr (rkey),
	// signaled; n may be 0.
	postWrite(wrid verbs.WRID, lkey uint32, laddr uint64, n uint32, raddr uint64, rkey uint32, imm uint32, withImm bool) error
	// postRecv posts receive buffer i (< qpLinkRecvs) with wrid.
	postRecv(wrid verbs.WRID, i int) error
	// recvBuf is receive buffer i, as its completion left it.
	recvBuf(i int) []byte
	poll(wc []verbs.WC) (int, error)
	// notify arms the CQ for the next completion (all), or for the next
	// solicited or failed one (the peer's messages and immediates, and
	// the flushes of a broken queue pair; not our sends' completions).
	notify(all bool) error
	// disconnect moves the QP to the error state and tells the peer.
	disconnect() error
	// close destroys the QP, the CQ and the receive buffers (the
	// streams' registrations are released first).
	close() error
}

// qpPost is a work request the link posts on its wire: now, or once the
// send queue has room.
type qpPost struct {
	wrid     verbs.WRID
	end      *qpEnd // nil: the link's own
	signaled bool   // the stream asked for its completion
	do       func() error
}

// qpLink is a link over a device's queue pair. Engine goroutine only.
type qpLink struct {
	eng    *Engine
	wire   qpWire
	name   string // the peer, for logs
	client bool   // this end opens streams
	ends   [linkSlots + 1]*qpEnd
	open   int
	pool   *linkPool // the streams' registered rings, made ahead and reused

	// offer hands a stream-open to the application (server), over pre
	// (the engine's mapping of a segment of the pool, its FD the one to
	// send), or a segment of its own when pre is nil; nil on a client's
	// link.
	offer func(cd ConnectData, pre *sdp.Segment) (offered, RejectCode, error)
	// onFail runs once when the link breaks.
	onFail func(*qpLink)
	// onRetire runs once when the link is retired (retire).
	onRetire func(*qpLink)
	// later runs a settled stream's deregistration and unmapping (the
	// engine's background goroutine: Engine.background); nil: at once.
	later func(func())

	inflight []qpPost // posted on the wire, in order
	waiting  []qpPost // not posted yet: the send queue was full
	msgSeq   uint32
	wc       []verbs.WC

	// armed is how the CQ is armed since the link last took its
	// completions: armNone, armSolicited or armAll (arm).
	armed   uint8
	wantAll int // ends whose stream waits for its own sends (qpEnd.setArmAll)

	broken  bool
	retired bool // takes no more streams; taken down once idle
	logf    func(string, ...any)
}

// How a link's CQ is armed (qpLink.arm).
const (
	armNone uint8 = iota
	armSolicited
	armAll
)

// newQPLink makes a link over w, posts its receives and arms its CQ.
func newQPLink(eng *Engine, w qpWire, name string, client bool, logf func(string, ...any)) (*qpLink, error) {
	ql := &qpLink{eng: eng, wire: w, name: name, client: client, wc: make([]verbs.WC, 32), logf: logf}
	side, later := sdp.SideServer, (func(func()))(nil)
	if client {
		side = sdp.SideClient
	}
	if eng != nil {
		later = eng.background
	}
	ql.pool = newLinkPool(w, side, hiddenBase(eng), later, logf)
	for i := range qpLinkRecvs {
		if err := w.postRecv(verbs.MakeWRID(wrLinkRecv, 0, uint32(i)), i); err != nil {
			return nil, fmt.Errorf("rdma: link receive: %w", err)
		}
	}
	if err := ql.arm(); err != nil {
		return nil, fmt.Errorf("rdma: link arm: %w", err)
	}
	return ql, nil
}

// arm arms the link's CQ as the link needs it now (waitsForSends).
// The peer's messages and immediates are solicited; our own sends'
// completions wake the engine only while it waits for one of them, so
// that a message sent costs the sender no wake-up (as a connection's
// sends: docs/ARCHITECTURE.md, "Engine wake-ups"); those it did not wait
// for are taken at its next look. Poll again after arming.
func (ql *qpLink) arm() error {
	want := armSolicited
	if ql.waitsForSends() {
		want = armAll
	}
	if err := ql.wire.notify(want == armAll); err != nil {
		return err
	}
	ql.armed = want
	return nil
}

// upgrade arms the CQ for every completion once the link waits for one
// of its sends (waitsForSends) while it is armed for solicited ones only:
// a completion that came before is taken by a look of the wire on the
// engine's next pass (a device keeps the stronger arm until it fires).
// Engine goroutine; never within ready.
func (ql *qpLink) upgrade() error {
	if ql.broken || ql.armed != armSolicited || !ql.waitsForSends() {
		return nil
	}
	if err := ql.wire.notify(true); err != nil {
		return err
	}
	ql.armed = armAll
	ql.eng.after(0, ql.ready)
	return nil
}

// waitsForSends reports whether the engine waits for a completion of the
// link's sends: work requests wait for room in the send queue, a stream
// waits for its own (qpEnd.setArmAll), a stream that ended or let go
// waits for its last ones before it settles, or a retired link for its
// last ones before it goes down.
func (ql *qpLink) waitsForSends() bool {
	if len(ql.waiting) > 0 || ql.wantAll > 0 || ql.retired && len(ql.inflight) > 0 {
		return true
	}
	for _, p := range ql.inflight {
		if e := p.end; e != nil && (e.ended || e.closed) {
			return true
		}
	}
	return false
}

// ready takes the wire's completions and hands each to its stream, or
// applies the peer's message; a violation breaks the link. Once the CQ is
// empty it arms it (and looks once more), whether or not a stream is open:
// a stream-open may come to an idle link.
func (ql *qpLink) ready() {
	ql.armed = armNone // an event fired, or the link is failing
	for armed := false; !ql.broken; {
		n, err := ql.wire.poll(ql.wc)
		if err != nil {
			ql.fail(fmt.Errorf("poll: %w", err))
			return
		}
		if n == 0 {
			if armed {
				return
			}
			if err := ql.arm(); err != nil {
				ql.fail(fmt.Errorf("arm: %w", err))
				return
			}
			armed = true
			continue
		}
		armed = false
		for i := 0; i < n && !ql.broken; i++ {
			if err := ql.take(ql.wc[i]); err != nil {
				ql.fail(err)
			}
		}
	}
}

// take handles one completion.
func (ql *qpLink) take(wc verbs.WC) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("work request %#x: %v", wc.WRID, wc.Status)
	}
	switch wc.Opcode {
	case verbs.WCRecv, verbs.WCRecvRDMAWithImm:
		w := verbs.WRID(wc.WRID)
		i := int(w.Seq())
		if w.Kind() != wrLinkRecv || i >= qpLinkRecvs {
			return fmt.Errorf("receive completion %#x", wc.WRID)
		}
		var err error
		if wc.Opcode == verbs.WCRecv {
			if wc.ByteLen > QPLinkMsgMax {
				return fmt.Errorf("%w: link message of %d bytes", ErrWire, wc.ByteLen)
			}
			err = ql.apply(ql.wire.recvBuf(i)[:wc.ByteLen])
		} else {
			err = ql.arrive(wc)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if ql.broken { // taken down meanwhile (a retired link's last stream)
			return nil
		}
		return ql.wire.postRecv(w, i)
	}
	if len(ql.inflight) == 0 || ql.inflight[0].wrid != verbs.WRID(wc.WRID) {
		return fmt.Errorf("send completion %#x out of order", wc.WRID)
	}
	p := ql.inflight[0]
	ql.inflight = ql.inflight[1:]
	if e := p.end; e != nil {
		e.inflight--
		if p.signaled && !e.closed {
			e.complete(wc)
		}
		e.settle()
	}
	if err := ql.postWaiting(); err != nil {
		return err
	}
	ql.downIfIdle()
	return nil
}

// arrive hands a write's immediate to the stream it names.
func (ql *qpLink) arrive(wc verbs.WC) error {
	_, slot, _ := ParseLinkImm(wc.ImmData)
	e := ql.ends[slot]
	if slot == 0 || e == nil || !e.accepted {
		return fmt.Errorf("immediate %#x for stream %d, which is not open", wc.ImmData, slot)
	}
	if e.ended {
		return nil // lost, as writes to a queue pair in error
	}
	return e.arrive(wc.ImmData, wc.ByteLen)
}

// apply does what a message of the peer says.
func (ql *qpLink) apply(b []byte) error {
	m, err := parseQPLinkMsg(b)
	if err != nil {
		return err
	}
	e := ql.ends[m.slot]
	if m.kind == qpLinkOpen {
		if ql.client || e != nil {
			return fmt.Errorf("open of stream %d (in use: %v) on a link that does not take opens: %v", m.slot, e != nil, ql.client)
		}
		ql.serveOpen(m)
		return nil
	}
	if e == nil {
		return fmt.Errorf("message of kind %d for stream %d, which is not open", m.kind, m.slot)
	}
	switch m.kind {
	case qpLinkAccept, qpLinkReject:
		if e.open == nil || e.accepted {
			return fmt.Errorf("answer to stream %d, which opened no stream", m.slot)
		}
		if m.kind == qpLinkReject {
			ql.rejected(e, m.body)
			return nil
		}
		return ql.accepted(e, m)
	}
	if !e.accepted || e.peerEnded {
		return fmt.Errorf("end of stream %d before its accept or after its end", m.slot)
	}
	e.peerEnded = true
	e.end()
	e.settle()
	return nil
}

// serveOpen answers a stream-open: the application gets the connection
// (offer), the stream's rings are registered, and the accept carries the
// ring the client is to write.
func (ql *qpLink) serveOpen(m qpLinkMsg) {
	reject := func(code RejectCode, why error) {
		ql.logf("rdma: link to %s: refused stream %d: %s: %v", ql.name, m.slot, code, why)
		ql.send(qpLinkMessage(qpLinkReject, m.slot, code.Marshal()))
	}
	cd, err := DecodeConnectData(m.body)
	if err == nil && cd.RingBytes > linkMaxRing {
		err = fmt.Errorf("%w: ring of %d bytes on a link", ErrWire, cd.RingBytes)
	}
	if err != nil || ql.offer == nil {
		reject(RejectBadHello, err)
		return
	}
	var pre *sdp.Segment
	ps := ql.pool.take(cd.RingBytes)
	if ps != nil {
		pre = ps.mirror
		if pre.FD, err = unix.FcntlInt(uintptr(ps.keep), unix.F_DUPFD_CLOEXEC, max(ql.pool.hidden, 0)); err != nil {
			pre.FD = -1
			ql.pool.discard(ps)
			ps, pre = nil, nil
		}
	}
	o, code, err := ql.offer(cd, pre)
	if err != nil {
		if ps != nil {
			ql.pool.discard(ps) // offer unmapped it
		}
		reject(code, err)
		return
	}
	var reg qpReg
	if ps != nil {
		reg = ps.reg
	} else if reg, err = ql.wire.regStream(o.seg, sdp.SideServer); err != nil {
		o.release(ql.eng)
		reject(RejectResource, err)
		return
	}
	e := ql.newEnd(m.slot, o.seg, sdp.SideServer, reg)
	e.ps = ps
	e.raddr, e.rkey, e.accepted = cd.RingBase, cd.RKey, true
	ad, _ := AcceptData{RingBytes: cd.RingBytes, RKey: reg.rkey, RingBase: reg.raddr}.Marshal()
	ql.send(qpLinkMessage(qpLinkAccept, m.slot, ad))
	st, err := ql.eng.addStream(o.id, o.seg, sdp.SideServer, e, o.comp, o.wakeTx)
	if err != nil {
		e.drop()
		closeOpen(o.comp, o.wakeTx)
		ql.logf("rdma: accepted %s on link to %s but lost it: %v", cd.Client, ql.name, err)
		return
	}
	how := ""
	if ps != nil {
		how = ", rings from the link's pool"
	}
	ql.logf("rdma: accepted %s (link to %s, stream %d%s) as connection %d", cd.Client, ql.name, m.slot, how, st.id)
}

// openStream posts a stream-open for the hello cd of a dial whose
// engine mapping is seg (ps's, registered, when it comes from the link's
// pool); o hears the answer. Once it returns an end, the link owns seg
// (registered, it stays mapped until the stream and the peer are done
// with it, whatever the dial does). It fails with errLinkFull when the
// link has no free slot; ps is then still the caller's.
func (ql *qpLink) openStream(seg *sdp.Segment, cd ConnectData, o *linkOpen, ps *poolSeg) (*qpEnd, error) {
	if ql.broken || ql.retired {
		return nil, fmt.Errorf("%w: link to %s is broken or retired", sdp.ErrHandshake, ql.name)
	}
	slot := ql.slot()
	if slot == 0 {
		return nil, errLinkFull
	}
	var reg qpReg
	var err error
	if ps != nil {
		reg = ps.reg
	} else if reg, err = ql.wire.regStream(seg, sdp.SideClient); err != nil {
		return nil, resourceError(err)
	}
	cd.RingBytes, cd.RKey, cd.RingBase = seg.RingBytes, reg.rkey, reg.raddr
	hello, err := cd.Marshal()
	if err != nil {
		if ps == nil {
			_ = ql.wire.deregStream(reg)
		}
		return nil, fmt.Errorf("%w: %w", sdp.ErrHandshake, err)
	}
	e := ql.newEnd(slot, seg, sdp.SideClient, reg)
	e.ps = ps
	e.open = o
	ql.send(qpLinkMessage(qpLinkOpen, slot, hello))
	return e, nil
}

// accepted starts the stream a dial opened, unless the dial gave up.
func (ql *qpLink) accepted(e *qpEnd, m qpLinkMsg) error {
	ad, err := checkAccept(m.body, e.ringBytes, e.slot)
	if err != nil {
		return err
	}
	e.raddr, e.rkey, e.accepted = ad.RingBase, ad.RKey, true
	o := e.open
	e.open = nil
	if o.cancelled {
		e.unused()
	}
	if st := o.start(ql.eng, e.seg, e, e.drop); st != nil {
		ql.logf("rdma: connection %d: stream %d on link to %s", st.id, e.slot, ql.name)
	}
	return nil
}

// rejected ends a stream-open the server refused.
func (ql *qpLink) rejected(e *qpEnd, body []byte) {
	o := e.open
	e.open = nil
	code := rejectCode(body)
	e.ended, e.peerEnded = true, true // nothing was written either way
	e.closed = true
	e.unused()
	e.settle()
	if !o.cancelled {
		o.finish(rejectError(o.dst, code))
	}
}

// slot returns a free slot, or 0 when the link is full.
func (ql *qpLink) slot() uint8 {
	for i := 1; i <= linkSlotsUsed; i++ {
		if ql.ends[i] == nil {
			return uint8(i)
		}
	}
	return 0
}

func (ql *qpLink) newEnd(slot uint8, seg *sdp.Segment, side int, reg qpReg) *qpEnd {
	e := &qpEnd{ql: ql, slot: slot, seg: seg, ringBytes: seg.RingBytes, side: side, reg: reg, regd: true}
	ql.ends[slot] = e
	ql.open++
	return e
}

// send posts a link message.
func (ql *qpLink) send(msg []byte) {
	ql.msgSeq++
	w := verbs.MakeWRID(wrLinkMsg, 0, ql.msgSeq)
	ql.post(qpPost{wrid: w, do: func() error { return ql.wire.postSend(w, msg) }})
}

// post posts p now, or after what waits for room.
func (ql *qpLink) post(p qpPost) {
	if ql.broken {
		if p.end != nil {
			p.end.complete(verbs.WC{WRID: uint64(p.wrid), Status: verbs.WCWRFlushErr})
		}
		return
	}
	ql.waiting = append(ql.waiting, p)
	if err := ql.postWaiting(); err != nil {
		ql.fail(err)
		return
	}
	ql.upgradeOrFail() // what waits for room waits for a completion
}

// postWaiting posts waiting work requests while the send queue has room.
func (ql *qpLink) postWaiting() error {
	for len(ql.waiting) > 0 && len(ql.inflight) < qpLinkSends {
		p := ql.waiting[0]
		ql.waiting = ql.waiting[1:]
		if err := p.do(); err != nil {
			return fmt.Errorf("post: %w", err)
		}
		ql.inflight = append(ql.inflight, p)
		if p.end != nil {
			p.end.inflight++
		}
	}
	return nil
}

// fail breaks the link: every stream on it sees its work flushed (a
// reset), the queue pair goes, and the peer's streams see the same.
func (ql *qpLink) fail(why error) {
	if ql.broken {
		return
	}
	ql.broken = true
	busy := ql.open
	_ = ql.wire.disconnect()
	// Every end: those in a slot, and those whose slot is free already
	// but whose last work requests had not completed (settle).
	ends := map[*qpEnd]bool{}
	for _, q := range [][]qpPost{ql.inflight, ql.waiting} {
		for _, p := range q {
			if e := p.end; e != nil {
				if !e.closed {
					e.complete(verbs.WC{WRID: uint64(p.wrid), Status: verbs.WCWRFlushErr})
				}
				ends[e] = true
			}
		}
	}
	ql.inflight, ql.waiting = nil, nil
	for slot, e := range ql.ends {
		if e != nil {
			ends[e] = true
			ql.ends[slot] = nil
		}
	}
	var regs []qpReg
	for e := range ends {
		e.flushRecvs()
		e.ended, e.peerEnded, e.inflight = true, true, 0
		if o := e.open; o != nil {
			e.open, e.closed = nil, true // no stream will let go of it
			if !o.cancelled {
				o.finish(fmt.Errorf("%w: link broke: %v", sdp.ErrHandshake, why))
			}
		}
		if e.regd {
			regs = append(regs, e.reg)
			e.regd = false
		}
		if e.closed {
			e.unmap()
		}
	}
	ql.open = 0
	if err := ql.wire.close(); err != nil {
		ql.logf("rdma: link to %s: close: %v", ql.name, err)
	}
	for _, r := range regs { // the QP is gone: nothing uses them
		_ = ql.wire.deregStream(r)
	}
	ql.pool.close()
	if busy > 0 {
		ql.logf("rdma: link to %s broke with %d streams: %v", ql.name, busy, why)
	}
	if ql.onFail != nil {
		ql.onFail(ql)
	}
}

// retire makes the link take no more streams, for the reason why: its
// streams go on, and once none is left but stream-opens their dials gave
// up on, the link is taken down (the peer's end sees it break, with no
// stream on it). Engine goroutine.
func (ql *qpLink) retire(why string) {
	if ql.retired || ql.broken {
		return
	}
	ql.retired = true
	ql.logf("rdma: link to %s retired (%d streams on it): %s", ql.name, ql.open, why)
	if ql.onRetire != nil {
		ql.onRetire(ql)
	}
	ql.downIfIdle()
	ql.upgradeOrFail() // going down once its last work requests completed
}

// downIfIdle takes a retired link down once it carries no stream but
// stream-opens their dials gave up on, and no work request is on its way
// (a stream's last END reaches the peer).
func (ql *qpLink) downIfIdle() {
	if !ql.retired || ql.broken || len(ql.inflight) > 0 || len(ql.waiting) > 0 {
		return
	}
	for _, e := range ql.ends {
		if e != nil && (e.open == nil || !e.open.cancelled) {
			return
		}
	}
	ql.fail(errors.New("retired, and idle"))
}

// qpEnd is one stream's end of a qpLink; it implements Link. Engine
// goroutine only.
type qpEnd struct {
	ql        *qpLink
	slot      uint8
	seg       *sdp.Segment // the engine's mapping: registered, so kept until settled
	ringBytes uint32
	side      int // the local application's: the ring we write
	reg       qpReg
	regd      bool     // reg not released yet (false only once settled)
	ps        *poolSeg // the pool's segment (seg, reg) the stream runs on, or nil
	raddr     uint64
	rkey      uint32 // the peer's ring we write
	accepted  bool

	linkRecvs
	inflight         int  // work requests on the wire
	armAll           bool // the stream waits for its own sends (setArmAll)
	ended, peerEnded bool // END sent, received
	closed           bool // the stream let go: its completions are dropped

	open *linkOpen
}

// end takes the stream's end down, once: what waits to be posted is
// flushed, its receives too, and the peer gets END.
func (e *qpEnd) end() {
	if e.ended {
		return
	}
	e.ended = true
	ql := e.ql
	keep := ql.waiting[:0]
	for _, p := range ql.waiting {
		if p.end == e {
			e.complete(verbs.WC{WRID: uint64(p.wrid), Status: verbs.WCWRFlushErr})
			continue
		}
		keep = append(keep, p)
	}
	ql.waiting = keep
	e.flushRecvs()
	ql.send(qpLinkMessage(qpLinkEnd, e.slot, nil))
	ql.upgradeOrFail() // its writes on the wire: settle waits for them
}

// settle frees the slot once both ends said END, and the registration
// (and the mapping, once the stream let go) once the stream's last work
// request completed too.
func (e *qpEnd) settle() {
	ql := e.ql
	if !e.ended || !e.peerEnded {
		return
	}
	if ql.ends[e.slot] == e {
		ql.ends[e.slot] = nil
		ql.open--
		defer ql.downIfIdle()
	}
	if e.inflight > 0 || !e.closed {
		return
	}
	if !e.regd { // the link broke: its registration went with it
		e.unmap()
		return
	}
	e.regd = false
	if ps := e.ps; ps != nil && ql.pool.hold(ps) {
		e.seg, e.ps = nil, nil // the pool's again
		return
	}
	reg, seg, slot, ps := e.reg, e.seg, e.slot, e.ps
	e.seg, e.ps = nil, nil
	free := func() {
		if err := ql.wire.deregStream(reg); err != nil {
			ql.logf("rdma: link to %s: stream %d: deregister: %v", ql.name, slot, err)
		}
		if seg != nil {
			seg.Close()
		}
		if ps != nil {
			closeKeep(ps.keep)
		}
	}
	if ql.later != nil {
		ql.later(free)
	} else {
		free()
	}
}

// unused marks a stream's segment let go by its application, which never
// had it (a dial that gave up, a stream-open refused): the pool may take
// it back as soon as it is settled.
func (e *qpEnd) unused() {
	if e.ps != nil && e.seg != nil {
		e.seg.SetLetGo(e.side)
	}
}

// unmap releases the engine's mapping once the stream let go.
func (e *qpEnd) unmap() {
	if e.seg != nil {
		e.seg.Close()
		e.seg = nil
	}
	if e.ps != nil {
		closeKeep(e.ps.keep)
		e.ps = nil
	}
}

// drop: the stream lets go; its mapping goes once settled.
func (e *qpEnd) drop() {
	e.end()
	e.closed = true
	e.setArmAll(false) // its stream waits for nothing any more
	e.settle()
}

// post posts a work request of this stream.
func (e *qpEnd) post(wrid verbs.WRID, signaled bool, do func() error) error {
	if e.closed {
		return errors.New("rdma: stream closed")
	}
	if e.ended {
		e.complete(verbs.WC{WRID: uint64(wrid), Status: verbs.WCWRFlushErr})
		return nil
	}
	e.ql.post(qpPost{wrid: wrid, end: e, signaled: signaled, do: do})
	return nil
}

func (e *qpEnd) write(wrid verbs.WRID, off, n, imm uint32, withImm, signaled bool) error {
	if withImm {
		imm = MakeLinkImm(e.slot, imm)
	} else {
		imm = 0
	}
	return e.post(wrid, signaled, func() error {
		return e.ql.wire.postWrite(wrid, e.reg.lkey, e.reg.laddr+uint64(off), n, e.raddr+uint64(off), e.rkey, imm, withImm)
	})
}

func (e *qpEnd) PostWrite(wrid verbs.WRID, ring int, off, n uint32, imm uint32, withImm, signaled bool) error {
	if ring != e.side || n == 0 || uint64(off)+uint64(n) > uint64(e.ringBytes) {
		return fmt.Errorf("rdma: bad write ring %d [%d,+%d) on a link", ring, off, n)
	}
	return e.write(wrid, off, n, imm, withImm, signaled)
}

func (e *qpEnd) PostImm(wrid verbs.WRID, imm uint32, signaled bool) error {
	return e.write(wrid, 0, 0, imm, true, signaled)
}

func (e *qpEnd) PostProbe(wrid verbs.WRID) error { return e.write(wrid, 0, 0, 0, false, true) }

func (e *qpEnd) PostRecv(wrid verbs.WRID) error {
	if e.closed {
		return errors.New("rdma: stream closed")
	}
	e.postRecv(wrid, e.ended)
	return nil
}

// Notify makes sure the link's CQ is armed as the link needs it
// (qpLink.upgrade): ready arms it each time it took the completions, and
// the engine polls every stream after the link's completions were handed
// out.
func (e *qpEnd) Notify() error { return e.ql.upgrade() }

// setArmAll says whether the stream waits for a completion of its own
// sends (stream.waitsForSends): the link's CQ is then armed for every
// completion.
func (e *qpEnd) setArmAll(all bool) {
	if all == e.armAll {
		return
	}
	e.armAll = all
	if all {
		e.ql.wantAll++
	} else {
		e.ql.wantAll--
	}
	e.ql.upgradeOrFail()
}

// upgradeOrFail is upgrade, breaking the link when the CQ cannot be armed.
func (ql *qpLink) upgradeOrFail() {
	if err := ql.upgrade(); err != nil {
		ql.fail(fmt.Errorf("arm: %w", err))
	}
}

// Disconnect takes this stream's end down; the link and its other
// streams go on.
func (e *qpEnd) Disconnect() error {
	e.end()
	return nil
}

func (e *qpEnd) Close() error {
	e.drop()
	return nil
}

// closeHolding keeps the mapping until the registration goes (settle):
// the peer may still write there until its END.
func (e *qpEnd) closeHolding(seg *sdp.Segment, _ int) (bool, error) {
	e.drop()
	return true, nil
}
