package sidetest_test

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/osfproject/osf/sdp/sidetest"
	"golang.org/x/sys/unix"
)

// Writers that wake on the region's eventfd (osf_side_use_efd, D2 step 2).

func regionPairs(t *testing.T, ring uint32, n int) ([]*sidetest.Pair, int) {
	t.Helper()
	ps, efd, err := sidetest.NewRegionPairs(ring, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range ps {
			p.Close()
		}
		unix.Close(efd)
	})
	return ps, efd
}

// readable reports whether fd polls readable now.
func readable(t *testing.T, fd int) bool {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// waitRoom is WaitRoom in a thread of its own, retried after a signal
// (the Go runtime's own preempt the sleep: sidetest's driver restarts
// nothing), its result on the channel.
func waitRoom(e *sidetest.End) chan int {
	done := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r := e.WaitRoom(0)
		for r == -int(unix.EINTR) {
			r = e.WaitRoom(0)
		}
		done <- r
	}()
	return done
}

// asleep waits until e counts a writer.
func asleep(t *testing.T, e *sidetest.End) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, tx := e.Waiters(); tx == 0; _, tx = e.Waiters() {
		if time.Now().After(deadline) {
			t.Fatal("the writer never counted itself")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // and into its epoll_wait, most likely
}

// blockedWriter returns a region's pair whose client writer sleeps on a
// full ring, and the channel of its wait's result.
func blockedWriter(t *testing.T) (*sidetest.Pair, chan int) {
	t.Helper()
	ps, _ := regionPairs(t, 4096, 1)
	ps[0].Client.Write(make([]byte, 4096))
	done := waitRoom(ps[0].Client)
	asleep(t, ps[0].Client)
	return ps[0], done
}

func result(t *testing.T, done chan int, what string) int {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("writer not woken by %s", what)
	}
	return 0
}

// TestEfdWriterWokenAtLowWaterMark: a reader that frees half the ring
// adds to the eventfd once the writer asked, and sends no token to the
// readers' socket; below half free nothing.
func TestEfdWriterWokenAtLowWaterMark(t *testing.T) {
	ps, efd := regionPairs(t, 4096, 1)
	p := ps[0]
	p.Client.Write(make([]byte, 4096))
	if r := p.Client.Arm(sidetest.ArmTx, 0); r&unix.POLLOUT != 0 {
		t.Fatalf("a full ring reports POLLOUT: %#x", r)
	}
	p.Server.Read(make([]byte, 1000))
	if readable(t, efd) {
		t.Fatalf("writer woken with %d free bytes", p.Client.TxFree())
	}
	p.Server.Read(make([]byte, 1100))
	if !readable(t, efd) {
		t.Fatalf("writer not woken at %d free bytes", p.Client.TxFree())
	}
	if n := tokens(t, p.Client.FD); n != 0 {
		t.Fatal("a writer's wake-up went to the readers' socket")
	}
	if _, tx := p.Client.Want(); tx != 0 {
		t.Fatal("tx_want still up after the wake-up")
	}
	p.Client.Disarm(sidetest.ArmTx, sidetest.ArmTx)
	if _, tx := p.Client.Waiters(); tx != 0 {
		t.Fatalf("%d writers counted after the disarm", tx)
	}
}

// TestEfdWriterSleepsUntilRoom: a blocked writer sleeps (the eventfd
// already readable from an earlier wake-up: its counter is never read)
// until a reader of its own slot makes room; wake-ups for another slot
// of the region do not end its wait.
func TestEfdWriterSleepsUntilRoom(t *testing.T) {
	ps, _ := regionPairs(t, 4096, 2)
	a, b := ps[0], ps[1]
	b.Client.Write(make([]byte, 4096))
	b.Client.Arm(sidetest.ArmTx, 0)
	b.Server.Read(make([]byte, 4096)) // the eventfd is readable from now on
	b.Client.Disarm(sidetest.ArmTx, sidetest.ArmTx)

	a.Client.Write(make([]byte, 4096))
	done := waitRoom(a.Client)
	asleep(t, a.Client)
	for i := 0; i < 3; i++ { // another slot's writer woken: a spurious wake-up here
		b.Client.Write(make([]byte, 4096))
		b.Client.Arm(sidetest.ArmTx, 0)
		b.Server.Read(make([]byte, 4096))
		b.Client.Disarm(sidetest.ArmTx, sidetest.ArmTx)
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("writer returned %d with a full ring", r)
	default:
	}
	a.Server.Read(make([]byte, 3000))
	if r := result(t, done, "room"); r != 0 || a.Client.TxFree() < 2048 {
		t.Fatalf("wait returned %d with %d free", r, a.Client.TxFree())
	}
	if _, tx := a.Client.Waiters(); tx != 0 {
		t.Fatalf("%d writers still counted", tx)
	}
}

// TestEfdWakesThroughAFullCounter: a peer that wrote the eventfd's
// counter to its maximum (where a write fails with EAGAIN) does not stop
// wake-ups: the waker reads the counter back and writes again.
func TestEfdWakesThroughAFullCounter(t *testing.T) {
	ps, efd := regionPairs(t, 4096, 1)
	p := ps[0]
	max := []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if _, err := unix.Write(efd, max); err != nil {
		t.Fatal(err)
	}
	p.Client.Write(make([]byte, 4096))
	done := waitRoom(p.Client)
	asleep(t, p.Client)
	p.Server.Read(make([]byte, 4096))
	if r := result(t, done, "room behind a full counter"); r != 0 {
		t.Fatalf("wait returned %d", r)
	}
}

// TestEfdWriterWakesAtPeerClose: the other side's last close (its wake
// socket's end) wakes a writer asleep on a full ring: the end, which the
// write then reports (EPIPE), never a hang.
func TestEfdWriterWakesAtPeerClose(t *testing.T) {
	p, done := blockedWriter(t)
	p.Server.CloseFD()
	if r := result(t, done, "the peer's close"); r != 0 || p.Client.State()&sidetest.StateGone == 0 {
		t.Fatalf("wait returned %d, state %#x", r, p.Client.State())
	}
}

// TestEfdWriterSendTimeout: SO_SNDTIMEO of the application's socket ends
// the sleep with EAGAIN, as TCP's send.
func TestEfdWriterSendTimeout(t *testing.T) {
	ps, _ := regionPairs(t, 4096, 1)
	p := ps[0]
	p.Client.Write(make([]byte, 4096))
	tv := unix.Timeval{Usec: 50000}
	if err := unix.SetsockoptTimeval(p.Client.FD, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if r := result(t, waitRoom(p.Client), "SO_SNDTIMEO"); r != -int(unix.EAGAIN) {
		t.Fatalf("wait returned %d, want -EAGAIN", r)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("timed out after %v, before SO_SNDTIMEO", el)
	}
}

// TestEfdShutdownWakesWriter: this side's shutdown(SHUT_WR) wakes its
// writer asleep on a full ring (it then fails with EPIPE).
func TestEfdShutdownWakesWriter(t *testing.T) {
	p, done := blockedWriter(t)
	p.Client.SetFlags(sidetest.FlagFin)
	p.Client.ShutWake(unix.SHUT_WR)
	if r := result(t, done, "shutdown"); r != 0 {
		t.Fatalf("wait returned %d", r)
	}
}

// TestEfdNoWakeUpLost: both ends of 6 slots of a region stream 2 MiB to
// each other through 4 KiB rings, every writer sleeping on the one
// eventfd whenever its ring is full and every reader on its socket's
// tokens; every byte arrives in order (a lost wake-up would leave a
// writer asleep for ever: the test's deadline).
func TestEfdNoWakeUpLost(t *testing.T) {
	const total = 2 << 20
	ps, _ := regionPairs(t, 4096, 6)
	var wg sync.WaitGroup
	errs := make(chan string, 4*len(ps))
	stream := func(w, r *sidetest.End, seed byte) {
		msg := make([]byte, total)
		for i := range msg {
			msg[i] = seed + byte(i%251)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for off := 0; off < total; {
				if n := w.Write(msg[off:min(off+3000, total)]); n > 0 {
					off += n
					continue
				}
				if rc := w.WaitRoom(0); rc != 0 && rc != -int(unix.EINTR) {
					errs <- "wait room failed"
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			got := make([]byte, 0, total)
			buf := make([]byte, 5000)
			for len(got) < total {
				if n := r.Read(buf); n > 0 {
					got = append(got, buf[:n]...)
					continue
				}
				if rc := r.WaitData(0); rc != 0 && rc != -int(unix.EINTR) {
					errs <- "wait data failed"
					return
				}
			}
			if !bytes.Equal(got, msg) {
				errs <- "bytes differ"
			}
		}()
	}
	for i, p := range ps {
		stream(p.Client, p.Server, byte(2*i))
		stream(p.Server, p.Client, byte(2*i+1))
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("a writer or reader still asleep after 60 s: a wake-up was lost")
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
