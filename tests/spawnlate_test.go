package tests

import (
	"strings"
	"testing"
)

// TestSpawnedChildReadsAfterParentAndClientClosed: a server hands each
// accepted connection to a posix_spawn child (stdin) and closes its own
// copy at once; the client sends its bytes and closes; the child reads
// them only later (sh sleeps, then sha256sum reads). With rings from
// slots of a region, the child is not yet a holder when its parent and
// the client have let go, so the slot must not be handed out again nor
// its pages given back before the child is done: every child reads its
// connection's own bytes, as over TCP. Under osf every connection is
// offloaded (qsock says so at accept).
func TestSpawnedChildReadsAfterParentAndClientClosed(t *testing.T) {
	t.Parallel()
	const prog = pyFamily + `
import hashlib, os, socket, sys, time
N = 12
def data(i):
    return hashlib.sha256(b"%d" % i).digest() * (2048 + 97 * i)
def kind(c):
    return family(c.fileno())
out = sys.argv[1]
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.bind(("127.0.0.1", 0)); l.listen(N)
pid = os.fork()
if pid == 0:
    for i in range(N):
        c = socket.create_connection(l.getsockname())
        c.sendall(data(i))
        c.close()
        time.sleep(0.02)
    os._exit(0)
kinds, kids = set(), []
for i in range(N):
    c, _ = l.accept()
    kinds.add(kind(c))
    kids.append(os.posix_spawn("/bin/sh", ["sh", "-c", "sleep 0.5; exec sha256sum > %s/%d" % (out, i)],
                               os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, c.fileno(), 0)]))
    c.close()
os.waitpid(pid, 0)
bad = []
for i, k in enumerate(kids):
    os.waitpid(k, 0)
    got = open("%s/%d" % (out, i)).read().split(" ")[0]
    if got != hashlib.sha256(data(i)).hexdigest():
        bad.append(i)
print("kinds", ",".join(sorted(kinds)), "bad", bad, flush=True)
`
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			want := "kinds tcp bad []"
			if m.osf {
				want = "kinds osf bad []"
			}
			r := m.cmd(t, nil, python(t), "-c", prog, t.TempDir()).Run(longRun)
			if !r.OK() || strings.TrimSpace(r.Stdout) != want {
				t.Fatalf("got %q, want %q: %s", strings.TrimSpace(r.Stdout), want, r)
			}
		})
	}
}
