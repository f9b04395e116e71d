package rdma

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// TestLinkImm: a stream's immediate on a link names its slot and keeps
// the kind and the low 22 bits; the receiver rebuilds positions from them.
func TestLinkImm(t *testing.T) {
	for _, tc := range []struct {
		slot uint8
		kind ImmKind
		v    uint64
	}{
		{1, ImmData, 0x123456789}, {255, ImmCredit, linkValueMask}, {7, ImmFlags, FlagFIN}, {128, ImmClose, CloseAbort},
	} {
		k, slot, low := ParseLinkImm(MakeLinkImm(tc.slot, MakeImm(tc.kind, tc.v)))
		if k != tc.kind || slot != tc.slot || uint64(low) != tc.v&linkValueMask {
			t.Errorf("%v %d %#x: got %v %d %#x", tc.kind, tc.slot, tc.v, k, slot, low)
		}
	}
	for _, tc := range []struct{ from, to uint64 }{
		{0, 1}, {0, linkMaxRing}, {5<<22 - 3, 5<<22 + 10}, {1 << 40, 1<<40 + linkMaxRing}, {99, 99},
	} {
		if got := advanceLink(tc.from, uint32(tc.to)&linkValueMask); got != tc.to {
			t.Errorf("advanceLink(%d, low of %d) = %d", tc.from, tc.to, got)
		}
	}
}

func frameHdr(kind, ring, flags, slot byte, off, n, imm uint32) []byte {
	h := make([]byte, simHdr)
	h[0], h[1], h[2], h[3] = kind, ring, flags, slot
	binary.LittleEndian.PutUint32(h[4:], off)
	binary.LittleEndian.PutUint32(h[8:], n)
	binary.LittleEndian.PutUint32(h[12:], imm)
	return h
}

// TestParseLinkFrame: every header field the peer writes is checked
// against the protocol's bounds before the link looks at a stream.
func TestParseLinkFrame(t *testing.T) {
	imm3 := MakeLinkImm(3, MakeImm(ImmData, 10))
	for _, tc := range []struct {
		name string
		h    []byte
		ok   bool
	}{
		{"write with immediate", frameHdr(simLinkWrite, 1, 1, 3, 100, 10, imm3), true},
		{"plain write", frameHdr(simLinkWrite, 0, 0, 3, 0, linkMaxRing, 0), true},
		{"probe", frameHdr(simLinkWrite, 0, 0, 3, 0, 0, 0), true},
		{"open", frameHdr(simLinkOpen, 0, 0, 1, 0, SizeofConnectData, 0), true},
		{"end", frameHdr(simLinkEnd, 0, 0, 255, 0, 0, 0), true},
		{"short", frameHdr(simLinkWrite, 0, 0, 3, 0, 0, 0)[:15], false},
		{"stream 0", frameHdr(simLinkWrite, 0, 0, 0, 0, 1, 0), false},
		{"ring 2", frameHdr(simLinkWrite, 2, 0, 3, 0, 1, 0), false},
		{"beyond the largest ring", frameHdr(simLinkWrite, 0, 0, 3, linkMaxRing-4, 5, 0), false},
		{"offset wraps", frameHdr(simLinkWrite, 0, 0, 3, 0xffffffff, 2, 0), false},
		{"immediate of another stream", frameHdr(simLinkWrite, 1, 1, 4, 0, 1, imm3), false},
		{"immediate without the flag", frameHdr(simLinkWrite, 1, 0, 3, 0, 1, imm3), false},
		{"flags", frameHdr(simLinkWrite, 1, 2, 3, 0, 1, 0), false},
		{"hello on a link", frameHdr(simLinkHello, 0, 0, 1, 0, 0, 0), false},
		{"connection kinds", frameHdr(simWrite, 0, 0, 1, 0, 0, 0), false},
		{"unknown kind", frameHdr(11, 0, 0, 1, 0, 0, 0), false},
		{"big control", frameHdr(simLinkOpen, 0, 0, 1, 0, simLinkCtlMax+1, 0), false},
		{"end with payload", frameHdr(simLinkEnd, 0, 0, 1, 0, 1, 0), false},
		{"control with offset", frameHdr(simLinkAccept, 0, 0, 1, 8, 4, 0), false},
		{"control with immediate", frameHdr(simLinkReject, 0, 1, 1, 0, 4, imm3), false},
	} {
		_, err := parseLinkFrame(tc.h)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrWire) {
			t.Errorf("%s: %v is not ErrWire", tc.name, err)
		}
	}
}

// FuzzParseLinkFrame: whatever the peer writes, an accepted frame names a
// stream and stays within the largest ring.
func FuzzParseLinkFrame(f *testing.F) {
	f.Add(frameHdr(simLinkWrite, 1, 1, 3, 100, 10, MakeLinkImm(3, 10)))
	f.Add(frameHdr(simLinkOpen, 0, 0, 1, 0, SizeofConnectData, 0))
	f.Fuzz(func(t *testing.T, h []byte) {
		fr, err := parseLinkFrame(h)
		if err != nil {
			return
		}
		if fr.slot == 0 || fr.ring > 1 || uint64(fr.off)+uint64(fr.n) > linkMaxRing {
			t.Fatalf("accepted %+v", fr)
		}
		if fr.kind != simLinkWrite && fr.n > simLinkCtlMax {
			t.Fatalf("accepted a control frame of %d bytes", fr.n)
		}
	})
}

// TestLinkApply: what a frame names is checked against the link's
// streams: a slot that is not open or not accepted yet, the ring the
// local side writes, a write beyond the stream's ring, an answer to no
// open, an open on a link that makes them, a second END: each is refused
// (the link breaks), and a write within the right ring lands there.
func TestLinkApply(t *testing.T) {
	s, err := StartSim(Config{PollSpin: 20 * time.Microsecond, PID: unix.Getpid(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	seg, err := sdp.CreateSegment(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	write := func(slot uint8, ring int, off, n uint32) linkFrame {
		return linkFrame{kind: simLinkWrite, ring: ring, slot: slot, off: off, n: n}
	}
	ctl := func(kind byte, slot uint8) linkFrame { return linkFrame{kind: kind, slot: slot} }
	_ = s.eng.Do(func() {
		ml, err := s.newMuxLink(fds[0], "test", true)
		if err != nil {
			t.Error(err)
			return
		}
		defer ml.fail(errors.New("test over"))
		e := ml.newEnd(1, seg, sdp.SideClient) // the peer writes ring 1
		pending := ml.newEnd(2, seg, sdp.SideClient)
		pending.open = &linkOpen{done: make(chan error, 1)}
		for _, tc := range []struct {
			name string
			f    linkFrame
			p    []byte
			ok   bool
		}{
			{"before the accept", write(1, 1, 0, 3), []byte("abc"), false},
			{"accept of no open", ctl(simLinkAccept, 1), nil, false},
			{"open on a dialed link", ctl(simLinkOpen, 3), nil, false},
			{"write to a slot not open", write(3, 1, 0, 3), []byte("abc"), false},
			{"write to a stream not accepted", write(2, 1, 0, 3), []byte("abc"), false},
			{"accept", ctl(simLinkAccept, 1), nil, true}, // e: set below
			{"write to the local side's ring", write(1, 0, 0, 3), []byte("abc"), false},
			{"write beyond the ring", write(1, 1, 4094, 3), []byte("abc"), false},
			{"write", write(1, 1, 4093, 3), []byte("xyz"), true},
			{"end", ctl(simLinkEnd, 1), nil, true},
			{"second end", ctl(simLinkEnd, 1), nil, false},
		} {
			if tc.name == "accept" {
				e.accepted = true
				continue
			}
			err := ml.apply(tc.f, tc.p)
			if (err == nil) != tc.ok {
				t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
			}
		}
		if got := string(seg.RingData(1)[4093:]); got != "xyz" {
			t.Errorf("ring 1 ends with %q, want the write's xyz", got)
		}
		if ml.ends[1] != nil {
			t.Error("stream 1's slot not free after END both ways")
		}
	})
}

// TestLinkArrive: a stream's 22-bit positions are rebuilt across many
// wraps of 22 bits, in order with its receives; an immediate before a
// receive is posted waits for it.
func TestLinkArrive(t *testing.T) {
	e := &muxEnd{slot: 5}
	pos := uint64(0)
	for i := range 40 {
		if i%3 == 0 {
			if err := e.PostRecv(verbs.MakeWRID(wrRecv, 9, uint32(i))); err != nil {
				t.Fatal(err)
			}
		}
		pos += linkMaxRing - uint64(i)
		if err := e.arrive(MakeLinkImm(5, MakeImm(ImmData, pos)), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; len(e.rnr) > 0; i++ {
		if err := e.PostRecv(verbs.MakeWRID(wrRecv, 9, uint32(100+i))); err != nil {
			t.Fatal(err)
		}
	}
	wc := make([]verbs.WC, 64)
	n, _ := e.Poll(wc)
	if n != 40 {
		t.Fatalf("%d completions, want 40", n)
	}
	want := uint64(0)
	for i := range n {
		want += linkMaxRing - uint64(i)
		k, v := ParseImm(wc[i].ImmData)
		if k != ImmData || Advance(want-uint64(linkMaxRing-uint64(i)), v) != want {
			t.Fatalf("completion %d: %v %#x, want DATA to %d", i, k, v, want)
		}
	}
}

// startLinkSim starts the stand-in with links and a listener on a random
// port of 127.0.0.1; it returns the companion's fd and the address.
func startLinkSim(t *testing.T) (*Sim, int, netip.AddrPort) {
	t.Helper()
	s, err := StartSim(Config{PollSpin: 20 * time.Microsecond, PID: unix.Getpid(), Logf: t.Logf, Links: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 20000+uint16(rand.IntN(20000)))
	lfd := listenBoth(t, s, addr)
	t.Cleanup(func() { unix.Close(lfd) })
	return s, lfd, addr
}

// linkCounts returns the links dialed ever, the links open for dials and
// the streams on the dialed links.
func linkCounts(s *Sim) (made, open, streams int) {
	_ = s.eng.Do(func() {
		made, open = s.linksMade, len(s.links)
		for _, ml := range s.links {
			streams += ml.open
		}
	})
	return made, open, streams
}

// dialStreams dials n connections to addr and accepts each.
func dialStreams(t *testing.T, s *Sim, lfd int, addr netip.AddrPort, n int, ring uint32) [][2]*fakeApp {
	t.Helper()
	var out [][2]*fakeApp
	for i := range n {
		cep, err := s.Dial(addr, netip.AddrPortFrom(addr.Addr(), uint16(41000+i)), ring, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		out = append(out, acceptBoth(t, lfd, addr, cep))
	}
	return out
}

// closeStreams closes both ends of conns and waits until the engine
// released every stream.
func closeStreams(t *testing.T, s *Sim, conns [][2]*fakeApp) {
	t.Helper()
	for _, apps := range conns {
		apps[0].close(false)
		apps[1].close(false)
	}
	waitNoStreams(t, s)
}

// waitNoStreams waits until the engine released every stream.
func waitNoStreams(t *testing.T, s *Sim) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		_ = s.eng.Do(func() { n = len(s.eng.streams) })
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d streams left", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSimLinkStreams: several connections to one listener are streams on
// one link (one link dialed, one open), each carrying its bytes both ways
// at once, verified; closed, their slots serve the next dials on the same
// link.
func TestSimLinkStreams(t *testing.T) {
	s, lfd, addr := startLinkSim(t)
	conns := dialStreams(t, s, lfd, addr, 3, 64<<10)
	if made, open, streams := linkCounts(s); made != 1 || open != 1 || streams != 3 {
		t.Fatalf("links made %d, open %d, streams %d; want 1, 1, 3", made, open, streams)
	}
	var wg sync.WaitGroup
	for i, apps := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exchangeBoth(t, apps, 1<<20+i*777, uint64(70+i), 30*time.Second)
		}()
	}
	wg.Wait()
	closeStreams(t, s, conns)
	conns = dialStreams(t, s, lfd, addr, 2, 16<<10)
	exchangeBoth(t, conns[1], 100<<10, 80, 30*time.Second)
	exchangeBoth(t, conns[0], 100<<10, 81, 30*time.Second)
	if made, open, _ := linkCounts(s); made != 1 || open != 1 {
		t.Fatalf("after the first streams closed: links made %d, open %d; want 1, 1", made, open)
	}
	closeStreams(t, s, conns)
}

// TestSimLinkConnection: the connection checks (a refusal without a
// listener, bytes both ways, release, a refusal once the listener closed)
// with links.
func TestSimLinkConnection(t *testing.T) {
	s, err := StartSim(Config{PollSpin: 20 * time.Microsecond, PID: unix.Getpid(), Logf: t.Logf, Links: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	checkConnection(t, s, netip.MustParseAddr("127.0.0.1"), func() (conns, listeners int) {
		_ = s.eng.Do(func() { conns, listeners = len(s.eng.streams), len(s.listeners) })
		return conns, listeners
	})
	if made, _, _ := linkCounts(s); made != 1 {
		t.Errorf("links made %d, want 1", made)
	}
}

// TestSimLinkStall: a stream whose reader reads nothing stops only its
// own writer; another stream on the link carries its bytes meanwhile,
// and the stalled one delivers everything once read.
func TestSimLinkStall(t *testing.T) {
	s, lfd, addr := startLinkSim(t)
	conns := dialStreams(t, s, lfd, addr, 2, 16<<10)
	stalled, free := conns[0], conns[1]
	const stuck = 200 << 10 // many rings' worth
	wrote := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		err := sendStream(stalled[0], 90, stuck, rng, 60*time.Second)
		if err == nil {
			stalled[0].shutdownWrite()
		}
		wrote <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for stalled[1].seg.Head(0)-stalled[1].seg.Tail(0) < 16<<10 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled stream's ring never filled")
		}
		time.Sleep(time.Millisecond)
	}
	exchangeBoth(t, free, 1<<20, 91, 30*time.Second)
	select {
	case err := <-wrote:
		t.Fatalf("the stalled stream's writer finished (%v) with nobody reading", err)
	default:
	}
	rng := rand.New(rand.NewPCG(3, 4))
	if err := recvStream(stalled[1], 90, stuck, rng, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if made, _, streams := linkCounts(s); made != 1 || streams != 2 {
		t.Errorf("links made %d, streams %d; want 1, 2", made, streams)
	}
	closeStreams(t, s, conns)
}

// TestSimLinkFailure: a link that breaks resets every stream on it, at
// both ends; the next dial makes a new link.
func TestSimLinkFailure(t *testing.T) {
	s, lfd, addr := startLinkSim(t)
	conns := dialStreams(t, s, lfd, addr, 3, 16<<10)
	exchangeBoth(t, conns[2], 10<<10, 95, 30*time.Second) // one done, FIN both ways
	var fd int
	_ = s.eng.Do(func() {
		for _, ml := range s.links {
			fd = ml.fd
		}
	})
	if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil { // the wire breaks
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	for i, apps := range conns[:2] {
		for side, a := range apps {
			if _, err := a.read(buf, 10*time.Second); !errors.Is(err, unix.ECONNRESET) {
				t.Errorf("stream %d side %d: read after the link broke: %v, want ECONNRESET", i, side, err)
			}
		}
	}
	closeStreams(t, s, conns)
	if _, open, _ := linkCounts(s); open != 0 {
		t.Errorf("%d links open after the break", open)
	}
	conns = dialStreams(t, s, lfd, addr, 1, 16<<10)
	exchangeBoth(t, conns[0], 100<<10, 96, 30*time.Second)
	if made, open, _ := linkCounts(s); made != 2 || open != 1 {
		t.Errorf("links made %d, open %d; want 2, 1", made, open)
	}
	closeStreams(t, s, conns)
}

// TestSimLinkFull: a dial that finds its link full gets a connection of
// its own, and carries its bytes.
func TestSimLinkFull(t *testing.T) {
	defer func(n int) { linkSlotsUsed = n }(linkSlotsUsed)
	linkSlotsUsed = 2
	s, lfd, addr := startLinkSim(t)
	conns := dialStreams(t, s, lfd, addr, 3, 16<<10)
	if made, _, streams := linkCounts(s); made != 1 || streams != 2 {
		t.Errorf("links made %d, streams on them %d; want 1, 2", made, streams)
	}
	exchangeBoth(t, conns[2], 100<<10, 97, 30*time.Second)
	closeStreams(t, s, conns)
}

// TestSimLinkSegments: a stream's segment is an RDMA one (the transport
// osfstat reports), and a ring larger than a link takes gets a connection
// of its own.
func TestSimLinkSegments(t *testing.T) {
	s, lfd, addr := startLinkSim(t)
	conns := dialStreams(t, s, lfd, addr, 1, linkMaxRing*2)
	if made, _, _ := linkCounts(s); made != 0 {
		t.Errorf("a %d-byte ring went on a link", linkMaxRing*2)
	}
	for _, a := range conns[0] {
		if a.seg.Flags()&sdp.SegRDMA == 0 {
			t.Error("segment not marked RDMA")
		}
	}
	closeStreams(t, s, conns)
}
