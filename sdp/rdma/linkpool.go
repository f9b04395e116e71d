package rdma

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
)

// A link's pool of registered rings (docs/RDMA.md, "Links"). Creating a
// stream's segment (about 11 ms in an emulated guest) and registering its
// two rings in the link's protection domain (25-33 ms) were most of a
// stream's set-up on each host, where the link had already saved the
// handshake and the QP. So each end of a link keeps segments made and
// registered ahead, in its domain, and takes them back when their streams
// end: a stream-open then costs one message and no registration or
// segment creation on either host.
//
//   - Made ahead. After each take (or a miss) the engine's background
//     goroutine makes segments of the ring size last asked for until
//     poolReady are ready: the memfd (hidden), the engine's mapping,
//     fallocated before the registration pins it (recycle.go says why), the
//     registration of the stream side's rings (regStream: the ring the
//     peer writes with remote write access, the other for local reads),
//     and on the dialing end the application's mapping.
//   - Taken back. A settled stream (both ENDs sent and received, its last
//     work request completed: the peer writes there no more) gives its
//     segment back with its registration; it is held until the local
//     application let go of it in every process (its side's bit in the
//     header's slot_done, as for a connection's reused registration),
//     then, on the background goroutine, zeroed whole (no byte of the
//     old stream reaches the next one) and ready again.
//   - Who can write it. The registration stays the old stream's: its
//     address and rkey were told to the same peer process (the link's
//     other end), the only one whose QP is in the link's domain; that
//     peer could write the next stream's ring anyway. So reuse changes no
//     trust domain, and the peer's offsets are checked by its NIC against
//     the ring's own region as before.
//
// At most poolMax segments per link end are ready, held or being made;
// what does not fit is released as before. A broken link releases its
// pool with its streams' registrations.
type linkPool struct {
	wire   qpWire
	side   int // the local application's side of every stream of this end
	hidden int
	later  func(func()) // the engine's background goroutine; nil: at once
	logf   func(string, ...any)

	mu     sync.Mutex // the rest: the background goroutine fills and sweeps
	ring   uint32     // the ring size made ahead
	ready  []*poolSeg
	held   []*poolSeg
	making int
	closed bool
	taken  int // takes that found one ready (tests, logs)
	missed int // takes that did not
}

const (
	poolReady   = 2                // segments kept ready ahead of streams
	poolMax     = 8                // ready, held and being made, at most
	poolHeldAge = 10 * time.Second // a held segment whose application never lets go is released then
)

// poolSeg is a segment of a link's pool.
type poolSeg struct {
	pool   *linkPool
	ring   uint32
	mirror *sdp.Segment // the engine's mapping, registered as reg
	app    *sdp.Segment // dialing end: the application's mapping (its fd), until taken
	keep   int          // the engine's fd of the memfd (hidden, in the fork-close set)
	reg    qpReg
	regd   bool      // reg not released yet
	since  time.Time // held since
}

func newLinkPool(w qpWire, side, hidden int, later func(func()), logf func(string, ...any)) *linkPool {
	return &linkPool{wire: w, side: side, hidden: hidden, later: later, logf: logf}
}

// take returns a ready segment of ring bytes, or nil; either way more are
// made ahead. On the dialing end the application's mapping is the
// caller's from now on. Engine goroutine.
func (p *linkPool) take(ring uint32) *poolSeg {
	p.mu.Lock()
	var ps *poolSeg
	if !p.closed {
		p.ring = ring
		for i, s := range p.ready {
			if s.ring == ring {
				ps = s
				p.ready = append(p.ready[:i], p.ready[i+1:]...)
				break
			}
		}
		if ps != nil {
			p.taken++
		} else {
			p.missed++
		}
	}
	sweep := len(p.held) > 0
	p.mu.Unlock()
	if sweep {
		p.run(p.sweep)
	}
	p.fill()
	return ps
}

// prime makes segments of ring bytes ahead, unless the pool makes some
// already: a new link's, for the dials after its first ones. Engine
// goroutine.
func (p *linkPool) prime(ring uint32) {
	p.mu.Lock()
	if p.ring == 0 {
		p.ring = ring
	}
	p.mu.Unlock()
	p.fill()
}

// fill makes segments ahead on the background goroutine until poolReady
// are ready or being made.
func (p *linkPool) fill() {
	p.mu.Lock()
	n := 0
	if !p.closed && p.ring != 0 {
		n = min(poolReady-len(p.ready)-p.making, poolMax-len(p.ready)-len(p.held)-p.making)
	}
	n = max(n, 0)
	p.making += n
	ring := p.ring
	p.mu.Unlock()
	for range n {
		p.run(func() {
			ps, err := p.make(ring)
			p.mu.Lock()
			p.making--
			keep := err == nil && !p.closed && ps.ring == p.ring && len(p.ready)+len(p.held)+p.making < poolMax
			if keep {
				p.ready = append(p.ready, ps)
			}
			p.mu.Unlock()
			if err != nil {
				p.logf("rdma: a link's ring ahead of its streams: %v", err)
			} else if !keep {
				p.free(ps)
			}
		})
	}
}

// make makes and registers a segment for the pool; any goroutine.
func (p *linkPool) make(ring uint32) (*poolSeg, error) {
	seg, err := sdp.CreateSegment(ring)
	if err != nil {
		return nil, resourceError(err)
	}
	seg.FD = hideFD(seg.FD, p.hidden)
	_ = unix.Fallocate(seg.FD, 0, 0, int64(len(seg.Mem)))
	ps := &poolSeg{pool: p, ring: ring, keep: keepFD(seg.FD, p.hidden)}
	if ps.keep < 0 {
		seg.Close()
		return nil, resourceError(unix.EMFILE)
	}
	if p.side == sdp.SideClient {
		ps.app = seg
		if ps.mirror, err = seg.Mirror(); err != nil {
			p.free(ps)
			return nil, resourceError(err)
		}
	} else {
		// The server's hello sends a copy of keep (serveOpen).
		unix.Close(seg.FD)
		seg.FD = -1
		ps.mirror = seg
	}
	if ps.reg, err = p.wire.regStream(ps.mirror, p.side); err != nil {
		p.free(ps)
		return nil, resourceError(err)
	}
	ps.regd = true
	return ps, nil
}

// hold takes back the segment of a settled stream; it reports false when
// the pool does not keep it (the caller releases it as before). Engine
// goroutine.
func (p *linkPool) hold(ps *poolSeg) bool {
	p.mu.Lock()
	ok := !p.closed && ps.ring == p.ring && len(p.ready)+len(p.held)+p.making < poolMax
	if ok {
		ps.since = time.Now()
		p.held = append(p.held, ps)
	}
	p.mu.Unlock()
	if ok {
		p.run(p.sweep)
	}
	return ok
}

// sweep makes the held segments whose application let go ready again, and
// releases those held too long; background goroutine.
func (p *linkPool) sweep() {
	now := time.Now()
	var back, stale []*poolSeg
	p.mu.Lock()
	keep := p.held[:0]
	for _, ps := range p.held {
		switch {
		case p.closed || now.Sub(ps.since) > poolHeldAge:
			stale = append(stale, ps)
		case ps.mirror.LetGo()&(1<<uint(p.side)) != 0:
			back = append(back, ps)
		default:
			keep = append(keep, ps)
		}
	}
	clear(p.held[len(keep):])
	p.held = keep
	p.making += len(back) // neither held nor ready meanwhile
	p.mu.Unlock()
	for _, ps := range stale {
		p.free(ps)
	}
	for _, ps := range back {
		err := p.renew(ps)
		p.mu.Lock()
		p.making--
		ok := err == nil && !p.closed && len(p.ready)+len(p.held)+p.making < poolMax
		if ok {
			p.ready = append(p.ready, ps)
		}
		p.mu.Unlock()
		if err != nil {
			p.logf("rdma: reuse of a link's ring: %v", err)
		}
		if !ok {
			p.free(ps)
		}
	}
}

// renew zeroes a segment whose stream is over and, on the dialing end,
// maps it once more for the next application.
func (p *linkPool) renew(ps *poolSeg) error {
	clear(ps.mirror.Mem) // header and rings: the next stream starts from nothing
	if p.side != sdp.SideClient {
		return nil
	}
	fd, err := unix.FcntlInt(uintptr(ps.keep), unix.F_DUPFD_CLOEXEC, max(p.hidden, 0))
	if err != nil {
		return err
	}
	if ps.app, err = sdp.MapSegment(fd, ps.ring); err != nil {
		unix.Close(fd)
		return err
	}
	return nil
}

// free releases a segment of the pool: its registration, the engine's
// mapping, the application's if not taken, the fd. Any goroutine.
func (p *linkPool) free(ps *poolSeg) {
	if ps.regd {
		if err := p.wire.deregStream(ps.reg); err != nil {
			p.logf("rdma: a link's ring: deregister: %v", err)
		}
		ps.regd = false
	}
	if ps.mirror != nil {
		ps.mirror.Close()
		ps.mirror = nil
	}
	if ps.app != nil {
		ps.app.Close()
		ps.app = nil
	}
	closeKeep(ps.keep)
	ps.keep = -1
}

// discard releases a taken segment (on the background goroutine): its
// stream did not start.
func (p *linkPool) discard(ps *poolSeg) { p.run(func() { p.free(ps) }) }

// close releases every segment the pool has (the link broke: its QP is
// gone) and those made or swept later. Engine goroutine.
func (p *linkPool) close() {
	p.mu.Lock()
	p.closed = true
	segs := append(p.ready, p.held...)
	p.ready, p.held = nil, nil
	p.mu.Unlock()
	for _, ps := range segs {
		p.free(ps)
	}
}

// counts reports the segments ready and held, and the takes that found
// one and did not.
func (p *linkPool) counts() (ready, held, taken, missed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready), len(p.held), p.taken, p.missed
}

// hiddenBase is eng's hidden fd range (0 without an engine).
func hiddenBase(eng *Engine) int {
	if eng == nil {
		return 0
	}
	return eng.cfg.HiddenBase
}

func (p *linkPool) run(f func()) {
	if p.later != nil {
		p.later(f)
	} else {
		f()
	}
}
