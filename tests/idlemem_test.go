package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// segMemory returns the segments (memfds named osf-seg) that the processes
// hold, each counted once, and the bytes of memory they have allocated.
func segMemory(t *testing.T, pids ...int) (segs int, bytes int64) {
	t.Helper()
	seen := map[uint64]int64{}
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("read %s: %v", dir, err)
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if l, err := os.Readlink(p); err != nil || !strings.Contains(l, "memfd:osf-seg") {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil {
				seen[st.Ino] = st.Blocks * 512
			}
		}
	}
	for _, b := range seen {
		bytes += b
	}
	return len(seen), bytes
}

// TestIdleRingsGiveMemoryBack: connections that moved a MiB each way and
// went idle (both ends asleep in epoll_wait) give their rings' pages back,
// down to what their unread bytes need plus a page or so per ring; and
// every byte still arrives, in order, when traffic resumes across the
// holes, including the bytes left unread in the rings while they were
// trimmed (issue 12).
func TestIdleRingsGiveMemoryBack(t *testing.T) {
	const conns, kib, unread = 200, 1024, 10000
	prog := testutil.Prog(t, "idlemem")
	port := strconv.Itoa(testutil.FreePort(t))
	srv := underOsf.cmd(t, nil, prog, "server", port, strconv.Itoa(conns)).Start()
	srv.WaitOutput("listening", 10*time.Second)

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cc := underOsf.cmd(t, nil, prog, "client", port, strconv.Itoa(conns),
		strconv.Itoa(kib), strconv.Itoa(unread))
	cc.Cmd.Stdin = pr
	cl := cc.Start()
	pr.Close()
	cl.WaitOutput(fmt.Sprintf("idle %d", conns), 60*time.Second)
	testutil.AssertTransport(t, cl.Pid, testutil.ByRole("client"), testutil.TransportShm)
	testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)

	// Per connection: the header page; every other connection also has
	// the pages its unread bytes lie in (at most unread/4096 + 2).
	limit := int64(conns*4096 + conns/2*(unread/4096+2)*4096)
	var segs int
	var held int64
	for deadline := time.Now().Add(20 * time.Second); ; {
		segs, held = segMemory(t, srv.Pid, cl.Pid)
		if segs == conns && held <= limit || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d idle connections hold %d bytes of segment memory (%d per connection; limit %d)",
		segs, held, held/int64(max(segs, 1)), limit)
	if segs != conns {
		t.Fatalf("%d segments, want %d", segs, conns)
	}
	if held > limit {
		t.Fatalf("idle connections hold %d bytes of segment memory, want at most %d", held, limit)
	}

	if _, err := pw.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	cl.WaitOutput("ok", 60*time.Second)
	if r := cl.Wait(30 * time.Second); !r.OK() {
		t.Fatalf("client: %s", r)
	}
}
