package sidetest_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osfproject/osf/sdp/sidetest"
	"golang.org/x/sys/unix"
)

// Linux TCP states (netinet/tcp.h) TCP_INFO reports.
const (
	tcpEstablished = 1
	tcpFinWait2    = 5
	tcpClose       = 7
	tcpCloseWait   = 8
)

func pair(t *testing.T, ring uint32) *sidetest.Pair {
	t.Helper()
	p, err := sidetest.NewPair(ring)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// tokens returns the wake tokens waiting on fd without taking them.
func tokens(t *testing.T, fd int) int {
	t.Helper()
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDataBothWays(t *testing.T) {
	p := pair(t, 4096)
	if got := p.Client.Write([]byte("hello")); got != 5 {
		t.Fatalf("write: %d", got)
	}
	if got := p.Server.RxUsed(); got != 5 {
		t.Fatalf("server rx used %d, want 5", got)
	}
	buf := make([]byte, 16)
	if n := p.Server.Read(buf); n != 5 || string(buf[:5]) != "hello" {
		t.Fatalf("read %d %q", n, buf[:n])
	}
	// A ring takes at most its size; reading makes room again.
	big := bytes.Repeat([]byte{7}, 5000)
	if n := p.Server.Write(big); n != 4096 {
		t.Fatalf("write into a 4096 ring took %d", n)
	}
	if p.Server.TxFree() != 0 {
		t.Fatalf("tx free %d after filling", p.Server.TxFree())
	}
	if n := p.Client.Read(make([]byte, 1000)); n != 1000 || p.Server.TxFree() != 1000 {
		t.Fatalf("read %d, tx free %d", n, p.Server.TxFree())
	}
	if s := p.Client.TCPState(); s != tcpEstablished {
		t.Fatalf("tcp state %d", s)
	}
}

func TestReadersWokenWithTheirCount(t *testing.T) {
	p := pair(t, 4096)
	// Nobody armed: no token is sent.
	p.Client.Write([]byte("a"))
	if n := tokens(t, p.Server.FD); n != 0 {
		t.Fatalf("%d tokens without a waiter", n)
	}
	p.Server.Read(make([]byte, 1))

	// One poller armed: not ready, then one token on the readers' socket.
	if r := p.Server.Arm(sidetest.ArmRx, 0); r&unix.POLLIN != 0 {
		t.Fatalf("ready right after arming an empty ring: %#x", r)
	}
	p.Client.Write([]byte("b"))
	if n := tokens(t, p.Server.FD); n != 1 {
		t.Fatalf("%d tokens for one armed poller, want 1", n)
	}
	if n := tokens(t, p.Server.WFD); n != 0 {
		t.Fatalf("a reader's token went to the writers' socket")
	}
	p.Server.Disarm(sidetest.ArmRx, sidetest.ArmRx)
	if rx, _ := p.Server.Waiters(); rx != 0 || tokens(t, p.Server.FD) != 0 {
		t.Fatalf("after disarm: %d waiters, %d tokens", rx, tokens(t, p.Server.FD))
	}
	p.Server.Read(make([]byte, 1))

	// Many waiters: as many tokens as counted, at most MaxTokens.
	p.Server.SetWaiters(100)
	p.Server.ArmRx()
	p.Client.Write([]byte("c"))
	if n := tokens(t, p.Server.FD); n != sidetest.MaxTokens {
		t.Fatalf("%d tokens for 100 waiters, want %d", n, sidetest.MaxTokens)
	}
	// Drain keeps the tokens counted waiters will take, no more.
	p.Server.SetWaiters(3)
	p.Server.Drain()
	if n := tokens(t, p.Server.FD); n != 3 {
		t.Fatalf("drain left %d tokens for 3 waiters", n)
	}
}

func TestWritersWokenAtLowWaterMark(t *testing.T) {
	p := pair(t, 4096)
	p.Client.Write(make([]byte, 4096))
	if r := p.Client.Arm(sidetest.ArmTx, 0); r&unix.POLLOUT != 0 {
		t.Fatalf("a full ring reports POLLOUT: %#x", r)
	}
	p.Server.Read(make([]byte, 1000)) // below half free: no wake-up
	if n := tokens(t, p.Client.WFD); n != 0 {
		t.Fatalf("writer woken with %d free bytes", p.Client.TxFree())
	}
	p.Server.Read(make([]byte, 1100)) // now over half free
	if n := tokens(t, p.Client.WFD); n != 1 {
		t.Fatalf("%d writer tokens at %d free, want 1", n, p.Client.TxFree())
	}
	if n := tokens(t, p.Client.FD); n != 0 {
		t.Fatal("a writer's token went to the readers' socket")
	}
	p.Client.Disarm(sidetest.ArmTx, sidetest.ArmTx)
}

func TestWaitDataSleepsUntilData(t *testing.T) {
	p := pair(t, 4096)
	done := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- p.Server.WaitData(0)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for rx, _ := p.Server.Waiters(); rx == 0; rx, _ = p.Server.Waiters() {
		if time.Now().After(deadline) {
			t.Fatal("the reader never counted itself")
		}
		time.Sleep(time.Millisecond)
	}
	p.Client.Write([]byte("x"))
	select {
	case r := <-done:
		if r != 0 {
			t.Fatalf("wait returned %d", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reader not woken by data")
	}
	if rx, _ := p.Server.Waiters(); rx != 0 {
		t.Fatalf("%d readers still counted", rx)
	}
}

func TestWaitDataEndsAtPeerClose(t *testing.T) {
	p := pair(t, 4096)
	done := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- p.Server.WaitData(0)
	}()
	time.Sleep(20 * time.Millisecond)
	p.Client.CloseFD()
	select {
	case r := <-done:
		if r != 0 || p.Server.State()&sidetest.StateGone == 0 {
			t.Fatalf("wait returned %d, state %#x", r, p.Server.State())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reader not woken by the peer's close")
	}
}

func TestEndWithAndWithoutUnreadData(t *testing.T) {
	// The peer closed having read everything: end-of-file, CLOSE_WAIT.
	p := pair(t, 4096)
	p.Server.CloseFD()
	p.Client.CheckEnd()
	if st := p.Client.State(); st != sidetest.StateGone {
		t.Fatalf("state %#x, want gone only", st)
	}
	if err := p.Client.TakeRecvError(); err != 0 {
		t.Fatalf("read error %v at a clean end", err)
	}
	if s := p.Client.TCPState(); s != tcpCloseWait {
		t.Fatalf("tcp state %d, want CLOSE_WAIT", s)
	}
	if r := p.Client.Revents(); r&(unix.POLLIN|unix.POLLRDHUP) != unix.POLLIN|unix.POLLRDHUP || r&unix.POLLERR != 0 {
		t.Fatalf("revents %#x", r)
	}

	// The peer closed with bytes it never read: TCP resets.
	q := pair(t, 4096)
	q.Client.Write([]byte("unread"))
	q.Server.CloseFD()
	q.Client.CheckEnd()
	if st := q.Client.State(); st&sidetest.StateReset == 0 {
		t.Fatalf("state %#x, want reset", st)
	}
	if s := q.Client.TCPState(); s != tcpClose {
		t.Fatalf("tcp state %d, want CLOSE", s)
	}
	if err := q.Client.TakeRecvError(); err != unix.ECONNRESET {
		t.Fatalf("read error %v, want ECONNRESET", err)
	}
	if err := q.Client.TakeRecvError(); err != 0 {
		t.Fatalf("ECONNRESET reported twice (%v)", err)
	}

	// SO_LINGER 0 on the peer resets even without unread data.
	r := pair(t, 4096)
	r.Server.SetFlags(sidetest.FlagReset)
	r.Server.CloseFD()
	r.Client.CheckEnd()
	if err := r.Client.TakePending(); err != unix.ECONNRESET {
		t.Fatalf("after a linger-0 close: %v", err)
	}

	// An RDMA engine that gave up on the remote peer: ETIMEDOUT, as when
	// TCP's retransmissions give up.
	e := pair(t, 4096)
	e.Server.SetFlags(sidetest.FlagReset | sidetest.FlagTimedOut)
	e.Server.CloseFD()
	e.Client.CheckEnd()
	if st := e.Client.State(); st&sidetest.StateReset == 0 {
		t.Fatalf("state %#x, want reset", st)
	}
	if err := e.Client.TakePending(); err != unix.ETIMEDOUT {
		t.Fatalf("after the engine timed out: %v, want ETIMEDOUT", err)
	}
}

func TestShutdownStates(t *testing.T) {
	p := pair(t, 4096)
	p.Client.SetFlags(sidetest.FlagFin)
	if s := p.Client.TCPState(); s != tcpFinWait2 {
		t.Fatalf("after SHUT_WR: %d, want FIN_WAIT2", s)
	}
	if s := p.Server.TCPState(); s != tcpCloseWait {
		t.Fatalf("peer after SHUT_WR: %d, want CLOSE_WAIT", s)
	}
	p.Server.SetFlags(sidetest.FlagFin)
	if p.Client.TCPState() != tcpClose || p.Server.TCPState() != tcpClose {
		t.Fatalf("both FIN: %d %d, want CLOSE", p.Client.TCPState(), p.Server.TCPState())
	}
	if r := p.Client.Revents(); r&unix.POLLHUP == 0 {
		t.Fatalf("both FIN without POLLHUP: %#x", r)
	}
}

func TestRecvLeavesEPIPEForTheNextWrite(t *testing.T) {
	p := pair(t, 4096)
	p.Client.SetPending(unix.EPIPE)
	if err := p.Client.TakeRecvError(); err != 0 {
		t.Fatalf("read took %v", err)
	}
	if err := p.Client.TakePending(); err != unix.EPIPE {
		t.Fatalf("write got %v, want EPIPE", err)
	}
}

func TestCorruptRingIsAReset(t *testing.T) {
	p := pair(t, 4096)
	p.Client.CorruptRx()
	if p.Client.RxUsed() != -1 {
		t.Fatalf("rx used %d for impossible positions", p.Client.RxUsed())
	}
	if n := p.Client.Read(make([]byte, 10)); n != -1 {
		t.Fatalf("read %d from a corrupt ring", n)
	}
	if r := p.Client.Revents(); r&unix.POLLERR == 0 {
		t.Fatalf("corrupt ring reports %#x", r)
	}
	p.Client.Broken()
	if err := p.Client.TakePending(); err != unix.ECONNRESET {
		t.Fatalf("broken: %v", err)
	}
}

func TestStampMovesWithDataAndState(t *testing.T) {
	p := pair(t, 4096)
	s0 := p.Server.Stamp()
	p.Client.Write([]byte("x"))
	s1 := p.Server.Stamp()
	if s1 == s0 {
		t.Fatal("stamp did not move with data")
	}
	p.Client.SetFlags(sidetest.FlagFin)
	if p.Server.Stamp() == s1 {
		t.Fatal("stamp did not move with the peer's FIN")
	}
}

// TestStampMovesWhenATrimLetsTheProducerGo: a trim holds the producer below
// its stop while it gives pages back, so a writer may get EAGAIN with room
// in the ring; when the trim ends, head and tail are where they were, and
// the producer's stamp must still move, or an edge-triggered epoll takes
// the wake-up for a stale one and the writer waits for ever (TestShmEcho's
// poll-200 hung so, once, in CI).
func TestStampMovesWhenATrimLetsTheProducerGo(t *testing.T) {
	p := pair(t, 16384)
	p.Server.SetTrim(true)
	p.Client.Write(make([]byte, 16384))
	p.Server.Read(make([]byte, 16384))
	c0 := p.Client.Stamp()
	if g := p.Server.Trim(); g == 0 {
		t.Fatal("nothing trimmed")
	}
	if p.Client.Stamp() == c0 {
		t.Fatal("the producer's stamp did not move when the trim let it go")
	}
}

// TestStampRoomIsAnEdgeOnlyAfterNoSpace: room the peer's reads make is an
// edge for an edge-triggered writer only after the side lacked room (a
// write found none, or readiness found it not writable), and once, as
// TCP's write_space wakes only a socket marked SOCK_NOSPACE. Over RDMA
// the peer's credits trickle in after the wake-up; each one was another
// EPOLLOUT edge (TestSemanticsRDMACaller's epoll_et_out, under load).
func TestStampRoomIsAnEdgeOnlyAfterNoSpace(t *testing.T) {
	p := pair(t, 16384)
	p.Client.Write(make([]byte, 4096))
	c0 := p.Client.Stamp()
	p.Server.Read(make([]byte, 4096))
	if p.Client.Stamp() != c0 {
		t.Fatal("room made while the side was writable moved the stamp")
	}
	for i := 0; i < 16 && p.Client.Write(make([]byte, 4096)) > 0; i++ {
	}
	if p.Client.TxFree() != 0 {
		t.Fatalf("the ring did not fill: %d free", p.Client.TxFree())
	}
	c1 := p.Client.Stamp()
	buf := make([]byte, 1024)
	for i := 0; i < 16 && p.Client.Revents()&unix.POLLOUT == 0; i++ {
		if p.Client.Stamp() != c1 {
			t.Fatal("the stamp moved before the side was writable")
		}
		p.Server.Read(buf)
	}
	if p.Client.Revents()&unix.POLLOUT == 0 {
		t.Fatal("not writable after reads")
	}
	c2 := p.Client.Stamp()
	if c2 == c1 {
		t.Fatal("room after no room did not move the stamp")
	}
	p.Server.Read(make([]byte, 16384))
	if p.Client.Stamp() != c2 {
		t.Fatal("more room while writable moved the stamp again")
	}
}

func TestLockExcludesAcrossThreads(t *testing.T) {
	p := pair(t, 4096)
	w := p.Client.TxLockWord()
	var wg sync.WaitGroup
	counter := 0
	for range 4 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for range 20000 {
				if sidetest.Lock(w) != 0 {
					t.Error("lock failed")
					return
				}
				counter++
				sidetest.Unlock(w)
			}
		})
	}
	wg.Wait()
	if counter != 80000 {
		t.Fatalf("counter %d, want 80000", counter)
	}
	if *w != 0 {
		t.Fatalf("lock word %#x after all released", *w)
	}
}

func TestLockTakesOverFromADeadHolder(t *testing.T) {
	p := pair(t, 4096)
	w := p.Client.TxLockWord()
	*w = 0x3ffffff0 // no such thread
	done := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r := sidetest.Lock(w)
		if r == 0 && *w != sidetest.Tid() {
			r = -2
		}
		sidetest.Unlock(w)
		done <- r
	}()
	select {
	case r := <-done:
		if r != 0 {
			t.Fatalf("lock from a dead holder: %d", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waited for a dead holder")
	}
}

func TestLockReenteredFails(t *testing.T) {
	p := pair(t, 4096)
	w := p.Client.TxLockWord()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if sidetest.Lock(w) != 0 {
		t.Fatal("lock failed")
	}
	defer sidetest.Unlock(w)
	if r := sidetest.Lock(w); r != -1 {
		t.Fatalf("re-entered lock returned %d, want -1 (a signal handler must not deadlock)", r)
	}
}

// TestTrimGivesBackFreePagesOnly: a trim frees the rx ring's pages that
// hold no unread data, keeps the unread bytes intact, and the ring works
// on across the holes (the producer's next writes land in fresh pages).
func TestTrimGivesBackFreePagesOnly(t *testing.T) {
	const ring = 64 << 10
	p := pair(t, ring)
	s := p.Server
	s.SetTrim(true)
	var sent, got []byte
	pos := 0
	next := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte((pos+i)*7 + (pos+i)>>9 + 1)
		}
		pos += n
		return b
	}
	write := func(n int) {
		b := next(n)
		if w := p.Client.Write(b); w != n {
			t.Fatalf("write %d of %d", w, n)
		}
		sent = append(sent, b...)
	}
	read := func(n int) {
		b := make([]byte, n)
		if r := s.Read(b); r != n {
			t.Fatalf("read %d of %d", r, n)
		}
		got = append(got, b...)
	}
	if n := s.RxResident(); n != 0 {
		t.Fatalf("fresh ring: %d pages resident", n)
	}
	write(ring)
	if n := s.RxResident(); n != ring/4096 {
		t.Fatalf("full ring: %d pages resident, want %d", n, ring/4096)
	}
	read(ring - 5000) // 5000 unread bytes: in the last 2 pages
	if !s.TrimDue() {
		t.Fatal("not due after consuming most of the ring")
	}
	if g := s.Trim(); g != ring-8192 {
		t.Fatalf("trim gave back %d bytes, want %d", g, ring-8192)
	}
	if n := s.RxResident(); n != 2 {
		t.Fatalf("after trim: %d pages resident, want the 2 with unread data", n)
	}
	if s.TrimDue() || s.Trim() != 0 {
		t.Fatal("a second trim found something to give back")
	}
	// Wrap around through the holes, trimming with unread data at each
	// step, in odd sizes.
	for i := 0; i < 40; i++ {
		write(int(p.Client.TxFree()) - 1234)
		read(int(s.RxUsed()) - 777)
		s.Trim()
		if n, max := s.RxResident(), 2; n > max {
			t.Fatalf("step %d: %d pages resident after trim, unread %d", i, n, s.RxUsed())
		}
	}
	read(int(s.RxUsed()))
	// Nothing unread, head in the middle of a page: every page goes.
	s.Trim()
	if n := s.RxResident(); n != 0 {
		t.Fatalf("empty ring, head at %d: %d pages resident after trim", pos, n)
	}
	write(3000)
	read(3000)
	if !bytes.Equal(sent, got) {
		t.Fatalf("bytes differ after trims (%d sent, %d got)", len(sent), len(got))
	}
}

// TestTrimKeepsCorkedBytes: bytes TCP_CORK holds after the producer's
// head are not free room: a trim keeps their page (nothing unread, head on
// a page boundary: before, the whole ring went, and them with it), and they
// arrive intact when a gone producer's are published (osf_side_mark_gone).
// A cork word being published (OSF_CORK_HELD) stops a trim.
func TestTrimKeepsCorkedBytes(t *testing.T) {
	const ring = 16384
	p := pair(t, ring)
	s := p.Server
	s.SetTrim(true)
	p.Client.Write(make([]byte, ring))
	s.Read(make([]byte, ring))
	// Then a page more: head at the start of one of the ring's own pages
	// (position ring is in the shared page, which no trim gives back).
	p.Client.Write(make([]byte, 4096))
	s.Read(make([]byte, 4096))
	held := []byte("held back by the cork")
	p.Client.HoldBack(held)
	if g := s.Trim(); g != ring-4096 {
		t.Fatalf("trim gave back %d bytes, want all but the held bytes' page", g)
	}
	if n := s.RxResident(); n != 1 {
		t.Fatalf("%d pages resident after trim, want the held bytes' one", n)
	}
	s.MarkGone()
	b := make([]byte, 64)
	if n := s.Read(b); !bytes.Equal(b[:n], held) {
		t.Fatalf("published held bytes: %q, want %q", b[:n], held)
	}
	if *p.Client.CorkWord() != 0 {
		t.Fatalf("cork word %#x after publishing, want 0", *p.Client.CorkWord())
	}
	p.Client.Write(make([]byte, 8192))
	s.Read(make([]byte, 8192))
	*p.Client.CorkWord() = 0x7fffffff // OSF_CORK_HELD: being published
	if g := s.Trim(); g != 0 {
		t.Fatalf("trimmed %d bytes while held bytes were being published", g)
	}
}

// TestTrimNeverWaitsForTheProducer: with the producer's lock held (a
// writer mid-copy, or a hostile peer that wrote its lock word) a trim
// gives nothing back at once; disabled, it never trims.
func TestTrimNeverWaitsForTheProducer(t *testing.T) {
	p := pair(t, 16384)
	s := p.Server
	s.SetTrim(true)
	p.Client.Write(make([]byte, 16384))
	s.Read(make([]byte, 16384))
	w := s.PeerTxLockWord()
	*w = 0x7ffffff0 // a thread that does not exist, as a hostile peer may write
	done := make(chan int, 1)
	go func() { done <- s.Trim() }()
	select {
	case g := <-done:
		if g != 0 {
			t.Fatalf("trimmed %d bytes under a held producer lock", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("trim waited for the producer's lock")
	}
	if *w != 0x7ffffff0 {
		t.Fatalf("lock word changed to %#x", *w)
	}
	*w = 0
	s.SetTrim(false)
	if s.TrimDue() || s.Trim() != 0 {
		t.Fatal("a disabled end trimmed")
	}
	s.SetTrim(true)
	if g := s.Trim(); g != 16384 {
		t.Fatalf("trim gave back %d bytes, want the whole ring", g)
	}
	if s.RxResident() != 0 {
		t.Fatalf("%d pages resident after trimming an empty ring", s.RxResident())
	}
	s.CorruptRx()
	if g := s.Trim(); g != 0 {
		t.Fatalf("trimmed %d bytes of a corrupt ring", g)
	}
}

// TestStaleTokensNeverPileUp is issue 10's item 1 at the protocol level: a
// poller whose wait ended without a token (the ring was ready right after
// arming, or EPOLL_CTL_MOD ended it) leaves the flag raised, and the
// token the peer then sends is nobody's. The next waiter sheds such
// tokens before it asks for more, so they never pile up (before, they
// filled the socket's buffer and the next real wake-up was lost).
func TestStaleTokensNeverPileUp(t *testing.T) {
	p := pair(t, 4096)
	for i := 0; i < 1000; i++ {
		p.Server.Arm(sidetest.ArmRx, 0)
		p.Server.Disarm(sidetest.ArmRx, 0) // not woken: EPOLL_CTL_MOD
		p.Client.Write([]byte("x"))        // the flag is still up: a token
		if n := p.Server.Read(make([]byte, 1)); n != 1 {
			t.Fatalf("round %d: read %d", i, n)
		}
		if n := tokens(t, p.Server.FD); n > 2 {
			t.Fatalf("round %d: %d tokens queued", i, n)
		}
	}
	if rx, _ := p.Server.Tokens(); rx != uint32(tokens(t, p.Server.FD)) {
		t.Fatalf("token count %d, %d queued", rx, tokens(t, p.Server.FD))
	}
}

// TestFailedTokenSendKeepsTheFlag: when a token cannot be sent (the wake
// socket's buffer is full), the flag goes up again so that the next
// publish retries: the wake-up is late, never lost.
func TestFailedTokenSendKeepsTheFlag(t *testing.T) {
	p := pair(t, 4096)
	junk := make([]byte, 4096)
	for {
		if _, err := unix.SendmsgN(p.Client.FD, junk, nil, nil, unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	p.Server.Arm(sidetest.ArmRx, 0)
	p.Client.Write([]byte("x"))
	if rx, _ := p.Server.Want(); rx != 1 {
		t.Fatalf("rx_want %d after a failed token send, want 1", rx)
	}
	if rx, _ := p.Server.Tokens(); rx != 0 {
		t.Fatalf("%d tokens counted that were never sent", rx)
	}
}

// flipOwners writes live tids other than the caller's into *w, two in
// turn, as a hostile peer may (pid 1 and this test's parent: both alive,
// both running or sleeping), until stop is closed.
func flipOwners(w *uint32, stop chan struct{}) {
	owners := []uint32{1, uint32(os.Getppid())}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		atomic.StoreUint32(w, owners[i%2])
		time.Sleep(200 * time.Microsecond)
	}
}

// TestLockHostileOwnersBounded is issue 10's item 4: a peer that writes
// live tids into a side's lock word, alternating two so that the holder
// seems to change, must not freeze the process. A non-blocking call gets
// EAGAIN at once, a blocking one gives up at SO_RCVTIMEO, and the stuck
// clock runs across owners and calls: after OSF_LOCK_STUCK_MS in all the
// connection is broken (reset), whoever the owner is.
func TestLockHostileOwnersBounded(t *testing.T) {
	p := pair(t, 4096)
	w := p.Server.TxLockWord()
	stop := make(chan struct{})
	defer close(stop)
	go flipOwners(w, stop)
	for atomic.LoadUint32(w) == 0 {
		time.Sleep(time.Millisecond)
	}
	clock := sidetest.NewClock()
	defer clock.Free()

	start := time.Now()
	if r := sidetest.LockWait(w, true, -1, clock); r != sidetest.LockAgain {
		t.Fatalf("non-blocking lock against a foreign owner: %d, want EAGAIN", r)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a non-blocking lock waited %v", d)
	}
	// A blocking call with SO_RCVTIMEO (on the socket named) gives up then.
	tv := unix.Timeval{Usec: 300000}
	if err := unix.SetsockoptTimeval(p.Server.WFD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if r := sidetest.LockWait(w, false, p.Server.WFD, clock); r != sidetest.LockAgain {
		t.Fatalf("blocking lock with SO_RCVTIMEO: %d, want EAGAIN", r)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("SO_RCVTIMEO of 300 ms, waited %v", d)
	}
	// Without a timeout: broken within the stuck bound, although the
	// owner keeps changing.
	done := make(chan int, 1)
	go func() { done <- sidetest.LockWait(w, false, -1, clock) }()
	select {
	case r := <-done:
		if r != sidetest.LockBroken {
			t.Fatalf("blocking lock against hostile owners: %d, want a reset", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a blocking lock waited 20 s for owners that keep changing: the clock restarts")
	}
	t.Logf("reset after %v in all", time.Since(start))
}

// TestLockStoppedHolderIsNotAReset is issue 10's item 8: a process that
// shares the connection and is stopped (SIGSTOP, a debugger) while it
// holds the lock will continue; it is not dead. A non-blocking call gets
// EAGAIN, a blocking one waits (as long as its timeout allows), and the
// connection is never reset for it, however long it stays stopped.
func TestLockStoppedHolderIsNotAReset(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Skipf("no sleep(1): %v", err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	pid := sleeper.Process.Pid
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if i := bytes.LastIndexByte(b, ')'); i > 0 && len(b) > i+2 && b[i+2] == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep(1) did not stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := pair(t, 4096)
	w := p.Server.TxLockWord()
	atomic.StoreUint32(w, uint32(pid))
	clock := sidetest.NewClock()
	defer clock.Free()
	if r := sidetest.LockWait(w, true, -1, clock); r != sidetest.LockAgain {
		t.Fatalf("non-blocking lock held by a stopped process: %d, want EAGAIN", r)
	}
	done := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- sidetest.LockWait(w, false, -1, clock)
	}()
	select {
	case r := <-done:
		t.Fatalf("blocking lock held by a stopped process returned %d after less than 7 s", r)
	case <-time.After(7 * time.Second): // longer than OSF_LOCK_STUCK_MS
	}
	// The holder continues and releases the lock: the waiter takes it.
	atomic.StoreUint32(w, 0)
	select {
	case r := <-done:
		if r != 0 {
			t.Fatalf("lock after the stopped holder released it: %d", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was released but the waiter did not take it")
	}
}

// FuzzTrimHostileWords is issue 24's item 1 as a fuzz target: whatever a
// hostile client writes over its side's words and ring positions, the
// server's trim, reads and readiness touch nothing outside the segment
// (shared memory right before and after it stays as it was: a punch
// steered there zeroes it) and nothing of the server's own send ring.
func FuzzTrimHostileWords(f *testing.F) {
	f.Add(make([]byte, 8))
	f.Add(bytes.Repeat([]byte{0xff}, 220))
	seed := make([]byte, 220)
	for i := range seed {
		seed[i] = byte(i * 37)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, words []byte) {
		const ring = 16384
		p := pair(t, ring)
		s := p.Server
		s.SetTrim(true)
		p.Client.Write(make([]byte, ring))
		s.Read(make([]byte, ring-100))
		p.FillRing(1, 0x5a) // the server's send ring: its own bytes
		p.Scribble(0, words)
		for i := 0; i < 3; i++ {
			s.Trim()
			s.Revents()
			s.TxFree()
			s.Read(make([]byte, 512))
		}
		if !p.GuardsIntact() {
			t.Fatalf("words %x: memory outside the segment changed", words)
		}
		if !p.RingIs(1, 0x5a) {
			t.Fatalf("words %x: the server's send ring changed", words)
		}
	})
}
