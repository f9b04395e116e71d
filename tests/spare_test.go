package tests

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestSpareSegmentMadeWhileWaiting: a client that keeps connecting has its
// next connection's segment made while it waits for a reply
// (preload/setup_spare.c), and that connection uses it; a fork child never
// holds or uses the segment its parent made ahead (issue 12). Every
// connection is shm (OSF_STRICT=1 on the client). With rings from a
// region (OSF_SHM_POOL) the same holds of the region, which the client
// keeps between connections (its hidden fd; a connection holds a dup):
// the next connection's rings are a slot of it, and a fork child makes a
// region of its own.
func TestSpareSegmentMadeWhileWaiting(t *testing.T) {
	port := strconv.Itoa(testutil.FreePort(t))
	srv := underOsf.cmd(t, nil, testutil.Prog(t, "churn"), "server", port, "10").Start()
	srv.WaitOutput("listening", 10*time.Second)
	r := underOsf.cmd(t, []string{"OSF_STRICT=1"}, testutil.Prog(t, "sparefork"), port).Run(60 * time.Second)
	if !r.OK() {
		t.Fatalf("sparefork: %s", r)
	}
	srv.Signal(unix.SIGTERM)
	srv.Wait(30 * time.Second)
	inos := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			inos[f[0]] = slices.Compact(slices.Sorted(slices.Values(f[1:])))
		}
	}
	t.Logf("segments held: %v", inos)
	made := inos["made"]
	if len(made) != 1 {
		t.Fatalf("after its connections the client holds %d segments, want 1 made ahead: %s", len(made), r.Stdout)
	}
	if len(inos["child-forked"]) != 0 {
		t.Errorf("a fork child holds its parent's segments %v", inos["child-forked"])
	}
	if c := inos["child-conn"]; len(c) != 1 || c[0] == made[0] {
		t.Errorf("the child's connection holds segments %v, want one that is not the parent's %s", c, made[0])
	}
	if p := inos["parent-conn"]; !slices.Equal(p, made) {
		t.Errorf("the parent's next connection holds segments %v, want the one made ahead %v", p, made)
	}
}
