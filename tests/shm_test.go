package tests

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/testutil"
)

// Integration tests of offloaded (shm) connections between processes,
// with progs/tcpx.c: every test runs bare (kernel TCP on both ends) and
// with both ends under osf, with the same data expectations, proves the
// transport from inside each program (/proc/net: unix means offloaded)
// and, under osf, through osfstat, and checks every byte received.

// streamRun bounds a stream of up to 1 GiB each way: about a second bare
// on the development VM, less under osf, but 11.5 s bare at load 40 on 2
// cores (the pattern is generated and checked on both ends), so 20 s was
// too close. It is a hang bound: one hang costs a minute, not the budget.
const streamRun = 60 * time.Second

// families are the address set-ups the stream and fallback tests run over:
// listen address and the address a client connects to.
var families = []struct{ name, listen, connect string }{
	{"v4", "127.0.0.1", "127.0.0.1"},
	{"v6", "::1", "::1"},
	{"v4mapped", "::", "::ffff:127.0.0.1"}, // an AF_INET6 client, a dual-stack listener
}

// tcpxProc is a tcpx server or client (or a gonet, gosys_test.go); stdin
// feeds its -w pause.
type tcpxProc struct {
	*testutil.Process
	stdin io.WriteCloser
}

// startTcpx starts `tcpx ROLE ARGS...` in mode m.
func startTcpx(t *testing.T, m mode, role string, args ...string) *tcpxProc {
	t.Helper()
	return startPiped(t, m.cmd(t, nil, testutil.Prog(t, "tcpx"), append([]string{role}, args...)...))
}

// startPiped starts c with a pipe on its standard input, closed at the
// end of the test.
func startPiped(t *testing.T, c *testutil.Command) *tcpxProc {
	t.Helper()
	in, err := c.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := c.Start()
	t.Cleanup(func() { in.Close() })
	return &tcpxProc{p, in}
}

var listeningRE = regexp.MustCompile(`(?m)^listening (\d+)$`)

// port waits for a server's "listening PORT" line (tcpx, gonet).
func (p *tcpxProc) port(t *testing.T) string {
	t.Helper()
	var port string
	testutil.WaitFor(t, shortRun, "server listening", func() bool {
		if m := listeningRE.FindStringSubmatch(p.Stdout()); m != nil {
			port = m[1]
			return true
		}
		if p.Exited() {
			t.Fatalf("server exited: %s", p.Wait(0))
		}
		return false
	})
	return port
}

// proceed ends a -w pause.
func (p *tcpxProc) proceed(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		t.Fatalf("tcpx stdin: %v", err)
	}
}

// wantTable is the kernel table a connection end is in: unix when offloaded.
func wantTable(osf bool) string {
	if osf {
		return testutil.ShmTransport()
	}
	return testutil.TableTCP
}

// mustSay fails the test unless out has a line equal to line.
func mustSay(t *testing.T, who, out, line string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if l == line {
			return
		}
	}
	t.Errorf("%s did not say %q:\n%s", who, line, out)
}

var (
	sentRE = regexp.MustCompile(`(?m)^sent (\d+) hash ([0-9a-f]+)$`)
	recvRE = regexp.MustCompile(`(?m)^received (\d+) hash ([0-9a-f]+) pattern (\w+)$`)
)

// checkBidir compares what each side of a bidir run sent with what the
// other received: byte count, hash and pattern.
func checkBidir(t *testing.T, cli, srv string, size int64) {
	t.Helper()
	for _, d := range []struct{ from, to, fromOut, toOut string }{
		{"client", "server", cli, srv}, {"server", "client", srv, cli},
	} {
		s, r := sentRE.FindStringSubmatch(d.fromOut), recvRE.FindStringSubmatch(d.toOut)
		if s == nil || r == nil {
			t.Errorf("%s→%s: no sent/received lines:\n%s\n%s", d.from, d.to, d.fromOut, d.toOut)
			continue
		}
		if s[1] != strconv.FormatInt(size, 10) || r[1] != s[1] || r[2] != s[2] || r[3] != "ok" {
			t.Errorf("%s→%s: sent %s bytes hash %s; received %s bytes hash %s pattern %s (want %d bytes)",
				d.from, d.to, s[1], s[2], r[1], r[2], r[3], size)
		}
	}
	mustSay(t, "client", cli, "eof yes")
	mustSay(t, "server", srv, "eof yes")
}

// waitTcpx waits for a tcpx process that must exit 0.
func waitTcpx(t *testing.T, who string, p *tcpxProc, timeout time.Duration) string {
	t.Helper()
	r := p.Wait(timeout)
	if !r.OK() {
		t.Fatalf("%s: %s", who, r)
	}
	noOsfMessages(t, who, r.Stderr)
	return r.Stdout
}

// TestShmStream sends 1 GiB in each direction at once over one connection
// on 127.0.0.1 (256 MiB over ::1 and from an AF_INET6 client to a
// dual-stack listener via ::ffff:127.0.0.1): a sending thread and a
// receiving thread on each end. It checks the transport of both ends
// (tcpx's /proc/net view, and osfstat under osf) while they are connected,
// then byte counts, hashes and the pattern of both streams, and the end
// of file after each.
func TestShmStream(t *testing.T) {
	t.Parallel()
	for _, fam := range families {
		size, sizeArg := int64(256<<20), "256M"
		if fam.name == "v4" {
			size, sizeArg = 1<<30, "1G"
		}
		for _, m := range []mode{bare, underOsf} {
			t.Run(fam.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				srv := startTcpx(t, m, "server", "-w", "bidir", fam.listen, "0", sizeArg)
				cli := startTcpx(t, m, "client", "-w", "bidir", fam.connect, srv.port(t), sizeArg)
				cli.WaitOutput("ready\n", shortRun)
				srv.WaitOutput("ready\n", shortRun)
				mustSay(t, "client", cli.Stdout(), "connected, transport "+wantTable(m.osf))
				mustSay(t, "server", srv.Stdout(), "accepted, transport "+wantTable(m.osf))
				if m.osf {
					testutil.AssertTransport(t, cli.Pid, testutil.ByRole("client"), testutil.TransportShm)
					testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
					testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportShm)
				}
				start := time.Now()
				cli.proceed(t)
				srv.proceed(t)
				c := waitTcpx(t, "client", cli, streamRun)
				s := waitTcpx(t, "server", srv, streamRun)
				checkBidir(t, c, s, size)
				t.Logf("%s each way in %v", sizeArg, time.Since(start).Round(time.Millisecond))
			})
		}
	}
}

// TestShmHalfClose: the client sends 8 MiB and shuts down writing; the
// server reads to the end of file, answers with the count and hash it
// received and 8 MiB of its own, and closes; the client reads the answer
// to the end of file. Over IPv4, IPv6 and v4-mapped addresses.
func TestShmHalfClose(t *testing.T) {
	t.Parallel()
	for _, fam := range families {
		for _, m := range []mode{bare, underOsf} {
			t.Run(fam.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				srv := startTcpx(t, m, "server", "halfclose", fam.listen, "0", "8M")
				cli := startTcpx(t, m, "client", "halfclose", fam.connect, srv.port(t), "8M")
				c := waitTcpx(t, "client", cli, longRun)
				s := waitTcpx(t, "server", srv, longRun)
				mustSay(t, "client", c, "connected, transport "+wantTable(m.osf))
				mustSay(t, "server", s, "accepted, transport "+wantTable(m.osf))
				mustSay(t, "client", c, "then 8388608 bytes pattern ok and eof")
				if !strings.Contains(c, "answer: received 8388608 hash ") {
					t.Errorf("client output:\n%s", c)
				}
			})
		}
	}
}

// TestShmEcho runs the edge-triggered epoll echo server of tcpx against
// many clients at once: 200 connections driven by poll with 3 messages
// each of random sizes from 1 byte to 1 MiB, 20 driven by select, 50 by
// epoll (level-triggered). Every echo is checked against what was sent;
// server and clients report the transport of every connection, and under
// osf osfstat must show every connection of both processes offloaded.
func TestShmEcho(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		poller      string
		conns, msgs int
		seed        string
	}{
		{"poll-200", "poll", 200, 3, "1"},
		{"select-20", "select", 20, 5, "2"},
		{"epoll-50", "epoll", 50, 4, "3"},
	}
	for _, tc := range cases {
		for _, m := range []mode{bare, underOsf} {
			t.Run(tc.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				n := strconv.Itoa(tc.conns)
				srv := startTcpx(t, m, "server", "-n", n, "echo", "127.0.0.1", "0")
				cli := startTcpx(t, m, "client", "-w", "-m", tc.poller, "-c", n, "-k", strconv.Itoa(tc.msgs),
					"-S", tc.seed, "-t", "50", "echo", "127.0.0.1", srv.port(t))
				cli.WaitOutput("ready\n", shortRun)
				tp := "transports unix=0 tcp=" + n
				if m.osf {
					tp = "transports " + testutil.ShmTransport() + "=" + n + " tcp=0"
					testutil.AssertTransport(t, cli.Pid, testutil.ByRole("client"), testutil.TransportShm)
					testutil.WaitFor(t, shortRun, "the server to accept every connection", func() bool {
						return len(testutil.OsfStat(t, srv.Pid).Select(testutil.ByRole("server"))) == tc.conns
					})
					testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportShm)
				}
				mustSay(t, "client", cli.Stdout(), tp)
				cli.proceed(t)
				c := waitTcpx(t, "client", cli, longRun)
				s := waitTcpx(t, "server", srv, shortRun)
				want := fmt.Sprintf("echoed %d messages ", tc.conns*tc.msgs)
				if !strings.Contains(c, want) || !strings.Contains(c, " bytes pattern ok") {
					t.Errorf("client output lacks %q...pattern ok:\n%s", want, c)
				}
				var cb, sb int64
				fmt.Sscanf(c[strings.Index(c, want)+len(want):], "%d", &cb)
				if i := strings.Index(s, "echoed "); i >= 0 {
					fmt.Sscanf(s[i:], "echoed %d", &sb)
				}
				if cb == 0 || cb != sb {
					t.Errorf("client got back %d bytes, server echoed %d", cb, sb)
				}
				mustSay(t, "server", s, fmt.Sprintf("served %d connections, echoed %d bytes, %s", tc.conns, sb, tp))
				t.Logf("%d connections, %d bytes echoed", tc.conns, cb)
			})
		}
	}
}

// TestShmReset: the server closes with bytes it never read; the client
// first gets the data the server sent before closing, then ECONNRESET
// once, then 0, and a write then fails with EPIPE and SIGPIPE (Linux TCP:
// the connection was reset).
func TestShmReset(t *testing.T) {
	t.Parallel()
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv := startTcpx(t, m, "server", "reset", "127.0.0.1", "0")
			cli := startTcpx(t, m, "client", "reset", "127.0.0.1", srv.port(t))
			cr, sr := cli.Wait(shortRun), srv.Wait(shortRun)
			if !sr.OK() {
				t.Fatalf("server: %s", sr)
			}
			mustSay(t, "server", sr.Stdout, "accepted, transport "+wantTable(m.osf))
			mustSay(t, "server", sr.Stdout, "closing with 6 unread bytes")
			if !cr.OK() {
				t.Fatalf("client: %s", cr)
			}
			for _, l := range []string{"connected, transport " + wantTable(m.osf), "recv 5 data hello",
				"recv -1 ECONNRESET", "recv 0", "send -1 EPIPE sigpipe 1"} {
				mustSay(t, "client", cr.Stdout, l)
			}
		})
	}
}

// TestShmEPIPE: the server closes at once; the client sees the end of
// file, its first write is accepted, the second fails with EPIPE and
// SIGPIPE (counted by a handler, or killing the client with the default
// disposition), and one with MSG_NOSIGNAL fails with EPIPE alone.
func TestShmEPIPE(t *testing.T) {
	t.Parallel()
	for _, disp := range []string{"handler", "default"} {
		for _, m := range []mode{bare, underOsf} {
			t.Run(disp+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				srv := startTcpx(t, m, "server", "close", "127.0.0.1", "0")
				args := []string{"epipe", "127.0.0.1", srv.port(t)}
				if disp == "default" {
					args = append([]string{"-d"}, args...)
				}
				cli := startTcpx(t, m, "client", args...)
				cr := cli.Wait(shortRun)
				if sr := srv.Wait(shortRun); !sr.OK() {
					t.Fatalf("server: %s", sr)
				}
				mustSay(t, "client", cr.Stdout, "connected, transport "+wantTable(m.osf))
				mustSay(t, "client", cr.Stdout, "first write 3 sigpipe 0")
				if disp == "default" {
					if cr.Signal != unix.SIGPIPE {
						t.Fatalf("client: want death by SIGPIPE: %s", cr)
					}
					return
				}
				if !cr.OK() {
					t.Fatalf("client: %s", cr)
				}
				mustSay(t, "client", cr.Stdout, "second write -1 EPIPE sigpipe 1")
				mustSay(t, "client", cr.Stdout, "MSG_NOSIGNAL -1 EPIPE sigpipe 0")
			})
		}
	}
}

// TestShmNonblockingPartial: a nonblocking connect (EINPROGRESS or 0, then
// POLLOUT and SO_ERROR 0), then 16 MiB in nonblocking writes of 100003
// bytes to a slow reader: there must be partial writes and EAGAIN, and the
// reader must get every byte in order.
func TestShmNonblockingPartial(t *testing.T) {
	t.Parallel()
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv := startTcpx(t, m, "server", "sink", "127.0.0.1", "0")
			cli := startTcpx(t, m, "client", "-w", "nbpartial", "127.0.0.1", srv.port(t), "16M")
			cli.WaitOutput("ready\n", shortRun)
			if m.osf {
				testutil.AssertTransport(t, cli.Pid, testutil.ByRole("client"), testutil.TransportShm)
			}
			cli.proceed(t)
			c := waitTcpx(t, "client", cli, longRun)
			s := waitTcpx(t, "server", srv, shortRun)
			mustSay(t, "client", c, "connect EINPROGRESS-or-0 yes")
			mustSay(t, "client", c, "writable, SO_ERROR 0, transport "+wantTable(m.osf))
			mustSay(t, "client", c, "sent 16777216, partial writes seen yes, EAGAIN seen yes")
			mustSay(t, "client", c, "answer: received 16777216 pattern ok")
			mustSay(t, "server", s, "accepted, transport "+wantTable(m.osf))
		})
	}
}

// TestShmMixedPeers: one end under osf, the other bare, over IPv4, IPv6
// and v4-mapped addresses. The connection must be kernel TCP on both ends
// with the data intact (64 MiB each way at once), and osfstat must say
// why on the end under osf: "no osf listener at the peer ..." for a client,
// "peer connected over kernel TCP ..." for the server's accepted socket
// (whose listener is still offloaded).
func TestShmMixedPeers(t *testing.T) {
	t.Parallel()
	for _, fam := range families {
		for _, osfSide := range []string{"server", "client"} {
			t.Run(fam.name+"/osf-"+osfSide, func(t *testing.T) {
				t.Parallel()
				sm, cm := underOsf, bare
				if osfSide == "client" {
					sm, cm = bare, underOsf
				}
				srv := startTcpx(t, sm, "server", "-w", "bidir", fam.listen, "0", "64M")
				cli := startTcpx(t, cm, "client", "-w", "bidir", fam.connect, srv.port(t), "64M")
				cli.WaitOutput("ready\n", shortRun)
				srv.WaitOutput("ready\n", shortRun)
				mustSay(t, "client", cli.Stdout(), "connected, transport tcp")
				mustSay(t, "server", srv.Stdout(), "accepted, transport tcp")
				if osfSide == "client" {
					for _, s := range testutil.AssertTransport(t, cli.Pid, testutil.ByRole("client"), testutil.TransportKernel) {
						if !strings.HasPrefix(s.Reason, "no osf listener at the peer") {
							t.Errorf("osf client: reason %q, want \"no osf listener at the peer...\"", s.Reason)
						}
					}
				} else {
					testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportShm)
					for _, s := range testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportKernel) {
						if !strings.HasPrefix(s.Reason, "peer connected over kernel TCP") {
							t.Errorf("osf server: reason %q, want \"peer connected over kernel TCP...\"", s.Reason)
						}
					}
				}
				cli.proceed(t)
				srv.proceed(t)
				c := waitTcpx(t, "client", cli, streamRun)
				s := waitTcpx(t, "server", srv, streamRun)
				checkBidir(t, c, s, 64<<20)
			})
		}
	}
}
