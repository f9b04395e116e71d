package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/shm"
	"github.com/osfproject/osf/verbs"
)

// Sim is a software stand-in for an RDMA device, for tests on machines
// without one (OSF_DEBUG_RDMA_SIM=1): the same engine, streams, wire data
// and listener replication through the companion as Transport, but each
// "queue pair" is a connected AF_UNIX stream socket between the two
// engines (so both ends must be on this host, in one network namespace),
// and the connection manager is a handshake on that socket. It lets the
// transport conformance suite run the whole RDMA path — the engine as the
// C data path's peer, both wake sockets, credits, FIN, CLOSE, the
// companion hand-off — through libosf.so and real programs. Never enable
// it in production: it is slower than shm and exists only to test the
// engine.
//
// On the socket, every message is a 16-byte header and a payload:
//
//	off len
//	  0   1  kind: 1 write, 2 connect data, 3 accept data, 4 reject data
//	  1   1  ring (write)
//	  2   1  flags: 1 = with immediate (write)
//	  3   1  reserved
//	  4   4  offset in the ring (write)
//	  8   4  payload bytes
//	 12   4  immediate (write with immediate)
//
// all little endian; a write's payload goes to that ring's offset, then
// the immediate consumes a posted receive, as RDMA WRITE WITH IMMEDIATE
// does. Connect, accept and reject payloads are the private data blocks
// of wire.go (the ring base and rkey are unused). The listener of a
// companion named N is the abstract AF_UNIX name "osfsim/" + N.
type Sim struct {
	cfg Config
	eng *Engine

	// Engine goroutine only.
	listeners map[string]int      // companion name -> listening socket
	links     map[string]*muxLink // Config.Links: this process's links by the companion they reach
	muxes     map[*muxLink]bool   // every link, dialed or accepted
	linksMade int                 // links dialed, ever (tests)
}

const (
	simWrite   = 1
	simConnect = 2
	simAccept  = 3
	simReject  = 4
	simHdr     = 16
	simPrefix  = "osfsim/"
	// simHandshake bounds how long a listener waits for a connect request.
	simHandshake = 5 * time.Second
)

// StartSim starts the engine with the software stand-in.
func StartSim(cfg Config) (*Sim, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	eng, err := NewEngine(EngineConfig{HiddenBase: cfg.HiddenBase, PollSpin: cfg.PollSpin, Logf: cfg.Logf})
	if err != nil {
		return nil, err
	}
	s := &Sim{cfg: cfg, eng: eng, listeners: map[string]int{}, links: map[string]*muxLink{}, muxes: map[*muxLink]bool{}}
	if err := eng.Do(eng.armExit); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop resets every connection, closes the listeners and stops the engine.
func (s *Sim) Stop() {
	_ = s.eng.Do(func() {
		for name := range s.listeners {
			s.closeListener(name)
		}
		for ml := range s.muxes {
			ml.fail(ErrStopped)
		}
	})
	s.eng.Stop()
}

// Devices returns ["sim"].
func (s *Sim) Devices() []string { return []string{"sim"} }

// DeviceFor says the stand-in serves every route.
func (s *Sim) DeviceFor(netip.Addr) (string, bool, string) { return "sim", true, "" }

// Replicate listens, beside the companion of a listener on addr (which
// must exist), for simulated RDMA connections, which the engine hands to
// the application through the companion as Transport.Replicate does. A
// second call for the same companion does nothing.
func (s *Sim) Replicate(addr netip.AddrPort, v6only bool, backlog int) error {
	name := shm.ListenName(addr, v6only)
	var err error
	derr := s.eng.Do(func() {
		if _, ok := s.listeners[name]; ok {
			return
		}
		var fd int
		if fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0); err != nil {
			err = fmt.Errorf("rdma sim: listen on %s: %w", addr, err)
			return
		}
		fd = hideFD(fd, s.cfg.HiddenBase)
		if err = unix.Bind(fd, &unix.SockaddrUnix{Name: "@" + simPrefix + name}); err == nil {
			err = unix.Listen(fd, max(backlog, 1))
		}
		if err == nil {
			err = s.eng.watchSetUp(fd, func() { s.onListen(name, fd) })
		}
		if err != nil {
			unix.Close(fd)
			err = fmt.Errorf("rdma sim: listen on %s: %w", addr, err)
			return
		}
		forkCloseAdd(fd) // a fork child must not keep the name bound
		s.listeners[name] = fd
	})
	if derr != nil {
		return derr
	}
	return err
}

// closeListener closes the listener of companion name. Engine goroutine.
func (s *Sim) closeListener(name string) {
	fd := s.listeners[name]
	delete(s.listeners, name)
	s.eng.unwatch(fd)
	forkCloseDel(fd)
	unix.Close(fd)
}

// onListen accepts pending connection requests; each handshake reads the
// request on its own goroutine, then sets the connection up on the
// engine's. Engine goroutine.
func (s *Sim) onListen(name string, lfd int) {
	for {
		fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		fd = hideFD(fd, s.cfg.HiddenBase)
		go s.handshake(name, fd)
	}
}

// handshake reads a connection request from fd and has the engine serve
// it.
func (s *Sim) handshake(name string, fd int) {
	kind, b, err := simRead(fd, time.Now().Add(simHandshake))
	if err == nil && kind == simLinkHello && len(b) == 0 {
		// A link (links.go): its stream-opens follow on the socket.
		var lerr error
		if derr := s.eng.Do(func() { _, lerr = s.newMuxLink(fd, name, false) }); derr != nil || lerr != nil {
			unix.Close(fd)
		}
		return
	}
	if err != nil || kind != simConnect {
		unix.Close(fd)
		return
	}
	cd, err := DecodeConnectData(b)
	if err != nil {
		_ = simSend(fd, simReject, RejectBadHello.Marshal())
		unix.Close(fd)
		return
	}
	if derr := s.eng.Do(func() { s.serve(name, fd, cd) }); derr != nil {
		unix.Close(fd)
	}
}

// serve answers a connection request on fd as Transport.accept and serve
// do: the companion, a segment, the hello with the segment and the
// writers' wake socket, the answer, the stream. Engine goroutine.
func (s *Sim) serve(name string, fd int, cd ConnectData) {
	reject := func(code RejectCode, why error) {
		s.cfg.Logf("rdma sim: refused %s: %s: %v", cd.Client, code, why)
		_ = simSend(fd, simReject, code.Marshal())
		unix.Close(fd)
	}
	o, code, err := s.offer(name, cd, false)
	if err != nil {
		reject(code, err)
		return
	}
	ad, _ := AcceptData{RingBytes: cd.RingBytes}.Marshal()
	if err := simSend(fd, simAccept, ad); err != nil {
		o.release(s.eng)
		reject(RejectResource, err)
		return
	}
	st, err := s.adopt(o.id, fd, o.seg, sdp.SideServer, o.comp, o.wakeTx)
	if err != nil {
		s.cfg.Logf("rdma sim: accepted %s but lost it: %v", cd.Client, err)
		return
	}
	s.cfg.Logf("rdma: accepted %s (sim) as connection %d", cd.Client, st.id)
}

// offered is a connection request handed to the application (offer): its
// number, the engine's mapping of its segment and the engine's ends of
// its wake socket (comp) and writers' wake socket.
type offered struct {
	id           uint32
	seg          *sdp.Segment
	comp, wakeTx int
}

// release gives everything back when the request cannot be answered.
func (o offered) release(e *Engine) {
	e.abandon(o.id)
	o.seg.Close()
	closeOpen(o.comp, o.wakeTx)
}

// offer is offerConn on the stand-in: a companion that is gone closes its
// simulated RDMA listener. Engine goroutine.
func (s *Sim) offer(name string, cd ConnectData, link bool) (offered, RejectCode, error) {
	o, code, gone, err := offerConn(s.eng, name, cd, link, nil, s.cfg.HiddenBase)
	if _, ok := s.listeners[name]; ok && gone {
		s.cfg.Logf("rdma sim: the listener of %s is gone; closing its simulated RDMA listener", name)
		s.closeListener(name)
	}
	return o, code, err
}

// offerConn hands the connection request cd to the application through
// the companion name: a segment, a number (before the hello: the
// application may accept, read and exit before the stream is adopted, and
// its exit must wait for the stream) and the hello with the segment and
// the writers' wake socket. On failure nothing is left, code is what to
// refuse the request with, and gone says the companion is gone (its
// listener should close). link marks the segment as a stream on a link
// (sdp.SegLink). pre, when not nil, is the segment to offer (the engine's
// mapping of a segment of a link's pool, its FD the copy to send),
// released too on failure. Engine goroutine.
func offerConn(eng *Engine, name string, cd ConnectData, link bool, pre *sdp.Segment, hiddenBase int) (o offered, code RejectCode, gone bool, err error) {
	comp, code, gone, err := openCompanion(name, hiddenBase)
	if err != nil {
		if pre != nil {
			pre.Close()
		}
		return offered{}, code, gone, err
	}
	seg := pre
	if seg != nil {
		seg.InitHeader(cd.Client, cd.Server, 0)
		seg.SetFlags(sdp.SegRDMA)
	} else if seg, err = newServerSegment(cd, hiddenBase); err != nil {
		unix.Close(comp)
		return offered{}, RejectResource, false, err
	}
	if link {
		seg.SetFlags(sdp.SegLink)
	}
	id := eng.allocID()
	appTx, wakeTx, err := wakePair(hiddenBase)
	if err == nil {
		err = sendHello(comp, seg, appTx, cd)
	}
	if err != nil {
		eng.abandon(id)
		seg.Close()
		closeOpen(comp, wakeTx)
		return offered{}, RejectResource, false, err
	}
	return offered{id: id, seg: seg, comp: comp, wakeTx: wakeTx}, 0, false, nil
}

// adopt starts stream id (reserved with allocID) over a simulated link on
// the connected socket fd: seg is the engine's mapping, wake and wakeTx
// the engine's ends of the application's wake sockets. Engine goroutine.
// On error everything is released, the number too.
func (s *Sim) adopt(id uint32, fd int, seg *sdp.Segment, side int, wake, wakeTx int) (*stream, error) {
	l, err := newSimLink(fd, seg, s.eng)
	if err != nil {
		s.eng.abandon(id)
		unix.Close(fd)
		seg.Close()
		closeOpen(wake, wakeTx)
		return nil, err
	}
	st, err := s.eng.addStream(id, seg, side, l, wake, wakeTx)
	if err != nil {
		l.Close()
		seg.Close()
		closeOpen(wake, wakeTx)
		return nil, err
	}
	return st, nil
}

// Dial connects to the simulated RDMA listener serving dst, as
// Transport.Dial does over a device, with the same errors.
func (s *Sim) Dial(dst, local netip.AddrPort, ringBytes uint32, timeout time.Duration) (*sdp.Endpoint, error) {
	deadline := time.Now().Add(timeout)
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if s.cfg.Links && ringBytes <= linkMaxRing {
		// A stream on this process's link to the listener; a listener
		// gone from the link's process, or a full link, may still be
		// reached by a connection of its own.
		ep, err := s.dialLink(dst, local, ringBytes, deadline)
		if err == nil || !errors.Is(err, sdp.ErrNoListener) && !errors.Is(err, errLinkFull) {
			return ep, err
		}
	}
	fd := -1
	for _, name := range shm.DialNames(dst, shm.IsLocal(dst.Addr())) {
		sfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, resourceError(err)
		}
		if err := unix.Connect(sfd, &unix.SockaddrUnix{Name: "@" + simPrefix + name}); err == nil {
			fd = sfd
			break
		}
		unix.Close(sfd)
	}
	if fd < 0 {
		return nil, fmt.Errorf("%w: %s: no simulated RDMA listener", sdp.ErrNoListener, dst)
	}
	fd = hideFD(fd, s.cfg.HiddenBase)
	seg, err := sdp.CreateSegment(ringBytes)
	if err != nil {
		unix.Close(fd)
		return nil, resourceError(err)
	}
	seg.InitHeader(local, dst, s.cfg.PID)
	seg.SetFlags(sdp.SegRDMA)
	fail := func(err error) (*sdp.Endpoint, error) {
		unix.Close(fd)
		seg.Close()
		return nil, err
	}
	cd, err := ConnectData{RingBytes: ringBytes, Client: local, Server: dst}.Marshal()
	if err == nil {
		err = simSend(fd, simConnect, cd)
	}
	if err != nil {
		return fail(fmt.Errorf("%w: %w", sdp.ErrHandshake, err))
	}
	kind, b, err := simRead(fd, deadline)
	switch {
	case err != nil:
		return fail(fmt.Errorf("%w: %w", sdp.ErrHandshake, err))
	case kind == simReject:
		code, _ := DecodeReject(b)
		return fail(rejectError(dst, code))
	case kind != simAccept:
		return fail(fmt.Errorf("%w: answer of kind %d", sdp.ErrHandshake, kind))
	}
	if ad, err := DecodeAcceptData(b); err != nil || ad.RingBytes != ringBytes {
		return fail(fmt.Errorf("%w: bad accept data (%v)", sdp.ErrHandshake, err))
	}
	mirror, err := seg.Mirror()
	if err != nil {
		return fail(resourceError(err))
	}
	ws, err := newWakeSockets(s.cfg.HiddenBase)
	if err != nil {
		mirror.Close()
		return fail(resourceError(err))
	}
	var aerr error
	ran := false
	derr := s.eng.Do(func() {
		ran = true
		_, aerr = s.adopt(s.eng.allocID(), fd, mirror, sdp.SideClient, ws.engine, ws.engineTx)
	})
	if derr != nil || aerr != nil {
		if !ran { // else adopt released fd, the mirror and the engine's ends
			mirror.Close()
			closeOpen(fd, ws.engine, ws.engineTx)
		}
		closeOpen(ws.app, ws.appTx)
		seg.Close()
		return nil, resourceError(errors.Join(derr, aerr))
	}
	return ws.endpoint(seg, local, dst), nil
}

// simLink is a Link over a connected AF_UNIX stream socket (see Sim). It
// plays the device in the poster's thread, as soft-RoCE does in the
// poster's system call: a post writes its message at once (without
// blocking; what does not fit waits for the socket to drain). Receiving
// is the rule's C taker (rx.c osf_rdma_sim_poll), on the engine's thread
// or an application's thread waiting for data: it places arriving writes
// into the ring and completes posted receives. The engine's epoll set
// watches the socket as it would a completion channel. No goroutine of
// its own: the switches the engine and the Go runtime make per message
// are the ones a device would cause. Engine goroutine only.
type simLink struct {
	fd  int
	seg *sdp.Segment
	eng *Engine

	simQueue // messages posted, not fully written
	cq       []verbs.WC
	events   uint32

	down   bool
	closed bool
	tx     *txState // the application's threads post here too, or nil
	rx     *txState // the rule takes from the socket: its registration is the rule's (rx.h chan_fd)
}

// simWR is a posted send's id and whether it completes when written;
// on a link, the stream that posted it (nil: the link's own message).
type simWR struct {
	wrid     verbs.WRID
	signaled bool
	end      *muxEnd
}

// simQueue is the sending side of a stand-in's socket: the messages
// posted and not fully written, in order, out[0] from outOff.
type simQueue struct {
	out      [][]byte
	outWR    []simWR
	outOff   int
	wblocked bool // the socket is full: wait until it is writable
	wdead    bool // the peer is gone for writing; its end comes on the read side
}

func (q *simQueue) queue(msg []byte, w simWR) {
	q.out = append(q.out, msg)
	q.outWR = append(q.outWR, w)
}

// flushTo writes queued messages to fd in order until the socket is
// full, calling written for each one written whole.
func (q *simQueue) flushTo(fd int, written func(simWR)) {
	for len(q.out) > 0 && !q.wdead {
		n, err := unix.SendmsgN(fd, q.out[0][q.outOff:], nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			q.wblocked = true
			return
		case err != nil:
			// The peer is gone. What it sent before going is still in
			// the socket, and on a real QP those completions come first:
			// the read side flushes everything when it reaches the end.
			q.wdead = true
			_ = unix.Shutdown(fd, unix.SHUT_WR)
			return
		}
		q.outOff += n
		if q.outOff < len(q.out[0]) {
			continue
		}
		w := q.outWR[0]
		q.out, q.outWR, q.outOff = q.out[1:], q.outWR[1:], 0
		written(w)
	}
}

// takeWCs moves up to len(wc) completions from the front of *cq to wc.
func takeWCs(cq *[]verbs.WC, wc []verbs.WC) int {
	n := copy(wc, *cq)
	*cq = (*cq)[n:]
	if len(*cq) == 0 {
		*cq = (*cq)[:0:0]
	}
	return n
}

// newSimLink makes a link over the connected socket fd (made nonblocking)
// for seg, watched by eng's epoll set.
func newSimLink(fd int, seg *sdp.Segment, eng *Engine) (*simLink, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	l := &simLink{fd: fd, seg: seg, eng: eng}
	if err := eng.watch(fd, l.ready); err != nil {
		return nil, err
	}
	l.events = unix.EPOLLIN | unix.EPOLLRDHUP
	forkCloseAdd(fd) // a fork child's copy would keep the link up after this process died, where a queue pair would break
	return l, nil
}

// ready runs when the socket is readable or writable (epoll): what
// arrived is the rule's to take (the engine's pollLink, right after).
func (l *simLink) ready() {
	if l.wblocked {
		l.wblocked = false
		l.flush()
	}
	l.rearm()
}

// rearm sets what the engine's epoll set waits for on the socket: input
// unless the link is down, output while it is full.
func (l *simLink) rearm() {
	var want uint32
	if !l.down {
		want = unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if !l.down && l.wblocked {
		want |= unix.EPOLLOUT
	}
	if l.rx != nil && l.rx.live() {
		l.rx.chanWant(want) // a reader asleep on the socket keeps it meanwhile
		l.events = want
		return
	}
	if want == l.events {
		return
	}
	op := unix.EPOLL_CTL_MOD
	switch {
	case want == 0:
		op = unix.EPOLL_CTL_DEL // a closed peer's HUP would fire even with no events
	case l.events == 0:
		op = unix.EPOLL_CTL_ADD
	}
	ev := unix.EpollEvent{Events: want, Fd: int32(l.fd)}
	if err := unix.EpollCtl(l.eng.epfd, op, l.fd, &ev); err == nil || op == unix.EPOLL_CTL_DEL {
		l.events = want
	}
}

func (l *simLink) complete(wc verbs.WC) { l.cq = append(l.cq, wc) }

// breakLink flushes everything outstanding and shuts the socket: the
// peer reads its end.
func (l *simLink) breakLink() {
	if l.down {
		return
	}
	l.down = true
	for _, w := range l.outWR {
		l.complete(verbs.WC{WRID: uint64(w.wrid), Status: verbs.WCWRFlushErr})
	}
	l.out, l.outWR, l.outOff = nil, nil, 0
	_ = unix.Shutdown(l.fd, unix.SHUT_RDWR)
	l.syncBusy()
	l.rearm()
}

func (l *simLink) post(msg []byte, w simWR) error {
	if l.closed {
		return errors.New("rdma sim: link closed")
	}
	if l.down {
		l.complete(verbs.WC{WRID: uint64(w.wrid), Status: verbs.WCWRFlushErr})
		return nil
	}
	l.queue(msg, w)
	if !l.wblocked {
		l.flush()
		l.rearm()
	}
	l.syncBusy()
	return nil
}

// useTx lets the application's threads write their messages to the
// socket themselves (tx.c osf_rdma_sim_post) while nothing is queued
// here.
func (l *simLink) useTx(tx *txState, side int) bool {
	if l.closed || l.down {
		return false
	}
	tx.useSim(l.fd, ringAddr(l.seg, side))
	l.tx = tx
	l.syncBusy()
	return true
}

// syncBusy tells the application's threads whether they must leave their
// messages to the engine: some are queued here (they go first), or the
// link is down.
func (l *simLink) syncBusy() {
	if l.tx != nil {
		l.tx.setSimBusy(len(l.out) > 0 || l.wblocked || l.down || l.wdead || l.closed)
	}
}

// flush writes posted messages in order until the socket is full,
// completing the signaled ones once written.
func (l *simLink) flush() {
	defer l.syncBusy()
	if l.down {
		return
	}
	l.flushTo(l.fd, func(w simWR) {
		if w.signaled {
			l.complete(verbs.WC{WRID: uint64(w.wrid), Status: verbs.WCSuccess, Opcode: verbs.WCRDMAWrite})
		}
	})
}

func (l *simLink) PostWrite(wrid verbs.WRID, ring int, off, n uint32, imm uint32, withImm, signaled bool) error {
	if ring < 0 || ring > 1 || n == 0 || uint64(off)+uint64(n) > uint64(l.seg.RingBytes) {
		return fmt.Errorf("rdma sim: bad write ring %d [%d,+%d)", ring, off, n)
	}
	msg := make([]byte, simHdr+int(n))
	simHeader(msg, simWrite, ring, withImm, off, n, imm)
	copy(msg[simHdr:], l.seg.RingData(ring)[off:off+n])
	return l.post(msg, simWR{wrid: wrid, signaled: signaled})
}

func (l *simLink) PostImm(wrid verbs.WRID, imm uint32, signaled bool) error {
	msg := make([]byte, simHdr)
	simHeader(msg, simWrite, 0, true, 0, 0, imm)
	return l.post(msg, simWR{wrid: wrid, signaled: signaled})
}

func (l *simLink) PostProbe(wrid verbs.WRID) error {
	msg := make([]byte, simHdr)
	simHeader(msg, simWrite, 0, false, 0, 0, 0)
	return l.post(msg, simWR{wrid: wrid, signaled: true})
}

// PostRecv is not used: the rule's C code posts the stand-in's receives
// (useRx).
func (l *simLink) PostRecv(verbs.WRID) error {
	return errors.New("rdma sim: receives are posted by the rule (rx.h)")
}

// useRx makes the rule's C taker read the socket, placing payloads into
// ring 1 - side, the one the peer writes (rx.c osf_rdma_sim_poll).
func (l *simLink) useRx(tx *txState, side int) {
	tx.rxUseSim(l.fd, ringAddr(l.seg, 1-side))
	tx.chanUse(l.fd, nil, l.eng.epfd, l.events, l.events)
	l.eng.chans[l.fd] = true
	l.rx = tx
}

func (l *simLink) Poll(wc []verbs.WC) (int, error) { return takeWCs(&l.cq, wc), nil }

// Notify does nothing: the engine's epoll set watches the socket itself,
// and completions of sends happen while it runs.
func (l *simLink) Notify() error { return nil }

func (l *simLink) Disconnect() error {
	l.breakLink()
	return nil
}

func (l *simLink) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	l.syncBusy()
	l.breakLink()
	l.eng.unwatch(l.fd)
	delete(l.eng.chans, l.fd)
	forkCloseDel(l.fd)
	return unix.Close(l.fd)
}

func simHeader(h []byte, kind byte, ring int, withImm bool, off, n, imm uint32) {
	h[0], h[1] = kind, byte(ring)
	if withImm {
		h[2] = 1
	}
	binary.LittleEndian.PutUint32(h[4:], off)
	binary.LittleEndian.PutUint32(h[8:], n)
	binary.LittleEndian.PutUint32(h[12:], imm)
}

// simSend writes a handshake message.
func simSend(fd int, kind byte, payload []byte) error {
	var h [simHdr]byte
	simHeader(h[:], kind, 0, false, 0, uint32(len(payload)), 0)
	if err := writeAll(fd, h[:]); err != nil {
		return err
	}
	return writeAll(fd, payload)
}

// simRead reads a handshake message, waiting until deadline.
func simRead(fd int, deadline time.Time) (byte, []byte, error) {
	var h [simHdr]byte
	if err := waitReadable(fd, deadline); err != nil {
		return 0, nil, err
	}
	if err := readFull(fd, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[8:])
	if n > 256 {
		return 0, nil, fmt.Errorf("rdma sim: handshake message of %d bytes", n)
	}
	b := make([]byte, n)
	if err := readFull(fd, b); err != nil {
		return 0, nil, err
	}
	return h[0], b, nil
}

func waitReadable(fd int, deadline time.Time) error {
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return fmt.Errorf("rdma sim: no answer: %w", verbs.ErrTimeout)
		}
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
}

// writeAll writes all of b to the blocking socket fd; MSG_NOSIGNAL: a
// peer that is gone is EPIPE, never a signal.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.SendmsgN(fd, b, nil, nil, unix.MSG_NOSIGNAL)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readFull reads exactly len(b) bytes from the blocking socket fd.
func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b = b[n:]
	}
	return nil
}
