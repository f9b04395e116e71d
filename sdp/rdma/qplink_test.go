package rdma

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// fakeQP is an in-process RC queue pair between two qpWires, as a device
// runs one: memory regions by key (an RDMA WRITE lands only in a region
// registered with remote access, within it, else a remote access error
// breaks the QP), SENDs into the receiver's posted buffers, a WRITE WITH
// IMMEDIATE or a SEND waits for a posted receive (RNR retry), work
// requests execute and complete in order. It executes a request when it
// is posted or when the peer posts the receive it waits for, under one
// lock, so a region is never written after its deregistration.
type fakeQP struct {
	mu   sync.Mutex
	ends [2]*fakeWire
	down bool
	keys uint32
}

type fakeRegion struct {
	mem    []byte
	remote bool
}

type fakeSend struct {
	wrid    verbs.WRID
	msg     []byte // a SEND, else a write
	lkey    uint32
	laddr   uint64
	n       uint32
	raddr   uint64
	rkey    uint32
	imm     uint32
	withImm bool
}

// fakeWire is one end of a fakeQP; it implements qpWire.
type fakeWire struct {
	qp     *fakeQP
	idx    int
	regs   map[uint32]*fakeRegion
	bufs   [qpLinkRecvs][QPLinkMsgMax]byte
	rq     []verbs.WRID // wrid's seq is the buffer
	sq     []fakeSend   // waiting for a receive of the peer
	cq     []verbs.WC
	efd    int
	armed  uint8 // armNone, armSolicited (the next receive's completion), armAll
	muted  bool  // completion events are lost (mute)
	closed bool
}

func newFakeQP(t testing.TB) *fakeQP {
	q := &fakeQP{}
	for i := range q.ends {
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatal(err)
		}
		q.ends[i] = &fakeWire{qp: q, idx: i, regs: map[uint32]*fakeRegion{}, efd: efd}
	}
	return q
}

// addr is the address of a region's byte 0: the key in the high bits.
func fakeAddr(key uint32) uint64 { return uint64(key) << 32 }

func (w *fakeWire) regStream(seg *sdp.Segment, side int) (qpReg, error) {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	w.qp.keys += 2
	lkey, rkey := w.qp.keys-1, w.qp.keys
	w.regs[lkey] = &fakeRegion{mem: seg.RingData(side)}
	w.regs[rkey] = &fakeRegion{mem: seg.RingData(1 - side), remote: true}
	return qpReg{raddr: fakeAddr(rkey), rkey: rkey, laddr: fakeAddr(lkey), lkey: lkey}, nil
}

func (w *fakeWire) deregStream(r qpReg) error {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	if w.regs[r.lkey] == nil || w.regs[r.rkey] == nil {
		return errors.New("fake: not registered")
	}
	delete(w.regs, r.lkey)
	delete(w.regs, r.rkey)
	return nil
}

func (w *fakeWire) registered() int {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	return len(w.regs)
}

// complete queues a completion, waking the engine when the CQ is armed
// for it: a receive's completion (the link's messages and immediates are
// solicited; a flush too, as rxe's) when armed for solicited ones, any
// when armed for all; mu held.
func (w *fakeWire) complete(wc verbs.WC) {
	w.cq = append(w.cq, wc)
	recv := wc.Opcode == verbs.WCRecv || wc.Opcode == verbs.WCRecvRDMAWithImm
	if (w.armed == armAll || w.armed == armSolicited && recv) && !w.muted {
		w.armed = armNone
		var one = [8]byte{1}
		_, _ = unix.Write(w.efd, one[:])
	}
}

func (w *fakeWire) postLocked(s fakeSend) error {
	if w.closed {
		return errors.New("fake: closed")
	}
	if w.qp.down {
		w.complete(verbs.WC{WRID: uint64(s.wrid), Status: verbs.WCWRFlushErr})
		return nil
	}
	w.sq = append(w.sq, s)
	w.run()
	return nil
}

// run executes w's sends in order while they can; mu held.
func (w *fakeWire) run() {
	peer := w.qp.ends[1-w.idx]
	for len(w.sq) > 0 && !w.qp.down {
		s := w.sq[0]
		if (s.msg != nil || s.withImm) && len(peer.rq) == 0 {
			return // RNR: until the peer posts a receive
		}
		w.sq = w.sq[1:]
		op := verbs.WCRDMAWrite
		if s.msg != nil {
			op = verbs.WCSend
		} else if s.n > 0 {
			src, ok := w.region(w.regs[s.lkey], s.lkey, s.laddr, s.n)
			dst, rok := w.region(peer.regs[s.rkey], s.rkey, s.raddr, s.n)
			if !ok || !rok || !peer.regs[s.rkey].remote {
				w.complete(verbs.WC{WRID: uint64(s.wrid), Status: verbs.WCRemAccessErr})
				w.qp.breakLocked()
				return
			}
			copy(dst, src)
		}
		if s.msg != nil || s.withImm {
			r := peer.rq[0]
			peer.rq = peer.rq[1:]
			wc := verbs.WC{WRID: uint64(r), Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: s.n, ImmData: s.imm, HasImm: true}
			if s.msg != nil {
				copy(peer.bufs[r.Seq()][:], s.msg)
				wc = verbs.WC{WRID: uint64(r), Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(len(s.msg))}
			}
			peer.complete(wc)
		}
		w.complete(verbs.WC{WRID: uint64(s.wrid), Status: verbs.WCSuccess, Opcode: op})
	}
}

// region is [addr, addr+n) of a region keyed key, if within it.
func (w *fakeWire) region(r *fakeRegion, key uint32, addr uint64, n uint32) ([]byte, bool) {
	if r == nil || addr < fakeAddr(key) || addr-fakeAddr(key)+uint64(n) > uint64(len(r.mem)) {
		return nil, false
	}
	off := addr - fakeAddr(key)
	return r.mem[off : off+uint64(n)], true
}

func (q *fakeQP) breakLocked() {
	if q.down {
		return
	}
	q.down = true
	for _, w := range q.ends {
		for _, s := range w.sq {
			w.complete(verbs.WC{WRID: uint64(s.wrid), Status: verbs.WCWRFlushErr})
		}
		for _, r := range w.rq {
			w.complete(verbs.WC{WRID: uint64(r), Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv})
		}
		w.sq, w.rq = nil, nil
	}
}

func (w *fakeWire) postSend(wrid verbs.WRID, msg []byte) error {
	if len(msg) > QPLinkMsgMax {
		return fmt.Errorf("fake: send of %d bytes", len(msg))
	}
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	return w.postLocked(fakeSend{wrid: wrid, msg: bytes.Clone(msg)})
}

func (w *fakeWire) postWrite(wrid verbs.WRID, lkey uint32, laddr uint64, n uint32, raddr uint64, rkey uint32, imm uint32, withImm bool) error {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	return w.postLocked(fakeSend{wrid: wrid, lkey: lkey, laddr: laddr, n: n, raddr: raddr, rkey: rkey, imm: imm, withImm: withImm})
}

func (w *fakeWire) postRecv(wrid verbs.WRID, i int) error {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	if w.closed {
		return errors.New("fake: closed")
	}
	if w.qp.down {
		w.complete(verbs.WC{WRID: uint64(wrid), Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv})
		return nil
	}
	w.rq = append(w.rq, wrid)
	w.qp.ends[1-w.idx].run()
	return nil
}

func (w *fakeWire) recvBuf(i int) []byte { return w.bufs[i][:] }

func (w *fakeWire) poll(wc []verbs.WC) (int, error) {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	return takeWCs(&w.cq, wc), nil
}

// notify arms the CQ: the next completion wakes the engine. As a
// device's (ibv_req_notify_cq without IBV_CQ_REPORT_MISSED_EVENTS), not
// those already there: whoever arms must poll again after arming.
func (w *fakeWire) notify(all bool) error {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	if all {
		w.armed = armAll
	} else if w.armed == armNone { // a device keeps the stronger arm
		w.armed = armSolicited
	}
	return nil
}

// mute loses the wire's completion events (on): its engine does not see
// what completes, as when an event is lost; off wakes it.
func (w *fakeWire) mute(on bool) {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	w.muted = on
	if !on {
		w.armed = armNone
		var one = [8]byte{1}
		_, _ = unix.Write(w.efd, one[:])
	}
}

func (w *fakeWire) disconnect() error {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	w.qp.breakLocked()
	return nil
}

func (w *fakeWire) close() error {
	w.qp.mu.Lock()
	defer w.qp.mu.Unlock()
	w.closed = true
	return nil
}

func (w *fakeWire) drain() {
	var b [8]byte
	_, _ = unix.Read(w.efd, b[:])
}

// qpPair is a link between two engines over a fakeQP: engine 0 dials,
// engine 1 accepts; accepted streams' applications come on served.
type qpPair struct {
	t      testing.TB
	qp     *fakeQP
	eng    [2]*Engine
	link   [2]*qpLink
	served chan *fakeApp
	ring   uint32
	pooled bool // dials take a segment of the link's pool when one is ready
}

func newQPPair(t testing.TB, ring uint32) *qpPair {
	t.Helper()
	p := &qpPair{t: t, qp: newFakeQP(t), served: make(chan *fakeApp, linkSlots), ring: ring}
	for i := range 2 {
		e, err := NewEngine(EngineConfig{Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		p.eng[i] = e
		w := p.qp.ends[i]
		if derr := e.Do(func() {
			if p.link[i], err = newQPLink(e, w, fmt.Sprintf("peer-%d", 1-i), i == 0, t.Logf); err == nil {
				p.link[i].later = e.background
				err = e.watch(w.efd, func() { w.drain(); p.link[i].ready() })
			}
		}); derr != nil || err != nil {
			t.Fatal(derr, err)
		}
	}
	p.link[1].offer = p.offer
	t.Cleanup(p.stop)
	return p
}

// offer is the server's application taking a stream (engine 1), over a
// segment of the link's pool (pre) or one of its own.
func (p *qpPair) offer(cd ConnectData, pre *sdp.Segment) (offered, RejectCode, error) {
	var seg, m *sdp.Segment
	var err error
	if pre != nil {
		m = pre
		if seg, err = sdp.MapSegment(pre.FD, cd.RingBytes); err != nil {
			return offered{}, RejectResource, err
		}
		pre.FD = -1 // sent
	} else {
		if seg, err = sdp.CreateSegment(cd.RingBytes); err != nil {
			return offered{}, RejectResource, err
		}
		if m, err = seg.Mirror(); err != nil {
			return offered{}, RejectResource, err
		}
	}
	ws, err := newWakeSockets(0)
	if err != nil {
		return offered{}, RejectResource, err
	}
	p.served <- &fakeApp{seg: seg, side: sdp.SideServer, peer: sdp.SideClient, fd: ws.app, wfd: ws.appTx, size: uint64(cd.RingBytes)}
	return offered{id: p.eng[1].allocID(), seg: m, comp: ws.engine, wakeTx: ws.engineTx}, 0, nil
}

// dial opens a stream from engine 0 and returns both applications.
func (p *qpPair) dial(port uint16) ([2]*fakeApp, error) {
	seg, ws, o, err := p.open(port)
	if err != nil {
		return [2]*fakeApp{}, err
	}
	select {
	case err = <-o.done:
	case <-time.After(10 * time.Second):
		err = errors.New("no answer to the stream-open")
	}
	client := &fakeApp{seg: seg, side: sdp.SideClient, peer: sdp.SideServer, fd: ws.app, wfd: ws.appTx, size: uint64(p.ring)}
	if err != nil {
		closeOpen(ws.app, ws.appTx)
		seg.Close()
		return [2]*fakeApp{}, err
	}
	return [2]*fakeApp{client, <-p.served}, nil
}

// open posts a stream-open from engine 0, as dialStream does; o hears
// the answer.
func (p *qpPair) open(port uint16) (*sdp.Segment, wakeSockets, *linkOpen, error) {
	var ps *poolSeg
	if p.pooled {
		_ = p.eng[0].Do(func() { ps = p.link[0].pool.take(p.ring) })
	}
	var seg, m *sdp.Segment
	var err error
	if ps != nil {
		seg, m = ps.app, ps.mirror
		ps.app = nil
		for _, b := range seg.Mem {
			if b != 0 {
				return nil, wakeSockets{}, nil, errors.New("a segment of the pool was not zeroed")
			}
		}
	} else {
		if seg, err = sdp.CreateSegment(p.ring); err != nil {
			return nil, wakeSockets{}, nil, err
		}
		if m, err = seg.Mirror(); err != nil {
			return nil, wakeSockets{}, nil, err
		}
	}
	ws, err := newWakeSockets(0)
	if err != nil {
		return nil, wakeSockets{}, nil, err
	}
	dst := netip.MustParseAddrPort(fmt.Sprintf("10.0.0.2:%d", port))
	cd := ConnectData{RingBytes: p.ring, Client: netip.MustParseAddrPort("10.0.0.1:40000"), Server: dst}
	o := &linkOpen{dst: dst, wake: ws.engine, wakeTx: ws.engineTx, done: make(chan error, 1)}
	var oerr error
	if derr := p.eng[0].Do(func() {
		if _, oerr = p.link[0].openStream(m, cd, o, ps); oerr == nil {
			o.taken, o.on = true, p.link[0]
		}
	}); derr != nil || oerr != nil {
		return nil, wakeSockets{}, nil, errors.Join(derr, oerr)
	}
	return seg, ws, o, nil
}

func (p *qpPair) stop() {
	for i := range 2 {
		p.eng[i].Stop()
		unix.Close(p.qp.ends[i].efd)
	}
}

// state reports engine i's link: broken, streams open, streams of the
// engine, registrations of the wire (regions: two a stream) beyond those
// of the link's pool.
func (p *qpPair) state(i int) (broken bool, open, streams, regs int) {
	pooled := 0
	_ = p.eng[i].Do(func() {
		broken, open, streams = p.link[i].broken, p.link[i].open, len(p.eng[i].streams)
		pl := p.link[i].pool
		pl.mu.Lock()
		pooled = len(pl.ready) + len(pl.held) + pl.making
		pl.mu.Unlock()
	})
	return broken, open, streams, p.qp.ends[i].registered() - 2*pooled
}

// waitIdle waits until both engines released every stream and the links
// every registration.
func (p *qpPair) waitIdle(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b0, o0, s0, r0 := p.state(0)
		b1, o1, s1, r1 := p.state(1)
		if o0+s0+r0+o1+s1+r1 == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("not idle after %v: broken %v/%v, slots %d/%d, streams %d/%d, registrations %d/%d", timeout, b0, b1, o0, o1, s0, s1, r0, r1)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// duplex runs a both-ways exchange of n pseudo-random bytes per direction
// on a stream and checks every byte.
func duplex(apps [2]*fakeApp, n int, seed uint64) error {
	errs := make(chan error, 2)
	for i, a := range apps {
		go func() {
			out := linkPattern(seed+uint64(i), n)
			want := linkPattern(seed+uint64(1-i), n)
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			got, err := a.exchange(out, func(pos int, b []byte) error {
				if !bytes.Equal(b, want[pos:pos+len(b)]) {
					return fmt.Errorf("side %d: bytes differ at %d", i, pos)
				}
				return nil
			}, 30*time.Second, rng)
			if err == nil && got != n {
				err = fmt.Errorf("side %d: %d bytes, want %d", i, got, n)
			}
			errs <- err
		}()
	}
	return errors.Join(<-errs, <-errs)
}

func linkPattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed*7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestQPLinkStreams: several streams at once on one queue pair, bytes
// verified both ways; closed streams give back their slots, their
// registrations and their mappings, and the slots serve new streams.
func TestQPLinkStreams(t *testing.T) {
	p := newQPPair(t, 64<<10)
	for round := range 2 {
		var all [4][2]*fakeApp
		for k := range all {
			apps, err := p.dial(uint16(8000 + k))
			if err != nil {
				t.Fatalf("round %d stream %d: %v", round, k, err)
			}
			all[k] = apps
		}
		if _, open, _, _ := p.state(0); open != 4 {
			t.Errorf("round %d: %d streams on the client's link, want 4", round, open)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for k, apps := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := duplex(apps, 300<<10+k*4099, uint64(round*10+k))
				for _, a := range apps {
					a.close(false)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		p.waitIdle(10 * time.Second)
	}
	if b, _, _, _ := p.state(0); b {
		t.Fatal("the link broke")
	}
}

// TestQPLinkReset: a stream reset by its application resets its peer and
// no other stream of the link.
func TestQPLinkReset(t *testing.T) {
	p := newQPPair(t, 64<<10)
	a, err := p.dial(9000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.dial(9001)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a[0].write([]byte("unread"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	a[1].close(true) // SO_LINGER 0
	buf := make([]byte, 16)
	if _, err := a[0].read(buf, 10*time.Second); !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("read on the reset stream: %v, want ECONNRESET", err)
	}
	a[0].close(false)
	if err := duplex(b, 200<<10, 3); err != nil {
		t.Fatalf("the sibling stream: %v", err)
	}
	b[0].close(false)
	b[1].close(false)
	p.waitIdle(10 * time.Second)
	if broken, _, _, _ := p.state(1); broken {
		t.Fatal("a stream's reset broke the link")
	}
}

// TestQPLinkFailure: a broken queue pair resets every stream on it, on
// both hosts, and takes no more stream-opens.
func TestQPLinkFailure(t *testing.T) {
	p := newQPPair(t, 64<<10)
	var apps [][2]*fakeApp
	for k := range 3 {
		a, err := p.dial(uint16(9100 + k))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a[0].write([]byte("in flight"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		apps = append(apps, a)
	}
	_ = p.qp.ends[0].disconnect()
	buf := make([]byte, 64)
	for k, a := range apps {
		for side := range 2 {
			for {
				_, err := a[side].read(buf, 10*time.Second)
				if err == nil {
					continue // what arrived before the break
				}
				if !errors.Is(err, unix.ECONNRESET) {
					t.Errorf("stream %d side %d: %v, want ECONNRESET", k, side, err)
				}
				break
			}
			a[side].close(false)
		}
	}
	p.waitIdle(10 * time.Second)
	for i := range 2 {
		if broken, _, _, _ := p.state(i); !broken {
			t.Errorf("link %d not broken", i)
		}
	}
	if _, err := p.dial(9200); err == nil {
		t.Error("a stream-open on a broken link succeeded")
	}
}

// TestQPLinkUnanswered: a stream-open its peer does not answer within the
// dial's bound (here the peer's engine does not hear of it for a while: a
// lost completion event) retires the link: it takes no more streams, its
// other stream goes on, and once that one and the late answer's are done
// the link is taken down at both ends with nothing left registered.
func TestQPLinkUnanswered(t *testing.T) {
	p := newQPPair(t, 4096)
	a, err := p.dial(9400)
	if err != nil {
		t.Fatal(err)
	}
	p.qp.ends[1].mute(true)
	seg, ws, o, err := p.open(9401)
	if err != nil {
		t.Fatal(err)
	}
	defer closeOpen(ws.app, ws.appTx)
	defer seg.Close()
	select {
	case err := <-o.done:
		t.Fatalf("answered by a muted peer: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	var retired bool
	var oerr error
	_ = p.eng[0].Do(func() {
		giveUp(o)
		retired = p.link[0].retired
		_, oerr = p.link[0].openStream(nil, ConnectData{}, &linkOpen{}, nil)
	})
	if !retired || oerr == nil {
		t.Fatalf("after the dial gave up: retired %v, a new stream-open: %v", retired, oerr)
	}
	p.qp.ends[1].mute(false) // the server answers late; the dial is gone
	select {
	case late := <-p.served:
		late.close(false)
	case <-time.After(10 * time.Second):
		t.Fatal("the unmuted server did not take the late stream-open")
	}
	if err := duplex(a, 64<<10, 7); err != nil {
		t.Fatalf("the sibling stream on the retired link: %v", err)
	}
	if broken, _, _, _ := p.state(0); broken {
		t.Fatal("the retired link went down with a stream on it")
	}
	a[0].close(false)
	a[1].close(false)
	p.waitIdle(10 * time.Second)
	for i := range 2 {
		if broken, _, _, _ := p.state(i); !broken {
			t.Errorf("link %d is still up", i)
		}
	}
}

// TestQPLinkPool: streams of a link run on segments of its pool, made
// ahead and registered once: the first streams find none ready and
// register their own; once those are done (their applications let go)
// and the pool made its segments, the next streams take segments zeroed
// and registered already at both ends, bytes verified both ways; a broken
// link releases every registration.
func TestQPLinkPool(t *testing.T) {
	p := newQPPair(t, 64<<10)
	p.pooled = true
	run := func(round int) {
		var all [][2]*fakeApp
		for k := range 2 {
			apps, err := p.dial(uint16(9500 + 10*round + k))
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			all = append(all, apps)
		}
		for k, apps := range all {
			if err := duplex(apps, 100<<10+k, uint64(round*10+k)); err != nil {
				t.Fatalf("round %d stream %d: %v", round, k, err)
			}
			for _, a := range apps {
				a.seg.SetLetGo(a.side) // as the C data path does when it unmaps
				a.close(false)
			}
		}
		p.waitIdle(10 * time.Second)
	}
	pools := func() (ready, taken [2]int) {
		for i := range 2 {
			ready[i], _, taken[i], _ = p.link[i].pool.counts()
		}
		return
	}
	run(0)
	deadline := time.Now().Add(10 * time.Second)
	for ready, _ := pools(); ready[0] < poolReady || ready[1] < poolReady; ready, _ = pools() {
		if time.Now().After(deadline) {
			t.Fatalf("segments ready after the first streams: %v, want %d at each end", ready, poolReady)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, before := pools()
	run(1)
	if _, after := pools(); after[0]-before[0] != 2 || after[1]-before[1] != 2 {
		t.Errorf("streams on segments of the pool: %d and %d, want 2 at each end", after[0]-before[0], after[1]-before[1])
	}
	_ = p.qp.ends[0].disconnect()
	deadline = time.Now().Add(10 * time.Second)
	for p.qp.ends[0].registered()+p.qp.ends[1].registered() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("registrations left after the link broke: %d and %d", p.qp.ends[0].registered(), p.qp.ends[1].registered())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQPLinkHostile: what the peer may do to a link. A message or an
// immediate that names no open stream, a write outside the rings it may
// write: the link breaks (and its streams reset); nothing is written
// outside a stream's ring.
func TestQPLinkHostile(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(p *qpPair, w *fakeWire, reg qpReg) error
	}{
		{"bad message", func(_ *qpPair, w *fakeWire, _ qpReg) error {
			return w.postSend(verbs.MakeWRID(wrLinkMsg, 0, 1), []byte{qpLinkEnd, 1, 0, 0, 1})
		}},
		{"end of a stream not open", func(_ *qpPair, w *fakeWire, _ qpReg) error {
			return w.postSend(verbs.MakeWRID(wrLinkMsg, 0, 1), qpLinkMessage(qpLinkEnd, 200, nil))
		}},
		{"open to the dialer", func(_ *qpPair, w *fakeWire, _ qpReg) error {
			cd, _ := ConnectData{RingBytes: 4096, Client: netip.MustParseAddrPort("10.0.0.2:1"), Server: netip.MustParseAddrPort("10.0.0.1:2")}.Marshal()
			return w.postSend(verbs.MakeWRID(wrLinkMsg, 0, 1), qpLinkMessage(qpLinkOpen, 9, cd))
		}},
		{"immediate of a stream not open", func(_ *qpPair, w *fakeWire, _ qpReg) error {
			return w.postWrite(verbs.MakeWRID(wrData, 1, 1), 0, 0, 0, 0, 0, MakeLinkImm(77, MakeImm(ImmData, 1)), true)
		}},
		{"write to a ring it does not write", func(p *qpPair, w *fakeWire, reg qpReg) error {
			// 16 bytes of its own stream's ring into the client's send
			// ring: the client's device refuses it (a remote access
			// error), and the queue pair breaks at both ends.
			var own qpReg
			_ = p.eng[1].Do(func() { own = p.link[1].ends[1].reg })
			return w.postWrite(verbs.MakeWRID(wrWrite, 1, 1), own.lkey, own.laddr, 16, reg.laddr, reg.lkey, 0, false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newQPPair(t, 4096)
			a, err := p.dial(9300)
			if err != nil {
				t.Fatal(err)
			}
			// The hostile server posts on its own wire, past its link.
			var reg qpReg
			_ = p.eng[0].Do(func() { reg = p.link[0].ends[1].reg })
			if err := tc.do(p, p.qp.ends[1], reg); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 16)
			if _, err := a[0].read(buf, 10*time.Second); !errors.Is(err, unix.ECONNRESET) {
				t.Fatalf("read: %v, want ECONNRESET", err)
			}
			if broken, _, _, _ := p.state(0); !broken {
				t.Fatal("the dialer's link is not broken")
			}
			for _, b := range a[0].seg.RingData(sdp.SideClient) {
				if b != 0 {
					t.Fatal("the peer wrote the client's send ring")
				}
			}
			a[0].close(false)
			a[1].close(false)
			p.waitIdle(10 * time.Second)
		})
	}
}

func TestParseQPLinkMsg(t *testing.T) {
	cd, _ := ConnectData{RingBytes: 4096, Client: netip.MustParseAddrPort("10.0.0.1:1"), Server: netip.MustParseAddrPort("10.0.0.2:2")}.Marshal()
	ad, _ := AcceptData{RingBytes: 4096}.Marshal()
	ok := [][]byte{
		qpLinkMessage(qpLinkOpen, 1, cd),
		qpLinkMessage(qpLinkAccept, 255, ad),
		qpLinkMessage(qpLinkReject, 3, RejectNoListener.Marshal()),
		qpLinkMessage(qpLinkEnd, 4, nil),
	}
	for _, b := range ok {
		if _, err := parseQPLinkMsg(b); err != nil {
			t.Errorf("%x: %v", b, err)
		}
	}
	bad := [][]byte{
		nil,
		make([]byte, qpLinkHdr-1),
		qpLinkMessage(qpLinkEnd, 0, nil),              // stream 0
		qpLinkMessage(qpLinkReject, 1, nil),           // no code
		qpLinkMessage(qpLinkEnd, 1, []byte{1}),        // a body on an END
		qpLinkMessage(qpLinkOpen, 1, cd[:10]),         // short
		qpLinkMessage(qpLinkAccept, 1, cd),            // long
		qpLinkMessage(qpLinkOpen, 1, append(cd, 0)),   // longer than a buffer
		qpLinkMessage(5, 1, nil),                      // no such kind
		{qpLinkEnd, 1, 1, 0},                          // reserved
		append([]byte{qpLinkEnd, 1, 0, 0}, ad[:4]...), // a body on an END
	}
	for _, b := range bad {
		if _, err := parseQPLinkMsg(b); !errors.Is(err, ErrWire) {
			t.Errorf("%x: %v, want ErrWire", b, err)
		}
	}
}

// FuzzParseQPLinkMsg: whatever the peer sends, a message that parses is
// of a known kind, names a stream, and has exactly its kind's body.
func FuzzParseQPLinkMsg(f *testing.F) {
	ad, _ := AcceptData{RingBytes: 4096}.Marshal()
	f.Add(qpLinkMessage(qpLinkAccept, 2, ad))
	f.Add(qpLinkMessage(qpLinkEnd, 2, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseQPLinkMsg(b)
		if err != nil {
			return
		}
		if m.slot == 0 || len(b) > QPLinkMsgMax {
			t.Fatalf("%x parsed as %+v", b, m)
		}
		want := map[uint8]int{qpLinkOpen: SizeofConnectData, qpLinkAccept: SizeofAcceptData, qpLinkReject: SizeofRejectData, qpLinkEnd: 0}
		if n, ok := want[m.kind]; !ok || len(m.body) != n {
			t.Fatalf("%x parsed as kind %d with %d bytes", b, m.kind, len(m.body))
		}
	})
}
