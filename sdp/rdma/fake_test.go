package rdma

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// fakeNet is an in-process RC connection between two fakeLinks. Each
// direction is a FIFO of posted work requests that a goroutine executes
// later, after a random delay, as a NIC would: the bytes are read from the
// sender's ring when the request executes, not when it is posted, a WRITE
// WITH IMMEDIATE waits for a posted receive at the peer (RNR retry), and
// requests complete in order.
type fakeNet struct {
	mu       sync.Mutex
	cond     *sync.Cond
	ends     [2]*fakeLink
	down     bool
	cut      bool // cutWire: nothing arrives, sends fail after fakeRetryTime
	lost     bool // cutWire(true): sends never complete at all
	maxDelay time.Duration
	rng      *rand.Rand
	done     chan struct{}
	wg       sync.WaitGroup

	// Fault injection.
	failPost error // PostWrite/PostImm return this
}

type fakeWR struct {
	wrid     verbs.WRID
	ring     int
	off, n   uint32
	imm      uint32
	withImm  bool
	signaled bool
}

// fakeLink is one end of a fakeNet; it implements Link.
type fakeLink struct {
	net    *fakeNet
	idx    int
	seg    *sdp.Segment // the engine's mapping: source and target of writes
	sq     []fakeWR
	rq     []verbs.WRID
	cq     []verbs.WC
	armed  bool
	efd    int
	eng    *Engine
	closed bool

	posts, disconnects int
}

func newFakeNet(a, b *sdp.Segment, maxDelay time.Duration, seed uint64) *fakeNet {
	n := &fakeNet{maxDelay: maxDelay, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), done: make(chan struct{})}
	n.cond = sync.NewCond(&n.mu)
	for i, s := range []*sdp.Segment{a, b} {
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			panic(err)
		}
		n.ends[i] = &fakeLink{net: n, idx: i, seg: s, efd: efd}
	}
	for i := range 2 {
		n.wg.Add(1)
		go n.wire(i)
	}
	return n
}

// stop ends the wire goroutines (after both engines stopped).
func (n *fakeNet) stop() {
	n.mu.Lock()
	select {
	case <-n.done:
	default:
		close(n.done)
	}
	n.cond.Broadcast()
	n.mu.Unlock()
	n.wg.Wait()
}

// wire executes end i's send queue.
func (n *fakeNet) wire(i int) {
	defer n.wg.Done()
	src, dst := n.ends[i], n.ends[1-i]
	for {
		n.mu.Lock()
		for !n.stopped() && (len(src.sq) == 0 || (src.sq[0].withImm && len(dst.rq) == 0 && !n.down && !n.cut)) {
			n.cond.Wait()
		}
		if n.stopped() {
			n.mu.Unlock()
			return
		}
		if n.down { // flushed by disconnect meanwhile
			n.mu.Unlock()
			continue
		}
		if n.cut {
			// The wire is cut: nothing arrives; after the QP's
			// retries the request fails, and the QP with it.
			wr := src.sq[0]
			src.sq = src.sq[1:]
			n.mu.Unlock()
			time.Sleep(fakeRetryTime)
			n.mu.Lock()
			if n.lost {
				n.mu.Unlock()
				continue
			}
			src.complete(verbs.WC{WRID: uint64(wr.wrid), Status: verbs.WCRetryExcErr})
			n.cond.Broadcast()
			n.mu.Unlock()
			continue
		}
		var d time.Duration
		if n.maxDelay > 0 {
			d = time.Duration(n.rng.Int64N(int64(n.maxDelay)))
		}
		n.mu.Unlock()
		if d > 0 {
			time.Sleep(d)
		}
		n.mu.Lock()
		if n.down || len(src.sq) == 0 {
			n.mu.Unlock()
			continue
		}
		wr := src.sq[0]
		src.sq = src.sq[1:]
		if wr.n > 0 {
			copy(dst.seg.RingData(wr.ring)[wr.off:wr.off+wr.n], src.seg.RingData(wr.ring)[wr.off:wr.off+wr.n])
		}
		if wr.withImm {
			r := dst.rq[0]
			dst.rq = dst.rq[1:]
			dst.complete(verbs.WC{WRID: uint64(r), Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: wr.n, ImmData: wr.imm, HasImm: true})
		}
		if wr.signaled {
			op := verbs.WCRDMAWrite
			src.complete(verbs.WC{WRID: uint64(wr.wrid), Status: verbs.WCSuccess, Opcode: op})
		}
		n.cond.Broadcast()
		n.mu.Unlock()
	}
}

func (n *fakeNet) stopped() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// fakeRetryTime stands for a QP's retries (retry count times the local ACK
// timeout) on a cut wire.
const fakeRetryTime = 200 * time.Millisecond

// cutWire cuts the wire silently: nothing is delivered any more, and each
// send work request fails with WCRetryExcErr after fakeRetryTime (with
// lost, never: a QP whose ACK timeout is infinite); nobody sees a flush or
// a disconnect until then.
func (n *fakeNet) cutWire(lost bool) {
	n.mu.Lock()
	n.cut, n.lost = true, lost
	n.cond.Broadcast()
	n.mu.Unlock()
}

// kill breaks the connection without any message: a peer host, process
// or device that died. Both ends see flushes.
func (n *fakeNet) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.breakLocked()
}

func (n *fakeNet) breakLocked() {
	if n.down {
		return
	}
	n.down = true
	for _, l := range n.ends {
		for _, wr := range l.sq {
			l.complete(verbs.WC{WRID: uint64(wr.wrid), Status: verbs.WCWRFlushErr})
		}
		l.sq = nil
		for _, r := range l.rq {
			l.complete(verbs.WC{WRID: uint64(r), Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv})
		}
		l.rq = nil
	}
	n.cond.Broadcast()
}

// complete queues a completion; mu held.
func (l *fakeLink) complete(wc verbs.WC) {
	l.cq = append(l.cq, wc)
	if l.armed {
		l.armed = false
		var one = [8]byte{1}
		_, _ = unix.Write(l.efd, one[:])
	}
}

func (l *fakeLink) postLocked(wr fakeWR) error {
	if l.closed {
		return errors.New("fake: link closed")
	}
	if l.net.failPost != nil {
		return l.net.failPost
	}
	if len(l.sq) >= sqDepth {
		return fmt.Errorf("fake: send queue full: %w", unix.ENOMEM)
	}
	l.posts++
	if l.net.down {
		l.complete(verbs.WC{WRID: uint64(wr.wrid), Status: verbs.WCWRFlushErr})
		return nil
	}
	l.sq = append(l.sq, wr)
	l.net.cond.Broadcast()
	return nil
}

func (l *fakeLink) PostWrite(wrid verbs.WRID, ring int, off, n uint32, imm uint32, withImm, signaled bool) error {
	if n == 0 || uint64(off)+uint64(n) > uint64(l.seg.RingBytes) || ring != l.idx {
		return fmt.Errorf("fake: bad write ring %d [%d,+%d): %w", ring, off, n, unix.EINVAL)
	}
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	return l.postLocked(fakeWR{wrid: wrid, ring: ring, off: off, n: n, imm: imm, withImm: withImm, signaled: signaled})
}

func (l *fakeLink) PostImm(wrid verbs.WRID, imm uint32, signaled bool) error {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	return l.postLocked(fakeWR{wrid: wrid, imm: imm, withImm: true, signaled: signaled})
}

func (l *fakeLink) PostProbe(wrid verbs.WRID) error {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	return l.postLocked(fakeWR{wrid: wrid, ring: l.idx, signaled: true})
}

func (l *fakeLink) PostRecv(wrid verbs.WRID) error {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	if l.closed {
		return errors.New("fake: link closed")
	}
	if len(l.rq) >= rqDepth {
		return fmt.Errorf("fake: receive queue full: %w", unix.ENOMEM)
	}
	if l.net.down {
		l.complete(verbs.WC{WRID: uint64(wrid), Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv})
		return nil
	}
	l.rq = append(l.rq, wrid)
	l.net.cond.Broadcast()
	return nil
}

func (l *fakeLink) Poll(wc []verbs.WC) (int, error) {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	n := copy(wc, l.cq)
	l.cq = l.cq[n:]
	return n, nil
}

func (l *fakeLink) Notify() error {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	l.armed = true
	if len(l.cq) > 0 {
		l.armed = false
		var one = [8]byte{1}
		_, _ = unix.Write(l.efd, one[:])
	}
	return nil
}

func (l *fakeLink) Disconnect() error {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	l.disconnects++
	l.net.breakLocked()
	return nil
}

func (l *fakeLink) Close() error {
	l.net.mu.Lock()
	l.closed = true
	l.net.mu.Unlock()
	if l.eng != nil {
		l.eng.unwatch(l.efd)
	}
	return unix.Close(l.efd)
}

// drain consumes the eventfd (the engine's source handler).
func (l *fakeLink) drain() {
	var b [8]byte
	_, _ = unix.Read(l.efd, b[:])
}

// fakeApp plays the C data path on one side of a segment, with the same
// wake protocol (preload/conn.c): it publishes, then looks at the other
// side's want flag and, when it was set, sends a token on the socket of
// that kind (data or FIN: the wake socket; room: the writers' socket);
// before sleeping it counts itself as a waiter of the kind it waits for,
// raises its own want flag, looks again, and sleeps on that kind's socket.
type fakeApp struct {
	seg        *sdp.Segment // the application's own mapping
	side, peer int
	fd         int // the application's end of the wake socket (blocking)
	wfd        int // its end of the writers' wake socket (blocking)
	size       uint64
	closed     bool

	mu      sync.Mutex // a reader and a writer may use one fakeApp at once
	gone    bool
	goneErr error // ECONNRESET or nil, decided when the end is noticed
}

var errTimeout = errors.New("fakeApp: timed out")

// sock returns the wake socket that carries tokens of kind w.
func (a *fakeApp) sock(w sdp.Want) int {
	if w == sdp.WantTx {
		return a.wfd
	}
	return a.fd
}

// wakePeer sends the other side a token of kind w if it asked for one.
func (a *fakeApp) wakePeer(w sdp.Want) {
	if a.seg.TakeWant(a.peer, w) {
		_, _ = unix.Write(a.sock(w), []byte{0})
	}
}

// markGone is C's mark_gone: a reset if our own sent bytes were never
// read or the other side set RESET, ETIMEDOUT when the engine gave up on
// the remote peer (TIMEDOUT).
func (a *fakeApp) markGone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gone {
		return
	}
	a.gone = true
	if a.seg.Head(a.side) != a.seg.Tail(a.side) || a.seg.SideFlags(a.peer)&sdp.SideReset != 0 {
		a.goneErr = unix.ECONNRESET
		if a.seg.SideFlags(a.peer)&sdp.SideTimedOut != 0 {
			a.goneErr = unix.ETIMEDOUT
		}
	}
}

// sleep waits for a token (or the end) after raising want w, unless
// ready already holds.
func (a *fakeApp) sleep(w sdp.Want, ready func() bool, deadline time.Time) error {
	a.seg.AddWaiters(a.side, w, 1)
	defer a.seg.AddWaiters(a.side, w, -1)
	a.seg.SetWant(a.side, w, 1)
	if ready() {
		return nil
	}
	if err := a.waitToken(deadline, a.sock(w)); err != nil {
		if ready() {
			return nil
		}
		return err
	}
	return nil
}

// ended reports whether the end was noticed, and the error it left; take
// clears the error.
func (a *fakeApp) ended(take bool) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.goneErr
	if take {
		a.goneErr = nil
	}
	return a.gone, err
}

// errWouldBlock is tryWrite's and tryRead's EAGAIN.
var errWouldBlock = errors.New("fakeApp: would block")

// tryWrite writes what fits without waiting.
func (a *fakeApp) tryWrite(p []byte) (int, error) {
	if gone, err := a.ended(false); gone {
		if err != nil {
			return 0, err
		}
		return 0, unix.EPIPE
	}
	head, tail := a.seg.Head(a.side), a.seg.Tail(a.side)
	if head-tail > a.size {
		return 0, fmt.Errorf("fakeApp: send ring corrupt: head %d tail %d", head, tail)
	}
	room := a.size - (head - tail)
	if room == 0 {
		return 0, errWouldBlock
	}
	n := min(room, uint64(len(p)))
	data := a.seg.RingData(a.side)
	off := a.seg.RingPos(a.side, head)
	k := copy(data[off:], p[:n])
	copy(data, p[k:n])
	a.seg.SetHead(a.side, head+n)
	a.wakePeer(sdp.WantRx)
	return int(n), nil
}

// tryRead reads what is there without waiting.
func (a *fakeApp) tryRead(p []byte) (int, error) {
	head, tail := a.seg.Head(a.peer), a.seg.Tail(a.peer)
	if head-tail > a.size {
		return 0, fmt.Errorf("fakeApp: receive ring corrupt: head %d tail %d", head, tail)
	}
	if used := head - tail; used > 0 {
		n := min(used, uint64(len(p)))
		data := a.seg.RingData(a.peer)
		off := a.seg.RingPos(a.peer, tail)
		k := copy(p[:n], data[off:])
		copy(p[k:n], data)
		a.seg.SetTail(a.peer, tail+n)
		if a.size-(head-(tail+n)) >= a.size/2 {
			a.wakePeer(sdp.WantTx)
		}
		return int(n), nil
	}
	if a.seg.SideFlags(a.peer)&sdp.SideFIN != 0 {
		return 0, io.EOF
	}
	if gone, err := a.ended(true); gone { // a reset is reported once
		if err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	return 0, errWouldBlock
}

func (a *fakeApp) write(p []byte, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	total := 0
	for total < len(p) {
		n, err := a.tryWrite(p[total:])
		total += n
		if errors.Is(err, errWouldBlock) {
			err = a.sleep(sdp.WantTx, func() bool {
				gone, _ := a.ended(false)
				return gone || a.seg.Head(a.side)-a.seg.Tail(a.side) < a.size
			}, deadline)
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (a *fakeApp) read(p []byte, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, err := a.tryRead(p)
		if !errors.Is(err, errWouldBlock) {
			return n, err
		}
		err = a.sleep(sdp.WantRx, func() bool {
			return a.seg.Head(a.peer) != a.seg.Tail(a.peer) || a.seg.SideFlags(a.peer)&sdp.SideFIN != 0
		}, deadline)
		if err != nil {
			return 0, err
		}
	}
}

// exchange runs both directions of one side in a single thread, as an
// event-driven program would: write what fits, read what is there, and
// when neither moves, wait for both kinds as a poller does (counted as a
// waiter of each, both want flags up, asleep on both sockets). out is
// sent, then FIN; in receives until end of file.
func (a *fakeApp) exchange(out []byte, check func(pos int, b []byte) error, timeout time.Duration, rng *rand.Rand) (int, error) {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 70000)
	sent, got := 0, 0
	fin, eof := false, false
	for !fin || !eof {
		moved := false
		if !fin {
			if sent == len(out) {
				a.shutdownWrite()
				fin = true
				moved = true
			} else {
				n := min(1+rng.IntN(len(buf)), len(out)-sent)
				if rng.IntN(4) == 0 {
					n = min(1+rng.IntN(100), len(out)-sent)
				}
				k, err := a.tryWrite(out[sent : sent+n])
				if err != nil && !errors.Is(err, errWouldBlock) {
					return got, fmt.Errorf("write at %d: %w", sent, err)
				}
				sent += k
				moved = moved || k > 0
			}
		}
		if !eof {
			n := 1 + rng.IntN(len(buf))
			if rng.IntN(4) == 0 {
				n = 1 + rng.IntN(64)
			}
			k, err := a.tryRead(buf[:n])
			if k > 0 {
				if cerr := check(got, buf[:k]); cerr != nil {
					return got, cerr
				}
				got += k
				moved = true
			}
			switch {
			case errors.Is(err, io.EOF):
				eof = true
				moved = true
			case err != nil && !errors.Is(err, errWouldBlock):
				return got, fmt.Errorf("read at %d: %w", got, err)
			}
		}
		if moved {
			continue
		}
		kinds := []sdp.Want{sdp.WantRx}
		if !fin {
			kinds = append(kinds, sdp.WantTx)
		}
		socks := make([]int, 0, 2)
		for _, w := range kinds {
			a.seg.AddWaiters(a.side, w, 1)
			a.seg.SetWant(a.side, w, 1)
			socks = append(socks, a.sock(w))
		}
		ready := (!fin && a.seg.Head(a.side)-a.seg.Tail(a.side) < a.size) ||
			a.seg.Head(a.peer) != a.seg.Tail(a.peer) || a.seg.SideFlags(a.peer)&sdp.SideFIN != 0
		var err error
		if !ready {
			err = a.waitToken(deadline, socks...)
		}
		for _, w := range kinds {
			a.seg.AddWaiters(a.side, w, -1)
		}
		if err != nil {
			return got, fmt.Errorf("sent %d, received %d: %w", sent, got, err)
		}
	}
	return got, nil
}

// waitToken sleeps until a token or the end arrives on one of socks, and
// takes one token from each that has one, as the C data path's poller
// does (osf_conn_disarm). A signal does not end the wait: poll returns
// EINTR for any signal with a handler (the Go runtime's SIGURG, sent to
// preempt goroutines, under load), where the blocking recv the C data
// path sleeps in is restarted (SA_RESTART, no timeout on the socket);
// taken for a timeout, it made a waiter give up with its token still to
// come and its peer block for good.
func (a *fakeApp) waitToken(deadline time.Time, socks ...int) error {
	p := make([]unix.PollFd, len(socks))
	for i, fd := range socks {
		p[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return errTimeout
		}
		n, err := unix.Poll(p, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errTimeout
		}
		break
	}
	for _, q := range p {
		if q.Revents == 0 {
			continue
		}
		var b [1]byte
		n, _, err := unix.Recvfrom(int(q.Fd), b[:], unix.MSG_DONTWAIT)
		if (err == nil && n == 0) || errors.Is(err, unix.ECONNRESET) {
			a.markGone()
		}
	}
	return nil
}

func (a *fakeApp) shutdownWrite() {
	a.seg.OrSideFlags(a.side, sdp.SideFIN)
	a.wakePeer(sdp.WantRx)
}

// close drops the application's side; abort is SO_LINGER 0.
func (a *fakeApp) close(abort bool) {
	if a.closed {
		return
	}
	a.closed = true
	if abort {
		a.seg.OrSideFlags(a.side, sdp.SideReset)
	}
	unix.Close(a.fd)
	unix.Close(a.wfd)
	a.seg.Close()
}

// pair is a connection between two engines over a fakeNet: app[0] is the
// client (side 0), app[1] the server (side 1).
type pair struct {
	t    testing.TB
	net  *fakeNet
	eng  [2]*Engine
	app  [2]*fakeApp
	strm [2]*stream
}

type pairOpts struct {
	ring     uint32
	spin     time.Duration
	maxDelay time.Duration
	seed     uint64
	// serverExit arms exit(3)'s wait for engine 1 (the server's) before
	// its stream is added, as a process's core does at start.
	serverExit bool
}

func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	p := &pair{t: t}
	var mirrors [2]*sdp.Segment
	var engFDs, engTxFDs [2]int
	for i := range 2 {
		seg, err := sdp.CreateSegment(o.ring)
		if err != nil {
			t.Fatal(err)
		}
		m, err := seg.Mirror()
		if err != nil {
			t.Fatal(err)
		}
		ws, err := newWakeSockets(0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(seg.FD) // the mappings keep the memfd alive
		seg.FD = -1
		mirrors[i] = m
		engFDs[i], engTxFDs[i] = ws.engine, ws.engineTx
		p.app[i] = &fakeApp{seg: seg, side: i, peer: 1 - i, fd: ws.app, wfd: ws.appTx, size: uint64(o.ring)}
		e, err := NewEngine(EngineConfig{PollSpin: o.spin, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		p.eng[i] = e
	}
	p.net = newFakeNet(mirrors[0], mirrors[1], o.maxDelay, o.seed)
	for i := range 2 {
		l := p.net.ends[i]
		l.eng = p.eng[i]
		var err error
		if derr := p.eng[i].Do(func() {
			if err = p.eng[i].watch(l.efd, l.drain); err != nil {
				return
			}
			if i == 1 && o.serverExit {
				p.eng[i].armExit()
			}
			p.strm[i], err = p.eng[i].addStream(p.eng[i].allocID(), mirrors[i], i, l, engFDs[i], engTxFDs[i])
		}); derr != nil {
			t.Fatal(derr)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(p.stop)
	return p
}

func (p *pair) stop() {
	for i := range 2 {
		p.app[i].close(false)
		p.eng[i].Stop()
	}
	p.net.stop()
}

// streams returns how many streams engine i still has.
func (p *pair) streams(i int) int {
	n := -1
	_ = p.eng[i].Do(func() { n = len(p.eng[i].streams) })
	return n
}

// waitReleased waits until both engines released their streams.
func (p *pair) waitReleased(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for p.streams(0)+p.streams(1) != 0 {
		if time.Now().After(deadline) {
			p.t.Fatalf("streams not released after %v: %d and %d left", timeout, p.streams(0), p.streams(1))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Released means the links were closed (the QP, MR and CQ freed),
	// and the engines' mappings unmapped.
	for i := range 2 {
		var closed, unmapped bool
		_ = p.eng[i].Do(func() { closed, unmapped = p.net.ends[i].closed, p.strm[i].seg.Mem == nil })
		if !closed || !unmapped {
			p.t.Errorf("engine %d released its stream but link closed=%v, mapping released=%v", i, closed, unmapped)
		}
	}
}

// dump logs the state of both streams and applications (failures).
func (p *pair) dump() {
	for i := range 2 {
		_ = p.eng[i].Do(func() {
			s := p.strm[i]
			p.t.Logf("engine %d: state %v err %v sent %d peerTail %d rxHead %d credited %d posted %d completed %d recvs %d fin %v/%v wants rx=%d tx=%d",
				i, s.state, s.err, s.tx.sent(), s.tx.peerTail(), s.tx.rxHead(), s.tx.credited(), s.tx.posted(), s.tx.completed(), s.tx.recvs(), s.tx.finSent(), s.tx.peerFin(),
				s.seg.LoadWant(s.peer, sdp.WantRx), s.seg.LoadWant(s.peer, sdp.WantTx))
		})
		a := p.app[i]
		if !a.closed {
			gone, _ := a.ended(false)
			p.t.Logf("app %d: tx head %d tail %d, rx head %d tail %d, wants rx=%d tx=%d waiters rx=%d tx=%d gone %v",
				i, a.seg.Head(a.side), a.seg.Tail(a.side), a.seg.Head(a.peer), a.seg.Tail(a.peer),
				a.seg.LoadWant(a.side, sdp.WantRx), a.seg.LoadWant(a.side, sdp.WantTx),
				a.seg.Waiters(a.side, sdp.WantRx), a.seg.Waiters(a.side, sdp.WantTx), gone)
		}
	}
	p.net.mu.Lock()
	for i, l := range p.net.ends {
		p.t.Logf("link %d: sq %d rq %d cq %d armed %v down %v", i, len(l.sq), len(l.rq), len(l.cq), l.armed, p.net.down)
	}
	p.net.mu.Unlock()
}
