package rdma

import (
	"bytes"
	"testing"
	"time"
)

// TestEngineQuietsRuntime: while it has work now and then (a ping-pong
// with pauses, as between two slow hosts), the engine never sleeps longer
// than yieldBound and yields to the Go scheduler, so that sysmon never
// sees it on one scheduling tick for 10 ms (which made the runtime take
// its P at every system call and wake threads: 9-10 context switches per
// round trip); idle for hotFor it sleeps without a bound again. (A stall
// of the test for hotFor, as on an emulated host, makes the engine idle
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
	msg := bytes.Repeat([]byte{7}, 64)
	buf := make([]byte, 64)
	start := time.Now()
	for i := range 30 {
		for _, leg := range [][2]int{{0, 1}, {1, 0}} {
			if _, err := p.app[leg[0]].write(msg, testTimeout); err != nil {
				t.Fatalf("round trip %d: write: %v", i, err)
			}
			for got := 0; got < len(msg); {
				n, err := p.app[leg[1]].read(buf[got:], testTimeout)
				if err != nil {
					t.Fatalf("round trip %d: read: %v", i, err)
				}
				got += n
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
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
		_ = e.Do(func() { idle = sleeps })
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
