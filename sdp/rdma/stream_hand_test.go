// Tests that drive one stream by hand (recLink), without a peer: wake
// tokens, the credit window, protocol violations, the state machine and
// the exit flush. The end-to-end tests through fake applications are in
// stream_test.go.

package rdma

import (
	"errors"
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// recLink records posts and completes nothing by itself: the credit and
// protocol tests drive a stream by hand.
type recLink struct {
	writes []fakeWR
	recvs  int
	down   bool
}

func (l *recLink) PostWrite(w verbs.WRID, ring int, off, n uint32, imm uint32, withImm, sig bool) error {
	l.writes = append(l.writes, fakeWR{wrid: w, ring: ring, off: off, n: n, imm: imm, withImm: withImm, signaled: sig})
	return nil
}
func (l *recLink) PostImm(w verbs.WRID, imm uint32, sig bool) error {
	l.writes = append(l.writes, fakeWR{wrid: w, imm: imm, withImm: true, signaled: sig})
	return nil
}
func (l *recLink) PostProbe(w verbs.WRID) error {
	l.writes = append(l.writes, fakeWR{wrid: w, signaled: true})
	return nil
}
func (l *recLink) PostRecv(verbs.WRID) error    { l.recvs++; return nil }
func (l *recLink) Poll([]verbs.WC) (int, error) { return 0, nil }
func (l *recLink) Notify() error                { return nil }
func (l *recLink) Disconnect() error            { l.down = true; return nil }
func (l *recLink) Close() error                 { return nil }

// handStream is a stream on side 0 of a fresh 4 KiB segment with a
// recording link, and the application's view of the same segment.
func handStream(t *testing.T) (*stream, *recLink, *sdp.Segment) {
	t.Helper()
	s, l, seg, _ := handStreamWake(t)
	return s, l, seg
}

// handStreamWake is handStream that also returns the wake sockets (the
// application's ends are app and appTx).
func handStreamWake(t *testing.T) (*stream, *recLink, *sdp.Segment, wakeSockets) {
	t.Helper()
	seg, m, ws := handSegment(t)
	l := &recLink{}
	s, err := newStream(42, m, 0, l, ws.engine, ws.engineTx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if l.recvs != rqDepth {
		t.Fatalf("%d receives posted, want %d", l.recvs, rqDepth)
	}
	return s, l, seg, ws
}

// handSegment is a fresh 4 KiB segment (the application's mapping, closed
// at the end of the test), the engine's mirror of it and a pair of wake
// sockets (the application's ends are closed at the end of the test).
func handSegment(t *testing.T) (seg, mirror *sdp.Segment, ws wakeSockets) {
	t.Helper()
	seg, err := sdp.CreateSegment(4096)
	if err != nil {
		t.Fatal(err)
	}
	if mirror, err = seg.Mirror(); err != nil {
		t.Fatal(err)
	}
	if ws, err = newWakeSockets(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeOpen(ws.app, ws.appTx); seg.Close() })
	return seg, mirror, ws
}

// pending returns how many bytes wait on the socket fd.
func pending(t *testing.T, fd int) int {
	t.Helper()
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWakeTokens: the engine wakes the application's readers on its fd
// and its writers on the writers' socket, one token per waiter of that
// kind (at least one), only when that kind's want flag was up, and clears
// the flag; the end of the connection closes both sockets.
func TestWakeTokens(t *testing.T) {
	s, _, seg, ws := handStreamWake(t)
	// Readers: three waiting, rx_want up; DATA arrives.
	seg.AddWaiters(0, sdp.WantRx, 3)
	seg.SetWant(0, sdp.WantRx, 1)
	wc := recvWC(s, MakeImm(ImmData, 100))
	s.handle(&wc)
	if got, gotTx := pending(t, ws.app), pending(t, ws.appTx); got != 3 || gotTx != 0 {
		t.Fatalf("after DATA: %d readers' tokens, %d writers' tokens; want 3, 0", got, gotTx)
	}
	if seg.LoadWant(0, sdp.WantRx) != 0 {
		t.Error("rx_want still up after the wake-up")
	}
	wc = recvWC(s, MakeImm(ImmData, 200))
	s.handle(&wc)
	if got := pending(t, ws.app); got != 3 {
		t.Fatalf("DATA without rx_want sent tokens: %d pending", got)
	}

	// Writers: the application filled its ring; two writers wait. A
	// credit for a quarter of the ring is below the low-water mark: no
	// wake-up; one for the rest is.
	publish(seg, 4096)
	s.pump()
	seg.AddWaiters(0, sdp.WantTx, 2)
	seg.SetWant(0, sdp.WantTx, 1)
	wc = recvWC(s, MakeImm(ImmCredit, 1024))
	s.handle(&wc)
	if got := pending(t, ws.appTx); got != 0 {
		t.Fatalf("a quarter ring of room woke the writers (%d tokens)", got)
	}
	wc = recvWC(s, MakeImm(ImmCredit, 4096))
	s.handle(&wc)
	if got, gotRx := pending(t, ws.appTx), pending(t, ws.app); got != 2 || gotRx != 3 {
		t.Fatalf("after CREDIT: %d writers' tokens, %d readers' tokens; want 2, 3", got, gotRx)
	}

	// A waiter osf does not count (the application's own poll) still
	// gets one token.
	seg.AddWaiters(0, sdp.WantRx, -3)
	seg.SetWant(0, sdp.WantRx, 1)
	wc = recvWC(s, MakeImm(ImmData, 300))
	s.handle(&wc)
	if got := pending(t, ws.app); got != 4 {
		t.Fatalf("no counted reader: %d tokens pending, want 3+1", got)
	}

	// CLOSE from the peer ends both sockets.
	wc = recvWC(s, MakeImm(ImmClose, CloseGraceful))
	s.handle(&wc)
	for _, fd := range []int{ws.app, ws.appTx} {
		var b [64]byte
		for {
			n, err := unix.Read(fd, b[:])
			if err != nil {
				t.Fatalf("read fd %d: %v", fd, err)
			}
			if n == 0 {
				break
			}
		}
	}
}

// publish makes the application side of seg (side 0) write n bytes.
func publish(seg *sdp.Segment, n uint64) { seg.SetHead(0, seg.Head(0)+n) }

// recvWC is the completion of the peer's immediate imm.
func recvWC(s *stream, imm uint32) verbs.WC {
	return verbs.WC{WRID: uint64(verbs.MakeWRID(wrRecv, s.id, 0)), Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, HasImm: true, ImmData: imm}
}

// TestCreditWindow: never more than a ring in flight; a wrapped transfer
// is a plain WRITE followed by the WRITE WITH IMMEDIATE; credits open the
// window again. Offsets are the ring's region offsets of the positions
// (sdp.Segment.RingPos: ring 0's position 0 is near its region's end).
func TestCreditWindow(t *testing.T) {
	s, l, seg := handStream(t)
	// transfer checks that positions [from, to) went as one WRITE WITH
	// IMMEDIATE, or, wrapped at the region's end, a plain WRITE then the
	// rest from offset 0 with the immediate.
	transfer := func(what string, from, to uint64) {
		t.Helper()
		off, n := seg.RingPos(0, from), uint32(to-from)
		imm := MakeImm(ImmData, to)
		ok := false
		switch first := uint32(s.size) - off; {
		case first >= n:
			ok = len(l.writes) == 1 && l.writes[0].off == off && l.writes[0].n == n && l.writes[0].withImm &&
				l.writes[0].imm == imm && verbs.WRID(l.writes[0].wrid).Kind() == wrData
		default:
			ok = len(l.writes) == 2 && !l.writes[0].withImm && l.writes[0].off == off && l.writes[0].n == first &&
				l.writes[1].withImm && l.writes[1].off == 0 && l.writes[1].n == n-first && l.writes[1].imm == imm
		}
		if !ok {
			t.Fatalf("%s [%d, %d): %+v", what, from, to, l.writes)
		}
		l.writes = nil
	}
	publish(seg, 3000)
	s.pump()
	transfer("first transfer", 0, 3000)
	// The application fills its ring (it sees room up to the credit).
	publish(seg, 1096)
	s.pump()
	if s.tx.sent() != 4096 {
		t.Fatalf("sent %d, want 4096", s.tx.sent())
	}
	transfer("filling", 3000, 4096)
	// No credit yet: nothing more may go even if the ring claims more.
	publish(seg, 0)
	s.pump()
	if n := len(l.writes); n != 0 {
		t.Fatalf("%d writes before any credit, want 0", n)
	}
	// The peer consumed 3500 bytes.
	wc := recvWC(s, MakeImm(ImmCredit, 3500))
	s.handle(&wc)
	if seg.Tail(0) != 3500 {
		t.Fatalf("credit not applied to the local tail: %d", seg.Tail(0))
	}
	publish(seg, 3500)
	s.pump()
	transfer("after credit", 4096, 7596)
	// Everything consumed, 1000 more.
	wc = recvWC(s, MakeImm(ImmCredit, 7596))
	s.handle(&wc)
	publish(seg, 1000)
	s.pump()
	transfer("then", 7596, 8596)
	// Across the region's end, whatever the layout: write up to it, then
	// a little more.
	wc = recvWC(s, MakeImm(ImmCredit, 8596))
	s.handle(&wc)
	end := 8596 + uint64(uint32(s.size)-seg.RingPos(0, 8596))
	publish(seg, end-8596+100)
	s.pump()
	transfer("wrapped transfer", 8596, end+100)
	if s.tx.sent()-s.tx.peerTail() > s.size {
		t.Fatalf("%d bytes in flight in a %d ring", s.tx.sent()-s.tx.peerTail(), s.size)
	}
}

// TestCreditReturn: consumption is reported once it reaches a quarter
// ring, or at once when the peer's view of the ring is over half full.
func TestCreditReturn(t *testing.T) {
	s, l, seg := handStream(t)
	deliver := func(head uint64) {
		wc := recvWC(s, MakeImm(ImmData, head))
		s.handle(&wc)
	}
	consume := func(tail uint64) { seg.SetTail(1, tail) }
	credits := func() []uint64 {
		var out []uint64
		for _, w := range l.writes {
			if k, v := ParseImm(w.imm); w.withImm && w.n == 0 && k == ImmCredit {
				out = append(out, uint64(v))
			}
		}
		return out
	}
	deliver(1000)
	if seg.Head(1) != 1000 {
		t.Fatalf("head %d", seg.Head(1))
	}
	consume(500)
	s.pump()
	if c := credits(); len(c) != 0 {
		t.Fatalf("credit after 500 bytes of a 4096 ring: %v", c)
	}
	consume(1000)
	s.pump()
	if c := credits(); len(c) != 0 {
		t.Fatalf("credit below a quarter: %v", c)
	}
	consume(1000) // no change
	deliver(3000)
	consume(1100)
	s.pump()
	if c := credits(); len(c) != 1 || c[0] != 1100 {
		t.Fatalf("peer view over half full: credits %v, want [1100]", c)
	}
	consume(2200)
	s.pump()
	if c := credits(); len(c) != 2 || c[1] != 2200 {
		t.Fatalf("quarter ring consumed: credits %v", c)
	}
	// wants: tx_want is up only while a credit would be due on waking.
	if s.wants() {
		t.Fatal("wants reports work with nothing to do")
	}
	if seg.LoadWant(1, sdp.WantTx) != 0 {
		t.Error("tx_want up with the peer's view under half full")
	}
	if seg.LoadWant(1, sdp.WantRx) != 1 {
		t.Error("rx_want not up while open")
	}
	deliver(4300) // 4300 - 2200 = 2100 outstanding > half
	if s.wants(); seg.LoadWant(1, sdp.WantTx) != 1 {
		t.Error("tx_want not up with the peer's view over half full")
	}
	consume(2300)
	if !s.wants() {
		t.Error("wants does not see the consumption after arming")
	}
}

// TestProtocolViolations: a peer that breaks the rules resets the
// connection and the local side sees RESET.
func TestProtocolViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(s *stream, seg *sdp.Segment)
		imm   uint32
	}{
		{"data beyond credit", nil, MakeImm(ImmData, 4097)},
		{"empty data", nil, MakeImm(ImmData, 0)},
		{"credit beyond sent", nil, MakeImm(ImmCredit, 1)},
		{"unknown kind", nil, 0xf0000000},
		{"bad flags", nil, MakeImm(ImmFlags, 2)},
		{"bad close", nil, MakeImm(ImmClose, 7)},
		{"data after fin", func(s *stream, _ *sdp.Segment) {
			wc := recvWC(s, MakeImm(ImmFlags, FlagFIN))
			s.handle(&wc)
		}, MakeImm(ImmData, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, l, seg := handStream(t)
			if tc.setup != nil {
				tc.setup(s, seg)
			}
			wc := recvWC(s, tc.imm)
			s.handle(&wc)
			if !errors.Is(s.err, ErrProtocol) {
				t.Fatalf("err %v, want ErrProtocol", s.err)
			}
			if seg.SideFlags(1)&sdp.SideReset == 0 {
				t.Error("local application not told (no RESET)")
			}
			if s.state.sending() {
				t.Errorf("state %v after a violation", s.state)
			}
			last := l.writes[len(l.writes)-1]
			if k, v := ParseImm(last.imm); k != ImmClose || v != CloseAbort || !last.signaled {
				t.Errorf("last post %+v, want a signaled CLOSE(abort)", last)
			}
			if s.wake >= 0 || s.wakeTx >= 0 {
				t.Error("wake sockets still open")
			}
		})
	}
}

// TestStreamStates walks the state machine: open, FIN both ways, local
// close (draining, then CLOSE), completion, link down, release.
func TestStreamStates(t *testing.T) {
	s, l, seg := handStream(t)
	if s.state != stateOpen {
		t.Fatalf("new stream %v", s.state)
	}
	publish(seg, 10)
	seg.OrSideFlags(0, sdp.SideFIN)
	s.pump()
	if !s.tx.finSent() || len(l.writes) != 2 {
		t.Fatalf("FIN not sent after the data: %+v", l.writes)
	}
	if k, _ := ParseImm(l.writes[1].imm); k != ImmFlags {
		t.Fatalf("second post %+v, want FLAGS", l.writes[1])
	}
	wc := recvWC(s, MakeImm(ImmFlags, FlagFIN))
	s.handle(&wc)
	if seg.SideFlags(1)&sdp.SideFIN == 0 {
		t.Fatal("peer FIN not mirrored")
	}
	s.onLocalEOF()
	// The peer has not consumed the 10 bytes yet: draining, no CLOSE.
	if s.state != stateDraining && s.state != stateClosing {
		t.Fatalf("after local EOF: %v", s.state)
	}
	if !s.closeSent {
		s.pump()
	}
	if !s.closeSent || s.state != stateClosing {
		t.Fatalf("state %v closeSent %v", s.state, s.closeSent)
	}
	last := l.writes[len(l.writes)-1]
	if k, v := ParseImm(last.imm); k != ImmClose || v != CloseGraceful || !last.signaled {
		t.Fatalf("last post %+v, want a signaled CLOSE(graceful)", last)
	}
	wc = verbs.WC{WRID: uint64(last.wrid), Status: verbs.WCSuccess}
	s.handle(&wc)
	if !s.closeAck || !l.down {
		t.Fatal("CLOSE completion did not take the link down")
	}
	wc = verbs.WC{WRID: uint64(verbs.MakeWRID(wrRecv, s.id, 0)), Status: verbs.WCWRFlushErr}
	s.handle(&wc)
	if !s.finished() {
		t.Fatal("not finished after the flush")
	}
	if seg.SideFlags(1)&sdp.SideReset != 0 {
		t.Error("graceful end marked RESET")
	}
	s.release()
	if !s.state.dead() || s.err != nil {
		t.Fatalf("state %v err %v", s.state, s.err)
	}
}

// TestExitFlush: when the program calls exit(3) right after writing, the
// exit handler holds the exit until the engine has delivered what was
// written and closed the stream gracefully; the peer reads everything,
// then end of file, not a reset.
func TestExitFlush(t *testing.T) {
	defer resetExit()
	p := newPair(t, pairOpts{ring: 4096, maxDelay: 200 * time.Microsecond, seed: 12})
	_ = p.eng[0].Do(func() { p.eng[0].armExit() })
	msg := make([]byte, 4000)
	for i := range msg {
		msg[i] = pattern(3, uint64(i))
	}
	if _, err := p.app[0].write(msg, time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for exitPending() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := exitPending(); n != 1 {
		t.Fatalf("exit handler would wait for %d streams, want 1", n)
	}
	start := time.Now()
	runExitHandler() // what exit(3) runs; the application's fds are still open
	if d := time.Since(start); d > time.Second {
		t.Errorf("exit handler took %v", d)
	}
	if n := exitPending(); n != 0 {
		t.Fatalf("exit handler returned with %d streams open", n)
	}
	got := make([]byte, 0, len(msg))
	buf := make([]byte, 1000)
	for {
		n, err := p.app[1].read(buf, 5*time.Second)
		got = append(got, buf[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("peer read after %d bytes: %v", len(got), err)
		}
	}
	if string(got) != string(msg) {
		t.Fatalf("peer got %d bytes, want the %d written before exit", len(got), len(msg))
	}
}

// TestExitCountsEarly: the count exit(3) waits on never lags behind what
// the application can know of. It grows when a connection number is
// reserved (the server's engine then sends the companion the hello, and
// the application may accept, read a request, close and exit before the
// engine's loop comes round again) and stays up once the stream is
// registered; an abandoned number gives it back; a stopped engine leaves
// nothing to wait for.
func TestExitCountsEarly(t *testing.T) {
	defer resetExit()
	e, err := NewEngine(EngineConfig{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	_, m, ws := handSegment(t)
	var armed, reserved, added, spare, abandoned int
	var aerr error
	if derr := e.Do(func() {
		e.armExit()
		armed = exitPending()
		id := e.allocID()
		reserved = exitPending() // the hello would go now
		_, aerr = e.addStream(id, m, 1, &recLink{}, ws.engine, ws.engineTx)
		added = exitPending() // the data path may deliver bytes now
		id2 := e.allocID()
		spare = exitPending()
		e.abandon(id2)
		abandoned = exitPending()
	}); derr != nil {
		t.Fatal(derr)
	}
	if aerr != nil {
		t.Fatal(aerr)
	}
	for _, c := range []struct {
		when      string
		got, want int
	}{{"armed", armed, 0}, {"number reserved", reserved, 1}, {"stream added", added, 1}, {"second number reserved", spare, 2}, {"second number abandoned", abandoned, 1}} {
		if c.got != c.want {
			t.Errorf("%s: exit handler would wait for %d connections, want %d", c.when, c.got, c.want)
		}
	}
	e.Stop()
	if n := exitPending(); n != 0 {
		t.Errorf("after the engine stopped the exit handler would wait for %d connections", n)
	}
	start := time.Now()
	runExitHandler()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("exit handler waited %v for a stopped engine", d)
	}
}

// TestExitAfterClose: a server reads a request, closes the connection and
// exits at once (exit(3), then the process and its queue pair are gone):
// the client reads end of file, as over TCP, never ECONNRESET.
func TestExitAfterClose(t *testing.T) {
	for i := range 20 {
		func() {
			defer resetExit()
			p := newPair(t, pairOpts{ring: 4096, maxDelay: 50 * time.Microsecond, seed: uint64(100 + i), serverExit: true})
			defer p.stop() // before resetExit: no armed engine outlives the round
			if _, err := p.app[0].write([]byte("quit\n"), time.Second); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 16)
			if n, err := p.app[1].read(buf, 5*time.Second); err != nil || string(buf[:n]) != "quit\n" {
				t.Fatalf("server read %q, %v", buf[:n], err)
			}
			p.app[1].close(false)
			start := time.Now()
			runExitHandler()
			if d := time.Since(start); d > time.Second {
				t.Errorf("exit handler took %v", d)
			}
			p.net.kill() // the process is gone, and its queue pair
			if n, err := p.app[0].read(buf, 5*time.Second); n != 0 || !errors.Is(err, io.EOF) {
				p.dump()
				t.Fatalf("round %d: client read %d, %v after the server closed and exited; want end of file", i, n, err)
			}
			p.app[0].close(false)
			p.waitReleased(5 * time.Second)
		}()
	}
}
