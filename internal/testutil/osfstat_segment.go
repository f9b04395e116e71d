package testutil

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// StatSegment is what osfstat read from an offloaded connection's shared
// segment, for the side of the process that holds the socket.
type StatSegment struct {
	Side       int      `json:"side"` // 0 client, 1 server
	RingBytes  uint32   `json:"ring_bytes"`
	PeerPID    int      `json:"peer_pid,omitempty"`
	BytesOut   uint64   `json:"bytes_out"`
	BytesIn    uint64   `json:"bytes_in"`
	TxQueued   int64    `json:"tx_queued"`
	RxQueued   int64    `json:"rx_queued"`
	SendCalls  uint64   `json:"send_calls"`
	RecvCalls  uint64   `json:"recv_calls"`
	Sleeps     uint64   `json:"sleeps"`
	WakesSent  uint64   `json:"wakes_sent"`
	Flags      string   `json:"flags"`
	PeerFlags  string   `json:"peer_flags"`
	PeerClosed bool     `json:"peer_closed"`
	Anomalies  []string `json:"anomalies,omitempty"`
}

// String describes the counters in one line for messages.
func (g StatSegment) String() string {
	return fmt.Sprintf("{side %d ring %d peer_pid %d out %d in %d txq %d rxq %d calls %d/%d sleeps %d wakes %d flags %s peer_flags %s peer_closed %v anomalies %q}",
		g.Side, g.RingBytes, g.PeerPID, g.BytesOut, g.BytesIn, g.TxQueued, g.RxQueued, g.SendCalls, g.RecvCalls,
		g.Sleeps, g.WakesSent, g.Flags, g.PeerFlags, g.PeerClosed, g.Anomalies)
}

// StatSummary is the JSON that `osfstat -s --json` prints.
type StatSummary struct {
	Processes   int                      `json:"processes"`
	CoreLoaded  int                      `json:"core_loaded"`
	Sockets     map[string]int           `json:"sockets"`
	Connections map[string]int           `json:"connections"`
	Bytes       map[string]StatByteCount `json:"bytes"`
}

// StatByteCount is bytes out and in over one transport.
type StatByteCount struct {
	Out uint64 `json:"out"`
	In  uint64 `json:"in"`
}

// OsfStatSummary runs `osfstat -s --json` (with extra arguments, such as
// "-p", "PID") and returns the summary. It fails the test if osfstat fails.
func OsfStatSummary(t testing.TB, args ...string) StatSummary {
	t.Helper()
	c := Cmd(t, nil, Bin(t, "osfstat"), append(args, "-s", "--json")...)
	r := c.Run(10 * time.Second)
	if !r.OK() {
		t.Fatalf("testutil: %s: %s", c, r)
	}
	var s StatSummary
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
		t.Fatalf("testutil: %s: bad JSON (%v): %q", c, err, r.Stdout)
	}
	return s
}

// StatSocketAt returns the socket at fd of process pid as osfstat reports
// it, failing the test if osfstat does not list it.
func StatSocketAt(t testing.TB, pid, fd int) StatSocket {
	t.Helper()
	p := OsfStat(t, pid)
	got := p.Select(ByFD(fd))
	if len(got) != 1 {
		t.Fatalf("osfstat: process %d (%s): %d sockets at fd %d; sockets:\n%s", pid, p.Program, len(got), fd, socketLines(p.Sockets))
	}
	return got[0]
}
