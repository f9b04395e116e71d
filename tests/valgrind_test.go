package tests

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// TestValgrindSuppressions is issue 10's item 10: memcheck reports the Go
// runtime's stack copying (runtime.adjustframe) in every program that
// loads osf's core, so `valgrind --error-exitcode` runs failed. With the
// suppressions osf ships (preload/core/valgrind.supp, README
// "Troubleshooting") a program that loads the core and offloads a
// connection runs clean.
func TestValgrindSuppressions(t *testing.T) {
	t.Parallel()
	valgrind := testutil.Tool(t, "valgrind")
	supp := filepath.Join(testutil.Root(t), "preload", "core", "valgrind.supp")
	// Go's runtime reads the time stamp counter with RDTSCP when one of
	// its own locks has to sleep (lock_spinbit.go, mutex profiling), an
	// instruction valgrind 3.19 does not know: on a loaded host the run
	// then dies of SIGILL in runtime.cputicks, which says nothing about
	// osf. Such a run is tried again, at most three times.
	var r testutil.Result
	for try := 0; try < 3; try++ {
		r = underOsf.cmd(t, []string{"OSF_DEBUG_LOAD_CORE=1"}, valgrind, "-q", "--error-exitcode=9",
			"--suppressions="+supp, testutil.Prog(t, "tokens"), "20").Run(3 * time.Minute)
		if !strings.Contains(r.Stderr, "SIGILL") || !strings.Contains(r.Stderr, "runtime.cputicks") {
			break
		}
		if try == 2 {
			t.Skipf("valgrind stopped at Go's RDTSCP (runtime.cputicks) three times: %s", r)
		}
	}
	if !r.OK() || !strings.Contains(r.Stdout, "transport offloaded") || !strings.Contains(r.Stdout, "PASS") {
		t.Fatalf("tokens under valgrind with osf's suppressions: %s", r)
	}
}
