package rdma

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// TestSolicitedArm checks that our own sends' completions wake nobody
// unless the engine waits for one (docs/ARCHITECTURE.md, "Engine
// wake-ups"): every WRITE WITH IMMEDIATE is solicited and a plain WRITE
// is not (tx.c); the CQ is armed for solicited completions, once until
// its event is read, and for every completion while the engine waits for
// its sends, widening an arm for solicited ones (rx.c); a thread that
// takes a send completion the engine waits for kicks the engine (rx.h);
// and what the engine waits for (stream.waitsForSends).
func TestSolicitedArm(t *testing.T) {
	const size = 4096
	f := verbs.NewFake()
	defer f.Free()
	tx, err := newTx(7, size, sdp.SideClient)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.retire()
	tx.useVerbs(f.QP(), 0x10000, 1, 0x20000, 2)
	tx.rxUseVerbs(f.CQ(), f.QP())
	chanFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(chanFD)
	// The channel: an fd nobody reads here (no event is drained), no
	// engine epoll.
	tx.chanUse(chanFD, f.CQ().Raw(), -1, unix.EPOLLIN, 0)

	arms := []struct {
		all       bool
		n         int
		solicited bool
	}{
		{false, 1, true},  // solicited completions only
		{false, 1, true},  // armed already: no call
		{true, 2, false},  // the engine waits for its sends: widened
		{true, 2, false},  // armed already
		{false, 2, false}, // armed wider than asked: no call
	}
	for i, a := range arms {
		tx.setArmAll(a.all)
		if rc := tx.chanEngineArm(); rc != 0 {
			t.Fatalf("arm %d: %d", i, rc)
		}
		if n, sol := f.Notifies(); n != a.n || n > 0 && sol != a.solicited {
			t.Fatalf("arm %d (all %v): %d arms, solicited only %v; want %d, %v", i, a.all, n, sol, a.n, a.solicited)
		}
	}

	// Immediates are solicited, the plain WRITE of a wrapped chunk not.
	if rc := tx.enginePush(100, false); rc != 0 {
		t.Fatalf("push: %d", rc)
	}
	if op, fl := f.LastSend(); op != verbs.OpWriteImm || fl&verbs.SendSolicited == 0 {
		t.Fatalf("DATA posted as %v flags %#x: want a solicited WRITE WITH IMMEDIATE", op, fl)
	}
	bias := uint64(sdp.RingBias(size, sdp.SideClient))
	start := size - bias - 10
	tx.setSent(start)
	tx.setPeerTail(start)
	if rc := tx.enginePush(start+30, false); rc != 0 {
		t.Fatalf("wrapped push: %d", rc)
	}
	if op, fl := f.LastSend(); op != verbs.OpWrite || fl&verbs.SendSolicited != 0 {
		t.Fatalf("the wrapped chunk's first part posted as %v flags %#x: want a plain, unsolicited WRITE", op, fl)
	}

	// A thread's take of a send completion kicks the engine only while
	// the engine waits for one.
	kick, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(kick)
	tx.setKick(kick, looksWord{})
	tx.publish(0, 0x5eed)
	kicked := func() bool {
		var b [8]byte
		n, _ := unix.Read(kick, b[:])
		return n == 8
	}
	for seq, all := range []bool{false, true} {
		tx.setArmAll(all)
		if !f.AddWC(verbs.WC{WRID: uint64(verbs.MakeWRID(wrData, 7, uint32(seq)))}) {
			t.Fatal("fake CQ full")
		}
		if n := tx.callerTake(); n != 1 {
			t.Fatalf("take (all %v): %d, want 1 completion", all, n)
		}
		if k := kicked(); k != all {
			t.Fatalf("take of a send completion with the engine waiting for one %v: kicked %v", all, k)
		}
	}

	s := &stream{tx: tx}
	for _, c := range []struct {
		name string
		set  func()
		want bool
	}{
		{"idle", func() {}, false},
		{"probing", func() { s.probing = true }, true},
		{"CLOSE due", func() { s.probing, s.closePending = false, true }, true},
		{"CLOSE outstanding", func() { s.closePending, s.closeSent = false, true }, true},
		{"CLOSE acknowledged", func() { s.closeAck = true }, false},
		{"send queue full", func() {
			for s.sqFree() >= 2 {
				tx.bumpPosted()
			}
		}, true},
		{"link down", func() { s.closeSent, s.closeAck, s.probing, s.linkDown = false, false, true, true }, false},
	} {
		c.set()
		if got := s.waitsForSends(); got != c.want {
			t.Errorf("%s: waits for sends %v, want %v", c.name, got, c.want)
		}
	}
}
