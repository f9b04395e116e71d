package main

import (
	"io"
	"net/netip"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/verbs/devroute"
)

// explain writes the policy explanation for opts.addr, one query per role in
// opts.roles, using isLocal and rdma as the locality and RDMA probes.
// Outside tests rdma is hostDevice (or simDevice): the core's own
// algorithm, so that both give the same device or the same reason.
func explain(w io.Writer, cfg *policy.Config, opts options, isLocal func(netip.Addr) bool, rdma func(netip.Addr) (string, bool, string)) error {
	rdma = once(rdma)
	qs := make([]policy.Query, len(opts.roles))
	for i, role := range opts.roles {
		qs[i] = policy.Query{
			Role:       role,
			Program:    opts.program(),
			Addr:       opts.addr,
			IsLocal:    isLocal,
			RDMADevice: rdma,
		}
	}
	return cfg.Explain(w, qs...)
}

// simDevice is the RDMA probe under OSF_DEBUG_RDMA_SIM=1: as the core's
// software stand-in (sdp/rdma.Sim), it serves every route.
func simDevice(netip.Addr) (string, bool, string) { return "sim", true, "" }

// hostDevice is the RDMA probe of this host: the algorithm the core uses
// (sdp/rdma.Transport.DeviceFor), so that --explain and a fallback's reason
// read the same.
func hostDevice(a netip.Addr) (string, bool, string) { return devroute.System.ForRoute(a) }

// once asks probe once per address: each query (role) asks again, and a
// host whose RDMA device serves another interface answers only after
// reading that device's whole GID table.
func once(probe func(netip.Addr) (string, bool, string)) func(netip.Addr) (string, bool, string) {
	type answer struct {
		dev string
		ok  bool
		why string
	}
	seen := map[netip.Addr]answer{}
	return func(a netip.Addr) (string, bool, string) {
		r, hit := seen[a]
		if !hit {
			r.dev, r.ok, r.why = probe(a)
			seen[a] = r
		}
		return r.dev, r.ok, r.why
	}
}
