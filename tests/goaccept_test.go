package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestGoAcceptSystemCalls: gonet's echo server under strace with
// OSF_GO=1, gonet's echo client (16 connections, every byte checked)
// under strace too, with OSF_STRICT=1 (a fallback fails it). Go's net
// sets TCP_KEEPIDLE, TCP_KEEPINTVL and TCP_KEEPCNT (15 s, 15 s, 9) on
// every connection it accepts or dials: osf takes a value inside the
// range every kernel takes without asking a fresh kernel TCP socket
// (kopt.c in_range), where it made, asked and closed one for each option
// of each connection (nine system calls, three TCP sockets: 48 TCP
// sockets and keepalive calls in the server for 16 connections). Go's accept loop ends each wake-up
// with an accept that finds nothing: that is the kernel's accept4 on the
// listener (EAGAIN, or EMFILE when no fd number is free), where osf
// looked for a free number first with a dup and a close of the listener.
func TestGoAcceptSystemCalls(t *testing.T) {
	strace := testutil.OptionalTool(t, "strace", "count a Go server's system calls")
	const n = 16
	dir := t.TempDir()
	st, ct := filepath.Join(dir, "server"), filepath.Join(dir, "client")
	// -ff: a file per thread, whose calls are never split in two.
	srv := startPiped(t, testutil.Cmd(t, nil, strace, "-ff", "-qq", "-o", st,
		"-E", "LD_PRELOAD="+testutil.Lib(t), "-E", "OSF_GO=1", gonet(t), "serve", "127.0.0.1:0"))
	addr := "127.0.0.1:" + srv.port(t)
	r := testutil.Cmd(t, nil, strace, "-ff", "-qq", "-o", ct, "-E", "LD_PRELOAD="+testutil.Lib(t),
		"-E", "OSF_GO=1", "-E", "OSF_STRICT=1", gonet(t), "echo", addr, "16", "65536").Run(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "ok") {
		t.Fatalf("gonet echo under strace: %s", r)
	}
	// gonet is strace's child: osfstat shows its listener offloaded.
	kids, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(srv.Pid), "task", strconv.Itoa(srv.Pid), "children"))
	if err != nil || len(strings.Fields(string(kids))) != 1 {
		t.Fatalf("strace's children: %q (%v)", kids, err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(kids))[0])
	if err != nil {
		t.Fatal(err)
	}
	testutil.AssertTransport(t, pid, testutil.ByRole("listener"), testutil.TransportShm)
	if err := unix.Kill(pid, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	srv.Wait(shortRun) // strace ends with its tracee, its trace complete
	read := func(prefix string) string {
		files, err := filepath.Glob(prefix + ".*")
		if err != nil || len(files) == 0 {
			t.Fatalf("no trace %s.*: %v", prefix, err)
		}
		var all strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			all.Write(b)
		}
		return all.String()
	}
	cli, ser := read(ct), read(st)
	count := func(tr, re string) int { return len(regexp.MustCompile(re).FindAllString(tr, -1)) }
	// The companion's connections, taken with Go's flags: all 16 shm.
	if c := count(ser, `(?m)^accept4\(\d+, NULL, NULL, SOCK_CLOEXEC\|SOCK_NONBLOCK\) += \d+`); c != n {
		t.Errorf("server took %d connections from the companion, want %d", c, n)
	}
	const keep = `(?m)^setsockopt\(\d+, SOL_TCP, TCP_KEEP(IDLE|INTVL|CNT), `
	if c := count(ser, keep); c != 0 {
		t.Errorf("server: %d keepalive options reached a kernel socket for %d connections, want 0", c, n)
	}
	if c := count(cli, keep); c != 0 {
		t.Errorf("client: %d keepalive options reached a kernel socket for %d connections, want 0", c, n)
	}
	// osf's scratch TCP sockets (blocking, where Go's own are not).
	if c := count(ser, `(?m)^socket\(AF_INET, SOCK_STREAM\|SOCK_CLOEXEC, IPPROTO_TCP\)`); c != 0 {
		t.Errorf("server made %d scratch TCP sockets for %d connections, want 0", c, n)
	}
	// Go's listener: the TCP socket it binds (osf's companion, an
	// AF_UNIX socket, listens too, before it).
	lm := regexp.MustCompile(`(?m)^bind\((\d+), \{sa_family=AF_INET, `).FindStringSubmatch(ser)
	if lm == nil || !regexp.MustCompile(`(?m)^listen\(`+lm[1]+`, `).MatchString(ser) {
		t.Fatal("no bind and listen of a TCP socket in the server's trace")
	}
	lfd := lm[1]
	if c := count(ser, `(?m)^fcntl\(`+lfd+`, F_DUPFD_CLOEXEC, 0\)`); c != 0 {
		t.Errorf("server looked for a free fd number with a dup of its listener %d times, want 0", c)
	}
	if c := count(ser, `(?m)^accept4\(`+lfd+`, .*= -1 EAGAIN`); c == 0 {
		t.Errorf("server's accepts never asked the listener (no accept4 on fd %s found EAGAIN)", lfd)
	}
	if t.Failed() {
		t.Logf("server's sockets, accepts and options:\n%s", strings.Join(
			regexp.MustCompile(`(?m)^(socket|accept4|setsockopt|listen)\(.*$`).FindAllString(ser, 200), "\n"))
	}
}

// TestAcceptNonblockingEmptyOrFull: accept on an empty non-blocking
// listener answers EAGAIN, and EMFILE when no fd number is free (Linux
// takes the number before it looks for a connection), as kernel TCP
// does, with the hard limit above the soft one or lowered to it after
// listen; then a connection is accepted (shm under osf with room above
// the soft limit: qsock says so).
func TestAcceptNonblockingEmptyOrFull(t *testing.T) {
	t.Parallel()
	const prog = pyFamily + `
import errno, os, resource, select, socket, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.bind(("127.0.0.1", 0)); l.listen(4); l.setblocking(False)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64 if sys.argv[1] == "lowered" else hard))
def kind(c):
    return family(c.fileno())
def acc():
    try:
        c, _ = l.accept()
        k = kind(c)
        c.close()
        return k
    except OSError as e:
        return errno.errorcode[e.errno]
out = ["empty " + acc()]
` + pyFillFds + `out.append("full " + acc())
os.close(fill.pop())
out.append("one-free " + acc())
for f in fill:
    os.close(f)
c = socket.create_connection(l.getsockname())
select.select([l], [], [], 10)
out.append("ready " + acc())
c.close()
print(" ".join(out), flush=True)
`
	for _, hard := range []string{"above", "lowered"} {
		for _, m := range bareAndOsf {
			t.Run(hard+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				// With soft = hard osf's client refuses its fds a
				// place: kernel TCP; with OSF_SHM_KFD=1 it holds few
				// and offloads (TestFdBudgetSoftEqualsHard).
				want := "empty EAGAIN full EMFILE one-free EAGAIN ready tcp"
				if m.osf && (hard == "above" || tightOffloads()) {
					want = "empty EAGAIN full EMFILE one-free EAGAIN ready osf"
				}
				r := m.cmd(t, nil, python(t), "-c", prog, hard).Run(longRun)
				if !r.OK() || strings.TrimSpace(r.Stdout) != want {
					t.Fatalf("got %q, want %q: %s", strings.TrimSpace(r.Stdout), want, r)
				}
			})
		}
	}
}
