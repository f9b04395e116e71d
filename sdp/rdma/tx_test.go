package rdma

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// TestTxRule checks the sending rule of tx.h, which the engine and the
// application's threads share: chunks within the peer's credit, a wrapped
// chunk as WRITE then WRITE WITH IMMEDIATE, FIN after the last byte, the
// send queue's slots, selective signalling, inline payloads, and heads a
// scribbled ring could show.
func TestTxRule(t *testing.T) {
	const size = 4096
	bias := uint64(sdp.RingBias(size, sdp.SideClient))
	newT := func(t *testing.T) *txState {
		tx, err := newTx(7, size, sdp.SideClient)
		if err != nil {
			t.Fatal(err)
		}
		tx.p.max_inline = 64
		t.Cleanup(tx.retire)
		return tx
	}
	t.Run("contiguous", func(t *testing.T) {
		tx := newT(t)
		w, n := tx.plan(100, false)
		if n != 1 || w[0].Len != 100 || uint64(w[0].Off) != bias%size || !w[0].WithImm || w[0].Imm != MakeImm(ImmData, 100) || w[0].Inl {
			t.Fatalf("plan %+v (%d)", w, n)
		}
		if w[0].ID != verbs.MakeWRID(wrData, 7, 0) {
			t.Fatalf("wrid %#x", uint64(w[0].ID))
		}
		tx.commitPlan(100, false)
		if tx.sent() != 100 || tx.posted() != 1 {
			t.Fatalf("sent %d posted %d", tx.sent(), tx.posted())
		}
		if w, n := tx.plan(140, false); n != 1 || w[0].Len != 40 || !w[0].Inl {
			t.Fatalf("small chunk %+v (%d): want 40 bytes inline", w, n)
		}
	})
	t.Run("wrap", func(t *testing.T) {
		tx := newT(t)
		start := size - bias - 10 // position whose offset is 10 bytes before the end
		tx.setSent(start)
		tx.setPeerTail(start)
		w, n := tx.plan(start+30, false)
		if n != 2 || w[0].WithImm || w[0].Len != 10 || w[0].Off != size-10 || !w[1].WithImm || w[1].Off != 0 || w[1].Len != 20 ||
			w[1].Imm != MakeImm(ImmData, start+30) {
			t.Fatalf("wrapped plan %+v (%d)", w, n)
		}
	})
	t.Run("credit", func(t *testing.T) {
		tx := newT(t)
		tx.commitPlan(size, false) // the whole ring in flight
		if _, n := tx.plan(size, false); n != 0 {
			t.Fatalf("nothing to send, got %d", n)
		}
		tx.setPeerTail(1000)
		if _, n := tx.plan(size+2000, false); n != -1 {
			t.Fatalf("a head past the peer's credit by more than a ring: %d, want -1", n)
		}
		if w, n := tx.plan(size+1000, false); n != 1 || w[0].Len != 1000 {
			t.Fatalf("after a credit %+v (%d)", w, n)
		}
	})
	t.Run("fin", func(t *testing.T) {
		tx := newT(t)
		w, n := tx.plan(50, true)
		if n != 2 || w[1].Len != 0 || w[1].Imm != MakeImm(ImmFlags, FlagFIN) {
			t.Fatalf("data then FIN: %+v (%d)", w, n)
		}
		tx.commitPlan(50, true)
		if !tx.finSent() {
			t.Fatal("FIN not recorded")
		}
		if _, n := tx.plan(50, true); n != 0 {
			t.Fatalf("FIN twice: %d", n)
		}
	})
	t.Run("send queue", func(t *testing.T) {
		tx := newT(t)
		for i := 0; i < sqDepth-1; i++ {
			tx.commitPlan(uint64(i+1), false)
		}
		if _, n := tx.plan(sqDepth+10, false); n != 0 {
			t.Fatalf("one slot left: data needs two, got %d", n)
		}
		tx.lock()
		ok := tx.complete(15) // signaled: (15+1)%16 == 0
		tx.unlock()
		if !ok || tx.completed() != 16 || tx.sqFree() != 17 {
			t.Fatalf("complete: ok %v completed %d free %d", ok, tx.completed(), tx.sqFree())
		}
		if !tx.complete(3) || tx.completed() != 16 {
			t.Fatal("an older completion must change nothing")
		}
		if tx.complete(200) {
			t.Fatal("a completion of a request never posted must be refused")
		}
		// The stand-in's poster completes a chain as it writes it: the
		// completion counts once the chain does.
		tx.setSimDone(tx.posted() + 1) // the next chain's one request, signaled
		tx.commitPlan(uint64(sqDepth+10), false)
		if tx.completed() != tx.posted() {
			t.Fatalf("posted %d completed %d: the stand-in's completion was not applied", tx.posted(), tx.completed())
		}
	})
	t.Run("signalling", func(t *testing.T) {
		for seq, want := range map[uint32]bool{0: false, 14: false, 15: true, 31: true, 32: false} {
			if signaled(seq, false) != want || !signaled(seq, true) {
				t.Errorf("seq %d: signaled %v, want %v", seq, signaled(seq, false), want)
			}
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		tx := newT(t)
		tx.commitPlan(100, false)
		for _, head := range []uint64{50, 100 + size + 1, 1 << 63} {
			if _, n := tx.plan(head, false); n != -1 {
				t.Errorf("head %d with 100 sent: %d, want -1", head, n)
			}
		}
	})
	t.Run("chunk", func(t *testing.T) {
		tx := newT(t)
		tx.p.max_chunk = 1000
		w, n := tx.plan(2500, false)
		if n != 1 || w[0].Len != 1000 || w[0].Imm != MakeImm(ImmData, 1000) {
			t.Fatalf("chunked plan %+v (%d)", w, n)
		}
	})
}

// TestTxHandOffWakesEngine checks the hand-off of a push to a lock holder
// that does not push: an application's thread counting a send completion
// (the receiving rule, rx.h) holds the sending lock while a writer
// publishes; the writer's push raises again and leaves its bytes to the
// holder, which sends nothing, so it must wake the engine (its kick
// eventfd). Before osf_rdma_tx_leave, the bytes waited unsent until the
// engine woke for something else.
func TestTxHandOffWakesEngine(t *testing.T) {
	const size = 4096
	tx, err := newTx(7, size, sdp.SideClient)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.retire)
	tx.publish(0, 1) // live, for this process
	kick, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(kick)
	tx.setKick(kick, looksWord{})
	tx.commitPlan(100, false) // request 0 posted, signaled
	if !tx.tryLock() {
		t.Fatal("lock busy")
	}
	done := make(chan struct{})
	go func() {
		// The rule, as an application's thread that took the completion
		// of request 0: it waits for the lock, counts, lets go.
		defer close(done)
		tx.rxLock()
		tx.rxOne(&verbs.WC{WRID: uint64(verbs.MakeWRID(wrData, 7, 0)), Status: verbs.WCSuccess})
		tx.rxUnlock()
	}()
	if !tx.push(200, false) {
		t.Fatal("a push that finds the lock busy leaves its bytes to the holder")
	}
	tx.unlock() // the rule takes it now
	<-done
	if tx.completed() != 1 || tx.sent() != 100 {
		t.Fatalf("completed %d sent %d: want 1 and 100", tx.completed(), tx.sent())
	}
	var b [8]byte
	if n, err := unix.Read(kick, b[:]); n != 8 || err != nil {
		t.Fatalf("the engine was not woken for the bytes left to the rule's holder (read %d, %v): they wait unsent", n, err)
	}
}
