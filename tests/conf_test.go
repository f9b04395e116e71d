package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/internal/testutil"
)

// confLines are the pieces TestConfFileCAgreesWithGo builds files from:
// every variable osf knows (some may not be in a file), rules, sections,
// comments and malformed lines.
func confLines() []string {
	lines := []string{
		"", "   ", "# comment", "  # indented comment", "\t",
		"offload both * local", "kernel both * *:53", "kernel client curl *:80  # c",
		"offload both * 10.0.0.0/8", "offload bogus x", "kernel *",
		"[program redis-*]", "[program curl]", "[program *]", "[program c?rl]", "[global]",
		"OSF_SPIN_US =", "OSF_LOG_FILE = /tmp/x#y", "OSF_LOG_FILE = a b # c", "OSF_RING_SIZE=\t64K\r",
	}
	// The same few variables again and again, so that sections and
	// precedence are exercised.
	for range 4 {
		lines = append(lines, "OSF_SPIN_US = 5", "OSF_SPIN_US=6", "OSF_STRICT = 1",
			"[program curl]", "[global]", "offload client * *:80")
	}
	return lines
}

// badConfLines are malformed lines.
var badConfLines = []string{
	"offload a;b", "[program]", "[nginx]", "[program a b]", "[program [ab]]", "[global",
	"OSF_SPIN_US", "OSF_NOPE = 1", "ring = 1", "OSF_ROUTES = x",
}

// TestConfFileCAgreesWithGo writes random configuration files and checks
// that libosf.so's reader (preload/conf.c, run by progs/confdump.c) and
// internal/policy's merge the same entries into the same snapshot, or
// reject the file with the same message.
func TestConfFileCAgreesWithGo(t *testing.T) {
	t.Parallel()
	confdump := testutil.Prog(t, "confdump")
	dir := t.TempDir()
	pieces := confLines()
	progs := []string{"curl", "redis-server", "nginx", "cxrl"}
	envs := [][]string{nil, {"OSF_SPIN_US=3"}, {"OSF_ROUTES=kernel both * *", "OSF_STRICT=1"}}
	seed := testutil.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 15))
	var files []string
	for _, v := range policy.Vars() { // which variables a file may set
		files = append(files, v.Name+" = "+v.Default+"\n")
	}
	for range 250 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
			b.WriteByte('\n')
		}
		if rng.IntN(5) == 0 {
			b.WriteString(badConfLines[rng.IntN(len(badConfLines))] + "\n")
			for range rng.IntN(3) {
				b.WriteString(pieces[rng.IntN(len(pieces))] + "\n")
			}
		}
		if rng.IntN(4) == 0 { // no final newline
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		files = append(files, b.String())
	}
	for i, text := range files {
		var b strings.Builder
		b.WriteString(text)
		path := filepath.Join(dir, fmt.Sprintf("c%d.conf", i))
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		prog, env := progs[rng.IntN(len(progs))], envs[rng.IntN(len(envs))]

		var want []string
		wantErr := ""
		f, err := policy.ParseFile(path, []byte(b.String()))
		if err != nil {
			wantErr = strings.TrimPrefix(err.Error(), "osf: ")
		} else {
			want = f.Merge(env, prog)
		}
		r := testutil.Cmd(t, nil, confdump, append([]string{path, "1", prog}, env...)...).Run(shortRun)
		var got []string
		gotErr := strings.TrimSuffix(r.Stderr, "\n")
		if r.OK() {
			got = strings.Split(strings.TrimSuffix(r.Stdout, "\x00"), "\x00")
		}
		if !slices.Equal(got, want) || gotErr != wantErr {
			t.Fatalf("file %q for %s with env %q (seed %d, case %d):\nC:  %q %q\nGo: %q %q",
				b.String(), prog, env, seed, i, got, gotErr, want, wantErr)
		}
		checkWhere(t, confdump, want)
	}
	// A missing file: an error only when it was named.
	r := testutil.Cmd(t, nil, confdump, filepath.Join(dir, "nope"), "0", "x").Run(shortRun)
	if !r.OK() || r.Stdout != "" {
		t.Errorf("missing default file: %s", r)
	}
	r = testutil.Cmd(t, nil, confdump, filepath.Join(dir, "nope"), "1", "x").Run(shortRun)
	if want := filepath.Join(dir, "nope") + ": cannot read: No such file or directory\n"; r.OK() || r.Stderr != want {
		t.Errorf("missing named file: %s, want stderr %q", r, want)
	}
}

// checkWhere checks that the C and Go answers to "which file line set this
// value" agree for every variable and every rule of the merged snapshot
// env (when it parses).
func checkWhere(t *testing.T, confdump string, env []string) {
	t.Helper()
	cfg, err := policy.Parse(env)
	if err != nil {
		return
	}
	var origin string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "OSF_CONF_ORIGIN="); ok {
			origin = v
		}
	}
	type query struct {
		name string
		rule int
	}
	qs := []query{{"OSF_SPIN_US", 0}, {"OSF_STRICT", 0}, {"OSF_RING_SIZE", 0}}
	for i := range len(cfg.Routes) + 1 {
		qs = append(qs, query{"OSF_ROUTES", i + 1})
	}
	for _, q := range qs {
		r := testutil.Cmd(t, nil, confdump, "-w", origin, q.name, strconv.Itoa(q.rule)).Run(shortRun)
		if want := cfg.Where(q.name, q.rule); !r.OK() || r.Stdout != want {
			t.Fatalf("where %s rule %d with origin %q: C %q (%s), Go %q", q.name, q.rule, origin, r.Stdout, r, want)
		}
	}
}

// TestConfFile runs the loopback program under osf with a configuration
// file: its rules, its [program] sections and the environment's precedence
// decide the transport, and a malformed file is reported once with its
// line while osf stays pass-through.
func TestConfFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kernelFile := write("kernel.conf", "# python on the kernel\n[program python*]\nkernel both * *\n[global]\noffload both * local\n")
	otherFile := write("other.conf", "[program curl]\nkernel both * *\n[global]\nOSF_RING_SIZE = 64K\noffload both * local\n")
	badFile := write("bad.conf", "OSF_RING_SIZE = 64K\n\nOSF_SPIN = 5\n")
	badValue := write("badvalue.conf", "OSF_RING_SIZE = 3M\noffload both * local\n")
	cases := []struct {
		name      string
		env       []string
		transport string // of the connection; "" when osf is disabled
		report    string
	}{
		{"file routes", []string{"OSF_CONF=" + kernelFile}, testutil.TransportKernel, ""},
		{"environment wins", []string{"OSF_CONF=" + kernelFile, "OSF_ROUTES=offload both * local"}, testutil.TransportShm, ""},
		{"other program's section", []string{"OSF_CONF=" + otherFile}, testutil.TransportShm, ""},
		{"malformed line", []string{"OSF_CONF=" + badFile}, "",
			"osf: " + badFile + `:3: unknown variable OSF_SPIN: "OSF_SPIN = 5"; osf is disabled (pass-through) in this process`},
		{"malformed value", []string{"OSF_CONF=" + badValue}, "",
			"osf: " + badValue + `:1: OSF_RING_SIZE="3M": not a power of two; osf is disabled (pass-through) in this process`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := startLoopback(t, underOsf, tc.env, python(t))
			p, stdin, cfd, sfd := l.p, l.stdin, l.cfd, l.sfd
			if !strings.HasPrefix(l.out, "ok\n") {
				t.Errorf("stdout %q, want ok", l.out)
			}
			st := testutil.OsfStat(t, p.Pid)
			for _, s := range st.Sockets {
				if tc.transport == "" && s.Transport != testutil.TransportKernel && s.Transport != testutil.TransportNone {
					t.Errorf("socket on %q with osf disabled: %s", s.Transport, s)
				}
			}
			if tc.transport != "" {
				testutil.AssertTransport(t, p.Pid, testutil.ByFD(cfd), tc.transport)
				testutil.AssertTransport(t, p.Pid, testutil.ByFD(sfd), tc.transport)
			}
			stdin.Close()
			r := p.Wait(shortRun)
			if !r.OK() {
				t.Fatalf("python: %s", r)
			}
			lines := osfLines(r.Stderr)
			if tc.report == "" && len(lines) != 0 || tc.report != "" && (len(lines) != 1 || lines[0] != tc.report) {
				t.Errorf("osf printed %q, want %q", lines, tc.report)
			}
		})
	}
}
