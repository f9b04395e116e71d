package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestTrimNeverPunchesOutsideRing is issue 24's item 1: a client that
// speaks osf's handshake itself (as another user where the test runs as
// root) must not steer the server's hole punch. The server (progs/
// punchvictim.c, under osf) has a shared mapping of its own filled with a
// pattern and reads the client's connection waiting in poll or epoll_wait,
// so its idle poller trims the ring the client writes; the client (progs/
// hostile.c trimsteer) rewrites, all the while, the words of its side
// where the trim slots' struct iovec lay with that mapping's address and
// length (given to it here: the worst case; the words leaked the addresses
// of segments before). Before, the server punched its own mapping
// (process_madvise read the iovec from the segment); now a trim's range
// comes from the server's own mapping of the ring only, and the words are
// at most a bound on the client's own room. The trims did happen: after
// an idle second the server's segment holds at most its shared page and
// one more (before, poll() never trimmed: its arm bits were cleared
// before it looked at them).
func TestTrimNeverPunchesOutsideRing(t *testing.T) {
	t.Parallel()
	victim := testutil.Prog(t, "punchvictim")
	for _, wait := range []string{"poll", "epoll"} {
		t.Run(wait, func(t *testing.T) {
			t.Parallel()
			port := testutil.FreePort(t)
			srv := underOsf.cmd(t, nil, victim, wait, strconv.Itoa(port), "4").Start()
			var addr, size uint64
			if _, err := fmt.Sscanf(srv.WaitOutput("listening\n", shortRun), "region %v %d", &addr, &size); err != nil {
				t.Fatalf("punchvictim: %v: %s", err, srv.Stdout())
			}
			args := []string{"trimsteer", strconv.Itoa(port), fmt.Sprintf("%#x", addr), strconv.FormatUint(size, 10), "3"}
			p := hostilePeer(t, args...).Start()
			p.WaitOutput("steering\n", shortRun)
			testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
			if r := p.Wait(longRun); !r.OK() || !strings.Contains(r.Stdout, "steered:") {
				t.Fatalf("hostile trimsteer: %s", r)
			}
			r := srv.Wait(longRun)
			if !r.OK() || !strings.Contains(r.Stdout, "region intact") {
				t.Fatalf("the client punched the server's own memory: %s", r)
			}
			var resident int64
			if i := strings.Index(r.Stdout, "segments resident "); i < 0 {
				t.Fatalf("punchvictim: no segment count: %s", r)
			} else if _, err := fmt.Sscanf(r.Stdout[i:], "segments resident %d", &resident); err != nil {
				t.Fatalf("punchvictim: %v: %s", err, r)
			}
			if resident > 2*4096 {
				t.Errorf("after an idle second the server's segment holds %d bytes, want at most 2 pages (not trimmed)", resident)
			}
			t.Logf("victim: %s", strings.TrimSpace(r.Stdout))
		})
	}
}
