package rdma

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

const testTimeout = 20 * time.Second

// pattern returns the byte at stream position pos of a test stream.
func pattern(seed, pos uint64) byte {
	x := (pos + seed) * 0x9e3779b97f4a7c15
	return byte(x >> 56)
}

// sendStream writes total pattern bytes in random chunks.
func sendStream(a *fakeApp, seed uint64, total int, rng *rand.Rand, timeout time.Duration) error {
	buf := make([]byte, 70000)
	pos := 0
	for pos < total {
		n := min(1+rng.IntN(len(buf)), total-pos)
		if rng.IntN(4) == 0 {
			n = min(1+rng.IntN(100), total-pos)
		}
		for i := range n {
			buf[i] = pattern(seed, uint64(pos+i))
		}
		k, err := a.write(buf[:n], timeout)
		pos += k
		if err != nil {
			return fmt.Errorf("write at %d: %w", pos, err)
		}
	}
	return nil
}

// recvStream reads until end of file and checks every byte and the count.
func recvStream(a *fakeApp, seed uint64, total int, rng *rand.Rand, timeout time.Duration) error {
	buf := make([]byte, 70000)
	pos := 0
	for {
		n := 1 + rng.IntN(len(buf))
		if rng.IntN(4) == 0 {
			n = 1 + rng.IntN(64)
		}
		k, err := a.read(buf[:n], timeout)
		for i := range k {
			if buf[i] != pattern(seed, uint64(pos+i)) {
				return fmt.Errorf("byte %d: got %#x, want %#x", pos+i, buf[i], pattern(seed, uint64(pos+i)))
			}
		}
		pos += k
		if errors.Is(err, io.EOF) {
			if pos != total {
				return fmt.Errorf("end of file after %d bytes, want %d", pos, total)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read at %d: %w", pos, err)
		}
		if pos > total {
			return fmt.Errorf("read %d bytes, more than the %d sent", pos, total)
		}
	}
}

// exchangeBoth runs fakeApp.exchange on both sides at once, total pattern
// bytes each way (side s sends pattern s) with random sizes from seed,
// and fails t for every side that did not receive exactly the other's.
func exchangeBoth(t *testing.T, apps [2]*fakeApp, total int, seed uint64, timeout time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for side := range 2 {
		out := make([]byte, total)
		for i := range out {
			out[i] = pattern(uint64(side), uint64(i))
		}
		inSeed := uint64(1 - side)
		check := func(pos int, b []byte) error {
			for i, c := range b {
				if want := pattern(inSeed, uint64(pos+i)); c != want {
					return fmt.Errorf("byte %d: got %#x, want %#x", pos+i, c, want)
				}
			}
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(side), seed))
			got, err := apps[side].exchange(out, check, timeout, rng)
			if err == nil && got != total {
				err = fmt.Errorf("received %d bytes, want %d", got, total)
			}
			if err != nil {
				errs <- fmt.Errorf("side %d: %w", side, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestMirrorRandom sends random streams both ways at once through small
// rings with random write and read sizes and random delays on the wire:
// every byte arrives once, in order, across many wraparounds; FIN ends
// each direction; both streams are released once the applications close.
func TestMirrorRandom(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ring  uint32
		spin  time.Duration
		delay time.Duration
		total int
	}{
		{"4K ring, sleeping engines", 4096, 0, 20 * time.Microsecond, 300_000},
		{"4K ring, polling engines", 4096, 50 * time.Microsecond, 0, 300_000},
		{"64K ring, sleeping engines", 64 << 10, 0, 50 * time.Microsecond, 2_000_000},
		{"4K ring, slow wire", 4096, 0, 300 * time.Microsecond, 50_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{ring: tc.ring, spin: tc.spin, maxDelay: tc.delay, seed: 1})
			exchangeBoth(t, p.app, tc.total, 3, testTimeout)
			if t.Failed() {
				p.dump()
				return
			}
			p.app[0].close(false)
			p.app[1].close(false)
			p.waitReleased(5 * time.Second)
		})
	}
}

// TestMirrorReaderAndWriter: on each side one thread reads while another
// writes (blocking calls, small rings, sleeping engines), so that readers
// and writers wait at once: each kind must be woken on its own socket.
func TestMirrorReaderAndWriter(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, maxDelay: 20 * time.Microsecond, seed: 13})
	const total = 400_000
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for side := range 2 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(side), 5))
			err := sendStream(p.app[side], uint64(side), total, rng, testTimeout)
			if err == nil {
				p.app[side].shutdownWrite()
			}
			if err != nil {
				errs <- fmt.Errorf("side %d writer: %w", side, err)
			}
		}()
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(side), 6))
			if err := recvStream(p.app[side], uint64(1-side), total, rng, testTimeout); err != nil {
				errs <- fmt.Errorf("side %d reader: %w", side, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		p.dump()
	}
}

// TestFakeAppSignal: a signal that interrupts a fake application asleep
// in a blocking read (as the Go runtime's preemption signal, SIGURG, does
// now and then on a loaded machine) does not end its wait, as it does not
// end the C data path's blocking recv (SA_RESTART): the read still returns
// the data that arrives later. Taken for a timeout, such a signal made one
// of TestMirrorReaderAndWriter's threads give up early, and its peer block
// until the test timed out, which looked like a lost wake-up.
func TestFakeAppSignal(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, seed: 17})
	type result struct {
		N   int
		Err error
	}
	tids := make(chan int, 1)
	done := make(chan result, 1)
	buf := make([]byte, 64)
	go func() {
		runtime.LockOSThread() // the thread the signals are sent to
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		n, err := p.app[0].read(buf, testTimeout)
		done <- result{n, err}
	}()
	tid := <-tids
	for range 5 {
		waitAsleep(t, tid, done)
		if err := unix.Tgkill(unix.Getpid(), tid, unix.SIGURG); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("read returned %d, %v before any data was sent", r.N, r.Err)
	default:
	}
	if _, err := p.app[1].write([]byte("after the signals"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.Err != nil || string(buf[:r.N]) != "after the signals" {
			t.Fatalf("read %q, %v; want the data sent after the signals", buf[:r.N], r.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read not woken by the data")
	}
}

// waitAsleep waits until thread tid of this process sleeps in the kernel
// (state S in /proc); it fails t if done delivers first or after 5 s.
func waitAsleep[T any](t *testing.T, tid int, done <-chan T) {
	t.Helper()
	path := fmt.Sprintf("/proc/self/task/%d/stat", tid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case r := <-done:
			t.Fatalf("waiter returned %+v before any data was sent", r)
		default:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name, which ends with ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'S' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d not asleep after 5 s: %s", tid, b)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMirrorLarge pushes 3 MiB through a 4 KiB ring one way and compares
// checksums; the sender never has more than a ring in flight.
func TestMirrorLarge(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, maxDelay: 10 * time.Microsecond, seed: 2})
	const total = 3 << 20
	data := make([]byte, total)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.app[0].write(data, 30*time.Second)
		p.app[0].shutdownWrite()
		done <- err
	}()
	h := sha256.New()
	buf := make([]byte, 8192)
	n := 0
	for {
		k, err := p.app[1].read(buf, 30*time.Second)
		h.Write(buf[:k])
		n += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read after %d bytes: %v", n, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if n != total || [32]byte(h.Sum(nil)) != want {
		t.Fatalf("received %d bytes, sha256 %x; sent %d, %x", n, h.Sum(nil), total, want)
	}
	var out uint64
	_ = p.eng[0].Do(func() { out = p.strm[0].bytesOut })
	if out != total {
		t.Errorf("engine 0 sent %d bytes, want %d", out, total)
	}
}

// TestMirrorHalfClose: FIN in one direction leaves the other working.
func TestMirrorHalfClose(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, seed: 5})
	if _, err := p.app[0].write([]byte("request"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.app[0].shutdownWrite()
	buf := make([]byte, 100)
	n, err := p.app[1].read(buf, 5*time.Second)
	if err != nil || string(buf[:n]) != "request" {
		t.Fatalf("server read %q, %v", buf[:n], err)
	}
	if n, err := p.app[1].read(buf, 5*time.Second); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("server after FIN: %d, %v; want end of file", n, err)
	}
	if _, err := p.app[1].write([]byte("response"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.app[1].close(false)
	n, err = p.app[0].read(buf, 5*time.Second)
	if err != nil || string(buf[:n]) != "response" {
		t.Fatalf("client read %q, %v", buf[:n], err)
	}
	if n, err := p.app[0].read(buf, 5*time.Second); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("client after close: %d, %v; want end of file", n, err)
	}
	p.app[0].close(false)
	p.waitReleased(5 * time.Second)
	for i := range 2 {
		var st streamState
		var err error
		_ = p.eng[i].Do(func() { st, err = p.strm[i].state, p.strm[i].err })
		if !st.dead() || err != nil {
			t.Errorf("stream %d: state %v, err %v; want dead without error", i, st, err)
		}
	}
}

// TestMirrorCloseDelivers: what an application wrote before close() is
// delivered, then end of file (no reset), even through a full ring.
func TestMirrorCloseDelivers(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, maxDelay: 20 * time.Microsecond, seed: 6})
	const total = 20000
	go func() {
		rng := rand.New(rand.NewPCG(1, 1))
		if err := sendStream(p.app[0], 9, total, rng, 10*time.Second); err == nil {
			p.app[0].close(false) // without FIN: close alone
		}
	}()
	time.Sleep(20 * time.Millisecond) // let the ring fill
	if err := recvStream(p.app[1], 9, total, rand.New(rand.NewPCG(2, 2)), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.app[1].close(false)
	p.waitReleased(5 * time.Second)
}

// TestMirrorAbort: SO_LINGER 0 (RESET at close) gives the peer ECONNRESET.
func TestMirrorAbort(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, seed: 7})
	if _, err := p.app[0].write([]byte("x"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if n, err := p.app[1].read(buf, 5*time.Second); n != 1 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	p.app[0].close(true)
	if _, err := p.app[1].read(buf, 5*time.Second); !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("read after abortive close: %v, want ECONNRESET", err)
	}
	p.app[1].close(false)
	p.waitReleased(5 * time.Second)
}

// TestMirrorCloseUnread: closing with received bytes nobody read resets
// the connection, as TCP does.
func TestMirrorCloseUnread(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, seed: 8})
	if _, err := p.app[0].write([]byte("never read"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.app[1].seg.Head(0) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	p.app[1].close(false)
	buf := make([]byte, 10)
	if _, err := p.app[0].read(buf, 5*time.Second); !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("read: %v, want ECONNRESET", err)
	}
	p.app[0].close(false)
	p.waitReleased(5 * time.Second)
}

// TestMirrorPeerDeath: the link dies without a word (peer process, host
// or device gone) in the middle of a transfer: the application reads what
// arrived, then gets ECONNRESET, never hangs; the streams are released.
func TestMirrorPeerDeath(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, seed: 9})
	if _, err := p.app[1].write([]byte("last words"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.app[0].seg.Head(1) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	writeErr := make(chan error, 1)
	go func() {
		// A writer blocked on a full ring must wake up too.
		_, err := p.app[0].write(make([]byte, 100000), 10*time.Second)
		writeErr <- err
	}()
	time.Sleep(20 * time.Millisecond)
	p.net.kill()
	if err := <-writeErr; !errors.Is(err, unix.ECONNRESET) && !errors.Is(err, unix.EPIPE) {
		t.Fatalf("blocked writer: %v, want ECONNRESET or EPIPE", err)
	}
	buf := make([]byte, 100)
	n, err := p.app[0].read(buf, 5*time.Second)
	if err != nil || string(buf[:n]) != "last words" {
		t.Fatalf("read %q, %v: data received before the death must stay readable", buf[:n], err)
	}
	if _, err := p.app[0].read(buf, 5*time.Second); !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("read after death: %v, want ECONNRESET", err)
	}
	p.waitReleased(2 * closeDeadline)
}

// TestMirrorWireCut: the wire is cut silently (a link down on the peer's
// host, a pulled cable) while the application's writer waits for the
// peer's credit, so that nothing is in flight to notice: the engine probes
// the stalled stream and the writer gets ECONNRESET or EPIPE within
// probeAfter and the QP's retries, never a hang; and within probeDeadline
// when the QP never gives up by itself (lost).
func TestMirrorWireCut(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("lost=%v", lost), func(t *testing.T) {
			if lost {
				old := probeDeadline
				probeDeadline = 500 * time.Millisecond
				defer func() { probeDeadline = old }()
			}
			p := newPair(t, pairOpts{ring: 4096, seed: 12})
			writeErr := make(chan error, 1)
			go func() {
				_, err := p.app[0].write(make([]byte, 100000), 20*time.Second) // the peer never reads
				writeErr <- err
			}()
			deadline := time.Now().Add(5 * time.Second)
			for p.app[1].seg.Head(0) < 4096 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // the writer now waits for credit
			start := time.Now()
			p.net.cutWire(lost)
			err := <-writeErr
			if !errors.Is(err, unix.ECONNRESET) && !errors.Is(err, unix.EPIPE) {
				t.Fatalf("blocked writer after the cut: %v, want ECONNRESET or EPIPE", err)
			}
			if d := time.Since(start); d > 3*probeAfter+10*fakeRetryTime {
				t.Errorf("the writer learned of the cut after %v", d)
			}
			t.Logf("writer: %v after %v", err, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestMirrorPostFailure: a link whose posts fail resets the connection.
func TestMirrorPostFailure(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, seed: 10})
	p.net.mu.Lock()
	p.net.failPost = errors.New("injected post failure")
	p.net.mu.Unlock()
	if _, err := p.app[0].write([]byte("x"), time.Second); err != nil {
		t.Fatal(err) // lands in the local ring
	}
	buf := make([]byte, 10)
	if _, err := p.app[0].read(buf, 5*time.Second); !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("read: %v, want ECONNRESET", err)
	}
	var err error
	_ = p.eng[0].Do(func() { err = p.strm[0].err })
	if err == nil {
		t.Error("stream has no error")
	}
}

// TestForkCloseSet: the engine's ends of both wake sockets are in the set
// a forked child closes, and leave it when the engine closes them.
func TestForkCloseSet(t *testing.T) {
	p := newPair(t, pairOpts{ring: 4096, seed: 11})
	var fds [2]int
	_ = p.eng[0].Do(func() { fds = [2]int{p.strm[0].wake, p.strm[0].wakeTx} })
	for _, fd := range fds {
		if !forkCloses(fd) {
			t.Fatalf("wake fd %d not in the fork-close set", fd)
		}
	}
	p.app[0].close(false)
	p.app[1].close(false)
	p.waitReleased(5 * time.Second)
	for _, fd := range fds {
		if forkCloses(fd) {
			t.Errorf("wake fd %d still in the fork-close set after the stream ended", fd)
		}
	}
}

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

// sendWC completes every send posted so far.
func sendWC(s *stream) verbs.WC {
	return verbs.WC{WRID: uint64(verbs.MakeWRID(wrData, s.id, s.posted-1)), Status: verbs.WCSuccess, Opcode: verbs.WCRDMAWrite}
}

// TestCreditWindow: never more than a ring in flight; a wrapped transfer
// is a plain WRITE followed by the WRITE WITH IMMEDIATE; credits open the
// window again.
func TestCreditWindow(t *testing.T) {
	s, l, seg := handStream(t)
	publish(seg, 3000)
	s.pump()
	if len(l.writes) != 1 || l.writes[0].off != 0 || l.writes[0].n != 3000 || !l.writes[0].withImm ||
		l.writes[0].imm != MakeImm(ImmData, 3000) || verbs.WRID(l.writes[0].wrid).Kind() != wrData {
		t.Fatalf("first transfer: %+v", l.writes)
	}
	// The application fills its ring (it sees room up to the credit).
	publish(seg, 1096)
	s.pump()
	if s.sent != 4096 {
		t.Fatalf("sent %d, want 4096", s.sent)
	}
	// No credit yet: nothing more may go even if the ring claims more.
	publish(seg, 0)
	s.pump()
	if n := len(l.writes); n != 2 {
		t.Fatalf("%d writes before any credit, want 2", n)
	}
	// The peer consumed 3500 bytes.
	wc := recvWC(s, MakeImm(ImmCredit, 3500))
	s.handle(&wc)
	if seg.Tail(0) != 3500 {
		t.Fatalf("credit not applied to the local tail: %d", seg.Tail(0))
	}
	publish(seg, 3500) // head 7596: wraps at 8192? no: ring offset 4096..
	l.writes = nil
	s.pump()
	// 3500 bytes from offset 0 (position 4096): no wrap.
	if len(l.writes) != 1 || l.writes[0].off != 0 || l.writes[0].n != 3500 {
		t.Fatalf("after credit: %+v", l.writes)
	}
	// Wrap: consume everything, write 1000 starting at offset 3500.
	wc = recvWC(s, MakeImm(ImmCredit, 7596))
	s.handle(&wc)
	publish(seg, 1000)
	l.writes = nil
	s.pump()
	if len(l.writes) != 2 || l.writes[0].withImm || l.writes[0].off != 3500 || l.writes[0].n != 596 ||
		!l.writes[1].withImm || l.writes[1].off != 0 || l.writes[1].n != 404 || l.writes[1].imm != MakeImm(ImmData, 8596) {
		t.Fatalf("wrapped transfer: %+v", l.writes)
	}
	if s.sent-s.peerTail > s.size {
		t.Fatalf("%d bytes in flight in a %d ring", s.sent-s.peerTail, s.size)
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
	if !s.finSent || len(l.writes) != 2 {
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
