package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

func TestMain(m *testing.M) { testutil.MainInNetns(m) }

// mode is one way of running a program: bare, under osf, or under osf
// with the Go core loaded at start-up.
type mode struct {
	name string
	osf  bool // LD_PRELOAD=libosf.so
	core bool // OSF_DEBUG_LOAD_CORE=1
	// rdmaSim: connections over the RDMA engine on its software stand-in,
	// or not at all (OSF_TRANSPORT=rdma OSF_DEBUG_RDMA_SIM=1 OSF_STRICT=1:
	// no fallback to kernel TCP passes for it).
	rdmaSim bool
	links   bool // with rdmaSim: OSF_RDMA_LINKS=1 (docs/RDMA.md, "Links")
	log     bool // OSF_LOG_LEVEL=debug into a file, the core loaded at set-up
}

var (
	bare       = mode{name: "bare"}
	underOsf   = mode{name: "osf", osf: true}
	osfCore    = mode{name: "osf+core", osf: true, core: true}
	osfRDMASim = mode{name: "osf+rdma-sim", osf: true, rdmaSim: true}
	osfLinks   = mode{name: "osf+rdma-sim-links", osf: true, rdmaSim: true, links: true}
	// osfLogged logs at debug level to a file (libosf.so writes the C
	// set-up's lines itself) and loads the core at the first listen,
	// connect or accept (OSF_DEBUG_CORE_AT_SETUP=1), as every one of them
	// did before the set-up moved to C. Tests of the core's loading
	// (fresh copies in fork children, signals, limits) run in this mode.
	osfLogged = mode{name: "osf+log", osf: true, log: true}
)

// env returns the environment for m plus extra.
func (m mode) env(t testing.TB, extra ...string) []string {
	t.Helper()
	if m.rdmaSim {
		extra = append(extra, "OSF_TRANSPORT=rdma", "OSF_DEBUG_RDMA_SIM=1", "OSF_STRICT=1")
	}
	if m.links {
		extra = append(extra, "OSF_RDMA_LINKS=1")
	}
	if m.core {
		extra = append(extra, "OSF_DEBUG_LOAD_CORE=1")
	}
	if m.log {
		extra = append(extra, "OSF_LOG_LEVEL=debug", "OSF_LOG_FILE="+filepath.Join(t.TempDir(), "osf.log"),
			"OSF_DEBUG_CORE_AT_SETUP=1")
	}
	if m.osf {
		return testutil.Preload(t, extra...)
	}
	return extra
}

// cmd prepares a program run in mode m.
func (m mode) cmd(t testing.TB, extra []string, name string, args ...string) *testutil.Command {
	t.Helper()
	return testutil.Cmd(t, m.env(t, extra...), name, args...)
}

// strictProgOnPort runs test program prog with a free port and args,
// bare and under osf (OSF_STRICT=1: a fallback to kernel TCP fails its
// connects), each in a subtest that fails unless the program exits 0.
func strictProgOnPort(t *testing.T, prog string, args ...string) {
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			port := strconv.Itoa(testutil.FreePort(t))
			r := m.cmd(t, []string{"OSF_STRICT=1"}, testutil.Prog(t, prog), append([]string{port}, args...)...).Run(longRun)
			if !r.OK() {
				t.Fatalf("%s: %s", prog, r)
			}
			t.Logf("%s", strings.TrimSpace(r.Stdout))
		})
	}
}

// python returns the distribution's python3 (not a pyenv shim, which is a
// bash script).
func python(t testing.TB) string {
	t.Helper()
	return testutil.Tool(t, "python3")
}

// pyFillFds is python (the program imports os) that opens /dev/null until
// the open-files limit refuses, keeping the fds in the list fill: the
// EMFILE tests' way to use up a budget, whatever osf holds in it.
const pyFillFds = `fill = []
try:
    while True:
        fill.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
`

// mapsReport parses the "maps: libosf=N libosfcore=N" line the C helpers
// print on stderr.
func mapsReport(t testing.TB, stderr string) (lib, core bool) {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		var l, c int
		if _, err := fmt.Sscanf(line, "maps: libosf=%d libosfcore=%d", &l, &c); err == nil {
			return l == 1, c == 1
		}
	}
	t.Fatalf("no \"maps:\" line on stderr: %q", stderr)
	return false, false
}

// checkMaps asserts the libraries a C helper found mapped in itself: osf's
// only under osf, the core only when the mode or the program loads it.
func checkMaps(t testing.TB, m mode, stderr string, wantCore bool) {
	t.Helper()
	lib, core := mapsReport(t, stderr)
	if lib != m.osf {
		t.Errorf("%s: libosf.so mapped=%v, want %v", m.name, lib, m.osf)
	}
	if want := m.osf && wantCore; core != want {
		t.Errorf("%s: core mapped=%v, want %v", m.name, core, want)
	}
}

// osfLines returns the lines of s that osf printed ("osf: ...").
func osfLines(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "osf: ") {
			out = append(out, line)
		}
	}
	return out
}

// noOsfMessages fails the test if osf printed anything on stderr.
func noOsfMessages(t testing.TB, what, stderr string) {
	t.Helper()
	if l := osfLines(stderr); len(l) > 0 {
		t.Errorf("%s: osf printed %q", what, l)
	}
}

// Time limits. Generous enough for a loaded 2-vCPU machine, small enough
// that a hang fails fast.
const (
	shortRun = 10 * time.Second
	longRun  = 60 * time.Second
)

func TestMainInNetns(t *testing.T) {
	if !testutil.InNetns() {
		t.Skip("not in a private network namespace (see the warning above)")
	}
	b, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	// Only lo: a header of two lines and one interface.
	if n := strings.Count(strings.TrimSpace(string(b)), "\n") + 1; n != 3 {
		t.Errorf("/proc/net/dev lists %d lines, want only lo:\n%s", n, b)
	}
}
