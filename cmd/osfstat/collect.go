package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/osfproject/osf/fdtable"
	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/sdp"
)

// Proc is one process under osf. The JSON field names are stable (doc.go).
type Proc struct {
	PID        int      `json:"pid"`
	Program    string   `json:"program"`
	CoreLoaded bool     `json:"core_loaded"`
	CoreLoads  uint64   `json:"core_loads"`
	Disabled   bool     `json:"disabled"`
	Go         *GoProg  `json:"go,omitempty"`
	Sockets    []Socket `json:"sockets"`
}

// GoProg says, for a Go program, whether osf sees its system calls
// (OSF_GO=1, preload/gosys.c) and, when it does not, why.
type GoProg struct {
	Offloaded bool `json:"offloaded"`
	// Detail is the Go version when offloaded, or what osf did not
	// recognise.
	Detail   string `json:"detail,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Hint     string `json:"hint,omitempty"`
	ReasonID int    `json:"reason_code"`
}

func goProg(r policy.Reason, detail string) *GoProg {
	g := &GoProg{Offloaded: r == policy.ReasonNone, Detail: detail, ReasonID: int(r)}
	if !g.Offloaded {
		g.Reason, g.Hint = r.Describe(0, detail), r.Hint()
	}
	return g
}

// isGoExe reports whether process pid runs a Go program: its executable
// has Go's build-id note, as libosf.so looks for at start-up.
func isGoExe(pid int) bool {
	f, err := elf.Open("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Section(".note.go.buildid") != nil
}

// Socket is one socket osf has seen.
type Socket struct {
	FD        int    `json:"fd"`
	Kind      string `json:"kind"`
	Role      string `json:"role"`
	State     string `json:"state"`
	Local     string `json:"local,omitempty"`
	Peer      string `json:"peer,omitempty"`
	Transport string `json:"transport"`
	// Ops names the operations table libosf.so dispatches the socket to
	// (shm, rdma, gateway-pending); absent: the kernel's.
	Ops string `json:"ops,omitempty"`
	// Gateway is, for transport "gateway", the gateway's address and
	// GatewayLeg the transport of the stream to it.
	Gateway    string `json:"gateway,omitempty"`
	GatewayLeg string `json:"gateway_leg,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Hint       string `json:"hint,omitempty"`
	ReasonID   int    `json:"reason_code"`
	Rule       int    `json:"rule"`
	// RecvQ and SendQ are the bytes queued to be read here and to be read
	// by the peer (ss's Recv-Q and Send-Q): from the rings of an offloaded
	// connection, from the kernel for the others; absent when unknown.
	RecvQ *int64 `json:"recv_q,omitempty"`
	SendQ *int64 `json:"send_q,omitempty"`
	// Segment holds the counters of an offloaded connection, or
	// SegmentError says why they could not be read.
	Segment      *Segment `json:"segment,omitempty"`
	SegmentError string   `json:"segment_error,omitempty"`
}

// Segment is what osfstat read from an offloaded connection's shared
// segment, for this process's side.
type Segment struct {
	Side       int    `json:"side"` // 0 client (connecting) side, 1 server (accepting) side
	RingBytes  uint32 `json:"ring_bytes"`
	PeerPID    int    `json:"peer_pid,omitempty"`
	BytesOut   uint64 `json:"bytes_out"`
	BytesIn    uint64 `json:"bytes_in"`
	TxQueued   int64  `json:"tx_queued"`
	RxQueued   int64  `json:"rx_queued"`
	SendCalls  uint64 `json:"send_calls"`
	RecvCalls  uint64 `json:"recv_calls"`
	Sleeps     uint64 `json:"sleeps"`
	WakesSent  uint64 `json:"wakes_sent"`
	Flags      string `json:"flags"`
	PeerFlags  string `json:"peer_flags"`
	PeerClosed bool   `json:"peer_closed"`
	// Link: an RDMA connection carried as a stream on a link
	// (OSF_RDMA_LINKS), whose writes and completions are the engine's.
	Link      bool     `json:"link,omitempty"`
	Anomalies []string `json:"anomalies,omitempty"`
}

// collector takes one snapshot of the processes under osf. It caches what
// processes share: the kernel's TCP tables, per network namespace.
type collector struct {
	tcp map[string]tcpTable
}

func collect(only int) ([]Proc, error) {
	pids := []int{only}
	if only == 0 {
		var err error
		if pids, err = fdtable.Procs(); err != nil {
			return nil, err
		}
	} else if !fdtable.HasLib(only) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(only)); err != nil {
			return nil, fmt.Errorf("process %d: no such process", only)
		}
		return nil, fmt.Errorf("process %d does not run under osf (libosf.so not mapped)", only)
	}
	c := &collector{tcp: map[string]tcpTable{}}
	procs := make([]Proc, 0, len(pids))
	for _, pid := range pids {
		p, err := c.proc(pid)
		if err != nil {
			if only != 0 {
				return nil, err
			}
			continue // gone, or not ours to read
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// proc reads one process's fd table and the state of its sockets.
func (c *collector) proc(pid int) (Proc, error) {
	p := Proc{PID: pid, Program: comm(pid), Sockets: []Socket{}}
	t, err := fdtable.Open(pid)
	switch {
	case errors.Is(err, fdtable.ErrNoTable):
		// libosf.so makes the table of a Go program it hooks, or was
		// asked to (OSF_GO=1), at start-up: one without is off.
		if isGoExe(pid) {
			p.Go = goProg(policy.ReasonGoOff, "")
		}
		return p, nil
	case err != nil:
		return p, err
	}
	p.CoreLoaded = t.CoreLoaded()
	p.CoreLoads = t.CoreLoads
	p.Disabled = t.Flags&fdtable.HeaderDisabled != 0
	if t.Flags&fdtable.HeaderGo != 0 {
		p.Go = goProg(policy.Reason(t.GoReason), t.GoDetail)
	}
	for _, e := range t.Entries() {
		if !e.Kind.Socket() {
			continue
		}
		s := socket(e)
		switch e.Kind {
		case fdtable.KindShm:
			c.segment(&s, t, e)
		default:
			c.kernel(&s, pid, e)
		}
		p.Sockets = append(p.Sockets, s)
	}
	return p, nil
}

func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// socket describes what the table says about a socket.
func socket(e fdtable.Entry) Socket {
	s := Socket{
		FD:        e.FD,
		Kind:      e.Kind.String(),
		Role:      e.Role.String(),
		State:     stateUnknown.String(),
		Transport: e.Transport.String(),
		Ops:       e.Ops.String(),
		ReasonID:  int(e.Reason),
		Rule:      e.Rule,
	}
	if e.Local.IsValid() {
		s.Local = e.Local.String()
	}
	if e.Peer.IsValid() {
		s.Peer = e.Peer.String()
	}
	if e.Transport == fdtable.TransportKernel {
		detail := ""
		if e.ReasonErrno != 0 {
			detail = e.ReasonErrno.Error()
		}
		r := policy.Reason(e.Reason)
		if r == policy.ReasonStrict && e.Cause != 0 {
			detail = policy.Reason(e.Cause).String()
		}
		s.Reason = r.Describe(e.Rule, detail)
		s.Hint = r.Hint()
	}
	if e.Kind == fdtable.KindListen {
		s.State = stateListen.String()
	}
	if e.Gateway() { // offloaded stream to a gateway
		s.Transport, s.GatewayLeg = tpGateway, e.Transport.String()
	}
	return s
}

// kernel completes a socket that is a kernel TCP socket (a connection on
// kernel TCP, a listener, one not decided yet) from the kernel's TCP table
// of the process's network namespace: state, addresses and queues.
func (c *collector) kernel(s *Socket, pid int, e fdtable.Entry) {
	ino := e.Ino
	if ino == 0 {
		ino = socketInode(pid, e.FD)
	}
	if ino == 0 {
		return
	}
	ns := netnsOf(pid)
	tab, ok := c.tcp[ns]
	if !ok || ns == "" {
		tab = readTCPTable(pid)
		if ns != "" {
			c.tcp[ns] = tab
		}
	}
	row, ok := tab[ino]
	if !ok {
		return
	}
	s.State = row.state.String()
	if s.Local == "" && row.local.IsValid() {
		s.Local = row.local.String()
	}
	if s.Peer == "" && row.remote.IsValid() && row.remote.Port() != 0 {
		s.Peer = row.remote.String()
	}
	s.RecvQ, s.SendQ = ptr(row.recvQ), ptr(row.sendQ)
	switch {
	case e.Transport != fdtable.TransportGateway:
	case e.Role == fdtable.RoleListener: // the table's peer is the gateway
		s.Gateway, s.GatewayLeg, s.Peer = s.Peer, tpKernel, ""
		if e.Kind == fdtable.KindListen { // a gateway of this host delivers over shm
			s.GatewayLeg = fdtable.TransportShm.String()
		}
	case row.remote.IsValid():
		s.Gateway, s.GatewayLeg = row.remote.String(), tpKernel
	}
}

// segment completes an offloaded connection from its shared segment, which
// it reads through the process's hidden fd for it (the entry's aux fd),
// read-only and without locking anything.
func (c *collector) segment(s *Socket, t *fdtable.Table, e fdtable.Entry) {
	var side int
	switch e.Role {
	case fdtable.RoleClient:
		side = sdp.SideClient
	case fdtable.RoleServer:
		side = sdp.SideServer
	default:
		s.SegmentError = "no side: role " + e.Role.String()
		return
	}
	if e.AuxFD < 0 {
		s.SegmentError = "no segment fd recorded"
		return
	}
	var ino uint64
	if h, ok := t.Lookup(e.AuxFD); ok && h.Kind == fdtable.KindHidden {
		ino = h.Ino
	}
	path := "/proc/" + strconv.Itoa(t.PID) + "/fd/" + strconv.Itoa(e.AuxFD)
	hv, err := sdp.PeekSlot(path, e.RingBytes, e.Slot, ino)
	if errors.Is(err, sdp.ErrSegmentGone) {
		// Closed while osfstat read it: closing, not an error.
		s.State = "CLOSING"
		return
	}
	if err != nil {
		s.SegmentError = err.Error()
		return
	}
	s.Segment, s.State = segmentView(&hv, side, e.RingBytes)
	if e.Gateway() { // the gateway is the segment's server, or its client for a delivery
		s.Gateway = hv.Server.String()
		if side == sdp.SideServer {
			s.Gateway = hv.Client.String()
		}
	}
	s.RecvQ, s.SendQ = ptr(s.Segment.RxQueued), ptr(s.Segment.TxQueued)
}

// segmentView turns a segment header into side's counters and state,
// showing impossible values as they are and naming them as anomalies.
func segmentView(hv *sdp.HeaderView, side int, ringBytes uint32) (*Segment, string) {
	me, peer := hv.Side[side], hv.Side[1-side]
	tx, rx := hv.Ring[side], hv.Ring[1-side]
	txUsed, txOK := tx.Used(ringBytes)
	rxUsed, rxOK := rx.Used(ringBytes)
	g := &Segment{
		Side:       side,
		RingBytes:  ringBytes,
		BytesOut:   tx.Head,
		BytesIn:    rx.Tail,
		TxQueued:   txUsed,
		RxQueued:   rxUsed,
		SendCalls:  me.SendCalls,
		RecvCalls:  me.RecvCalls,
		Sleeps:     me.Sleeps,
		WakesSent:  me.WakesSent,
		Flags:      me.Flags.String(),
		PeerFlags:  peer.Flags.String(),
		PeerClosed: peer.CloseSeq != 0 && peer.Holders == 0,
		Link:       hv.Flags&sdp.SegLink != 0,
		Anomalies:  hv.Check(ringBytes),
	}
	if side == sdp.SideClient {
		g.PeerPID = int(hv.ServerPID)
	} else {
		g.PeerPID = int(hv.ClientPID)
	}
	if !txOK {
		g.Anomalies = append(g.Anomalies, fmt.Sprintf("send ring: head %d - tail %d = %d, outside 0..%d",
			tx.Head, tx.Tail, txUsed, ringBytes))
	}
	if !rxOK {
		g.Anomalies = append(g.Anomalies, fmt.Sprintf("receive ring: head %d - tail %d = %d, outside 0..%d",
			rx.Head, rx.Tail, rxUsed, ringBytes))
	}
	st := sideState(me.Flags, peer.Flags, g.PeerClosed, txUsed)
	return g, st.String()
}

func ptr(v int64) *int64 { return &v }
