package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// modulePath is the module whose go.mod marks the repository root.
const modulePath = "github.com/osfproject/osf"

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  string
)

// Root returns the absolute path of the repository root: the nearest
// directory at or above the working directory whose go.mod declares the osf
// module. It fails the test if there is none.
func Root(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() { rootDir, rootErr = findRoot() })
	if rootErr != "" {
		t.Fatalf("testutil: %s", rootErr)
	}
	return rootDir
}

func findRoot() (string, string) {
	dir, err := os.Getwd()
	if err != nil {
		return "", "cannot get the working directory: " + err.Error()
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module "+modulePath)) {
			return dir, ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "no go.mod for " + modulePath + " at or above the working directory"
		}
		dir = parent
	}
}

// BuildDirEnv names an environment variable that, when set, replaces
// ROOT/build as the directory Lib, Core, Bin and Prog look in: to run the
// tests against another build of osf (a patched library, for one).
const BuildDirEnv = "OSFTEST_BUILD_DIR"

// BuildDir returns the directory holding the built artifacts: $OSFTEST_BUILD_DIR
// if set, else build/ under the repository root.
func BuildDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(BuildDirEnv); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			t.Fatalf("testutil: %s: %v", BuildDirEnv, err)
		}
		return abs
	}
	return filepath.Join(Root(t), "build")
}

// built returns the absolute path of a file under the build directory,
// failing the test with a hint when it has not been built.
func built(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(BuildDir(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testutil: %s is missing: run `make build` first", p)
	}
	return p
}

// Lib returns the absolute path of build/libosf.so, the LD_PRELOAD library.
// It fails the test with "run `make build` first" when the file is missing.
func Lib(t testing.TB) string {
	t.Helper()
	return built(t, "libosf.so")
}

// Core returns the absolute path of build/libosfcore.so, the Go core that
// libosf.so loads on demand. It fails the test when the file is missing.
func Core(t testing.TB) string {
	t.Helper()
	return built(t, "libosfcore.so")
}

// Bin returns the absolute path of build/bin/NAME (osfrun, osfstat,
// osfperf). It fails the test when the file is missing.
func Bin(t testing.TB, name string) string {
	t.Helper()
	return built(t, filepath.Join("bin", name))
}

// Prog returns the absolute path of build/tests/NAME, the program built from
// tests/progs/NAME.c. It fails the test when the file is missing.
func Prog(t testing.TB, name string) string {
	t.Helper()
	return built(t, filepath.Join("tests", name))
}

// systemDirs are searched before PATH by Tool, so that tests run the
// distribution's programs and not wrappers (a pyenv shim for python3 is a
// bash script, which would put bash under test instead of python).
var systemDirs = []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"}

// Tool returns the absolute path of an external program such as python3,
// nginx or curl, preferring /usr/bin, /bin, /usr/sbin and /sbin over PATH. It
// fails the test, naming the program and `make deps`, when it is not
// installed.
func Tool(t testing.TB, name string) string {
	t.Helper()
	for _, d := range systemDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("testutil: %s is not installed (`make deps` installs the test programs)", name)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("testutil: %s: %v", p, err)
	}
	return abs
}
