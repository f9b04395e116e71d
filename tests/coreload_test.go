package tests

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// mapsProbe is python code that prints whether libosf.so and the core are
// mapped in the process: "maps: libosf=N libosfcore=N".
const mapsProbe = `
import sys
def maps_report():
    m = open("/proc/self/maps").read()
    core = "/libosfcore.so" in m or "/memfd:osfcore" in m
    print("maps: libosf=%d libosfcore=%d" % ("/libosf.so" in m, core), file=sys.stderr, flush=True)
`

// nonTCPScript uses an AF_UNIX socketpair, an abstract AF_UNIX stream
// listener, a UDP socket and a TCP socket it never connects: none of that
// may load the core.
const nonTCPScript = mapsProbe + `
import os, socket
a, b = socket.socketpair()
a.sendall(b"ping"); assert b.recv(4) == b"ping"
name = "\0osftest-%d" % os.getpid()
l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); l.bind(name); l.listen()
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect(name)
s, _ = l.accept(); c.sendall(b"hello"); assert s.recv(5) == b"hello"
print("unix ok")
u1 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u1.bind(("127.0.0.1", 0))
u2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u2.connect(u1.getsockname())
u2.send(b"dgram"); assert u1.recv(5) == b"dgram"
u6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u6.bind(("::1", 0))
u6.sendto(b"six", u6.getsockname()); assert u6.recv(3) == b"six"
print("udp ok")
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM); t.close()
print("tcp socket created, never connected")
maps_report()
`

// tcpClientScript connects to 127.0.0.1:PORT, reads the server's
// greeting, reports its maps, prints "ready" and waits for its standard
// input to close.
const tcpClientScript = mapsProbe + `
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
data = b""
while len(data) < 5:
    chunk = c.recv(5 - len(data))
    if not chunk: break
    data += chunk
print("got", data.decode())
maps_report()
print("ready", flush=True)
sys.stdin.read()
`

// TestCoreLoadedOnDemand checks that the Go core is loaded only when
// something needs it: cat, a python program using unix, UDP and
// unconnected TCP sockets, and a python TCP client (whose route decision
// and set-up are C) run under osf with libosf.so mapped and the core not;
// osfstat lists the client's socket on kernel TCP.
func TestCoreLoadedOnDemand(t *testing.T) {
	t.Parallel()
	for _, m := range []mode{bare, underOsf} {
		t.Run("cat/"+m.name, func(t *testing.T) {
			t.Parallel()
			r := m.cmd(t, nil, "/bin/cat", "/proc/self/maps").MustRun(shortRun)
			if got := strings.Contains(r.Stdout, testutil.LibMapping); got != m.osf {
				t.Errorf("cat /proc/self/maps: libosf.so mapped=%v, want %v", got, m.osf)
			}
			if strings.Contains(r.Stdout, "libosfcore") || strings.Contains(r.Stdout, "osfcore") {
				t.Errorf("cat has the core mapped:\n%s", r.Stdout)
			}
		})
		t.Run("python-unix-udp/"+m.name, func(t *testing.T) {
			t.Parallel()
			r := m.cmd(t, nil, python(t), "-c", nonTCPScript).MustRun(shortRun)
			if want := "unix ok\nudp ok\ntcp socket created, never connected\n"; r.Stdout != want {
				t.Errorf("stdout %q, want %q", r.Stdout, want)
			}
			checkMaps(t, m, r.Stderr, false)
			noOsfMessages(t, "python", r.Stderr)
		})
		t.Run("python-tcp/"+m.name, func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					_, _ = io.WriteString(c, "hello")
					defer c.Close()
				}
			}()
			port := l.Addr().(*net.TCPAddr).Port
			c := m.cmd(t, nil, python(t), "-c", tcpClientScript, fmt.Sprint(port))
			stdin, err := c.Cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			p := c.Start()
			p.WaitOutput("ready\n", shortRun)
			if m.osf {
				st := testutil.AssertCoreLoaded(t, p.Pid, false)
				if len(st.Sockets) == 0 {
					t.Errorf("osfstat lists no socket for the TCP client")
				}
				testutil.AssertTransport(t, p.Pid, testutil.ByRole("client"), testutil.TransportKernel)
			}
			stdin.Close()
			r := p.Wait(shortRun)
			if !r.OK() || !strings.Contains(r.Stdout, "got hello") {
				t.Fatalf("python TCP client: %s", r)
			}
			checkMaps(t, m, r.Stderr, false)
			noOsfMessages(t, "python", r.Stderr)
		})
	}
}

// TestVirtualMemoryLimit runs programs under `ulimit -v 600000`, which the
// Go runtime cannot start under: /bin/true and a shell loop work under osf
// because they never load the core.
func TestVirtualMemoryLimit(t *testing.T) {
	t.Parallel()
	const script = `ulimit -v 600000 && exec /bin/sh -c '
/bin/true || exit 1
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do /bin/echo $i; done | tail -n 1
echo "$(seq 3 | wc -l) lines"
grep -q /libosf.so /proc/$$/maps && echo "libosf mapped: yes" || echo "libosf mapped: no"
grep -q osfcore /proc/$$/maps && echo "core mapped: yes" || echo "core mapped: no"
'`
	want := bare.cmd(t, nil, "/bin/sh", "-c", script).MustRun(shortRun).Stdout
	if !strings.Contains(want, "20\n3 lines\nlibosf mapped: no\ncore mapped: no") {
		t.Fatalf("bare: unexpected output %q", want)
	}
	r := underOsf.cmd(t, nil, "/bin/sh", "-c", script).MustRun(shortRun)
	got := strings.Replace(r.Stdout, "libosf mapped: yes\n", "libosf mapped: no\n", 1)
	if !strings.Contains(r.Stdout, "libosf mapped: yes\n") || got != want {
		t.Errorf("under osf: output %q, want %q with libosf mapped: yes", r.Stdout, want)
	}
	noOsfMessages(t, "sh", r.Stderr)

	t.Run("tcp", func(t *testing.T) {
		// A TCP program under the same limit must work too (osf should
		// then stay pass-through instead of loading the Go runtime).
		const py = `import socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
c.sendall(b"ok"); print(s.recv(2).decode())`
		for _, m := range []mode{bare, underOsf} {
			r := m.cmd(t, nil, "/bin/sh", "-c", `ulimit -v 600000 && exec "$0" -c "$1"`, python(t), py).Run(shortRun)
			if r.OK() && r.Stdout == "ok\n" {
				continue
			}
			t.Errorf("%s: python TCP under ulimit -v 600000: %s", m.name, r)
		}
	})
}

// TestFdNumbering checks that loading the core leaves the program's fd
// numbering alone: after a TCP connection on loopback (which loads the
// core under osf) and closing it, progs/fdnumbers.c gets the same fd
// numbers from open() and sees no fds it did not open, bare and under osf
// (also with OSF_LOG_FILE, whose file the core opens).
func TestFdNumbering(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "fdnumbers")
	want := bare.cmd(t, nil, prog).MustRun(shortRun).Stdout
	if want != "open: 3 4 5 6 7\nothers: 0\n" {
		t.Fatalf("bare: unexpected output %q", want)
	}
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"default", nil},
		{"log-file", []string{"OSF_LOG_FILE=" + filepath.Join(t.TempDir(), "osf.log")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := underOsf.cmd(t, tc.env, prog).MustRun(shortRun)
			noOsfMessages(t, "fdnumbers", r.Stderr)
			if r.Stdout != want {
				t.Errorf("under osf: fd numbers and foreign fds %q, bare %q", r.Stdout, want)
			}
		})
	}
}

// fdLimitScript lowers its soft open-files limit, then connects on TCP
// (which loads the core under osf) and prints the limit before and after,
// and whether the core is mapped.
const fdLimitScript = mapsProbe + `
import resource, socket
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
print("before", resource.getrlimit(resource.RLIMIT_NOFILE))
try:
    socket.create_connection(("127.0.0.1", 1)).close()
except ConnectionRefusedError:
    pass
print("after", resource.getrlimit(resource.RLIMIT_NOFILE))
maps_report()
`

// TestCoreKeepsFdLimit: the Go runtime raises the soft RLIMIT_NOFILE to
// the hard limit when it starts; loading the core must not change the
// limit the program (and the programs it execs) sees.
func TestCoreKeepsFdLimit(t *testing.T) {
	t.Parallel()
	r := osfLogged.cmd(t, nil, python(t), "-c", fdLimitScript).MustRun(shortRun)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 2 || strings.TrimPrefix(lines[0], "before") != strings.TrimPrefix(lines[1], "after") {
		t.Errorf("the open-files limit changed when the core loaded: %q", r.Stdout)
	}
	if !strings.Contains(r.Stderr, "libosfcore=1") {
		t.Errorf("the core was not loaded: %s", r)
	}
}

// forkLogServer listens on 127.0.0.1:PORT, forks one child that accepts
// a connection and echoes one message (a pre-fork worker), prints
// "child PID accepted", waits for its standard input to close and exits.
const forkLogServer = `
import os, socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(8)
print("listening", flush=True)
pid = os.fork()
if pid == 0:
    c, _ = l.accept()
    c.sendall(c.recv(64))
    print("child %d accepted" % os.getpid(), flush=True)
    sys.stdin.read()
    os._exit(0)
sys.stdin.read()
os.waitpid(pid, 0)
`

// logLine is one line of osf's log: the core's zap console format, which
// libosf.so's C lines (preload/log.c) copy: time, level, "osf", message,
// then the pid and program as JSON.
var logLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})\t(debug|info|warn|error)\tosf\t(.*)\t\{"pid": (\d+), "prog": "([^"\\]*)"\}$`)

// TestForkChildLogsWithoutCore: a pre-fork server's worker (a fork child)
// at OSF_LOG_LEVEL=debug accepts a shm connection without mapping the Go
// core, and its "accept on" line is written, by libosf.so, in the core's
// format. With OSF_DEBUG_CORE_AT_SETUP=1 the core loads and writes lines
// of its own into the same file: every line has one format.
func TestForkChildLogsWithoutCore(t *testing.T) {
	t.Parallel()
	for _, withCore := range []bool{false, true} {
		t.Run(fmt.Sprintf("core-at-setup=%v", withCore), func(t *testing.T) {
			t.Parallel()
			logPath := filepath.Join(t.TempDir(), "osf.log")
			env := []string{"OSF_LOG_LEVEL=debug", "OSF_LOG_FILE=" + logPath}
			if withCore {
				env = append(env, "OSF_DEBUG_CORE_AT_SETUP=1")
			}
			port := testutil.FreePort(t)
			srv := underOsf.cmd(t, env, python(t), "-c", forkLogServer, fmt.Sprint(port))
			stdin, err := srv.Cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			p := srv.Start()
			defer stdin.Close()
			p.WaitOutput("listening\n", shortRun)
			r := underOsf.cmd(t, nil, python(t), "-c", `
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"ping-osf")
print(c.recv(64).decode())`, fmt.Sprint(port)).MustRun(shortRun)
			if r.Stdout != "ping-osf\n" {
				t.Fatalf("client: %s", r)
			}
			out := p.WaitOutput(" accepted\n", shortRun)
			var child int
			if _, err := fmt.Sscanf(out[strings.LastIndex(out, "child "):], "child %d accepted", &child); err != nil {
				t.Fatalf("no child pid in %q", out)
			}
			testutil.AssertTransport(t, child, testutil.ByRole("server"), testutil.TransportShm)
			mapped, err := testutil.CoreMapped(child)
			if err != nil {
				t.Fatal(err)
			}
			if mapped != withCore {
				t.Errorf("fork child %d: core mapped %v, want %v", child, mapped, withCore)
			}
			stdin.Close()
			p.Wait(shortRun)

			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			wantMsg := regexp.MustCompile(fmt.Sprintf(`^accept on 127\.0\.0\.1:%d: shm from 127\.0\.0\.1:\d+ \(pid \d+ uid \d+\)$`, port))
			var accepted, coreLines int
			for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
				m := logLine.FindStringSubmatch(line)
				if m == nil {
					t.Errorf("log line not in the core's format: %q", line)
					continue
				}
				if strings.HasPrefix(m[3], "core loaded:") {
					coreLines++
				}
				if m[4] == fmt.Sprint(child) && wantMsg.MatchString(m[3]) {
					accepted++
					if m[2] != "debug" || m[5] != "python3" {
						t.Errorf("accept line: level %q prog %q, want debug python3: %q", m[2], m[5], line)
					}
				}
			}
			if accepted != 1 {
				t.Errorf("%d \"accept on\" lines of the child %d, want 1; log:\n%s", accepted, child, b)
			}
			if withCore && coreLines == 0 {
				t.Errorf("the core wrote no line; log:\n%s", b)
			}
		})
	}
}
