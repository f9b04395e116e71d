package tests

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// Helpers for tests/progs/stream.c, shared by the conformance suite and the
// two-host test.

// place says where a program runs: in this network namespace (no prefix),
// or wherever a prefix command puts it ("ip netns exec NS", "nsenter -t 1
// -n --"). The program's environment goes through env(1) after the prefix,
// so that only the program itself runs under osf.
type place struct {
	name   string
	prefix []string
}

// cmd prepares prog with args under osf (LD_PRELOAD plus the OSF_*
// variables in osfEnv) at pl.
func (pl place) cmd(t testing.TB, osfEnv []string, prog string, args ...string) *testutil.Command {
	t.Helper()
	env := testutil.Preload(t, osfEnv...)
	if len(pl.prefix) == 0 {
		return testutil.Cmd(t, env, prog, args...)
	}
	full := append([]string{}, pl.prefix[1:]...)
	full = append(full, "env")
	full = append(full, env...)
	full = append(full, prog)
	full = append(full, args...)
	return testutil.Cmd(t, nil, pl.prefix[0], full...)
}

// plain prepares a program at pl without osf.
func (pl place) plain(t testing.TB, prog string, args ...string) *testutil.Command {
	t.Helper()
	if len(pl.prefix) == 0 {
		return testutil.Cmd(t, nil, prog, args...)
	}
	return testutil.Cmd(t, nil, pl.prefix[0], append(append(append([]string{}, pl.prefix[1:]...), prog), args...)...)
}

// streamServer is a running `stream server`.
type streamServer struct {
	p    *testutil.Process
	host string
	port int
	pl   place
	env  []string
}

var portRE = regexp.MustCompile(`port (\d+)`)

// startStreamServer starts `stream server HOST 0` under osf at pl and
// waits for its port.
func startStreamServer(t testing.TB, pl place, osfEnv []string, host string) *streamServer {
	t.Helper()
	p := pl.cmd(t, osfEnv, testutil.Prog(t, "stream"), "server", host, "0").Start()
	out := p.WaitOutput("\n", shortRun)
	m := portRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("stream server printed %q, stderr %q", out, p.Stderr())
	}
	port, _ := strconv.Atoi(m[1])
	return &streamServer{p: p, host: host, port: port, pl: pl, env: osfEnv}
}

// addr is HOST:PORT for messages and osfrun.
func (s *streamServer) addr() string {
	if strings.Contains(s.host, ":") {
		return "[" + s.host + "]:" + strconv.Itoa(s.port)
	}
	return s.host + ":" + strconv.Itoa(s.port)
}

// client runs one `stream client` test at pl and fails the test unless it
// passes; it returns the client's output.
func (s *streamServer) client(t testing.TB, pl place, osfEnv []string, test string, n, seed uint64) string {
	t.Helper()
	args := []string{"client", s.host, strconv.Itoa(s.port), test, strconv.FormatUint(n, 10), strconv.FormatUint(seed, 10)}
	timeout := longRun
	if test == "reset" {
		timeout = shortRun
	}
	r := pl.cmd(t, osfEnv, testutil.Prog(t, "stream"), args...).Run(timeout)
	if !r.OK() || !strings.Contains(r.Stdout, "PASS "+test) {
		t.Fatalf("stream client %s %d: %s\nserver stderr: %s", test, n, r, s.p.Stderr())
	}
	noOsfMessages(t, "stream client", r.Stderr)
	return r.Stdout
}

// served waits until the server reports the test done with the checksum
// and byte count wanted.
func (s *streamServer) served(t testing.TB, test, fnv string, n uint64) {
	t.Helper()
	s.p.WaitOutput(fmt.Sprintf("served %s fnv=%s bytes=%d", test, fnv, n), shortRun)
}

// hold opens a connection that stays up until the returned function is
// called; the client's pid is returned for osfstat.
func (s *streamServer) hold(t testing.TB, pl place, osfEnv []string) (pid int, local, peer string, release func()) {
	t.Helper()
	c := pl.cmd(t, osfEnv, testutil.Prog(t, "stream"), "client", s.host, strconv.Itoa(s.port), "hold")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Cmd.Stdin = r
	p := c.Start()
	r.Close()
	out := p.WaitOutput("connected", shortRun)
	fields := strings.Fields(out[strings.Index(out, "connected"):])
	if len(fields) >= 3 {
		local, peer = fields[1], fields[2]
	}
	return p.Pid, local, peer, func() {
		w.Write([]byte("done\n"))
		w.Close()
		if res := p.Wait(shortRun); !res.OK() {
			t.Errorf("hold client: %s", res)
		}
	}
}

// fnvOf returns the FNV-1a 64 checksum, as stream prints it, of n pattern
// bytes with seed.
func fnvOf(seed, n uint64) string {
	h := uint64(0xcbf29ce484222325)
	for pos := uint64(0); pos < n; pos++ {
		h ^= uint64(byte((pos + seed) * 0x9e3779b97f4a7c15 >> 56))
		h *= 0x100000001b3
	}
	return fmt.Sprintf("%016x", h)
}

var fnvRE = regexp.MustCompile(`fnv=([0-9a-f]{16}) bytes=(\d+)`)

// passFNV returns the checksum and count on a client's PASS line.
func passFNV(t testing.TB, out, test string) (string, uint64) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "PASS "+test+" ") {
			if m := fnvRE.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseUint(m[2], 10, 64)
				return m[1], n
			}
		}
	}
	t.Fatalf("no PASS line with a checksum for %s in %q", test, out)
	return "", 0
}

// streamCase is one stream test, with what its checksums must be.
type streamCase struct {
	test string
	n    uint64
	// verify checks the client's output and the server's report; seed is
	// the client's.
	verify func(t testing.TB, s *streamServer, out string, seed uint64)
}

// streamCases are the tests every transport runs, with sizes that take
// many laps of a ring.
func streamCases(bulk uint64) []streamCase {
	return []streamCase{
		{"pingpong", 300, func(t testing.TB, s *streamServer, out string, _ uint64) {
			fnv, n := passFNV(t, out, "pingpong")
			s.served(t, "echo", fnv, n) // both saw the same bytes
		}},
		{"sink", bulk, func(t testing.TB, s *streamServer, out string, seed uint64) {
			want := fnvOf(seed, bulk)
			if !strings.Contains(out, "sent fnv="+want) || !strings.Contains(out, "server fnv="+want) {
				t.Errorf("sink: want checksum %s sent and reported by the server; client said %q", want, out)
			}
			s.served(t, "sink", want, bulk)
		}},
		{"source", bulk, func(t testing.TB, s *streamServer, out string, seed uint64) {
			if fnv, n := passFNV(t, out, "source"); fnv != fnvOf(seed, bulk) || n != bulk {
				t.Errorf("source: received %d bytes, checksum %s; want %d, %s", n, fnv, bulk, fnvOf(seed, bulk))
			}
		}},
		{"duplex", bulk, func(t testing.TB, s *streamServer, out string, seed uint64) {
			if fnv, n := passFNV(t, out, "duplex"); fnv != fnvOf(seed+1, bulk) || n != bulk {
				t.Errorf("duplex: client received %d bytes, checksum %s; want %d, %s", n, fnv, bulk, fnvOf(seed+1, bulk))
			}
			s.served(t, "duplex", fnvOf(seed, bulk), bulk)
		}},
		{"halfclose", 0, nil},
		{"reset", 0, nil},
		{"unread", 0, nil},
		{"epipe", 0, nil},
		{"nonblock", 0, nil},
		{"names", 0, nil},
	}
}

// runStreamCases runs every stream case against s from pl.
func runStreamCases(t *testing.T, s *streamServer, pl place, osfEnv []string, bulk uint64) {
	for i, tc := range streamCases(bulk) {
		t.Run(tc.test, func(t *testing.T) {
			seed := uint64(100*i + 7)
			out := s.client(t, pl, osfEnv, tc.test, tc.n, seed)
			if tc.verify != nil {
				tc.verify(t, s, out, seed)
			}
		})
	}
}
