package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall" // exec.ProcessState.Sys is a syscall.WaitStatus
	"testing"

	"golang.org/x/sys/unix"
)

// NetnsMarker is the environment variable MainInNetns sets in the test
// binary it re-executes inside a private network namespace. It does not
// start with OSF_, so libosf.so never mistakes it for configuration.
const NetnsMarker = "OSFTEST_IN_NETNS"

// InNetns reports whether this process is the copy of the test binary that
// MainInNetns started inside a private network namespace.
func InNetns() bool { return os.Getenv(NetnsMarker) == "1" }

// MainInNetns runs the tests of a package inside a fresh network namespace
// with only the loopback interface, up. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testutil.MainInNetns(m) }
//
// Unless the marker variable says it already is inside, it re-executes the
// test binary, with the same arguments, as
//
//	unshare -n -- sh -c 'ip link set lo up && exec "$0" "$@"' <binary> <args>
//
// forwards SIGINT, SIGTERM and SIGQUIT to it, and exits with its status. A
// private namespace gives the tests all 28,000 ephemeral ports and listeners
// nobody else sees. Fds the test binary inherited (beyond 0, 1 and 2) are
// made close-on-exec first, so that programs under test see only what the
// tests give them. When that is impossible (not root, no unshare or ip),
// it fails, saying why, unless OSF_TEST_ALLOW_PARTIAL=1 is set: then it
// runs the tests in place, with a loud warning. It never returns.
func MainInNetns(m *testing.M) {
	CloexecInherited()
	if InNetns() {
		os.Exit(m.Run())
	}
	if why := netnsUnavailable(); why != "" {
		if !PartialAllowed() {
			fmt.Fprintf(os.Stderr, "FAIL: testutil: cannot create a private network namespace (%s):\n"+
				"FAIL: run the tests as root, or set %s=1 to run them in the current one,\n"+
				"FAIL: where ports and listeners are shared, skipping what needs root.\n", why, AllowPartialEnv)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "WARNING: testutil: cannot create a private network namespace (%s);\n"+
			"WARNING: running the tests in the current one, where ports and listeners are shared (%s=1).\n",
			why, AllowPartialEnv)
		os.Exit(m.Run())
	}
	os.Exit(reexecInNetns())
}

// netnsUnavailable returns why tests cannot move into a new network
// namespace, or "".
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed"
		}
	}
	out, err := exec.Command("unshare", "-n", "--", "ip", "link", "set", "lo", "up").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("unshare -n failed: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ""
}

func reexecInNetns() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testutil: cannot find the test binary: %v\n", err)
		return 1
	}
	args := append([]string{"-n", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`, self},
		os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), NetnsMarker+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "testutil: unshare: %v\n", err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			fmt.Fprintf(os.Stderr, "testutil: test binary killed by %v\n", ws.Signal())
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "testutil: unshare: %v\n", err)
		return 1
	}
}

// CloexecInherited marks every open fd above 2 close-on-exec, so that fds
// this process inherited from whoever started it (a shell, an IDE, a CI
// runner) do not leak into the programs the tests start: Go's os/exec
// passes on every fd that is not close-on-exec.
func CloexecInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
}
