package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// linksServerPy (PORT N) serves N connections on 127.0.0.1:PORT: each is read to
// its end, and the SHA-256 of what came is sent back.
const linksServerPy = `import hashlib, socket, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket()
l.bind(("127.0.0.1", port))
l.listen(16)
print("listening", flush=True)
def serve(c):
    h = hashlib.sha256()
    while True:
        b = c.recv(65536)
        if not b:
            break
        h.update(b)
    c.sendall(h.digest())
    c.close()
ts = []
for _ in range(n):
    c, _ = l.accept()
    t = threading.Thread(target=serve, args=(c,))
    t.start()
    ts.append(t)
for t in ts:
    t.join()
print("served", n, flush=True)
`

// linksClientPy (PORT N MIB) opens N connections to 127.0.0.1:PORT at once, then
// forks: the child sends on the last one, the parent's threads on the
// others (MIB MiB each, a pattern of its own), each shuts down writing and
// checks the SHA-256 the server sends back.
const linksClientPy = `import hashlib, os, socket, sys, threading
port, n, mib = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cs = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
def run(i):
    data = bytes((j * 7 + i * 13) & 0xff for j in range(65536)) * (16 * mib)  # mib MiB
    c = cs[i]
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
    got = b""
    while len(got) < 32:
        b = c.recv(32 - len(got))
        if not b:
            break
        got += b
    return got == hashlib.sha256(data).digest()
pid = os.fork()
if pid == 0:
    os._exit(0 if run(n - 1) else 1)
res = [False] * (n - 1)
def th(i):
    res[i] = run(i)
ts = [threading.Thread(target=th, args=(i,)) for i in range(n - 1)]
for t in ts:
    t.start()
for t in ts:
    t.join()
_, st = os.waitpid(pid, 0)
print("parent", "ok" if all(res) else "bad", "child", "ok" if st == 0 else "bad", flush=True)
`

// TestRDMASimLinks: with OSF_RDMA_LINKS=1 the connections of one process
// to one listener process are streams on one link (one link made, every
// connection a stream on it, at both ends; OSF_STRICT=1: none on kernel
// TCP), carrying 4 MiB each (4 rings) at once with bytes verified, a fork child
// sending on one of them through its parent's engine.
func TestRDMASimLinks(t *testing.T) {
	t.Parallel()
	const conns = 4
	py := python(t)
	port := strconv.Itoa(testutil.FreePort(t))
	dir := t.TempDir()
	env := func(log string) []string {
		return []string{"OSF_LOG_LEVEL=debug", "OSF_LOG_FILE=" + filepath.Join(dir, log)}
	}
	srv := osfLinks.cmd(t, env("server.log"), py, "-c", linksServerPy, port, strconv.Itoa(conns)).Start()
	srv.WaitOutput("listening", shortRun)
	testutil.WaitFor(t, shortRun, "the server's RDMA listener", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		return strings.Contains(string(b), ": RDMA listener via")
	})
	r := osfLinks.cmd(t, env("client.log"), py, "-c", linksClientPy, port, strconv.Itoa(conns), "4").Run(longRun)
	cl, _ := os.ReadFile(filepath.Join(dir, "client.log"))
	if !r.OK() || r.Stdout != "parent ok child ok\n" {
		t.Fatalf("client: %s\n--- its osf log:\n%s", r, cl)
	}
	if w := srv.Wait(longRun); !w.OK() {
		t.Fatalf("server: %s", w)
	}
	sl, _ := os.ReadFile(filepath.Join(dir, "server.log"))
	for _, c := range []struct {
		log, what string
		want      int
	}{
		{string(cl), ": rdma via sim ", conns},
		{string(cl), "rdma sim: link ", 1}, // "link N to NAME made"
		{string(cl), " on link ", conns},
		{string(sl), "(sim, link ", conns},
	} {
		if n := strings.Count(c.log, c.what); n != c.want {
			t.Errorf("%d lines with %q, want %d:\n%s", n, c.what, c.want, c.log)
		}
	}
}
