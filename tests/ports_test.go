package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestReuseportSpread runs server processes listening with SO_REUSEPORT on
// one port (as nginx "listen ... reuseport" workers do) and a client making
// connections, then kills the first server and makes as many more
// (progs/reuseport.c): 3 servers, and 20 (more than 16, where the port's
// census once stopped counting and every connection went to one server).
// Bare, the kernel spreads the connections over the group; under osf every
// connection must be offloaded (osf carries the client's socket) and
// spread too: each live server gets at least a quarter of its even share,
// in both rounds.
func TestReuseportSpread(t *testing.T) {
	t.Parallel()
	for _, g := range []struct{ n, conns int }{{3, 120}, {20, 600}} {
		for _, m := range []mode{bare, underOsf} {
			t.Run(fmt.Sprintf("%d/%s", g.n, m.name), func(t *testing.T) {
				t.Parallel()
				r := m.cmd(t, nil, testutil.Prog(t, "reuseport"), strconv.Itoa(g.n), strconv.Itoa(g.conns)).MustRun(longRun)
				noOsfMessages(t, "reuseport", r.Stderr)
				got := map[string]int{}
				for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
					if k, v, ok := strings.Cut(l, ": "); ok {
						got[k], _ = strconv.Atoi(v)
					} else if f := strings.Fields(l); len(f) == 3 {
						got[f[0]+" "+f[1]], _ = strconv.Atoi(f[2])
					}
				}
				for round := 1; round <= 2; round++ {
					live := g.n - (round - 1) // round 2: server 0 killed
					for s := round - 1; s < g.n; s++ {
						key := fmt.Sprintf("round%d server %d", round, s)
						if min := g.conns / live / 4; got[key] < min {
							t.Errorf("%s: %d connections, want at least %d of %d\n%s", key, got[key], min, g.conns, r.Stdout)
						}
					}
					want := 0
					if m.osf {
						want = g.conns
					}
					if off := got[fmt.Sprintf("round%d offloaded", round)]; off != want {
						t.Errorf("round %d: %d of %d connections offloaded, want %d\n%s", round, off, g.conns, want, r.Stdout)
					}
				}
			})
		}
	}
}

// nginxReuseportConf is nginxNobodyConf with `listen ... reuseport` (each
// worker its own listening socket in one SO_REUSEPORT group) and an access
// log of the serving worker's pid. %[1]s is DIR, %[2]d the port.
const nginxReuseportConf = `daemon off;
master_process on;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
    log_format bypid '$pid';
    access_log %[1]s/access.log bypid;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:%[2]d reuseport;
        root %[1]s/www;
    }
}
`

// TestShmNginxReuseport (issue 16 item 7): nginx with `listen ...
// reuseport` and two workers; 20 wrk connections are spread over both
// workers, bare as under osf, where every one is offloaded (shm on the
// client and in the worker that holds it) and every byte checked by curl.
func TestShmNginxReuseport(t *testing.T) {
	t.Parallel()
	nginx, curl, wrk := testutil.Tool(t, "nginx"), testutil.Tool(t, "curl"), testutil.Tool(t, "wrk")
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv, dir, port, sum := startNginxTwoWorkers(t, m, nginx, nginxReuseportConf, 64<<10)
			workers := children(srv.Pid)
			url := fmt.Sprintf("http://127.0.0.1:%d/file.bin", port)

			out := filepath.Join(t.TempDir(), "download")
			var strict []string // under osf a fallback to kernel TCP fails the fetch
			if m.osf {
				strict = []string{"OSF_STRICT=1"}
			}
			if r := m.cmd(t, strict, curl, "-sS", "--fail", "--max-time", "30", "-o", out, url).Run(longRun); !r.OK() {
				t.Fatalf("curl: %s", r)
			}
			if got := testutil.SHA256File(t, out); got != sum {
				t.Errorf("curl: sha256 %s, want %s", got, sum)
			}

			w := m.cmd(t, nil, wrk, "-t2", "-c20", "-d3s", "--timeout", "30s", url).Start()
			if m.osf {
				waitUnderOsf(t, w.Pid, "wrk")
				waitRole(t, w.Pid, "client", 20)
				testutil.AssertTransport(t, w.Pid, testutil.ByRole("client"), testutil.TransportShm)
				// wrk keeps its 20 connections: each worker holds its share,
				// once it has accepted them (a loaded host may run a worker
				// late; a lost wake-up would leave them queued for ever).
				var counts []int
				testutil.WaitFor(t, shortRun, "the nginx workers to accept wrk's 20 connections", func() bool {
					counts = servedShm(t, "nginx worker", workers, false)
					return total(counts) >= 20
				})
				for i, n := range counts {
					t.Logf("nginx worker %d holds %d offloaded connections", workers[i], n)
					if n == 0 {
						t.Errorf("nginx worker %d holds none of wrk's 20 connections (SO_REUSEPORT not spread)", workers[i])
					}
				}
			}
			if r := w.Wait(longRun); !r.OK() {
				t.Fatalf("wrk: %s", r)
			}
			// The access log names the worker of every request: both served.
			alog, _ := os.ReadFile(filepath.Join(dir, "access.log"))
			per := map[string]int{}
			for _, l := range strings.Fields(string(alog)) {
				per[l]++
			}
			t.Logf("requests per worker pid: %v", per)
			for _, pid := range workers {
				if per[strconv.Itoa(pid)] == 0 {
					t.Errorf("nginx worker %d served no request (SO_REUSEPORT not spread): %v", pid, per)
				}
			}
			if srv.Exited() {
				t.Errorf("nginx died: %s", srv.Wait(0))
			}
			noOsfMessages(t, "nginx", srv.Stderr())
		})
	}
}

// TestReuseportJoin starts a second server process in a SO_REUSEPORT group
// while a client makes connections to it, one after the other
// (progs/reuseport_join.c), as an instance started beside a running one of
// the same user: no connection may fail, bare or under osf. Under osf every
// connection begun before the new member started or after it listened is
// offloaded (those while it starts may be either), and the new member
// serves some of them: under OSF_SHM_KFD=1 it takes copies of the group's
// companion and hello store from the first (pidfd_getfd), before it listens;
// without the switch it takes a companion slot of its own. "nodump": the
// first server is not dumpable and both run as nobody, so that under the
// switch the new member cannot take them; it has the group's companion shut
// before it listens, and the connections begun after it listens are kernel
// TCP, again without a failure (without the switch: offloaded, as above).
func TestReuseportJoin(t *testing.T) {
	t.Parallel()
	setpriv := testutil.Tool(t, "setpriv")
	for _, nodump := range []bool{false, true} {
		for _, m := range []mode{bare, underOsf} {
			name, args := m.name, []string{testutil.Prog(t, "reuseport_join"), "400"}
			if nodump {
				name, args = "nodump/"+name, append(args, "nodump")
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := m.cmd(t, nil, setpriv, append(append([]string(nil), asNobody...), args...)...).Run(longRun)
				noOsfMessages(t, "reuseport_join", r.Stderr)
				if !r.OK() || !strings.Contains(r.Stdout, "done") {
					t.Fatalf("reuseport_join: %s", r)
				}
				var before, offBefore, during, offDuring, after, offAfter, by1, failed int
				if _, err := fmt.Sscanf(r.Stdout, "before %d offloaded %d\nduring %d offloaded %d\nafter %d offloaded %d server1 %d\nfailed %d\n",
					&before, &offBefore, &during, &offDuring, &after, &offAfter, &by1, &failed); err != nil {
					t.Fatalf("reuseport_join output %q: %v", r.Stdout, err)
				}
				t.Logf("before the join %d (%d offloaded), during it %d (%d), after %d (%d offloaded, %d served by the new member)",
					before, offBefore, during, offDuring, after, offAfter, by1)
				// Without the switch a client spreads over the
				// members it counted (its census, cached 1 s).
				if after < 200 || (by1 == 0 && (!m.osf || testutil.KfdRun())) {
					t.Errorf("%d connections after the join, %d served by the new member: want 200, some by it", after, by1)
				}
				wantBefore, wantAfter := 0, 0
				if m.osf {
					wantBefore, wantAfter = before, after
					if nodump && testutil.KfdRun() {
						wantAfter = 0
					}
				}
				if offBefore != wantBefore || offAfter != wantAfter {
					t.Errorf("offloaded %d of %d before the join and %d of %d after, want %d and %d",
						offBefore, before, offAfter, after, wantBefore, wantAfter)
				}
			})
		}
	}
}
