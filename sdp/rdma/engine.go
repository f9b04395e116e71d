package rdma

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// ErrStopped is returned for work handed to an engine that has stopped.
var ErrStopped = errors.New("rdma: engine stopped")

// closeDeadline bounds how long a stream whose link is being taken down
// waits for the link to report it (flush completions or the connection
// manager's DISCONNECTED) before it is released anyway.
const closeDeadline = 5 * time.Second

// EngineConfig configures an Engine.
type EngineConfig struct {
	// HiddenBase is the first fd number of osf's hidden range: the engine
	// moves the fds it creates there, so the program's fd numbering is
	// unchanged. 0 leaves them where the kernel puts them.
	HiddenBase int
	// PollSpin is how long the engine keeps polling after its last piece
	// of work before it arms its wake-ups and sleeps.
	PollSpin time.Duration
	// Logf logs (the core's debug logger); nil discards.
	Logf func(format string, a ...any)
}

// Engine is the progress engine of one process: a goroutine, locked to
// its own OS thread, that moves every RDMA stream of the process. It polls
// actively for PollSpin after its last piece of work, then arms every
// wake-up source (completion channels, the streams' wake sockets with the
// want flags up in their segments, the connection manager's channel, its
// command eventfd) and sleeps in epoll_wait.
//
// Other goroutines hand it work with Do; everything else runs on the
// engine goroutine.
type Engine struct {
	cfg  EngineConfig
	epfd int
	kick int // eventfd: commands are waiting

	mu      sync.Mutex
	cmds    []func()
	hotCmds int // of cmds, those that keep the engine hot (post, not postCool)
	stopped bool
	done    chan struct{}

	// Engine goroutine only.
	nextID   uint32
	pending  map[uint32]bool
	streams  map[uint32]*stream
	byWake   map[int]*stream
	sources  map[int]func()
	chans    map[int]bool          // the sources that are completion channels (woke)
	setUpSrc map[int]bool          // the sources of set-up and teardown events (watchSetUp)
	closing  map[*stream]time.Time // streams taking their link down, and their deadline
	timers   []timer
	wc       []verbs.WC
	free     chan func()            // background's queue, nil until first used
	freed    chan struct{}          // closed when its goroutine has finished
	onIdle   []func()               // run once per loop iteration before sleeping (tests)
	onSleep  func(ms int, hot bool) // each sleep's epoll_wait timeout (tests)
	yields   int                    // runtime.Gosched calls (tests)
	hotGap   time.Duration          // hotGap (tests may change it)
	setUpTo  time.Time              // hot until then: set-up work (setUpHot)
	holdP    bool                   // short sleeps keep the P: a P is left for the rest
	sleptAt  time.Time              // the last sleep's start (watch.go)
	sleptFor time.Duration          // and length
	woke     wakeCounts             // what ended its sleeps (logged at each release)
	looks    looksWord              // 1 while a sleep is bounded by heldLook (rx.h eng_looks)

	// At exit (exit.go): the process's exit(3) waits for the streams.
	exitArmed bool
	exiting   bool
	lastOpen  int
}

type timer struct {
	at time.Time
	f  func()
}

// NewEngine creates an engine and starts its goroutine.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	e := &Engine{
		cfg:      cfg,
		epfd:     -1,
		kick:     -1,
		done:     make(chan struct{}),
		nextID:   1,
		pending:  map[uint32]bool{},
		streams:  map[uint32]*stream{},
		byWake:   map[int]*stream{},
		sources:  map[int]func(){},
		chans:    map[int]bool{},
		setUpSrc: map[int]bool{},
		closing:  map[*stream]time.Time{},
		wc:       make([]verbs.WC, 32),
		hotGap:   hotGap,
		looks:    newLooksWord(),
	}
	var err error
	if e.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("rdma: epoll_create: %w", err)
	}
	e.epfd = e.hide(e.epfd)
	if e.kick, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		unix.Close(e.epfd)
		return nil, fmt.Errorf("rdma: eventfd: %w", err)
	}
	e.kick = e.hide(e.kick)
	if err := e.epollAdd(e.kick); err != nil {
		unix.Close(e.kick)
		unix.Close(e.epfd)
		return nil, err
	}
	e.sources[e.kick] = e.drainKick
	if watchEvery > 0 {
		e.after(watchEvery, e.watchdog)
	}
	go e.loop()
	return e, nil
}

// hide moves fd into the hidden range (close-on-exec); on failure it
// stays where it is.
func (e *Engine) hide(fd int) int {
	return hideFD(fd, e.cfg.HiddenBase)
}

func hideFD(fd, base int) int {
	if base <= 0 || fd >= base {
		return fd
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, base)
	if err != nil {
		return fd
	}
	unix.Close(fd)
	return nfd
}

func (e *Engine) epollAdd(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
	if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("rdma: epoll add %d: %w", fd, err)
	}
	return nil
}

// Do runs f on the engine goroutine and waits until it returned. It fails
// with ErrStopped if the engine has stopped.
func (e *Engine) Do(f func()) error {
	ch := make(chan struct{})
	if err := e.post(func() { f(); close(ch) }); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-e.done:
		return ErrStopped
	}
}

// post queues f for the engine goroutine without waiting: a step of
// set-up or teardown, which keeps the engine hot for setUpHot.
func (e *Engine) post(f func()) error { return e.queue(f, true) }

// postCool is post for a command that leaves the engine's pace alone: a
// stream-open on a link, whose answer is a message on the link's channel
// (an engine hot for setUpHot after each dial of a steady client woke
// every yieldBound for as long as it dialed, and kept sysmon polling).
func (e *Engine) postCool(f func()) error { return e.queue(f, false) }

func (e *Engine) queue(f func(), hot bool) error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return ErrStopped
	}
	e.cmds = append(e.cmds, f)
	if hot {
		e.hotCmds++
	}
	e.mu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(e.kick, one[:])
	return nil
}

func (e *Engine) drainKick() {
	var b [8]byte
	_, _ = unix.Read(e.kick, b[:])
}

// Stop stops the engine: every stream is reset and released. It waits for
// the goroutine to finish.
func (e *Engine) Stop() {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		<-e.done
		return
	}
	e.stopped = true
	e.mu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(e.kick, one[:])
	<-e.done
}

// watch registers fd with a handler run (on the engine goroutine) when it
// is readable. Engine goroutine only.
func (e *Engine) watch(fd int, f func()) error {
	if err := e.epollAdd(fd); err != nil {
		return err
	}
	e.sources[fd] = f
	return nil
}

// watchSetUp is watch for a source of set-up and teardown events (the
// connection manager's channel, a stand-in listener): each of its events
// keeps the engine hot for setUpHot. Engine goroutine only.
func (e *Engine) watchSetUp(fd int, f func()) error {
	if err := e.watch(fd, f); err != nil {
		return err
	}
	e.setUpSrc[fd] = true
	return nil
}

// unwatch removes fd from the engine's epoll set. Engine goroutine only.
func (e *Engine) unwatch(fd int) {
	_ = unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	delete(e.sources, fd)
	delete(e.setUpSrc, fd)
}

// after runs f on the engine goroutine at or after d from now. Engine
// goroutine only.
func (e *Engine) after(d time.Duration, f func()) {
	e.timers = append(e.timers, timer{at: time.Now().Add(d), f: f})
}

// addStream starts mirroring seg (the engine's mapping; the stream owns it
// from now on) over link as connection id, a number allocID reserved
// (addStream consumes it, also on error); wake and wakeTx are the engine's
// ends of the application's wake socket and writers' wake socket (the
// stream owns them too). Engine goroutine only.
func (e *Engine) addStream(id uint32, seg *sdp.Segment, side int, link Link, wake, wakeTx int) (*stream, error) {
	s, err := newStream(id, seg, side, link, wake, wakeTx, e.cfg.Logf)
	if err != nil {
		e.abandon(id)
		return nil, err
	}
	if err := e.register(s); err != nil {
		return nil, err
	}
	return s, nil
}

// allocID reserves a connection number for a stream that register will
// add (or abandon will give back). Take it before the application can
// learn of the connection (the hello to the companion, the return of a
// dial): from now on the process's exit(3) waits for it (exit.go).
// Engine goroutine only.
func (e *Engine) allocID() uint32 {
	id := e.nextID
	for id == 0 || e.streams[id] != nil || e.pending[id] {
		id = (id + 1) & verbs.MaxWRIDConn
	}
	e.nextID = (id + 1) & verbs.MaxWRIDConn
	e.pending[id] = true
	e.publishOpen()
	return id
}

// abandon gives back a number allocID reserved for a stream that was never
// registered. Engine goroutine only.
func (e *Engine) abandon(id uint32) {
	delete(e.pending, id)
	e.publishOpen()
}

// register makes the engine move s from now on. Engine goroutine only.
func (e *Engine) register(s *stream) error {
	delete(e.pending, s.id)
	if err := e.epollAdd(s.wake); err != nil {
		e.publishOpen()
		return err
	}
	if err := e.epollAdd(s.wakeTx); err != nil {
		_ = unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, s.wake, nil)
		e.publishOpen()
		return err
	}
	for _, fd := range []int{s.wake, s.wakeTx} {
		forkCloseAdd(fd)
		e.byWake[fd] = s
	}
	s.closeFD = e.closeWake
	s.tx.setKick(e.kick, e.looks)
	e.streams[s.id] = s
	s.enableCallers()
	return nil
}

// closeWake closes one of a stream's wake socket ends and forgets it.
func (e *Engine) closeWake(fd int) {
	_ = unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	delete(e.byWake, fd)
	forkCloseDel(fd)
	unix.Close(fd)
}

// loop is the engine goroutine.
func (e *Engine) loop() {
	liveEngines.Add(1)
	defer liveEngines.Add(-1)
	defer close(e.done)
	events := make([]unix.EpollEvent, 64)
	lastWork := time.Now()
	lastActive, lastYield := lastWork, lastWork // lastActive: its last work for an event
	woke := true                                // awake for an event (not its own deadline) since it last slept
	e.setUpTo = lastWork.Add(setUpHot)
	var gap time.Duration // from the work before its latest wake-up for an event to it
	for {
		if e.runCommands() {
			e.shutdown()
			return
		}
		worked := e.dispatch(events, 0)
		woke = woke || worked
		for _, s := range e.streams {
			if e.service(s) {
				worked = true
			}
		}
		e.runTimers()
		e.reap()
		if e.exitArmed {
			e.atExit()
		}
		now := time.Now()
		if now.Sub(lastYield) >= yieldEvery {
			runtime.Gosched()
			lastYield = now
			e.yields++
			e.holdP = runtime.GOMAXPROCS(0) > int(liveEngines.Load())
		}
		if worked {
			if now.Sub(lastWork) > e.cfg.PollSpin {
				// Waking from sleep: stop asking the application for
				// tokens while polling.
				for _, s := range e.streams {
					s.quiet()
				}
			}
			lastWork = now
			if woke {
				lastActive = now
			}
			continue
		}
		if now.Sub(lastWork) < e.cfg.PollSpin {
			continue
		}
		for _, f := range e.onIdle {
			f()
		}
		if e.arm() {
			lastWork = time.Now()
			continue
		}
		ms := e.sleepMS()
		now = time.Now()
		hot := gap < e.hotGap && now.Sub(lastActive) < e.hotGap || now.Before(e.setUpTo)
		if hot {
			ms = boundMS(ms, lastYield.Add(yieldBound).Sub(now))
			e.woke.hot++
		} else if e.chansHeld() {
			ms = boundMS(ms, heldLook)
		}
		if len(e.closing) > 0 {
			// A closing stream waits for completions (CLOSE's, the
			// peer's) whose events an application's thread may hold:
			// an epoll item stays armed on its channel between waits,
			// and at exit(3) nobody waits any more.
			ms = boundMS(ms, yieldBound)
		}
		if e.onSleep != nil {
			e.onSleep(ms, hot)
		}
		e.sleptAt = time.Now()
		// Writers about to sleep for room kick it only while it might
		// not look within heldLook (conn_rdma.c osf_conn_rdma_blocked).
		e.looks.set(ms >= 0 && ms <= int(heldLook/time.Millisecond))
		woke = e.dispatch(events, ms)
		e.looks.set(false)
		e.sleptFor = time.Since(e.sleptAt)
		if woke {
			gap = time.Since(lastActive)
		}
		lastWork = time.Time{} // asleep until now: quiet the streams once
	}
}

// armExit makes the process's exit(3) wait (bounded) until every stream
// of this engine is closed: one engine per process. Engine goroutine only.
func (e *Engine) armExit() {
	exitHook(e.kick)
	e.exitArmed = true
	e.lastOpen = -1 // publish even 0: the word may hold a stopped engine's count
	e.publishOpen()
}

// atExit, once the process is exiting, closes every stream as the kernel
// closes a dying process's sockets: what was written is still sent, then
// CLOSE (or a reset when received bytes were never read); a stream set up
// after the exit began is closed as soon as it is registered. Then it
// publishes how many are still open for the exit handler.
func (e *Engine) atExit() {
	if !e.exiting && exitRequested() {
		e.exiting = true
	}
	if e.exiting {
		for _, s := range e.streams {
			s.onLocalEOF()
		}
	}
	e.publishOpen()
}

// publishOpen tells the exit handler how many connections it waits for:
// numbers reserved for connections being set up, and streams whose peer
// may still miss something (not settled). The count must never be lower
// than what the application can know of: the exit handler returns at once
// when it reads 0. So it is published as soon as it grows (allocID: before
// the application can see the connection or a byte of it), and when it
// shrinks at the end of each pass of the loop. Engine goroutine only.
func (e *Engine) publishOpen() {
	if !e.exitArmed {
		return
	}
	open := len(e.pending)
	for _, s := range e.streams {
		if !s.settled() {
			open++
		}
	}
	if open != e.lastOpen {
		e.lastOpen = open
		exitOpen(open)
	}
}

// background runs f on a goroutine of its own, in order: work on device
// resources that the engine's thread need not wait for. Freeing a released
// stream's QP, id, MR and mapping took the engine 10-50 ms per connection
// in an emulated guest, time in which it could have set up the next
// connection; registering a spare connection's memory as long (spare.go).
// With a backlog it runs f at once. Engine goroutine only.
func (e *Engine) background(f func()) {
	if e.free == nil {
		e.free = make(chan func(), 256)
		e.freed = make(chan struct{})
		go func(q chan func(), done chan struct{}) {
			defer close(done)
			for f := range q {
				f()
			}
		}(e.free, e.freed)
	}
	select {
	case e.free <- f:
	default:
		f()
	}
}

// hotForSetUp keeps the engine hot for setUpHot from now: a step of set-up
// or teardown. Engine goroutine only.
func (e *Engine) hotForSetUp() { e.setUpTo = time.Now().Add(setUpHot) }

// runCommands runs queued commands (set-up: hot for setUpHot from now,
// unless each says otherwise: postCool); it reports whether the engine
// stops.
func (e *Engine) runCommands() bool {
	e.mu.Lock()
	cmds, hot := e.cmds, e.hotCmds
	e.cmds, e.hotCmds = nil, 0
	stopped := e.stopped
	e.mu.Unlock()
	if hot > 0 {
		e.setUpTo = time.Now().Add(setUpHot)
	}
	for _, f := range cmds {
		f()
	}
	return stopped
}

// dispatch waits up to ms (0: does not wait) for events and handles them;
// it reports whether any arrived.
func (e *Engine) dispatch(events []unix.EpollEvent, ms int) bool {
	var n int
	var err error
	short := ms >= 0 && ms <= int(yieldBound/time.Millisecond)
	switch {
	case ms == 0 || short && e.holdP:
		n, err = epollWaitHeld(e.epfd, events, ms)
	case short:
		n, err = unix.EpollWait(e.epfd, events, ms)
	default:
		n, err = epollWaitBlock(e.epfd, events, ms)
	}
	if err != nil {
		return false // EINTR
	}
	if ms != 0 {
		e.countWake(events[:n])
	}
	for i := 0; i < n; i++ {
		fd := int(events[i].Fd)
		if s := e.byWake[fd]; s != nil {
			s.drainWake() // both of its sockets
			continue
		}
		if f := e.sources[fd]; f != nil {
			if e.setUpSrc[fd] {
				e.setUpTo = time.Now().Add(setUpHot)
			}
			f()
		}
	}
	return n > 0
}

// service polls one stream's completions and pumps it; it reports whether
// anything happened.
func (e *Engine) service(s *stream) bool {
	if s.state.dead() {
		return false
	}
	worked := s.pollLink(e.wc)
	before := s.tx.posted()
	s.pump()
	if s.tx.posted() != before {
		worked = true
	}
	if !s.state.sending() && !s.state.dead() {
		if _, ok := e.closing[s]; !ok {
			e.closing[s] = time.Now().Add(closeDeadline)
		}
	}
	switch {
	case !s.stalled():
		s.stallSince = time.Time{}
	case worked || s.stallSince.IsZero() || s.tx.callerWCs() != s.stallLife:
		// The peer showed signs of life, to the engine or to an
		// application's thread that took its completions (the engine
		// may not have looked while the stall ended and began again).
		s.stallSince = time.Now()
		s.stallLife = s.tx.callerWCs()
	}
	if !s.stallSince.IsZero() && !s.probeTimer {
		s.probeTimer = true
		e.after(probeAfter, func() { e.probeStalled(s) })
	}
	return worked
}

// probeAfter is how long a stream may stay stalled on the peer's credit
// before the engine probes the peer, and then the interval between probes.
// A dead peer or a cut wire is then noticed within probeAfter plus the QP's
// retries (retry count 7 times the local ACK timeout), or plus
// probeDeadline, whichever comes first: a QP whose ACK timeout is infinite
// (0, as soft-RoCE's can be) never fails a request by itself, while a live
// peer's device acknowledges a probe within a round trip.
const probeAfter = time.Second

// probeDeadline bounds how long a probe may go unacknowledged (a variable
// for tests).
var probeDeadline = 10 * time.Second

// probeStalled probes a stream that is still stalled and keeps doing so
// every probeAfter while it stays stalled.
func (e *Engine) probeStalled(s *stream) {
	s.probeTimer = false
	if s.state.dead() || s.stallSince.IsZero() || !s.stalled() {
		return
	}
	if s.probing && time.Since(s.probeSent) >= probeDeadline {
		s.logf("rdma: connection %d: the peer's device did not acknowledge a probe within %v; timed out", s.id, probeDeadline)
		s.timedOut()
		return
	}
	if !s.probing && time.Since(s.stallSince) >= probeAfter+probeDeadline {
		// No room for a probe (the send queue is full of requests the
		// peer's device never acknowledged) and no completion since.
		s.logf("rdma: connection %d: no completion from the peer's device for %v with the send queue full; timed out", s.id, probeAfter+probeDeadline)
		s.timedOut()
		return
	}
	if time.Since(s.stallSince) >= probeAfter {
		s.probe()
	}
	s.probeTimer = true
	e.after(probeAfter, func() { e.probeStalled(s) })
}

// pollLink applies every completion the link has (rx.h: the device's,
// taken by the rule's C taker, then those the Go link made); it reports
// whether there were any. busy reports that an application's thread is
// taking them right now: it holds rx_lock only for one batch, and the
// engine must not go to sleep on a completion channel that thread may
// have emptied (arm), but that is not the engine's work (service: a
// reader spinning on its connection must not keep the engine spinning
// too).
func (s *stream) pollLink(wc []verbs.WC) bool {
	worked, _ := s.pollLinkBusy(wc)
	return worked
}

func (s *stream) pollLinkBusy(wc []verbs.WC) (worked, busy bool) {
	if s.state.dead() {
		return false, false
	}
	if !s.tx.rxTryLock() {
		return false, true
	}
	s.rxHeld = true
	defer func() { s.rxHeld = false; s.tx.rxUnlock() }()
	any := false
	for !s.state.dead() {
		n := s.tx.rxPoll()
		if ev := s.tx.event(); ev != nil {
			s.onEvent(ev)
			any = true
			continue
		}
		m, err := s.link.Poll(wc)
		if err != nil {
			s.fail(fmt.Errorf("rdma: poll: %w", err))
			s.down()
			return true, false
		}
		for i := 0; i < m && !s.state.dead(); i++ {
			s.handle(&wc[i])
		}
		if n == 0 && m == 0 {
			return any, false
		}
		any = true
	}
	return any, false
}

// linkGone handles the connection manager's word that the connection is
// gone: completions already queued are taken first (a CLOSE may be among
// them), then the link counts as down.
func (e *Engine) linkGone(s *stream) {
	for {
		if _, busy := s.pollLinkBusy(e.wc); !busy {
			break
		}
		runtime.Gosched() // an application's thread takes one batch
	}
	s.down()
}

// reap releases finished streams and those whose link did not go down in
// time.
func (e *Engine) reap() {
	now := time.Now()
	for s, deadline := range e.closing {
		if !s.finished() && now.After(deadline) {
			s.logf("rdma: connection %d: link did not go down within %v; releasing it", s.id, closeDeadline)
			s.down()
		}
		if s.finished() {
			delete(e.closing, s)
			delete(e.streams, s.id)
			s.logf("rdma: connection %d: so far %v; %s", s.id, e.woke, s.waitCosts())
			s.releaseWith(e.background)
		}
	}
}

func (e *Engine) runTimers() {
	if len(e.timers) == 0 {
		return
	}
	now := time.Now()
	keep := e.timers[:0]
	var due []func()
	for _, t := range e.timers {
		if now.Before(t.at) {
			keep = append(keep, t)
		} else {
			due = append(due, t.f)
		}
	}
	e.timers = keep
	for _, f := range due {
		f()
	}
}

// arm prepares every stream for sleeping: the link notifies at its next
// completion and the want flags ask the application for tokens. It
// reports whether something happened meanwhile, so that the engine must
// not sleep.
func (e *Engine) arm() bool {
	busy := false
	for _, s := range e.streams {
		if s.state.dead() || s.linkDown {
			continue
		}
		s.armFor()
		if err := s.link.Notify(); err != nil {
			s.fail(fmt.Errorf("rdma: arm completions: %w", err))
			busy = true
			continue
		}
		if worked, taking := s.pollLinkBusy(e.wc); worked || taking {
			busy = true
		}
		if s.wants() {
			busy = true
		}
	}
	return busy
}

// shutdown resets and releases every stream (the engine is stopping).
func (e *Engine) shutdown() {
	for _, s := range e.streams {
		if !s.state.dead() {
			s.fail(ErrStopped)
			s.down()
			s.release()
		}
	}
	e.streams = map[uint32]*stream{}
	if e.free != nil {
		close(e.free) // and wait: Stop returns with everything released
		<-e.freed
		e.free = nil
	}
	if e.exitArmed {
		// Nothing is left to wait for, and the kick eventfd closes.
		exitUnhook(e.kick)
		e.exitArmed = false
	}
	for fd := range e.sources {
		if fd != e.kick {
			_ = unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		}
	}
	unix.Close(e.kick)
	unix.Close(e.epfd)
}
