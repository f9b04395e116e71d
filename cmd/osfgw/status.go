package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// printStatus prints the relayed connections of the gateway on listen, or
// of every gateway in this network namespace when listen is "". It returns
// the exit status: 1 when no gateway answered.
func printStatus(w io.Writer, listen string, asJSON bool) int {
	names := []string{statusName(listen)}
	if listen == "" {
		names = statusSockets()
	}
	var docs []statusDoc
	for _, name := range names {
		doc, err := queryStatus(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "osfgw: status of %s: %v\n", strings.TrimPrefix(name, "@osfgw/status/"), err)
			continue
		}
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		fmt.Fprintln(os.Stderr, "osfgw: no gateway is running in this network namespace")
		return 1
	}
	if asJSON {
		json.NewEncoder(w).Encode(map[string]any{"gateways": docs})
		return 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GATEWAY\tPID\tNODE\tLEG\tDESTINATION\tLOCAL\tSTATE\tTO-DEST\tTO-NODE\tAGE")
	for _, d := range docs {
		sort.Slice(d.Connections, func(i, j int) bool { return d.Connections[i].Seconds > d.Connections[j].Seconds })
		for _, c := range d.Connections {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", d.Gateway, d.PID, c.Node, dash(c.Leg), c.Dest, dash(c.Local), c.State,
				c.ToDest, c.ToNode, time.Duration(c.Seconds*float64(time.Second)).Round(time.Millisecond).String())
		}
	}
	tw.Flush()
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func queryStatus(name string) (statusDoc, error) {
	var doc statusDoc
	c, err := net.DialTimeout("unix", name, 2*time.Second)
	if err != nil {
		return doc, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	err = json.NewDecoder(c).Decode(&doc)
	return doc, err
}

// statusSockets lists the status sockets of the gateways in this network
// namespace, from /proc/net/unix.
func statusSockets() []string {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || !strings.HasPrefix(fields[7], "@osfgw/status/") {
			continue
		}
		// Listening sockets only (state 01 unconnected, flags 00010000).
		if fields[3] != "00010000" {
			continue
		}
		names = append(names, fields[7])
	}
	sort.Strings(names)
	return names
}
