package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// TestPoolRecycledSlotRefused: an image that adopts an inherited shm
// connection whose rings are a slot of a region (OSF_SHM_POOL=1) takes the
// slot only while it is still that connection's: the slot records the
// inode of each side's socket (preload/pool.c), and a recycled slot
// carries another socket's. The program makes a connection to itself,
// checks the slot records its client socket, and execs a child that
// writes into the inherited client end: kept, the bytes reach the server
// end through the slot's ring; with the slot rewritten as a recycled one
// looks (another socket's inode, the next generation), the child's image
// refuses the connection (EBADF) and nothing lands in the slot's ring,
// which a new connection would now own.
func TestPoolRecycledSlotRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ mode, child, server, head string }{
		{"keep", "child write: 5", "server got: hello", "ring 0 head: 5"},
		{"recycle", "child write: Bad file descriptor", "server got: nothing", "ring 0 head: 0"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			r := underOsf.cmd(t, []string{"OSF_SHM_POOL=1", "OSF_STRICT=1"},
				testutil.Prog(t, "slotrecycle"), tc.mode).Run(30 * time.Second)
			if !r.OK() {
				t.Fatalf("slotrecycle %s: %s", tc.mode, r)
			}
			for _, want := range []string{"slot 0 records the client socket", tc.child, tc.server, tc.head} {
				if !strings.Contains(r.Stdout, want+"\n") {
					t.Errorf("slotrecycle %s: no %q in:\n%s", tc.mode, want, r.Stdout)
				}
			}
		})
	}
}
