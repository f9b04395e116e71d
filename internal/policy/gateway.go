package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// The action "gateway" sends matching connections through osfgw gateways:
//
//	gateway GW[,GW...] [role [program]] target      GW = IPv4:PORT | [IPv6]:PORT
//
// For a client (connect) the gateway connects to the target on the node's
// behalf; for a server (listen) the gateway listens on the same port and
// hands each connection it accepts to the node's listener. The role
// defaults to client.

// maxGateways bounds the gateways of one rule.
const maxGateways = 8

// parseGatewayRule parses the fields of a gateway rule; r holds the
// defaults and the text.
func parseGatewayRule(r Rule, f []string) (Rule, error) {
	switch {
	case len(f) < 3:
		return Rule{}, errors.New("want gateway GW[,GW...] [role [program]] target")
	case len(f) > 5:
		return Rule{}, fmt.Errorf("%d fields, want gateway GW[,GW...] [role [program]] target", len(f))
	}
	gws, err := parseGateways(f[1])
	if err != nil {
		return Rule{}, err
	}
	r.Role = Client
	if err := r.parseRest(f[2:]); err != nil {
		return Rule{}, err
	}
	texts := make([]string, len(gws))
	for i, g := range gws {
		texts[i] = g.String()
	}
	r.Gateways = strings.Join(texts, ",")
	return r, nil
}

// parseGateways parses a comma-separated list of gateway addresses.
func parseGateways(s string) ([]netip.AddrPort, error) {
	var gws []netip.AddrPort
	for g := range strings.SplitSeq(s, ",") {
		ap, err := netip.ParseAddrPort(g)
		if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" || ap.Addr().IsUnspecified() {
			return nil, fmt.Errorf("bad gateway %q, want IPv4:PORT or [IPv6]:PORT", g)
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		gws = append(gws, ap)
	}
	if len(gws) > maxGateways {
		return nil, fmt.Errorf("%d gateways, at most %d", len(gws), maxGateways)
	}
	return gws, nil
}

// GatewayAddrs returns the addresses in a canonical gateway list (the
// Gateways field of a Rule or a Decision), or nil when there are none.
func GatewayAddrs(list string) []netip.AddrPort {
	if list == "" {
		return nil
	}
	gws, _ := parseGateways(list)
	return gws
}

// ParseTarget parses a rule target alone, "addr[:ports]" as in OSF_ROUTES,
// into a rule whose other fields are the defaults; osfgw's allow-list uses
// it. Covers matches addresses against it.
func ParseTarget(s string) (Rule, error) {
	r := Rule{Role: Both, Program: "*", Text: s}
	if err := r.parseTarget(s); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// Covers reports whether r's target covers ap; isLocal tells which
// addresses are this host's ("local"), nil meaning only loopback.
func (r *Rule) Covers(ap netip.AddrPort, isLocal func(netip.Addr) bool) bool {
	q := Query{Role: Client, Addr: ap, IsLocal: isLocal}.normalize()
	return r.Ports.Contains(q.Addr.Port()) && r.matchAddr(&q)
}
