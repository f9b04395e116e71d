package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestReuseportSpread runs three server processes listening with
// SO_REUSEPORT on one port (as nginx "listen ... reuseport" workers do) and
// a client making 120 connections, then kills the first server and makes
// 120 more (progs/reuseport.c). Bare, the kernel spreads the connections
// over the group; under osf every connection must be offloaded (the
// client's socket is an AF_UNIX one) and spread too: each live server gets
// at least a quarter of its even share, in both rounds. Before osf gave
// each member of a group a companion, every offloaded connection went to
// one server.
func TestReuseportSpread(t *testing.T) {
	t.Parallel()
	const n, conns = 3, 120
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := m.cmd(t, nil, testutil.Prog(t, "reuseport"), strconv.Itoa(n), strconv.Itoa(conns)).MustRun(longRun)
			noOsfMessages(t, "reuseport", r.Stderr)
			got := map[string]int{}
			for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
				if k, v, ok := strings.Cut(l, ": "); ok {
					got[k], _ = strconv.Atoi(v)
				} else if f := strings.Fields(l); len(f) == 3 {
					got[f[0]+" "+f[1]], _ = strconv.Atoi(f[2])
				}
			}
			for round, live := range map[int][]int{1: {0, 1, 2}, 2: {1, 2}} {
				for _, s := range live {
					key := fmt.Sprintf("round%d server %d", round, s)
					if min := conns / len(live) / 4; got[key] < min {
						t.Errorf("%s: %d connections, want at least %d of %d\n%s", key, got[key], min, conns, r.Stdout)
					}
				}
				want := 0
				if m.osf {
					want = conns
				}
				if off := got[fmt.Sprintf("round%d offloaded", round)]; off != want {
					t.Errorf("round %d: %d of %d connections offloaded, want %d\n%s", round, off, conns, want, r.Stdout)
				}
			}
		})
	}
}
