package rdma

import (
	"fmt"
	"strings"
	"time"
)

// laps times the steps of a connection's set-up or teardown for the debug
// log ("address 3.1ms, mr 12ms, ..."): where a slow handshake spends its
// time. A nil *laps records nothing.
type laps struct {
	start, last time.Time
	b           strings.Builder
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
	if l.b.Len() > 0 {
		l.b.WriteString(", ")
	}
	fmt.Fprintf(&l.b, "%s %v", name, now.Sub(l.last).Round(10*time.Microsecond))
	l.last = now
}

// String is the total and the laps.
func (l *laps) String() string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf("%v (%s)", time.Since(l.start).Round(10*time.Microsecond), l.b.String())
}
