package rdma

import (
	"fmt"
	"strings"
	"time"
)

// laps times the steps of a connection's set-up or teardown for the debug
// log ("address 3.1ms, mr 12ms, ..."): where a slow handshake spends its
// time. Formatting waits for String (only when the line is logged). A nil
// *laps records nothing.
type laps struct {
	start, last time.Time
	names       []string
	times       []time.Duration
}

func newLaps() *laps {
	now := time.Now()
	return &laps{start: now, last: now}
}

// lap records the time since the previous lap under name.
func (l *laps) lap(name string) {
	if l == nil {
		return
	}
	now := time.Now()
	l.names = append(l.names, name)
	l.times = append(l.times, now.Sub(l.last))
	l.last = now
}

// String is the total and the laps.
func (l *laps) String() string {
	if l == nil {
		return ""
	}
	var b strings.Builder
	for i, n := range l.names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v", n, l.times[i].Round(10*time.Microsecond))
	}
	return fmt.Sprintf("%v (%s)", l.last.Sub(l.start).Round(10*time.Microsecond), b.String())
}
