package tests

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// loopbackScript listens on 127.0.0.1, connects to itself, exchanges a few
// bytes, prints "ok" and "fds L C S" (listener, client, accepted socket),
// then "ready", and waits for its standard input to close.
const loopbackScript = `
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
c.sendall(b"ping"); assert s.recv(4) == b"ping"
s.sendall(b"pong"); assert c.recv(4) == b"pong"
print("ok")
print("fds", l.fileno(), c.fileno(), s.fileno())
print("ready", flush=True)
sys.stdin.read()
`

// loopback is a running loopbackScript.
type loopback struct {
	p     *testutil.Process
	stdin io.WriteCloser // closing it ends the program
	out   string         // its output up to "ready"
	// fds of the listener, the client and the accepted socket.
	lfd, cfd, sfd int
}

// startLoopback starts loopbackScript as the command line args (a prefix
// such as nsenter, then python) with env, under osf when m says so, and
// waits until it is ready.
func startLoopback(t *testing.T, m mode, env []string, args ...string) *loopback {
	t.Helper()
	c := m.cmd(t, env, args[0], append(args[1:], "-c", loopbackScript)...)
	stdin, err := c.Cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	l := &loopback{p: c.Start(), stdin: stdin}
	l.out = l.p.WaitOutput("ready\n", shortRun)
	i := strings.Index(l.out, "fds ")
	if i < 0 {
		t.Fatalf("loopback program printed %q", l.out)
	}
	if _, err := fmt.Sscanf(l.out[i:], "fds %d %d %d", &l.lfd, &l.cfd, &l.sfd); err != nil {
		t.Fatalf("cannot parse the fds from %q: %v", l.out, err)
	}
	return l
}

// TestMalformedVariable runs a python program that makes a TCP connection
// under osf with a malformed OSF_ROUTES (reported by the core when it
// loads) and with a malformed OSF_SPIN_US (reported by libosf.so's
// constructor): stderr must hold the exact report once, and the program
// must work, on kernel TCP (osf is pass-through).
func TestMalformedVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, env, report string
		core              bool // the core loads (and reports) before osf turns itself off
	}{
		{"routes", "OSF_ROUTES=offload bogus x",
			`osf: OSF_ROUTES="offload bogus x" (rule 1): bad address "x", want *, local, IPv4 or [IPv6]; osf is disabled (pass-through) in this process`,
			true},
		{"spin", "OSF_SPIN_US=abc",
			`osf: OSF_SPIN_US="abc": want a decimal integer 0-1000000; osf is disabled (pass-through) in this process`,
			false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := startLoopback(t, underOsf, []string{tc.env}, python(t))
			p, stdin, out := l.p, l.stdin, l.out
			if !strings.HasPrefix(out, "ok\n") {
				t.Errorf("stdout %q, want ok", out)
			}
			st := testutil.OsfStat(t, p.Pid)
			for _, s := range st.Sockets {
				if s.Transport != testutil.TransportKernel && s.Transport != testutil.TransportNone {
					t.Errorf("socket on %q with osf disabled: %s", s.Transport, s)
				}
			}
			if core, _ := testutil.CoreMapped(p.Pid); core != tc.core {
				t.Errorf("core mapped=%v, want %v", core, tc.core)
			}
			stdin.Close()
			r := p.Wait(shortRun)
			if !r.OK() {
				t.Fatalf("python: %s", r)
			}
			lines := osfLines(r.Stderr)
			if len(lines) != 1 || lines[0] != tc.report {
				t.Errorf("osf printed %q, want exactly one line %q", lines, tc.report)
			}
			if n := strings.Count(r.Stderr, tc.report); n != 1 {
				t.Errorf("the report appears %d times on stderr, want 1: %q", n, r.Stderr)
			}
		})
	}
}
