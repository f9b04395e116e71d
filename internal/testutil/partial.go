package testutil

import (
	"os"
	"testing"
)

// AllowPartialEnv names the variable that lets the tests run in part:
// without it, a test that needs root (ip netns, a setuid binary, another
// user, a mount namespace), and a test binary that cannot move into a
// private network namespace, fail rather than pass by skipping; with
// OSF_TEST_ALLOW_PARTIAL=1 they skip, saying why.
const AllowPartialEnv = "OSF_TEST_ALLOW_PARTIAL"

// PartialAllowed reports whether OSF_TEST_ALLOW_PARTIAL=1 is set.
func PartialAllowed() bool { return os.Getenv(AllowPartialEnv) == "1" }

// NeedRoot returns when the tests run as root; otherwise it skips t if
// OSF_TEST_ALLOW_PARTIAL=1 is set, and fails it (t.Fatal) if not. why says
// what root is needed for.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if PartialAllowed() {
		t.Skipf("needs root %s (%s=1: skipped)", why, AllowPartialEnv)
	}
	t.Fatalf("needs root %s: run the tests as root, or set %s=1 to skip what needs it",
		why, AllowPartialEnv)
}
