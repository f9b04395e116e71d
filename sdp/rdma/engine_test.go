package rdma

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestEngineSleepsParked: between the round trips of a ping-pong with
// pauses (as between two slow hosts), an engine sleeps parked in the Go
// runtime's netpoller ("IO wait" to the scheduler), not in a system call
// that keeps a P busy: a busy P keeps sysmon polling (every 10 ms at
// best, a vCPU wake-up each in an emulated guest), and before that it made
// sysmon preempt the engine and take its P (9-10 context switches per
// round trip; README, RDMA).
func TestEngineSleepsParked(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, spin: 20 * time.Microsecond})
	msg := bytes.Repeat([]byte{7}, 64)
	buf := make([]byte, 64)
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
	var parks [2]int
	for i, e := range p.eng {
		_ = e.Do(func() { parks[i] = e.parks })
	}
	if parks[0] == 0 || parks[1] == 0 {
		t.Fatalf("the engines parked %v times during 30 round trips with pauses; want some", parks)
	}
	// Both engines idle now: each sleeps parked, as seen in a dump of
	// every goroutine (a sample may catch one awake, so look again).
	deadline := time.Now().Add(testTimeout)
	stacks := make([]byte, 1<<20)
	for {
		n := runtime.Stack(stacks, true)
		var states []string
		for _, g := range strings.Split(string(stacks[:n]), "\n\n") {
			if strings.Contains(g, "rdma.(*Engine).loop(") {
				head, _, _ := strings.Cut(g, "\n")
				states = append(states, head)
			}
		}
		parked := len(states) == len(p.eng)
		for _, s := range states {
			parked = parked && strings.Contains(s, "[IO wait")
		}
		if parked {
			t.Logf("parks %v; idle engines: %q", parks, states)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle engines do not sleep parked in the netpoller: %q", states)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
