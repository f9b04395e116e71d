package rdma

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/verbs"
)

// recycledIDs returns the memfd identities of the held segments and the
// reusable spares, and how many set-ups took a reused one.
func recycledIDs(tr *Transport) (held, ready [][2]uint64, reused int) {
	s := &tr.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		d, i := h.mirror.FileID()
		held = append(held, [2]uint64{d, i})
	}
	for _, sp := range s.recycled {
		d, i := sp.mirror.FileID()
		ready = append(ready, [2]uint64{d, i})
	}
	return held, ready, s.reused
}

// TestDeviceReuse: connections opened and closed one after another reuse
// their registered segments, each starting from zeroed rings, and carry
// bytes both ways (verified). A segment is reused only once its
// application let go and its QP is gone: one whose application set its
// let-go bit while the connection was still up is not held, and one whose
// application never let go (a holder killed before its close) is never
// reused. The engine's fds of the segments' memfds are in the fork-close
// set: a forked child holds none of them.
func TestDeviceReuse(t *testing.T) {
	tr, ip := startDevice(t)
	addr := netip.AddrPortFrom(ip, 20000+uint16(rand.IntN(20000)))
	lfd := listenBoth(t, tr, addr)
	defer unix.Close(lfd)
	const conns, stuckAt, earlyAt = 8, 2, 5
	var stuck [][2]uint64
	for i := 0; i < conns; i++ {
		if i > 0 && i != stuckAt+1 {
			// Both segments of the last connection come back.
			for j := 0; j < 1000; j++ {
				if _, ready, _ := recycledIDs(tr); len(ready) >= 2 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		cep, err := tr.Dial(addr, netip.AddrPortFrom(ip, 40005), 64<<10, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		apps := acceptBoth(t, lfd, addr, cep)
		var ids [][2]uint64
		for _, a := range apps {
			for r := range 2 {
				if k := slices.IndexFunc(a.seg.RingData(r), func(b byte) bool { return b != 0 }); k >= 0 {
					t.Errorf("connection %d side %d: ring %d byte %d is not zero at the start", i, a.side, r, k)
				}
			}
			d, ino := a.seg.FileID()
			ids = append(ids, [2]uint64{d, ino})
			if slices.Contains(stuck, ids[len(ids)-1]) {
				t.Errorf("connection %d reuses the segment of a connection whose application never let go", i)
			}
		}
		_ = tr.eng.Do(func() {
			for _, s := range tr.conns {
				if l, ok := s.link.(*verbsLink); ok && l.reuse != nil && !forkCloses(l.reuse.keep) {
					t.Errorf("connection %d: the engine's fd %d of a segment is not closed in a forked child", s.id, l.reuse.keep)
				}
			}
		})
		exchangeBoth(t, apps, 256<<10, uint64(60+i), 30*time.Second)
		switch i {
		case stuckAt:
			stuck = ids
		case earlyAt:
			for _, a := range apps {
				a.seg.SetLetGo(a.side)
			}
			_ = tr.eng.Do(func() { tr.eng.background(tr.sweep) })
			time.Sleep(200 * time.Millisecond)
			held, ready, _ := recycledIDs(tr)
			for _, id := range ids {
				if slices.Contains(held, id) || slices.Contains(ready, id) {
					t.Errorf("connection %d: its segment is held for reuse while the connection is up", i)
				}
			}
		default:
			for _, a := range apps {
				a.seg.SetLetGo(a.side) // as the C data path does when it unmaps
			}
		}
		apps[0].close(false)
		apps[1].close(false)
	}
	_, ready, reused := recycledIDs(tr)
	if want := 2 * (conns - 2); reused != want {
		t.Errorf("%d set-ups took a reused segment, want %d (two per connection but the first and the one after the stuck one)", reused, want)
	}
	tr.spares.mu.Lock()
	for _, sp := range tr.spares.recycled {
		if !forkCloses(sp.keep) {
			t.Errorf("a reusable segment's fd %d is not closed in a forked child", sp.keep)
		}
	}
	tr.spares.mu.Unlock()
	t.Logf("reused %d, %d ready at the end", reused, len(ready))
}

// TestSpareAhead: what a dial may skip of a spare's resolution ahead of
// it depends on its source, its destination and the resolution's age.
func TestSpareAhead(t *testing.T) {
	src, other := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	dst := netip.MustParseAddrPort("10.0.0.9:80")
	now := time.Now()
	id := &verbs.CMID{}
	for _, c := range []struct {
		name string
		sp   spare
		src  netip.Addr
		dst  netip.AddrPort
		want aheadState
	}{
		{"no id", spare{src: src, dst: dst}, src, dst, aheadNone},
		{"bound only", spare{id: id, src: src}, src, dst, aheadNone},
		{"address pending", spare{id: id, src: src, dst: dst}, src, dst, aheadAddr},
		{"route pending", spare{id: id, src: src, dst: dst, addrDone: true}, src, dst, aheadRoute},
		{"resolved", spare{id: id, src: src, dst: dst, addrDone: true, routed: now.Add(-time.Second)}, src, dst, aheadDone},
		{"resolved too long ago", spare{id: id, src: src, dst: dst, addrDone: true, routed: now.Add(-routeTTL)}, src, dst, aheadStale},
		{"another port", spare{id: id, src: src, dst: dst, addrDone: true, routed: now}, src, netip.AddrPortFrom(dst.Addr(), 81), aheadStale},
		{"another source", spare{id: id, src: src, dst: dst}, other, dst, aheadStale},
	} {
		if got := c.sp.ahead(c.src, c.dst, now); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestDeviceResolveAhead: a client's reused segment comes back with its
// id resolving the destination of the dial that used it last, and the
// next dials there skip what it resolved; a resolution no dial took within
// routeTTL gives way to an id only bound (with its QP), which the next
// dial uses; a dial to another port of the same host still connects.
// Every connection carries bytes both ways (verified).
func TestDeviceResolveAhead(t *testing.T) {
	srv, ip := startDevice(t)
	cli, _ := startDevice(t)
	base := 20000 + uint16(rand.IntN(20000))
	addrs := []netip.AddrPort{netip.AddrPortFrom(ip, base), netip.AddrPortFrom(ip, base+1)}
	lfds := make([]int, len(addrs))
	for i, a := range addrs {
		lfds[i] = listenBoth(t, srv, a)
		defer unix.Close(lfds[i])
	}
	counts := func() (c [aheadStale + 1]int, withQP int) {
		cli.spares.mu.Lock()
		defer cli.spares.mu.Unlock()
		return cli.spares.ahead, cli.spares.withQP
	}
	// waitSpare waits until cli has a reusable spare whose id is in state
	// ok (for the first destination).
	waitSpare := func(what string, ok func(sp *spare) bool) {
		t.Helper()
		for i := 0; i < 1000; i++ {
			found := false
			_ = cli.eng.Do(func() {
				cli.spares.mu.Lock()
				defer cli.spares.mu.Unlock()
				for _, sp := range cli.spares.recycled {
					found = found || ok(sp)
				}
			})
			if found {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no reusable spare %s within 10 s", what)
	}
	conn := func(i int, to int) {
		t.Helper()
		cep, err := cli.Dial(addrs[to], netip.AddrPortFrom(ip, 0), 64<<10, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		apps := acceptBoth(t, lfds[to], addrs[to], cep)
		exchangeBoth(t, apps, 64<<10, uint64(90+i), 30*time.Second)
		for _, a := range apps {
			a.seg.SetLetGo(a.side) // as the C data path does when it unmaps
		}
		apps[0].close(false)
		apps[1].close(false)
	}
	resolving := func(sp *spare) bool { return sp.id != nil && sp.dst == addrs[0] }
	const rounds = 4
	for i := 0; i < rounds; i++ {
		if i > 0 {
			waitSpare("resolving ahead", resolving)
		}
		conn(i, 0)
	}
	c, _ := counts()
	if n := c[aheadAddr] + c[aheadRoute] + c[aheadDone]; n != rounds-1 {
		t.Errorf("%d dials found their destination resolving or resolved ahead (%v), want %d", n, c, rounds-1)
	}
	// Unused for routeTTL: an id only bound again, which the next dial
	// resolves itself, on the spare's QP.
	waitSpare("resolving ahead", resolving)
	time.Sleep(routeTTL)
	waitSpare("bound only again", func(sp *spare) bool {
		return sp.id != nil && sp.qp != nil && !sp.dst.IsValid() && sp.aheadFor == addrs[0]
	})
	before, qp := counts()
	conn(rounds, 0)
	after, qp2 := counts()
	if after[aheadNone] != before[aheadNone]+1 || qp2 != qp+1 {
		t.Errorf("the dial after the resolution expired: ahead counts %v -> %v, links on a spare's QP %d -> %d; want one more dial that resolved itself on the spare's QP", before, after, qp, qp2)
	}
	// Another port of the same host: the spare's id resolved the first
	// one; the dial makes its own.
	waitSpare("resolving ahead", resolving)
	conn(rounds+1, 1)
	final, _ := counts()
	if final[aheadStale] != after[aheadStale]+1 {
		t.Errorf("the dial to another port: ahead counts %v -> %v, want one more that found the spare's id resolved for another destination", after, final)
	}
	t.Logf("dials by resolution ahead (none, address, route, done, stale): %v", final)
}
