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

// nginxConf is a self-contained nginx configuration: every path in DIR,
// master and two workers, sendfile. %[1]s is DIR, %[2]d the port.
const nginxConf = `daemon off;
master_process on;
worker_processes 2;
user root root;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    sendfile on;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:%[2]d;
        root %[1]s/www;
    }
}
`

// startNginx starts nginx in mode m serving dir/www on a free port, and
// returns the master process and the port once it listens.
func startNginx(t *testing.T, m mode, dir string) (*testutil.Process, int) {
	t.Helper()
	port := testutil.FreePort(t)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, port), 0o644); err != nil {
		t.Fatal(err)
	}
	p := m.cmd(t, nil, testutil.Tool(t, "nginx"), "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")).Start()
	testutil.WaitListening(t, fmt.Sprintf("127.0.0.1:%d", port), shortRun)
	testutil.WaitFor(t, shortRun, "two nginx workers", func() bool { return len(children(p.Pid)) == 2 })
	return p, port
}

// TestHTTPDownload fetches a 10 MiB random file with curl from nginx
// (master and two workers, sendfile) and from python's http.server, bare
// and with server and client under osf, and compares SHA-256 digests.
// Under osf it checks libosf.so in the nginx master and workers, the
// core and the offloaded (shm) listener in osfstat, and, while curl downloads
// (rate-limited so that it lives long enough), curl's own client socket.
func TestHTTPDownload(t *testing.T) {
	t.Parallel()
	const size = 10 << 20
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		t.Fatal(err)
	}
	_, sum := testutil.WriteRandomFile(t, www, "file.bin", size)

	for _, server := range []string{"nginx", "python"} {
		for _, m := range []mode{bare, underOsf} {
			t.Run(server+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				var srv *testutil.Process
				var port int
				if server == "nginx" {
					sdir := t.TempDir()
					if err := os.Symlink(www, filepath.Join(sdir, "www")); err != nil {
						t.Fatal(err)
					}
					srv, port = startNginx(t, m, sdir)
				} else {
					port = testutil.FreePort(t)
					srv = m.cmd(t, nil, python(t), "-m", "http.server", strconv.Itoa(port),
						"--bind", "127.0.0.1", "--directory", www).Start()
					testutil.WaitListening(t, fmt.Sprintf("127.0.0.1:%d", port), shortRun)
				}
				procs := append([]int{srv.Pid}, children(srv.Pid)...)
				for _, pid := range procs {
					if ok, err := testutil.LibMapped(pid); err != nil || ok != m.osf {
						t.Errorf("%s pid %d: libosf.so mapped=%v (%v), want %v", server, pid, ok, err, m.osf)
					}
				}
				if m.osf {
					// The kernel socket listens (WaitListening) before
					// listen() offloads it: wait for the listener's
					// record, which comes last. The shm set-up is C: no
					// core.
					waitRole(t, srv.Pid, "listener", 1)
					testutil.AssertCoreLoaded(t, srv.Pid, false)
					testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportShm)
				}

				out := filepath.Join(t.TempDir(), "download")
				url := fmt.Sprintf("http://127.0.0.1:%d/file.bin", port)
				args := []string{"-sS", "--fail", "--max-time", "30", "-o", out}
				if m.osf {
					// About 5 s: long enough for the osfstat samples
					// below on a loaded machine, where one osfstat run
					// can take a second (at 5M, 2 s were once too few).
					args = append(args, "--limit-rate", "2M")
				}
				curl := m.cmd(t, nil, testutil.Tool(t, "curl"), append(args, url)...).Start()
				if m.osf {
					testutil.WaitFor(t, shortRun, "libosf.so in curl", func() bool {
						ok, _ := testutil.LibMapped(curl.Pid)
						return ok
					})
					testutil.WaitFor(t, shortRun, "curl's connected socket in osfstat", func() bool {
						if curl.Exited() {
							t.Fatalf("curl exited before osfstat saw its connection: %s", curl.Wait(0))
						}
						p, ok := testutil.TryOsfStat(t, curl.Pid)
						return ok && len(p.Select(testutil.ByRole("client"))) > 0
					})
					testutil.AssertCoreLoaded(t, curl.Pid, false)
					testutil.AssertTransport(t, curl.Pid, testutil.ByRole("client"), testutil.TransportShm)
				}
				r := curl.Wait(longRun)
				if !r.OK() {
					t.Fatalf("curl: %s", r)
				}
				if got := testutil.SHA256File(t, out); got != sum {
					t.Errorf("downloaded file: sha256 %s, want %s", got, sum)
				}
				noOsfMessages(t, "curl", r.Stderr)
				if srv.Exited() {
					t.Errorf("%s died: %s", server, srv.Wait(time.Second))
				}
				noOsfMessages(t, server, srv.Stderr())
			})
		}
	}
}

// children returns the pids of the children of ppid.
func children(ppid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ppid, ppid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
