package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// OptionalTool returns the absolute path of an external program, looked up
// as Tool does, or skips t saying that the program is missing and what it
// would have been used for. For tools a test can do without on a machine
// where `make deps` did not install them.
func OptionalTool(t testing.TB, name, why string) string {
	t.Helper()
	for _, d := range systemDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	t.Skipf("%s is not installed (needed to %s)", name, why)
	return ""
}
