package rdma

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// How the engine sleeps: hot or cold (docs/ARCHITECTURE.md, "Keeping the
// Go runtime quiet"), how long, and what ended each sleep.

// wakeCounts counts what ended the engine's sleeps: the deadline, the
// kick eventfd (an application's thread left it work, or a call from the
// core), a wake socket (a token from the application), a connection's
// completion channel, anything else (the connection manager). The log
// line of each released connection reports them: with
// OSF_RDMA_RX=caller a message should wake none of them.
type wakeCounts struct {
	sleeps, hot, timeout, kick, wake, channel, other uint64
}

// waitCosts says what the application's waits on s cost (logged with
// the engine's wake-ups when s is released, before its rule retires):
// posts and completions by whom, the application's takes and how many
// found nothing, its sleeps on the channel, the channel's epoll_ctl calls
// and CQ arms, and the process's cgo calls so far.
func (s *stream) waitCosts() string {
	caller, engine, _ := s.tx.counts()
	rxCaller, rxEngine, _ := s.tx.rxCounts()
	takes, empty, ctls, arms := s.tx.waitCounts()
	return fmt.Sprintf("sends posted by the application's threads %d, by the engine %d; completions taken by the application's threads %d, by the engine %d; takes by the application's threads %d (%d empty); sleeps on the channel %d; the channel's epoll_ctl calls %d, CQ arms %d; the process's cgo calls %d",
		caller, engine, rxCaller, rxEngine, takes, empty, s.tx.chanSleeps(), ctls, arms, runtime.NumCgoCall())
}

func (w wakeCounts) String() string {
	return fmt.Sprintf("engine sleeps %d (hot %d), ended by the deadline %d, a kick %d, a wake socket %d, a completion channel %d, another source %d",
		w.sleeps, w.hot, w.timeout, w.kick, w.wake, w.channel, w.other)
}

// Keeping the Go runtime quiet. The engine goroutine lives as long as the
// process and never parks: it runs, makes system calls and cgo calls, and
// sleeps in epoll_wait. To sysmon, the runtime's monitor thread, that
// looks like one goroutine running for ever on the same scheduling tick:
// after forcePreemptNS (10 ms) sysmon preempts it and from then on takes
// its P away at every system call it finds it in, however short (and any
// system call longer than 10 ms anyway), handing the P to an idle thread
// it wakes; each take also resets sysmon to its fastest polling (20 µs).
// Measured with the stand-in and 5 ms between round trips, that was 9-10
// context switches of the runtime's threads per round trip per host, as
// in the emulated guests (docs/RDMA.md). So the engine
//   - is not locked to its thread: a locked goroutine's every rescheduling
//     hands its P to another thread and back (two wake-ups);
//   - yields (runtime.Gosched: a new scheduling tick, for the price of
//     waking an idle thread at most) when it wakes or works yieldEvery or
//     more after its last yield;
//   - while it is hot (below), sleeps at most until yieldBound after its
//     last yield, keeping its P (epollWaitHeld), so that no tick and no
//     sleep lasts 10 ms.
//
// Otherwise (cold) it sleeps as long as nothing is due and gives its P
// up as it goes to sleep (epollWaitBlock): every P idle, sysmon sleeps
// too, and a wake-up costs the engine's thread and a few looks of
// sysmon. Hot pays only while work comes often: a hot engine wakes every
// yieldBound and keeps sysmon looking every 10 ms, and an engine that
// turns hot after a wake-up from idle keeps sysmon polling every 20 µs
// for as long as it stays hot. Measured on this loop's pattern (a
// goroutine sleeping as the engine does, woken at a fixed interval; all
// threads' context switches per wake-up): woken every 50 ms, hot for
// 250 ms after each work 22-25, cold with the P kept in the system call
// until sysmon takes it 56, cold with the P given up 5.4; every 5 ms hot
// 3.0, cold 5.8; every 2 ms 1.9 and 6.0. So it is hot only while its
// last wake-up for work came within hotGap of the work before, and the
// last work within hotGap. Only work it was woken for counts (an event:
// a completion channel, a wake socket, a kick, a command): completions
// it finds when its own bounded sleep ends are the application's
// threads' to take (OSF_RDMA_RX=caller takes them all while a thread
// waits), and counting them kept it waking every yieldBound as long as
// the program ran.
//
// Set-up and teardown keep the engine hot for setUpHot after each of
// their steps, as every piece of its work did before the rule above: a
// command from the core (a dial, a listen, an accept's hand-over) or an
// event of the connection manager or a stand-in listener (watchSetUp).
// The guests' conformance legs (both at once) failed with the rule alone:
// a server whose listen never returned and a client that never saw the
// peer's reset, its engine asleep without a bound each time, in 2 of 3
// runs; some step there still counts on the engine looking again within
// 8 ms.
//
// heldLook bounds a cold sleep while an application's thread holds a
// connection's channel (rx.h sleepers): that connection's completions
// then wait for the thread, and an epoll item keeps the channel between
// the program's waits, however long it computes. One look a heldLook
// takes them, so that the peer's QP, once it used up the receives
// posted here (128), waits on RNR retries for at most that long, and its
// probe behind them is answered well within probeDeadline (else the
// peer would time out a connection whose application is only busy).
const (
	yieldEvery = 6 * time.Millisecond
	yieldBound = 8 * time.Millisecond
	hotGap     = 2 * yieldBound
	heldLook   = time.Second
	setUpHot   = 250 * time.Millisecond
)

// liveEngines counts the engines running in this process (one, but for
// tests): an engine keeps its P in short sleeps only while GOMAXPROCS
// leaves a P for everything else (the core's calls, the fake devices of
// tests, the garbage collector's workers).
var liveEngines atomic.Int32

// chansHeld reports whether an application's thread holds the channel of
// a stream (heldLook).
func (e *Engine) chansHeld() bool {
	for _, s := range e.streams {
		if !s.state.dead() && s.tx.chanHeld() {
			return true
		}
	}
	return false
}

// countWake counts what ended a sleep: each source once per wake-up.
func (e *Engine) countWake(ev []unix.EpollEvent) {
	e.woke.sleeps++
	if len(ev) == 0 {
		e.woke.timeout++
	}
	var kick, wake, channel, other bool
	for i := range ev {
		fd := int(ev[i].Fd)
		switch {
		case fd == e.kick:
			kick = true
		case e.byWake[fd] != nil:
			wake = true
		case e.chans[fd]:
			channel = true
		default:
			other = true
		}
	}
	for _, c := range []struct {
		on bool
		n  *uint64
	}{{kick, &e.woke.kick}, {wake, &e.woke.wake}, {channel, &e.woke.channel}, {other, &e.woke.other}} {
		if c.on {
			*c.n++
		}
	}
}

// sleepMS is how long the engine may sleep: until the next timer or
// closing deadline, else forever.
func (e *Engine) sleepMS() int {
	var next time.Time
	for _, t := range e.timers {
		if next.IsZero() || t.at.Before(next) {
			next = t.at
		}
	}
	for _, d := range e.closing {
		if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	if next.IsZero() {
		return -1
	}
	ms := int(time.Until(next)/time.Millisecond) + 1
	return max(ms, 0)
}

// boundMS is the epoll_wait timeout ms (-1: none) shortened to d, at
// least 1 ms.
func boundMS(ms int, d time.Duration) int {
	b := max(int((d+time.Millisecond-1)/time.Millisecond), 1)
	if ms < 0 || ms > b {
		return b
	}
	return ms
}
