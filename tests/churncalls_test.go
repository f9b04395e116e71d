package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestChurnSystemCalls: `churn loop` (connect, 64 B each way, close, N
// times) against `churn server`, both under osf and strace, the client
// with OSF_STRICT=1 (a fallback fails it; the trace shows a companion
// connect per connection). Per connection the server's accept takes the
// connection from the companion with the flags the program asked for
// (churn's accept: blocking, inheritable), so it sets neither afterwards
// (it accepted non-blocking and close-on-exec, then made the socket
// blocking with F_SETFL and inheritable with F_SETFD: 2 calls); the
// client's connect and install share one fd window (one RLIMIT_NOFILE
// read), and the install keeps the spare segment's fds where the spare
// placed them without an fstat of each; the server's hello and install
// share one window too (one read per accept, besides late hellos), and
// the server hides the hello's fds inheritable at once (no F_SETFD), and
// fstats the hello's region once (its check and its mapping's look-up).
//
// And per connection in the steady state (connections 10 to 49, so that
// the first connection's set-up counts for none), every call but the waits
// and wake tokens (poll, recvfrom, sendto, a late hello's recvmsg, the
// spin's look at /proc/loadavg): the client at most 15 (docs/BENCHMARKS.md,
// "Profile of one connection": socket, the companion's socket, connect and
// SO_PEERCRED, the port holder's dup, bind, getsockname and identity, the
// hello, F_SETFL and dup3 onto the program's fd, its identity, the three
// closes), where the table's and the region's inheritance flags cost six
// F_SETFD more and the socket's F_GETFD and F_GETFL two; the server at most
// 12 (the accept's mode and free-number looks, the companion's accept,
// the hello, SO_PEERCRED, the region's fstat, the hello's two fds closed,
// the entry's identity, the close), where the hello's eventfd check, the
// region's seals and the hidden dups of the hello's fds (re-made for each
// connection of a client whose region went idle in between) cost nine
// more.
func TestChurnSystemCalls(t *testing.T) {
	t.Parallel()
	strace := testutil.OptionalTool(t, "strace", "count a churn's system calls")
	const n = 60
	port := strconv.Itoa(testutil.FreePort(t))
	dir := t.TempDir()
	st, ct := filepath.Join(dir, "server"), filepath.Join(dir, "client")
	churn := testutil.Prog(t, "churn")
	// The listener has SO_KEEPALIVE set, an option carried to what it
	// accepts (apache sets it): read once, not at every accept.
	srv := testutil.Cmd(t, nil, strace, "-f", "-qq", "-o", st, "-E", "LD_PRELOAD="+testutil.Lib(t),
		"-E", "CHURN_KEEPALIVE=1", churn, "server", port, strconv.Itoa(n)).Start()
	srv.WaitOutput("listening", 10*time.Second)
	began := time.Now()
	r := testutil.Cmd(t, nil, strace, "-f", "-qq", "-o", ct, "-E", "LD_PRELOAD="+testutil.Lib(t),
		"-E", "OSF_STRICT=1", churn, "loop", port, strconv.Itoa(n)).Run(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "conns="+strconv.Itoa(n)) {
		t.Fatalf("churn loop under strace: %s", r)
	}
	if w := srv.Wait(longRun); !w.OK() {
		t.Fatalf("churn server: %s", w)
	}
	took := time.Since(began)
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cli, ser := read(ct), read(st)
	count := func(tr, re string) int { return len(regexp.MustCompile(re).FindAllString(tr, -1)) }
	if c := count(cli, `connect\(\d+, \{sa_family=AF_UNIX, sun_path=@"osf1/4/127\.0\.0\.1/`+port+`"\}, \d+\) += 0`); c != n {
		t.Fatalf("client made %d companion connects, want %d (one per connection)", c, n)
	}
	// A hello later than the handshake bound parks its connection, which
	// is then made non-blocking: a few, on a slow host, not one each.
	if c := count(ser, `(?m)^\d+ +fcntl\(\d+, F_SETFL`); c > n/4 {
		t.Errorf("server set file status flags %d times for %d accepts, want at most %d", c, n, n/4)
	}
	// churn's accepted sockets are inheritable: the hello's fds are
	// hidden by dups made inheritable at once (OSF_HIDE_INHERIT), not
	// made close-on-exec and then cleared (2 F_SETFD per accept); the
	// companion listener's own are set once.
	if c := count(ser, `(?m)^\d+ +fcntl\(\d+, F_SETFD`); c > n/8 {
		t.Errorf("server set fd flags %d times for %d accepts, want at most %d (none per accept)", c, n, n/8)
	}
	if c := count(ser, `(?m)^\d+ +accept4\(\d+, NULL, NULL, 0\) += \d+`); c < n {
		t.Errorf("server took %d connections from the companion with churn's own flags (0), want %d", c, n)
	}
	// Kept for at most 100 ms (sock_carry.c LCACHE_TTL_NS).
	if c, most := count(ser, `(?m)^\d+ +getsockopt\(\d+, SOL_SOCKET, SO_KEEPALIVE`), 2+int(took/(100*time.Millisecond)); c > most {
		t.Errorf("server read its listener's SO_KEEPALIVE %d times for %d accepts in %v, want at most %d (once per 100 ms)", c, n, took, most)
	}
	per := func(tr, re string) float64 { return float64(count(tr, re)) / n }
	if f := per(cli, `(?m)^\d+ +newfstatat\(`); f > 6 {
		t.Errorf("client: %.2f fstat per connection, want at most 6 (5 in steady state)", f)
	}
	// The server's: the companion's socket (the entry's identity), the
	// hello's region (its check; the pool finds its mapping by that
	// stat, without another) and the hidden dups' identities.
	if f := per(ser, `(?m)^\d+ +newfstatat\(`); f > 4.5 {
		t.Errorf("server: %.2f fstat per accept, want at most 4.5 (4 in steady state)", f)
	}
	// RLIMIT_NOFILE reads: with room above the soft limit, one per fd
	// window (which also raises and restores it); with soft = hard (a
	// window raises nothing) one per FLAT_TTL_NS (100 ms, fdwindow.c) at
	// most, whatever the windows.
	const reads = `(?m)^\d+ +prlimit64\(0, RLIMIT_NOFILE, NULL, `
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur == rl.Max {
		if c := count(cli, reads); c > n/4 {
			t.Errorf("client: %d RLIMIT_NOFILE reads for %d connections at soft = hard, want at most %d (one per 100 ms)", c, n, n/4)
		}
		if c := count(ser, reads); c > n/4 {
			t.Errorf("server: %d RLIMIT_NOFILE reads for %d accepts at soft = hard, want at most %d (one per 100 ms)", c, n, n/4)
		}
	}
	if f := per(cli, reads); f > 2.5 {
		t.Errorf("client: %.2f RLIMIT_NOFILE reads per connection, want at most 2.5 (2 in steady state)", f)
	}
	// The server's window closes around a late hello's wait (under strace
	// most are late): one read more for each.
	late := count(ser, `(?m)^\d+ +recvmsg\(.*= -1 EAGAIN`)
	if f := float64(count(ser, reads)-late) / n; f > 1.25 {
		t.Errorf("server: %.2f RLIMIT_NOFILE reads per accept besides %d late hellos' waits, want at most 1.25 (1)", f, late)
	}
	// (15, and the census's look at the kernel's listeners, once a second)
	if f := steadyCalls(t, cli, `connect\(\d+, \{sa_family=AF_UNIX, sun_path=@"osf1/`); f > 15.5 {
		t.Errorf("client: %.2f system calls per connection besides waits, want at most 15", f)
	}
	// (and one setsockopt: the listener's SO_KEEPALIVE carried)
	if f := steadyCalls(t, ser, `accept4\(\d+, NULL, NULL, 0\) += \d+`); f > 13.5 {
		t.Errorf("server: %.2f system calls per connection besides waits, want at most 13", f)
	}
	if t.Failed() {
		t.Logf("client trace (tail):\n%s", tail(cli, 4000))
		t.Logf("server trace (tail):\n%s", tail(ser, 4000))
	}
}

// steadyCalls counts, in strace trace tr (one process, one thread), the
// system calls from the 10th line that matches start to the 50th, per
// such line, leaving out waits and wake tokens (poll, recvfrom, sendto, a
// recvmsg that found nothing) and the spin's look at /proc/loadavg (its
// openat, read and close): what a connection's set-up and close cost.
func steadyCalls(t *testing.T, tr, start string) float64 {
	t.Helper()
	re := regexp.MustCompile(start)
	call := regexp.MustCompile(`^\d+ +([a-z0-9_]+)\((\d*)`)
	from, to, k, calls, load := -1, -1, 0, 0, ""
	lines := strings.Split(tr, "\n")
	for i, l := range lines {
		if re.MatchString(l) {
			k++
			if k == 10 {
				from = i
			} else if k == 50 {
				to = i
			}
		}
	}
	if from < 0 || to < 0 {
		t.Fatalf("fewer than 50 lines match %q", start)
	}
	for _, l := range lines[from:to] {
		m := call.FindStringSubmatch(l)
		if m == nil || strings.Contains(l, "resumed>") {
			continue
		}
		switch {
		case m[1] == "poll" || m[1] == "recvfrom" || m[1] == "sendto" ||
			(m[1] == "recvmsg" && strings.Contains(l, "EAGAIN")):
			continue
		case m[1] == "openat" && strings.Contains(l, "/proc/loadavg"):
			if f := regexp.MustCompile(`= (\d+)$`).FindStringSubmatch(l); f != nil {
				load = f[1]
			}
			continue
		case (m[1] == "read" || m[1] == "close") && m[2] == load:
			if m[1] == "close" {
				load = ""
			}
			continue
		}
		calls++
	}
	return float64(calls) / 40
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// TestConnectWindowsShared: two threads of one client connect at once
// (churn pair, OSF_STRICT=1: both shm, bytes checked by churn);
// libwinshim.so, preloaded after libosf.so, holds the first connect
// inside its fd window (at the port holder's bind) until the second has
// reached the same point. Where one connect's window kept the others out
// (a client's threads connected one at a time), the second waited for
// the first and the shim gave up after 5 s ("waited alone").
func TestConnectWindowsShared(t *testing.T) {
	t.Parallel()
	port := strconv.Itoa(testutil.FreePort(t))
	churn := testutil.Prog(t, "churn")
	srv := testutil.Cmd(t, testutil.Preload(t), churn, "server", port, "2").Start()
	srv.WaitOutput("listening", 10*time.Second)
	r := testutil.Cmd(t, append(testutil.RunSwitches(), "OSF_STRICT=1",
		"LD_PRELOAD="+testutil.Lib(t)+":"+testutil.Prog(t, "libwinshim.so")),
		churn, "pair", port).Run(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "pair done") {
		t.Fatalf("churn pair: %s", r)
	}
	if !strings.Contains(r.Stderr, "winshim: overlapped") {
		t.Errorf("the second connect did not reach its window while the first held its own: %q", r.Stderr)
	}
	if w := srv.Wait(longRun); !w.OK() {
		t.Fatalf("churn server: %s", w)
	}
}

// TestExecAfterChurnPassesNoOsfFds: a client whose inheritable connections
// came and went one at a time (churn's: no SOCK_CLOEXEC) leaves the fd
// table and its region inheritable after the last one closes, until an
// exec (no F_SETFD pair per connection, fdtable.c account); a shell it then
// runs without osf, by system() (an exec inside glibc, seen by the system
// hook) or by execve, inherits no memfd of osf's.
func TestExecAfterChurnPassesNoOsfFds(t *testing.T) {
	t.Parallel()
	const n = 5
	port := strconv.Itoa(testutil.FreePort(t))
	churn := testutil.Prog(t, "churn")
	srv := testutil.Cmd(t, testutil.Preload(t), churn, "server", port, strconv.Itoa(n)).Start()
	srv.WaitOutput("listening", 10*time.Second)
	r := testutil.Cmd(t, testutil.Preload(t, "OSF_STRICT=1"), churn, "execafter", port,
		strconv.Itoa(n)).Run(longRun)
	if !r.OK() {
		t.Fatalf("churn execafter: %s", r)
	}
	for _, want := range []string{"system memfds=0", "exec memfds=0"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("want %q after the connections closed: %s", want, r)
		}
	}
	if w := srv.Wait(longRun); !w.OK() {
		t.Fatalf("churn server: %s", w)
	}
}
