package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/shm"
	"github.com/osfproject/osf/verbs"
)

// Links over the software stand-in (Sim): linkstream.go has what they
// share with a device's (qplink.go).
//
// Frames on a link of the stand-in: the 16-byte header of Sim's messages,
// with the stream's slot in byte 3, and a payload.
//
//	kind 5 HELLO   the link's first message (client), nothing else
//	kind 6 WRITE   ring, flags (1: with immediate), slot, offset, bytes,
//	               immediate (MakeLinkImm, of the same slot): the
//	               payload goes to that offset of the slot's ring
//	kind 7 OPEN    slot, payload ConnectData (client): open a stream
//	kind 8 ACCEPT  slot, payload AcceptData (server)
//	kind 9 REJECT  slot, payload the reject block (server)
//	kind 10 END    slot: the sender's end of the stream is down (as
//	               rdma_disconnect: what it posts now is flushed);
//	               each end sends one, and a slot is free again once
//	               both did
const (
	simLinkHello  = 5
	simLinkWrite  = 6
	simLinkOpen   = 7
	simLinkAccept = 8
	simLinkReject = 9
	simLinkEnd    = 10
	// simLinkCtlMax bounds a control frame's payload.
	simLinkCtlMax = 256
)

// linkFrame is a parsed frame header.
type linkFrame struct {
	kind        byte
	ring        int
	withImm     bool
	slot        uint8
	off, n, imm uint32
}

// parseLinkFrame checks a frame header the peer wrote: every value is
// data, checked against the protocol's bounds here and against the named
// stream's ring by the link (muxLink.apply). It never returns a frame
// whose payload could reach beyond a ring of linkMaxRing bytes.
func parseLinkFrame(h []byte) (linkFrame, error) {
	if len(h) < simHdr {
		return linkFrame{}, fmt.Errorf("%w: frame header of %d bytes", ErrWire, len(h))
	}
	f := linkFrame{kind: h[0], ring: int(h[1]), withImm: h[2] == 1, slot: h[3],
		off: binary.LittleEndian.Uint32(h[4:]), n: binary.LittleEndian.Uint32(h[8:]),
		imm: binary.LittleEndian.Uint32(h[12:])}
	if h[2] > 1 {
		return f, fmt.Errorf("%w: frame flags %#x", ErrWire, h[2])
	}
	if f.slot == 0 {
		return f, fmt.Errorf("%w: frame of kind %d for stream 0", ErrWire, f.kind)
	}
	switch f.kind {
	case simLinkWrite:
		if f.ring > 1 || uint64(f.off)+uint64(f.n) > linkMaxRing {
			return f, fmt.Errorf("%w: write to ring %d [%d,+%d)", ErrWire, f.ring, f.off, f.n)
		}
		if !f.withImm && f.imm != 0 {
			return f, fmt.Errorf("%w: immediate %#x without the flag", ErrWire, f.imm)
		}
		if _, slot, _ := ParseLinkImm(f.imm); f.withImm && slot != f.slot {
			return f, fmt.Errorf("%w: write to stream %d with the immediate of stream %d", ErrWire, f.slot, slot)
		}
	case simLinkOpen, simLinkAccept, simLinkReject, simLinkEnd:
		if f.ring != 0 || f.withImm || f.off != 0 || f.imm != 0 || f.n > simLinkCtlMax || f.kind == simLinkEnd && f.n != 0 {
			return f, fmt.Errorf("%w: control frame of kind %d: ring %d, offset %d, %d bytes, immediate %#x", ErrWire, f.kind, f.ring, f.off, f.n, f.imm)
		}
	default:
		return f, fmt.Errorf("%w: frame of kind %d", ErrWire, f.kind)
	}
	return f, nil
}

// linkHeader builds a frame header.
func linkHeader(h []byte, kind byte, ring int, withImm bool, slot uint8, off, n, imm uint32) {
	simHeader(h, kind, ring, withImm, off, n, imm)
	h[3] = slot
}

// linkControl builds a control frame.
func linkControl(kind byte, slot uint8, payload []byte) []byte {
	msg := make([]byte, simHdr+len(payload))
	linkHeader(msg, kind, 0, false, slot, 0, uint32(len(payload)), 0)
	copy(msg[simHdr:], payload)
	return msg
}

// muxLink is a link of the stand-in: one connected AF_UNIX stream socket
// between the engines of two processes, carrying the frames of many
// streams. Engine goroutine only.
type muxLink struct {
	sim    *Sim
	fd     int
	name   string // the companion it reaches (client) or serves (server)
	client bool   // made by a dial here: this end opens streams
	ends   [linkSlots + 1]*muxEnd
	open   int // slots in use

	buf  []byte // received, not parsed yet: buf[:have]
	have int

	simQueue // frames posted, not fully written
	events   uint32

	broken  bool
	retired bool // dials do not use it; closed with its last stream
}

// muxEnd is one stream's end of a muxLink; it implements Link. Engine
// goroutine only.
type muxEnd struct {
	ml        *muxLink
	slot      uint8
	seg       *sdp.Segment // the engine's mapping; nil once closed: writes to it are dropped
	ringBytes uint32
	peerRing  int // the ring the peer writes: 1 - the local application's side
	accepted  bool

	linkRecvs

	ended, peerEnded bool // END sent, received
	closed           bool

	open *linkOpen // a dial waiting for the answer to the stream-open
}

func (ml *muxLink) newEnd(slot uint8, seg *sdp.Segment, side int) *muxEnd {
	e := &muxEnd{ml: ml, slot: slot, seg: seg, ringBytes: seg.RingBytes, peerRing: 1 - side}
	ml.ends[slot] = e
	ml.open++
	return e
}

// newMuxLink makes a link over the connected socket fd (made
// nonblocking), watched by the engine's epoll set. Engine goroutine.
func (s *Sim) newMuxLink(fd int, name string, client bool) (*muxLink, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	ml := &muxLink{sim: s, fd: fd, name: name, client: client, buf: make([]byte, 64<<10)}
	if err := s.eng.watch(fd, ml.ready); err != nil {
		return nil, err
	}
	s.eng.chans[fd] = true
	ml.events = unix.EPOLLIN | unix.EPOLLRDHUP
	forkCloseAdd(fd) // a fork child's copy would keep the link up after this process died
	s.muxes[ml] = true
	return ml, nil
}

// ready runs when the socket is readable or writable.
func (ml *muxLink) ready() {
	if ml.wblocked {
		ml.wblocked = false
		ml.flush()
	}
	ml.read()
	ml.rearm()
}

func (ml *muxLink) rearm() {
	if ml.broken {
		return
	}
	want := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
	if ml.wblocked {
		want |= unix.EPOLLOUT
	}
	if want == ml.events {
		return
	}
	ev := unix.EpollEvent{Events: want, Fd: int32(ml.fd)}
	if err := unix.EpollCtl(ml.sim.eng.epfd, unix.EPOLL_CTL_MOD, ml.fd, &ev); err == nil {
		ml.events = want
	}
}

// send queues a frame of end e (nil: the link's own) and writes what the
// socket takes.
func (ml *muxLink) send(msg []byte, w simWR) {
	if ml.broken {
		if w.end != nil {
			w.end.complete(verbs.WC{WRID: uint64(w.wrid), Status: verbs.WCWRFlushErr})
		}
		return
	}
	ml.queue(msg, w)
	if !ml.wblocked {
		ml.flush()
		ml.rearm()
	}
}

// flush writes queued frames in order until the socket is full,
// completing the signaled ones once written.
func (ml *muxLink) flush() {
	if ml.broken {
		return
	}
	ml.flushTo(ml.fd, func(w simWR) {
		if w.end != nil && w.signaled {
			w.end.complete(verbs.WC{WRID: uint64(w.wrid), Status: verbs.WCSuccess, Opcode: verbs.WCRDMAWrite})
		}
	})
}

// read takes what arrived and applies it frame by frame.
func (ml *muxLink) read() {
	for i := 0; i < linkReads && !ml.broken; i++ {
		if ml.have == len(ml.buf) {
			nb := make([]byte, 2*len(ml.buf))
			copy(nb, ml.buf[:ml.have])
			ml.buf = nb
		}
		n, err := unix.Read(ml.fd, ml.buf[ml.have:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return
		case err != nil:
			ml.fail(fmt.Errorf("read: %w", err))
			return
		case n == 0:
			ml.fail(errors.New("the peer closed it"))
			return
		}
		ml.have += n
		ml.parse()
	}
}

// parse applies every whole frame received; a frame the link must not
// take breaks it.
func (ml *muxLink) parse() {
	off := 0
	for !ml.broken && ml.have-off >= simHdr {
		f, err := parseLinkFrame(ml.buf[off : off+simHdr])
		if err != nil {
			ml.fail(err)
			return
		}
		end := off + simHdr + int(f.n)
		if ml.have < end {
			if need := simHdr + int(f.n); need > len(ml.buf) {
				nb := make([]byte, need)
				copy(nb, ml.buf[off:ml.have])
				ml.buf, ml.have, off = nb, ml.have-off, 0
			}
			break
		}
		if err := ml.apply(f, ml.buf[off+simHdr:end]); err != nil {
			ml.fail(fmt.Errorf("%w: %w", ErrProtocol, err))
			return
		}
		off = end
	}
	if off > 0 && !ml.broken {
		ml.have = copy(ml.buf, ml.buf[off:ml.have])
	}
}

// apply does what one frame says; an error is a violation that breaks
// the link (as a remote access error breaks a queue pair).
func (ml *muxLink) apply(f linkFrame, p []byte) error {
	e := ml.ends[f.slot]
	switch f.kind {
	case simLinkOpen:
		if ml.client || e != nil {
			return fmt.Errorf("open of stream %d (in use: %v) on a link that does not take opens: %v", f.slot, e != nil, ml.client)
		}
		ml.serveOpen(f.slot, p)
		return nil
	case simLinkWrite, simLinkAccept, simLinkReject, simLinkEnd:
		if e == nil {
			return fmt.Errorf("frame of kind %d for stream %d, which is not open", f.kind, f.slot)
		}
	}
	if f.kind == simLinkAccept || f.kind == simLinkReject {
		if e.open == nil || e.accepted {
			return fmt.Errorf("answer to stream %d, which opened no stream", f.slot)
		}
		if f.kind == simLinkReject {
			ml.rejected(e, p)
			return nil
		}
		return ml.accepted(e, p)
	}
	if !e.accepted {
		return fmt.Errorf("frame of kind %d for stream %d before its accept", f.kind, f.slot)
	}
	if f.kind == simLinkEnd {
		if e.peerEnded {
			return fmt.Errorf("second end of stream %d", f.slot)
		}
		e.peerEnded = true
		if e.ended {
			ml.free(e)
		} else {
			e.end()
		}
		return nil
	}
	// A write: to the ring the peer writes of that stream, within it.
	if f.ring != e.peerRing || uint64(f.off)+uint64(f.n) > uint64(e.ringBytes) {
		return fmt.Errorf("write to ring %d [%d,+%d) of stream %d (it writes ring %d of %d bytes)", f.ring, f.off, f.n, f.slot, e.peerRing, e.ringBytes)
	}
	if e.ended {
		return nil // lost, as writes to a queue pair in error
	}
	if f.n > 0 && e.seg != nil {
		copy(e.seg.RingData(f.ring)[f.off:f.off+f.n], p)
	}
	if f.withImm {
		return e.arrive(f.imm, f.n)
	}
	return nil // a probe
}

// serveOpen answers a stream-open: as Sim.serve, with the answer on the
// link. Engine goroutine.
func (ml *muxLink) serveOpen(slot uint8, p []byte) {
	s := ml.sim
	reject := func(code RejectCode, why error) {
		s.cfg.Logf("rdma sim: link %d: refused stream %d: %s: %v", ml.fd, slot, code, why)
		ml.send(linkControl(simLinkReject, slot, code.Marshal()), simWR{})
	}
	cd, err := DecodeConnectData(p)
	if err == nil && cd.RingBytes > linkMaxRing {
		err = fmt.Errorf("%w: ring of %d bytes on a link", ErrWire, cd.RingBytes)
	}
	if err != nil {
		reject(RejectBadHello, err)
		return
	}
	o, code, err := s.offer(ml.name, cd, true)
	if err != nil {
		reject(code, err)
		return
	}
	e := ml.newEnd(slot, o.seg, sdp.SideServer)
	e.accepted = true
	ad, _ := AcceptData{RingBytes: cd.RingBytes}.Marshal()
	ml.send(linkControl(simLinkAccept, slot, ad), simWR{})
	st, err := s.eng.addStream(o.id, o.seg, sdp.SideServer, e, o.comp, o.wakeTx)
	if err != nil {
		e.drop()
		o.seg.Close()
		closeOpen(o.comp, o.wakeTx)
		s.cfg.Logf("rdma sim: accepted %s but lost it: %v", cd.Client, err)
		return
	}
	s.cfg.Logf("rdma: accepted %s (sim, link %d stream %d) as connection %d", cd.Client, ml.fd, slot, st.id)
}

// accepted starts the stream a dial opened, unless the dial gave up.
func (ml *muxLink) accepted(e *muxEnd, p []byte) error {
	if _, err := checkAccept(p, e.ringBytes, e.slot); err != nil {
		return err
	}
	e.accepted = true
	o := e.open
	e.open = nil
	// On failure the dial closes the mapping and the sockets.
	if st := o.start(ml.sim.eng, e.seg, e, e.drop); st != nil {
		ml.sim.cfg.Logf("rdma: connection %d: stream %d on link %d to %s", st.id, e.slot, ml.fd, ml.name)
	}
	return nil
}

// rejected ends a dial's stream-open that the server refused; a link
// whose listener is gone takes no more dials.
func (ml *muxLink) rejected(e *muxEnd, p []byte) {
	o := e.open
	e.open = nil
	code := rejectCode(p)
	if code == RejectNoListener {
		ml.retire()
	}
	ml.free(e)
	if !o.cancelled {
		o.finish(rejectError(o.dst, code))
	}
}

// free gives the slot of e back.
func (ml *muxLink) free(e *muxEnd) {
	if ml.ends[e.slot] == e {
		ml.ends[e.slot] = nil
		ml.open--
	}
	if ml.retired && ml.open == 0 {
		ml.fail(errors.New("retired and idle"))
	}
}

// retire keeps dials off the link; it closes with its last stream.
func (ml *muxLink) retire() {
	if ml.sim.links[ml.name] == ml {
		delete(ml.sim.links, ml.name)
	}
	ml.retired = true
}

// fail breaks the link: every stream on it sees its work flushed (a
// reset, as when a queue pair breaks), the socket closes and the peer's
// streams see the same.
func (ml *muxLink) fail(why error) {
	if ml.broken {
		return
	}
	ml.broken = true
	busy := ml.open
	for _, w := range ml.outWR {
		if w.end != nil {
			w.end.complete(verbs.WC{WRID: uint64(w.wrid), Status: verbs.WCWRFlushErr})
		}
	}
	ml.out, ml.outWR, ml.outOff = nil, nil, 0
	for slot, e := range ml.ends {
		if e == nil {
			continue
		}
		e.flushRecvs()
		e.ended, e.peerEnded = true, true
		if o := e.open; o != nil {
			e.open = nil
			if !o.cancelled {
				o.finish(fmt.Errorf("%w: link broke: %v", sdp.ErrHandshake, why))
			}
		}
		ml.ends[slot] = nil
	}
	ml.open = 0
	ml.retire()
	eng := ml.sim.eng
	eng.unwatch(ml.fd)
	delete(eng.chans, ml.fd)
	forkCloseDel(ml.fd)
	unix.Close(ml.fd)
	delete(ml.sim.muxes, ml)
	if busy > 0 {
		ml.sim.cfg.Logf("rdma sim: link %d to %s broke with %d streams: %v", ml.fd, ml.name, busy, why)
	}
}

// slot returns a free slot, or 0 when the link is full.
func (ml *muxLink) slot() uint8 {
	for i := 1; i <= linkSlotsUsed; i++ {
		if ml.ends[i] == nil {
			return uint8(i)
		}
	}
	return 0
}

// end takes the stream's end down, once: what it posted and the link has
// not written is flushed, its receives too, and the peer gets END.
func (e *muxEnd) end() {
	if e.ended {
		return
	}
	e.ended = true
	ml := e.ml
	keep := 0
	for i, w := range ml.outWR {
		if w.end == e && (i > 0 || ml.outOff == 0) {
			e.complete(verbs.WC{WRID: uint64(w.wrid), Status: verbs.WCWRFlushErr})
			continue
		}
		ml.out[keep], ml.outWR[keep] = ml.out[i], w
		keep++
	}
	ml.out, ml.outWR = ml.out[:keep], ml.outWR[:keep]
	e.flushRecvs()
	ml.send(linkControl(simLinkEnd, e.slot, nil), simWR{})
	if e.peerEnded {
		ml.free(e)
	}
}

// drop ends the stream and forgets its segment (the caller unmaps it).
func (e *muxEnd) drop() {
	e.end()
	e.closed = true
	e.seg = nil
}

// post sends a frame of this stream.
func (e *muxEnd) post(msg []byte, w simWR) error {
	if e.closed {
		return errors.New("rdma sim: stream closed")
	}
	if e.ended {
		e.complete(verbs.WC{WRID: uint64(w.wrid), Status: verbs.WCWRFlushErr})
		return nil
	}
	w.end = e
	e.ml.send(msg, w)
	return nil
}

func (e *muxEnd) PostWrite(wrid verbs.WRID, ring int, off, n uint32, imm uint32, withImm, signaled bool) error {
	if ring != 1-e.peerRing || n == 0 || uint64(off)+uint64(n) > uint64(e.ringBytes) || e.seg == nil {
		return fmt.Errorf("rdma sim: bad write ring %d [%d,+%d)", ring, off, n)
	}
	msg := make([]byte, simHdr+int(n))
	if withImm {
		imm = MakeLinkImm(e.slot, imm)
	} else {
		imm = 0
	}
	linkHeader(msg, simLinkWrite, ring, withImm, e.slot, off, n, imm)
	copy(msg[simHdr:], e.seg.RingData(ring)[off:off+n])
	return e.post(msg, simWR{wrid: wrid, signaled: signaled})
}

func (e *muxEnd) PostImm(wrid verbs.WRID, imm uint32, signaled bool) error {
	msg := make([]byte, simHdr)
	linkHeader(msg, simLinkWrite, 1-e.peerRing, true, e.slot, 0, 0, MakeLinkImm(e.slot, imm))
	return e.post(msg, simWR{wrid: wrid, signaled: signaled})
}

func (e *muxEnd) PostProbe(wrid verbs.WRID) error {
	msg := make([]byte, simHdr)
	linkHeader(msg, simLinkWrite, 1-e.peerRing, false, e.slot, 0, 0, 0)
	return e.post(msg, simWR{wrid: wrid, signaled: true})
}

func (e *muxEnd) PostRecv(wrid verbs.WRID) error {
	if e.closed {
		return errors.New("rdma sim: stream closed")
	}
	e.postRecv(wrid, e.ended)
	return nil
}

// Notify does nothing: the engine's epoll set watches the link's socket,
// and completions of sends happen while the engine runs.
func (e *muxEnd) Notify() error { return nil }

// Disconnect takes this stream's end down; the link and its other
// streams go on.
func (e *muxEnd) Disconnect() error {
	e.end()
	return nil
}

func (e *muxEnd) Close() error {
	e.drop()
	return nil
}

// dialLink opens a stream to dst's listener on this process's link to it,
// making the link if there is none (Dial with Config.Links). It fails
// with errLinkFull when the link has no free slot.
func (s *Sim) dialLink(dst, local netip.AddrPort, ringBytes uint32, deadline time.Time) (*sdp.Endpoint, error) {
	cd, err := ConnectData{RingBytes: ringBytes, Client: local, Server: dst}.Marshal()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sdp.ErrHandshake, err)
	}
	seg, mirror, ws, err := newStreamDial(ringBytes, local, dst, s.cfg.PID, s.cfg.HiddenBase)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*sdp.Endpoint, error) {
		mirror.Close()
		closeOpen(ws.app, ws.appTx, ws.engine, ws.engineTx)
		seg.Close()
		return nil, err
	}
	o := &linkOpen{dst: dst, wake: ws.engine, wakeTx: ws.engineTx, done: make(chan error, 1)}
	var e *muxEnd
	var oerr error
	names := shm.DialNames(dst, shm.IsLocal(dst.Addr()))
	derr := s.eng.Do(func() { e, oerr = s.openStream(names, mirror, cd, o, -1, "") })
	if derr == nil && errors.Is(oerr, errNoLink) {
		// The link is made here, not on the engine's thread: a
		// listener's full backlog makes connect wait.
		fd, name, err := s.connectLink(names, dst)
		if err != nil {
			return fail(err)
		}
		ran := false
		derr = s.eng.Do(func() { ran = true; e, oerr = s.openStream(names, mirror, cd, o, fd, name) })
		if !ran {
			unix.Close(fd)
		}
	}
	if derr != nil || oerr != nil {
		return fail(errors.Join(derr, oerr))
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err = <-o.done:
	case <-timer.C:
		_ = s.eng.Do(func() {
			if e.open == o {
				o.cancelled = true
				e.seg = nil // the dial unmaps it
			}
		})
		select {
		case err = <-o.done:
		default:
			err = fmt.Errorf("%w: %s: no answer to the stream-open: %w", sdp.ErrHandshake, dst, verbs.ErrTimeout)
		}
	}
	if err != nil {
		return fail(err)
	}
	return ws.endpoint(seg, local, dst), nil
}

// errNoLink means no link reaches the listener yet: the dial makes one
// (connectLink).
var errNoLink = errors.New("rdma sim: no link")

// openStream posts a stream-open for the connect data cd on the link to
// the first of names that has one, else, with fd >= 0, on a new link
// over fd (connectLink's, to name; closed when a link appeared
// meanwhile or on error), else fails with errNoLink. Engine goroutine.
func (s *Sim) openStream(names []string, mirror *sdp.Segment, cd []byte, o *linkOpen, fd int, name string) (*muxEnd, error) {
	var ml *muxLink
	for _, n := range names {
		if ml = s.links[n]; ml != nil {
			break
		}
	}
	switch {
	case ml != nil && fd >= 0:
		unix.Close(fd) // another dial made the link meanwhile
	case ml == nil && fd < 0:
		return nil, errNoLink
	case ml == nil:
		var err error
		if ml, err = s.newMuxLink(fd, name, true); err != nil {
			unix.Close(fd)
			return nil, resourceError(err)
		}
		s.links[name] = ml
		s.linksMade++
		s.cfg.Logf("rdma sim: link %d to %s made", fd, name)
	}
	slot := ml.slot()
	if slot == 0 {
		return nil, errLinkFull
	}
	e := ml.newEnd(slot, mirror, sdp.SideClient)
	e.open = o
	ml.send(linkControl(simLinkOpen, slot, cd), simWR{})
	return e, nil
}

// connectLink connects to the first of names whose simulated RDMA
// listener answers and sends the link's HELLO; it returns the socket (in
// the hidden range) and the name.
func (s *Sim) connectLink(names []string, dst netip.AddrPort) (int, string, error) {
	for _, name := range names {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, "", resourceError(err)
		}
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + simPrefix + name}); err != nil {
			unix.Close(fd)
			continue
		}
		fd = hideFD(fd, s.cfg.HiddenBase)
		if err := simSend(fd, simLinkHello, nil); err != nil {
			unix.Close(fd)
			return -1, "", fmt.Errorf("%w: %w", sdp.ErrHandshake, err)
		}
		return fd, name, nil
	}
	return -1, "", fmt.Errorf("%w: %s: no simulated RDMA listener", sdp.ErrNoListener, dst)
}
