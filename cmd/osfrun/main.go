package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/policy"
)

// Exit statuses.
const (
	exitOK       = 0
	exitUsage    = 2   // bad flags, malformed configuration, library not found
	exitNoExec   = 126 // the program was found but could not be executed
	exitNotFound = 127 // the program was not found
)

// envFlag is a flag that sets an OSF_* variable.
type envFlag struct {
	name, env, arg, usage string
}

var envFlags = []envFlag{
	{"routes", "OSF_ROUTES", "R", "route rules, such as 'offload 10.0.0.0/8; kernel *:53'"},
	{"transport", "OSF_TRANSPORT", "T", "auto, shm, rdma or kernel"},
	{"log-level", "OSF_LOG_LEVEL", "L", "debug, info, warn or error"},
	{"log-file", "OSF_LOG_FILE", "F", "log file (default standard error)"},
	{"spin-us", "OSF_SPIN_US", "N", "microseconds a blocking call spins before it sleeps"},
	{"ring-size", "OSF_RING_SIZE", "S", "bytes per ring direction, power of two, 4K-64M"},
}

// options are the parsed command line.
type options struct {
	set     []string // OSF_*=value from flags, in the order of envFlags
	lib     string
	explain bool
	addr    netip.AddrPort
	roles   []policy.Role
	prog    string // --prog; "" means derive it from args
	progSet bool
	static  bool // --static: run prog through osfload (preload/static.c)
	args    []string
}

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// run carries out one invocation and returns the exit status; when it
// launches a program it does not return unless the exec fails.
func run(args, env []string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "osfrun: %v\n", err)
		fmt.Fprintln(stderr, "usage: osfrun [flags] [--] prog [args...]; osfrun --help for more")
		return exitUsage
	}
	env = opts.apply(env)
	// The program's libosf.so reads the configuration file itself; osfrun
	// reads it too, to check it and to explain.
	merged, err := policy.Load(env, opts.program())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	cfg, err := policy.Parse(merged)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	for _, name := range policy.Unknown(env) {
		fmt.Fprintf(stderr, "osfrun: warning: %s is not an osf variable (ignored)\n", name)
	}
	if opts.explain {
		rdma := hostDevice
		if cfg.DebugRDMASim {
			rdma = simDevice
		}
		if err := explain(stdout, cfg, opts, policy.IsLocal, rdma); err != nil {
			fmt.Fprintf(stderr, "osfrun: %v\n", err)
			return exitUsage
		}
		if err := explainGateways(stdout, cfg, opts); err != nil {
			fmt.Fprintf(stderr, "osfrun: %v\n", err)
			return exitUsage
		}
		return exitOK
	}
	return launch(opts, env, stderr)
}

// parseArgs parses the command line. It returns flag.ErrHelp for -h and
// --help.
func parseArgs(args []string) (options, error) {
	fs := flag.NewFlagSet("osfrun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	values := make(map[string]*string, len(envFlags))
	for _, f := range envFlags {
		values[f.name] = fs.String(f.name, "", f.usage)
	}
	strict := fs.Bool("strict", false, "")
	lib := fs.String("lib", "", "")
	explainAddr := fs.String("explain", "", "")
	role := fs.String("role", "both", "")
	prog := fs.String("prog", "", "")
	static := fs.Bool("static", false, "")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}

	opts := options{lib: *lib, prog: *prog, static: *static, args: fs.Args()}
	seen := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { seen[f.Name] = true })
	for _, f := range envFlags {
		if seen[f.name] {
			opts.set = append(opts.set, f.env+"="+*values[f.name])
		}
	}
	if seen["strict"] {
		value := "0"
		if *strict {
			value = "1"
		}
		opts.set = append(opts.set, "OSF_STRICT="+value)
	}
	opts.progSet = seen["prog"]

	if !seen["explain"] {
		switch {
		case seen["role"] || seen["prog"]:
			return options{}, errors.New("--role and --prog apply only to --explain")
		case len(opts.args) == 0:
			return options{}, errors.New("missing program to run")
		}
		return opts, nil
	}
	opts.explain = true
	addr, err := netip.ParseAddrPort(*explainAddr)
	if err != nil {
		return options{}, fmt.Errorf("bad --explain address %q, want ADDR:PORT such as 10.0.0.1:80 or [::1]:80", *explainAddr)
	}
	opts.addr = addr
	switch *role {
	case "client":
		opts.roles = []policy.Role{policy.Client}
	case "server":
		opts.roles = []policy.Role{policy.Server}
	case "both":
		opts.roles = []policy.Role{policy.Client, policy.Server}
	default:
		return options{}, fmt.Errorf("bad --role %q, want client, server or both", *role)
	}
	return opts, nil
}

// apply returns env with the variables the flags set; flags override env.
func (o options) apply(env []string) []string {
	for _, kv := range o.set {
		name, value, _ := strings.Cut(kv, "=")
		env = setEnv(env, name, value)
	}
	return env
}

// program returns the program name --explain matches rules against: --prog,
// else the base name of the program given, else "" for any program.
func (o options) program() string {
	switch {
	case o.progSet:
		return o.prog
	case len(o.args) > 0:
		return filepath.Base(o.args[0])
	}
	return ""
}

// launch execs the program with libosf.so preloaded. It returns only on
// failure.
func launch(opts options, env []string, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		exe = ""
	}
	lib, err := findLib(opts.lib, getEnv(env, "OSF_LIB"), exe)
	if err != nil {
		fmt.Fprintf(stderr, "osfrun: %v\n", err)
		return exitUsage
	}
	preload, err := preloadList(getEnv(env, "LD_PRELOAD"), lib)
	if err != nil {
		fmt.Fprintf(stderr, "osfrun: %v\n", err)
		return exitUsage
	}
	env = setEnv(env, "LD_PRELOAD", preload)

	path, err := exec.LookPath(opts.args[0])
	if err != nil && !errors.Is(err, exec.ErrDot) {
		fmt.Fprintf(stderr, "osfrun: %v\n", err)
		return exitNotFound
	}
	argv := opts.args
	if opts.static {
		// osfload, next to libosf.so, maps a statically linked prog
		// into itself and runs it with its system calls dispatched to
		// osf; anything else it execs as it is.
		loader := filepath.Join(filepath.Dir(lib), loaderName)
		argv = append([]string{loader, path}, opts.args[1:]...)
		path = loader
	}
	err = unix.Exec(path, argv, env)
	fmt.Fprintf(stderr, "osfrun: exec %s: %v\n", path, err)
	return exitNoExec
}

// usage writes the help text.
func usage(w io.Writer) {
	fmt.Fprint(w, `usage: osfrun [flags] [--] prog [args...]
       osfrun [flags] --explain ADDR:PORT [--role client|server|both] [--prog NAME]

osfrun runs prog with libosf.so preloaded, so that its TCP connections go over
shared memory (same host) or RDMA (other hosts) where the route rules allow;
the rest use kernel TCP. Flags set OSF_* variables and override the
environment. --explain prints which route rule and transport an address gets.

flags:
`)
	for _, f := range envFlags {
		fmt.Fprintf(w, "  --%-20s %s (sets %s)\n", f.name+" "+f.arg, f.usage, f.env)
	}
	fmt.Fprint(w, `  --strict               fail instead of falling back to kernel TCP (sets OSF_STRICT=1)
  --static               run prog through osfload (next to libosf.so), which
                         offloads a statically linked C or Go prog too
                         (Syscall User Dispatch); off by default
  --lib PATH             libosf.so to preload (default $OSF_LIB, else ../libosf.so
                         or libosf.so next to osfrun)
  --explain ADDR:PORT    explain the decision for ADDR:PORT (IPv6 as [::1]:80)
  --role ROLE            with --explain: client, server or both (default both)
  --prog NAME            with --explain: program name (default: base name of prog,
                         else any program)
  -h, --help             show this help

variables:
`)
	for _, v := range policy.Vars() {
		fmt.Fprintf(w, "  %-23s %s\n", v.Name, v.Doc)
	}
}
