package testutil_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/testutil"
)

func TestMain(m *testing.M) { testutil.MainInNetns(m) }

func TestRoot(t *testing.T) {
	root := testutil.Root(t)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("Root %s has no go.mod: %v", root, err)
	}
}

func TestRunResult(t *testing.T) {
	r := testutil.Cmd(t, []string{"X=1"}, "/bin/sh", "-c", `echo "out $X"; echo err >&2; exit 3`).Run(5 * time.Second)
	if r.ExitCode != 3 || r.Stdout != "out 1\n" || r.Stderr != "err\n" || r.OK() {
		t.Errorf("unexpected result: %s", r)
	}
	r = testutil.Cmd(t, nil, "/bin/sh", "-c", `kill -TERM $$`).Run(5 * time.Second)
	if r.Signal != unix.SIGTERM || r.ExitCode != -1 {
		t.Errorf("want death by SIGTERM: %s", r)
	}
	if !strings.Contains(r.String(), "killed by signal 15") {
		t.Errorf("String() = %q", r.String())
	}
}

// TestRunTimeoutKillsGroup checks that a timeout kills the whole process
// group, including a background child that holds the output pipe, in
// bounded time.
func TestRunTimeoutKillsGroup(t *testing.T) {
	start := time.Now()
	r := testutil.Cmd(t, nil, "/bin/sh", "-c", `sleep 30 & echo started; sleep 30`).Run(300 * time.Millisecond)
	if !r.TimedOut || r.Stdout != "started\n" {
		t.Errorf("want a timeout with the output so far: %s", r)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Run returned after %v", el)
	}
	if !strings.Contains(r.Threads, "sleep") {
		t.Errorf("no thread dump of the group: %q", r.Threads)
	}
}

func TestStartWaitOutput(t *testing.T) {
	c := testutil.Cmd(t, nil, "/bin/sh", "-c", `echo ready; read x; echo "got $x"; sleep 30`)
	stdin, err := c.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := c.Start()
	p.WaitOutput("ready\n", 5*time.Second)
	stdin.Write([]byte("line\n"))
	p.WaitOutput("got line\n", 5*time.Second)
	if p.Exited() {
		t.Fatal("exited early")
	}
	if err := p.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := p.Wait(5 * time.Second); r.Signal != unix.SIGKILL {
		t.Errorf("want death by SIGKILL: %s", r)
	}
}

func TestWaitListening(t *testing.T) {
	port := testutil.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if ok, err := testutil.Listening(netipAddrPort(t, addr)); err != nil || ok {
		t.Fatalf("Listening(%s) = %v, %v before anyone listens", addr, ok, err)
	}
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	testutil.WaitListening(t, addr, 5*time.Second)
	l6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer l6.Close()
	testutil.WaitListening(t, l6.Addr().String(), 5*time.Second)
}

func TestRandomAndSHA256(t *testing.T) {
	a, b := testutil.RandomBytesSeed(7, 1000), testutil.RandomBytesSeed(7, 1000)
	if string(a) != string(b) || string(a) == string(testutil.RandomBytesSeed(8, 1000)) {
		t.Error("RandomBytesSeed is not a function of its seed")
	}
	if got := testutil.SHA256([]byte("abc")); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("SHA256(abc) = %s", got)
	}
	path, sum := testutil.WriteRandomFile(t, t.TempDir(), "f", 12345)
	if got := testutil.SHA256File(t, path); got != sum {
		t.Errorf("SHA256File = %s, want %s", got, sum)
	}
}

func TestMapsContain(t *testing.T) {
	ok, err := testutil.MapsContain(os.Getpid(), "[stack]")
	if err != nil || !ok {
		t.Errorf("MapsContain(self, [stack]) = %v, %v", ok, err)
	}
	if ok, _ := testutil.LibMapped(os.Getpid()); ok {
		t.Error("the test binary has libosf.so mapped")
	}
}

func TestPty(t *testing.T) {
	term := testutil.Cmd(t, []string{"PS1=$ "}, "/bin/sh", "-i").StartPty()
	term.Expect("$ ", 5*time.Second)
	term.Send("tty; exit 7\n")
	term.Expect("/dev/pts/", 5*time.Second)
	if r := term.Wait(5 * time.Second); r.ExitCode != 7 {
		t.Errorf("want exit status 7: %s", r)
	}
}

// TestPartialOnlyWhenAllowed runs this test binary as user nobody (issue
// 29, item 8): without OSF_TEST_ALLOW_PARTIAL=1 it must fail before any
// test runs, saying why; with it, the tests run in place and one that
// needs root skips, saying so.
func TestPartialOnlyWhenAllowed(t *testing.T) {
	if os.Getenv("OSFTEST_PARTIAL_PROBE") == "1" { // the run as nobody
		testutil.NeedRoot(t, "for the probe")
		t.Fatal("NeedRoot returned as nobody")
	}
	testutil.NeedRoot(t, "to run the test binary as nobody")
	setpriv := testutil.Tool(t, "setpriv")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(testutil.WorldReadableTempDir(t), "testutil.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(partial string) testutil.Result {
		c := testutil.Cmd(t, []string{"OSFTEST_PARTIAL_PROBE=1", testutil.AllowPartialEnv + "=" + partial},
			setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
			bin, "-test.run=^TestPartialOnlyWhenAllowed$", "-test.v")
		c.Cmd.Dir = filepath.Dir(bin)
		return c.Run(time.Minute)
	}
	if r := run(""); r.ExitCode != 1 || strings.Contains(r.Stdout, "=== RUN") ||
		!strings.Contains(r.Stderr, "FAIL: testutil: cannot create a private network namespace (not root)") {
		t.Errorf("as nobody: %s, want exit status 1, no test run and why", r)
	}
	if r := run("1"); !r.OK() || !strings.Contains(r.Stdout, "--- SKIP: TestPartialOnlyWhenAllowed") ||
		!strings.Contains(r.Stdout, "needs root for the probe") {
		t.Errorf("as nobody with %s=1: %s, want the probe skipped for want of root", testutil.AllowPartialEnv, r)
	}
}
