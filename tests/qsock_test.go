package tests

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// qsockCalls is how many readable/writable pairs progs/qsock_example.c
// asks in its idle phase.
const qsockCalls = 20000

// TestQsock runs progs/qsock_example.c, which polls a connection in a
// tight loop with qsock_readable/qsock_writable (looked up with dlsym),
// bare and under osf: bare the functions are absent and it falls back to
// poll(2); under osf the connection is offloaded and the cookie is set.
// Both must give the same answers (idle: never readable, always writable;
// then every message, checked). Under strace -f, the main thread must make
// no system call at all between the program's two markers under osf (the
// readiness questions and the reads come from the rings), and at least
// one poll per question bare.
func TestQsock(t *testing.T) {
	t.Parallel()
	prog := testutil.Prog(t, "qsock_example")
	args := []string{strconv.Itoa(qsockCalls), "200"}
	common := []string{
		fmt.Sprintf("idle: %d calls: readable 0 writable %d", qsockCalls, qsockCalls),
		"data: 200 messages 20000 bytes pattern ok",
	}
	for _, m := range []mode{bare, underOsf} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := m.cmd(t, nil, prog, args...).MustRun(shortRun)
			want := append([]string{"qsock absent", "transport client tcp server tcp", "cookie unset"}, common...)
			if m.osf {
				// Under OSF_SHM_KFD=1 the fd is the kernel's TCP socket:
				// the cookie and the loop without a system call say
				// it is offloaded.
				f := testutil.ShmFamily()
				want = append([]string{"qsock osf", "transport client " + f + " server " + f, "cookie set"}, common...)
			}
			for _, l := range want {
				mustSay(t, "qsock_example", r.Stdout, l)
			}
			noOsfMessages(t, "qsock_example", r.Stderr)
			t.Logf("%s", strings.TrimSpace(r.Stderr))
		})
		t.Run(m.name+"/strace", func(t *testing.T) {
			t.Parallel()
			strace := testutil.OptionalTool(t, "strace", "count the system calls of the polling loop")
			trace := filepath.Join(t.TempDir(), "trace")
			sargs := []string{"-f", "-qq", "-o", trace}
			if m.osf {
				sargs = append(sargs, "-E", "LD_PRELOAD="+testutil.Lib(t))
			}
			r := testutil.Cmd(t, nil, strace, append(append(sargs, prog), args...)...).MustRun(longRun)
			for _, l := range common {
				mustSay(t, "qsock_example under strace", r.Stdout, l)
			}
			pm := regexp.MustCompile(`(?m)^pid (\d+)$`).FindStringSubmatch(r.Stdout)
			if pm == nil {
				t.Fatalf("no pid line:\n%s", r.Stdout)
			}
			calls := markedSyscalls(t, trace, pm[1])
			total := 0
			for _, n := range calls {
				total += n
			}
			t.Logf("main thread between the markers: %d system calls %v", total, calls)
			if m.osf && total != 0 {
				t.Errorf("under osf the polling loop made %d system calls: %v", total, calls)
			}
			if !m.osf && calls["poll"] < 2*qsockCalls {
				t.Errorf("bare: %d polls for %d questions: %v", calls["poll"], 2*qsockCalls, calls)
			}
		})
	}
}

// markedSyscalls counts, by name, the system calls that thread tid made
// between its first two getppid() calls in an strace -f log ("TID
// name(args) = result" lines; a call interrupted in the log by another
// thread's is counted once, at its start).
func markedSyscalls(t *testing.T, trace, tid string) map[string]int {
	t.Helper()
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts, markers := map[string]int{}, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		who, rest, ok := strings.Cut(sc.Text(), " ")
		rest = strings.TrimSpace(rest)
		if !ok || who != tid || strings.HasPrefix(rest, "<...") || strings.HasPrefix(rest, "+++") ||
			strings.HasPrefix(rest, "---") {
			continue
		}
		name, _, _ := strings.Cut(rest, "(")
		if name == "getppid" {
			if markers++; markers == 2 {
				return counts
			}
			continue
		}
		if markers == 1 {
			counts[name]++
		}
	}
	t.Fatalf("strace log %s: %d getppid markers of thread %s, want 2", trace, markers, tid)
	return nil
}
