package tests

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/testutil"
)

// TestFdBudgetEqualsKernel: an offloaded connection costs the program one
// fd of its RLIMIT_NOFILE, as a TCP socket does, though osf holds two more
// (segment and writers' wake socket; the client a third, the port holder)
// per connection: a server accepting and a client connecting until EMFILE
// hold exactly as many connections as under kernel TCP, get EMFILE from
// the same call (accept, socket), and find the same lowest free fd
// afterwards (issue 12). Every connection is shm. The hard limit (4096)
// leaves osf room above the soft one.
func TestFdBudgetEqualsKernel(t *testing.T) {
	for _, soft := range []int{64, 256} {
		t.Run(strconv.Itoa(soft), func(t *testing.T) {
			want := fdBudget(t, bare, soft, 4096, "")
			got := fdBudget(t, underOsf, soft, 4096, testutil.TransportShm)
			if got != want {
				t.Fatalf("soft limit %d: under osf\n%s\nkernel TCP\n%s", soft, got, want)
			}
			t.Logf("soft limit %d, both:\n%s", soft, got)
		})
	}
}

// TestFdBudgetSoftEqualsHard (issue 24 item 3): with soft = hard (`ulimit
// -n 1024` sets both) osf has no room above the limit, and its fds would
// take numbers the program needs (client 4 fds per connection, server 3:
// EMFILE after 285 connections where kernel TCP made 1,019, a server 340
// of 1,018). Connections and listeners then go to kernel TCP, whose
// accepts cost one fd each, so a server and a client reach EMFILE at the
// kernel's count, on the same call, within the one fd of osf's own table,
// and find the same lowest free fd. Every connection is kernel TCP with
// reason "resource limit" (nothing offloaded that could not be afforded).
//
// A server at soft = hard whose clients have room (client soft 2048, hard
// 4096) accepts by kernel TCP too (no companion): before, such clients'
// idle connections filled it at a third of its limit.
//
// With OSF_SHM_KFD=1 (OSF_TEST_SHM_KFD=1, with the writers' eventfd) a
// connection holds no fd of its own on either end and a client's
// connections to a listener share one wide region, so at soft = hard every
// connection is shm, on both ends (but those that found the client's link
// full: mostlyShm), and each reaches EMFILE within
// tightCap of the kernel's count (osf's table, the server's companion, a
// link and a region's memfd and eventfd, and the numbers a server's accept
// keeps free for a new link and a hello's two: measured at 1024 and 256,
// 4 fewer on the client, 8 on the server). Its accept answers EMFILE when
// fewer than 4 numbers are free, so after one connection closed the
// server's lowest free fd is still the one it closed, but the open after
// it gets one of those, where the kernel's answered EMFILE. With a little room
// above the soft limit (1000, hard 1024: 24 numbers,
// the fds of a few connections) the first connections are shm and the
// rest kernel TCP once the room is full, where they spilled into the
// program's budget before (EMFILE after 338 of 995); the counts are the
// kernel's exactly.
func TestFdBudgetSoftEqualsHard(t *testing.T) {
	for _, l := range []struct{ soft, hard, csoft, chard int }{
		{256, 256, 256, 256}, {1024, 1024, 1024, 1024}, {1000, 1024, 1000, 1024},
		{1024, 1024, 2048, 4096}, // a client with room: the server has no companion
	} {
		lim := l.soft
		t.Run(fmt.Sprintf("%d-%d/client-%d-%d", l.soft, l.hard, l.csoft, l.chard), func(t *testing.T) {
			want := fdBudget(t, bare, l.soft, l.hard, "", l.csoft, l.chard)
			tp, tol, stol := testutil.TransportKernel, 2, 2 // osf's table: one fd of the program's
			if l.soft < l.hard {
				tp = "some shm"
			} else if tightOffloads() {
				// the server: its accept keeps 3 numbers free besides
				tp, tol, stol = "mostly shm", tightCap, tightCap+3
				if l.csoft != l.soft {
					// a client with room: its first region narrow, the
					// next wide (1,010 of 1,020 measured, 1,008 with a
					// third region of the client's mapped); with CPU hogs,
					// about one run in 40, 1,006: a fourth (their fds
					// seen), hellos read ahead of the server's accepts
					tp, stol = "shm to a full link", tightCap+7
				}
			}
			got := fdBudget(t, underOsf, l.soft, l.hard, tp, l.csoft, l.chard)
			wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
			if len(wl) != len(gl) {
				t.Fatalf("limit %d: under osf\n%s\nkernel TCP\n%s", lim, got, want)
			}
			inServer := false
			for i := range wl {
				wf, gf := strings.Fields(wl[i]), strings.Fields(gl[i])
				if len(wf) > 0 && (wf[0] == "server" || wf[0] == "client") {
					inServer = wf[0] == "server"
				}
				if inServer && testutil.KfdRun() && len(gf) > 0 && len(wf) > 0 && gf[0] == wf[0] &&
					(gf[0] == "then" || gf[0] == "lowest" && len(gf) == 4 && gf[3] == gf[1]+")") {
					continue // the accept's EMFILE with 3 numbers free (kfd_fds_short): the next open gets one
				}
				if len(wf) == 3 && (wf[0] == "server" || wf[0] == "client") && len(gf) == 3 {
					w, _ := strconv.Atoi(wf[1])
					g, err := strconv.Atoi(gf[1])
					lo := w - tol
					if inServer {
						lo = w - stol
					}
					if err == nil && gf[0] == wf[0] && gf[2] == wf[2] && g <= w && g >= lo {
						continue
					}
				} else if wl[i] == gl[i] {
					continue
				}
				t.Fatalf("limit %d: line %d: under osf %q, kernel TCP %q\nunder osf\n%s\nkernel TCP\n%s",
					lim, i+1, gl[i], wl[i], got, want)
			}
			t.Logf("limit %d, kernel TCP:\n%sunder osf:\n%s", lim, want, got)
		})
	}
}

// tightCap is OSF_FDT_TIGHT_CAP (fdtable/fdt.h): how many fds osf may hold
// in the program's budget at soft = hard under OSF_SHM_KFD.
const tightCap = 8

// tightOffloads reports whether this run offloads connections at soft =
// hard: OSF_TEST_SHM_KFD=1, with the writers' eventfd.
func tightOffloads() bool {
	return testutil.KfdRun() && os.Getenv("OSF_TEST_SHM_EFD") != "0"
}

// TestFdBudgetClientProcesses (issue 24 item 3): a server at soft = hard =
// 1024 with 300 client processes of one connection each (soft = hard =
// 1024 too) serves them all, as under kernel TCP: no client fails, the
// server's accepts do not, and every connection's bytes arrive. With
// OSF_SHM_KFD=1 each client process would cost the server a link and a
// region's memfd and eventfd (900 fds with the 300 connections'): osf
// holds at most tightCap, so the first client processes are shm and the
// server then shuts its companion, the rest connecting by kernel TCP
// before their SYN. Without the switch all are kernel TCP.
func TestFdBudgetClientProcesses(t *testing.T) {
	const procs = 300
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			srv, end := clientProcesses(t, m, "server", clientPhase{"procs", procs})
			srv.WaitOutput("bytes ", 120*time.Second)
			want := fmt.Sprintf("listening\nserver %d none\nbytes ok\n", procs)
			if got := srv.Stdout(); !strings.HasPrefix(got, want) {
				t.Errorf("server: %q, want %q first", got, want)
			}
			if m.osf && tightOffloads() {
				someShm(t, srv.Pid, "server", "")
			} else if m.osf {
				testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), testutil.TransportKernel)
			}
			end()
		})
	}
}

// TestFdBudgetClientProcessesInTurn: 12 client processes at once, then 20
// one after another, each done before the next (its server reads its
// bytes and closes its connection), to a server at soft = hard = 1024.
// Under OSF_SHM_KFD=1 the burst shuts the server's companion (some of it
// shm, the rest kernel TCP); once those processes are gone, what they
// cost the server (links, regions' memfds and eventfds) is gone too and
// an accept opens the companion again (budget_reopen), so the processes
// in turn are shm from the first or second on. Bare and without the
// switch every connection is kernel TCP.
func TestFdBudgetClientProcessesInTurn(t *testing.T) {
	const burst, turn = 12, 20
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			srv, end := clientProcesses(t, m, "closer", clientPhase{"burst", burst},
				clientPhase{"seq", turn})
			srv.WaitOutput("transports ", 120*time.Second)
			tp := regexp.MustCompile(`transports ([01]*)\n`).FindStringSubmatch(srv.Stdout())
			want := fmt.Sprintf("listening\nserver %d none\nbytes ok\n", burst+turn)
			if got := srv.Stdout(); !strings.HasPrefix(got, want) || tp == nil || len(tp[1]) != burst+turn {
				t.Fatalf("server: %q, want %q first and a transport for each", got, want)
			}
			t.Logf("transports, burst then in turn (1: osf's): %s %s", tp[1][:burst], tp[1][burst:])
			switch inTurn := tp[1][burst:]; {
			case m.osf && tightOffloads():
				if !strings.Contains(tp[1][:burst], "1") ||
					!regexp.MustCompile(`^0{0,3}1+$`).MatchString(inTurn) {
					t.Errorf("want some of the burst shm, and those in turn from the first few on")
				}
			case strings.Contains(tp[1], "1"):
				t.Errorf("want every connection kernel TCP")
			}
			end()
		})
	}
}

// clientPhase is a run of fdbudget's client processes: procs, seq or
// burst, n of them.
type clientPhase struct {
	cmd string
	n   int
}

// clientProcesses starts fdbudget's server (server or closer) for the
// connections of phases and then each phase's client processes, all at
// soft = hard = 1024, each phase after the one before reported (which
// must say each connected). end closes their standard input and waits for
// all.
func clientProcesses(t *testing.T, m mode, server string, phases ...clientPhase) (srv *testutil.Process, end func()) {
	t.Helper()
	prog := testutil.Prog(t, "fdbudget")
	port := strconv.Itoa(testutil.FreePort(t))
	args := func(cmd string, n int) []string { return []string{cmd, port, "1024", "1024", strconv.Itoa(n)} }
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pw.Close(); pr.Close() })
	total := 0
	for _, ph := range phases {
		total += ph.n
	}
	sc := m.cmd(t, nil, prog, args(server, total)...)
	sc.Cmd.Stdin = pr
	srv = sc.Start()
	srv.WaitOutput("listening", 10*time.Second)
	procs := []*testutil.Process{srv}
	for _, ph := range phases {
		cc := m.cmd(t, nil, prog, args(ph.cmd, ph.n)...)
		cc.Cmd.Stdin = pr
		cl := cc.Start()
		procs = append(procs, cl)
		cl.WaitOutput("procs ", 120*time.Second)
		if want := fmt.Sprintf("procs %d ok %d\n", ph.n, ph.n); cl.Stdout() != want {
			t.Errorf("%s clients: %q, want %q", ph.cmd, cl.Stdout(), want)
		}
	}
	return srv, func() {
		t.Helper()
		pw.Close()
		for _, p := range procs {
			if r := p.Wait(60 * time.Second); !r.OK() {
				t.Fatalf("fdbudget: %s", r)
			}
		}
	}
}

// fdBudget runs fdbudget's server and client at the limit and returns
// what they report; under osf every connection of each must have
// transport, or with "some shm" at least one shm and the others kernel
// TCP for want of fds (reason "resource limit").
func fdBudget(t *testing.T, m mode, soft, hard int, transport string, client ...int) string {
	t.Helper()
	prog := testutil.Prog(t, "fdbudget")
	port := strconv.Itoa(testutil.FreePort(t))
	lim := []string{strconv.Itoa(soft), strconv.Itoa(hard)}
	hold := func(c *testutil.Command) *os.File {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c.Cmd.Stdin = pr
		t.Cleanup(func() { pw.Close(); pr.Close() })
		return pw
	}
	sc := m.cmd(t, nil, prog, append([]string{"server", port}, lim...)...)
	sw := hold(sc)
	srv := sc.Start()
	srv.WaitOutput("listening", 10*time.Second)
	if len(client) == 2 { // the client's own soft and hard limits
		lim = []string{strconv.Itoa(client[0]), strconv.Itoa(client[1])}
	}
	cc := m.cmd(t, nil, prog, append([]string{"client", port}, lim...)...)
	cw := hold(cc)
	cl := cc.Start()
	cl.WaitOutput("then ", 60*time.Second)
	srv.WaitOutput("then ", 60*time.Second)
	if m.osf && transport == "some shm" {
		someShm(t, cl.Pid, "client", "")
		someShm(t, srv.Pid, "server", "")
	} else if m.osf && transport == "shm to a full link" {
		// The client's connections beyond the server's EMFILE queue
		// their hellos on its link, which the server no longer reads:
		// once it is full they connect by kernel TCP (their server never
		// accepts them either way).
		someShm(t, cl.Pid, "client", "handshake failed")
		mostlyShm(t, srv.Pid, "server")
	} else if m.osf && transport == "mostly shm" {
		mostlyShm(t, cl.Pid, "client")
		mostlyShm(t, srv.Pid, "server")
	} else if m.osf {
		testutil.AssertTransport(t, cl.Pid, testutil.ByRole("client"), transport)
		testutil.AssertTransport(t, srv.Pid, testutil.ByRole("server"), transport)
	}
	cw.Close()
	sw.Close()
	for _, p := range []*testutil.Process{cl, srv} {
		if r := p.Wait(30 * time.Second); !r.OK() {
			t.Fatalf("fdbudget: %s", r)
		}
	}
	return strings.TrimPrefix(srv.Stdout(), "listening\n") + cl.Stdout()
}

// TestRlimitWindowInSignalHandler: a signal handler that listens (osf
// places the companion above the soft RLIMIT_NOFILE in a window that
// raises the limit for a moment) lands, about every 200 µs, on a thread
// that reads and sets RLIMIT_NOFILE in a loop, so often while the
// getrlimit/setrlimit hook holds the window's lock: the program sees its
// own limit at every moment, as without osf. Before, a window opened by a
// handler inside a hook's hold was never closed (the limit stayed raised
// until the program set it again).
func TestRlimitWindowInSignalHandler(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "rlimitsig")
	want := "handlers yes\nraised seen 0\nsoft 256 hard 4096\n"
	for _, m := range []mode{bare, underOsf} {
		r := m.cmd(t, nil, prog, "256", "4096").MustRun(30 * time.Second)
		if r.Stdout != want {
			t.Errorf("%s: got\n%swant\n%s", m.name, r.Stdout, want)
		}
	}
}

// someShm asserts, through osfstat, that process pid has shm connections
// in role and that its others are kernel TCP: a client's for want of fds
// (reason "resource limit"), a server's because its client chose so, or
// for reason why when given.
func someShm(t *testing.T, pid int, role, why string) {
	t.Helper()
	shm, kernel := shmAndKernel(t, pid, role, why)
	if shm == 0 || kernel == 0 {
		t.Errorf("%s %d: %d shm and %d kernel TCP connections, want some of each", role, pid, shm, kernel)
	}
	t.Logf("%s: %d shm, %d kernel TCP", role, shm, kernel)
}

// mostlyShm asserts that process pid's connections in role are shm but
// for those that found their client's link full (OSF_SHM_KFD: a client
// that runs far enough ahead of its server's accepts, its hellos unread
// filling the link's send buffer, connects by kernel TCP: client reason
// "handshake failed", the server's "peer connected over kernel TCP";
// none in most runs on a quiet host, hundreds on a loaded one), and
// that some are shm.
func mostlyShm(t *testing.T, pid int, role string) {
	t.Helper()
	why := map[string]string{"client": "handshake failed", "server": "peer connected over kernel TCP"}[role]
	shm, kernel := shmAndKernel(t, pid, role, why)
	if shm == 0 {
		t.Errorf("%s %d: no shm connection (%d kernel TCP)", role, pid, kernel)
	}
	t.Logf("%s: %d shm, %d kernel TCP (a full link)", role, shm, kernel)
}

// shmAndKernel counts process pid's shm and kernel TCP connections in
// role, failing t for any other, or kernel TCP for another reason than
// why (its default: someShm's).
func shmAndKernel(t *testing.T, pid int, role, why string) (shm, kernel int) {
	t.Helper()
	if why == "" {
		why = map[string]string{"client": "resource limit", "server": "peer connected over kernel TCP"}[role]
	}
	for _, c := range testutil.OsfStat(t, pid).Select(testutil.ByRole(role)) {
		switch {
		case c.Transport == testutil.TransportShm:
			shm++
		case c.Transport == testutil.TransportKernel && strings.HasPrefix(c.Reason, why):
			kernel++
		default:
			t.Errorf("%s %d: %s", role, pid, c)
		}
	}
	return shm, kernel
}
