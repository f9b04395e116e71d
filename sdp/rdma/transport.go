package rdma

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/shm"
	"github.com/osfproject/osf/verbs"
	"github.com/osfproject/osf/verbs/devroute"
)

// ErrForkChild means this process is a fork child of a process that set up
// RDMA: librdmacm's and libibverbs' state (device contexts, the
// connection manager's fds) was copied from the parent and cannot be used
// here (docs/DESIGN.md D1, D4). Such a child's connections use kernel TCP.
var ErrForkChild = errors.New("rdma: fork child of a process that set up RDMA")

// Config configures Start.
type Config struct {
	// HiddenBase is the first fd number of osf's hidden range (see
	// EngineConfig).
	HiddenBase int
	// PollSpin is how long the engine polls before it sleeps.
	PollSpin time.Duration
	// PID is this process's id (segment headers record it).
	PID int
	// ForkChild says the caller is a fork child with a fresh copy of the
	// core: Start then refuses (ErrForkChild) when the parent's RDMA state
	// came along (see InheritedState).
	ForkChild bool
	// Links (OSF_RDMA_LINKS=1) carries a dial to a listener this process
	// already reaches over a link as a stream on that link (links.go on
	// the software stand-in, qplink.go and qpdial.go on a device).
	Links bool
	// Logf logs; nil discards.
	Logf func(format string, a ...any)
}

// Transport sets up offloaded connections between hosts, over RDMA RC queue
// pairs whose rings are advanced by RDMA WRITE WITH IMMEDIATE. One
// Transport (and its Engine) serves a whole process.
//
// A connection's C data path is the same as for shm: the application's fd
// is a connected AF_UNIX socket (the wake socket), a hidden one wakes its
// writers, and its rings are in a memfd segment of this host. The engine
// is the other end of all three: it holds the other ends of both sockets
// and a mapping of the segment registered with the device, and mirrors
// the rings into the peer host's segment.
//
// Dial and Replicate may be called from any goroutine (the core calls them
// on its single osf-core thread); the connection manager's events, the
// completions and the rings are handled by the engine goroutine.
type Transport struct {
	cfg    Config
	eng    *Engine
	ch     *verbs.EventChannel
	bound  handshakeBound // scales the dials' bound with this host's pace
	routes routeCache     // DeviceFor's recent answers

	spares spares // a connection's memory made ahead (spare.go)

	readyMu   sync.Mutex
	readyFree []int // eventfds for dials' waits (Dial.wait), not in use

	// Engine goroutine only (after Start).
	devs      map[*verbs.Context]*device
	dials     map[*verbs.CMID]*dialer
	resolving map[*verbs.CMID]*spare // reused spares' ids resolving ahead of a dial (prepare)
	conns     map[*verbs.CMID]*stream
	listeners map[*verbs.CMID]*listener
	byName    map[string]*listener
	devNames  []string
	qlinks    map[netip.AddrPort]*qpLink   // Links: this process's links, by the listener they reach
	qlinkIDs  map[*verbs.CMID]*qpLink      // every link's id (both ends)
	linkDials map[netip.AddrPort]*linkDial // links being made, by listener
	linkIDs   map[*verbs.CMID]*linkDial
}

// device holds the per-device resources every connection on it shares:
// the completion channel its CQs report to. Protection domains are not
// shared: each segment has its own (ringMRs).
type device struct {
	ctx     *verbs.Context
	cc      *verbs.CompChannel
	removed bool // DEVICE_REMOVAL: being released
}

// listener is an rdma_cm listener that replicates an application's TCP
// listener: connections it accepts are handed to the application through
// the listener's shm companion.
type listener struct {
	id   *verbs.CMID
	addr netip.AddrPort
	name string // the companion's abstract name
}

// Start opens every RDMA device through librdmacm, creates a completion
// channel on each (protection domains are per segment: ringMRs) and the
// connection manager's event channel, and starts the engine. The fds
// this opens (rdma_cm, the devices' command and event fds, completion
// channels) land wherever the kernel puts them: the core calls Start
// while the program's low fd numbers are reserved, so they are born in
// osf's hidden range.
//
// It fails with an error satisfying errors.Is(err, verbs.ErrNoDevice) when
// there is no device, and with ErrForkChild in a fork child of a process
// that had started it.
func Start(cfg Config) (*Transport, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.ForkChild && InheritedState() {
		return nil, ErrForkChild
	}
	t := &Transport{
		cfg:       cfg,
		devs:      map[*verbs.Context]*device{},
		dials:     map[*verbs.CMID]*dialer{},
		resolving: map[*verbs.CMID]*spare{},
		conns:     map[*verbs.CMID]*stream{},
		listeners: map[*verbs.CMID]*listener{},
		byName:    map[string]*listener{},
		qlinks:    map[netip.AddrPort]*qpLink{},
		qlinkIDs:  map[*verbs.CMID]*qpLink{},
		linkDials: map[netip.AddrPort]*linkDial{},
		linkIDs:   map[*verbs.CMID]*linkDial{},
	}
	ctxs, err := verbs.CMDevices()
	if err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	if t.ch, err = verbs.NewEventChannel(); err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	if err := t.ch.SetNonblock(true); err != nil {
		t.closeDevices()
		return nil, err
	}
	for _, ctx := range ctxs {
		if _, err := t.openDevice(ctx); err != nil {
			t.closeDevices()
			return nil, err
		}
	}
	t.eng, err = NewEngine(EngineConfig{HiddenBase: cfg.HiddenBase, PollSpin: cfg.PollSpin, Logf: cfg.Logf})
	if err != nil {
		t.closeDevices()
		return nil, err
	}
	var werr error
	if err := t.eng.Do(func() {
		t.eng.armExit()
		if werr = t.eng.watchSetUp(t.ch.Fd(), t.onCMEvents); werr != nil {
			return
		}
		for _, d := range t.devs {
			if werr = t.watchDevice(d); werr != nil {
				return
			}
		}
	}); err != nil || werr != nil {
		t.eng.Stop()
		t.closeDevices()
		return nil, errors.Join(err, werr)
	}
	return t, nil
}

// openDevice allocates a device's shared resources.
func (t *Transport) openDevice(ctx *verbs.Context) (*device, error) {
	d := &device{ctx: ctx}
	var err error
	if d.cc, err = ctx.CreateCompChannel(); err != nil {
		return nil, fmt.Errorf("rdma: device %s: %w", ctx.Name(), err)
	}
	if err := d.cc.SetNonblock(true); err != nil {
		d.cc.Close()
		return nil, fmt.Errorf("rdma: device %s: %w", ctx.Name(), err)
	}
	t.devs[ctx] = d
	t.devNames = append(t.devNames, ctx.Name())
	return d, nil
}

// watchDevice makes the engine wake for the device's completion events.
// Engine goroutine only.
func (t *Transport) watchDevice(d *device) error {
	return t.eng.watch(d.cc.Fd(), func() {
		for {
			cq, err := d.cc.GetEvent()
			if err != nil {
				return // EAGAIN: none left
			}
			cq.AckEvents(1) // the engine polls every stream after waking
		}
	})
}

// device returns the resources of the device ctx (an id's), opening them
// if the device appeared after Start. Engine goroutine only.
func (t *Transport) device(ctx *verbs.Context) (*device, error) {
	if d := t.devs[ctx]; d != nil {
		if d.removed {
			return nil, fmt.Errorf("rdma: device %s is being removed: %w", ctx.Name(), verbs.ErrNoDevice)
		}
		return d, nil
	}
	d, err := t.openDevice(ctx)
	if err != nil {
		return nil, err
	}
	t.cfg.Logf("rdma: device %s appeared after start; its fds are in the program's fd space", ctx.Name())
	if err := t.watchDevice(d); err != nil {
		return nil, err
	}
	return d, nil
}

func (t *Transport) closeDevices() {
	for ctx, d := range t.devs {
		if d.cc != nil {
			d.cc.Close()
		}
		delete(t.devs, ctx)
	}
	if t.ch != nil {
		t.ch.Close()
	}
}

// Stop resets every connection, closes the listeners and releases the
// devices. The core never stops its transport (the process's exit does);
// tests do.
func (t *Transport) Stop() {
	_ = t.eng.Do(func() {
		for _, d := range t.dials {
			t.dialFailed(d, ErrStopped)
		}
		t.stopLinks(nil, ErrStopped)
		for _, l := range t.listeners {
			t.closeListener(l)
		}
		t.eng.unwatch(t.ch.Fd())
		for _, d := range t.devs {
			t.eng.unwatch(d.cc.Fd())
		}
	})
	t.eng.Stop()
	t.dropSpare(true)
	t.closeDevices()
	t.readyMu.Lock()
	closeOpen(t.readyFree...)
	t.readyFree = nil
	t.readyMu.Unlock()
}

// Name returns "rdma".
func (t *Transport) Name() string { return "rdma" }

// Devices returns the names of the devices Start opened.
func (t *Transport) Devices() []string {
	var out []string
	_ = t.eng.Do(func() { out = append(out, t.devNames...) })
	return out
}

// DeviceFor reports which RDMA device serves the route to a, or why none
// does; it has the signature of internal/policy.Query.RDMADevice. It is
// devroute's algorithm, the one osfrun --explain uses.
// Answers are reused for routeTTL (as policy.IsLocal's address list is):
// a connect asks this each time, and the algorithm reads sysfs and lists
// the interfaces (6-60 ms of each connect in an emulated guest).
func (t *Transport) DeviceFor(a netip.Addr) (device string, ok bool, why string) {
	return t.routes.get(a, devroute.System.ForRoute)
}

// routeTTL is how long DeviceFor trusts an answer.
const routeTTL = 2 * time.Second

// routeCache holds DeviceFor's recent answers; safe for concurrent use.
// An answer asked for in the second half of its life is renewed on
// another goroutine meanwhile, so that a steady stream of connects to an
// address never waits for the algorithm (it did every routeTTL) and no
// answer older than routeTTL is used.
type routeCache struct {
	mu    sync.Mutex
	m     map[netip.Addr]routeAnswer
	clock func() time.Time // time.Now when nil (tests set it)
}

type routeAnswer struct {
	device, why string
	ok          bool
	at          time.Time
	renewing    bool
}

func (c *routeCache) now() time.Time {
	if c.clock != nil {
		return c.clock()
	}
	return time.Now()
}

// get returns the answer for a, asking find when there is none younger
// than routeTTL.
func (c *routeCache) get(a netip.Addr, find func(netip.Addr) (string, bool, string)) (string, bool, string) {
	now := c.now()
	c.mu.Lock()
	r, hit := c.m[a]
	if hit && now.Sub(r.at) < routeTTL {
		if now.Sub(r.at) >= routeTTL/2 && !r.renewing {
			r.renewing = true
			c.m[a] = r
			go c.ask(a, find)
		}
		c.mu.Unlock()
		return r.device, r.ok, r.why
	}
	c.mu.Unlock()
	r = c.ask(a, find)
	return r.device, r.ok, r.why
}

// ask runs find for a and keeps its answer.
func (c *routeCache) ask(a netip.Addr, find func(netip.Addr) (string, bool, string)) routeAnswer {
	r := routeAnswer{at: c.now()}
	r.device, r.ok, r.why = find(a)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= 256 {
		c.m = map[netip.Addr]routeAnswer{} // a bound, not an LRU: start over
	}
	c.m[a] = r
	c.mu.Unlock()
	return r
}

// Listen creates the shm companion of a listener bound to addr and
// replicates the listener over RDMA; connections from both arrive on the
// returned companion fd (Accept takes them). It fails if either fails.
func (t *Transport) Listen(addr netip.AddrPort, backlog int, v6only bool) (int, error) {
	fd, err := shm.Transport{}.Listen(addr, backlog, v6only)
	if err != nil {
		return -1, err
	}
	if err := t.Replicate(addr, v6only, backlog); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Accept completes a connection taken from a companion listener: RDMA
// connections arrive there as shm connections whose segment the engine
// mirrors, so this is shm's Accept.
func (t *Transport) Accept(connFD int, listen netip.AddrPort, timeout time.Duration) (*sdp.Endpoint, error) {
	return shm.Transport{}.Accept(connFD, listen, timeout)
}

// Replicate starts an rdma_cm listener on addr (the TCP port number space:
// RDMA_PS_TCP), beside the kernel TCP listener bound there, whose
// connections the engine hands to the application through the listener's
// shm companion (shm.ListenName(addr, v6only)), which must exist. A second
// call for the same companion does nothing. The rdma_cm listener goes away
// when the companion does (the application closed its listener).
func (t *Transport) Replicate(addr netip.AddrPort, v6only bool, backlog int) error {
	var err error
	if derr := t.eng.Do(func() { err = t.listen(addr, v6only, backlog) }); derr != nil {
		return derr
	}
	return err
}

func (t *Transport) listen(addr netip.AddrPort, v6only bool, backlog int) error {
	name := shm.ListenName(addr, v6only)
	if t.byName[name] != nil {
		return nil
	}
	id, err := t.ch.CreateID()
	if err != nil {
		return fmt.Errorf("rdma: listen on %s: %w", addr, err)
	}
	a := addr.Addr().WithZone("")
	if a.Is6() && !a.Is4In6() && a.IsUnspecified() {
		if err := id.SetAFOnly(v6only); err != nil {
			id.Close()
			return fmt.Errorf("rdma: listen on %s: %w", addr, err)
		}
	}
	if err := id.Bind(addr); err != nil {
		id.Close()
		return fmt.Errorf("rdma: listen on %s: %w", addr, err)
	}
	if err := id.Listen(max(backlog, 1)); err != nil {
		id.Close()
		return fmt.Errorf("rdma: listen on %s: %w", addr, err)
	}
	l := &listener{id: id, addr: addr, name: name}
	t.listeners[id] = l
	t.byName[name] = l
	t.cfg.Logf("rdma: listening on %s for companion %s", addr, name)
	return nil
}

func (t *Transport) closeListener(l *listener) {
	delete(t.listeners, l.id)
	if t.byName[l.name] == l {
		delete(t.byName, l.name)
	}
	if err := l.id.Close(); err != nil {
		t.cfg.Logf("rdma: close listener on %s: %v", l.addr, err)
	}
}

// InheritedState reports whether this process holds RDMA device fds that
// it did not open: a fork child of a process that set up RDMA, whose
// librdmacm and libibverbs state (and fds, close-on-exec but not
// close-on-fork) came from the parent.
func InheritedState() bool {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false
	}
	for _, e := range ents {
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(link, "/dev/infiniband/") {
			return true
		}
	}
	return false
}
