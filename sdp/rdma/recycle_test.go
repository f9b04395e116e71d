package rdma

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
