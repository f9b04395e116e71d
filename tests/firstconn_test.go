package tests

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// shortServerScript accepts one connection on 127.0.0.1:PORT: to "1" it
// answers 64 bytes after 100 ms; to "2" 8 KiB at once and 64 bytes more
// after 100 ms; then it reads until the client closes.
const shortServerScript = `
import socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(4)
print("listening", flush=True)
c, _ = l.accept()
assert c.recv(1) == b"1"
time.sleep(0.1); c.sendall(b"a" * 64)
assert c.recv(1) == b"2"
c.sendall(b"b" * 8192); time.sleep(0.1); c.sendall(b"c" * 64)
while c.recv(4096): pass
`

// shortClientScript connects, asks for the short reply and for the long
// one, each read sleeping in a blocking recv, and prints the process's
// threads after each ("threads short: NAMES", "threads long: NAMES"); it
// checks the bytes, prints "ready" and waits for its standard input to
// close.
const shortClientScript = `
import os, socket, sys
def threads():
    d = "/proc/self/task"
    return ",".join(sorted(open("%s/%s/comm" % (d, t)).read().strip() for t in os.listdir(d)))
def recv_exactly(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x: sys.exit("early end")
        b += x
    return b
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"1")
assert recv_exactly(c, 64) == b"a" * 64
print("threads short:", threads(), flush=True)
c.sendall(b"2")
assert recv_exactly(c, 8192 + 64) == b"b" * 8192 + b"c" * 64
print("threads long:", threads(), flush=True)
print("ready", flush=True)
sys.stdin.read()
`

// TestShortClientStartsNoThread: a short client's first blocking read
// sleeps on a new ring, which has no page to give back, so osf starts no
// thread for it (the reaper, which trims the rings of sleeping readers,
// cost a short client its creation and an exit that must reap it); once
// a reader has consumed a page and sleeps again, the reaper runs (issue
// 12). The connection is shm (OSF_STRICT=1, osfstat), the bytes checked.
func TestShortClientStartsNoThread(t *testing.T) {
	t.Parallel()
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := strconv.Itoa(testutil.FreePort(t))
			srv := m.cmd(t, nil, python(t), "-c", shortServerScript, port).Start()
			srv.WaitOutput("listening", 10*time.Second)
			cl := m.cmd(t, []string{"OSF_STRICT=1"}, python(t), "-c", shortClientScript, port)
			stdin, err := cl.Cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			p := cl.Start()
			out := p.WaitOutput("ready\n", longRun)
			if m.osf {
				testutil.AssertTransport(t, p.Pid, testutil.ByRole("client"), testutil.TransportShm)
			}
			stdin.Close()
			if r := p.Wait(shortRun); !r.OK() {
				t.Fatalf("client: %s", r)
			}
			if r := srv.Wait(shortRun); !r.OK() {
				t.Fatalf("server: %s", r)
			}
			short, long := threadLine(out, "short"), threadLine(out, "long")
			if short != "python3" {
				t.Errorf("after a 64-byte reply read in a blocking recv the client has threads %q, want only python3", short)
			}
			want := "python3"
			if m.osf {
				want = "osf-reaper,python3"
			}
			if long != want {
				t.Errorf("after 8 KiB read and a blocking recv the client has threads %q, want %q", long, want)
			}
		})
	}
}

// threadLine returns the thread names printed as "threads WHAT: NAMES".
func threadLine(out, what string) string {
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, "threads "+what+": "); ok {
			return s
		}
	}
	return "(no line)"
}
