package tests

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
	"golang.org/x/sys/unix"
)

// outcomeRE matches the outcome counts a victim prints after "survived:".
var outcomeRE = regexp.MustCompile(`\b([A-Z]+|ok)=\d+`)

// checkSurvived asserts that a victim ran to its end (exit 0, "survived")
// and saw only outcomes a peer may legitimately cause: success, EAGAIN and
// timeouts, the end of the connection (EPIPE, ECONNRESET), or a connection
// refused while nothing listens.
func checkSurvived(t *testing.T, who string, r testutil.Result) {
	t.Helper()
	if !r.OK() || !strings.Contains(r.Stdout, "survived:") {
		t.Fatalf("%s did not survive the hostile peer: %s", who, r)
	}
	allowed := map[string]bool{"ok": true, "EAGAIN": true, "EPIPE": true, "ECONNRESET": true,
		"ECONNREFUSED": true, "EINTR": true}
	for _, m := range outcomeRE.FindAllStringSubmatch(r.Stdout, -1) {
		if !allowed[m[1]] {
			t.Errorf("%s: unexpected outcome %s in %q", who, m[0], strings.TrimSpace(r.Stdout))
		}
	}
	t.Logf("%s: %s", who, strings.TrimSpace(r.Stdout))
}

// sanitized returns the environment that runs a victim under the ASan and
// UBSan build of libosf.so (make asan, part of make build), preloaded
// after libasan as ASan requires; any report ends the victim with exit
// status 99 and is caught by noSanitizerReport.
func sanitized(t testing.TB, extra ...string) []string {
	t.Helper()
	lib := filepath.Join(filepath.Dir(testutil.Lib(t)), "asan", "libosf.so")
	if _, err := os.Stat(lib); err != nil {
		t.Fatalf("the sanitized library is missing (make build builds it): %v", err)
	}
	out, err := exec.Command("gcc", "-print-file-name=libasan.so").Output()
	asan := strings.TrimSpace(string(out))
	if err != nil || !filepath.IsAbs(asan) {
		t.Skipf("no libasan from gcc: %v %q", err, asan)
	}
	return append(append(testutil.RunSwitches(), extra...),
		"LD_PRELOAD="+asan+":"+lib,
		"ASAN_OPTIONS=detect_leaks=0:exitcode=99:abort_on_error=0",
		"UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=99")
}

// noSanitizerReport fails the test when a victim's standard error holds an
// AddressSanitizer or UndefinedBehaviorSanitizer report.
func noSanitizerReport(t *testing.T, who, stderr string) {
	t.Helper()
	for _, m := range []string{"ERROR: AddressSanitizer", "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer"} {
		if strings.Contains(stderr, m) {
			t.Errorf("%s: sanitizer report:\n%s", who, stderr)
			return
		}
	}
}

// hostilePeer prepares the hostile program with args, as user nobody when
// the test runs as root (setpriv), so that the attacker is another user.
// Under OSF_TEST_SHM_KFD=1 it speaks as a client with the switch.
func hostilePeer(t *testing.T, args ...string) *testutil.Command {
	t.Helper()
	var env []string
	if testutil.KfdRun() {
		env = append(env, "OSF_SHM_KFD=1")
	}
	return hostilePeerEnv(t, env, args...)
}

// hostilePeerEnv is hostilePeer with the environment env.
func hostilePeerEnv(t *testing.T, env []string, args ...string) *testutil.Command {
	t.Helper()
	hostile := testutil.Prog(t, "hostile")
	if os.Geteuid() != 0 {
		return testutil.Cmd(t, env, hostile, args...)
	}
	return testutil.Cmd(t, env, testutil.Tool(t, "setpriv"),
		append(append(append([]string(nil), asNobody...), hostile), args...)...)
}

// TestHostileServer runs a client under osf against a peer that speaks
// osf's handshake and then rewrites everything it can reach in the shared
// segment (positions, flags, lock words, sleeper counts, ring bytes) and
// sends junk on the wake socket. The client, exercising blocking and
// non-blocking reads and writes, poll and epoll, must neither crash nor
// hang (it is killed after 30 s); connections may only fail with
// ECONNRESET or EPIPE. Several seeds. Under OSF_TEST_SHM_KFD=1 both have
// the switch: the peer reads the hellos from its links and scribbles on
// the wake socket that is the kernel connection.
func TestHostileServer(t *testing.T) {
	t.Parallel()
	victim := testutil.Prog(t, "victim")
	for _, seed := range []int{1, 42, 1999} {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			t.Parallel()
			port := strconv.Itoa(testutil.FreePort(t))
			h := hostilePeer(t, "server", port, "5", strconv.Itoa(seed)).Start()
			h.WaitOutput("listening\n", shortRun)
			start := time.Now()
			// OSF_STRICT=1: a fallback to kernel TCP would fail the
			// victim's connects rather than pass unattacked.
			r := testutil.Cmd(t, sanitized(t, "OSF_STRICT=1"), victim, port, "4").Run(30 * time.Second)
			noSanitizerReport(t, "victim client", r.Stderr)
			checkSurvived(t, "victim client", r)
			if strings.Contains(r.Stdout, " ok=0") {
				t.Errorf("the victim exchanged nothing with the hostile server: %s", r.Stdout)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("the victim needed %v for a 4 s run: something blocked far too long", d)
			}
			h.Wait(shortRun)
		})
	}
}

// TestHostileClient attacks a server under osf through its companion
// listener with bad hellos (an unsealed segment that could be truncated
// under the server, a wrong size, a mismatched header, no fd, three fds, a
// file that is not a memfd, a wake socket that is a file, a bad magic), tries to shrink a sealed segment
// after the hello, then scribbles on a truthful one while it is served;
// pooled hellos likewise, and with the region's writers' eventfd
// (OSF_HELLO_F_EFD) one that is a socket (for a kernel TCP connection
// too), an epoll, comes without a region, then a truthful one written
// without pause (to its maximum too) for a second.
// The server must reject each, survive (it is one process), and serve a
// good client afterwards with its bytes intact. Under OSF_TEST_SHM_KFD=1
// both the server and the attacker have the switch: the hellos come on
// links, each followed by its kernel connection. The rejections are logged
// at debug level only (here into a file): a peer's fault never writes on
// the server's stderr.
func TestHostileClient(t *testing.T) {
	t.Parallel()
	victim := testutil.Prog(t, "victim")
	port := testutil.FreePort(t)
	logPath := filepath.Join(t.TempDir(), "osf.log")
	srv := testutil.Cmd(t, sanitized(t, "OSF_LOG_LEVEL=debug", "OSF_LOG_FILE="+logPath),
		victim, "server", strconv.Itoa(port), "60").Start()
	srv.WaitOutput("listening\n", shortRun)
	h := hostilePeer(t, "client", strconv.Itoa(port), "5").Start()
	// Good clients under osf while the attack runs and after it, each
	// checking its bytes come back, offloaded.
	good := func(msg string) {
		r := underOsf.cmd(t, nil, python(t), "-c", pyFamily+fmt.Sprintf(`
import socket
c = socket.create_connection(("127.0.0.1", %d)); c.sendall(%q.encode()); c.shutdown(socket.SHUT_WR)
b = b""
while True:
    d = c.recv(100)
    if not d: break
    b += d
print(family(c.fileno()), b.decode())`, port, msg)).Run(shortRun)
		if !r.OK() || strings.TrimSpace(r.Stdout) != "osf "+msg {
			t.Errorf("good client %q (want it offloaded, \"osf\"): %s", msg, r)
		}
	}
	for i := 0; i < 3; i++ {
		good(fmt.Sprintf("hello during the attack %d", i))
	}
	r := h.Wait(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "truncate after sealing: Operation not permitted") {
		t.Fatalf("hostile client: %s", r)
	}
	good("hello after the attack")
	// It serves until told to stop (a fixed life ran out before the
	// last good client on a busy host).
	if err := unix.Kill(srv.Pid, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sr := srv.Wait(longRun)
	noSanitizerReport(t, "victim server", sr.Stderr)
	checkSurvived(t, "victim server", sr)
	log := readLog(t, logPath)
	for _, want := range []string{"seals 0x0", "carried 0 fds, want 2", "carried 3 fds, want 2", "header does not match", "not a stream socket", "malformed hello",
		// pooled hellos (OSF_HELLO_F_POOL)
		"invalid pooled hello: bad bounds", "generation does not match the hello",
		"held here already",
		// the region's writers' eventfd (OSF_HELLO_F_EFD)
		"eventfd: not an eventfd", "writers' eventfd without a region"} {
		if !strings.Contains(log, want) {
			t.Errorf("the server's log does not show the rejection %q:\n%s", want, log)
		}
	}
	noOsfMessages(t, "victim server", srv.Stderr())
}

// TestHostileLockFreeze is issue 10's item 4: a client that writes two
// live tids in turn into the lock words of the server's side (so that the
// holder seems to change all the time) must not freeze a single-threaded
// epoll server (progs/soak.c's, non-blocking): its other clients keep being
// served without a stall, and only the hostile connection suffers (it is
// reset once its lock has been held against the server too long in all).
// Before, the server blocked in the lock for as long as the flipping went
// on, O_NONBLOCK or not.
func TestHostileLockFreeze(t *testing.T) {
	t.Parallel()
	soak := testutil.Prog(t, "soak")
	srv := testutil.Cmd(t, sanitized(t), soak, "server", "127.0.0.1", "0").Start()
	var port int
	if _, err := fmt.Sscanf(srv.WaitOutput("\n", shortRun), "port %d", &port); err != nil {
		t.Fatalf("soak server: %v", err)
	}
	h := hostilePeer(t, "lockflip", strconv.Itoa(port), "12").Start()
	h.WaitOutput("flipping\n", shortRun)
	// An osf client and a kernel client, each with waits over 5 s
	// counting as a stall.
	var wg sync.WaitGroup
	for _, m := range []mode{underOsf, bare} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := m.cmd(t, nil, soak, "client", "127.0.0.1", strconv.Itoa(port), "poll", "pingpong", "8", "100", "5").Run(longRun)
			if !r.OK() || !strings.Contains(r.Stdout, "PASS") {
				t.Errorf("%s client beside the hostile one: %s", m.name, r)
				return
			}
			t.Logf("%s client: %s", m.name, strings.TrimSpace(r.Stdout))
		}()
	}
	wg.Wait()
	if r := h.Wait(longRun); !r.OK() {
		t.Errorf("hostile lockflip: %s", r)
	}
	if srv.Exited() {
		t.Fatalf("the server died: %s", srv.Wait(shortRun))
	}
	noSanitizerReport(t, "soak server", srv.Stderr())
}

// TestHostilePortClaim: under OSF_SHM_KFD=1 a hello names its kernel
// connection by the client's address and port, which anyone can claim
// ahead of its connection. Another user's hellos for a port (progs/
// hostile.c claim, each ring holding "HIJACK") sent before a good
// client's connection from that port must not become that connection's:
// only a hello sent by the owner of the connection's client socket (or
// root) is taken (preload/setup_kfd.c setup_kfd_owner_ok, the owner read
// with NETLINK_SOCK_DIAG). Before, the server read the claim's ring as
// the good client's bytes, and the good client waited for an answer that
// never came. A client of another user than the server's is served as
// before (its owner looked up and matched). The switch is set here, so
// it runs in every leg.
func TestHostilePortClaim(t *testing.T) {
	t.Parallel()
	testutil.NeedRoot(t, "to claim ports as another user (nobody)")
	port := testutil.FreePort(t)
	srv := testutil.Cmd(t, testutil.Preload(t, "OSF_SHM_KFD=1"), testutil.Prog(t, "victim"),
		"server", strconv.Itoa(port), "60").Start()
	srv.WaitOutput("listening\n", shortRun)
	cport := testutil.FreePort(t)
	h := hostilePeerEnv(t, []string{"OSF_SHM_KFD=1"}, "claim", strconv.Itoa(port), "30",
		strconv.Itoa(cport), strconv.Itoa(cport)).Start()
	h.WaitOutput("claimed 1, own connection reset\n", shortRun)
	// A client from port from (0: the kernel's choice), as root or as
	// nobody (prefix): its bytes echoed, offloaded.
	good := func(prefix []string, from int, msg string) {
		args := append(append(append([]string(nil), prefix...), python(t)), "-c", pyFamily+fmt.Sprintf(`
import socket
c = socket.socket()
c.bind(("127.0.0.1", %d))
c.settimeout(10)
c.connect(("127.0.0.1", %d))
c.sendall(%q.encode())
print(family(c.fileno()), c.recv(100).decode(), flush=True)`, from, port, msg))
		r := testutil.Cmd(t, testutil.Preload(t, "OSF_SHM_KFD=1"), args[0], args[1:]...).Run(longRun)
		if !r.OK() || strings.TrimSpace(r.Stdout) != "osf "+msg {
			t.Errorf("good client %v from port %d: %s (want its bytes echoed, offloaded)", prefix, from, r)
		}
	}
	msg := "the good client's bytes"
	good(nil, cport, msg)
	// The owner looked up and matched: a client of another user than
	// the server's (nobody, as the claim is) is served as before.
	nobody := "nobody's bytes"
	good(append([]string{testutil.Tool(t, "setpriv")}, asNobody...), 0, nobody)
	if err := unix.Kill(srv.Pid, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sr := srv.Wait(longRun)
	checkSurvived(t, "victim server", sr)
	if want := fmt.Sprintf("served %d bytes", len(msg)+len(nobody)); !strings.Contains(sr.Stdout, want) {
		t.Errorf("victim server: %q, want %q (the claim's ring read as the good client's?)", sr.Stdout, want)
	}
}

// aheadClient (OSF_SHM_KFD, as rawOsf speaks it) sends two hellos on its
// link, for its sockets from ports a and b, connects b only (so that the
// server, looking for b's hello, reads a's ahead of its connection and
// keeps it), prints "ahead A B", and connects a once stdin says so.
var aheadClient = rawOsf + `
port = int(sys.argv[1])
s = dial("osf1/4/127.0.0.1/%d" % port)
ta, tb = kfd_socket(), kfd_socket()
keep = [hello(s, 4096, t.getsockname(), ("127.0.0.1", port)) for t in (ta, tb)]
tb.connect(("127.0.0.1", port))
print("ahead %d %d" % (ta.getsockname()[1], tb.getsockname()[1]), flush=True)
sys.stdin.readline()
ta.connect(("127.0.0.1", port))
print("connected", flush=True)
time.sleep(30)
`

// acceptPrinter accepts forever and prints each connection's peer port.
const acceptPrinter = `
import socket, sys
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(64)
print("listening", flush=True)
held = []
while True:
    c, a = l.accept()
    held.append(c)
    print("peer %d" % a[1], flush=True)
`

// TestHostileHelloFlood: under OSF_SHM_KFD=1 a server keeps, up to 256,
// the hellos it read ahead of their connections (a client's link carries
// the hellos of all its connections). Another user's flood of hellos for
// connections it never makes (hostile.c claim, 300 of them, then a
// connection without a hello, whose accept reads every link) must not
// crowd out a hello a good client sent ahead of its connection: when the
// table is full, a sender holding half of it or more loses its own
// oldest (preload/setup_kfd.c setup_kfd_put_locked). Before, the good
// client's hello, the oldest, went, and its connection was reset at its
// accept.
func TestHostileHelloFlood(t *testing.T) {
	t.Parallel()
	if !testutil.KfdRun() {
		t.Skip("OSF_SHM_KFD's kept hellos: OSF_TEST_SHM_KFD=1 (make test's KFD leg)")
	}
	testutil.NeedRoot(t, "to flood as another user (nobody)")
	port := strconv.Itoa(testutil.FreePort(t))
	srv := underOsf.cmd(t, nil, python(t), "-c", acceptPrinter, port).Start()
	srv.WaitOutput("listening\n", shortRun)
	cc := testutil.Cmd(t, nil, python(t), "-c", aheadClient, port)
	cin, err := cc.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cl := cc.Start()
	defer cin.Close()
	var a, b int
	if _, err := fmt.Sscanf(cl.WaitOutput("\n", shortRun), "ahead %d %d", &a, &b); err != nil {
		t.Fatalf("client: %v: %s", err, cl.Stdout())
	}
	srv.WaitOutput(fmt.Sprintf("peer %d\n", b), shortRun)
	h := hostilePeer(t, "claim", port, "20", "2000", "2299").Start()
	// Its connection reset: the server has read the flood.
	h.WaitOutput("claimed 300, own connection reset\n", longRun)
	if _, err := io.WriteString(cin, "go\n"); err != nil {
		t.Fatal(err)
	}
	cl.WaitOutput("connected\n", shortRun)
	deadline := time.Now().Add(shortRun)
	for !strings.Contains(srv.Stdout(), fmt.Sprintf("peer %d\n", a)) {
		if time.Now().After(deadline) {
			t.Fatalf("the connection whose hello the server had read ahead was not accepted (reset?): server %q", srv.Stdout())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
