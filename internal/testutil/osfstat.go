package testutil

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Transports as osfstat names them.
const (
	TransportKernel = "kernel"
	TransportShm    = "shm"
	TransportRDMA   = "rdma"
	// TransportGateway is a stream through an osfgw gateway; Gateway names it.
	TransportGateway = "gateway"
	TransportNone    = "-" // not decided yet (a socket before listen or connect)
)

// Stat is the JSON that `osfstat --json` prints.
type Stat struct {
	Processes []StatProc `json:"processes"`
}

// StatProc is one process under osf, as osfstat reports it.
type StatProc struct {
	PID        int          `json:"pid"`
	Program    string       `json:"program"`
	CoreLoaded bool         `json:"core_loaded"`
	CoreLoads  uint64       `json:"core_loads"`
	Disabled   bool         `json:"disabled"`
	Go         *StatGo      `json:"go"`
	Sockets    []StatSocket `json:"sockets"`
}

// StatGo is, for a Go program, whether osf sees its sockets, as osfstat
// reports it.
type StatGo struct {
	Offloaded bool   `json:"offloaded"`
	Detail    string `json:"detail"`
	Reason    string `json:"reason"`
	ReasonID  int    `json:"reason_code"`
}

// StatSocket is one socket osf has seen, as osfstat reports it.
type StatSocket struct {
	FD        int    `json:"fd"`
	Kind      string `json:"kind"`
	Role      string `json:"role"` // client, server, listener or "-"
	Local     string `json:"local,omitempty"`
	Peer      string `json:"peer,omitempty"`
	Transport string `json:"transport"` // one of the Transport* constants
	// Ops is the operations table libosf.so dispatches the socket to:
	// "shm" or "rdma" for an offloaded connection (its transport),
	// "gateway-pending" for a socket waiting for a gateway, "" otherwise.
	Ops string `json:"ops,omitempty"`
	// Gateway and GatewayLeg are set for transport "gateway": the gateway's
	// address and the transport of the stream to it.
	Gateway    string `json:"gateway,omitempty"`
	GatewayLeg string `json:"gateway_leg,omitempty"`
	Reason     string `json:"reason,omitempty"`
	ReasonCode int    `json:"reason_code"`
	Rule       int    `json:"rule"`
	// State is the TCP-like state ("ESTABLISHED", "LISTEN", ...), "-" when
	// unknown.
	State string `json:"state"`
	Hint  string `json:"hint,omitempty"`
	// RecvQ and SendQ are the bytes queued each way; nil when unknown.
	RecvQ *int64 `json:"recv_q,omitempty"`
	SendQ *int64 `json:"send_q,omitempty"`
	// Segment is set for an offloaded connection whose shared segment
	// osfstat could read; SegmentError says why it could not.
	Segment      *StatSegment `json:"segment,omitempty"`
	SegmentError string       `json:"segment_error,omitempty"`
}

// String describes the socket in one line for messages.
func (s StatSocket) String() string {
	str := fmt.Sprintf("fd %d %s %s %s local=%s peer=%s transport=%s ops=%q reason=%q (code %d, rule %d)",
		s.FD, s.Kind, s.Role, s.State, s.Local, s.Peer, s.Transport, s.Ops, s.Reason, s.ReasonCode, s.Rule)
	if s.Segment != nil {
		str += " segment " + s.Segment.String()
	}
	if s.SegmentError != "" {
		str += " segment_error=" + strconv.Quote(s.SegmentError)
	}
	return str
}

// OsfStatAll runs `osfstat --json` and returns every process under osf. It
// fails the test if osfstat fails or prints something else than JSON.
func OsfStatAll(t testing.TB) []StatProc {
	t.Helper()
	return runOsfstat(t).Processes
}

// OsfStat runs `osfstat -p PID --json` and returns what it says about pid.
// It fails the test if osfstat fails (pid not under osf, for one).
func OsfStat(t testing.TB, pid int) StatProc {
	t.Helper()
	s := runOsfstat(t, "-p", strconv.Itoa(pid))
	for _, p := range s.Processes {
		if p.PID == pid {
			return p
		}
	}
	t.Fatalf("testutil: osfstat -p %d --json does not list the process: %+v", pid, s)
	return StatProc{}
}

func runOsfstat(t testing.TB, args ...string) Stat {
	t.Helper()
	c := Cmd(t, nil, Bin(t, "osfstat"), append(args, "--json")...)
	r := c.Run(10 * time.Second)
	if !r.OK() {
		t.Fatalf("testutil: %s: %s", c, r)
	}
	var s Stat
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
		t.Fatalf("testutil: %s: bad JSON (%v): %q", c, err, r.Stdout)
	}
	return s
}

// SocketFilter selects sockets of a StatProc.
type SocketFilter struct {
	desc  string
	match func(StatSocket) bool
}

// String describes the filter.
func (f SocketFilter) String() string { return f.desc }

// Match reports whether s is selected.
func (f SocketFilter) Match(s StatSocket) bool { return f.match(s) }

// AnySocket selects every socket.
var AnySocket = SocketFilter{"any socket", func(StatSocket) bool { return true }}

// ByFD selects the socket at fd.
func ByFD(fd int) SocketFilter {
	return SocketFilter{fmt.Sprintf("fd %d", fd), func(s StatSocket) bool { return s.FD == fd }}
}

// ByRole selects sockets in a role: "client", "server" or "listener".
func ByRole(role string) SocketFilter {
	return SocketFilter{"role " + role, func(s StatSocket) bool { return s.Role == role }}
}

// ByPeer selects sockets connected to peer ("127.0.0.1:8080").
func ByPeer(peer string) SocketFilter {
	return SocketFilter{"peer " + peer, func(s StatSocket) bool { return s.Peer == peer }}
}

// ByLocal selects sockets bound to local ("127.0.0.1:8080").
func ByLocal(local string) SocketFilter {
	return SocketFilter{"local " + local, func(s StatSocket) bool { return s.Local == local }}
}

// Select returns the sockets of p that f selects.
func (p StatProc) Select(f SocketFilter) []StatSocket {
	var out []StatSocket
	for _, s := range p.Sockets {
		if f.Match(s) {
			out = append(out, s)
		}
	}
	return out
}

// AssertTransport asserts, through osfstat, that process pid has at least
// one socket that f selects and that every such socket uses transport want
// (a Transport* constant). It returns the selected sockets. This is how a
// test proves which path a connection really took: a fallback to kernel TCP
// must not pass a test meant for an offloaded transport.
func AssertTransport(t testing.TB, pid int, f SocketFilter, want string) []StatSocket {
	t.Helper()
	// A socket is in the table a moment before osf has decided its
	// transport (listen and connect record the decision after the kernel
	// call, and the first one loads the core): give the decision up to
	// 10 s to appear, a readiness wait that a loaded machine can stretch.
	var p StatProc
	var got []StatSocket
	for deadline := time.Now().Add(10 * time.Second); ; {
		p = OsfStat(t, pid)
		got = p.Select(f)
		decided := len(got) > 0
		for _, s := range got {
			if s.Transport == "" || s.Transport == "-" {
				decided = false
			}
		}
		if decided || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(got) == 0 {
		t.Fatalf("osfstat: process %d (%s) has no socket with %s; sockets:\n%s",
			pid, p.Program, f, socketLines(p.Sockets))
	}
	AssertSocketsTransport(t, fmt.Sprintf("process %d (%s), %s", pid, p.Program, f), got, want)
	return got
}

// AssertSocketsTransport checks sockets taken from one osfstat snapshot
// as AssertTransport does (transport, and the operations table the hooks
// dispatch to); desc names them in failures. For connections that may be
// gone by another look.
func AssertSocketsTransport(t testing.TB, desc string, socks []StatSocket, want string) {
	t.Helper()
	for _, s := range socks {
		if s.Transport != want {
			t.Errorf("osfstat: %s: transport %q, want %q: %s", desc, s.Transport, want, s)
		}
		if o := wantOps(s); o != "?" && s.Ops != o {
			t.Errorf("osfstat: %s: operations %q, want %q (the hooks would dispatch it elsewhere): %s",
				desc, s.Ops, o, s)
		}
	}
}

// wantOps returns the operations table a socket of s's kind and transport
// must be dispatched to, "?" when it depends on more (a gateway's).
func wantOps(s StatSocket) string {
	switch {
	case s.Kind == "shm" && (s.Transport == TransportShm || s.Transport == TransportRDMA):
		return s.Transport
	case s.Transport == TransportKernel || s.Kind == "listen":
		return ""
	}
	return "?"
}

// AssertCoreLoaded asserts that osfstat reports process pid's core as loaded
// (want true) or not loaded (want false).
func AssertCoreLoaded(t testing.TB, pid int, want bool) StatProc {
	t.Helper()
	p := OsfStat(t, pid)
	if p.CoreLoaded != want {
		t.Errorf("osfstat: process %d (%s): core_loaded %v, want %v", pid, p.Program, p.CoreLoaded, want)
	}
	return p
}

func socketLines(ss []StatSocket) string {
	if len(ss) == 0 {
		return "  (none)"
	}
	var b strings.Builder
	for _, s := range ss {
		b.WriteString("  " + s.String() + "\n")
	}
	return b.String()
}
