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
	r := underOsf.cmd(t, []string{"OSF_DEBUG_LOAD_CORE=1"}, valgrind, "-q", "--error-exitcode=9",
		"--suppressions="+supp, testutil.Prog(t, "tokens"), "20").Run(3 * time.Minute)
	if !r.OK() || !strings.Contains(r.Stdout, "transport offloaded") || !strings.Contains(r.Stdout, "PASS") {
		t.Fatalf("tokens under valgrind with osf's suppressions: %s", r)
	}
}
