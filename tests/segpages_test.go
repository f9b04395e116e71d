package tests

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// TestSmallExchangeTouchesOnePage: a small request and its reply allocate
// one page of the connection's segment, the shared page that holds the
// header and the first bytes of both rings (sdp/segment.h, layout 3; a
// page costs ~5.7 µs to allocate, zero, map and free, issue 12). Before,
// they allocated three: the header page and each ring's first page. Up to
// OSF_SEG_RING0_SHARED (1664) bytes each way fit; a larger reply takes
// ring 1's next page too. OSF_STRICT=1: a fallback fails the program
// instead of counting no segment. A kept-alive exchange stays in the same
// pages.
func TestSmallExchangeTouchesOnePage(t *testing.T) {
	for _, tc := range []struct{ req, reply, rounds, pages int }{
		{64, 64, 1, 1},
		{1664, 1664, 1, 1},
		{64, 1665, 1, 2},
		// Kept alive: 1 MB one way and 3 MB the other, in exchanges
		// that each find the ring empty, start again at the ring's
		// base (segment.h, "bases"): the same two pages, where
		// positions running on through the 1 MiB rings allocated
		// ~500.
		{1000, 3000, 1000, 2},
	} {
		name := strconv.Itoa(tc.req) + "-" + strconv.Itoa(tc.reply) + "x" + strconv.Itoa(tc.rounds)
		t.Run(name, func(t *testing.T) {
			r := underOsf.cmd(t, []string{"OSF_STRICT=1"}, testutil.Prog(t, "segpages"),
				strconv.Itoa(tc.req), strconv.Itoa(tc.reply), strconv.Itoa(tc.rounds)).Run(30 * time.Second)
			if !r.OK() {
				t.Fatalf("segpages: %s", r)
			}
			segs := map[string]int{} // inode: bytes allocated
			for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
				if f := strings.Fields(line); len(f) == 3 && f[0] == "seg" {
					segs[f[1]], _ = strconv.Atoi(f[2])
				}
			}
			if len(segs) != 1 {
				t.Fatalf("the process holds %d segments, want the connection's one: %q", len(segs), r.Stdout)
			}
			for _, n := range segs {
				if want := tc.pages * 4096; n != want {
					t.Errorf("the segment has %d bytes allocated, want %d (%d pages)", n, want, tc.pages)
				}
			}
		})
	}
}
