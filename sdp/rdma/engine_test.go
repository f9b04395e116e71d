package rdma

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"
)

// TestEngineQuietsRuntime: while it has work now and then (a ping-pong
// with pauses, as between two slow hosts), the engine never sleeps longer
// than yieldBound and yields to the Go scheduler, so that sysmon never
// sees it on one scheduling tick for 10 ms (which made the runtime take
// its P at every system call and wake threads: 9-10 context switches per
// round trip); idle for hotGap it sleeps without a bound again. (A stall
// of the test for hotGap, as on a loaded host, makes the engine idle
// meanwhile: such sleeps are unbounded, and not counted.)
func TestEngineQuietsRuntime(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, spin: 20 * time.Microsecond})
	e := p.eng[0]
	var sleeps []int // hot sleeps' timeouts; -1 for each cold one
	if err := e.Do(func() {
		e.onSleep = func(ms int, hot bool) {
			if !hot {
				ms = -1
			}
			sleeps = append(sleeps, ms)
		}
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pingPong(t, p, 30, 5*time.Millisecond)
	elapsed := time.Since(start)
	var busy, hot []int
	var yields int
	_ = e.Do(func() { busy, sleeps, yields = sleeps, nil, e.yields })
	bound := int(yieldBound / time.Millisecond)
	for _, ms := range busy {
		if ms > bound || ms == 0 {
			t.Fatalf("while busy the engine slept with a timeout of %d ms (want 1-%d): %v", ms, bound, busy)
		}
		if ms > 0 {
			hot = append(hot, ms)
		}
	}
	if len(hot) == 0 || yields < 3 {
		t.Fatalf("%v of ping-pong: %d sleeps, %d yields; want some of each", elapsed, len(hot), yields)
	}
	t.Logf("%v of ping-pong: %d sleeps, %d yields", elapsed, len(hot), yields)

	deadline := time.Now().Add(testTimeout)
	for {
		var idle []int
		_ = e.Do(func() { idle, e.setUpTo = sleeps, time.Time{} }) // a test's look is no set-up
		for _, ms := range idle {
			if ms < 0 {
				return // idle: unbounded
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle engine still sleeps with bounds: %v", idle)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pingPong runs n round trips of 64 bytes between p's applications,
// pausing between them.
func pingPong(t *testing.T, p *pair, n int, pause time.Duration) {
	t.Helper()
	msg := bytes.Repeat([]byte{7}, 64)
	buf := make([]byte, 64)
	for i := range n {
		for _, leg := range [][2]int{{0, 1}, {1, 0}} {
			if _, err := p.app[leg[0]].write(msg, testTimeout); err != nil {
				t.Fatalf("round trip %d: write: %v", i, err)
			}
			for got := 0; got < len(msg); {
				k, err := p.app[leg[1]].read(buf[got:], testTimeout)
				if err != nil {
					t.Fatalf("round trip %d: read: %v", i, err)
				}
				got += k
			}
		}
		time.Sleep(pause)
	}
}

// TestEngineColdWhenWorkIsRare: an engine whose work comes further apart
// than hotGap (a ping-pong between slow hosts whose messages its
// application's threads take) does not stay hot, waking every
// yieldBound, between them: each pause ends in a sleep without a bound,
// which gives the P up (every P idle, sysmon sleeps too).
func TestEngineColdWhenWorkIsRare(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, spin: 20 * time.Microsecond})
	e := p.eng[0]
	var cold, hot int
	if err := e.Do(func() {
		e.setUpTo = time.Time{} // no set-up to follow
		e.onSleep = func(ms int, h bool) {
			switch {
			case h:
				hot++
			case ms < 0:
				cold++
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	const rounds = 12
	pingPong(t, p, rounds, 4*hotGap)
	var c, h int
	_ = e.Do(func() { c, h, e.onSleep = cold, hot, nil })
	// Each pause is 4 hotGaps long: after hotGap without work for an
	// event the engine goes cold. (Half, for a loaded host's stalls.)
	if c < rounds/2 {
		t.Fatalf("%d round trips with pauses of %v: %d unbounded sleeps (hot %d); want one a pause", rounds, 4*hotGap, c, h)
	}
	// Hot at most for hotGap after its last work: bounded sleeps of up to
	// yieldBound, and those ended by work.
	t.Logf("%d round trips: %d unbounded sleeps, %d hot", rounds, c, h)
}

// TestEngineLooksAtHeldChannel: while an application's thread holds a
// connection's channel (an epoll item armed between the program's waits
// counts as asleep on it), the idle engine's sleeps are bounded by
// heldLook, so that completions waiting for that thread do not make the
// peer wait on RNR retries for longer; without one, unbounded again.
func TestEngineLooksAtHeldChannel(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, spin: 20 * time.Microsecond})
	e := p.eng[0]
	held := (*uint32)(nil)
	sleeps := make(chan int, 64)
	if err := e.Do(func() {
		held = p.strm[0].tx.word(&p.strm[0].tx.p.rx.sleepers)
		e.onSleep = func(ms int, hot bool) {
			if !hot {
				select {
				case sleeps <- ms:
				default:
				}
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Do(func() { e.onSleep = nil }) }()
	// waitFor waits for a cold sleep that ok accepts; the engine is woken
	// (a command) so that it sleeps again with what the test changed.
	waitFor := func(what string, ok func(ms int) bool) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for time.Now().Before(deadline) {
			_ = e.Do(func() { e.setUpTo = time.Time{} }) // a test's look is no set-up
			select {
			case ms := <-sleeps:
				if ok(ms) {
					return
				}
			case <-time.After(50 * time.Millisecond):
			}
		}
		t.Fatalf("no cold sleep %s within %v", what, testTimeout)
	}
	look := int(heldLook / time.Millisecond)
	atomic.StoreUint32(held, 1)
	waitFor("bounded by heldLook while a thread holds the channel", func(ms int) bool { return ms > 0 && ms <= look })
	atomic.StoreUint32(held, 0)
	waitFor("without a bound once nobody holds it", func(ms int) bool { return ms < 0 })
}
