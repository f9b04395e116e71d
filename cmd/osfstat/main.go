package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/osfproject/osf/fdtable"
	"github.com/osfproject/osf/internal/policy"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	pid      int
	json     bool
	summary  bool
	interval float64
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("osfstat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.pid, "p", 0, "show only process `PID`")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.BoolVar(&o.summary, "s", false, "print a summary per transport")
	fs.Float64Var(&o.interval, "i", 0, "refresh every `SECONDS`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for {
		snap, err := collect(o.pid)
		if err != nil {
			fmt.Fprintf(stderr, "osfstat: %v\n", err)
			return 1
		}
		switch {
		case o.json:
			err = writeJSON(stdout, snap, o.summary)
		case o.summary:
			err = writeSummary(stdout, snap)
		default:
			err = writeTable(stdout, snap)
		}
		if err != nil {
			fmt.Fprintf(stderr, "osfstat: %v\n", err)
			return 1
		}
		if o.interval <= 0 {
			return 0
		}
		time.Sleep(time.Duration(o.interval * float64(time.Second)))
		fmt.Fprintln(stdout)
	}
}

// Proc is one process under osf.
type Proc struct {
	PID        int      `json:"pid"`
	Program    string   `json:"program"`
	CoreLoaded bool     `json:"core_loaded"`
	Sockets    []Socket `json:"sockets"`
}

// Socket is one socket osf has seen.
type Socket struct {
	FD        int    `json:"fd"`
	Kind      string `json:"kind"`
	Role      string `json:"role"`
	Local     string `json:"local,omitempty"`
	Peer      string `json:"peer,omitempty"`
	Transport string `json:"transport"`
	Reason    string `json:"reason,omitempty"`
	ReasonID  int    `json:"reason_code"`
	Rule      int    `json:"rule"`
}

func collect(only int) ([]Proc, error) {
	pids := []int{only}
	if only == 0 {
		var err error
		if pids, err = fdtable.Procs(); err != nil {
			return nil, err
		}
	} else if !fdtable.HasLib(only) {
		return nil, fmt.Errorf("process %d does not run under osf (libosf.so not mapped)", only)
	}
	procs := make([]Proc, 0, len(pids))
	for _, pid := range pids {
		p := Proc{PID: pid, Program: comm(pid), Sockets: []Socket{}}
		t, err := fdtable.Open(pid)
		switch {
		case errors.Is(err, fdtable.ErrNoTable):
		case err != nil:
			if only != 0 {
				return nil, err
			}
			continue // gone, or not ours to read
		default:
			p.CoreLoaded = t.CoreLoaded()
			p.Sockets = sockets(t)
		}
		procs = append(procs, p)
	}
	return procs, nil
}

func comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func sockets(t *fdtable.Table) []Socket {
	var out []Socket
	for _, e := range t.Entries() {
		if !e.Kind.Socket() {
			continue
		}
		s := Socket{
			FD:        e.FD,
			Kind:      e.Kind.String(),
			Role:      e.Role.String(),
			Transport: e.Transport.String(),
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
			s.Reason = policy.Reason(e.Reason).Describe(e.Rule, detail)
		}
		out = append(out, s)
	}
	return out
}

func writeTable(w io.Writer, procs []Proc) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tPROGRAM\tCORE\tFD\tROLE\tLOCAL\tPEER\tTRANSPORT\tREASON")
	for _, p := range procs {
		core := "-"
		if p.CoreLoaded {
			core = "loaded"
		}
		if len(p.Sockets) == 0 {
			fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t-\t-\t-\t-\n", p.PID, p.Program, core)
		}
		for _, s := range p.Sockets {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.PID, p.Program, core,
				s.FD, s.Role, dash(s.Local), dash(s.Peer), s.Transport, dash(s.Reason))
		}
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Summary counts sockets per transport.
type Summary struct {
	Processes  int            `json:"processes"`
	CoreLoaded int            `json:"core_loaded"`
	Sockets    map[string]int `json:"sockets"`
}

func summarize(procs []Proc) Summary {
	s := Summary{Processes: len(procs), Sockets: map[string]int{}}
	for _, p := range procs {
		if p.CoreLoaded {
			s.CoreLoaded++
		}
		for _, k := range p.Sockets {
			s.Sockets[k.Transport]++
		}
	}
	return s
}

func writeSummary(w io.Writer, procs []Proc) error {
	s := summarize(procs)
	_, err := fmt.Fprintf(w, "processes %d (core loaded in %d)\nsockets: shm %d, rdma %d, kernel %d, undecided %d\n",
		s.Processes, s.CoreLoaded, s.Sockets["shm"], s.Sockets["rdma"], s.Sockets["kernel"], s.Sockets["-"])
	return err
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
