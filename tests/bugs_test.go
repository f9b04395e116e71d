package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// knownBugs are libosf.so bugs these tests found and that are not fixed
// yet. A test whose expectation one of them breaks either calls knownBug
// first (when reproducing it is slow: a hang) and is skipped, or checks
// its expectation and calls knownBugFailed when it does not hold, which
// skips the test saying the bug reproduced. With OSFTEST_KNOWN_BUGS=1
// both enforce the expectation instead. Remove an entry (and its calls)
// with the fix.
var knownBugs = map[string]string{
	"go-threads-unblock": "the Go runtime's threads unblock SIGCHLD and SIGPROF (runtime sigtable " +
		"_SigUnblock, applied in minitSignalMask even in c-shared mode), so a process-directed SIGCHLD " +
		"or SIGPROF can be delivered to a Go thread once the core is loaded: a SIGCHLD the program " +
		"blocks and collects with sigwait/signalfd is discarded there (default action), a SIGCHLD " +
		"handler runs there while the program waits in sigsuspend (coreutils `timeout 5 sleep 1` " +
		"hangs until its 5 s alarm in most runs), and an application SIGPROF handler runs on Go's " +
		"32 KiB signal stack (osf forces SA_ONSTACK) and crashes the program",
	"async-load-restore": "when the core loads while the program runs (OSF_DEBUG_LOAD_CORE=1 loads it " +
		"from the constructor on the osf-core thread; in normal use, another thread's connect), " +
		"restore_async_signals() puts back the dispositions it recorded before the load for every " +
		"non-synchronous signal whose handler differs, which reverts every handler the program " +
		"installed meanwhile to SIG_DFL (coreutils timeout loses its SIGCHLD and SIGALRM handlers " +
		"and dies of its own alarm, exit 142)",
	"onstack-readback": "after the core is loaded, sigaction read-back shows SA_ONSTACK on every " +
		"handler the program installed: the Go runtime's initsig calls setsigstack through libc's " +
		"sigaction, which is osf's hook, and the hook then forgets that osf itself added the flag",
	"core-fds": "the Go core holds program-visible low fds once loaded: the runtime's cgroup-aware " +
		"GOMAXPROCS keeps /sys/fs/cgroup/cpu/cpu.cfs_{quota,period}_us open (fds 3-5 typically), and " +
		"with OSF_LOG_FILE the log file plus the netpoller's epoll and eventfd; the program's next " +
		"open() gets other numbers than without osf, and a program that closes or dup2()s over " +
		"them changes what the runtime reads (building the core with " +
		"-X=runtime.godebugDefault=...,updatemaxprocs=0,containermaxprocs=0 removes the cgroup fds)",
	"ulimit-v": "under `ulimit -v 600000` a program that listens or connects on TCP is killed by " +
		"the Go runtime (\"fatal error: failed to reserve page summary memory\", exit 2) when osf " +
		"loads the core; osf should not load the core (pass-through, reason resource limit) when " +
		"RLIMIT_AS is too small for the Go runtime",
}

// enforceKnownBugs reports whether OSFTEST_KNOWN_BUGS=1 asks for the
// expectations that known bugs break to be enforced.
func enforceKnownBugs() bool { return os.Getenv("OSFTEST_KNOWN_BUGS") == "1" }

func bugText(t *testing.T, id string) string {
	t.Helper()
	desc, ok := knownBugs[id]
	if !ok {
		t.Fatalf("no known bug %q", id)
	}
	return desc
}

// knownBug skips t because of the bugs ids unless OSFTEST_KNOWN_BUGS=1.
func knownBug(t *testing.T, ids ...string) {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "\nknown libosf.so bug %s: %s", id, bugText(t, id))
	}
	if enforceKnownBugs() {
		t.Logf("enforced despite:%s", b.String())
		return
	}
	t.Skipf("skipped (OSFTEST_KNOWN_BUGS=1 runs this) because of:%s", b.String())
}

// knownBugFailed reports an expectation that bug id breaks: a test error
// with OSFTEST_KNOWN_BUGS=1, else a skip that says the bug reproduced.
func knownBugFailed(t *testing.T, id, format string, args ...any) {
	t.Helper()
	desc := bugText(t, id)
	msg := fmt.Sprintf(format, args...)
	if enforceKnownBugs() {
		t.Errorf("%s [known libosf.so bug %s: %s]", msg, id, desc)
		return
	}
	t.Skipf("known libosf.so bug %s reproduced (OSFTEST_KNOWN_BUGS=1 fails the test): %s\nbug: %s", id, msg, desc)
}
