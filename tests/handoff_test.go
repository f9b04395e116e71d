package tests

import (
	"strings"
	"testing"
	"time"
)

// handoffScript passes a connection (or the listener) to a forked worker
// with SCM_RIGHTS, as Python multiprocessing, node's cluster module and
// socket-passing supervisors do. Half the client's 1 MiB is sent before the
// hand-off, so it waits in the connection while it moves. The worker reads
// to the end and answers with the SHA-256 of what it read; the client
// compares. Every line it prints is checked by the test.
const handoffScript = pyFamily + `
import hashlib, os, socket, sys

what = sys.argv[1]


payload = os.urandom(1 << 20)
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(8)
port = lst.getsockname()[1]
a, b = socket.socketpair()
pid = os.fork()
if pid == 0:
    a.close()
    msg, fds, flags, addr = socket.recv_fds(b, 16, 4)
    s = socket.socket(fileno=fds[0])
    if what == "listener":
        c, _ = s.accept()
        s.close()
        s = c
    got = bytearray()
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.sendall(hashlib.sha256(got).hexdigest().encode())
    os.write(1, ("worker family=%d peer=%s fds=%d msg=%r read=%d\n" % (
        s.family, s.getpeername()[0], len(fds), msg, len(got))).encode())
    s.close()
    os._exit(0)
b.close()
cl = socket.create_connection(("127.0.0.1", port), timeout=30)
cl.sendall(payload[:1 << 19])
if what == "conn":
    c, _ = lst.accept()
    socket.send_fds(a, [b"x"], [c.fileno()])
    c.close()
else:
    socket.send_fds(a, [b"x"], [lst.fileno()])
lst.close()
cl.sendall(payload[1 << 19:])
cl.shutdown(socket.SHUT_WR)
digest = b""
while True:
    d = cl.recv(64)
    if not d:
        break
    digest += d
ok = digest.decode() == hashlib.sha256(payload).hexdigest()
print("client transport=%s digest_ok=%d" % (family(cl.fileno()), ok), flush=True)
os.waitpid(pid, 0)
`

// TestHandoffSCMRights: a connection or a listener passed to another
// process under osf keeps every byte and stays offloaded, exactly as a TCP
// socket passed the same way keeps working.
func TestHandoffSCMRights(t *testing.T) {
	py := python(t)
	for _, what := range []string{"conn", "listener"} {
		for _, m := range []mode{bare, underOsf} {
			t.Run(what+"/"+m.name, func(t *testing.T) {
				r := m.cmd(t, nil, py, "-c", handoffScript, what).MustRun(60 * time.Second)
				out := r.Stdout
				want := "client transport=tcp digest_ok=1"
				if m.osf {
					want = "client transport=osf digest_ok=1" // offloaded over shm
				}
				if !strings.Contains(out, want) {
					t.Errorf("want %q in:\n%s\nstderr:\n%s", want, out, r.Stderr)
				}
				// AF_INET (2), the client as peer, the one fd that was sent.
				if !strings.Contains(out, "worker family=2 peer=127.0.0.1 fds=1 msg=b'x' read=1048576") {
					t.Errorf("worker line wrong:\n%s\nstderr:\n%s", out, r.Stderr)
				}
			})
		}
	}
}

// handoffRefusedScript passes a connection to a process that does not run
// under osf (it listens on a unix socket path, or, with the argument
// "socketpair", holds the other end of a socketpair this process made,
// whose peer credentials name this process; osf's sender checks the
// processes that hold the other end). Under osf the send must fail with EOPNOTSUPP and the connection
// stay whole here: the sender then serves it itself, every byte intact.
const handoffRefusedScript = `
import hashlib, os, socket, subprocess, sys, time
path = sys.argv[1]
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
pass_fds = ()
arg = path
if path == "socketpair":
    u, b = socket.socketpair()
    arg = str(b.fileno())
    pass_fds = (b.fileno(),)
rx = subprocess.Popen([sys.executable, "-c", """
import socket, sys, os
if sys.argv[1].isdigit():
    c = socket.socket(fileno=int(sys.argv[1]))
    print("ready", flush=True)
else:
    u = socket.socket(socket.AF_UNIX)
    u.bind(sys.argv[1]); u.listen(1)
    print("ready", flush=True)
    c, _ = u.accept()
msg, fds, flags, addr = socket.recv_fds(c, 16, 4)
s = socket.socket(fileno=fds[0])
got = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
s.sendall(b"served by receiver")
s.close()
""", arg], env=env, stdout=subprocess.PIPE, pass_fds=pass_fds)
if path == "socketpair":
    b.close()
assert rx.stdout.readline() == b"ready\n"
payload = os.urandom(300000)
lst = socket.socket(); lst.bind(("127.0.0.1", 0)); lst.listen(1)
cl = socket.create_connection(lst.getsockname(), timeout=30)
cl.sendall(payload); cl.shutdown(socket.SHUT_WR)
c, _ = lst.accept()
if path != "socketpair":
    u = socket.socket(socket.AF_UNIX); u.connect(path)
try:
    socket.send_fds(u, [b"x"], [c.fileno()])
    print("sent", flush=True)
    c.close()
except OSError as e:
    print("refused errno=%d" % e.errno, flush=True)
    got = b""
    while True:
        d = c.recv(65536)
        if not d:
            break
        got += d
    c.sendall(b"served by sender ok=%d" % (got == payload))
    c.close()
    rx.kill()
reply = b""
while True:
    d = cl.recv(100)
    if not d:
        break
    reply += d
print("reply %s" % reply.decode(), flush=True)
rx.wait()
`

func TestHandoffToProgramWithoutOsf(t *testing.T) {
	py := python(t)
	for _, m := range []mode{bare, underOsf} {
		for _, via := range []string{"path", "socketpair"} {
			t.Run(m.name+"/"+via, func(t *testing.T) {
				path := t.TempDir() + "/rx.sock"
				if via == "socketpair" {
					path = via
				}
				r := m.cmd(t, nil, py, "-c", handoffRefusedScript, path).MustRun(60 * time.Second)
				want := []string{"sent", "reply served by receiver"}
				if m.osf {
					want = []string{"refused errno=95", "reply served by sender ok=1"}
				}
				for _, w := range want {
					if !strings.Contains(r.Stdout, w) {
						t.Errorf("want %q in:\n%s\nstderr:\n%s", w, r.Stdout, r.Stderr)
					}
				}
				if m.osf && !strings.Contains(r.Stderr, "does not run under osf") {
					t.Errorf("no explanation on stderr: %q", r.Stderr)
				}
			})
		}
	}
}
