package tests

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
// processes must have mapped libosf.so and libosfcore.so from.
func runInstalledPair(t *testing.T, bin, libDir string, env []string) {
	t.Helper()
	osfrun, osfstat := filepath.Join(bin, "osfrun"), filepath.Join(bin, "osfstat")
	srv := testutil.Cmd(t, env, osfrun, "--", python(t), "-c", pairServer)
	srvIn, err := srv.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	sp := srv.Start()
	defer srvIn.Close()
	port := strings.TrimSpace(sp.WaitOutput("\n", shortRun))
	cli := testutil.Cmd(t, env, osfrun, "--", python(t), "-c", pairClient, port, strconv.Itoa(4<<20))
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

	r := testutil.Cmd(t, env, osfstat, "-p", strconv.Itoa(cp.Pid), "--json").Run(shortRun)
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
		for _, lib := range []string{"libosf.so", "libosfcore.so"} {
			if !strings.Contains(maps, filepath.Join(libDir, lib)) {
				t.Errorf("pid %d did not map %s from %s", p.Pid, lib, libDir)
			}
		}
		if build := testutil.BuildDir(t); strings.Contains(maps, build+"/") {
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
	makeTool := testutil.Tool(t, "make")
	dest := t.TempDir()
	if err := os.Chmod(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	vars := []string{"-s", "-C", testutil.Root(t), "DESTDIR=" + dest, "PREFIX=/usr/local", "BUILD=" + testutil.BuildDir(t)}
	r := testutil.Cmd(t, nil, "nice", append([]string{"-n", "10", makeTool, "install"}, vars...)...).Run(longRun)
	if !r.OK() {
		t.Fatalf("make install: %s", r)
	}
	prefix := filepath.Join(dest, "usr/local")
	for _, f := range []string{
		"bin/osfrun", "bin/osfstat", "bin/osfperf", "lib/libosf.so", "lib/libosfcore.so",
		"include/osf/qsock.h", "lib/pkgconfig/osf.pc", "share/doc/osf/osf.conf.example",
		"share/man/man7/osf.7", "share/man/man1/osfrun.1", "share/man/man8/osfstat.8",
		"share/man/man1/osfperf.1", "share/man/man3/qsock_readable.3",
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
	runInstalledPair(t, filepath.Join(prefix, "bin"), filepath.Join(prefix, "lib"),
		[]string{"OSF_CONF=" + filepath.Join(dest, "etc/osf.conf")})

	r = testutil.Cmd(t, nil, makeTool, append([]string{"uninstall"}, vars...)...).Run(shortRun)
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

// lookPath returns the path of a program, or "" when it is not installed.
func lookPath(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	return p
}
