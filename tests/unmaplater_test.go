package tests

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// TestUnmapLater: the end that closes an offloaded connection first, while
// its peer still reads, keeps the segment mapped (preload/conn.c, "unmapped
// later": the peer's unmap is then not the last, which frees the pages)
// and unmaps it once the peer let go and it waits (here in accept); the
// peer reads the end at once all the same, and a fork child holds none of
// it. Bare: no segments at all. The client runs with OSF_STRICT=1 (a
// fallback to kernel TCP fails its connect). With rings from a region
// (OSF_SHM_POOL) nothing is unmapped later: each end's mapping is the
// region's, which the server keeps idle for the client's next connection
// (preload/pool.c, at most 16 such), so it still maps it then.
func TestUnmapLater(t *testing.T) {
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			port := strconv.Itoa(testutil.FreePort(t))
			r := m.cmd(t, []string{"OSF_STRICT=1"}, testutil.Prog(t, "unmaplater"), port).Run(60 * time.Second)
			if !r.OK() {
				t.Fatalf("unmaplater: %s", r)
			}
			got := namedCounts(r.Stdout)
			t.Logf("segments mapped: %v", got)
			want := map[string]int{"server-closed": 1, "child": 0, "client-eof": 1, "server-idle": 0}
			if m.osf && testutil.PoolRun() {
				want["server-idle"] = 1
			}
			if m.name == bare.name {
				want = map[string]int{"server-closed": 0, "child": 0, "client-eof": 0, "server-idle": 0}
			}
			for k, v := range want {
				if n, ok := got[k]; !ok || n != v {
					t.Errorf("%s: %d segments mapped (present %v), want %d", k, n, ok, v)
				}
			}
		})
	}
}

// namedCounts reads a test program's "NAME N" lines (others are skipped).
func namedCounts(out string) map[string]int {
	got := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			got[f[0]], _ = strconv.Atoi(f[1])
		}
	}
	return got
}
