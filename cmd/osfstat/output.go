package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// tableHeader names the columns of the default output (doc.go).
const tableHeader = "PID\tPROGRAM\tCORE\tFD\tROLE\tSTATE\tLOCAL\tPEER\tTRANSPORT\tRECV-Q\tSEND-Q\tRING\tOUT\tIN\tCALLS(S/R)\tSLEEPS/WAKES\tREASON"

func writeTable(w io.Writer, procs []Proc) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, tableHeader)
	for _, p := range procs {
		core := "-"
		if p.CoreLoaded {
			core = "loaded"
		}
		if p.Disabled {
			core += ",disabled"
		}
		procNote := "-"
		if p.Go != nil {
			g := "go"
			if !p.Go.Offloaded {
				g += "(kernel)"
				procNote = p.Go.Reason
			}
			if core == "-" {
				core = g
			} else {
				core += "," + g
			}
		}
		if len(p.Sockets) == 0 {
			fmt.Fprintf(tw, "%d\t%s\t%s%s\t%s\n", p.PID, p.Program, core, strings.Repeat("\t-", 13), procNote)
		}
		for _, s := range p.Sockets {
			ring, out, in, calls, sleeps := "-", "-", "-", "-", "-"
			note := s.Reason
			if s.Gateway != "" {
				note = "via " + s.Gateway + " (leg " + s.GatewayLeg + ")"
			}
			if g := s.Segment; g != nil {
				ring = strconv.FormatUint(uint64(g.RingBytes), 10)
				out = strconv.FormatUint(g.BytesOut, 10)
				in = strconv.FormatUint(g.BytesIn, 10)
				calls = fmt.Sprintf("%d/%d", g.SendCalls, g.RecvCalls)
				sleeps = fmt.Sprintf("%d/%d", g.Sleeps, g.WakesSent)
				if len(g.Anomalies) > 0 {
					note = "anomaly: " + strings.Join(g.Anomalies, "; ")
				}
			}
			if s.SegmentError != "" {
				note = "segment unreadable: " + s.SegmentError
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				p.PID, p.Program, core, s.FD, s.Role, s.State, dash(s.Local), dash(s.Peer), s.Transport,
				num(s.RecvQ), num(s.SendQ), ring, out, in, calls, sleeps, dash(note))
		}
	}
	return tw.Flush()
}

// ssStates are TCP's state names as ss(8) abbreviates them.
var ssStates = map[string]string{
	"ESTABLISHED": "ESTAB", "SYN_SENT": "SYN-SENT", "SYN_RECV": "SYN-RECV",
	"FIN_WAIT1": "FIN-WAIT-1", "FIN_WAIT2": "FIN-WAIT-2", "TIME_WAIT": "TIME-WAIT",
	"CLOSE": "UNCONN", "CLOSE_WAIT": "CLOSE-WAIT", "LAST_ACK": "LAST-ACK",
	"LISTEN": "LISTEN", "CLOSING": "CLOSING",
}

// writeSS prints the sockets osf carries (shm, rdma, gateway: those `ss`
// cannot see) in the columns of `ss -tanp`, with the transport after the
// process: operators' scripts that read ss's output can read these too.
func writeSS(w io.Writer, procs []Proc) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintln(tw, "State\tRecv-Q\tSend-Q\tLocal Address:Port\tPeer Address:Port\tProcess")
	for _, p := range procs {
		for _, s := range p.Sockets {
			if s.Transport != tpShm && s.Transport != tpRDMA && s.Transport != tpGateway {
				continue
			}
			st, ok := ssStates[s.State]
			if !ok {
				st = "UNKNOWN"
			}
			peer := s.Peer
			if peer == "" {
				peer = "*:*"
			}
			local := s.Local
			if local == "" {
				local = "*:*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\tusers:((%q,pid=%d,fd=%d)) osf:%s\n",
				st, zero(s.RecvQ), zero(s.SendQ), local, peer, p.Program, p.PID, s.FD, s.Transport)
		}
	}
	return tw.Flush()
}

func zero(v *int64) string {
	if v == nil {
		return "0"
	}
	return strconv.FormatInt(*v, 10)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

// Summary counts sockets, connections and bytes per transport. The JSON
// field names are stable (doc.go).
type Summary struct {
	Processes   int                  `json:"processes"`
	CoreLoaded  int                  `json:"core_loaded"`
	Sockets     map[string]int       `json:"sockets"`
	Connections map[string]int       `json:"connections"`
	Bytes       map[string]ByteCount `json:"bytes"`
}

// ByteCount is the bytes sent and received over one transport, summed over
// the offloaded connections' segment counters.
type ByteCount struct {
	Out uint64 `json:"out"`
	In  uint64 `json:"in"`
}

// Transport names as osfstat prints them.
const (
	tpShm       = "shm"
	tpRDMA      = "rdma"
	tpKernel    = "kernel"
	tpGateway   = "gateway"
	tpUndecided = "-"
)

func summarize(procs []Proc) Summary {
	s := Summary{
		Processes:   len(procs),
		Sockets:     map[string]int{tpShm: 0, tpRDMA: 0, tpKernel: 0, tpGateway: 0, tpUndecided: 0},
		Connections: map[string]int{tpShm: 0, tpRDMA: 0, tpKernel: 0, tpGateway: 0},
		Bytes:       map[string]ByteCount{tpShm: {}, tpRDMA: {}},
	}
	for _, p := range procs {
		if p.CoreLoaded {
			s.CoreLoaded++
		}
		for _, k := range p.Sockets {
			s.Sockets[k.Transport]++
			if k.Role == "client" || k.Role == "server" {
				s.Connections[k.Transport]++
			}
			if g := k.Segment; g != nil {
				b := s.Bytes[k.Transport]
				b.Out += g.BytesOut
				b.In += g.BytesIn
				s.Bytes[k.Transport] = b
			}
		}
	}
	return s
}

func writeSummary(w io.Writer, procs []Proc) error {
	s := summarize(procs)
	fmt.Fprintf(w, "processes %d (core loaded in %d)\n", s.Processes, s.CoreLoaded)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSPORT\tSOCKETS\tCONNECTIONS\tBYTES-OUT\tBYTES-IN")
	for _, tp := range []string{tpShm, tpRDMA, tpKernel} {
		out, in := "-", "-" // osf does not count kernel TCP's bytes
		if b, ok := s.Bytes[tp]; ok {
			out, in = strconv.FormatUint(b.Out, 10), strconv.FormatUint(b.In, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", tp, s.Sockets[tp], s.Connections[tp], out, in)
	}
	fmt.Fprintf(tw, "undecided\t%d\t-\t-\t-\n", s.Sockets[tpUndecided])
	return tw.Flush()
}

func writeJSON(w io.Writer, procs []Proc, summary bool) error {
	enc := json.NewEncoder(w)
	if summary {
		return enc.Encode(summarize(procs))
	}
	return enc.Encode(struct {
		Processes []Proc `json:"processes"`
	}{procs})
}
