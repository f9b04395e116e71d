package tests

import (
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestHookTransparency runs hookcheck, which calls every hooked function
// with failing (or trivially succeeding) arguments and prints each return
// value and errno: the output must be the same bare, under osf, and under
// osf with the Go core loaded, since osf must not change a single result
// for fds it does not own. hookcheck --core makes a TCP connection first,
// which (under osf) loads the core before the checks run; hookcheck
// reports on stderr which osf libraries it has mapped.
func TestHookTransparency(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "hookcheck")
	want := bare.cmd(t, nil, prog).MustRun(shortRun).Stdout
	if len(want) < 1000 {
		t.Fatalf("bare hookcheck printed only %q", want)
	}
	for _, m := range []mode{bare, underOsf, osfCore} {
		for _, core := range []bool{false, true} {
			args, name := []string(nil), m.name
			if core {
				args, name = []string{"--core"}, m.name+"/connect-first"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := m.cmd(t, nil, prog, args...).MustRun(shortRun)
				if r.Stdout != want {
					t.Errorf("hookcheck %v output differs from bare:\n%s", args, lineDiff(want, r.Stdout))
				}
				noOsfMessages(t, "hookcheck", r.Stderr)
				lib, coreMapped := mapsReport(t, r.Stderr)
				if lib != m.osf {
					t.Errorf("libosf.so mapped=%v, want %v", lib, m.osf)
				}
				// Without --core, OSF_DEBUG_LOAD_CORE loads the core
				// asynchronously: it may or may not be there yet.
				if m == osfCore && core && !coreMapped {
					t.Error("the core is not mapped after a TCP connection under osf with OSF_DEBUG_LOAD_CORE=1")
				}
				if !m.osf && coreMapped {
					t.Error("the core is mapped in a bare run")
				}
				if m == underOsf && coreMapped {
					t.Error("the core was loaded although nothing needed it (shm and kernel TCP set-ups are C)")
				}
			})
		}
	}
}
