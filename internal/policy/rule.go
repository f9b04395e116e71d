package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"
)

// Rule is one route rule of OSF_ROUTES:
//
//	action [role [program]] target
//
// A rule matches a query when its role covers the query's role, its program
// glob matches the program's short name, and its target covers the address
// and port. Rules are built by ParseRoutes; a hand-built rule must have a
// Role of Client, Server or Both and a valid Program glob.
type Rule struct {
	// Offload is true for the action "offload" and false for "kernel".
	Offload bool
	// Role is Client, Server or Both.
	Role Role
	// Program is a path.Match glob matched against the program's short
	// name; "*" matches every program.
	Program string
	// Local is true for the address "local": loopback or any address of
	// this host.
	Local bool
	// Prefix is the address prefix of the target, masked and with IPv4-mapped
	// IPv6 addresses unmapped. It is the zero (invalid) Prefix when the
	// address is "*" or "local".
	Prefix netip.Prefix
	// Ports is the port range of the target.
	Ports Ports
	// Text is the rule as written, for display.
	Text string
	// Gateways is set for the action "gateway": the gateways' addresses in
	// canonical form, separated by commas (see GatewayAddrs). Offload is
	// then false.
	Gateways string
}

// Ports is an inclusive range of TCP ports. The zero value means every port.
type Ports struct {
	First, Last uint16
}

// Any reports whether p is the zero value, which covers every port.
func (p Ports) Any() bool { return p == Ports{} }

// Contains reports whether port is in p.
func (p Ports) Contains(port uint16) bool {
	return p.Any() || (p.First <= port && port <= p.Last)
}

// String returns p in OSF_ROUTES syntax: "*", "N" or "N-M".
func (p Ports) String() string {
	switch {
	case p.Any():
		return "*"
	case p.First == p.Last:
		return strconv.Itoa(int(p.First))
	}
	return strconv.Itoa(int(p.First)) + "-" + strconv.Itoa(int(p.Last))
}

// String returns r in canonical OSF_ROUTES syntax, with all four fields:
// for example "offload both * 10.0.0.0/8:5000-5999". ParseRoutes parses it
// back to an equal rule. Text keeps the rule as it was written.
func (r Rule) String() string {
	action := "kernel"
	switch {
	case r.Gateways != "":
		action = "gateway " + r.Gateways
	case r.Offload:
		action = "offload"
	}
	return action + " " + r.Role.String() + " " + r.Program + " " + r.target()
}

// target returns the canonical target text of r.
func (r Rule) target() string {
	var addr string
	switch {
	case r.Local:
		addr = "local"
	case !r.Prefix.IsValid():
		addr = "*"
	default:
		addr = r.prefixText()
	}
	if r.Prefix.Addr().Is6() {
		addr = "[" + addr + "]"
	}
	if r.Ports.Any() {
		return addr
	}
	return addr + ":" + r.Ports.String()
}

// host reports whether r's prefix is a single address.
func (r Rule) host() bool {
	return r.Prefix.IsValid() && r.Prefix.Bits() == r.Prefix.Addr().BitLen()
}

// prefixText returns r's prefix, without the length for a single address.
func (r Rule) prefixText() string {
	if r.host() {
		return r.Prefix.Addr().String()
	}
	return r.Prefix.String()
}

// blank reports whether c separates fields of a rule.
func blank(c rune) bool { return c == ' ' || c == '\t' || c == '\r' }

// ParseRoutes parses an OSF_ROUTES value into its rules, in order.
//
// Rules are separated by ';' or newlines, '#' starts a comment that runs to
// the end of the line, and blank entries are skipped; rules are numbered from
// 1 in the order they appear. An empty value (or one holding only comments)
// gives no rules. A malformed rule gives a *ParseError naming the rule's text
// and number, which wraps ErrMalformed.
func ParseRoutes(s string) ([]Rule, error) {
	var rules []Rule
	for line := range strings.SplitSeq(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for entry := range strings.SplitSeq(line, ";") {
			text := strings.TrimFunc(entry, blank)
			if text == "" {
				continue
			}
			r, err := parseRule(text)
			if err != nil {
				return nil, &ParseError{Var: varRoutes, Text: text, Rule: len(rules) + 1, Reason: err.Error()}
			}
			rules = append(rules, r)
		}
	}
	return rules, nil
}

// mustParseRoutes parses s and panics if it is malformed; it is meant for
// rule sets built into the program.
func mustParseRoutes(s string) []Rule {
	rules, err := ParseRoutes(s)
	if err != nil {
		panic(err)
	}
	return rules
}

// parseRule parses one rule whose text has no separators, comments or
// surrounding blanks. The target is checked before the role and program so
// that the most telling error is reported first.
func parseRule(text string) (Rule, error) {
	f := strings.FieldsFunc(text, blank)
	r := Rule{Role: Both, Program: "*", Text: text}
	switch f[0] {
	case "offload":
		r.Offload = true
	case "kernel":
	case "gateway":
		return parseGatewayRule(r, f)
	default:
		return Rule{}, fmt.Errorf("unknown action %q, want offload, kernel or gateway", f[0])
	}
	switch {
	case len(f) == 1:
		return Rule{}, errors.New("missing target")
	case len(f) > 4:
		return Rule{}, fmt.Errorf("%d fields, want action [role [program]] target", len(f))
	}
	if err := r.parseRest(f[1:]); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// parseRest parses the fields "[role [program]] target" (one to three).
func (r *Rule) parseRest(f []string) error {
	if err := r.parseTarget(f[len(f)-1]); err != nil {
		return err
	}
	if len(f) >= 2 {
		role, ok := parseRole(f[0])
		if !ok {
			return fmt.Errorf("unknown role %q, want client, server or both (a program glob comes after the role)", f[0])
		}
		r.Role = role
	}
	if len(f) == 3 {
		if err := checkGlob(f[1]); err != nil {
			return err
		}
		r.Program = f[1]
	}
	return nil
}

// checkGlob checks a program glob.
func checkGlob(glob string) error {
	if _, err := path.Match(glob, ""); err != nil {
		return fmt.Errorf("bad program glob %q: %w", glob, err)
	}
	if strings.Contains(glob, "/") {
		return fmt.Errorf("program glob %q contains '/', but programs are matched by base name", glob)
	}
	return nil
}

// parseTarget parses addr[:ports] into r.
func (r *Rule) parseTarget(s string) error {
	var addr, ports string
	var hasPorts bool
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return fmt.Errorf("missing ']' in %q", s)
		}
		addr = s[1:end]
		if rest := s[end+1:]; rest != "" {
			if rest[0] != ':' {
				return fmt.Errorf("unexpected %q after ']'", rest)
			}
			ports, hasPorts = rest[1:], true
		}
		p, err := parsePrefix(addr, true)
		if err != nil {
			return err
		}
		r.Prefix = p
	case strings.Count(s, ":") >= 2:
		p, err := parsePrefix(s, true)
		if err != nil {
			return err
		}
		r.Prefix = p
	default:
		addr, ports, hasPorts = strings.Cut(s, ":")
		switch addr {
		case "*":
		case "local":
			r.Local = true
		default:
			p, err := parsePrefix(addr, false)
			if err != nil {
				return err
			}
			r.Prefix = p
		}
	}
	if !hasPorts {
		return nil
	}
	p, err := parsePorts(ports)
	if err != nil {
		return err
	}
	r.Ports = p
	return nil
}

// parsePrefix parses an IP address with an optional "/bits", IPv6 when v6
// is set and IPv4 otherwise. Host bits are masked off, and an IPv4-mapped
// IPv6 prefix of at least 96 bits becomes the IPv4 prefix it maps.
func parsePrefix(s string, v6 bool) (netip.Prefix, error) {
	text, bitsText, hasBits := strings.Cut(s, "/")
	a, err := netip.ParseAddr(text)
	switch {
	case err != nil && v6:
		return netip.Prefix{}, fmt.Errorf("bad IPv6 address %q", text)
	case err != nil:
		return netip.Prefix{}, fmt.Errorf("bad address %q, want *, local, IPv4 or [IPv6]", text)
	case a.Zone() != "":
		return netip.Prefix{}, fmt.Errorf("address %q has a zone, which rules do not support", text)
	case a.Is6() != v6:
		return netip.Prefix{}, fmt.Errorf("brackets hold IPv6 addresses, not %q", text)
	}
	bits := a.BitLen()
	if hasBits {
		n, err := parseUint(bitsText, 0, uint64(bits))
		if errors.Is(err, errRange) {
			return netip.Prefix{}, fmt.Errorf("prefix length %s out of range 0-%d", bitsText, bits)
		}
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("bad prefix length %q", bitsText)
		}
		bits = int(n)
	}
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	return a.Prefix(bits)
}

// parsePorts parses "*", "N" or "N-M".
func parsePorts(s string) (Ports, error) {
	if s == "*" {
		return Ports{}, nil
	}
	firstText, lastText, isRange := strings.Cut(s, "-")
	first, err := parsePort(firstText)
	if err != nil {
		return Ports{}, err
	}
	if !isRange {
		return Ports{first, first}, nil
	}
	last, err := parsePort(lastText)
	if err != nil {
		return Ports{}, err
	}
	if first > last {
		return Ports{}, fmt.Errorf("port range %s has its first port above its last", s)
	}
	return Ports{first, last}, nil
}

// parsePort parses a port number, 1 to 65535.
func parsePort(s string) (uint16, error) {
	n, err := parseUint(s, 1, 65535)
	if errors.Is(err, errRange) {
		return 0, fmt.Errorf("port %s out of range 1-65535", s)
	}
	if err != nil {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return uint16(n), nil
}
