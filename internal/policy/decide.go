package policy

import (
	"net/netip"
	"path"
	"strconv"
	"strings"
)

// Query asks which transport a connection or listener should use.
type Query struct {
	// Role is Client for connect and Server for listen; any other value is
	// taken as Client.
	Role Role
	// Program is the program's short name (the base name of argv[0]); a
	// name with '/' is cut to its base name. "" stands for any program: it
	// matches every program glob.
	Program string
	// Addr is the destination of connect, or the address a listener is bound
	// to. IPv4-mapped IPv6 addresses are unmapped and zones dropped before
	// matching.
	Addr netip.AddrPort
	// IsLocal reports whether an address is assigned to this host
	// (IsLocal, or a stand-in in tests). Loopback and unspecified
	// addresses count as local without asking it (the rule of IsLocal);
	// nil means no other address is local.
	IsLocal func(netip.Addr) bool
	// RDMADevice reports which RDMA device serves the route to an address,
	// or why none does. For a listener on a wildcard address it is asked
	// with that address and should report whether any device serves this
	// host. nil means no device serves any route.
	RDMADevice func(netip.Addr) (device string, ok bool, why string)
}

// normalize returns q with its role, address and program in the form the
// rules are matched against.
func (q Query) normalize() Query {
	if q.Role != Server {
		q.Role = Client
	}
	q.Addr = netip.AddrPortFrom(q.Addr.Addr().Unmap().WithZone(""), q.Addr.Port())
	if strings.Contains(q.Program, "/") {
		q.Program = path.Base(q.Program)
	}
	return q
}

// isLocal reports whether a is an address of this host.
func (q *Query) isLocal(a netip.Addr) bool { return isLocal(a, q.IsLocal) }

// rdmaDevice asks q.RDMADevice about a.
func (q *Query) rdmaDevice(a netip.Addr) (device string, ok bool, why string) {
	if q.RDMADevice == nil {
		return "", false, "RDMA devices not probed"
	}
	return q.RDMADevice(a)
}

// Decision is the outcome of Decide.
type Decision struct {
	// Transport is the transport to use. For a server, Shm means "accept
	// over a companion shm listener as well as over kernel TCP".
	Transport Transport
	// Rule is the 1-based number of the matching rule, or 0 for the implicit
	// final rule.
	Rule int
	// RuleText is the matching rule as written.
	RuleText string
	// Reason says why Transport was chosen; ReasonNone when it is not
	// Kernel.
	Reason Reason
	// Detail adds specifics to Reason, such as why no RDMA device serves
	// the route; it is often "".
	Detail string
	// RDMA is true when a listener should also accept over RDMA: a device
	// serves its address and the transport mode allows RDMA. It is always
	// true when a server's Transport is RDMA.
	RDMA bool
	// Device is the RDMA device that serves the route when Transport is
	// RDMA or RDMA is true.
	Device string
	// NoRDMA says why a server does not also listen over RDMA although the
	// transport mode allows it.
	NoRDMA string
	// Gateways is the matching gateway rule's gateway list when Transport
	// is Gateway (see GatewayAddrs).
	Gateways string
}

// String returns d on one line for logs, such as "shm (rule 2)",
// "rdma via mlx5_0 (rule 3)" or "kernel: route rule 1 chose kernel".
func (d Decision) String() string {
	if d.Transport == Kernel {
		return "kernel: " + d.Reason.Describe(d.Rule, d.Detail)
	}
	s := d.Transport.String()
	if d.Transport == Gateway {
		s += " via " + d.Gateways
	}
	switch {
	case d.Transport == RDMA:
		s += " via " + d.Device
	case d.RDMA:
		s += " and rdma via " + d.Device
	}
	if d.Rule == 0 {
		return s + " (implicit rule)"
	}
	return s + " (rule " + strconv.Itoa(d.Rule) + ")"
}

// Decide returns the transport for the connection or listener that q
// describes: the first matching rule decides, and when it says offload the
// transport mode, locality and RDMA devices pick the transport. Decide does
// not apply Strict; callers refuse a fallback when c.Strict and
// d.Reason.Fallback() are both true.
func (c *Config) Decide(q Query) Decision {
	q = q.normalize()
	n, r := c.match(&q)
	d := Decision{Transport: Kernel, Rule: n, RuleText: r.Text}
	switch {
	case r.Gateways != "":
		d.Transport, d.Gateways = Gateway, r.Gateways
	case !r.Offload && n == 0:
		d.Reason = ReasonNoRule
	case !r.Offload:
		d.Reason = ReasonRule
	case c.Transport == KernelOnly:
		d.Reason = ReasonTransportKernel
	case q.Role == Server:
		c.decideServer(&q, &d)
	case q.isLocal(q.Addr.Addr()):
		c.decideLocal(&q, &d)
	default:
		c.decideRemote(&q, &d)
	}
	return d
}

// match returns the first rule that matches q with its 1-based number, or
// the implicit rule and 0.
func (c *Config) match(q *Query) (int, *Rule) {
	for i := range c.Routes {
		if c.Routes[i].check(q) == hit {
			return i + 1, &c.Routes[i]
		}
	}
	return 0, &implicitRule
}

// decideServer decides for an offloaded listener: shm is always possible,
// RDMA when a device serves the address.
func (c *Config) decideServer(q *Query, d *Decision) {
	if c.Transport.allowsShm() {
		d.Transport = Shm
	}
	if !c.Transport.allowsRDMA() {
		return
	}
	dev, ok, why := q.rdmaDevice(q.Addr.Addr())
	switch {
	case ok:
		d.RDMA, d.Device = true, dev
		if c.Transport == RDMAOnly {
			d.Transport = RDMA
		}
	case c.Transport == RDMAOnly:
		d.Reason, d.Detail = ReasonNoRDMADevice, why
	default:
		d.NoRDMA = why
	}
}

// decideLocal decides for an offloaded connection to this host.
func (c *Config) decideLocal(q *Query, d *Decision) {
	if c.Transport.allowsShm() {
		d.Transport = Shm
		return
	}
	c.useRDMA(q, d)
}

// decideRemote decides for an offloaded connection to another host.
func (c *Config) decideRemote(q *Query, d *Decision) {
	if !c.Transport.allowsRDMA() {
		d.Reason = ReasonShmRemote
		return
	}
	c.useRDMA(q, d)
}

// useRDMA chooses RDMA for a connection when a device serves its route.
func (c *Config) useRDMA(q *Query, d *Decision) {
	dev, ok, why := q.rdmaDevice(q.Addr.Addr())
	if !ok {
		d.Reason, d.Detail = ReasonNoRDMADevice, why
		return
	}
	d.Transport, d.Device = RDMA, dev
}

// miss says which part of a rule did not match a query.
type miss uint8

const (
	hit miss = iota
	missRole
	missProgram
	missPort
	missAddr
)

// check matches r against a normalized query. The address is checked last
// because q.IsLocal may be slow.
func (r *Rule) check(q *Query) miss {
	switch {
	case r.Role&q.Role == 0:
		return missRole
	case !r.matchProgram(q.Program):
		return missProgram
	case !r.Ports.Contains(q.Addr.Port()):
		return missPort
	case !r.matchAddr(q):
		return missAddr
	}
	return hit
}

// matchProgram reports whether r's glob matches program; "" matches every
// glob.
func (r *Rule) matchProgram(program string) bool {
	if r.Program == "*" || program == "" {
		return true
	}
	ok, _ := path.Match(r.Program, program)
	return ok
}

// matchAddr reports whether r's address pattern matches q's address. A
// listener on a wildcard address matches every pattern.
func (r *Rule) matchAddr(q *Query) bool {
	a := q.Addr.Addr()
	switch {
	case !r.Local && !r.Prefix.IsValid():
		return true
	case q.Role == Server && a.IsUnspecified():
		return true
	case r.Local:
		return q.isLocal(a)
	}
	return r.Prefix.Contains(a)
}
