package policy_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/osfproject/osf/internal/policy"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		edit func(c *policy.Config) // turns Default() into the expected Config
	}{
		{"empty", nil, func(*policy.Config) {}},
		{"other variables", []string{"PATH=/bin", "HOME", "OSFX=1", "LD_PRELOAD=x"}, func(*policy.Config) {}},
		{"unknown OSF variable", []string{"OSF_RINGSIZE=oops"}, func(*policy.Config) {}},
		{"routes", []string{"OSF_ROUTES=offload client *"}, func(c *policy.Config) {
			c.Routes = mustRoutes(t, "offload client *")
			c.DefaultRoutes = false
		}},
		{"empty routes", []string{"OSF_ROUTES="}, func(c *policy.Config) {
			c.Routes, c.DefaultRoutes = nil, false
		}},
		{"comment routes", []string{"OSF_ROUTES=# none"}, func(c *policy.Config) {
			c.Routes, c.DefaultRoutes = nil, false
		}},
		{"first occurrence wins", []string{"OSF_TRANSPORT=shm", "OSF_TRANSPORT=bogus"}, func(c *policy.Config) {
			c.Transport = policy.ShmOnly
		}},
		{"transport rdma", []string{"OSF_TRANSPORT=rdma"}, func(c *policy.Config) { c.Transport = policy.RDMAOnly }},
		{"transport kernel", []string{"OSF_TRANSPORT=Kernel"}, func(c *policy.Config) { c.Transport = policy.KernelOnly }},
		{"transport auto", []string{"OSF_TRANSPORT=auto"}, func(*policy.Config) {}},
		{"strict", []string{"OSF_STRICT=1"}, func(c *policy.Config) { c.Strict = true }},
		{"not strict", []string{"OSF_STRICT=0"}, func(*policy.Config) {}},
		{"log", []string{"OSF_LOG_LEVEL=debug", "OSF_LOG_FILE=/tmp/osf.log"}, func(c *policy.Config) {
			c.LogLevel, c.LogFile = policy.LogDebug, "/tmp/osf.log"
		}},
		{"log level upper case", []string{"OSF_LOG_LEVEL=WARN"}, func(c *policy.Config) { c.LogLevel = policy.LogWarn }},
		{"empty log file", []string{"OSF_LOG_FILE="}, func(*policy.Config) {}},
		{"ring size bytes", []string{"OSF_RING_SIZE=4096"}, func(c *policy.Config) { c.RingSize = 4096 }},
		{"ring size K", []string{"OSF_RING_SIZE=64K"}, func(c *policy.Config) { c.RingSize = 64 << 10 }},
		{"ring size k", []string{"OSF_RING_SIZE=4k"}, func(c *policy.Config) { c.RingSize = 4 << 10 }},
		{"ring size M", []string{"OSF_RING_SIZE=64M"}, func(c *policy.Config) { c.RingSize = 64 << 20 }},
		{"ring size leading zero", []string{"OSF_RING_SIZE=01M"}, func(c *policy.Config) { c.RingSize = 1 << 20 }},
		{"spin", []string{"OSF_SPIN_US=0", "OSF_POLL_SPIN_US=1000000"}, func(c *policy.Config) {
			c.Spin, c.PollSpin = 0, time.Second
		}},
		{"rdma poll", []string{"OSF_RDMA_POLL_US=0"}, func(c *policy.Config) { c.RDMAPoll = 0 }},
		{"rdma rx caller", []string{"OSF_RDMA_RX=caller"}, func(c *policy.Config) { c.RDMARxLend = false }},
		{"rdma rx engine", []string{"OSF_RDMA_RX=engine"}, func(c *policy.Config) { c.RDMARxCaller, c.RDMARxLend = false, false }},
		{"rdma rx lend", []string{"OSF_RDMA_RX=lend"}, func(*policy.Config) {}},
		{"connect timeout", []string{"OSF_CONNECT_TIMEOUT_MS=60000"}, func(c *policy.Config) { c.ConnectTimeout = time.Minute }},
		{"debug load core", []string{"OSF_DEBUG_LOAD_CORE=1"}, func(c *policy.Config) { c.DebugLoadCore = true }},
		{"debug rdma sim", []string{"OSF_DEBUG_RDMA_SIM=1"}, func(c *policy.Config) { c.DebugRDMASim = true }},
		{"lib", []string{"OSF_LIB=anything at all"}, func(*policy.Config) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.Parse(tt.env)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := policy.Default()
			tt.edit(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse(%q)\n got %+v\nwant %+v", tt.env, got, want)
			}
		})
	}
}

func TestParseMalformed(t *testing.T) {
	tests := []struct {
		env  []string
		want string
	}{
		{[]string{"OSF_TRANSPORT=tcp"}, `osf: OSF_TRANSPORT="tcp": want auto, shm, rdma or kernel`},
		{[]string{"OSF_RDMA_RX=app"}, `osf: OSF_RDMA_RX="app": want engine, caller or lend`},
		{[]string{"OSF_TRANSPORT="}, `osf: OSF_TRANSPORT="": want auto, shm, rdma or kernel`},
		{[]string{"OSF_STRICT=yes"}, `osf: OSF_STRICT="yes": want 0 or 1`},
		{[]string{"OSF_STRICT="}, `osf: OSF_STRICT="": want 0 or 1`},
		{[]string{"OSF_DEBUG_LOAD_CORE=true"}, `osf: OSF_DEBUG_LOAD_CORE="true": want 0 or 1`},
		{[]string{"OSF_LOG_LEVEL=trace"}, `osf: OSF_LOG_LEVEL="trace": want debug, info, warn or error`},
		{[]string{"OSF_RING_SIZE=5000"}, `osf: OSF_RING_SIZE="5000": not a power of two`},
		{[]string{"OSF_RING_SIZE=2K"}, `osf: OSF_RING_SIZE="2K": out of range 4K-64M`},
		{[]string{"OSF_RING_SIZE=128M"}, `osf: OSF_RING_SIZE="128M": out of range 4K-64M`},
		{[]string{"OSF_RING_SIZE=99999999999999999999999K"}, `osf: OSF_RING_SIZE="99999999999999999999999K": out of range 4K-64M`},
		{[]string{"OSF_RING_SIZE=0"}, `osf: OSF_RING_SIZE="0": out of range 4K-64M`},
		{[]string{"OSF_RING_SIZE=256KB"}, `osf: OSF_RING_SIZE="256KB": want decimal digits with an optional K or M suffix`},
		{[]string{"OSF_RING_SIZE=K"}, `osf: OSF_RING_SIZE="K": want decimal digits with an optional K or M suffix`},
		{[]string{"OSF_RING_SIZE="}, `osf: OSF_RING_SIZE="": want decimal digits with an optional K or M suffix`},
		{[]string{"OSF_SPIN_US=-1"}, `osf: OSF_SPIN_US="-1": want decimal digits`},
		{[]string{"OSF_SPIN_US=+5"}, `osf: OSF_SPIN_US="+5": want decimal digits`},
		{[]string{"OSF_SPIN_US= 5"}, `osf: OSF_SPIN_US=" 5": want decimal digits`},
		{[]string{"OSF_SPIN_US=5 "}, `osf: OSF_SPIN_US="5 ": want decimal digits`},
		{[]string{"OSF_SPIN_US="}, `osf: OSF_SPIN_US="": want decimal digits`},
		{[]string{"OSF_SPIN_US=1000001"}, `osf: OSF_SPIN_US="1000001": out of range 0-1000000`},
		{[]string{"OSF_SPIN_US=18446744073709551617"}, `osf: OSF_SPIN_US="18446744073709551617": out of range 0-1000000`},
		{[]string{"OSF_POLL_SPIN_US=0x10"}, `osf: OSF_POLL_SPIN_US="0x10": want decimal digits`},
		{[]string{"OSF_CONNECT_TIMEOUT_MS=0"}, `osf: OSF_CONNECT_TIMEOUT_MS="0": out of range 1-60000`},
		{[]string{"OSF_CONNECT_TIMEOUT_MS=60001"}, `osf: OSF_CONNECT_TIMEOUT_MS="60001": out of range 1-60000`},
		{[]string{"OSF_ROUTES=offload local\noffload bogus 1.2.3.4:99999"},
			`osf: OSF_ROUTES="offload bogus 1.2.3.4:99999" (rule 2): port 99999 out of range 1-65535`},
		// Variables are checked in the order of Vars: OSF_ROUTES first.
		{[]string{"OSF_SPIN_US=x", "OSF_ROUTES=x"},
			`osf: OSF_ROUTES="x" (rule 1): unknown action "x", want offload, kernel or gateway`},
		{[]string{"OSF_LOG_LEVEL=\x00\n"}, `osf: OSF_LOG_LEVEL="\x00\n": want debug, info, warn or error`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			c, err := policy.Parse(tt.env)
			if err == nil {
				t.Fatalf("Parse = %+v, want error", c)
			}
			if c != nil {
				t.Errorf("Parse returned a Config with an error")
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
			if !errors.Is(err, policy.ErrMalformed) {
				t.Errorf("errors.Is(%v, ErrMalformed) = false", err)
			}
			var pe *policy.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			if name, _, _ := strings.Cut(tt.env[len(tt.env)-1], "="); pe.Var != name {
				t.Errorf("Var = %q, want %q", pe.Var, name)
			}
		})
	}
}

// TestVarDefaults checks that every documented default parses to the value
// Default uses.
func TestVarDefaults(t *testing.T) {
	var env []string
	for _, v := range policy.Vars() {
		if v.Default != "" {
			env = append(env, v.Name+"="+v.Default)
		}
	}
	got, err := policy.Parse(env)
	if err != nil {
		t.Fatalf("Parse(defaults): %v", err)
	}
	want := policy.Default()
	want.DefaultRoutes = false // OSF_ROUTES is set, to the default text
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(defaults)\n got %+v\nwant %+v", got, want)
	}
}

func TestDefaultIsACopy(t *testing.T) {
	c := policy.Default()
	c.Routes[0].Offload = true
	if policy.Default().Routes[0].Offload {
		t.Error("changing a Default() Config changed the default rules")
	}
}

func TestUnknown(t *testing.T) {
	env := []string{"OSF_RINGSIZE=1", "PATH=/bin", "OSF_ROUTES=", "OSF_STRICT", "OSF_RINGSIZE=2", "OSF_", "OSFX=1", "OSF_LIB=x", "osf_spin_us=1"}
	want := []string{"OSF_RINGSIZE", "OSF_"}
	if got := policy.Unknown(env); !slices.Equal(got, want) {
		t.Errorf("Unknown = %q, want %q", got, want)
	}
	if got := policy.Unknown(nil); got != nil {
		t.Errorf("Unknown(nil) = %q, want nil", got)
	}
}

func TestLogLevelMatchesZap(t *testing.T) {
	tests := []struct {
		l    policy.LogLevel
		want zapcore.Level
	}{
		{policy.LogDebug, zapcore.DebugLevel},
		{policy.LogInfo, zapcore.InfoLevel},
		{policy.LogWarn, zapcore.WarnLevel},
		{policy.LogError, zapcore.ErrorLevel},
	}
	for _, tt := range tests {
		if got := zapcore.Level(tt.l); got != tt.want || tt.l.String() != tt.want.String() {
			t.Errorf("zapcore.Level(%v) = %v, want %v", tt.l, got, tt.want)
		}
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		env  []string
		want string
	}{
		{nil, `routes="kernel both * *:53; offload both * local" (default) transport=auto strict=0 log-level=error log-file=stderr ring-size=1M spin-us=20 poll-spin-us=20 rdma-poll-us=20 rdma-rx=lend connect-timeout-ms=1000 debug-load-core=0 debug-rdma-sim=0`},
		{[]string{"OSF_ROUTES=offload 10.1.2.3/8 ; kernel *", "OSF_TRANSPORT=shm", "OSF_STRICT=1", "OSF_LOG_FILE=/x y", "OSF_RING_SIZE=4M", "OSF_SPIN_US=7", "OSF_CONNECT_TIMEOUT_MS=5", "OSF_DEBUG_LOAD_CORE=1"},
			`routes="offload 10.1.2.3/8; kernel *" transport=shm strict=1 log-level=error log-file="/x y" ring-size=4M spin-us=7 poll-spin-us=20 rdma-poll-us=20 rdma-rx=lend connect-timeout-ms=5 debug-load-core=1 debug-rdma-sim=0`},
		{[]string{"OSF_ROUTES="}, `routes="" transport=auto strict=0 log-level=error log-file=stderr ring-size=1M spin-us=20 poll-spin-us=20 rdma-poll-us=20 rdma-rx=lend connect-timeout-ms=1000 debug-load-core=0 debug-rdma-sim=0`},
	}
	for _, tt := range tests {
		c, err := policy.Parse(tt.env)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.env, err)
		}
		if got := c.Summary(); got != tt.want {
			t.Errorf("Summary()\n got %s\nwant %s", got, tt.want)
		}
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{policy.Client.String(), "client"},
		{policy.Server.String(), "server"},
		{policy.Both.String(), "both"},
		{policy.Role(0).String(), "role(0)"},
		{policy.Kernel.String(), "kernel"},
		{policy.Shm.String(), "shm"},
		{policy.RDMA.String(), "rdma"},
		{policy.Transport(9).String(), "transport(9)"},
		{policy.Auto.String(), "auto"},
		{policy.ShmOnly.String(), "shm"},
		{policy.RDMAOnly.String(), "rdma"},
		{policy.KernelOnly.String(), "kernel"},
		{policy.TransportMode(9).String(), "mode(9)"},
		{policy.LogLevel(9).String(), "level(9)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// mustRoutes parses rules for a test.
func mustRoutes(t *testing.T, s string) []policy.Rule {
	t.Helper()
	rules, err := policy.ParseRoutes(s)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}
