package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/osfproject/osf/sdp"
)

func TestParseTCPLine(t *testing.T) {
	for _, tc := range []struct {
		line       string
		ino        uint64
		local, rem string
		state      tcpState
		sq, rq     int64
	}{
		{"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0",
			12345, "127.0.0.1:8080", "0.0.0.0:0", stateListen, 0, 3},
		{"   1: 0100007F:9C40 0100007F:1F90 01 0000002A:00000007 00:00000000 00000000     0        0 777 1 0000000000000000 20 4 30 10 -1",
			777, "127.0.0.1:40000", "127.0.0.1:8080", stateEstablished, 42, 7},
		{"   0: 00000000000000000000000001000000:0050 0000000000000000FFFF00000100007F:C350 08 00000000:00000000 00:00000000 00000000  0 0 99 1 0",
			99, "[::1]:80", "[::ffff:127.0.0.1]:50000", stateCloseWait, 0, 0},
	} {
		ino, row, ok := parseTCPLine(tc.line)
		if !ok || ino != tc.ino || row.local.String() != tc.local || row.remote.String() != tc.rem ||
			row.state != tc.state || row.sendQ != tc.sq || row.recvQ != tc.rq {
			t.Errorf("parseTCPLine(%q) = %d, %+v, %v; want inode %d %s %s %s send-q %d recv-q %d",
				tc.line, ino, row, ok, tc.ino, tc.local, tc.rem, tc.state, tc.sq, tc.rq)
		}
	}
	for _, bad := range []string{
		"", "sl local_address rem_address st", "0: 0100007F 00000000:0000 0A 0:0 0 0 0 0 1",
		"0: 0100007F:1F90 00000000:0000 ZZ 00000000:00000000 00:00000000 00000000 0 0 1",
		"0: 0100007:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1",
		"0: 0100007F:1F90 00000000:0000 0A 0000000000000000 00:00000000 00000000 0 0 1",
		"0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 x",
	} {
		if _, _, ok := parseTCPLine(bad); ok {
			t.Errorf("parseTCPLine(%q) accepted", bad)
		}
	}
}

func FuzzParseTCPLine(f *testing.F) {
	f.Add("   0: 0100007F:1F90 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0        0 12345 1")
	f.Add("0: 00000000000000000000000001000000:0050 0000000000000000FFFF00000100007F:C350 08 0:0 0 0 0 0 99")
	f.Fuzz(func(t *testing.T, line string) { parseTCPLine(line) })
}

func TestSideState(t *testing.T) {
	const fin, rst = sdp.SideFIN, sdp.SideReset
	for _, tc := range []struct {
		me, peer   sdp.SideFlags
		peerClosed bool
		unread     int64
		want       string
	}{
		{0, 0, false, 0, "ESTABLISHED"},
		{0, 0, false, 100, "ESTABLISHED"},
		{0, fin, false, 0, "CLOSE_WAIT"},
		{0, 0, true, 0, "CLOSE_WAIT"},
		{fin, 0, false, 0, "FIN_WAIT2"},
		// As kernel TCP reports it (TCP_INFO): both directions shut
		// down, or a reset, is CLOSE.
		{fin, fin, false, 0, "CLOSE"},
		{fin, 0, true, 0, "CLOSE"},
		{0, rst, true, 0, "CLOSE"},
		{0, 0, true, 5, "CLOSE"},
		{fin, rst, true, 0, "CLOSE"},
		// A holder closed with SO_LINGER 0 but another still holds the
		// side: no reset yet.
		{0, rst, false, 0, "ESTABLISHED"},
		{sdp.SideRDShut, 0, false, 0, "ESTABLISHED"},
	} {
		if got := sideState(tc.me, tc.peer, tc.peerClosed, tc.unread).String(); got != tc.want {
			t.Errorf("sideState(%v, %v, closed %v, unread %d) = %s, want %s", tc.me, tc.peer, tc.peerClosed, tc.unread, got, tc.want)
		}
	}
}

func TestSegmentView(t *testing.T) {
	const ring = 4096
	hv := sdp.HeaderView{Magic: sdp.Magic, Version: sdp.Version, HdrBytes: sdp.SizeofHeader, RingBytes: ring,
		ClientPID: 10, ServerPID: 20}
	hv.Ring[0] = sdp.RingView{Head: 5000, Tail: 4000} // client sent 5000, server read 4000
	hv.Ring[1] = sdp.RingView{Head: 300, Tail: 300}
	hv.Side[0] = sdp.SideView{SendCalls: 3, RecvCalls: 4, Sleeps: 1, WakesSent: 2}
	hv.Side[1] = sdp.SideView{Flags: sdp.SideFIN, SendCalls: 1, RecvCalls: 9}

	g, st := segmentView(&hv, sdp.SideClient, ring)
	if g.BytesOut != 5000 || g.BytesIn != 300 || g.TxQueued != 1000 || g.RxQueued != 0 ||
		g.SendCalls != 3 || g.RecvCalls != 4 || g.Sleeps != 1 || g.WakesSent != 2 || g.PeerPID != 20 ||
		g.PeerFlags != "FIN" || g.Flags != "-" || len(g.Anomalies) != 0 || st != "CLOSE_WAIT" {
		t.Errorf("client side: %+v %s", g, st)
	}
	g, st = segmentView(&hv, sdp.SideServer, ring)
	if g.BytesOut != 300 || g.BytesIn != 4000 || g.TxQueued != 0 || g.RxQueued != 1000 ||
		g.RecvCalls != 9 || g.PeerPID != 10 || st != "FIN_WAIT2" {
		t.Errorf("server side: %+v %s", g, st)
	}
	if g.Link {
		t.Error("a connection of its own shown as a stream on a link")
	}
	// A stream on a link (OSF_RDMA_LINKS): the engine's path, shown.
	linked := hv
	linked.Flags = sdp.SegRDMA | sdp.SegLink
	if g, _ = segmentView(&linked, sdp.SideClient, ring); !g.Link {
		t.Errorf("a stream on a link not shown: %+v", g)
	}

	// Whatever a peer writes, it is shown, not trusted.
	bad := hv
	bad.Magic, bad.RingBytes = 0xdead, 1<<30
	bad.Ring[0] = sdp.RingView{Head: 10, Tail: 20}
	bad.Ring[1] = sdp.RingView{Head: 1 << 62, Tail: 0}
	g, _ = segmentView(&bad, sdp.SideClient, ring)
	if g.TxQueued != -10 || g.RxQueued != 1<<62 || len(g.Anomalies) != 4 {
		t.Errorf("impossible values: %+v", g)
	}
	for _, want := range []string{"magic", "ring bytes", "send ring: head 10 - tail 20 = -10", "receive ring"} {
		if !strings.Contains(strings.Join(g.Anomalies, "\n"), want) {
			t.Errorf("anomalies %q do not mention %q", g.Anomalies, want)
		}
	}
}

func TestSummarize(t *testing.T) {
	procs := []Proc{
		{PID: 1, CoreLoaded: true, Sockets: []Socket{
			{Role: "listener", Transport: "shm"},
			{Role: "client", Transport: "shm", Segment: &Segment{BytesOut: 10, BytesIn: 20}},
			{Role: "server", Transport: "shm", Segment: &Segment{BytesOut: 20, BytesIn: 10}},
			{Role: "client", Transport: "kernel"},
			{Role: "-", Transport: "-"},
		}},
		{PID: 2},
	}
	s := summarize(procs)
	if s.Processes != 2 || s.CoreLoaded != 1 || s.Sockets["shm"] != 3 || s.Connections["shm"] != 2 ||
		s.Connections["kernel"] != 1 || s.Sockets["-"] != 1 || s.Bytes["shm"] != (ByteCount{30, 30}) ||
		s.Sockets["rdma"] != 0 {
		t.Errorf("summarize = %+v", s)
	}
	var out bytes.Buffer
	if err := writeJSON(&out, procs, true); err != nil {
		t.Fatal(err)
	}
	var back map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"processes", "core_loaded", "sockets", "connections", "bytes"} {
		if _, ok := back[k]; !ok {
			t.Errorf("summary JSON has no %q: %s", k, out.String())
		}
	}
	out.Reset()
	if err := writeSummary(&out, procs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "shm        3        2            30         30") {
		t.Errorf("summary:\n%s", out.String())
	}
}

func TestTableColumns(t *testing.T) {
	var out bytes.Buffer
	n := int64(7)
	procs := []Proc{{PID: 5, Program: "p", CoreLoaded: true, Sockets: []Socket{
		{FD: 4, Role: "client", State: "ESTABLISHED", Local: "127.0.0.1:1", Peer: "127.0.0.1:2", Transport: "shm",
			RecvQ: &n, SendQ: &n, Segment: &Segment{RingBytes: 4096, BytesOut: 11, BytesIn: 12, SendCalls: 1, RecvCalls: 2, Sleeps: 3, WakesSent: 4}},
		{FD: 6, Role: "client", State: "-", Transport: "kernel", Reason: "no route rule matched"},
	}}, {PID: 6, Program: "q"}}
	if err := writeTable(&out, procs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	header := strings.Fields(lines[0])
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", out.String())
	}
	for i, l := range lines[1:] {
		f := strings.Fields(l)
		if i < 2 && len(f) < len(header) || i == 2 && len(f) != len(header) {
			t.Errorf("line %q has %d fields, header %d", l, len(f), len(header))
		}
	}
	for _, want := range []string{"4096", "11", "12", "1/2", "3/4", "no route rule matched"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table does not show %q:\n%s", want, out.String())
		}
	}
}

func TestSSColumns(t *testing.T) {
	var out bytes.Buffer
	n := int64(7)
	procs := []Proc{{PID: 5, Program: "redis-server", Sockets: []Socket{
		{FD: 3, Role: "listener", State: "LISTEN", Local: "127.0.0.1:6379", Transport: "shm"},
		{FD: 4, Role: "server", State: "ESTABLISHED", Local: "127.0.0.1:6379", Peer: "127.0.0.1:40000", Transport: "shm", RecvQ: &n, SendQ: &n},
		{FD: 6, Role: "client", State: "ESTABLISHED", Local: "127.0.0.1:1", Peer: "127.0.0.1:2", Transport: "kernel"},
		{FD: 7, Role: "client", State: "CLOSE_WAIT", Local: "10.0.0.1:3", Peer: "10.0.0.2:4", Transport: "rdma"},
	}}}
	if err := writeSS(&out, procs); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"State", "Recv-Q", "Send-Q", "Local", "Address:Port", "Peer", "Address:Port", "Process"},
		{"LISTEN", "0", "0", "127.0.0.1:6379", "*:*", `users:(("redis-server",pid=5,fd=3))`, "osf:shm"},
		{"ESTAB", "7", "7", "127.0.0.1:6379", "127.0.0.1:40000", `users:(("redis-server",pid=5,fd=4))`, "osf:shm"},
		{"CLOSE-WAIT", "0", "0", "10.0.0.1:3", "10.0.0.2:4", `users:(("redis-server",pid=5,fd=7))`, "osf:rdma"},
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("ss output (the kernel socket left out):\n%s", out.String())
	}
	for i, l := range lines {
		if f := strings.Fields(l); strings.Join(f, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d: %q, want %q", i, f, want[i])
		}
	}
}

func TestRunArgs(t *testing.T) {
	for _, args := range [][]string{{"-i", "-1"}, {"-i", "NaN"}, {"-i", "0.001"}, {"-p", "-3"}, {"extra"}, {"--bogus"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("osfstat %q: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}

func TestParseHexAddr(t *testing.T) {
	ap, ok := parseHexAddr("0100007F:0050")
	if !ok || ap != netip.MustParseAddrPort("127.0.0.1:80") {
		t.Errorf("parseHexAddr = %v %v", ap, ok)
	}
}
