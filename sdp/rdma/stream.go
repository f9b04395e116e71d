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

// Queue depths of a stream's link. The send queue holds at most sqDepth
// work requests; one in every OSF_RDMA_SIGNAL_EVERY is signaled (tx.h),
// so a full queue always has signaled requests outstanding whose
// completions free it. The receive queue is kept full: a peer with
// sqDepth requests in flight never finds it empty, and should the engine
// fall behind, the peer's RNR retries (infinite, see verbs.ConnParam)
// wait for it.
const (
	sqDepth = C.OSF_RDMA_SQ_DEPTH
	rqDepth = 2 * sqDepth
	cqDepth = sqDepth + rqDepth
)

// ErrProtocol means the peer broke the wire protocol; the connection is
// reset.
var ErrProtocol = errors.New("rdma: protocol violation by the peer")

// streamState is where a stream is in its life.
type streamState uint8

const (
	// stateOpen: data flows both ways.
	stateOpen streamState = iota
	// stateDraining: the local application closed its last descriptor;
	// what it wrote is still being sent, then CLOSE.
	stateDraining
	// stateClosing: CLOSE was sent or received, or the stream failed; no
	// more data moves and the link is being taken down.
	stateClosing
	// stateDead: the link is down and the stream's resources are released.
	stateDead
)

var stateNames = [...]string{"open", "draining", "closing", "dead"}

func (s streamState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// open reports whether the local application still uses the connection.
func (s streamState) open() bool { return s == stateOpen }

// sending reports whether local bytes may still go to the peer.
func (s streamState) sending() bool { return s == stateOpen || s == stateDraining }

// dead reports whether the stream is finished.
func (s streamState) dead() bool { return s == stateDead }

// stream mirrors one connection's segment to the peer over a Link. The
// local C data path sees the engine as "the other side" of the segment:
// the engine consumes the local application's send ring (ring side) by
// RDMA-writing it into the peer's segment and produces into its receive
// ring (ring 1-side) as the peer's writes arrive, and it speaks the same
// wake protocol as a local peer would: want flags and waiter counts in the
// segment, readers' tokens on the wake socket (the application's fd),
// writers' tokens on the writers' wake socket.
//
// A stream is used by the engine goroutine only.
type stream struct {
	id    uint32       // connection number in work request ids
	seg   *sdp.Segment // the engine's own mapping of the segment
	side  int          // the local application's side
	peer  int          // 1 - side: the side the engine plays
	size  uint64
	mask  uint64
	lowat uint64
	link  Link
	// The engine's ends of the application's two wake sockets; -1 once
	// closed. wake is the peer of the application's fd: readers' tokens
	// and the end of the connection; wakeTx that of its hidden writers'
	// socket: writers' tokens.
	wake, wakeTx int
	// closeFD closes a wake socket end (the engine also forgets it).
	closeFD func(fd int)
	state   streamState
	err     error // why the stream failed, when it did
	logf    func(format string, a ...any)

	// Transmit: ring side, mirrored into the peer's ring side: bytes
	// sent, the peer's last credit, send work requests posted and
	// completed, FIN sent, shared with the application's threads, which
	// post what they write themselves (tx.h). Receive: ring peer, written
	// by the peer: its head, our last credit, its FIN, the receives
	// posted, in the same C state (rx.h), whose rule the application's
	// threads run too when they wait for data.
	tx *txState
	// cRecv: receives are posted by the rule's C poster (a verbs QP, the
	// stand-in), else by the engine through the link (fakes in tests).
	cRecv bool
	// rxHeld: the engine holds rx_lock (pollLink).
	rxHeld     bool
	peerClosed bool

	localEOF     bool   // the local application's last descriptor is gone
	closeSent    bool   // CLOSE posted
	closePending bool   // CLOSE due, waiting for a send queue slot
	closeAck     bool   // CLOSE completed: the peer has it
	closeCode    uint32 // CloseGraceful or CloseAbort
	linkDown     bool   // the link is broken: only flushes follow
	released     bool

	// Liveness while stalled: a writer blocked on a full peer ring posts
	// nothing, so a dead peer or a cut wire would go unnoticed; the engine
	// then probes (probeStalled).
	stallSince time.Time // when the stream last became stalled, or zero
	stallLife  uint64    // the completions callers had taken by then
	probing    bool      // a probe is outstanding
	probeSent  time.Time // when it was posted
	probes     int       // probes posted
	probeTimer bool      // probeStalled is scheduled

	// armAll: the CQ is armed for every completion (waitsForSends), as
	// last told to the rule.
	armAll bool

	// Counters, for logs and tests.
	bytesOut uint64
	watched  *watchSample // watch.go

	// For the debug log: the set-up's steps until ESTABLISHED (server),
	// the teardown's from the first end (local close or the peer's CLOSE).
	laps, teardown *laps
}

// tearLap records a teardown step, starting the teardown's clock on the
// first.
func (s *stream) tearLap(name string) {
	if s.teardown == nil {
		s.teardown = newLaps()
	}
	s.teardown.lap(name)
}

// newStream makes a stream for a segment whose local application side is
// side; wake and wakeTx are the engine's ends of the application's wake
// socket and writers' wake socket. It posts the receive queue.
func newStream(id uint32, seg *sdp.Segment, side int, link Link, wake, wakeTx int, logf func(string, ...any)) (*stream, error) {
	s := &stream{
		id: id, seg: seg, side: side, peer: 1 - side,
		size: uint64(seg.RingBytes), mask: uint64(seg.RingBytes) - 1, lowat: uint64(sdp.WakeLowat(seg.RingBytes)),
		link: link, wake: wake, wakeTx: wakeTx, logf: logf,
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	var err error
	if s.tx, err = newTx(id, seg.RingBytes, side); err != nil {
		return nil, err
	}
	s.tx.rxInit(seg, side, wake, wakeTx)
	if ru, ok := link.(rxUser); ok {
		ru.useRx(s.tx, side)
	}
	if s.cRecv, err = s.tx.rxFill(); err == nil {
		err = s.refill()
	}
	if err != nil {
		s.tx.retire()
		return nil, err
	}
	return s, nil
}

// rxUser is a Link whose completions and receives the rule's C code takes
// and posts (rx.h): useRx gives it its taker and receive poster.
type rxUser interface {
	useRx(tx *txState, side int)
}

// refill keeps the receive queue full where the Go link posts receives.
func (s *stream) refill() error {
	for !s.cRecv && !s.linkDown && !s.state.dead() && !s.peerClosed && s.tx.recvs() < rqDepth {
		if err := s.link.PostRecv(verbs.MakeWRID(wrRecv, s.id, uint32(s.tx.p.rx.recv_seq))); err != nil {
			return fmt.Errorf("rdma: post receive: %w", err)
		}
		s.tx.countRecv()
	}
	return nil
}

// sqFree returns the free send queue slots (a recent count: the
// application's threads post too; post checks under the lock).
func (s *stream) sqFree() int { return s.tx.sqFree() }

// post posts one send work request of kind k and counts it, under the
// sending state's lock; errSQFull when the send queue has no slot.
func (s *stream) post(k uint8, f func(wrid verbs.WRID, signaled bool) error, forceSignal bool) error {
	s.tx.lock()
	defer s.tx.unlock()
	if s.tx.sqFree() < 1 {
		return errSQFull
	}
	seq := s.tx.posted()
	if err := f(verbs.MakeWRID(k, s.id, seq), signaled(seq, forceSignal)); err != nil {
		return err
	}
	s.tx.bumpPosted()
	return nil
}

// enableCallers lets the application's threads of this process post what
// they write (tx.h), once the link can take their posts: the stream is
// registered, the peer's region known.
func (s *stream) enableCallers() {
	cp, ok := s.link.(callerPoster)
	if !ok || !s.state.open() || s.linkDown || !cp.useTx(s.tx, s.side) {
		return
	}
	if dev, ino := s.seg.FileID(); ino != 0 {
		s.tx.publish(dev, ino)
	}
}

// callerPoster is a Link the application's threads can post on: useTx
// gives the sending state its C poster and handles.
type callerPoster interface {
	useTx(tx *txState, side int) bool
}

func (s *stream) postImm(k uint8, imm uint32, signaled bool) error {
	return s.post(k, func(w verbs.WRID, sig bool) error { return s.link.PostImm(w, imm, sig) }, signaled)
}

// pump does whatever the local application's progress allows: send new
// bytes (as credits permit), FIN, credits for what it consumed, CLOSE when
// draining is done. It never blocks.
func (s *stream) pump() {
	if s.state.dead() || s.linkDown {
		return
	}
	if s.closePending && !s.closeSent {
		s.sendClose(s.closeCode)
	}
	if s.state.sending() && !s.peerClosed && !s.closeSent {
		if err := s.transmit(); err != nil {
			s.fail(err)
			return
		}
	}
	if !s.peerClosed && !s.closeSent {
		if err := s.credit(false); err != nil {
			s.fail(err)
			return
		}
	}
	if s.state == stateDraining && !s.closeSent && s.tx.sent() == s.seg.Head(s.side) {
		// Everything is out; a last credit so the peer's view of its
		// ring is exact, then CLOSE.
		if s.sqFree() < 2 {
			return
		}
		if err := s.credit(true); err != nil {
			s.fail(err)
			return
		}
		s.sendClose(CloseGraceful)
	}
}

// transmit posts the bytes the local application published and nobody
// posted yet (its own threads post most of them: tx.h), at most what the
// peer's ring has room for, and FIN after the last of them: the rule of
// tx.h, through the C poster of a verbs QP, else the link. Like a writer,
// it never waits for a writer that holds the lock: that one posts for it
// (tx.h, "again"); head and FIN are read under the lock (read earlier, a
// writer could have posted past them).
func (s *stream) transmit() error {
	for {
		if s.tx.callersLive() {
			if !s.tx.claim() {
				return nil
			}
		} else {
			s.tx.lock()
		}
		s.tx.begin()
		err := s.transmitLocked()
		if again := s.tx.release(); err != nil || !again {
			return err
		}
	}
}

func (s *stream) transmitLocked() error {
	flags := s.seg.SideFlags(s.side) // before head: FIN is set after the last write
	head := s.seg.Head(s.side)
	fin := flags&sdp.SideFIN != 0
	before := s.tx.sent()
	var rc int
	var err error
	if s.tx.cpost {
		rc = s.tx.enginePush(head, fin)
		if rc > 0 {
			err = unix.Errno(rc)
		}
	} else {
		rc, err = s.tx.pushVia(s.link, head, fin)
	}
	s.bytesOut += s.tx.sent() - before
	switch {
	case rc < 0:
		return fmt.Errorf("rdma: local send ring corrupt (head %d, sent %d, peer tail %d)", head, s.tx.sent(), s.tx.peerTail())
	case err != nil:
		return fmt.Errorf("rdma: post write: %w", err)
	}
	return nil
}

// credit reports the local application's consumption to the peer when it
// matters (rx.h osf_rdma_credit_due: SMC-R's rule), or always when force
// is set; the application's reading threads post most credits themselves
// (osf_rdma_credit_push), the engine those they leave.
func (s *stream) credit(force bool) error {
	// In this order: a reader's credit moves credited up to a tail it
	// read, and the rule moves head before readers can pass it.
	credited := s.tx.credited()
	tail := s.seg.Tail(s.peer)
	head := s.tx.rxHead()
	if tail-credited > head-credited {
		return fmt.Errorf("rdma: local receive ring corrupt (tail %d, head %d)", tail, head)
	}
	if s.tx.cpost {
		if rc := s.tx.creditC(tail, force); rc > 0 {
			return fmt.Errorf("rdma: post credit: %w", unix.Errno(rc))
		}
		return nil
	}
	// Through the link, under the lock: a reader's credit may move
	// credited meanwhile, and it never moves back.
	s.tx.lock()
	defer s.tx.unlock()
	if !s.tx.creditDue(tail, force) || s.tx.sqFree() < 1 {
		return nil
	}
	was, seq := s.tx.credited(), s.tx.posted()
	s.tx.setCredited(tail) // before the post: see osf_rdma_credit_post
	if err := s.link.PostImm(verbs.MakeWRID(wrCredit, s.id, seq), MakeImm(ImmCredit, tail), signaled(seq, false)); err != nil {
		s.tx.setCredited(was)
		return fmt.Errorf("rdma: post credit: %w", err)
	}
	s.tx.bumpPosted()
	return nil
}

// sendClose posts CLOSE (signaled: the link is taken down when it
// completed, so the peer has it) and stops the data flow. Without a free
// slot it is retried when completions free one.
func (s *stream) sendClose(code uint32) {
	if s.closeSent || s.linkDown {
		return
	}
	s.closeCode = code
	s.closePending = true
	s.tx.stopCallers()
	if s.state.sending() {
		s.state = stateClosing
	}
	if s.sqFree() < 1 {
		return
	}
	if err := s.postImm(wrClose, MakeImm(ImmClose, uint64(code)), true); err != nil {
		if errors.Is(err, errSQFull) {
			return
		}
		s.closePending = false
		s.fail(fmt.Errorf("rdma: post close: %w", err))
		return
	}
	s.closePending = false
	s.closeSent = true
}

// handle applies one completion the Go link made (the stand-in's sends,
// fakes in tests) with the rule (rx.h), and what it leaves to the engine.
func (s *stream) handle(wc *verbs.WC) {
	if !s.rxHeld {
		s.tx.rxLock()
		s.rxHeld = true
		defer func() { s.rxHeld = false; s.tx.rxUnlock() }()
	}
	s.tx.rxOne(wc)
	s.events()
}

// events handles what the rule left to the engine, rx_lock held, and
// keeps the receive queue full.
func (s *stream) events() {
	if ev := s.tx.event(); ev != nil {
		s.onEvent(ev)
	}
	if err := s.refill(); err != nil {
		s.fail(err)
	}
}

// onEvent does what the rule leaves to the engine.
func (s *stream) onEvent(ev *rxEvent) {
	switch ev.what {
	case evBroken:
		s.linkBroken(ev.wc.Status)
	case evClose:
		s.peerClosed = true
		s.tx.stopCallers()
		s.tearLap("peer-close")
		if ev.value == CloseAbort {
			s.seg.OrSideFlags(s.peer, sdp.SideReset)
		}
		s.endLocal()
		if s.state.sending() {
			s.state = stateClosing
		}
		_ = s.link.Disconnect()
	case evSent:
		switch verbs.WRID(ev.wc.WRID).Kind() {
		case wrProbe:
			s.probing = false
		case wrClose:
			s.tearLap("close-acked")
			s.closeAck = true
			// The peer has everything: take the link down.
			_ = s.link.Disconnect()
		}
	case evViolation:
		s.fail(fmt.Errorf("%w: %s", ErrProtocol, ev.why))
	default:
		s.fail(errors.New(ev.why))
	}
}

// stalled reports whether the stream waits on the peer: the local side is
// not writable for lack of its credit (the room left in the local ring is
// below what wakes a writer or reports POLLOUT: a full peer ring, or less
// room than the wake mark after the peer's last credit, or the in-flight
// limit of SO_SNDBUF/SO_RCVBUF reached), or for its device to acknowledge
// what is in flight (the send queue is full and bytes wait to be sent:
// many small writes to a peer that went silent fill the queue before the
// ring). The local application may be blocked on it, and nothing the
// engine would post could notice the peer's death.
func (s *stream) stalled() bool {
	if !s.state.sending() || s.linkDown || s.peerClosed || s.closeSent {
		return false
	}
	head := s.seg.Head(s.side)
	peerTail := s.tx.peerTail()
	if head == peerTail {
		return false // nothing in flight: idle
	}
	if s.sqFree() < 2 && s.tx.sent() != head {
		return true
	}
	limit, lowat := s.size, s.lowat
	if snd, rcv := s.seg.BufLimits(s.side); snd|rcv != 0 {
		limit, lowat = sdp.TxLimit(s.seg.RingBytes, snd, rcv)
	}
	return head-peerTail+lowat > limit
}

// probe asks the peer's device whether it is there (PostProbe): a dead
// peer or a cut wire makes the probe fail once the QP's retries are
// exhausted, and the stream is reset.
func (s *stream) probe() {
	if s.probing || s.sqFree() < 1 {
		return
	}
	if err := s.post(wrProbe, func(w verbs.WRID, _ bool) error { return s.link.PostProbe(w) }, true); err != nil {
		if !errors.Is(err, errSQFull) {
			s.fail(fmt.Errorf("rdma: post probe: %w", err))
		}
		return
	}
	s.probing = true
	s.probeSent = time.Now()
	if s.probes == 0 {
		s.logf("rdma: connection %d: stalled on the peer (its credit, or its device's acknowledgements); probing its device (every %v while stalled)", s.id, probeAfter)
	}
	s.probes++
}

// drainWake reads the tokens the local application sent on both wake
// sockets (on its fd when it published data or FIN and the engine's
// rx_want was up, on the writers' socket when it consumed and tx_want was
// up; the engine looks at the rings whenever it wakes, so it keeps no
// count) and notices the end of the application's side: the end of its
// fd, whose last holder is gone. The end of the writers' socket alone only
// closes the engine's end of it, so that epoll stops reporting it: nobody
// is left to wake there.
func (s *stream) drainWake() {
	if wakeTake(s.wake, s.seg.TokensWord(s.peer, sdp.WantRx)) {
		s.onLocalEOF()
	}
	if wakeTake(s.wakeTx, s.seg.TokensWord(s.peer, sdp.WantTx)) && s.wakeTx >= 0 {
		fd := s.wakeTx
		s.wakeTx = -1
		s.closeSocket(fd)
	}
}

// onLocalEOF handles the end of the local application's side: every
// descriptor of it is closed. As TCP, an abortive close (SO_LINGER 0) or
// one with received bytes nobody read resets the connection; otherwise
// what the application wrote is still delivered, then CLOSE.
func (s *stream) onLocalEOF() {
	if s.localEOF {
		return
	}
	s.localEOF = true
	s.tx.stopCallers()
	s.tearLap("local-close")
	s.closeWake()
	if !s.state.open() {
		return
	}
	unread := s.seg.Head(s.peer) != s.seg.Tail(s.peer)
	if sdp.EndIsReset(s.seg.SideFlags(s.side), unread) {
		s.sendClose(CloseAbort)
		return
	}
	s.state = stateDraining
	s.pump()
}

// endLocal tells the local application that the other side is gone: the
// flags are already in the segment; a changed close_seq makes writers look,
// and the end of both wake sockets wakes every waiter: readers and pollers
// on the application's fd, blocked writers on the writers' socket.
func (s *stream) endLocal() {
	if s.wake < 0 && s.wakeTx < 0 {
		return
	}
	s.seg.BumpCloseSeq(s.peer)
	s.closeWake()
}

// closeWake closes the engine's ends of both wake sockets.
func (s *stream) closeWake() {
	for _, p := range []*int{&s.wake, &s.wakeTx} {
		if fd := *p; fd >= 0 {
			*p = -1
			s.closeSocket(fd)
		}
	}
}

func (s *stream) closeSocket(fd int) {
	// The rule (an application's thread, under rx_lock) must not send on
	// the number once closed.
	if s.rxHeld {
		s.tx.dropWake(fd)
	} else {
		s.tx.rxLock()
		s.tx.dropWake(fd)
		s.tx.rxUnlock()
	}
	if s.closeFD != nil {
		s.closeFD(fd)
	} else {
		unix.Close(fd)
	}
}

// fail resets the connection after a local error or a protocol violation:
// the local application sees ECONNRESET, the peer gets CLOSE(abort) if the
// link still works, and the link is taken down.
func (s *stream) fail(err error) {
	if s.err == nil {
		s.err = err
		s.logf("rdma: connection %d reset: %v", s.id, err)
	}
	s.tx.stopCallers()
	s.seg.OrSideFlags(s.peer, sdp.SideReset)
	s.endLocal()
	if s.state.sending() {
		s.state = stateClosing
	}
	if !s.linkDown && !s.closeSent && !s.peerClosed && s.sqFree() >= 1 {
		if s.postImm(wrClose, MakeImm(ImmClose, CloseAbort), true) == nil {
			s.closeSent = true
			s.closeCode = CloseAbort
			return // Disconnect when it completes
		}
	}
	_ = s.link.Disconnect()
}

// linkBroken handles a failed or flushed completion: the link is down.
func (s *stream) linkBroken(st verbs.WCStatus) {
	if !s.linkDown && !st.Flushed() && !s.closeAck && !s.peerClosed {
		s.logf("rdma: connection %d: work request failed: %s", s.id, st)
		if st == verbs.WCRetryExcErr {
			s.timedOut() // the QP's retries gave up on the peer's device
			return
		}
	}
	s.down()
}

// timedOut takes the link down after the peer's device stopped answering
// (the QP's retries or an unacknowledged probe gave up): the local
// application sees ETIMEDOUT, as when TCP's retransmissions give up,
// after the data already received.
func (s *stream) timedOut() {
	if !s.linkDown && !s.peerClosed && !s.localEOF {
		s.seg.OrSideFlags(s.peer, sdp.SideTimedOut) // before down's RESET and the end
	}
	s.down()
}

// down records that the link is gone. Without a CLOSE from the peer
// (which died, or whose host or device did) the local application sees a
// reset: data already received stays readable first.
func (s *stream) down() {
	if s.linkDown {
		return
	}
	s.linkDown = true
	s.tx.stopCallers()
	s.tx.rxDown()
	s.tearLap("link-down")
	if !s.peerClosed && !s.localEOF {
		s.seg.OrSideFlags(s.peer, sdp.SideReset)
	}
	s.endLocal()
	if s.state.sending() {
		s.state = stateClosing
	}
	_ = s.link.Disconnect()
}

// settled reports whether nothing the local application wrote can be lost
// any more: the peer acknowledged CLOSE, or the link is down.
func (s *stream) settled() bool { return s.closeAck || s.linkDown || s.state.dead() }

// finished reports whether the stream can be released: the link is down
// (its remaining completions are flushes) and the local application has
// been told.
func (s *stream) finished() bool { return s.linkDown && s.wake < 0 && s.wakeTx < 0 }

// release frees the link and the engine's mapping; the stream is dead.
func (s *stream) release() { s.releaseWith(nil) }

// segmentHolder is a Link that may keep its stream's registered segment
// for reuse when it closes (verbsLink.closeHolding).
type segmentHolder interface {
	closeHolding(seg *sdp.Segment, side int) (held bool, err error)
}

// detacher is a Link whose Close may run on another goroutine once detach
// (on the engine goroutine) has made the engine forget it.
type detacher interface{ detach() }

// releaseWith is release; with later non-nil and a link that can be
// detached, the link's resources and the mapping are freed by handing
// later the work (the stream is dead before it returns, and nothing of it
// is used on the engine goroutine again).
func (s *stream) releaseWith(later func(func())) {
	if s.released {
		return
	}
	s.released = true
	s.closeWake()
	s.state = stateDead
	// No application's thread posts or polls from now on: the QP may go.
	caller, engine, left := s.tx.counts()
	rxCaller, rxEngine, credits := s.tx.rxCounts()
	chanSleeps := s.tx.chanSleeps()
	s.tx.retire()
	free := func() {
		var err error
		held := false
		if l, ok := s.link.(*verbsLink); ok {
			l.tear = s.teardown // its steps: qp, id, mr, cq
		}
		if h, ok := s.link.(segmentHolder); ok {
			held, err = h.closeHolding(s.seg, s.side)
		} else {
			err = s.link.Close()
		}
		if err != nil {
			s.logf("rdma: connection %d: release link: %v", s.id, err)
		}
		s.tearLap("link-release")
		if !held {
			s.seg.Close()
		}
		s.tearLap("unmap")
		s.logf("rdma: connection %d released after %v; sends posted by the application's threads %d, by the engine %d (%d left to it); completions taken by the application's threads %d, by the engine %d; credits posted by the application's threads %d; sleeps on the connection's channel %d",
			s.id, s.teardown, caller, engine, left, rxCaller, rxEngine, credits, chanSleeps)
	}
	d, ok := s.link.(detacher)
	if later == nil || !ok {
		free()
		return
	}
	d.detach()
	later(free)
}

// wants decides the engine's want flags in the segment before it sleeps:
// rx_want to hear of new bytes or FIN from the local writer, tx_want to
// hear of consumption when a credit would then be due. It returns true
// when there is work to do right away (the state changed while arming),
// in which case the caller must not sleep.
func (s *stream) wants() bool {
	if s.state.dead() || s.linkDown {
		return false
	}
	wantRx := s.state.sending() && !s.closeSent && !s.peerClosed && !s.tx.finSent()
	wantTx := !s.peerClosed && !s.closeSent && s.tx.rxHead()-s.tx.credited() > s.size/2
	s.seg.SetWant(s.peer, sdp.WantRx, b2u(wantRx))
	s.seg.SetWant(s.peer, sdp.WantTx, b2u(wantTx))
	// The stores above are sequentially consistent: the loads below see
	// whatever the application published before it looked at the flags.
	if wantRx {
		head, sent := s.seg.Head(s.side), s.tx.sent()
		if head != sent && sent-s.tx.peerTail() < s.size && s.sqFree() >= 2 && !s.tx.callerPosting() {
			return true
		}
		if s.seg.SideFlags(s.side)&sdp.SideFIN != 0 {
			return true
		}
	}
	if wantTx && s.seg.Tail(s.peer) != s.tx.credited() && s.sqFree() >= 1 {
		return true
	}
	return false
}

// waitsForSends reports whether the engine waits for a completion of its
// own sends: an outstanding probe or CLOSE, or send-queue slots for what
// it has left to post (bytes, FIN, a credit, CLOSE: data needs two). The
// CQ is then armed for every completion; otherwise for the peer's
// solicited immediates only, so that our sends' completions (one in 16
// signaled), which come while the application's poller is between waits,
// wake nobody (docs/ARCHITECTURE.md, "Engine wake-ups").
func (s *stream) waitsForSends() bool {
	if s.state.dead() || s.linkDown {
		return false
	}
	return s.probing || s.closePending || s.closeSent && !s.closeAck || s.sqFree() < 2
}

// armFor tells the rule how to arm the CQ before the engine sleeps
// (waitsForSends); a cgo call only when that changes. A channel lent to
// the application's waiters (OSF_RDMA_RX=lend) is taken back while bytes
// wait for the peer's credit: the credit's completion must wake the
// engine even when nobody here waits.
func (s *stream) armFor() {
	if all := s.waitsForSends(); all != s.armAll {
		s.armAll = all
		s.tx.setArmAll(all)
		if l, ok := s.link.(interface{ setArmAll(bool) }); ok {
			l.setArmAll(all) // a stream on a link (qpEnd)
		}
	}
	if !s.state.dead() && !s.linkDown && s.tx.chanLent() && s.tx.sent() != s.seg.Head(s.side) {
		s.tx.chanReclaim()
	}
}

// quiet clears the engine's want flags while it polls actively, so that
// the application does not pay a system call per operation for wake-ups
// nobody waits for.
func (s *stream) quiet() {
	if s.state.dead() {
		return
	}
	s.seg.SetWant(s.peer, sdp.WantRx, 0)
	s.seg.SetWant(s.peer, sdp.WantTx, 0)
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
