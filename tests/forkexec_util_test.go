package tests

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// Helpers of the fork and exec tests (forkexec_test.go): a server that
// hands connections to other programs (progs/fxhand.c), driven by a
// one-thread client (progs/fxclient.c) that pauses in the middle of each
// transfer so that the test can look at every process holding the
// connection while it is open.

// holder is a program that must hold the connection while it is open: the
// process in the hand-off child's tree that runs exe, with the connection
// at each of fds.
type holder struct {
	exe string
	fds []int
}

// handoff describes one hand-off test: fxhand MODE ARGS, conns connections
// of size(i) random bytes each, what the client must get back.
type handoff struct {
	mode    string
	args    []string
	holders []holder
	expect  func(in []byte) []byte
	conns   int
	size    func(i int) int
	// activate runs fxhand as an exec'd image that accepts on a listener
	// it inherited at fd 3 (socket activation): `fxhand activate PORT 0
	// fxhand MODE fd:3 N ARGS...`.
	activate bool
	// check, if set, looks at the server and the hand-off child while
	// connection i is open.
	check func(t *testing.T, m mode, i, srv, child int)
}

// echoed is the expectation of cat: the bytes themselves.
func echoed(in []byte) []byte { return in }

// digest is the expectation of sha256sum reading standard input.
func digest(in []byte) []byte { return []byte(testutil.SHA256(in) + "  -\n") }

// upper is the expectation of tr a-z A-Z.
func upper(in []byte) []byte {
	out := make([]byte, len(in))
	for i, b := range in {
		if b >= 'a' && b <= 'z' {
			b -= 'a' - 'A'
		}
		out[i] = b
	}
	return out
}

// sizes returns a size function cycling through a few sizes around base,
// so that transfers end at different ring positions.
func sizes(base int) func(int) int {
	return func(i int) int { return base + (i*7919*37)%base }
}

// runHandoff runs h in mode m: the server and every client in m, both
// ends under osf or both bare.
func runHandoff(t *testing.T, m mode, h handoff) {
	t.Helper()
	port := testutil.FreePort(t)
	dir := t.TempDir()
	args := append([]string{h.mode, strconv.Itoa(port), strconv.Itoa(h.conns)}, h.args...)
	if h.activate {
		args = append([]string{"activate", strconv.Itoa(port), "0", testutil.Prog(t, "fxhand"),
			h.mode, "fd:3", strconv.Itoa(h.conns)}, h.args...)
	}
	srv := m.cmd(t, nil, testutil.Prog(t, "fxhand"), args...).Start()
	srv.WaitOutput("listening\n", shortRun)
	for i := range h.conns {
		in := testutil.RandomBytes(t, h.size(i))
		inPath := filepath.Join(dir, fmt.Sprintf("in%d", i))
		outPath := filepath.Join(dir, fmt.Sprintf("out%d", i))
		if err := os.WriteFile(inPath, in, 0o644); err != nil {
			t.Fatal(err)
		}
		cl := m.cmd(t, nil, testutil.Prog(t, "fxclient"), strconv.Itoa(port), inPath, outPath, "pause")
		stdin, err := cl.Cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		p := cl.Start()
		var cpid, cfd int
		line := waitLine(t, p, "connected ")
		if _, err := fmt.Sscanf(line, "connected %d %d", &cpid, &cfd); err != nil {
			t.Fatalf("client: %q: %v", line, err)
		}
		waitLine(t, p, "half")
		var child int
		line = waitLine(t, srv, fmt.Sprintf("child %d ", i))
		if _, err := fmt.Sscanf(line, "child %d %d", new(int), &child); err != nil {
			t.Fatalf("fxhand: %q: %v", line, err)
		}
		checkHolders(t, m, child, h.holders)
		checkConn(t, m, "client", cpid, cfd)
		if h.check != nil {
			h.check(t, m, i, srv.Pid, child)
		}
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Fatalf("client stdin: %v", err)
		}
		stdin.Close()
		r := p.Wait(longRun)
		if !r.OK() {
			t.Fatalf("client %d: %s\nserver stderr: %s", i, r, srv.Stderr())
		}
		got, err := os.ReadFile(outPath)
		if err != nil {
			t.Fatal(err)
		}
		if want := h.expect(in); testutil.SHA256(got) != testutil.SHA256(want) {
			t.Fatalf("connection %d (%d bytes): got %d bytes back (sha256 %s), want %d (sha256 %s); starts %q",
				i, len(in), len(got), testutil.SHA256(got), len(want), testutil.SHA256(want), clipBytes(got))
		}
	}
	r := srv.Wait(longRun)
	if !r.OK() {
		t.Fatalf("fxhand: %s", r)
	}
	if n := strings.Count(r.Stdout, " status 0\n"); n != h.conns {
		t.Errorf("fxhand: %d of %d children exited 0:\n%s", n, h.conns, r.Stdout)
	}
}

// clipBytes shows the start of b in messages.
func clipBytes(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

// checkConn asserts how the connection at fd of process pid is carried:
// under osf an offloaded shm connection (osfstat) whose fd is a connected
// AF_UNIX socket (/proc/net/unix), or its kernel TCP socket under
// OSF_TEST_SHM_KFD=1 (testutil.ShmFamily); bare a TCP socket.
func checkConn(t *testing.T, m mode, what string, pid, fd int) {
	t.Helper()
	fam, err := testutil.SocketFamily(pid, fd)
	if err != nil {
		t.Fatalf("%s (pid %d) fd %d: %v", what, pid, fd, err)
	}
	if !m.osf {
		if fam != "tcp" {
			t.Errorf("%s (pid %d) fd %d: socket family %q, want tcp", what, pid, fd, fam)
		}
		return
	}
	if want := testutil.ShmFamily(); fam != want {
		t.Errorf("%s (pid %d) fd %d: socket family %q, want %s (an offloaded connection)", what, pid, fd, fam, want)
	}
	testutil.AssertTransport(t, pid, testutil.ByFD(fd), testutil.TransportShm)
}

// checkHolders waits (bounded) until every holder runs in child's process
// tree with the connection at its fds, carried as m says: under osf,
// offloaded in its own fd table (the exec'd image adopted it) with the
// core not loaded (an inherited connection needs none); bare, TCP sockets.
func checkHolders(t *testing.T, m mode, child int, hs []holder) {
	t.Helper()
	deadline := time.Now().Add(shortRun)
	for _, h := range hs {
		var last string
		for {
			ok := false
			for _, pid := range append([]int{child}, testutil.Descendants(child)...) {
				if testutil.ExeBase(pid) != h.exe {
					continue
				}
				ok, last = holds(t, m, pid, h.fds)
				if ok {
					break
				}
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s holding the connection at fds %v in process %d's tree within %v (last: %s)",
					h.exe, h.fds, child, shortRun, last)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// holds reports whether process pid has the connection at every one of
// fds as m says, and if not, why.
func holds(t *testing.T, m mode, pid int, fds []int) (bool, string) {
	t.Helper()
	want := "tcp"
	if m.osf {
		want = testutil.ShmFamily()
	}
	for _, fd := range fds {
		fam, err := testutil.SocketFamily(pid, fd)
		if err != nil || fam != want {
			return false, fmt.Sprintf("pid %d fd %d: family %q (%v), want %s", pid, fd, fam, err, want)
		}
	}
	if !m.osf {
		return true, ""
	}
	p, ok := testutil.TryOsfStat(t, pid)
	if !ok {
		return false, fmt.Sprintf("pid %d: osfstat does not list it", pid)
	}
	if !p.Offloaded(fds...) {
		return false, fmt.Sprintf("pid %d: osfstat sockets %+v", pid, p.Sockets)
	}
	if p.CoreLoaded {
		t.Errorf("pid %d (%s): core loaded, but a program that only uses inherited connections never needs it",
			pid, p.Program)
	}
	return true, ""
}

// pyFamily is a Python family(fd) for the test scripts: "osf" when osf
// offloads fd (qsock_readable gives it a cookie: an shm connection whose
// fd is a unix wake socket or, under OSF_TEST_SHM_KFD=1, its own kernel
// TCP socket), else "tcp".
const pyFamily = `
import ctypes as _ct
_qsock = getattr(_ct.CDLL(None), "qsock_readable", None)

def family(fd):
    if _qsock is not None:
        cookie = _ct.c_void_p()
        _qsock(fd, _ct.byref(cookie))
        if cookie.value:
            return "osf"
    return "tcp"
`
