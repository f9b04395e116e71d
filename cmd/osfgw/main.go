package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/osfproject/osf/internal/gateway"
	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/shm"
	"golang.org/x/sys/unix"
)

// options are the command line.
type options struct {
	listen         string
	key            string
	allow          []string
	allowListen    []string
	connectTimeout time.Duration
	nodeNetns      []string
	rdma           string
	status         bool
	json           bool
}

func main() {
	o, err := parseArgs(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	if o.status {
		os.Exit(printStatus(os.Stdout, o.listen, o.json))
	}
	logger := log.New(os.Stderr, "osfgw: ", log.LstdFlags|log.Lmicroseconds)
	g, err := newGateway(o, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "osfgw:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGINT, unix.SIGTERM)
	defer stop()
	if err := g.serve(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "osfgw:", err)
		os.Exit(1)
	}
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func parseArgs(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("osfgw", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "", "ADDR:PORT to listen on for nodes")
	fs.StringVar(&o.key, "key", "", "file holding the shared key (mode 0600)")
	fs.Var((*listFlag)(&o.allow), "allow", "destination allowed, ADDR[:PORTS] as a route target (repeatable; none: every destination is refused)")
	fs.Var((*listFlag)(&o.allowListen), "allow-listen", "address nodes may listen on through this gateway, ADDR[:PORTS] (repeatable; none: no node may)")
	fs.Var((*listFlag)(&o.nodeNetns), "node-netns", "network namespace (a path such as /run/netns/NAME or /proc/PID/ns/net) whose nodes on this host reach the gateway over shared memory (repeatable)")
	fs.StringVar(&o.rdma, "rdma", "auto", "auto: also serve nodes of other hosts over RDMA when this host has an RDMA device; off: never")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 20*time.Second, "longest connect to a destination (ETIMEDOUT after it)")
	fs.BoolVar(&o.status, "status", false, "list the relayed connections of the running gateways and exit")
	fs.BoolVar(&o.json, "json", false, "with --status: print JSON")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "osfgw: unexpected argument %q\n", fs.Arg(0))
		return nil, errors.New("usage")
	}
	if !o.status && (o.listen == "" || o.key == "") {
		fmt.Fprintln(stderr, "osfgw: --listen and --key are required")
		return nil, errors.New("usage")
	}
	return o, nil
}

// gw is a running gateway.
type gw struct {
	addr    netip.AddrPort
	key     []byte
	allow   []policy.Rule
	listens []policy.Rule
	isLocal func(netip.Addr) bool
	timeout time.Duration
	netns   []string // network namespaces to serve offloaded nodes in, besides its own
	rdma    bool     // serve nodes over RDMA too
	log     *log.Logger

	// pending bounds the nodes in the challenge-response at once, so that
	// connections that never send a request cannot use up the gateway.
	pending chan struct{}

	mu     sync.Mutex
	nextID uint64
	conns  map[uint64]*relay
}

// maxPending is the most nodes in the challenge-response at once.
const maxPending = 256

func newGateway(o *options, logger *log.Logger) (*gw, error) {
	addr, err := netip.ParseAddrPort(o.listen)
	if err != nil {
		return nil, fmt.Errorf("osfgw: --listen %q: %w", o.listen, err)
	}
	key, err := gateway.LoadKey(o.key)
	if err != nil {
		return nil, err
	}
	if o.rdma == "" {
		o.rdma = "auto"
	}
	if o.rdma != "auto" && o.rdma != "off" {
		return nil, fmt.Errorf("osfgw: --rdma %q: want auto or off", o.rdma)
	}
	g := &gw{addr: addr, key: key, isLocal: shm.IsLocal, timeout: o.connectTimeout, netns: o.nodeNetns, rdma: o.rdma == "auto",
		log: logger, conns: make(map[uint64]*relay), pending: make(chan struct{}, maxPending)}
	for _, a := range o.allow {
		r, err := policy.ParseTarget(a)
		if err != nil {
			return nil, fmt.Errorf("osfgw: --allow %q: %w", a, err)
		}
		g.allow = append(g.allow, r)
	}
	for _, a := range o.allowListen {
		r, err := policy.ParseTarget(a)
		if err != nil {
			return nil, fmt.Errorf("osfgw: --allow-listen %q: %w", a, err)
		}
		g.listens = append(g.listens, r)
	}
	return g, nil
}

// serve accepts nodes until ctx ends.
func (g *gw) serve(ctx context.Context) error {
	lc := net.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: time.Second, Count: 3}}
	ln, err := lc.Listen(ctx, "tcp", g.addr.String())
	if err != nil {
		return fmt.Errorf("osfgw: listen: %w", err)
	}
	st, err := g.serveStatus()
	if err != nil {
		ln.Close()
		return err
	}
	rings, err := g.listenRings()
	if err != nil {
		ln.Close()
		st.Close()
		return err
	}
	for _, lfd := range rings {
		go g.acceptRings(ctx, lfd)
	}
	rdmaVia := g.replicateRDMA()
	go func() {
		<-ctx.Done()
		ln.Close()
		st.Close()
	}()
	allow := "nothing (every destination is refused; add --allow)"
	if len(g.allow) > 0 {
		texts := make([]string, len(g.allow))
		for i, r := range g.allow {
			texts[i] = r.Text
		}
		allow = strings.Join(texts, " ")
	}
	g.log.Printf("listening on %s (and over shm in %d network namespaces, %s), allowing %s", ln.Addr(), len(rings), rdmaVia, allow)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				g.log.Printf("stopping")
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			g.log.Printf("accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go g.handle(newTCPLeg(c.(*net.TCPConn)))
	}
}

// allowed reports whether dst is on the allow-list list.
func (g *gw) allowed(dst netip.AddrPort, list []policy.Rule) bool {
	for i := range list {
		if list[i].Covers(dst, g.isLocal) {
			return true
		}
	}
	return false
}

// handshakeTimeout bounds a node's challenge-response.
const handshakeTimeout = 10 * time.Second

// handle runs one node connection: challenge, request, connect, reply,
// relay.
func (g *gw) handle(n nodeLeg) {
	from := n.node()
	select {
	case g.pending <- struct{}{}:
	default:
		g.log.Printf("refused node %s: %d nodes already in the challenge-response", from, maxPending)
		n.close()
		return
	}
	done := sync.OnceFunc(func() { <-g.pending })
	defer done()
	var ch gateway.Challenge
	if _, err := randRead(ch.Nonce[:]); err != nil {
		g.log.Printf("node %s: nonce: %v", from, err)
		n.close()
		return
	}
	if err := n.send(ch.Marshal()); err != nil {
		n.close()
		return
	}
	buf := make([]byte, gateway.RequestSize)
	if err := n.recv(buf); err != nil {
		g.log.Printf("refused node %s: no request: %v", from, err)
		n.close()
		return
	}
	req, err := gateway.ParseRequest(buf, g.key, ch.Nonce)
	done()
	tl, isTCP := n.(*tcpLeg)
	switch {
	case errors.Is(err, gateway.ErrAuth):
		g.refuse(n, unix.EACCES, "refused node %s: authentication failed (the node's key differs)", from)
		return
	case err != nil:
		g.refuse(n, unix.EACCES, "refused node %s: %v", from, err)
		return
	case req.Op == gateway.OpListen && isTCP:
		g.listen(tl.c, req, gateway.DeliveryToken(g.key, ch.Nonce))
		return
	case req.Op != gateway.OpConnect:
		g.refuse(n, unix.EOPNOTSUPP, "refused node %s: operation %d not supported over %s", from, req.Op, n.transport())
		return
	case !g.allowed(req.Dest, g.allow):
		g.refuse(n, unix.EPERM, "refused node %s -> %s: destination not allowed (no --allow entry covers it)", from, req.Dest)
		return
	}
	r := g.add(from, req.Dest)
	r.setLeg(n.transport())
	defer g.remove(r)
	timeout := g.timeout
	if req.Timeout > 0 && req.Timeout < timeout {
		timeout = req.Timeout
	}
	dest, errno := dial(req.Dest, timeout)
	if errno != 0 {
		g.refuse(n, errno, "node %s -> %s: connect: %v", from, req.Dest, errno)
		return
	}
	local, _ := netip.ParseAddrPort(dest.LocalAddr().String())
	r.setLocal(local.String())
	// From here until both ends have closed cleanly, closing either side
	// resets it: a gateway that dies must not look like a normal end.
	n.established()
	dest.SetLinger(0)
	if err := n.send(gateway.Reply{Local: local}.Marshal()); err != nil {
		g.log.Printf("node %s -> %s: reply: %v", from, req.Dest, err)
		n.close()
		dest.Close()
		return
	}
	r.state.Store(stateEstablished)
	g.log.Printf("node %s -> %s: connected from %s (node leg %s)", from, req.Dest, local, n.transport())
	how := n.relay(r, dest)
	g.log.Printf("node %s -> %s: %s; %d bytes to the destination, %d to the node", from, req.Dest, how, r.toDest.Load(), r.toNode.Load())
}

// listen serves a node's LISTEN request: it listens on req.Dest and, for
// as long as the node keeps this control connection open, delivers each
// connection it accepts to the node's port req.NodePort, prefixed by a
// notice (over shm also by token, the delivery token), and relays it. A node that no longer listens there (refused)
// ends it.
func (g *gw) listen(ctl *net.TCPConn, req gateway.Request, token [gateway.TokenSize]byte) {
	from := ctl.RemoteAddr().String()
	if !g.allowed(req.Dest, g.listens) {
		g.refuse(&tcpLeg{ctl}, unix.EPERM, "refused node %s: listen on %s not allowed (no --allow-listen entry covers it)", from, req.Dest)
		return
	}
	network := "tcp4"
	if req.Dest.Addr().Is6() {
		network = "tcp6"
	}
	ln, err := net.Listen(network, req.Dest.String())
	if err != nil {
		var errno unix.Errno
		if !errors.As(err, &errno) {
			errno = unix.EADDRNOTAVAIL
		}
		g.refuse(&tcpLeg{ctl}, errno, "node %s: listen on %s: %v", from, req.Dest, err)
		return
	}
	bound, _ := netip.ParseAddrPort(ln.Addr().String())
	nodeAddr, _ := netip.ParseAddrPort(from)
	nodeListener := netip.AddrPortFrom(nodeAddr.Addr(), req.NodePort).String()
	// Listed (--status) before the node hears that it listens: a node
	// that asks for the status right after its reply sees the LISTEN.
	st := g.add(from, bound)
	st.setLocal(nodeListener)
	st.state.Store(stateListen)
	defer g.remove(st)
	if _, err := ctl.Write(gateway.Reply{Local: bound}.Marshal()); err != nil {
		ln.Close()
		ctl.Close()
		return
	}
	ctl.SetDeadline(time.Time{})
	g.log.Printf("node %s: listening on %s for the node's %s", from, bound, nodeListener)
	// A node on this host gets its connections over shm when its
	// listener has a companion (deliverRing); others over kernel TCP.
	to := delivery{listener: nodeListener, token: token}
	to.netns, to.shm = g.nodeNetns(ctl)
	to.self, _ = netip.ParseAddrPort(ctl.LocalAddr().String())
	go func() { // the node closes the control connection: stop listening
		io.Copy(io.Discard, ctl)
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		go g.deliver(c.(*net.TCPConn), to, ln)
	}
	ctl.Close()
	g.log.Printf("node %s: stopped listening on %s", from, bound)
}

// delivery says how to reach a node's listener.
type delivery struct {
	listener string                  // the node's listener: its address and port
	self     netip.AddrPort          // the gateway's address as the node sees it
	netns    string                  // with shm: the node's network namespace ("": the gateway's)
	shm      bool                    // the node is on this host: try its companion first
	token    [gateway.TokenSize]byte // written after the notice over shm
}

// deliver connects an accepted outside connection to the node's listener
// and relays it: over shm to the listener's companion when the node is on
// this host and its listener has one, else over kernel TCP; a node that
// refuses it no longer listens, which ends the listen.
func (g *gw) deliver(out *net.TCPConn, to delivery, ln net.Listener) {
	nodeListener := to.listener
	remote, _ := netip.ParseAddrPort(out.RemoteAddr().String())
	local, _ := netip.ParseAddrPort(out.LocalAddr().String())
	r := g.add(nodeListener, remote)
	defer g.remove(r)
	r.setLocal(local.String())
	r.setLeg("kernel")
	out.SetLinger(0)
	notice := gateway.Notice{Remote: remote, Local: local}.Marshal()
	if to.shm {
		ap, _ := netip.ParseAddrPort(nodeListener)
		ep, err := deliverRing(to.netns, ap, to.self, append(notice[:len(notice):len(notice)], to.token[:]...))
		if err == nil {
			leg, lerr := newRingLeg(ep)
			if lerr != nil {
				ep.Close()
				g.log.Printf("%s -> node %s: %v; reset", remote, nodeListener, lerr)
				out.Close()
				return
			}
			leg.established()
			r.setLeg(leg.transport())
			r.state.Store(stateEstablished)
			g.log.Printf("%s -> node %s: accepted on %s (node leg %s)", remote, nodeListener, local, leg.transport())
			how := leg.relay(r, out)
			g.log.Printf("%s -> node %s: %s; %d bytes to the client, %d to the node", remote, nodeListener, how, r.toDest.Load(), r.toNode.Load())
			return
		}
		if !errors.Is(err, sdp.ErrNoListener) {
			g.log.Printf("%s -> node %s: over shm: %v; over kernel TCP instead", remote, nodeListener, err)
		}
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", nodeListener)
	if err != nil {
		g.log.Printf("%s -> node %s: %v; reset", remote, nodeListener, err)
		out.Close()
		var errno unix.Errno
		if errors.As(err, &errno) && errno == unix.ECONNREFUSED {
			ln.Close()
		}
		return
	}
	node := c.(*net.TCPConn)
	node.SetLinger(0)
	if _, err := node.Write(notice); err != nil {
		node.Close()
		out.Close()
		return
	}
	r.state.Store(stateEstablished)
	g.log.Printf("%s -> node %s: accepted on %s (node leg kernel)", remote, nodeListener, local)
	how := r.run(node, out)
	g.log.Printf("%s -> node %s: %s; %d bytes to the client, %d to the node", remote, nodeListener, how, r.toDest.Load(), r.toNode.Load())
}

// refuse answers a request with an error and closes the node connection.
func (g *gw) refuse(n nodeLeg, errno unix.Errno, format string, a ...any) {
	g.log.Printf(format, a...)
	n.send(gateway.Reply{Errno: errno}.Marshal())
	n.close()
}

// dial connects to dst over kernel TCP within timeout; the errno says why
// it could not.
func dial(dst netip.AddrPort, timeout time.Duration) (*net.TCPConn, unix.Errno) {
	network := "tcp4"
	if dst.Addr().Is6() && !dst.Addr().Is4In6() {
		network = "tcp6"
	}
	d := net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}}
	c, err := d.Dial(network, netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()).String())
	if err == nil {
		return c.(*net.TCPConn), 0
	}
	var errno unix.Errno
	var ne net.Error
	switch {
	case errors.As(err, &errno):
		return nil, errno
	case errors.As(err, &ne) && ne.Timeout():
		return nil, unix.ETIMEDOUT
	}
	return nil, unix.EHOSTUNREACH
}

// add registers a relay for --status.
func (g *gw) add(node string, dst netip.AddrPort) *relay {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextID++
	r := &relay{id: g.nextID, node: node, dest: dst.String(), start: time.Now()}
	g.conns[r.id] = r
	return r
}

func (g *gw) remove(r *relay) {
	g.mu.Lock()
	delete(g.conns, r.id)
	g.mu.Unlock()
}

// snapshot returns the relayed connections for --status.
func (g *gw) snapshot() statusDoc {
	g.mu.Lock()
	defer g.mu.Unlock()
	doc := statusDoc{Gateway: g.addr.String(), PID: os.Getpid(), Connections: []statusConn{}}
	for _, r := range g.conns {
		toDest, toNode := r.bytes()
		local, leg := r.names()
		doc.Connections = append(doc.Connections, statusConn{
			Node: r.node, Dest: r.dest, Local: local, Leg: leg, State: r.state.Load().String(),
			ToDest: toDest, ToNode: toNode, Seconds: time.Since(r.start).Seconds(),
		})
	}
	return doc
}

// statusDoc is what one gateway answers on its status socket; the JSON
// field names are stable.
type statusDoc struct {
	Gateway     string       `json:"gateway"`
	PID         int          `json:"pid"`
	Connections []statusConn `json:"connections"`
}

type statusConn struct {
	Node    string  `json:"node"`
	Dest    string  `json:"destination"`
	Local   string  `json:"local,omitempty"`
	Leg     string  `json:"leg,omitempty"`
	State   string  `json:"state"`
	ToDest  int64   `json:"bytes_to_destination"`
	ToNode  int64   `json:"bytes_to_node"`
	Seconds float64 `json:"seconds"`
}

// statusName is the abstract unix socket name of the status of the gateway
// listening on addr (abstract names belong to the network namespace).
func statusName(addr string) string { return "@osfgw/status/" + addr }

// serveStatus answers status requests: one JSON document per connection.
func (g *gw) serveStatus() (net.Listener, error) {
	ln, err := net.Listen("unix", statusName(g.addr.String()))
	if err != nil {
		return nil, fmt.Errorf("osfgw: status socket: %w", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			json.NewEncoder(c).Encode(g.snapshot())
			c.Close()
		}
	}()
	return ln, nil
}
