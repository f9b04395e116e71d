package rdma

import (
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// Registered rings are reused. A connection's segment, the engine's
// registered mapping of it and the registration (ringMRs) outlive the
// connection: when its stream is released the link destroys the QP and the
// CQ but keeps the registration, and the segment waits (held) until the
// local application's side let go of it in every process (the header's
// slot_done bit of that side, set by the C data path where it unmaps the
// segment, preload/conn.c osf_conn_destroy, as for a slot of an shm
// region). Then, on the engine's background goroutine, the whole segment is
// zeroed (no byte of the old connection reaches the next one), gets a new
// CQ, and after a dial an rdma_cm id bound to the dial's source address
// with its QP, and becomes a spare for the next connection with the same
// peer host, ring size and device. Set-up then skips creating, faulting in,
// pinning and registering the rings, and teardown skips deregistering and
// unmapping them.
//
// Reset-safe: a segment is held only once its QP is destroyed, so the old
// peer cannot write into it through that connection. Its rkey and its
// protection domain stay for the next connection, whose QP is made in
// that domain: the old peer knows the rkey, but none of its QPs into this
// process is in the domain (each segment has its own: ringMRs), so the
// NIC refuses its writes there. A segment is reused only for a
// connection to or from the same peer address (docs/RDMA.md).
//
// Fork: the engine's fd of each segment's memfd (keep) is in the fork-close
// set, and a forked child never runs the parent's Go code, so a child never
// hands out its parent's rings.
const (
	heldMax     = 4                // segments waiting for their application to let go
	heldAge     = 10 * time.Second // after which one is released as before
	recycledMax = 4                // zeroed spares ready for reuse
)

// held is a released connection's registered segment waiting for the local
// application to let go of it.
type held struct {
	dev    *device
	ring   uint32
	mirror *sdp.Segment
	mr     *ringMRs
	keep   int            // the engine's fd of the memfd
	side   int            // the application's side
	peer   netip.Addr     // the remote host
	src    netip.Addr     // a dial's source address, else the zero Addr
	dst    netip.AddrPort // a dial's destination, else the zero AddrPort
	since  time.Time
}

// reuse records how a link's segment may be reused once released: the
// engine's own fd of its memfd (hidden, in the fork-close set) and the
// remote host.
type reuse struct {
	keep int
	peer netip.Addr
	src  netip.Addr     // a dial's source address
	dst  netip.AddrPort // a dial's destination
}

// keepFD returns a hidden close-on-exec duplicate of a segment's memfd for
// its reuse, in the fork-close set, or -1.
func keepFD(fd, hiddenBase int) int {
	if fd < 0 {
		return -1
	}
	k, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, max(hiddenBase, 0))
	if err != nil {
		return -1
	}
	forkCloseAdd(k)
	return k
}

// closeKeep closes a keepFD fd (not -1).
func closeKeep(fd int) {
	if fd >= 0 {
		forkCloseDel(fd)
		unix.Close(fd)
	}
}

// free releases h as a connection's release did before reuse: the
// registration, the mapping, the fd.
func (h *held) free() {
	h.mr.Close()
	h.mirror.Close()
	closeKeep(h.keep)
}

// hold takes a released link's registered segment (its QP and CQ are
// destroyed); any goroutine. It returns false when the pool is stopped or
// full (the caller frees it).
func (t *Transport) hold(h *held) bool {
	s := &t.spares
	s.mu.Lock()
	ok := !s.stopped && !s.lost[h.dev] && len(s.held) < heldMax
	if ok {
		s.held = append(s.held, h)
	}
	s.mu.Unlock()
	return ok
}

// sweep turns held segments whose application let go into spares, and
// releases those held too long; run on the engine's background goroutine
// (it zeroes rings and makes CQs and QPs).
func (t *Transport) sweep() {
	s := &t.spares
	now := time.Now()
	var ready, stale []*held
	s.mu.Lock()
	keep := s.held[:0]
	for _, h := range s.held {
		switch {
		case h.mirror.LetGo()&(1<<uint(h.side)) != 0:
			ready = append(ready, h)
		case now.Sub(h.since) > heldAge || s.stopped || s.lost[h.dev]:
			stale = append(stale, h)
		default:
			keep = append(keep, h)
		}
	}
	clear(s.held[len(keep):])
	s.held = keep
	s.mu.Unlock()
	for _, h := range stale {
		h.free()
	}
	for _, h := range ready {
		sp, err := t.respare(h)
		if err != nil {
			t.cfg.Logf("rdma: reuse of connection memory: %v", err)
			h.free()
			continue
		}
		if t.eng.post(func() { t.installRecycled(sp) }) != nil {
			sp.close()
		}
	}
}

// respare makes h a spare: the segment zeroed, a new CQ, a mapping and fd
// for the next application, and after a dial an id bound to its source
// address with the QP.
func (t *Transport) respare(h *held) (*spare, error) {
	clear(h.mirror.Mem) // header and rings: the next connection starts from nothing
	fd, err := unix.FcntlInt(uintptr(h.keep), unix.F_DUPFD_CLOEXEC, max(t.cfg.HiddenBase, 0))
	if err != nil {
		return nil, err
	}
	seg, err := sdp.MapSegment(fd, h.ring)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	sp := &spare{dev: h.dev, ring: h.ring, seg: seg, mirror: h.mirror, mr: h.mr, keep: h.keep, peer: h.peer}
	if sp.cq, sp.cc, err = newCQ(h.dev, t.cfg.HiddenBase, cqDepth); err != nil {
		sp.mirror, sp.mr, sp.keep = nil, nil, -1 // h.free releases them
		seg.Close()
		return nil, err
	}
	if h.src.IsValid() && t.ch != nil {
		if err := sp.bindQP(t.ch, h.src); err != nil {
			t.cfg.Logf("rdma: reused connection memory without a queue pair: %v", err)
		} else {
			sp.dst, sp.aheadFor = h.dst, h.dst // resolved once installed (prepare)
		}
	}
	return sp, nil
}

// prepare starts resolving, on a reused spare's id, the address and the
// route of the destination of the dial that used the segment last: the
// next dial to it from the same source then skips both (aheadDone: two
// passes through the connection manager's events and the engine, 3-9 ms
// of a dial in an emulated guest). A spare whose resolution fails, or is
// not taken within routeTTL of its end, goes back to an id only bound
// (expireAhead); one taken by a dial elsewhere loses its id (the dial
// makes its own). Engine goroutine only.
func (t *Transport) prepare(sp *spare) {
	if sp.id == nil || !sp.dst.IsValid() {
		sp.dst = netip.AddrPort{}
		return
	}
	for id, o := range t.resolving {
		if o.id != id { // closed, or taken by a dial, meanwhile
			delete(t.resolving, id)
		}
	}
	if err := sp.id.ResolveAddr(netip.AddrPortFrom(sp.src, 0), sp.dst, verbs.DefaultResolveTimeout); err != nil {
		t.cfg.Logf("rdma: resolving %s ahead of the next dial: %v", sp.dst, err)
		sp.dst = netip.AddrPort{} // the id stays bound: usable as before
		return
	}
	t.resolving[sp.id] = sp
}

// aheadEvent advances a spare's resolution ahead of a dial (prepare).
// Engine goroutine only.
func (t *Transport) aheadEvent(sp *spare, ev *verbs.Event) {
	id := ev.ID
	if sp.id != id {
		delete(t.resolving, id)
		return
	}
	fail := func(err error) {
		delete(t.resolving, id)
		t.cfg.Logf("rdma: resolving %s ahead of the next dial: %v", sp.dst, err)
		if !t.expireAhead(sp, id) && sp.id == id {
			sp.closeID() // a dial took the spare: it makes its own id
		}
	}
	if err := ev.Err(); err != nil {
		fail(err)
		return
	}
	switch ev.Type {
	case verbs.EventAddrResolved:
		sp.addrDone = true
		if err := id.ResolveRoute(verbs.DefaultResolveTimeout); err != nil {
			fail(err)
		}
	case verbs.EventRouteResolved:
		delete(t.resolving, id)
		sp.routed = time.Now()
		t.eng.after(routeTTL, func() { t.expireAhead(sp, id) })
	}
}

// expireAhead takes back a reusable spare whose id resolved (or failed to
// resolve) a destination that no dial took within routeTTL, and gives it,
// on the background goroutine, a new id only bound to its source address
// and a QP, as after any dial. A spare a dial took meanwhile, or that was
// released, is left alone (it returns false). Engine goroutine only.
func (t *Transport) expireAhead(sp *spare, id *verbs.CMID) bool {
	s := &t.spares
	s.mu.Lock()
	i := slices.Index(s.recycled, sp)
	if i < 0 || sp.id != id {
		s.mu.Unlock()
		return false
	}
	s.recycled = slices.Delete(s.recycled, i, i+1)
	s.mu.Unlock()
	src := sp.src
	sp.closeID()
	t.eng.background(func() {
		if err := sp.bindQP(t.ch, src); err != nil {
			t.cfg.Logf("rdma: reused connection memory without a queue pair: %v", err)
		}
		if t.eng.post(func() { t.installRecycled(sp) }) != nil {
			sp.close()
		}
	})
	return true
}

// installRecycled adds sp to the reusable spares, unless its device is
// going away, the transport stopped or there are enough. Engine goroutine.
func (t *Transport) installRecycled(sp *spare) {
	s := &t.spares
	s.mu.Lock()
	keep := !s.stopped && !sp.dev.removed && len(s.recycled) < recycledMax
	s.mu.Unlock()
	if !keep {
		sp.close()
		return
	}
	t.prepare(sp) // before any dial can take it
	s.mu.Lock()
	s.recycled = append(s.recycled, sp)
	s.mu.Unlock()
}

// takeRecycled returns a reusable spare for a connection with peer and
// rings of ring bytes, or nil; for a dial to dst, one resolving dst ahead
// (prepare) first. s.mu held.
func (s *spares) takeRecycled(ring uint32, peer netip.Addr, dst netip.AddrPort) *spare {
	at := -1
	for i, sp := range s.recycled {
		if sp.ring == ring && sp.peer == peer {
			if at < 0 || sp.aheadFor == dst {
				at = i
			}
			if sp.aheadFor == dst {
				break
			}
		}
	}
	if at < 0 {
		return nil
	}
	sp := s.recycled[at]
	s.recycled = slices.Delete(s.recycled, at, at+1)
	s.reused++
	return sp
}

// dropRecycled releases every held segment and reusable spare (the device
// goes away, or the transport stops); with dev, no more are held for dev.
func (t *Transport) dropRecycled(dev *device) {
	s := &t.spares
	s.mu.Lock()
	if dev != nil {
		if s.lost == nil {
			s.lost = make(map[*device]bool)
		}
		s.lost[dev] = true
	}
	held, recycled := s.held, s.recycled
	s.held, s.recycled = nil, nil
	s.mu.Unlock()
	for _, h := range held {
		h.free()
	}
	for _, sp := range recycled {
		sp.close()
	}
}
