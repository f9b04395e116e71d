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

// Connection management over librdmacm (RDMA_PS_TCP: port numbers are
// TCP's). The client resolves the address and the route, creates its QP,
// posts its receives and connects with ConnectData in the private data;
// the server answers with AcceptData or rejects with a RejectCode. All of
// it runs on the engine goroutine, driven by the event channel.

// connParam is what both sides ask of the connection: no RDMA READ or
// atomics (writes only), and retries forever rather than failing a link
// over a lost packet or a receive queue the peer's engine has not
// refilled yet.
func connParam(private []byte) verbs.ConnParam {
	return verbs.ConnParam{PrivateData: private, RetryCount: 7, RNRRetryCount: 7}
}

// dialer is a client connection being set up.
type dialer struct {
	dst, local netip.AddrPort
	ring       uint32
	deadline   time.Time
	mirror     *sdp.Segment // the engine's mapping
	wake       int          // the engine's end of the wake socket
	wakeTx     int          // the engine's end of the writers' wake socket
	id         *verbs.CMID
	link       *verbsLink
	sid        uint32
	s          *stream
	res        chan error // exactly one result
	ready      int        // eventfd written just before the result is sent
	done       bool
	laps       *laps  // the steps' times, for the debug log
	spare      *spare // its registration, until the link takes it (or not)
	keep       int    // the engine's fd of the segment's memfd until the link takes it, or -1
}

func (d *dialer) remaining() time.Duration {
	return max(time.Until(d.deadline), time.Millisecond)
}

// Dial connects to dst over RDMA: local is the address the application's
// getsockname reports (the hello carries it to the server), ringBytes the
// ring size. It waits at most timeout, or longer when this host's recent
// handshakes needed it (handshakeBound). The errors it returns wrap
// sdp.ErrNoListener (nothing at dst accepts osf RDMA connections: no
// listener, or a host without RDMA or osf), sdp.ErrBacklog,
// sdp.ErrHandshake, verbs.ErrNoDevice (no device serves the route),
// ErrResource or ErrStopped; the caller then uses kernel TCP.
func (t *Transport) Dial(dst, local netip.AddrPort, ringBytes uint32, timeout time.Duration) (*sdp.Endpoint, error) {
	if t.cfg.Links && ringBytes <= linkMaxRing {
		// A stream on this process's link to the listener; a full link,
		// or a peer that takes no links, leaves a connection of its own.
		ep, err := t.dialStream(dst, local, ringBytes, timeout)
		if !errors.Is(err, errUseConnection) {
			return ep, err
		}
		t.cfg.Logf("rdma: connect to %s: %v", dst, err)
	}
	start := time.Now()
	lp := newLaps()
	timeout = t.bound.of(timeout)
	var seg, mirror *sdp.Segment
	keep := -1
	sp := t.spares.takeWaiting(ringBytes, dst.Addr().Unmap(), netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()))
	if sp != nil {
		seg, mirror, keep = sp.seg, sp.mirror, sp.keep
		sp.keep = -1
	} else {
		var err error
		if seg, err = sdp.CreateSegment(ringBytes); err != nil {
			return nil, resourceError(err)
		}
		if mirror, err = seg.Mirror(); err != nil {
			seg.Close()
			return nil, resourceError(err)
		}
		keep = keepFD(seg.FD, t.cfg.HiddenBase)
	}
	seg.InitHeader(local, dst, t.cfg.PID)
	seg.SetFlags(sdp.SegRDMA)
	ws, err := newWakeSockets(t.cfg.HiddenBase)
	if err != nil {
		t.dropTaken(sp)
		closeKeep(keep)
		mirror.Close()
		seg.Close()
		return nil, resourceError(err)
	}
	d := &dialer{
		dst: netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()), local: local, ring: ringBytes,
		deadline: time.Now().Add(timeout), mirror: mirror, wake: ws.engine, wakeTx: ws.engineTx, res: make(chan error, 1),
		laps: lp, spare: sp, keep: keep,
	}
	if sp != nil && sp.peer.IsValid() {
		lp.lap("reused")
	} else {
		lp.lap("segment")
	}
	fail := func(err error) (*sdp.Endpoint, error) {
		closeOpen(ws.app, ws.appTx)
		seg.Close()
		return nil, err
	}
	failEarly := func(err error) (*sdp.Endpoint, error) {
		t.dropTaken(sp)
		closeKeep(d.keep)
		closeOpen(ws.engine, ws.engineTx)
		mirror.Close()
		return fail(err)
	}
	if d.ready, err = t.readyFD(); err != nil {
		return failEarly(resourceError(err))
	}
	if err := t.eng.post(func() { t.startDial(d) }); err != nil {
		t.putReadyFD(d.ready)
		return failEarly(err)
	}
	answered, err := d.wait(timeout)
	if !answered {
		derr := t.eng.Do(func() {
			if !d.done {
				t.dialFailed(d, fmt.Errorf("%w: no answer from %s within %v: %w", sdp.ErrHandshake, dst, timeout, verbs.ErrTimeout))
			}
		})
		if derr != nil {
			unix.Close(d.ready)
			return fail(derr) // the engine stopped; it released everything
		}
		err = <-d.res
	}
	t.putReadyFD(d.ready) // written before the result: drained
	if err != nil {
		return fail(err)
	}
	t.bound.observe(time.Since(start))
	lp.lap("return")
	// The next dial's spare is made once this one has returned (the
	// next dial waits for it rather than make its own): made as soon as
	// the connection was established, it held up the return (the core's
	// thread waited for the Go scheduler, 6-20 ms in an emulated guest,
	// while the spare was registered); made while the dial waited for
	// the server, it slowed the handshake as much.
	dev, src := d.link.dev, dialSource(local, d.dst).Addr()
	_ = t.eng.post(func() { t.wantSpare(dev, ringBytes, src) })
	t.cfg.Logf("rdma: connect to %s took %v", dst, lp)
	return ws.endpoint(seg, local, dst), nil
}

// dropTaken releases the registration of a spare (nil: none) that Dial
// took but does not use: on the engine goroutine, which owns its id (it
// may be resolving ahead of the dial, prepare), or here once the engine
// has stopped.
func (t *Transport) dropTaken(sp *spare) {
	if sp != nil && t.eng.post(sp.closeRegistration) != nil {
		sp.closeRegistration()
	}
}

// wait returns the dial's result (answered), or answered false when
// none came within timeout. It sleeps in poll(2) on the ready eventfd
// rather than on the channel: a goroutine blocked on a channel (here the
// core's, locked to the thread that called into Go) is woken through the Go
// scheduler, which took 4-30 ms of each connect in an emulated guest
// (an idle thread woken to hand the thread its P); the eventfd wakes the
// sleeping thread directly.
func (d *dialer) wait(timeout time.Duration) (answered bool, err error) {
	return waitReady(d.ready, d.res, timeout)
}

// waitReady is dialer.wait for an answer on res whose sender writes the
// eventfd ready first. The poll gives the goroutine's P up (pollBlock).
func waitReady(ready int, res chan error, timeout time.Duration) (answered bool, err error) {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-res:
			return true, err
		default:
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		fds := []unix.PollFd{{Fd: int32(ready), Events: unix.POLLIN}}
		_, perr := pollBlock(fds, int((left+time.Millisecond-1)/time.Millisecond))
		if perr != nil && perr != unix.EINTR {
			// Cannot sleep on the eventfd: wait on the channel.
			select {
			case err := <-res:
				return true, err
			case <-time.After(time.Until(deadline)):
				return false, nil
			}
		}
		if perr == nil && fds[0].Revents&unix.POLLIN != 0 {
			return true, <-res // sent right after the eventfd was written
		}
	}
}

// readyFD returns an eventfd for a dial's wait (from the transport's free
// list, else a new one in the hidden range).
func (t *Transport) readyFD() (int, error) {
	t.readyMu.Lock()
	if n := len(t.readyFree); n > 0 {
		fd := t.readyFree[n-1]
		t.readyFree = t.readyFree[:n-1]
		t.readyMu.Unlock()
		return fd, nil
	}
	t.readyMu.Unlock()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("rdma: eventfd: %w", err)
	}
	return hideFD(fd, t.cfg.HiddenBase), nil
}

// putReadyFD drains a dial's eventfd, whose result was taken, and keeps it
// for the next dial.
func (t *Transport) putReadyFD(fd int) {
	var b [8]byte
	if _, err := unix.Read(fd, b[:]); err != nil && err != unix.EAGAIN {
		unix.Close(fd)
		return
	}
	t.readyMu.Lock()
	if len(t.readyFree) < 4 {
		t.readyFree = append(t.readyFree, fd)
		fd = -1
	}
	t.readyMu.Unlock()
	if fd >= 0 {
		unix.Close(fd)
	}
}

// result hands the dial's result to Dial: the eventfd first (Dial sleeps
// in poll on it), then the value.
func (d *dialer) result(err error) {
	var one = [8]byte{1}
	_, _ = unix.Write(d.ready, one[:])
	d.res <- err
}

// wakeSockets are the two socket pairs of a connection the engine serves
// for a client: the application's fd and its writers' wake socket, and the
// engine's ends of both.
type wakeSockets struct {
	app, appTx       int
	engine, engineTx int
}

// newWakeSockets makes both pairs; on error nothing is left open.
func newWakeSockets(hiddenBase int) (wakeSockets, error) {
	app, engine, err := wakePair(hiddenBase)
	if err != nil {
		return wakeSockets{}, err
	}
	appTx, engineTx, err := wakePair(hiddenBase)
	if err != nil {
		closeOpen(app, engine)
		return wakeSockets{}, err
	}
	return wakeSockets{app: app, appTx: appTx, engine: engine, engineTx: engineTx}, nil
}

// endpoint is the client's Endpoint over seg, with the application's ends.
func (ws wakeSockets) endpoint(seg *sdp.Segment, local, dst netip.AddrPort) *sdp.Endpoint {
	return &sdp.Endpoint{WakeFD: ws.app, WakeTxFD: ws.appTx, Segment: seg, Side: sdp.SideClient, Local: local, Remote: dst}
}

// wakePair makes a connected AF_UNIX stream socket pair (close-on-exec) for
// a wake socket: the application's end, blocking (the C data path sleeps
// in recv on it), and the engine's, moved to the hidden range (the engine
// never blocks on it: every call passes MSG_DONTWAIT).
func wakePair(hiddenBase int) (app, engine int, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("wake socket pair: %w", err)
	}
	return fds[0], hideFD(fds[1], hiddenBase), nil
}

// startDial creates the id (or takes the spare's, bound to the dial's
// source address with its QP made) and starts resolving the address; a
// reused spare's id that resolved the dial's destination ahead of it
// (prepare) skips what it resolved.
func (t *Transport) startDial(d *dialer) {
	d.laps.lap("engine")
	src := dialSource(d.local, d.dst)
	ahead := aheadNone
	if d.spare != nil {
		ahead = d.spare.ahead(src.Addr(), d.dst, time.Now())
		t.spares.mu.Lock()
		t.spares.ahead[ahead]++
		t.spares.mu.Unlock()
		if ahead == aheadStale {
			delete(t.resolving, d.spare.id)
			d.spare.closeID() // resolved for another destination, or too long ago
		}
		if d.id = d.spare.takeID(src.Addr()); d.id != nil {
			delete(t.resolving, d.id) // its events are the dial's now
		}
	}
	if d.id == nil {
		ahead = aheadNone
		var err error
		if d.id, err = t.ch.CreateID(); err != nil {
			t.dialFailed(d, resourceError(err))
			return
		}
	}
	t.dials[d.id] = d
	switch ahead {
	case aheadNone:
		if err := d.id.ResolveAddr(src, d.dst, d.remaining()); err != nil {
			t.dialFailed(d, classify(err))
		}
		d.laps.lap("resolve-call")
	case aheadAddr: // ADDR_RESOLVED comes to dialEvent
		d.laps.lap("address-ahead")
	case aheadRoute: // ROUTE_RESOLVED comes to dialEvent
		d.laps.lap("address-ahead")
		t.dialAddressed(d, false)
	case aheadDone:
		d.laps.lap("route-ahead")
		if t.dialAddressed(d, false) {
			t.dialRouted(d)
		}
	}
}

// dialSource is the address a dial to dst binds its id to: the
// application's local address (port 0: any), or none when that is unknown
// or of the other family.
func dialSource(local, dst netip.AddrPort) netip.AddrPort {
	src := netip.AddrPortFrom(local.Addr().Unmap(), 0)
	if !src.Addr().IsValid() || src.Addr().Is4() != dst.Addr().Is4() {
		return netip.AddrPort{}
	}
	return src
}

// dialEvent advances a dial.
func (t *Transport) dialEvent(d *dialer, ev *verbs.Event) {
	if err := ev.Err(); err != nil {
		t.dialFailed(d, eventFailure(d.dst, ev, err))
		return
	}
	switch ev.Type {
	case verbs.EventAddrResolved:
		d.laps.lap("address")
		t.dialAddressed(d, true)
	case verbs.EventRouteResolved:
		d.laps.lap("route")
		t.dialRouted(d)
	case verbs.EventEstablished:
		d.laps.lap("established")
		ad, err := DecodeAcceptData(ev.PrivateData)
		if err == nil && ad.RingBytes != d.ring {
			err = fmt.Errorf("%w: server's rings have %d bytes, ours %d", ErrWire, ad.RingBytes, d.ring)
		}
		if err != nil {
			t.dialFailed(d, fmt.Errorf("%w: %w", sdp.ErrHandshake, err))
			return
		}
		d.link.setPeer(ad.RingBase, ad.RKey)
		if err := t.eng.register(d.s); err != nil {
			t.dialFailed(d, resourceError(err))
			return
		}
		delete(t.dials, d.id)
		t.conns[d.id] = d.s
		d.done = true
		d.laps.lap("registered")
		d.result(nil)
		t.cfg.Logf("rdma: connected to %s as connection %d (qp %d)", d.dst, d.sid, d.link.qp.Num())
	}
}

// dialAddressed continues a dial whose address is resolved: the route is
// resolved (with route; else it was, or is being, ahead of the dial)
// while the link is made from the spare (or anew) and the receives are
// posted. It reports whether the dial goes on (false: it failed).
func (t *Transport) dialAddressed(d *dialer, route bool) bool {
	// The route is resolved while the QP is made and the receives are
	// posted: its event is then usually waiting when this returns, and
	// is handled without the engine sleeping between.
	if route {
		if err := d.id.ResolveRoute(d.remaining()); err != nil {
			t.dialFailed(d, classify(err))
			return false
		}
	}
	ctx, err := d.id.Context()
	if err != nil {
		t.dialFailed(d, fmt.Errorf("%w: %w", sdp.ErrHandshake, err))
		return false
	}
	dev, err := t.device(ctx)
	if err != nil {
		t.dialFailed(d, resourceError(err))
		return false
	}
	sp := d.spare
	d.spare = nil
	switch {
	case sp != nil && sp.dev == dev:
		d.link, err = newVerbsLinkFrom(t, d.id, dev, sp, d.laps)
	default:
		if sp != nil {
			sp.closeRegistration() // on another device
		}
		d.link, err = newVerbsLink(t, d.id, dev, d.mirror, d.laps)
	}
	if err != nil {
		t.dialFailed(d, err)
		return false
	}
	if d.keep >= 0 {
		d.link.reuse = &reuse{keep: d.keep, peer: d.dst.Addr(), src: dialSource(d.local, d.dst).Addr(), dst: d.dst}
		d.keep = -1
	}
	d.sid = t.eng.allocID()
	// The receives are posted before connecting: the server may write
	// as soon as the connection is established.
	if d.s, err = newStream(d.sid, d.mirror, sdp.SideClient, d.link, d.wake, d.wakeTx, t.cfg.Logf); err != nil {
		t.dialFailed(d, resourceError(err))
		return false
	}
	d.laps.lap("recvs")
	return true
}

// dialRouted connects a dial whose route is resolved, with the hello in
// the private data.
func (t *Transport) dialRouted(d *dialer) {
	hello, err := ConnectData{
		RingBytes: d.ring, RKey: d.link.localKey(sdp.SideServer), RingBase: d.link.localBase(sdp.SideServer),
		Client: d.local, Server: d.dst,
	}.Marshal()
	if err != nil {
		t.dialFailed(d, fmt.Errorf("%w: %w", sdp.ErrHandshake, err))
		return
	}
	if err := d.id.Connect(connParam(hello)); err != nil {
		t.dialFailed(d, classify(err))
	}
}

// dialFailed releases what a dial made and reports err.
func (t *Transport) dialFailed(d *dialer, err error) {
	if d.done {
		return
	}
	d.done = true
	if d.id != nil {
		delete(t.dials, d.id)
	}
	switch {
	case d.link != nil:
		if d.sid != 0 { // reserved, with or without a stream (newStream may have failed)
			t.eng.abandon(d.sid)
		}
		if d.s != nil {
			d.s.tx.retire()
		}
		d.link.Close() // and the id
	case d.id != nil:
		d.id.Close() // and a spare's QP on it, before the spare's CQ
	}
	if d.spare != nil {
		d.spare.closeRegistration() // its segment is the dial's
		d.spare = nil
	}
	closeKeep(d.keep)
	d.keep = -1
	d.mirror.Close()
	closeOpen(d.wake, d.wakeTx)
	t.cfg.Logf("rdma: connect to %s: %v (after %v)", d.dst, err, d.laps)
	d.result(err)
}

// eventFailure turns the failure event of a dial to dst into the error the
// core maps to a fallback reason.
func eventFailure(dst netip.AddrPort, ev *verbs.Event, err error) error {
	switch ev.Type {
	case verbs.EventRejected:
		code, ok := DecodeReject(ev.PrivateData)
		if !ok {
			return fmt.Errorf("%w: %s rejected the RDMA connection (no osf RDMA listener on the port): %w", sdp.ErrNoListener, dst, err)
		}
		return rejectError(dst, code)
	case verbs.EventUnreachable:
		return fmt.Errorf("%w: %s did not answer the RDMA connection request (no RDMA or no osf there): %w", sdp.ErrNoListener, dst, err)
	case verbs.EventDeviceRemoval:
		return fmt.Errorf("rdma: connect to %s: %w", dst, err)
	}
	return classify(err)
}

// rejectError is the error of a dial to dst that the server rejected with
// code: the fallback reason the core records.
func rejectError(dst netip.AddrPort, code RejectCode) error {
	switch code {
	case RejectNoListener:
		return fmt.Errorf("%w: %s: %s", sdp.ErrNoListener, dst, code)
	case RejectBacklog:
		return fmt.Errorf("%w: %s: %s", sdp.ErrBacklog, dst, code)
	}
	return fmt.Errorf("%w: %s refused: %s", sdp.ErrHandshake, dst, code)
}

// classify wraps a failed call's error for the core: a missing device
// stays verbs.ErrNoDevice, the rest is a failed handshake.
func classify(err error) error {
	if errors.Is(err, verbs.ErrNoDevice) {
		return fmt.Errorf("rdma: %w", err)
	}
	return fmt.Errorf("%w: %w", sdp.ErrHandshake, err)
}

// onCMEvents handles every event the connection manager has.
func (t *Transport) onCMEvents() {
	for {
		ev, err := t.ch.GetEvent()
		if err != nil {
			return // EAGAIN: none left
		}
		t.cmEvent(ev)
	}
}

func (t *Transport) cmEvent(ev *verbs.Event) {
	if ev.Type == verbs.EventConnectRequest {
		t.accept(ev)
		return
	}
	if ev.ID == nil {
		return
	}
	if ev.Type == verbs.EventDeviceRemoval {
		if ctx, err := ev.ID.Context(); err == nil {
			t.deviceRemoved(ctx)
		}
	}
	if ld := t.linkIDs[ev.ID]; ld != nil {
		t.linkDialEvent(ld, ev)
		return
	}
	if ql := t.qlinkIDs[ev.ID]; ql != nil {
		t.linkEvent(ql, ev)
		return
	}
	if d := t.dials[ev.ID]; d != nil {
		t.dialEvent(d, ev)
		return
	}
	if sp := t.resolving[ev.ID]; sp != nil {
		t.aheadEvent(sp, ev)
		return
	}
	if s := t.conns[ev.ID]; s != nil {
		switch ev.Type {
		case verbs.EventEstablished:
			if s.laps != nil {
				s.laps.lap("established")
				t.cfg.Logf("rdma: connection %d established after %v", s.id, s.laps)
				s.laps = nil
			}
		case verbs.EventDisconnected, verbs.EventDeviceRemoval, verbs.EventConnectError,
			verbs.EventUnreachable, verbs.EventRejected, verbs.EventTimewaitExit:
			if !s.linkDown {
				t.cfg.Logf("rdma: connection %d: %s", s.id, ev)
			}
			t.eng.linkGone(s)
		}
		return
	}
}

// deviceRemoved releases everything on a device that is going away
// (DEVICE_REMOVAL): its connections are reset (the applications see
// ECONNRESET), dials fail, listeners close; then its completion channel,
// once nothing uses it, so that the kernel can finish removing it (each
// segment's protection domain goes with its registration).
func (t *Transport) deviceRemoved(ctx *verbs.Context) {
	dev := t.devs[ctx]
	if dev == nil || dev.removed {
		return
	}
	dev.removed = true
	t.cfg.Logf("rdma: device %s removed", ctx.Name())
	t.dropSpare(false)
	t.dropRecycled(dev)
	t.stopLinks(dev, fmt.Errorf("rdma: device %s removed: %w", ctx.Name(), verbs.ErrNoDevice))
	for _, d := range t.dials {
		if c, err := d.id.Context(); err == nil && c == ctx {
			t.dialFailed(d, fmt.Errorf("rdma: device %s removed: %w", ctx.Name(), verbs.ErrNoDevice))
		}
	}
	for id, l := range t.listeners {
		if c, err := id.Context(); err == nil && c == ctx {
			t.closeListener(l)
		}
	}
	for _, s := range t.conns {
		if l, ok := s.link.(*verbsLink); ok && l.dev == dev {
			t.eng.linkGone(s)
		}
	}
	t.releaseDevice(dev, time.Now().Add(2*closeDeadline))
}

// releaseDevice frees a removed device's resources once its connections
// are released, retrying until deadline.
func (t *Transport) releaseDevice(dev *device, deadline time.Time) {
	if dev.cc != nil {
		fd := dev.cc.Fd()
		if err := dev.cc.Close(); err != nil {
			if time.Now().Before(deadline) {
				t.eng.after(10*time.Millisecond, func() { t.releaseDevice(dev, deadline) })
			} else {
				t.cfg.Logf("rdma: device %s: %v", dev.ctx.Name(), err)
			}
			return
		}
		t.eng.unwatch(fd) // closing it took it out of the epoll set
		dev.cc = nil
	}
	delete(t.devs, dev.ctx)
}

// accept handles a connection request on a replicated listener: it checks
// the hello, connects to the listener's shm companion (where the
// application's accept takes the connection, exactly as a local shm
// client's), builds the QP over a new segment, sends the companion the
// hello with the segment attached and accepts with its own ring address.
func (t *Transport) accept(ev *verbs.Event) {
	id := ev.ID
	if id == nil {
		return
	}
	reject := func(code RejectCode, why error) {
		t.cfg.Logf("rdma: refused a connection from %s: %s: %v", id.RemoteAddr(), code, why)
		_ = id.Reject(code.Marshal())
		_ = id.Close()
	}
	lp := newLaps()
	l := t.listeners[ev.Listener]
	if l == nil {
		reject(RejectNoListener, errors.New("no listener"))
		return
	}
	cd, err := DecodeConnectData(ev.PrivateData)
	if err != nil {
		reject(RejectBadHello, err)
		return
	}
	if cd.Link {
		if code, err := t.acceptLink(id, cd, l); err != nil {
			reject(code, err)
		}
		return
	}
	s, code, err := t.serve(id, cd, l, lp)
	switch {
	case err != nil && s == nil:
		reject(code, err)
	case err != nil:
		t.cfg.Logf("rdma: accepted %s on %s but lost it: %v", cd.Client, l.addr, err)
	default:
		s.laps = lp
		t.cfg.Logf("rdma: accepted %s on %s as connection %d in %v", cd.Client, l.addr, s.id, lp)
	}
}

// serve sets up the server side of an accepted request: the segment and
// the QP first, then (only when those exist, so that the application never
// sees a hand-off without a hello) the connection to the listener's
// companion. On an error with a nil stream it has released everything but
// id and returns the code to reject it with; with a stream, the request
// was accepted and the stream has been reset and released.
func (t *Transport) serve(id *verbs.CMID, cd ConnectData, l *listener, lp *laps) (*stream, RejectCode, error) {
	ctx, err := id.Context()
	if err != nil {
		return nil, RejectSetup, err
	}
	dev, err := t.device(ctx)
	if err != nil {
		return nil, RejectSetup, err
	}
	// seg's fd goes to the application; mine is the engine's mapping (a
	// spare's second mapping, else seg's own).
	var seg, mine *sdp.Segment
	var link *verbsLink
	peer, keep := id.RemoteAddr().Addr().Unmap(), -1
	if sp := t.spares.take(cd.RingBytes, peer, netip.AddrPort{}); sp != nil && sp.dev == dev {
		seg, mine, keep = sp.seg, sp.mirror, sp.keep
		sp.keep = -1
		if sp.peer.IsValid() {
			lp.lap("reused")
		}
		seg.InitHeader(cd.Client, cd.Server, 0)
		seg.SetFlags(sdp.SegRDMA)
		link, err = newVerbsLinkFrom(t, id, dev, sp, lp)
	} else {
		if sp != nil {
			sp.close() // on another device
		}
		if seg, err = newServerSegment(cd, t.cfg.HiddenBase); err != nil {
			return nil, RejectResource, err
		}
		mine = seg
		keep = keepFD(seg.FD, t.cfg.HiddenBase)
		lp.lap("segment")
		link, err = newVerbsLink(t, id, dev, seg, lp)
	}
	closeSegs := func() {
		if mine != seg {
			mine.Close()
		}
		seg.Close()
		closeKeep(keep)
	}
	if err != nil {
		closeSegs()
		if errors.Is(err, ErrResource) {
			return nil, RejectResource, err
		}
		// A request the client already gave up on (its handshake bound
		// expired) fails here with EINVAL: not a resource problem.
		return nil, RejectSetup, fmt.Errorf("the connection request is no longer valid (did the client give up?): %w", err)
	}
	link.setPeer(cd.RingBase, cd.RKey)
	comp, appTx, wakeTx := -1, -1, -1
	undo := func(code RejectCode, err error) (*stream, RejectCode, error) {
		// The link's Close would destroy the id, which the caller
		// still rejects and closes: take the QP down only.
		link.closed = true
		_ = id.QP().Close()
		_ = link.mr.Close()
		_ = link.cq.Close()
		closeSegs()
		closeOpen(comp, appTx, wakeTx)
		return nil, code, err
	}
	comp, code, gone, err := openCompanion(l.name, t.cfg.HiddenBase)
	lp.lap("companion")
	if err != nil {
		if gone {
			t.cfg.Logf("rdma: the listener on %s is gone; closing its RDMA listener", l.addr)
			t.closeListener(l)
		}
		return undo(code, err)
	}
	if appTx, wakeTx, err = wakePair(t.cfg.HiddenBase); err != nil {
		return undo(RejectResource, err)
	}
	sid := t.eng.allocID()
	s, err := newStream(sid, mine, sdp.SideServer, link, comp, wakeTx, t.cfg.Logf)
	if err == nil {
		lp.lap("recvs")
		err = sendHello(comp, seg, appTx, cd)
		appTx = -1
		lp.lap("hello")
	}
	if err == nil && mine != seg {
		seg.Unmap() // the application has the fd, the engine its own mapping
	}
	if err != nil {
		t.eng.abandon(sid)
		return undo(RejectResource, err)
	}
	ad, err := AcceptData{RingBytes: cd.RingBytes, RKey: link.localKey(sdp.SideClient), RingBase: link.localBase(sdp.SideClient)}.Marshal()
	if err == nil {
		err = id.Accept(connParam(ad))
		lp.lap("accept")
	}
	if err != nil {
		t.eng.abandon(sid)
		return undo(RejectSetup, err)
	}
	if err := t.eng.register(s); err != nil {
		// Accepted: the peer learns of the failure from the disconnect.
		closeKeep(keep)
		t.eng.abandon(sid)
		s.fail(err)
		s.down()
		s.release()
		return s, 0, err
	}
	if keep >= 0 {
		link.reuse = &reuse{keep: keep, peer: peer}
	}
	t.conns[id] = s
	t.wantSpare(dev, cd.RingBytes, netip.Addr{})
	return s, 0, nil
}

// newServerSegment makes the segment of a connection a replicated listener
// accepted, for the hello to the companion: its fd is in the hidden range
// until sendHello closes it.
func newServerSegment(cd ConnectData, hiddenBase int) (*sdp.Segment, error) {
	seg, err := sdp.CreateSegment(cd.RingBytes)
	if err != nil {
		return nil, err
	}
	seg.FD = hideFD(seg.FD, hiddenBase) // until it is sent: out of the program's way
	seg.InitHeader(cd.Client, cd.Server, 0)
	seg.SetFlags(sdp.SegRDMA)
	return seg, nil
}

// sendHello hands a connection to the application through its listener's
// companion, as a local shm client would (sdp.SendHello, libosf.so's
// own): on comp (the engine's end of
// the application's fd to be) the hello, carrying the segment's memfd and
// appTx, the application's end of the writers' wake socket. Either way it
// then closes both (the application has its copies; the engine keeps
// seg's mapping).
func sendHello(comp int, seg *sdp.Segment, appTx int, cd ConnectData) error {
	hello := sdp.Hello{RingBytes: cd.RingBytes, Flags: sdp.HelloRDMA, Client: cd.Client, Server: cd.Server}
	err := sdp.SendHello(comp, hello, seg.FD, appTx)
	closeOpen(seg.FD, appTx)
	seg.FD = -1
	if err != nil {
		return fmt.Errorf("to the companion: %w", err)
	}
	return nil
}

// closeOpen closes the fds that are not -1.
func closeOpen(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// openCompanion connects, for a connection request, to the companion of a
// replicated listener (abstract name), and moves the socket to the hidden
// range. On failure it returns the code to reject the request with and
// whether the listener is gone (the application closed it).
func openCompanion(name string, hiddenBase int) (fd int, code RejectCode, gone bool, err error) {
	comp, err := connectCompanion(name)
	switch {
	case errors.Is(err, unix.EAGAIN):
		return -1, RejectBacklog, false, err
	case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.ENOENT):
		return -1, RejectNoListener, true, err
	case err != nil:
		return -1, RejectResource, false, err
	}
	return hideFD(comp, hiddenBase), 0, false, nil
}

// connectCompanion connects, without waiting, to the abstract AF_UNIX
// listener name (a companion): EAGAIN when its backlog is full,
// ECONNREFUSED when nobody listens there any more.
func connectCompanion(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + name}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
