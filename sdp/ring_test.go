package sdp_test

import (
	"bytes"
	"testing"

	"github.com/osfproject/osf/sdp"
	"golang.org/x/sys/unix"
)

// guarded maps size bytes with an inaccessible page on each side, so that
// an access outside the ring faults (and fails the test or the fuzzer)
// instead of silently touching other memory.
func guarded(t testing.TB, size int) []byte {
	t.Helper()
	page := unix.Getpagesize()
	m, err := unix.Mmap(-1, 0, size+2*page, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	ring := m[page : page+size]
	if err := unix.Mprotect(ring, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	return ring
}

func TestRingUsed(t *testing.T) {
	for _, tc := range []struct {
		head, tail uint64
		size       uint32
		want       int64
	}{
		{0, 0, 4096, 0},
		{4096, 0, 4096, 4096},
		{4097, 0, 4096, -1},
		{0, 1, 4096, -1}, // tail ahead of head
		{1 << 63, 1<<63 - 10, 4096, 10},
		{5, ^uint64(0) - 4, 4096, 10}, // across the 64-bit wrap
	} {
		if got := sdp.RingUsed(tc.head, tc.tail, tc.size); got != tc.want {
			t.Errorf("RingUsed(%d, %d, %d) = %d, want %d", tc.head, tc.tail, tc.size, got, tc.want)
		}
	}
}

func TestRingRoundTrip(t *testing.T) {
	ring := guarded(t, 4096)
	src := make([]byte, 3000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, pos := range []uint64{0, 1, 4095, 2000, 1<<40 + 4000} {
		sdp.RingCopyIn(ring, pos, src)
		dst := make([]byte, len(src))
		sdp.RingCopyOut(ring, pos, dst)
		if !bytes.Equal(src, dst) {
			t.Fatalf("round trip at %d differs", pos)
		}
	}
}

// FuzzRing drives the ring code as the data path does with positions a
// hostile peer chose: whatever head and tail say, a consumer copies at
// most RingUsed bytes and a producer at most the free room, and no access
// leaves the ring (guard pages fault otherwise).
func FuzzRing(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint16(100), uint8(0))
	f.Add(uint64(1<<63), uint64(5), uint16(4096), uint8(3))
	f.Add(^uint64(0), uint64(0), uint16(65535), uint8(9))
	f.Fuzz(func(t *testing.T, head, tail uint64, want uint16, shift uint8) {
		size := 4096 << (shift % 5) // 4K..64K
		ring := guarded(t, size)
		used := sdp.RingUsed(head, tail, uint32(size))
		if used < 0 {
			return // the data path resets the connection here
		}
		if used > int64(size) {
			t.Fatalf("used %d > size %d", used, size)
		}
		n := min(int(want), int(used))
		dst := make([]byte, n)
		sdp.RingCopyOut(ring, tail, dst)
		room := size - int(used)
		src := make([]byte, min(int(want), room))
		sdp.RingCopyIn(ring, head, src)
		if span := sdp.RingSpan(uint32(size-1), head, int(want)); span > size || span > int(want) || span < 0 {
			t.Fatalf("span %d for want %d size %d", span, want, size)
		}
	})
}
