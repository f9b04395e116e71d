package tests

import (
	"os"
	"testing"
)

// knownBugs are libosf.so bugs these tests found and that are not fixed
// yet. A test (or subtest) whose expectation one of them breaks calls
// knownBug first: it is skipped, naming the bug, unless
// OSFTEST_KNOWN_BUGS=1. Remove an entry (and its knownBug calls) with the
// fix.
var knownBugs = map[string]string{
	"go-threads-unblock": "the Go runtime's threads unblock SIGCHLD and SIGPROF (runtime sigtable " +
		"_SigUnblock, applied in minitSignalMask even in c-shared mode), so a process-directed SIGCHLD " +
		"or SIGPROF can be delivered to a Go thread once the core is loaded: a SIGCHLD the program " +
		"blocks and collects with sigwait/signalfd is discarded there (default action), a SIGCHLD " +
		"handler runs there while the program waits in sigsuspend (coreutils `timeout 5 sleep 1` " +
		"hangs until its 5 s alarm in most runs), and an application SIGPROF handler runs on Go's " +
		"32 KiB signal stack (osf forces SA_ONSTACK) and crashes the program",
	"onstack-readback": "after the core is loaded, sigaction read-back shows SA_ONSTACK on every " +
		"handler the program installed: the Go runtime's initsig calls setsigstack through libc's " +
		"sigaction, which is osf's hook, and the hook then forgets that osf itself added the flag",
	"ulimit-v": "under `ulimit -v 600000` a program that listens or connects on TCP is killed by " +
		"the Go runtime (\"fatal error: failed to reserve page summary memory\", exit 2) when osf " +
		"loads the core; osf should not load the core (pass-through, reason resource limit) when " +
		"RLIMIT_AS is too small for the Go runtime",
}

// knownBug skips t because of bug id unless OSFTEST_KNOWN_BUGS=1.
func knownBug(t *testing.T, id string) {
	t.Helper()
	desc, ok := knownBugs[id]
	if !ok {
		t.Fatalf("knownBug: no bug %q", id)
	}
	if os.Getenv("OSFTEST_KNOWN_BUGS") == "1" {
		t.Logf("known libosf.so bug %s, enforced: %s", id, desc)
		return
	}
	t.Skipf("known libosf.so bug %s (OSFTEST_KNOWN_BUGS=1 runs this): %s", id, desc)
}
