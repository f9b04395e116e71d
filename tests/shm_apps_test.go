package tests

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// Real servers and clients over offloaded connections: iperf3, redis and
// nginx with curl and wrk. Each runs bare and with both ends under osf;
// under osf the test asserts through osfstat, while the programs run, that
// their connections are offloaded (shm), and bare that they are kernel TCP
// (/proc/net/tcp).

// waitUnderOsf waits until process pid has libosf.so mapped (osfstat
// fails for a process that has not mapped it yet).
func waitUnderOsf(t *testing.T, pid int, what string) {
	t.Helper()
	testutil.WaitFor(t, shortRun, "libosf.so in "+what, func() bool {
		ok, _ := testutil.LibMapped(pid)
		return ok
	})
}

// waitRole waits until process pid has at least n sockets of role whose
// transport osf has decided, and returns them: one snapshot, as a short
// client's connections may be gone by the next look (iperf3's 2 s, at
// load 15, between a wait and an assertion each running osfstat).
func waitRole(t *testing.T, pid int, role string, n int) []testutil.StatSocket {
	t.Helper()
	var got []testutil.StatSocket
	testutil.WaitFor(t, shortRun, fmt.Sprintf("%d %s sockets in process %d", n, role, pid), func() bool {
		got = testutil.OsfStat(t, pid).Select(testutil.ByRole(role))
		if len(got) < n {
			return false
		}
		for _, s := range got {
			if s.Transport == "" || s.Transport == "-" {
				return false
			}
		}
		return true
	})
	return got
}

// waitKernelSockets waits until process pid (bare) has at least n sockets
// in /proc/net/tcp, and that none is in /proc/net/unix (none offloaded).
func waitKernelSockets(t *testing.T, pid, n int, what string) {
	t.Helper()
	testutil.WaitFor(t, shortRun, fmt.Sprintf("%d kernel TCP sockets in %s", n, what), func() bool {
		tabs, err := testutil.SocketTables(pid)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		k := 0
		for _, tab := range tabs {
			if tab == testutil.TableTCP {
				k++
			}
		}
		return k >= n
	})
}

// servedShm asserts that every connection osfstat lists in the server role
// in each of pids is offloaded (shm), naming each process what, and returns
// how many each holds. A process that exited meanwhile counts 0 when
// mayExit (postgres backends come and go); otherwise osfstat must answer.
func servedShm(t *testing.T, what string, pids []int, mayExit bool) []int {
	t.Helper()
	counts := make([]int, len(pids))
	for i, pid := range pids {
		var st testutil.StatProc
		if mayExit {
			var ok bool
			if st, ok = testutil.TryOsfStat(t, pid); !ok {
				continue
			}
		} else {
			st = testutil.OsfStat(t, pid)
		}
		for _, s := range st.Select(testutil.ByRole("server")) {
			counts[i]++
			if s.Transport != testutil.TransportShm {
				t.Errorf("%s %d: %s", what, pid, s)
			}
		}
	}
	return counts
}

// total adds up counts.
func total(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// assertConns asserts, while the programs run, that client process cli
// and server process srv have at least n connections each, offloaded
// (shm) under osf, and that cli's are kernel TCP bare.
func assertConns(t *testing.T, m mode, cli, srv, n int, what string) {
	t.Helper()
	if !m.osf {
		waitKernelSockets(t, cli, n, what)
		return
	}
	waitUnderOsf(t, cli, what)
	testutil.AssertSocketsTransport(t, fmt.Sprintf("%s: process %d, clients", what, cli),
		waitRole(t, cli, "client", n), testutil.TransportShm)
	testutil.AssertSocketsTransport(t, fmt.Sprintf("%s: process %d, servers", what, srv),
		waitRole(t, srv, "server", n), testutil.TransportShm)
}

// iperfResult is what iperf3 -J reports at the end.
type iperfResult struct {
	End struct {
		Streams []json.RawMessage `json:"streams"`
		SumSent struct {
			Bytes float64 `json:"bytes"`
			BPS   float64 `json:"bits_per_second"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes float64 `json:"bytes"`
			BPS   float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

// TestShmIperf3 runs an iperf3 server and clients for 2 s each: one
// stream, reverse (-R) and four parallel streams (-P 4). While a client
// runs, every connection of client and server must be offloaded (bare:
// kernel TCP); each run must report non-zero bytes and rates both ways.
func TestShmIperf3(t *testing.T) {
	t.Parallel()
	iperf := testutil.Tool(t, "iperf3")
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := strconv.Itoa(testutil.FreePort(t))
			srv := m.cmd(t, nil, iperf, "-s", "-p", port).Start()
			testutil.WaitListening(t, "127.0.0.1:"+port, shortRun)
			idle := -1 // the server's sockets between tests
			testutil.WaitFor(t, shortRun, "iperf3 -s settled", func() bool {
				n, _ := countSocketFds(srv.Pid)
				same := n == idle
				idle = n
				time.Sleep(50 * time.Millisecond)
				return same
			})
			for _, tc := range []struct {
				name    string
				args    []string
				streams int
			}{{"single", nil, 1}, {"reverse", []string{"-R"}, 1}, {"parallel4", []string{"-P", "4"}, 4}} {
				args := append([]string{"-c", "127.0.0.1", "-p", port, "-t", "2", "-J"}, tc.args...)
				conns := 1 + tc.streams // the control connection and the streams
				// The last test's end first (a server still ending it
				// turns a client away as busy), for 2 s at most.
				for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
					if n, err := countSocketFds(srv.Pid); err != nil || n <= idle {
						break
					}
				}
				cli := startIperfClient(t, m, iperf, args, conns)
				assertConns(t, m, cli.Pid, srv.Pid, conns, "iperf3 -c")
				r := cli.Wait(longRun)
				if !r.OK() {
					t.Fatalf("%s: iperf3 %s: %s", tc.name, strings.Join(args, " "), r)
				}
				var res iperfResult
				if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
					t.Fatalf("%s: iperf3 JSON: %v\n%s", tc.name, err, r.Stdout)
				}
				e := res.End
				if res.Error != "" || len(e.Streams) != tc.streams || e.SumSent.Bytes <= 0 ||
					e.SumReceived.Bytes <= 0 || e.SumSent.BPS <= 0 || e.SumReceived.BPS <= 0 {
					t.Errorf("%s: error %q, %d streams (want %d), sent %.0f bytes at %.0f bit/s, received %.0f at %.0f",
						tc.name, res.Error, len(e.Streams), tc.streams, e.SumSent.Bytes, e.SumSent.BPS,
						e.SumReceived.Bytes, e.SumReceived.BPS)
				}
				t.Logf("%s: %.2f Gbit/s", tc.name, e.SumReceived.BPS/1e9)
				noOsfMessages(t, "iperf3 -c", r.Stderr)
			}
			if srv.Exited() {
				t.Errorf("iperf3 server died: %s", srv.Wait(0))
			}
			noOsfMessages(t, "iperf3 -s", srv.Stderr())
		})
	}
}

// startIperfClient starts an iperf3 client; one the server turned away
// because it was still ending the last test ("the server is busy running a
// test") is started again (bounded), as the kernel side and osf's alike
// may race with the server's end of the previous test. It waits until the
// client holds conns sockets or exits: on a loaded host the refusal came
// after any fixed wait (the bare client then exited before the test
// looked at its sockets).
func startIperfClient(t *testing.T, m mode, iperf string, args []string, conns int) *testutil.Process {
	t.Helper()
	for try := 0; ; try++ {
		cli := m.cmd(t, nil, iperf, args...).Start()
		deadline := time.Now().Add(shortRun)
		for !cli.Exited() && time.Now().Before(deadline) && !hasSockets(cli.Pid, conns) {
			time.Sleep(10 * time.Millisecond)
		}
		if try == 10 || !cli.Exited() || !strings.Contains(cli.Wait(0).Stdout, "busy") {
			return cli
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// hasSockets reports whether process pid holds at least n sockets.
func hasSockets(pid, n int) bool {
	k, err := countSocketFds(pid)
	return err == nil && k >= n
}

// TestShmRedis runs redis-server, redis-benchmark (SET, GET, LPUSH, 100000
// requests each, 50 connections) and redis-cli storing and reading back a
// 1 MiB random value, which must come back byte for byte. While the
// benchmark runs, the server's and the benchmark's connections must be
// offloaded (bare: kernel TCP).
func TestShmRedis(t *testing.T) {
	t.Parallel()
	server, bench, cli := testutil.Tool(t, "redis-server"), testutil.Tool(t, "redis-benchmark"), testutil.Tool(t, "redis-cli")
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := strconv.Itoa(testutil.FreePort(t))
			srv := m.cmd(t, nil, server, "--port", port, "--bind", "127.0.0.1", "--save", "",
				"--appendonly", "no", "--dir", t.TempDir()).Start()
			testutil.WaitListening(t, "127.0.0.1:"+port, shortRun)

			b := m.cmd(t, nil, bench, "-h", "127.0.0.1", "-p", port, "-t", "set,get,lpush",
				"-n", "100000", "-q", "--csv").Start()
			assertConns(t, m, b.Pid, srv.Pid, 10, "redis-benchmark")
			r := b.Wait(longRun)
			if !r.OK() {
				t.Fatalf("redis-benchmark: %s", r)
			}
			rows, err := csv.NewReader(strings.NewReader(r.Stdout)).ReadAll()
			if err != nil {
				t.Fatalf("redis-benchmark CSV: %v\n%s", err, r.Stdout)
			}
			rps := map[string]float64{}
			for _, row := range rows[1:] {
				if len(row) > 1 {
					rps[row[0]], _ = strconv.ParseFloat(row[1], 64)
				}
			}
			for _, test := range []string{"SET", "GET", "LPUSH"} {
				if rps[test] <= 0 {
					t.Errorf("redis-benchmark: no rate for %s:\n%s", test, r.Stdout)
				}
			}
			t.Logf("requests per second: SET %.0f GET %.0f LPUSH %.0f", rps["SET"], rps["GET"], rps["LPUSH"])
			noOsfMessages(t, "redis-benchmark", r.Stderr)

			value := testutil.RandomBytes(t, 1<<20)
			set := m.cmd(t, nil, cli, "-h", "127.0.0.1", "-p", port, "-x", "SET", "big")
			set.Cmd.Stdin = bytes.NewReader(value)
			if r := set.MustRun(shortRun); r.Stdout != "OK\n" {
				t.Fatalf("redis-cli SET: %q", r.Stdout)
			}
			got := m.cmd(t, nil, cli, "-h", "127.0.0.1", "-p", port, "--raw", "GET", "big").MustRun(shortRun).Stdout
			if got != string(value)+"\n" {
				t.Errorf("redis-cli GET: %d bytes (sha256 %s), want the %d stored (sha256 %s) and a newline",
					len(got), testutil.SHA256([]byte(got)), len(value), testutil.SHA256(value))
			}
			if srv.Exited() {
				t.Errorf("redis-server died: %s", srv.Wait(0))
			}
			noOsfMessages(t, "redis-server", srv.Stderr())
		})
	}
}

// nginxNobodyConf runs nginx as root with a master and two workers that
// run as nobody (nginx's default user), sendfile on, every path in DIR
// (which nobody can read). %[1]s is DIR, %[2]d the port.
const nginxNobodyConf = `daemon off;
master_process on;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
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

var wrkRequestsRE = regexp.MustCompile(`(?m)^\s*(\d+) requests in `)

// startNginxTwoWorkers starts nginx (binary nginx) with confFmt (%[1]s is
// a fresh world-readable DIR, %[2]d a free port) serving DIR/www/file.bin,
// size random bytes, and waits for its two workers; it returns nginx, DIR,
// the port and the file's SHA-256.
func startNginxTwoWorkers(t *testing.T, m mode, nginx, confFmt string, size int) (*testutil.Process, string, int, string) {
	t.Helper()
	dir := testutil.WorldReadableTempDir(t)
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		t.Fatal(err)
	}
	_, sum := testutil.WriteRandomFile(t, www, "file.bin", size)
	port := testutil.FreePort(t)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, confFmt, dir, port), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := m.cmd(t, nil, nginx, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")).Start()
	testutil.WaitListening(t, fmt.Sprintf("127.0.0.1:%d", port), shortRun)
	testutil.WaitFor(t, shortRun, "two nginx workers", func() bool { return len(children(srv.Pid)) == 2 })
	return srv, dir, port, sum
}

// TestShmNginxWrk serves a 10 MiB random file from nginx (master, two
// workers as nobody, sendfile) to curl, which must get it intact (SHA-256),
// and to wrk (2 threads, 20 connections, 2 s), which must report requests
// and no socket errors. Under osf curl's and wrk's connections and the
// workers' accepted ones must be offloaded while they run.
func TestShmNginxWrk(t *testing.T) {
	t.Parallel()
	nginx, curl, wrk := testutil.Tool(t, "nginx"), testutil.Tool(t, "curl"), testutil.Tool(t, "wrk")
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv, dir, port, sum := startNginxTwoWorkers(t, m, nginx, nginxNobodyConf, 10<<20)
			// A worker is forked as root and drops to nobody a moment later.
			testutil.WaitFor(t, shortRun, "nginx workers running as nobody (65534)", func() bool {
				for _, w := range children(srv.Pid) {
					if procUID(t, w) != "65534" {
						return false
					}
				}
				return true
			})
			workers := children(srv.Pid)
			url := fmt.Sprintf("http://127.0.0.1:%d/file.bin", port)

			out := filepath.Join(t.TempDir(), "download")
			args := []string{"-sS", "--fail", "--max-time", "30", "-o", out}
			if m.osf {
				args = append(args, "--limit-rate", "5M") // about 2 s: long enough to look at it
			}
			c := m.cmd(t, nil, curl, append(args, url)...).Start()
			if m.osf {
				waitUnderOsf(t, c.Pid, "curl")
				waitRole(t, c.Pid, "client", 1)
				testutil.AssertTransport(t, c.Pid, testutil.ByRole("client"), testutil.TransportShm)
			}
			if r := c.Wait(longRun); !r.OK() {
				t.Fatalf("curl: %s", r)
			}
			if got := testutil.SHA256File(t, out); got != sum {
				t.Errorf("curl: sha256 %s, want %s", got, sum)
			}

			// --timeout: wrk counts a response that takes longer than
			// this as a socket error (default 2 s). 20 connections share
			// the 2 cores for 10 MiB each: on a loaded machine (load 25,
			// 78 MB/s in all) a response legitimately takes 2-3 s, bare
			// as well as under osf. A timeout is a hang check, so it is
			// generous; connect, read and write errors (resets) and
			// non-2xx answers are still reported as before.
			w := m.cmd(t, nil, wrk, "-t2", "-c20", "-d2s", "--timeout", "30s", url).Start()
			if m.osf {
				waitUnderOsf(t, w.Pid, "wrk")
				waitRole(t, w.Pid, "client", 20)
				testutil.AssertTransport(t, w.Pid, testutil.ByRole("client"), testutil.TransportShm)
				if total(servedShm(t, "nginx worker", workers, false)) == 0 {
					t.Errorf("no nginx worker has an accepted connection while wrk runs")
				}
			} else {
				waitKernelSockets(t, w.Pid, 20, "wrk")
			}
			r := w.Wait(longRun)
			if !r.OK() {
				t.Fatalf("wrk: %s", r)
			}
			mreq := wrkRequestsRE.FindStringSubmatch(r.Stdout)
			if mreq == nil || mreq[1] == "0" {
				t.Errorf("wrk made no requests:\n%s", r.Stdout)
			}
			for _, bad := range []string{"Socket errors", "Non-2xx"} {
				if strings.Contains(r.Stdout, bad) {
					t.Errorf("wrk reports %s:\n%s", bad, r.Stdout)
				}
			}
			if mreq != nil {
				t.Logf("wrk: %s requests of 10 MiB in 2 s", mreq[1])
			}
			noOsfMessages(t, "wrk", r.Stderr)

			if srv.Exited() {
				t.Errorf("nginx died: %s", srv.Wait(0))
			}
			noOsfMessages(t, "nginx", srv.Stderr())
			elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			for _, l := range strings.Split(string(elog), "\n") {
				if strings.Contains(l, "[emerg]") || strings.Contains(l, "[alert]") || strings.Contains(l, "[crit]") {
					t.Errorf("nginx error.log: %s", l)
				}
			}
		})
	}
}

// procUID returns the real uid of process pid, from /proc/PID/status.
func procUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	return "?"
}
