package main

import (
	"bytes"
	"errors"
	"flag"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

// TestMain lets the test binary act as osfrun when OSFRUN_TEST_MAIN=1, so
// that end-to-end tests need not build anything.
func TestMain(m *testing.M) {
	if os.Getenv("OSFRUN_TEST_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

func TestParseArgs(t *testing.T) {
	both := []policy.Role{policy.Client, policy.Server}
	tests := []struct {
		name string
		args []string
		want options
	}{
		{"program only", []string{"prog", "-x", "--strict"},
			options{args: []string{"prog", "-x", "--strict"}}},
		{"all env flags", []string{"--routes", "offload *", "--transport=shm", "--strict", "--log-level", "debug",
			"--log-file", "/tmp/l", "--spin-us", "5", "--ring-size", "1M", "--lib", "/x/libosf.so", "--", "prog", "a"},
			options{
				set: []string{"OSF_ROUTES=offload *", "OSF_TRANSPORT=shm", "OSF_LOG_LEVEL=debug", "OSF_LOG_FILE=/tmp/l",
					"OSF_SPIN_US=5", "OSF_RING_SIZE=1M", "OSF_STRICT=1"},
				lib:  "/x/libosf.so",
				args: []string{"prog", "a"},
			}},
		{"strict false", []string{"--strict=false", "prog"},
			options{set: []string{"OSF_STRICT=0"}, args: []string{"prog"}}},
		{"static", []string{"--static", "prog", "--static"},
			options{static: true, args: []string{"prog", "--static"}}},
		{"empty routes", []string{"-routes=", "prog"},
			options{set: []string{"OSF_ROUTES="}, args: []string{"prog"}}},
		{"explain", []string{"--explain", "10.0.0.1:80"},
			options{explain: true, addr: netip.MustParseAddrPort("10.0.0.1:80"), roles: both, args: []string{}}},
		{"explain IPv6 server", []string{"--explain", "[::1]:80", "--role", "server", "--prog", "nginx"},
			options{explain: true, addr: netip.MustParseAddrPort("[::1]:80"), roles: []policy.Role{policy.Server},
				prog: "nginx", progSet: true, args: []string{}}},
		{"explain client with program", []string{"--explain", "10.0.0.1:80", "--role=client", "/usr/bin/curl"},
			options{explain: true, addr: netip.MustParseAddrPort("10.0.0.1:80"), roles: []policy.Role{policy.Client},
				args: []string{"/usr/bin/curl"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseArgs(tt.args)
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseArgs(%q)\n got %+v\nwant %+v", tt.args, got, tt.want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "missing program to run"},
		{[]string{"--strict"}, "missing program to run"},
		{[]string{"--role", "client", "prog"}, "--role and --prog apply only to --explain"},
		{[]string{"--prog", "x", "prog"}, "--role and --prog apply only to --explain"},
		{[]string{"--explain", "10.0.0.1"}, `bad --explain address "10.0.0.1", want ADDR:PORT such as 10.0.0.1:80 or [::1]:80`},
		{[]string{"--explain", "::1:80"}, `bad --explain address "::1:80", want ADDR:PORT such as 10.0.0.1:80 or [::1]:80`},
		{[]string{"--explain", "10.0.0.1:80", "--role", "peer"}, `bad --role "peer", want client, server or both`},
		{[]string{"--bogus", "prog"}, "flag provided but not defined: -bogus"},
		{[]string{"--routes"}, "flag needs an argument: -routes"},
	}
	for _, tt := range tests {
		_, err := parseArgs(tt.args)
		if err == nil || err.Error() != tt.want {
			t.Errorf("parseArgs(%q) error = %v, want %q", tt.args, err, tt.want)
		}
	}
	for _, h := range []string{"-h", "--help", "-help"} {
		if _, err := parseArgs([]string{h}); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("parseArgs(%s) = %v, want flag.ErrHelp", h, err)
		}
	}
}

func TestProgram(t *testing.T) {
	tests := []struct {
		opts options
		want string
	}{
		{options{}, ""},
		{options{args: []string{"/usr/sbin/nginx", "-g"}}, "nginx"},
		{options{args: []string{"nginx"}, prog: "x", progSet: true}, "x"},
		{options{prog: "", progSet: true}, ""},
	}
	for _, tt := range tests {
		if got := tt.opts.program(); got != tt.want {
			t.Errorf("%+v.program() = %q, want %q", tt.opts, got, tt.want)
		}
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	conf, bad := filepath.Join(dir, "osf.conf"), filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(conf, []byte("kernel both sshd *\noffload both * local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("\nOSF_X=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args, env []string
		status    int
		stdout    string // substring
		stderr    string // exact
	}{
		{name: "help", args: []string{"--help"}, stdout: "usage: osfrun [flags] [--] prog [args...]"},
		{name: "bad flag", args: []string{"--nope"}, status: exitUsage,
			stderr: "osfrun: flag provided but not defined: -nope\nusage: osfrun [flags] [--] prog [args...]; osfrun --help for more\n"},
		{name: "malformed flag value", args: []string{"--ring-size", "5000", "prog"}, status: exitUsage,
			stderr: "osf: OSF_RING_SIZE=\"5000\": not a power of two\n"},
		{name: "malformed environment", args: []string{"prog"}, env: []string{"OSF_ROUTES=offload local;offload bogus 1.2.3.4:99999"},
			status: exitUsage,
			stderr: "osf: OSF_ROUTES=\"offload bogus 1.2.3.4:99999\" (rule 2): port 99999 out of range 1-65535\n"},
		{name: "explain checks the environment", args: []string{"--explain", "127.0.0.1:53", "--role", "client"},
			env:    []string{"OSF_TRANSPORT=bogus", "OSF_ROUTESS=x", "OSF_ROUTES=offload *"},
			stderr: "osf: OSF_TRANSPORT=\"bogus\": want auto, shm, rdma or kernel\n", status: exitUsage},
		{name: "flag overrides the environment and unknown variables are warned about", args: []string{"--explain", "127.0.0.1:53", "--role", "client", "--transport", "shm"},
			env:    []string{"OSF_TRANSPORT=bogus", "OSF_ROUTESS=x", "OSF_ROUTES=offload *"},
			stdout: "client 127.0.0.1:53, program any:\n  rule 1  yes: any address\n  => shm: offloaded\n",
			stderr: "osfrun: warning: OSF_ROUTESS is not an osf variable (ignored)\n"},
		{name: "explain with the RDMA stand-in", args: []string{"--explain", "127.0.0.1:80", "--role", "client"},
			env:    []string{"OSF_TRANSPORT=rdma", "OSF_DEBUG_RDMA_SIM=1", "OSF_ROUTES=offload *"},
			stdout: "  => rdma via sim: offloaded\n"},
		{name: "explain says which file line decided", args: []string{"--explain", "127.0.0.1:22", "--role", "client", "--prog", "sshd"},
			env:    []string{"OSF_CONF=" + conf},
			stdout: "  => kernel: route rule 1 chose kernel\n     decided by rule 1 at " + conf + ":1\n"},
		{name: "malformed configuration file", args: []string{"prog"}, env: []string{"OSF_CONF=" + bad}, status: exitUsage,
			stderr: "osf: " + bad + ":2: unknown variable OSF_X: \"OSF_X=1\"\n"},
		{name: "missing library", args: []string{"--lib", "/nonexistent/libosf.so", "true"}, status: exitUsage,
			stderr: "osfrun: --lib /nonexistent/libosf.so: no such file\n"},
		{name: "missing library from OSF_LIB", args: []string{"true"}, env: []string{"OSF_LIB=/nonexistent/libosf.so"}, status: exitUsage,
			stderr: "osfrun: OSF_LIB /nonexistent/libosf.so: no such file\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// The host's /etc/osf.conf must not matter (the first OSF_CONF counts).
			status := run(tt.args, append(slices.Clone(tt.env), "OSF_CONF="), &stdout, &stderr)
			if status != tt.status {
				t.Errorf("status = %d, want %d; stderr %q", status, tt.status, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout does not contain %q:\n%s", tt.stdout, stdout.String())
			}
			if stderr.String() != tt.stderr {
				t.Errorf("stderr = %q, want %q", stderr.String(), tt.stderr)
			}
		})
	}
}

func TestRunNotFound(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libosf.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	status := run([]string{"--lib", lib, "osfrun-no-such-program"}, nil, &stdout, &stderr)
	if status != exitNotFound || !strings.Contains(stderr.String(), "osfrun-no-such-program") {
		t.Errorf("run = %d, stderr %q; want %d and the program named", status, stderr.String(), exitNotFound)
	}
}

// TestRunExec runs the test binary as osfrun, which execs env; env's output
// must show the preloaded library and the variables the flags set.
func TestRunExec(t *testing.T) {
	envPath, err := exec.LookPath("env")
	if err != nil {
		t.Skipf("no env program: %v", err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libosf.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "--lib", lib, "--routes", "offload 10.0.0.0/8", "--strict",
		"--ring-size", "1M", "--spin-us", "7", "--", envPath)
	cmd.Env = append(filterEnv(os.Environ()), "OSFRUN_TEST_MAIN=1", "OSF_SPIN_US=99", "OSF_TRANSPORT=shm",
		"LD_PRELOAD=/other/lib.so")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("osfrun env: %v; stderr:\n%s", err, stderr.String())
	}
	lines := strings.Split(stdout.String(), "\n")
	for _, want := range []string{
		"LD_PRELOAD=" + lib + ":/other/lib.so",
		"OSF_ROUTES=offload 10.0.0.0/8",
		"OSF_STRICT=1",
		"OSF_RING_SIZE=1M",
		"OSF_SPIN_US=7",
		"OSF_TRANSPORT=shm",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("env output lacks %q:\n%s", want, stdout.String())
		}
	}
	if slices.Contains(lines, "OSF_SPIN_US=99") {
		t.Errorf("the flag did not replace OSF_SPIN_US=99")
	}
}

// filterEnv drops OSF_* and LD_PRELOAD from env.
func filterEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OSF_") && !strings.HasPrefix(kv, "LD_PRELOAD=") {
			out = append(out, kv)
		}
	}
	return out
}
