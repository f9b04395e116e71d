package rdma

import (
	"sync"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// A spare is the memory of a connection made ahead of time: a new segment
// (its memfd in the hidden range), a second mapping of it registered with
// a device, and a CQ. Registering a connection's rings (2 MiB with the
// default ring size) was the largest step of a set-up on both hosts (12-40
// ms each in an emulated guest, where rsocket registers 256 KiB); a
// process that set up one RDMA connection keeps one spare ready, made on
// the engine's background goroutine, so that its next dial or accept does
// not wait for the registration. The spare counts against the locked-memory
// limit like a connection (README: ulimit -l). A spare is never a used
// segment: its memory has not been seen by any application.
type spare struct {
	dev    *device
	ring   uint32
	seg    *sdp.Segment // fd for the application (and the client's C mapping)
	mirror *sdp.Segment // the engine's mapping, registered as mr
	cq     *verbs.CQ
	mr     *verbs.MR
}

// makeSpare makes a spare for rings of ring bytes on dev; any goroutine
// (libibverbs is thread-safe).
func makeSpare(dev *device, ring uint32, hiddenBase int) (*spare, error) {
	seg, err := sdp.CreateSegment(ring)
	if err != nil {
		return nil, err
	}
	seg.FD = hideFD(seg.FD, hiddenBase)
	mirror, err := seg.Mirror()
	if err != nil {
		seg.Close()
		return nil, err
	}
	sp := &spare{dev: dev, ring: ring, seg: seg, mirror: mirror}
	if sp.cq, err = dev.ctx.CreateCQ(cqDepth, dev.cc, 0); err != nil {
		sp.close()
		return nil, err
	}
	if sp.mr, err = regRings(dev.pd, mirror); err != nil {
		sp.close()
		return nil, err
	}
	return sp, nil
}

// close releases what the spare still holds.
func (sp *spare) close() {
	sp.closeRegistration()
	if sp.mirror != nil {
		sp.mirror.Close()
	}
	if sp.seg != nil {
		sp.seg.Close()
	}
}

// closeRegistration releases the MR and the CQ only (the segment is used
// on another device).
func (sp *spare) closeRegistration() {
	if sp.mr != nil {
		sp.mr.Close()
		sp.mr = nil
	}
	if sp.cq != nil {
		sp.cq.Close()
		sp.cq = nil
	}
}

// spares holds a transport's one spare.
type spares struct {
	mu      sync.Mutex
	ready   *spare
	making  bool
	stopped bool
	taken   int // spares used, for tests
}

// take returns the spare if it has rings of ring bytes, else nil; any
// goroutine.
func (s *spares) take(ring uint32) *spare {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.ready
	if sp == nil || sp.ring != ring {
		return nil
	}
	s.ready = nil
	s.taken++
	return sp
}

// want has the engine's background goroutine make a spare for dev if there
// is none. Engine goroutine only.
func (t *Transport) wantSpare(dev *device, ring uint32) {
	s := &t.spares
	s.mu.Lock()
	if s.ready != nil || s.making || s.stopped || dev.removed {
		s.mu.Unlock()
		return
	}
	s.making = true
	s.mu.Unlock()
	t.eng.background(func() {
		sp, err := makeSpare(dev, ring, t.cfg.HiddenBase)
		if err != nil {
			s.mu.Lock()
			s.making = false
			s.mu.Unlock()
			t.cfg.Logf("rdma: no spare connection memory: %v", err)
			return
		}
		// Installed on the engine goroutine, which knows whether the
		// device is still there.
		if t.eng.post(func() { t.installSpare(sp) }) != nil {
			sp.close()
		}
	})
}

// installSpare makes sp the spare, unless its device is going away or the
// transport stopped. Engine goroutine only.
func (t *Transport) installSpare(sp *spare) {
	s := &t.spares
	s.mu.Lock()
	s.making = false
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
}
