package main

import (
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/osfproject/osf/internal/gateway"
	"github.com/osfproject/osf/internal/policy"
)

// explainGateways adds, for a client query that a gateway rule decides,
// which gateway a connect would use now and why: the key, and each
// gateway's reachability in the order the core tries them (a connect that
// gets the gateway's challenge within OSF_CONNECT_TIMEOUT_MS).
func explainGateways(w io.Writer, cfg *policy.Config, opts options) error {
	if !slices.Contains(opts.roles, policy.Client) {
		return nil
	}
	q := policy.Query{Role: policy.Client, Program: opts.program(), Addr: opts.addr, IsLocal: policy.IsLocal}
	d := cfg.Decide(q)
	if d.Transport != policy.Gateway {
		return nil
	}
	fmt.Fprintf(w, "\ngateways of rule %d for %s:\n", d.Rule, opts.addr)
	switch {
	case cfg.GatewayKey == "":
		fmt.Fprintln(w, "  key: OSF_GATEWAY_KEY is not set: connects fail with EACCES")
	default:
		if _, err := gateway.LoadKey(cfg.GatewayKey); err != nil {
			fmt.Fprintf(w, "  key: %v: connects fail with EACCES\n", err)
		} else {
			fmt.Fprintf(w, "  key: %s (mode 0600, readable)\n", cfg.GatewayKey)
		}
	}
	chosen := false
	for _, g := range policy.GatewayAddrs(d.Gateways) {
		why := probeGateway(g.String(), cfg.ConnectTimeout)
		mark := " "
		if why == "" && !chosen {
			mark, chosen = "*", true
			why = "reachable: a connect now would use it"
		} else if why == "" {
			why = "reachable"
		}
		fmt.Fprintf(w, "  %s %s  %s\n", mark, g, why)
	}
	if !chosen {
		fmt.Fprintln(w, "  no gateway reachable: connects fail with ENETUNREACH")
	}
	return nil
}

// probeGateway connects to a gateway and reads its challenge; "" when it
// answered as a gateway, else why not.
func probeGateway(addr string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	b := make([]byte, gateway.ChallengeSize)
	if _, err := io.ReadFull(c, b); err != nil {
		return "no challenge: " + err.Error()
	}
	if _, err := gateway.ParseChallenge(b); err != nil {
		return "not an osfgw gateway: " + err.Error()
	}
	return ""
}
