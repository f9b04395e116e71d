package tests

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestSetuidIgnoresOsf copies progs/mapscheck.c's binary to a directory on
// a filesystem that honours setuid bits, makes one copy setuid root, and
// runs both as user nobody with LD_PRELOAD=libosf.so: the dynamic loader
// must ignore the library for the setuid copy ("not loaded", euid 0) and
// load it for the plain one.
func TestSetuidIgnoresOsf(t *testing.T) {
	t.Parallel()
	setpriv := testutil.Tool(t, "setpriv")
	suid, plain := setuidPair(t, setuidDir(t), "mapscheck")
	cases := []struct {
		prog string
		m    mode
		want string
	}{
		{suid, underOsf, "libosf: not loaded\nuid 65534 euid 0\n"},
		{plain, underOsf, "libosf: loaded\nuid 65534 euid 65534\n"},
		{suid, bare, "libosf: not loaded\nuid 65534 euid 0\n"},
		{plain, bare, "libosf: not loaded\nuid 65534 euid 65534\n"},
	}
	for _, tc := range cases {
		r := tc.m.cmd(t, nil, setpriv, append(asNobody, tc.prog)...).MustRun(shortRun)
		if r.Stdout != tc.want {
			t.Errorf("%s %s as nobody: stdout %q, want %q (stderr %q)", tc.m.name, filepath.Base(tc.prog), r.Stdout, tc.want, r.Stderr)
		}
	}
}

// setuidDir returns a fresh directory, on a filesystem that honours setuid
// bits, from which user nobody can run programs under libosf.so; it skips
// the test when that cannot be had (not root, nosuid, untraversable).
func setuidDir(t *testing.T) string {
	t.Helper()
	testutil.NeedRoot(t, "to make a setuid-root binary")
	dir, err := os.MkdirTemp(testutil.BuildDir(t), "setuid-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts, err := exec.Command(testutil.Tool(t, "findmnt"), "-n", "-o", "OPTIONS", "-T", dir).Output()
	if err != nil {
		t.Fatalf("findmnt -T %s: %v", dir, err)
	}
	if strings.Contains(","+strings.TrimSpace(string(opts))+",", ",nosuid,") {
		t.Skipf("%s is on a nosuid filesystem (%s)", dir, strings.TrimSpace(string(opts)))
	}
	// nobody must be able to reach libosf.so and the binaries.
	for d := filepath.Dir(testutil.Lib(t)); d != "/"; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not traversable by other users", d)
		}
	}

	return dir
}

// setuidPair copies the test program prog into dir twice, both owned by
// root: PROG-suid set-user-ID, PROG plain; it returns their paths.
func setuidPair(t *testing.T, dir, prog string) (suid, plain string) {
	t.Helper()
	suid, plain = filepath.Join(dir, prog+"-suid"), filepath.Join(dir, prog)
	for f, mode := range map[string]os.FileMode{suid: 0o755 | os.ModeSetuid, plain: 0o755} {
		copyFile(t, testutil.Prog(t, prog), f)
		if err := os.Chown(f, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
	}
	return suid, plain
}

// asNobody is setpriv's arguments for running a program as user nobody.
var asNobody = []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--"}

// TestSetuidHandoffIsLoud is issue 10's item 9: an offloaded connection
// inherited by a program that runs without osf (a set-user-ID program,
// which the loader starts without LD_PRELOAD) cannot work there; it must
// fail loudly, as a TCP socket that received a reset (ECONNRESET), and the
// peer must see a reset, never a silent end of file with its data lost.
// Before, the program read end of file and the 1000 bytes were gone.
func TestSetuidHandoffIsLoud(t *testing.T) {
	t.Parallel()
	dir := setuidDir(t)
	setpriv := testutil.Tool(t, "setpriv")
	suid, parent := setuidPair(t, dir, "suidexec")
	r := underOsf.cmd(t, nil, setpriv, append(append([]string(nil), asNobody...), parent, "parent", suid)...).Run(longRun)
	if !r.OK() {
		t.Fatalf("suidexec: %s", r)
	}
	for _, want := range []string{
		"reader: 0 bytes, then ECONNRESET (euid 0)", // the program: loud
		"parent: recv ECONNRESET",                   // the peer: a reset
		"parent: child exit 0",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("suidexec: want %q in:\n%s", want, r.Stdout)
		}
	}
	// posix_spawn (no file actions): the program gets a reset socket, the
	// spawning process keeps its connection and its data.
	r = underOsf.cmd(t, nil, setpriv, append(append([]string(nil), asNobody...), parent, "parent", suid, "spawn")...).Run(longRun)
	if !r.OK() {
		t.Fatalf("suidexec spawn: %s", r)
	}
	for _, want := range []string{
		"reader: 0 bytes, then ECONNRESET (euid 0)",
		"parent: child exit 0",
		"parent: still reads data",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("suidexec spawn: want %q in:\n%s", want, r.Stdout)
		}
	}
}

// copyFile copies src to dst (mode 0700 until the caller sets it).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSetuidNeverMapsCallersTable is issue 24's item 2: with libosf.so in
// /etc/ld.so.preload (bind-mounted in a private mount namespace), a
// setuid-root program loads the library; started with an fd table it
// inherited from its caller (user nobody, holding an offloaded connection;
// the exec made both through the hooks and by a raw system call), it must
// not map that table: any process the caller handed the table's memfd to
// could write it, and it held a pointer the program dereferenced (a root
// process died of SIGSEGV with the pointer 0x4141414141414141).
func TestSetuidNeverMapsCallersTable(t *testing.T) {
	t.Parallel()
	dir := setuidDir(t)
	wrap := ldSoPreloadMounts(t, dir)
	setpriv := testutil.Tool(t, "setpriv")
	suid, parent := setuidPair(t, dir, "suidexec")
	for _, how := range []string{"exec", "raw"} {
		args := append(append(append([]string(nil), wrap...), setpriv), asNobody...)
		args = append(args, parent, "parent", suid)
		if how == "raw" {
			args = append(args, "raw")
		}
		r := bare.cmd(t, nil, args[0], args[1:]...).Run(longRun)
		if !r.OK() {
			t.Fatalf("suidexec (%s): %s", how, r)
		}
		for _, want := range []string{"(euid 0)", "reader: fd table not mapped", "parent: child exit 0"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("suidexec (%s) under /etc/ld.so.preload: want %q in:\n%s\nstderr:\n%s", how, want, r.Stdout, r.Stderr)
			}
		}
	}
}

// TestExecMapsOwnTableCopy is issue 24's item 2 for every exec: an image
// that inherits an fd table maps a copy of its own, never the inherited
// memfd, which the process that handed it on (or any process that process
// gave it to) may still hold and write. progs/tablecopy.c execs itself by
// a raw execve (same pid: the table was adopted in place before) and
// compares the inodes; the inherited connection must still work.
func TestExecMapsOwnTableCopy(t *testing.T) {
	t.Parallel()
	r := underOsf.cmd(t, nil, testutil.Prog(t, "tablecopy")).MustRun(shortRun)
	for _, want := range []string{"after: own table\n", "after: connection works\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("tablecopy: want %q in:\n%s\nstderr:\n%s", want, r.Stdout, r.Stderr)
		}
	}
}
