package rdma

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// A spare is the memory of a connection made ahead of time: a new segment
// (its memfd in the hidden range), a second mapping of it registered with
// a device in a protection domain of its own (ringMRs), and a CQ.
// Registering a connection's rings (2 MiB with the default ring size) was
// the largest step of a set-up on both hosts (12-40 ms each in an
// emulated guest, where rsocket registers 256 KiB); a
// process that set up one RDMA connection keeps one spare ready, made on
// the engine's background goroutine, so that its next dial or accept does
// not wait for the registration. The spare counts against the locked-memory
// limit like a connection (README, Limits: ulimit -l). A spare is never a used
// segment: its memory has not been seen by any application.
//
// A spare made after a dial also holds a connection manager id bound to
// the dial's source address (port 0: the kernel picks one) and the QP on
// it: creating a QP (2-16 ms, up to hundreds under load) needs an id bound
// to a device, which a bound id is before its address is resolved. The
// next dial from that address resolves its destination on this id; a dial
// from another address, or an accept, closes them and makes its own.
type spare struct {
	dev    *device
	ring   uint32
	seg    *sdp.Segment // fd for the application (and the client's C mapping)
	mirror *sdp.Segment // the engine's mapping, registered as mr
	cq     *verbs.CQ
	cc     *verbs.CompChannel // the CQ's own (verbslink.go newCQ)
	mr     *ringMRs
	src    netip.Addr  // id's address; the zero Addr without an id
	id     *verbs.CMID // nil, or bound to src on dev, until a dial takes it
	qp     *verbs.QP   // on id (also once a dial took id), until a link takes it
	keep   int         // the engine's fd of seg's memfd, for reuse (recycle.go), or -1
	peer   netip.Addr  // reused: only for this remote host; new: the zero Addr

	// Reused after a dial, the id also resolves that dial's destination
	// ahead of the next one (prepare): dst, or the zero AddrPort when it
	// does not; whether the address is resolved, and when the route was
	// (zero until then). Engine goroutine only, once the spare is made.
	dst      netip.AddrPort
	addrDone bool
	routed   time.Time
	aheadFor netip.AddrPort // dst as made (never changed after: read under spares.mu)
}

// aheadState is how much of a dial's resolution a spare's id has done
// ahead of it (prepare).
type aheadState int

const (
	aheadNone  aheadState = iota // the id is only bound (or there is none): the dial resolves
	aheadAddr                    // the address is being resolved for the dial's destination
	aheadRoute                   // the address is resolved, the route is being resolved
	aheadDone                    // both are resolved, within routeTTL
	aheadStale                   // resolved for another destination or too long ago: the id is useless
)

// ahead says how much of a dial from src to dst the spare's id has
// resolved ahead of it. Engine goroutine only.
func (sp *spare) ahead(src netip.Addr, dst netip.AddrPort, now time.Time) aheadState {
	switch {
	case sp.id == nil || !sp.dst.IsValid():
		return aheadNone
	case sp.src != src || sp.dst != dst:
		return aheadStale
	case !sp.routed.IsZero() && now.Sub(sp.routed) >= routeTTL:
		return aheadStale
	case !sp.routed.IsZero():
		return aheadDone
	case sp.addrDone:
		return aheadRoute
	}
	return aheadAddr
}

// makeSpare makes a spare for rings of ring bytes on dev, with an id bound
// to src and its QP when src is valid; any goroutine (libibverbs and
// librdmacm are thread-safe). Without the id and QP (bind or create
// failed: logged by logf) the spare is still a spare.
func makeSpare(dev *device, ring uint32, hiddenBase int, ch *verbs.EventChannel, src netip.Addr, logf func(string, ...any)) (*spare, error) {
	seg, err := sdp.CreateSegment(ring)
	if err != nil {
		return nil, err
	}
	seg.FD = hideFD(seg.FD, hiddenBase)
	// The registration pins the pages holding the process's mmap lock,
	// which the program's munmap (a close) and page faults wait for:
	// allocating them first, which takes no such lock, shortens that.
	_ = unix.Fallocate(seg.FD, 0, 0, int64(len(seg.Mem)))
	mirror, err := seg.Mirror()
	if err != nil {
		seg.Close()
		return nil, err
	}
	sp := &spare{dev: dev, ring: ring, seg: seg, mirror: mirror, keep: keepFD(seg.FD, hiddenBase)}
	if sp.cq, sp.cc, err = newCQ(dev, hiddenBase, cqDepth); err != nil {
		sp.close()
		return nil, err
	}
	if sp.mr, err = regRings(dev.ctx, mirror); err != nil {
		sp.close()
		return nil, err
	}
	if src.IsValid() && ch != nil {
		if err := sp.bindQP(ch, src); err != nil {
			logf("rdma: spare connection memory without a queue pair: %v", err)
		}
	}
	return sp, nil
}

// bindQP gives the spare an id bound to src on its device and the QP on
// it, in the segment's protection domain.
func (sp *spare) bindQP(ch *verbs.EventChannel, src netip.Addr) error {
	id, err := ch.CreateID()
	if err != nil {
		return err
	}
	if err := id.Bind(netip.AddrPortFrom(src, 0)); err != nil {
		id.Close()
		return err
	}
	ctx, err := id.Context()
	if err == nil && ctx != sp.dev.ctx {
		err = fmt.Errorf("rdma: %s is not on device %s", src, sp.dev.ctx.Name())
	}
	if err != nil {
		id.Close()
		return err
	}
	qp, err := id.CreateQP(sp.mr.pd, qpConfig(sp.cq))
	if err != nil {
		id.Close()
		return err
	}
	sp.src, sp.id, sp.qp = src, id, qp
	return nil
}

// takeID returns the spare's id (with its QP, which stays the spare's
// until a link takes it) for a dial from src, or nil when it has none for
// src (an id it has is closed).
func (sp *spare) takeID(src netip.Addr) *verbs.CMID {
	if sp.id == nil {
		return nil
	}
	if src != sp.src {
		sp.closeID()
		return nil
	}
	id := sp.id
	sp.id = nil
	return id
}

// closeID closes the QP and the id, if the spare still has them (and
// forgets what the id resolved).
func (sp *spare) closeID() {
	sp.dst, sp.addrDone, sp.routed = netip.AddrPort{}, false, time.Time{}
	if sp.qp != nil {
		sp.qp.Close()
		sp.qp = nil
	}
	if sp.id != nil {
		sp.id.Close()
		sp.id = nil
	}
}

// close releases what the spare still holds.
func (sp *spare) close() {
	sp.closeRegistration()
	closeKeep(sp.keep)
	sp.keep = -1
	if sp.mirror != nil {
		sp.mirror.Close()
	}
	if sp.seg != nil {
		sp.seg.Close()
	}
}

// closeRegistration releases the QP and the id (if the spare still has
// them), the MR and the CQ: all but the segment (used on another device).
func (sp *spare) closeRegistration() {
	sp.closeID()
	if sp.mr != nil {
		sp.mr.Close()
		sp.mr = nil
	}
	if sp.cq != nil {
		closeCQ(sp.cq, sp.cc)
		sp.cq, sp.cc = nil, nil
	}
}

// spares holds a transport's one spare.
type spares struct {
	mu      sync.Mutex
	ready   *spare
	making  bool
	made    chan struct{} // closed when the one being made is ready or failed
	stopped bool
	taken   int                 // spares used, for tests
	withQP  int                 // links that took a spare's QP, for tests
	ahead   [aheadStale + 1]int // dials with a spare, by what its id had resolved ahead of them, for tests

	held     []*held          // released segments waiting for their application (recycle.go)
	recycled []*spare         // reused segments ready, each for one peer host
	reused   int              // set-ups that took one, for tests
	lost     map[*device]bool // removed devices: nothing more is held for them
}

// spareWait bounds how long a dial waits for the spare being made (rather
// than making the same memory again, in parallel with it).
const spareWait = 200 * time.Millisecond

// takeWaiting is take, but when a spare is being made (and no reused
// one is there for peer) it first waits for it, at most spareWait; any
// goroutine but the engine's (which installs it).
func (s *spares) takeWaiting(ring uint32, peer netip.Addr, dst netip.AddrPort) *spare {
	s.mu.Lock()
	if sp := s.takeRecycled(ring, peer, dst); sp != nil {
		s.mu.Unlock()
		return sp
	}
	made := s.made
	wait := s.ready == nil && s.making && made != nil
	s.mu.Unlock()
	if wait {
		t := time.NewTimer(spareWait)
		select {
		case <-made:
		case <-t.C:
		}
		t.Stop()
	}
	return s.take(ring, peer, dst)
}

// doneMaking records that the spare being made is ready or failed. s.mu
// held.
func (s *spares) doneMaking() {
	s.making = false
	if s.made != nil {
		close(s.made)
		s.made = nil
	}
}

// take returns a reused spare for peer with rings of ring bytes (for a
// dial to dst, one resolving dst ahead first; an accept passes the zero
// AddrPort), else the new spare if it has rings of ring bytes, else nil;
// any goroutine.
func (s *spares) take(ring uint32, peer netip.Addr, dst netip.AddrPort) *spare {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp := s.takeRecycled(ring, peer, dst); sp != nil {
		return sp
	}
	sp := s.ready
	if sp == nil || sp.ring != ring {
		return nil
	}
	s.ready = nil
	s.taken++
	return sp
}

// wantSpare has the engine's background goroutine look at the held
// segments (recycle.go) and make a spare for dev if there is none, with
// an id bound to src and a QP if src is valid (after a dial from src).
// Engine goroutine only.
func (t *Transport) wantSpare(dev *device, ring uint32, src netip.Addr) {
	s := &t.spares
	s.mu.Lock()
	sweep := len(s.held) > 0 // some may have been let go since their release
	s.mu.Unlock()
	if sweep {
		t.eng.background(t.sweep)
	}
	s.mu.Lock()
	if s.ready != nil || s.making || s.stopped || dev.removed {
		s.mu.Unlock()
		return
	}
	s.making = true
	s.made = make(chan struct{})
	s.mu.Unlock()
	t.eng.background(func() {
		sp, err := makeSpare(dev, ring, t.cfg.HiddenBase, t.ch, src, t.cfg.Logf)
		if err != nil {
			s.mu.Lock()
			s.doneMaking()
			s.mu.Unlock()
			t.cfg.Logf("rdma: no spare connection memory: %v", err)
			return
		}
		// Installed on the engine goroutine, which knows whether the
		// device is still there.
		if t.eng.post(func() { t.installSpare(sp) }) != nil {
			s.mu.Lock()
			s.doneMaking()
			s.mu.Unlock()
			sp.close()
		}
	})
}

// installSpare makes sp the spare, unless its device is going away or the
// transport stopped. Engine goroutine only.
func (t *Transport) installSpare(sp *spare) {
	s := &t.spares
	s.mu.Lock()
	s.doneMaking()
	keep := s.ready == nil && !s.stopped && !sp.dev.removed
	if keep {
		s.ready = sp
	}
	s.mu.Unlock()
	if !keep {
		sp.close()
	}
}

// dropSpare releases the spare (a device goes away, or the transport
// stops); with stop, no other is made.
func (t *Transport) dropSpare(stop bool) {
	s := &t.spares
	s.mu.Lock()
	sp := s.ready
	s.ready = nil
	if stop {
		s.stopped = true
	}
	s.mu.Unlock()
	if sp != nil {
		sp.close()
	}
	if stop {
		t.dropRecycled(nil)
	}
}
