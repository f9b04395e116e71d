package policy

import (
	"strconv"
	"strings"
)

// Reason says why a connection is, or is not, offloaded.
//
// The numeric values are part of an ABI shared with the C side of osf: the
// per-process fd table stores the code of every socket, and osfstat reads it
// back. The one definition is enum osf_reason in fdtable/fdtable.h; this
// package stays free of cgo (osfrun is built without it), so the values are
// written out here and fdtable's TestPolicyABI holds them to the C enum.
// They are never renumbered or reused; new reasons get new numbers at the
// end. 12 and 15 are retired (ReasonInherited and ReasonNotStream, never
// recorded).
type Reason uint8

// The reasons, with their ABI values.
const (
	// ReasonNone means the connection is offloaded.
	ReasonNone Reason = 0
	// ReasonRule means a configured kernel route rule matched.
	ReasonRule Reason = 1
	// ReasonNoRule means no configured rule matched, so the implicit final
	// kernel rule applied.
	ReasonNoRule Reason = 2
	// ReasonNoListener means the peer host has no osf listener for the port.
	ReasonNoListener Reason = 3
	// ReasonNoRDMADevice means the peer is another host and no RDMA device
	// serves the route.
	ReasonNoRDMADevice Reason = 4
	// ReasonForkNoRDMA means a forked child could not set up RDMA.
	ReasonForkNoRDMA Reason = 5
	// ReasonStrict means OSF_STRICT=1 refused a fallback to kernel TCP.
	ReasonStrict Reason = 6
	// ReasonResource means a resource limit stopped the offload.
	ReasonResource Reason = 7
	// ReasonHandshake means the offload handshake with the peer failed.
	ReasonHandshake Reason = 8
	// ReasonTransportKernel means OSF_TRANSPORT=kernel.
	ReasonTransportKernel Reason = 9
	// ReasonDisabled means osf is disabled in this process.
	ReasonDisabled Reason = 10
	// ReasonBacklog means the osf listener's backlog was full.
	ReasonBacklog Reason = 11
	// ReasonPeerKernel means the peer connected over kernel TCP.
	ReasonPeerKernel Reason = 13
	// ReasonShmRemote means OSF_TRANSPORT=shm and the peer is another host.
	ReasonShmRemote Reason = 14
	// ReasonSandbox means the process runs under a seccomp filter.
	ReasonSandbox Reason = 16
	// ReasonGoOff means the process is a Go program and OSF_GO is not 1,
	// so its system calls do not reach osf.
	ReasonGoOff Reason = 17
	// ReasonGoStripped means the process is a Go program without a symbol
	// table, in which osf cannot find Go's system call entry.
	ReasonGoStripped Reason = 18
	// ReasonGoUnknown means the process is a Go program of a version, or
	// with code, that osf does not recognise.
	ReasonGoUnknown Reason = 19
)

// reasonInfo holds the text of a reason, with "%d" standing for the rule
// number, and the hint for the user.
type reasonInfo struct {
	text string
	hint string
}

var reasons = [...]reasonInfo{
	ReasonNone: {
		"offloaded",
		"Nothing to do: the connection is offloaded.",
	},
	ReasonRule: {
		"route rule %d chose kernel",
		"Change OSF_ROUTES (or osfrun --routes) so that an offload rule matches before this kernel rule; osfrun --explain ADDR:PORT shows which rule matches.",
	},
	ReasonNoRule: {
		"no route rule matched",
		"Add an offload rule for this address to OSF_ROUTES; the default rules offload only addresses of this host.",
	},
	ReasonNoListener: {
		"no osf listener at the peer (peer without osf, or not listening)",
		"Start the server under osf too (osfrun or LD_PRELOAD=libosf.so) and check that it listens on this address and port.",
	},
	ReasonNoRDMADevice: {
		"peer is another host and no RDMA device serves the route",
		"Reach the peer through an interface served by an RDMA device (see rdma link or ibv_devices), or route the address to kernel on purpose.",
	},
	ReasonForkNoRDMA: {
		"fork child could not set up RDMA",
		"Check that the child may open the RDMA device and lock memory (ulimit -l); OSF_LOG_LEVEL=debug logs the failing step.",
	},
	ReasonStrict: {
		"strict mode refused the fallback",
		"Fix the cause of the fallback named in the log, or unset OSF_STRICT to let the connection use kernel TCP.",
	},
	ReasonResource: {
		"resource limit",
		"Raise the limit named in the log (open files, locked memory, shared memory) or lower OSF_RING_SIZE.",
	},
	ReasonHandshake: {
		"handshake failed",
		"Run the same osf version on both sides and set OSF_LOG_LEVEL=debug on both to see the failing step.",
	},
	ReasonTransportKernel: {
		"OSF_TRANSPORT=kernel",
		"Unset OSF_TRANSPORT or set it to auto, shm or rdma.",
	},
	ReasonDisabled: {
		"osf disabled (malformed configuration or core unavailable)",
		"Fix the OSF_* variable named in the error on stderr (osfrun --explain checks them all) and make sure the osf core library can be loaded.",
	},
	ReasonBacklog: {
		"osf listener backlog full",
		"Raise the server's listen backlog (the listen argument and net.core.somaxconn) or make it accept faster.",
	},
	ReasonPeerKernel: {
		"peer connected over kernel TCP (peer without osf or routed to kernel)",
		"Run the client under osf too and check its routes with osfrun --explain ADDR:PORT.",
	},
	ReasonShmRemote: {
		"OSF_TRANSPORT=shm and the peer is another host",
		"Set OSF_TRANSPORT=auto (or rdma) to reach other hosts over RDMA, or route the address to kernel on purpose.",
	},
	ReasonSandbox: {
		"seccomp filter in this process",
		"Nothing to do: under a seccomp filter osf sets up no new connection (its set-up needs system calls the filter was not written for); connections offloaded before the filter keep working.",
	},
	ReasonGoOff: {
		"Go program and OSF_GO is not 1",
		"Set OSF_GO=1 to offload the sockets of a dynamically linked Go 1.26 program (amd64); it is off by default for now.",
	},
	ReasonGoStripped: {
		"Go program without a symbol table (stripped)",
		"Build the program without -ldflags=-s and do not strip it: osf finds Go's system call entry in the symbol table.",
	},
	ReasonGoUnknown: {
		"Go version or code not recognised",
		"Nothing to do but build the program with Go 1.26 for amd64, dynamically linked: osf hooks only code it knows byte for byte, and the detail names the version or the function that differed.",
	},
}

// AllReasons returns every defined reason in numeric order.
func AllReasons() []Reason {
	var all []Reason
	for i := range reasons {
		if Reason(i).Valid() {
			all = append(all, Reason(i))
		}
	}
	return all
}

// Valid reports whether r is a defined reason.
func (r Reason) Valid() bool {
	return int(r) < len(reasons) && reasons[r].text != ""
}

// String returns the text of r without a rule number, such as
// "route rule chose kernel"; an undefined reason gives "reason(N)".
func (r Reason) String() string {
	return r.Describe(0, "")
}

// Describe returns the text of r with rule filled in where the text names a
// rule (rule 0 leaves the number out), followed by ": detail" when detail is
// not empty. For example ReasonRule.Describe(3, "") is
// "route rule 3 chose kernel".
func (r Reason) Describe(rule int, detail string) string {
	var s string
	if !r.Valid() {
		s = "reason(" + strconv.Itoa(int(r)) + ")"
	} else {
		s = reasons[r].text
		if rule > 0 {
			s = strings.Replace(s, "%d", strconv.Itoa(rule), 1)
		} else {
			s = strings.Replace(s, " %d", "", 1)
		}
	}
	if detail != "" {
		s += ": " + detail
	}
	return s
}

// Hint returns one sentence telling the user what to do about r, or "" for an
// undefined reason.
func (r Reason) Hint() string {
	if !r.Valid() {
		return ""
	}
	return reasons[r].hint
}

// Fallback reports whether r means that a route asked for offload but the
// connection fell back to kernel TCP. OSF_STRICT=1 turns exactly these
// reasons into errors (recorded as ReasonStrict).
func (r Reason) Fallback() bool {
	switch r {
	case ReasonNoListener, ReasonNoRDMADevice, ReasonForkNoRDMA,
		ReasonResource, ReasonHandshake, ReasonBacklog, ReasonShmRemote:
		return true
	}
	return false
}
