package rdma

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// Links over a device (Config.Links, qplink.go): a dial to a listener
// this process has a link to opens a stream on it; the first one makes
// the link, a connection of its own whose hello says so (ConnectData.Link:
// no rings, no stream, no application on the server's side), and waits
// for it with any dial that comes meanwhile. The links of a process are
// kept by the listener's address; the server keeps its links by their
// rdma_cm ids, and hands their streams to the listener that accepted the
// link.

// linkDial is a link being made: its id resolves and connects.
type linkDial struct {
	dst, src netip.AddrPort
	local    netip.AddrPort
	id       *verbs.CMID
	w        *verbsWire
	ql       *qpLink
	deadline time.Time
	waiting  []linkWaiter
	step     string // how far it got, for the log of one abandoned
}

// linkWaiter is a dial waiting for its link: its engine mapping (ps's
// when it comes from the link's pool), hello and deadline.
type linkWaiter struct {
	seg      *sdp.Segment
	ps       *poolSeg
	cd       ConnectData
	o        *linkOpen
	deadline time.Time
}

// linkRingBytes is the ring size a link's own hello names (it has none).
const linkRingBytes = 4096

// errUseConnection means the dial is to use a connection of its own: its
// link is full, or the peer does not take links.
var errUseConnection = errors.New("rdma: a connection of its own")

// dialStream opens a stream to dst's listener on this process's link to
// it, making the link if there is none (Dial with Config.Links). It fails
// with an error wrapping errUseConnection when the dial should make a
// connection of its own.
func (t *Transport) dialStream(dst, local netip.AddrPort, ringBytes uint32, timeout time.Duration) (*sdp.Endpoint, error) {
	start := time.Now()
	timeout = t.bound.of(timeout)
	deadline := start.Add(timeout)
	ws, err := newWakeSockets(t.cfg.HiddenBase)
	if err != nil {
		return nil, resourceError(err)
	}
	o := &linkOpen{dst: dst, wake: ws.engine, wakeTx: ws.engineTx, done: make(chan error, 1)}
	if o.ready, err = t.readyFD(); err != nil {
		closeOpen(ws.app, ws.appTx, ws.engine, ws.engineTx)
		return nil, resourceError(err)
	}
	var seg, mirror *sdp.Segment // the application's mapping, the engine's
	fail := func(err error) (*sdp.Endpoint, error) {
		if !o.taken && mirror != nil { // else the link unmaps it once done with it
			mirror.Close()
		}
		closeOpen(ws.app, ws.appTx, ws.engine, ws.engineTx)
		if seg != nil {
			seg.Close()
		}
		return nil, err
	}
	lw := linkWaiter{cd: ConnectData{RingBytes: ringBytes, Client: local, Server: dst}, o: o, deadline: deadline}
	// One command of the engine opens the stream, and the dial sleeps on
	// the eventfd until it is answered: on a link with a segment of its
	// pool ready, no segment made and nothing registered. A dial that
	// also waited for the command (Engine.Do: a goroutine locked to the
	// core's thread, woken through the Go scheduler) paid another
	// hand-off of the Go runtime per connection.
	key := netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	derr := t.eng.postCool(func() { // hot only to make a link (openOnLink)
		if ql := t.qlinks[key]; ql != nil && !ql.broken && !ql.retired {
			lw.ps = ql.pool.take(ringBytes)
		}
		if lw.ps != nil {
			seg, mirror, lw.seg = lw.ps.app, lw.ps.mirror, lw.ps.mirror
			lw.ps.app = nil
			seg.InitHeader(local, dst, t.cfg.PID)
			seg.SetFlags(sdp.SegRDMA | sdp.SegLink)
		} else {
			var serr error
			if seg, mirror, serr = newLinkSegment(ringBytes, local, dst, t.cfg.PID); serr != nil {
				o.finish(serr)
				return
			}
			lw.seg = mirror
		}
		t.openOnLink(dst, local, lw)
	})
	if derr != nil {
		unix.Close(o.ready)
		return fail(derr)
	}
	ready := o.ready
	answered, err := waitReady(ready, o.done, time.Until(deadline))
	if !answered {
		// From now on the engine neither answers nor writes the eventfd.
		_ = t.eng.Do(func() { giveUp(o) })
		select {
		case err = <-o.done:
		default:
			err = fmt.Errorf("%w: %s: no answer to the stream-open within %v: %w", sdp.ErrHandshake, dst, timeout, verbs.ErrTimeout)
		}
		unix.Close(ready) // perhaps written: not reused
	} else {
		t.putReadyFD(ready)
	}
	if err != nil {
		return fail(err)
	}
	t.bound.observe(time.Since(start))
	how := "a stream"
	if lw.ps != nil {
		how = "a stream, rings from the link's pool"
	}
	t.cfg.Logf("rdma: connect to %s (%s) took %v", dst, how, time.Since(start))
	return ws.endpoint(seg, local, dst), nil
}

// openOnLink opens w's stream on the link to dst, or queues it on the
// link being made (making it if need be). A link being made is bounded by
// the deadline of the dial that started it, as a connection's handshake
// is (linkDialExpired). Engine goroutine.
func (t *Transport) openOnLink(dst, local netip.AddrPort, w linkWaiter) {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if w.o.cancelled {
		w.drop(fmt.Errorf("%w: %s: gave up", sdp.ErrHandshake, dst))
		return
	}
	if ql := t.qlinks[dst]; ql != nil && !ql.broken {
		t.openOn(ql, w)
		return
	}
	if ld := t.linkDials[dst]; ld != nil {
		ld.waiting = append(ld.waiting, w)
		return
	}
	ld := &linkDial{dst: dst, local: local, src: dialSource(local, dst), deadline: w.deadline, waiting: []linkWaiter{w}, step: "resolving the address"}
	t.eng.hotForSetUp() // rdma_cm's steps, as a connection's
	id, err := t.ch.CreateID()
	if err == nil {
		ld.id = id
		t.linkDials[dst] = ld
		t.linkIDs[id] = ld
		err = id.ResolveAddr(ld.src, dst, max(time.Until(ld.deadline), time.Millisecond))
	}
	if err != nil {
		t.linkDialFailed(ld, classify(err))
		return
	}
	t.eng.after(time.Until(ld.deadline), func() { t.linkDialExpired(ld) })
}

// linkDialExpired abandons a link that was not made by the deadline of
// the dial that started it: the connection manager may take much longer
// to give up on a handshake (a lost reply is retried for up to a minute),
// and every later dial to that listener would otherwise queue on it and
// fail at its own deadline. The dials still within their deadline start
// a new link. Engine goroutine.
func (t *Transport) linkDialExpired(ld *linkDial) {
	if t.linkDials[ld.dst] != ld {
		return // made, or failed
	}
	waiting := ld.waiting
	ld.waiting = nil
	err := fmt.Errorf("%w: %s: link not made by its first dial's deadline (%s): %w", sdp.ErrHandshake, ld.dst, ld.step, verbs.ErrTimeout)
	t.linkDialFailed(ld, err)
	now := time.Now()
	for _, w := range waiting {
		if w.o.cancelled || !now.Before(w.deadline) {
			w.o.finish(err)
			continue
		}
		t.openOnLink(ld.dst, w.cd.Client, w)
	}
}

// giveUp records that a dial stopped waiting for its stream-open's
// answer: from now on the engine neither answers it nor writes its
// eventfd. A stream-open posted on a made link and not answered within
// the dial's whole bound means the link or the peer's engine is stuck:
// the link is retired (qpLink.retire), so that the next dial makes a new
// one. Engine goroutine.
func giveUp(o *linkOpen) {
	o.cancelled, o.ready = true, 0
	if ql := o.on; ql != nil && !o.answered {
		ql.retire(fmt.Sprintf("a stream-open to %s was not answered within its dial's bound", o.dst))
	}
}

// openOn posts w's stream-open on ql.
func (t *Transport) openOn(ql *qpLink, w linkWaiter) {
	if w.o.cancelled {
		w.drop(fmt.Errorf("%w: %s: gave up", sdp.ErrHandshake, w.o.dst))
		return
	}
	if _, err := ql.openStream(w.seg, w.cd, w.o, w.ps); err != nil {
		if errors.Is(err, errLinkFull) {
			err = fmt.Errorf("%w: %w", errUseConnection, err)
		}
		w.drop(err)
		return
	}
	w.o.taken, w.o.on = true, ql
}

// drop answers a waiter whose stream-open was not posted; a segment of a
// link's pool goes back to nobody (released: the dial has the
// application's mapping).
func (w linkWaiter) drop(err error) {
	if w.ps != nil {
		w.o.taken = true // the engine's mapping is the pool's to release
		w.ps.pool.discard(w.ps)
	}
	w.o.finish(err)
}

// linkDialEvent advances a link being made.
func (t *Transport) linkDialEvent(ld *linkDial, ev *verbs.Event) {
	if err := ev.Err(); err != nil {
		err = eventFailure(ld.dst, ev, err)
		if ev.Type == verbs.EventRejected {
			if code, ok := DecodeReject(ev.PrivateData); ok && code == RejectBadHello {
				err = fmt.Errorf("%w: %s takes no links: %w", errUseConnection, ld.dst, err)
			}
		}
		t.linkDialFailed(ld, err)
		return
	}
	remaining := max(time.Until(ld.deadline), time.Millisecond)
	switch ev.Type {
	case verbs.EventAddrResolved:
		ld.step = "resolving the route"
		if err := ld.id.ResolveRoute(remaining); err != nil {
			t.linkDialFailed(ld, classify(err))
			return
		}
		dev, err := t.idDevice(ld.id)
		if err == nil {
			ld.w, err = newVerbsWire(t.eng, ld.id, dev, t.cfg.HiddenBase)
		}
		if err == nil {
			ld.ql, err = t.newLink(ld.w, ld.dst.String(), true)
		}
		if err != nil {
			t.linkDialFailed(ld, err)
		}
	case verbs.EventRouteResolved:
		ld.step = "connecting: no answer from the listener's host"
		hello, err := ConnectData{RingBytes: linkRingBytes, Link: true, Client: ld.local, Server: ld.dst}.Marshal()
		if err == nil {
			err = ld.id.Connect(connParam(hello))
		}
		if err != nil {
			t.linkDialFailed(ld, classify(err))
		}
	case verbs.EventEstablished:
		if _, err := DecodeAcceptData(ev.PrivateData); err != nil {
			t.linkDialFailed(ld, fmt.Errorf("%w: %w", sdp.ErrHandshake, err))
			return
		}
		delete(t.linkDials, ld.dst)
		delete(t.linkIDs, ld.id)
		t.qlinks[ld.dst] = ld.ql
		t.qlinkIDs[ld.id] = ld.ql
		t.cfg.Logf("rdma: link to %s made (qp %d)", ld.dst, ld.w.qp.Num())
		for _, w := range ld.waiting {
			t.openOn(ld.ql, w)
		}
		if len(ld.waiting) > 0 {
			ld.ql.pool.prime(ld.waiting[0].cd.RingBytes)
		}
		ld.waiting = nil
	}
}

// linkDialFailed releases what a link being made made and fails the dials
// waiting for it.
func (t *Transport) linkDialFailed(ld *linkDial, err error) {
	if t.linkDials[ld.dst] == ld {
		delete(t.linkDials, ld.dst)
	}
	if ld.id != nil {
		delete(t.linkIDs, ld.id)
	}
	switch {
	case ld.ql != nil:
		ld.ql.onFail = nil
		ld.ql.fail(err) // closes the wire and the id
	case ld.w != nil:
		_ = ld.w.close()
	case ld.id != nil:
		_ = ld.id.Close()
	}
	t.cfg.Logf("rdma: link to %s: %v", ld.dst, err)
	for _, w := range ld.waiting {
		w.o.finish(err)
	}
	ld.waiting = nil
}

// idDevice is the device an id is bound to.
func (t *Transport) idDevice(id *verbs.CMID) (*device, error) {
	ctx, err := id.Context()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sdp.ErrHandshake, err)
	}
	dev, err := t.device(ctx)
	if err != nil {
		return nil, resourceError(err)
	}
	return dev, nil
}

// newLink makes a link over w, watched by the engine.
func (t *Transport) newLink(w *verbsWire, name string, client bool) (*qpLink, error) {
	ql, err := newQPLink(t.eng, w, name, client, t.cfg.Logf)
	if err == nil {
		err = w.watch(ql)
	}
	if err != nil {
		return nil, resourceError(err)
	}
	ql.onFail = t.forgetLink
	ql.onRetire = t.retireLink
	ql.later = t.eng.background
	return ql, nil
}

// forgetLink drops a broken link from the transport's maps.
func (t *Transport) forgetLink(ql *qpLink) {
	for dst, l := range t.qlinks {
		if l == ql {
			delete(t.qlinks, dst)
		}
	}
	for id, l := range t.qlinkIDs {
		if l == ql {
			delete(t.qlinkIDs, id)
		}
	}
}

// retireLink makes the next dial to a retired link's listener make a new
// link; the retired one stays known by its id until it is taken down.
func (t *Transport) retireLink(ql *qpLink) {
	for dst, l := range t.qlinks {
		if l == ql {
			delete(t.qlinks, dst)
		}
	}
}

// acceptLink accepts a link request on listener l: its streams go to l's
// application. On error it has released everything but id and returns
// the code to reject it with.
func (t *Transport) acceptLink(id *verbs.CMID, cd ConnectData, l *listener) (RejectCode, error) {
	dev, err := t.idDevice(id)
	if err != nil {
		return RejectSetup, err
	}
	w, err := newVerbsWire(t.eng, id, dev, t.cfg.HiddenBase)
	if err != nil {
		return RejectResource, err
	}
	ql, err := t.newLink(w, id.RemoteAddr().String(), false)
	if err == nil {
		var ad []byte
		if ad, err = (AcceptData{RingBytes: cd.RingBytes}).Marshal(); err == nil {
			err = id.Accept(connParam(ad))
		}
	}
	if err != nil {
		if ql != nil {
			ql.onFail = nil
			ql.broken = true
		}
		_ = w.release() // not closed: id stays the caller's
		return RejectSetup, err
	}
	ql.offer = func(cd ConnectData, pre *sdp.Segment) (offered, RejectCode, error) {
		o, code, gone, err := offerConn(t.eng, l.name, cd, true, pre, t.cfg.HiddenBase)
		if gone && t.listeners[l.id] == l {
			t.cfg.Logf("rdma: the listener on %s is gone; closing its RDMA listener", l.addr)
			t.closeListener(l)
		}
		return o, code, err
	}
	t.qlinkIDs[id] = ql
	t.cfg.Logf("rdma: link from %s accepted on %s (qp %d)", id.RemoteAddr(), l.addr, w.qp.Num())
	return 0, nil
}

// linkEvent handles an event of an established link's id.
func (t *Transport) linkEvent(ql *qpLink, ev *verbs.Event) {
	switch ev.Type {
	case verbs.EventEstablished:
		t.cfg.Logf("rdma: link to %s established", ql.name)
	case verbs.EventDisconnected, verbs.EventDeviceRemoval, verbs.EventConnectError,
		verbs.EventUnreachable, verbs.EventRejected, verbs.EventTimewaitExit:
		ql.ready() // what completed before the end
		ql.fail(fmt.Errorf("%s", ev))
	}
}

// stopLinks breaks every link (Stop, a removed device).
func (t *Transport) stopLinks(dev *device, err error) {
	for _, ld := range t.linkDials {
		if dev == nil || ld.w != nil && ld.w.dev == dev {
			t.linkDialFailed(ld, err)
		}
	}
	for _, ql := range t.qlinkIDs {
		if w, ok := ql.wire.(*verbsWire); dev == nil || ok && w.dev == dev {
			ql.fail(err)
		}
	}
}
