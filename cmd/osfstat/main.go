package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	pid      int
	json     bool
	summary  bool
	ss       bool
	interval float64
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("osfstat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.pid, "p", 0, "show only process `PID`")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.BoolVar(&o.summary, "s", false, "print a summary per transport")
	fs.BoolVar(&o.ss, "ss", false, "print the offloaded sockets as `ss -tanp` prints TCP sockets")
	fs.BoolVar(&o.ss, "t", false, "the same as --ss")
	fs.Float64Var(&o.interval, "i", 0, "refresh every `SECONDS` until interrupted")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "osfstat: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if o.pid < 0 {
		fmt.Fprintf(stderr, "osfstat: -p %d: want a process id\n", o.pid)
		return 2
	}
	if math.IsNaN(o.interval) || math.IsInf(o.interval, 0) || o.interval < 0 ||
		(o.interval > 0 && o.interval < 0.01) {
		fmt.Fprintf(stderr, "osfstat: -i %v: want 0 (once) or at least 0.01 seconds\n", o.interval)
		return 2
	}
	ctx := context.Background()
	if o.interval > 0 {
		// Refreshing: SIGINT and SIGTERM end the loop between two
		// reports, so the last report is never cut in the middle.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, unix.SIGINT, unix.SIGTERM)
		defer stop()
	}
	tick := time.Duration(o.interval * float64(time.Second))
	for {
		if err := report(stdout, o); err != nil {
			fmt.Fprintf(stderr, "osfstat: %v\n", err)
			return 1
		}
		if o.interval <= 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(tick):
		}
		if !o.json {
			fmt.Fprintln(stdout)
		}
	}
}

// report collects one snapshot and prints it as o says.
func report(w io.Writer, o options) error {
	snap, err := collect(o.pid)
	if err != nil {
		return err
	}
	switch {
	case o.json:
		return writeJSON(w, snap, o.summary)
	case o.summary:
		return writeSummary(w, snap)
	case o.ss:
		return writeSS(w, snap)
	}
	return writeTable(w, snap)
}
