package tests

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// pairServer listens on 127.0.0.1, prints its port, accepts one
// connection, reads until end of stream, answers with the SHA-256 of what
// it read, prints "done" and waits for its standard input to close.
const pairServer = `
import hashlib, socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
print(l.getsockname()[1], flush=True)
s, _ = l.accept(); h = hashlib.sha256()
while True:
    b = s.recv(65536)
    if not b: break
    h.update(b)
s.sendall(h.hexdigest().encode())
print("done", flush=True)
sys.stdin.read()
`

// pairClient connects to the port in argv[1], sends argv[2] bytes of a
// pattern, shuts down writing, prints the server's digest and its own, then
// "ready", and waits for its standard input to close.
const pairClient = `
import hashlib, socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
data = bytes(range(256)) * (int(sys.argv[2]) // 256)
c.sendall(data); c.shutdown(socket.SHUT_WR)
got = b""
while len(got) < 64:
    b = c.recv(64)
    if not b: break
    got += b
print(got.decode(), hashlib.sha256(data).hexdigest())
print("fd", c.fileno())
print("ready", flush=True)
sys.stdin.read()
`

// runInstalledPair runs pairServer and pairClient with osfrun and checks
// with osfstat, all from bin (installed copies), that the connection is
// offloaded over shm and the bytes arrived intact; libDir is where the
// processes must have mapped libosf.so and libosfcore.so from. Every
// command runs behind the prefix wrap (such as nsenter into a mount
// namespace); with noOsfrun the programs run without osfrun (osf comes from
// /etc/ld.so.preload).
func runInstalledPair(t *testing.T, wrap []string, bin, libDir string, noOsfrun bool, env []string) {
	t.Helper()
	runInstalledPairCore(t, wrap, bin, libDir, noOsfrun, env, true)
}

// runInstalledPairCore is runInstalledPair; without core, the processes
// are left to load the Go core only if they need it, and must not: an
// shm connection is set up in C.
func runInstalledPairCore(t *testing.T, wrap []string, bin, libDir string, noOsfrun bool, env []string, core bool) {
	t.Helper()
	osfstat := filepath.Join(bin, "osfstat")
	launcher := append(slices.Clone(wrap), filepath.Join(bin, "osfrun"), "--")
	if noOsfrun {
		launcher = slices.Clone(wrap)
	}
	// The shm set-up needs no core; OSF_DEBUG_LOAD_CORE=1 loads it anyway,
	// to check where it is found.
	coreEnv := slices.Clone(env)
	if core {
		coreEnv = append(coreEnv, "OSF_DEBUG_LOAD_CORE=1")
	}
	cmd := func(args ...string) *testutil.Command {
		all := append(slices.Clone(launcher), args...)
		return testutil.Cmd(t, coreEnv, all[0], all[1:]...)
	}
	srv := cmd(python(t), "-c", pairServer)
	srvIn, err := srv.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	sp := srv.Start()
	defer srvIn.Close()
	port := strings.TrimSpace(sp.WaitOutput("\n", shortRun))
	cli := cmd(python(t), "-c", pairClient, port, strconv.Itoa(4<<20))
	cliIn, err := cli.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cp := cli.Start()
	defer cliIn.Close()
	out := cp.WaitOutput("ready\n", shortRun)
	f := strings.Fields(out)
	if len(f) < 4 || f[0] != f[1] {
		t.Fatalf("client output %q: the server's digest differs from the client's", out)
	}
	fd, _ := strconv.Atoi(f[3])

	stat := append(slices.Clone(wrap), osfstat, "-p", strconv.Itoa(cp.Pid), "--json")
	r := testutil.Cmd(t, env, stat[0], stat[1:]...).Run(shortRun)
	if !r.OK() {
		t.Fatalf("installed osfstat: %s", r)
	}
	var st testutil.Stat
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || len(st.Processes) != 1 {
		t.Fatalf("installed osfstat --json: %v: %q", err, r.Stdout)
	}
	found := false
	for _, s := range st.Processes[0].Sockets {
		if s.FD == fd {
			found = true
			if s.Transport != testutil.TransportShm {
				t.Errorf("client connection on %s, want shm: %s", s.Transport, s)
			}
		}
	}
	if !found {
		t.Errorf("installed osfstat does not list the client's fd %d: %q", fd, r.Stdout)
	}
	for _, p := range []*testutil.Process{sp, cp} {
		maps, err := testutil.Maps(p.Pid)
		if err != nil {
			t.Fatal(err)
		}
		libs := []string{"libosf.so", "libosfcore.so"}
		if !core {
			libs = libs[:1]
			if strings.Contains(maps, "osfcore") {
				t.Errorf("pid %d loaded the Go core for an shm connection", p.Pid)
			}
		}
		for _, lib := range libs {
			if !strings.Contains(maps, filepath.Join(libDir, lib)) {
				t.Errorf("pid %d did not map %s from %s", p.Pid, lib, libDir)
			}
		}
		if build := testutil.BuildDir(t); !strings.HasPrefix(libDir, build) && strings.Contains(maps, build+"/") {
			t.Errorf("pid %d mapped a file from the build directory %s", p.Pid, build)
		}
	}
	cliIn.Close()
	srvIn.Close()
	for _, p := range []*testutil.Process{cp, sp} {
		if r := p.Wait(shortRun); !r.OK() {
			t.Errorf("%s", r)
		}
	}
}

// TestMakeInstall installs into a DESTDIR, runs a client and a server from
// the installed files only (osfrun, osfstat, the two libraries), checks the
// other installed files (header, pkg-config file, man pages, example
// configuration), and checks that make uninstall leaves no file behind.
func TestMakeInstall(t *testing.T) {
	t.Parallel()
	dest := t.TempDir()
	if err := os.Chmod(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	vars := []string{"-s", "-C", testutil.Root(t), "DESTDIR=" + dest, "PREFIX=/usr/local", "BUILD=" + testutil.BuildDir(t)}
	r := runMake(t, append([]string{"install"}, vars...)...)
	if !r.OK() {
		t.Fatalf("make install: %s", r)
	}
	prefix := filepath.Join(dest, "usr/local")
	for _, f := range []string{
		"bin/osfrun", "bin/osfstat", "bin/osfperf", "lib/libosf.so", "lib/libosfcore.so", "lib/osfload",
		"include/osf/qsock.h", "lib/pkgconfig/osf.pc", "share/doc/osf/osf.conf.example",
		"share/man/man7/osf.7", "share/man/man1/osfrun.1", "share/man/man8/osfstat.8",
		"share/man/man1/osfperf.1", "share/man/man3/qsock_readable.3", "share/man/man3/qsock_writable.3",
	} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "etc/osf.conf")); err != nil {
		t.Errorf("configuration not installed: %v", err)
	}
	pc, _ := os.ReadFile(filepath.Join(prefix, "lib/pkgconfig/osf.pc"))
	if !strings.Contains(string(pc), "libdir=/usr/local/lib\n") || !strings.Contains(string(pc), "includedir=/usr/local/include\n") {
		t.Errorf("osf.pc:\n%s", pc)
	}

	// The installed configuration is the example: comments only, so the
	// defaults apply (the pair is offloaded).
	runInstalledPair(t, nil, filepath.Join(prefix, "bin"), filepath.Join(prefix, "lib"), false,
		[]string{"OSF_CONF=" + filepath.Join(dest, "etc/osf.conf")})

	// LD_PRELOAD naming a symbolic link to the installed library, in a
	// directory without the core: libosf.so finds the core beside the
	// link's target.
	link := filepath.Join(t.TempDir(), "libosf.so")
	if err := os.Symlink(filepath.Join(prefix, "lib/libosf.so"), link); err != nil {
		t.Fatal(err)
	}
	l := startLoopback(t, bare, []string{"LD_PRELOAD=" + link, "OSF_DEBUG_LOAD_CORE=1"}, python(t))
	testutil.AssertTransport(t, l.p.Pid, testutil.ByFD(l.cfd), testutil.TransportShm)
	if maps, _ := testutil.Maps(l.p.Pid); !strings.Contains(maps, filepath.Join(prefix, "lib/libosfcore.so")) {
		t.Errorf("the core was not loaded from beside the link's target %s", filepath.Join(prefix, "lib"))
	}
	l.stdin.Close()
	if r := l.p.Wait(shortRun); !r.OK() {
		t.Errorf("%s", r)
	}

	r = runMake(t, append([]string{"uninstall"}, vars...)...)
	if !r.OK() {
		t.Fatalf("make uninstall: %s", r)
	}
	var left []string
	filepath.WalkDir(dest, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, path)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("make uninstall left %q", left)
	}
}

// makeMu serializes the tests' make runs: install and deb depend on the
// build, which two makes must not bring up to date at once.
var makeMu sync.Mutex

// buildRun bounds make and lintian, which run niced and are CPU-bound:
// lintian alone took 39 s and make deb 24 s at load 40 on 2 cores, too
// close to longRun. It is a hang bound.
const buildRun = 5 * time.Minute

// runMake runs make with args, niced.
func runMake(t *testing.T, args ...string) testutil.Result {
	t.Helper()
	makeMu.Lock()
	defer makeMu.Unlock()
	return testutil.Cmd(t, nil, "nice", append([]string{"-n", "10", testutil.Tool(t, "make")}, args...)...).Run(buildRun)
}

// privateMounts starts a process in a new mount namespace (private
// propagation) that runs setup (a shell script) and then waits until the
// test ends; it returns the nsenter prefix that runs a command in that
// namespace. Nothing done there is seen by the host.
func privateMounts(t *testing.T, setup string) []string {
	t.Helper()
	testutil.NeedRoot(t, "for a mount namespace")
	unshare, nsenter := testutil.Tool(t, "unshare"), testutil.Tool(t, "nsenter")
	c := testutil.Cmd(t, nil, unshare, "-m", "--propagation", "private", "/bin/sh", "-ec",
		setup+"\necho mounted\nexec cat")
	in, err := c.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := c.Start()
	t.Cleanup(func() { in.Close(); p.Wait(shortRun) })
	if _, err := p.AwaitOutput("mounted\n", shortRun); err != nil {
		t.Fatalf("mount namespace set-up: %v: %s", err, p.Stderr())
	}
	return []string{nsenter, "--mount=/proc/" + strconv.Itoa(p.Pid) + "/ns/mnt", "--"}
}

// ldSoPreloadMounts returns the command prefix that runs a program in a
// private mount namespace whose /etc/ld.so.preload names the build's
// libosf.so (files in dir): a bind mount over the host's file, or, on a
// host without one, an overlay on /etc (in the namespace only) that holds
// it. The host's file is never touched.
func ldSoPreloadMounts(t *testing.T, dir string) []string {
	t.Helper()
	preload := filepath.Join(dir, "ld.so.preload")
	if err := os.WriteFile(preload, []byte(testutil.Lib(t)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	over := filepath.Join(dir, "over")
	return privateMounts(t, "if [ -e /etc/ld.so.preload ]; then mount --bind "+preload+" /etc/ld.so.preload; else "+
		"mkdir -p "+over+"/up "+over+"/work; mount -t overlay overlay -o lowerdir=/etc,upperdir="+over+"/up,workdir="+over+"/work /etc; "+
		"cp "+preload+" /etc/ld.so.preload; fi")
}

// TestLdSoPreload names libosf.so in /etc/ld.so.preload, bind-mounted in a
// private mount namespace so that the host is untouched: a server and a
// client started there without LD_PRELOAD or osfrun are offloaded; a
// setuid-root program loads the library but runs without osf; and a
// program excluded by a rule in the configuration file uses kernel TCP.
func TestLdSoPreload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wrap := ldSoPreloadMounts(t, dir)
	// osfrun's and osfstat's directory: the build's (osfrun is not used).
	bin := filepath.Dir(testutil.Bin(t, "osfstat"))
	runInstalledPair(t, wrap, bin, filepath.Dir(testutil.Lib(t)), true, nil)

	// A rule in the configuration file excludes python3.
	conf := filepath.Join(dir, "osf.conf")
	if err := os.WriteFile(conf, []byte("kernel both python3* *\noffload both * local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := startLoopback(t, bare, []string{"OSF_CONF=" + conf}, append(slices.Clone(wrap), python(t))...)
	p, stdin, cfd := l.p, l.stdin, l.cfd
	ss := testutil.AssertTransport(t, p.Pid, testutil.ByFD(cfd), testutil.TransportKernel)
	if len(ss) == 1 && ss[0].ReasonCode != 1 {
		t.Errorf("excluded program's connection: %s, want reason 1 (a rule chose kernel)", ss[0])
	}
	stdin.Close()
	if r := p.Wait(shortRun); !r.OK() {
		t.Errorf("%s", r)
	}

	// A setuid-root copy of a test program, run by nobody with a malformed
	// OSF_CONF: the loader brings the library in (it honours
	// /etc/ld.so.preload in secure mode) but osf reads nothing, so the
	// program reports nothing; the plain copy reports the file.
	opts, _ := exec.Command(testutil.Tool(t, "findmnt"), "-n", "-o", "OPTIONS", "-T", dir).Output()
	if strings.Contains(","+strings.TrimSpace(string(opts))+",", ",nosuid,") {
		t.Logf("%s is on a nosuid filesystem: setuid case skipped", dir)
		return
	}
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("OSF_NOPE = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, setuid := range []bool{false, true} {
		prog := filepath.Join(dir, "mapscheck")
		mode := os.FileMode(0o755)
		if setuid {
			prog, mode = prog+"-suid", 0o755|os.ModeSetuid
		}
		copyFile(t, testutil.Prog(t, "mapscheck"), prog)
		if err := os.Chown(prog, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(prog, mode); err != nil {
			t.Fatal(err)
		}
		args := append(slices.Clone(wrap), testutil.Tool(t, "setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups", prog)
		r := testutil.Cmd(t, []string{"OSF_CONF=" + bad}, args[0], args[1:]...).Run(shortRun)
		if !r.OK() || !strings.Contains(r.Stdout, "libosf: loaded") {
			t.Errorf("setuid=%v: %s, want libosf loaded", setuid, r)
		}
		// setpriv, run by root, is under osf too and reports once.
		want := 2
		if setuid {
			want = 1
		}
		if n := len(osfLines(r.Stderr)); n != want {
			t.Errorf("setuid=%v: osf reported %q; want %d reports (setpriv's and, without setuid, the program's)", setuid, osfLines(r.Stderr), want)
		}
	}
}

// TestDebianPackage builds the package with make deb, checks it with
// lintian (no errors), installs it with dpkg -i in a private mount
// namespace whose /usr, /etc and /var are overlays (the host is untouched),
// runs a client and a server from the installed files, renders an
// installed manual page, and purges the package: nothing of it is left.
func TestDebianPackage(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is missing: not a Debian system")
	}
	start := time.Now()
	step := func(what string) { t.Logf("%s: %.1f s", what, time.Since(start).Seconds()); start = time.Now() }
	r := runMake(t, "-s", "-C", testutil.Root(t), "deb", "BUILD="+testutil.BuildDir(t))
	step("make deb")
	if !r.OK() {
		t.Fatalf("make deb: %s", r)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	deb := lines[len(lines)-1]
	if !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("make deb printed %q, want the package's path last", r.Stdout)
	}
	r = testutil.Cmd(t, nil, "nice", "-n", "10", testutil.Tool(t, "lintian"), deb).Run(buildRun)
	for _, l := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(l, "E: ") {
			t.Errorf("lintian: %s", l)
		}
	}
	if r.Err != nil && r.ExitCode == 0 || r.TimedOut {
		t.Fatalf("lintian: %s", r)
	}
	step("lintian")
	multiarch, err := exec.Command("dpkg-architecture", "-qDEB_HOST_MULTIARCH").Output()
	if err != nil {
		t.Fatalf("dpkg-architecture: %v", err)
	}
	libDir := "/usr/lib/" + strings.TrimSpace(string(multiarch))

	over := t.TempDir()
	var setup strings.Builder
	for _, d := range []string{"/usr", "/etc", "/var"} {
		up, work := filepath.Join(over, "up"+d), filepath.Join(over, "work"+d)
		fmt.Fprintf(&setup, "mkdir -p %s %s\nmount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s %s\n", up, work, d, up, work, d)
	}
	// man-db's trigger would rebuild the whole manual index on dpkg -i.
	setup.WriteString("rm -f /var/lib/man-db/auto-update\n")
	wrap := privateMounts(t, setup.String())
	run := func(args ...string) testutil.Result {
		all := append(slices.Clone(wrap), args...)
		return testutil.Cmd(t, nil, all[0], all[1:]...).Run(longRun)
	}
	if r := run("dpkg", "-i", deb); !r.OK() {
		t.Fatalf("dpkg -i: %s", r)
	}
	step("dpkg -i")
	runInstalledPair(t, wrap, "/usr/bin", libDir, false, nil)
	step("client and server")
	// rdma-core's libraries are recommended, not required: the core (RDMA,
	// gateways) and osfgw need them, an shm-only host does not.
	if r := run("dpkg-query", "-W", "-f=${Depends}|${Recommends}", "osf"); !r.OK() ||
		strings.Contains(strings.Split(r.Stdout, "|")[0], "libibverbs") || !strings.Contains(r.Stdout, "|libibverbs1") {
		t.Errorf("osf's Depends|Recommends: %s, want libibverbs1 recommended only", r)
	}
	rdmaLibs := libDir + "/libibverbs.so.1* " + libDir + "/librdmacm.so.1*"
	if r := run("/bin/sh", "-c", "ls "+rdmaLibs+" >/dev/null && rm -f "+rdmaLibs); !r.OK() {
		t.Fatalf("hiding rdma-core's libraries: %s", r)
	}
	runInstalledPairCore(t, wrap, "/usr/bin", libDir, false, nil, false)
	step("client and server without rdma-core")
	if r := run("man", "osf"); !r.OK() || !strings.Contains(r.Stdout, "OSF_ROUTES") {
		t.Errorf("man osf after dpkg -i: %s", r)
	}
	if r := run("dpkg", "-P", "osf"); !r.OK() {
		t.Fatalf("dpkg -P: %s", r)
	}
	step("dpkg -P")
	paths := []string{"/usr/bin/osfrun", "/usr/bin/osfstat", libDir + "/libosf.so", libDir + "/libosfcore.so",
		"/etc/osf.conf", "/usr/include/osf", "/usr/share/doc/osf", "/usr/share/man/man7/osf.7.gz"}
	if r := run("/bin/sh", "-c", "for f in "+strings.Join(paths, " ")+"; do [ ! -e $f ] || echo $f; done"); !r.OK() || r.Stdout != "" {
		t.Errorf("left after dpkg -P: %s", r)
	}
}
