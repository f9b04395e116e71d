package policy

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Explain writes to w, in a compact human form, the active rule list and
// then, for each query, how every rule up to the matching one was judged,
// the transport the query gets and the reason, with a hint when the answer
// is kernel TCP. It returns the error of writing to w. For example:
//
//	routes (default, OSF_ROUTES is unset):
//	  1  kernel both * *:53
//	  2  offload both * local
//	     (implicit) kernel both * *
//	transport=auto strict=0
//
//	client 10.1.2.3:80, program any:
//	  rule 1  no: port 80 not in 53
//	  rule 2  no: 10.1.2.3 is not local
//	  (implicit) yes: no rule matched
//	  => kernel: no route rule matched
//	     hint: Add an offload rule for this address to OSF_ROUTES; ...
func (c *Config) Explain(w io.Writer, qs ...Query) error {
	var b strings.Builder
	c.explainRules(&b)
	for _, q := range qs {
		b.WriteByte('\n')
		c.explainQuery(&b, q)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// explainRules writes the configuration file read, the rule list and the
// transport settings, each with the file line it came from.
func (c *Config) explainRules(b *strings.Builder) {
	if f := c.ConfFile(); f != "" {
		fmt.Fprintf(b, "config file %s (the environment overrides it)\n", f)
	}
	fromFile := c.Where(varRoutes, 1) != ""
	switch {
	case c.DefaultRoutes:
		b.WriteString("routes (default, OSF_ROUTES is unset):\n")
	case len(c.Routes) == 0 && fromFile:
		fmt.Fprintf(b, "routes (%s has no rules for this program):\n", c.ConfFile())
	case len(c.Routes) == 0:
		b.WriteString("routes (OSF_ROUTES has no rules):\n")
	case fromFile:
		fmt.Fprintf(b, "routes (%s):\n", c.ConfFile())
	default:
		b.WriteString("routes (OSF_ROUTES):\n")
	}
	width := len(strconv.Itoa(len(c.Routes)))
	for i, r := range c.Routes {
		fmt.Fprintf(b, "  %*d  %s", width, i+1, r.Text)
		if w := c.Where(varRoutes, i+1); w != "" {
			fmt.Fprintf(b, "    (%s)", w)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(b, "  %*s(implicit) %s\n", width+2, "", implicitRule.Text)
	fmt.Fprintf(b, "transport=%s strict=%s\n", c.Transport, flag01(c.Strict))
	for _, v := range variables {
		if v.Name == varRoutes {
			continue
		}
		if w := c.Where(v.Name, 0); w != "" {
			fmt.Fprintf(b, "%s from %s\n", v.Name, w)
		}
	}
}

// decidedBy says where the rule that decided came from: rule is the 1-based
// number of the matching rule, 0 for the implicit one.
func (c *Config) decidedBy(rule int) string {
	switch {
	case rule == 0:
		return "the implicit final rule"
	case c.DefaultRoutes:
		return "default rule " + strconv.Itoa(rule)
	}
	if w := c.Where(varRoutes, rule); w != "" {
		return "rule " + strconv.Itoa(rule) + " at " + w
	}
	return "rule " + strconv.Itoa(rule) + " of OSF_ROUTES (environment)"
}

// explainQuery writes how q is matched and decided.
func (c *Config) explainQuery(b *strings.Builder, q Query) {
	n := q.normalize()
	program := n.Program
	if program == "" {
		program = "any"
	}
	fmt.Fprintf(b, "%s %s", n.Role, q.Addr)
	if n.Addr != q.Addr {
		fmt.Fprintf(b, " (matched as %s)", n.Addr)
	}
	fmt.Fprintf(b, ", program %s:\n", program)

	width := len(strconv.Itoa(len(c.Routes)))
	matched := 0
	for i := range c.Routes {
		r := &c.Routes[i]
		m := r.check(&n)
		if m == hit {
			fmt.Fprintf(b, "  rule %*d  yes: %s\n", width, i+1, r.hitText(&n))
			matched = i + 1
			break
		}
		fmt.Fprintf(b, "  rule %*d  no: %s\n", width, i+1, r.missText(&n, m))
	}
	if matched == 0 {
		b.WriteString("  (implicit) yes: no rule matched\n")
	}

	d := c.Decide(q)
	fmt.Fprintf(b, "  => %s\n", resultText(n.Role, d))
	if c.ConfFile() != "" {
		fmt.Fprintf(b, "     decided by %s\n", c.decidedBy(matched))
	}
	switch {
	case d.Transport == Gateway && n.Role == Server:
		b.WriteString("     note: the gateway listens on the same port and hands each connection it accepts to this listener\n")
	case d.Transport == Gateway:
		b.WriteString("     note: the gateway connects to the destination over kernel TCP on this node's behalf; a dead gateway is skipped\n")
	case d.Transport != Kernel && n.Role == Client:
		b.WriteString("     note: kernel TCP instead if the peer has no osf listener\n")
	case d.Transport == Kernel:
		fmt.Fprintf(b, "     hint: %s\n", d.Reason.Hint())
	}
	if c.Strict && d.Reason.Fallback() {
		b.WriteString("     strict: OSF_STRICT=1 makes this fail instead of falling back\n")
	}
}

// resultText describes a decision for Explain.
func resultText(role Role, d Decision) string {
	listener := ""
	if role == Server {
		listener = " listener"
	}
	switch d.Transport {
	case Kernel:
		return "kernel: " + d.Reason.Describe(d.Rule, d.Detail)
	case RDMA:
		return "rdma" + listener + " via " + d.Device + ": offloaded"
	case Gateway:
		return "gateway " + d.Gateways + listener + ": through the gateway (rule " + strconv.Itoa(d.Rule) + ")"
	}
	s := "shm" + listener + ": offloaded"
	switch {
	case d.RDMA:
		s += "; rdma listener via " + d.Device
	case d.NoRDMA != "":
		s += "; no rdma listener: " + d.NoRDMA
	}
	return s
}

// hitText says why r matches the normalized query q.
func (r *Rule) hitText(q *Query) string {
	a := q.Addr.Addr()
	var s string
	switch {
	case !r.Local && !r.Prefix.IsValid():
		s = "any address"
	case q.Role == Server && a.IsUnspecified():
		s = "listening on every address"
	case r.Local && (a.IsLoopback() || a.IsUnspecified()):
		s = a.String() + " is local (loopback)"
	case r.Local:
		s = a.String() + " is local (assigned to this host)"
	case r.host():
		s = a.String() + " is the rule's address"
	default:
		s = a.String() + " in " + r.Prefix.String()
	}
	if !r.Ports.Any() {
		s += ", port " + strconv.Itoa(int(q.Addr.Port())) + " in " + r.Ports.String()
	}
	if r.Program != "*" && q.Program != "" {
		s += ", program " + q.Program + " matches " + r.Program
	}
	return s
}

// missText says why r does not match the normalized query q.
func (r *Rule) missText(q *Query, m miss) string {
	switch m {
	case missRole:
		return "rule is for " + r.Role.String() + "s only"
	case missProgram:
		return "program " + q.Program + " does not match " + r.Program
	case missPort:
		return "port " + strconv.Itoa(int(q.Addr.Port())) + " not in " + r.Ports.String()
	}
	a := q.Addr.Addr().String()
	switch {
	case r.Local:
		return a + " is not local"
	case r.host():
		return a + " is not " + r.prefixText()
	}
	return a + " not in " + r.Prefix.String()
}
