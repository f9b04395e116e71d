package fdtable

import (
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

// TestPolicyABI checks that internal/policy's reasons and transports have
// the values of the C enums in fdtable.h (enum osf_reason, enum
// osf_transport), which are their one definition: the fd table records
// them and osfstat reads them back as policy values.
func TestPolicyABI(t *testing.T) {
	reasons := map[policy.Reason]string{
		policy.ReasonNone:            "OSF_R_NONE",
		policy.ReasonRule:            "OSF_R_RULE",
		policy.ReasonNoRule:          "OSF_R_NO_RULE",
		policy.ReasonNoListener:      "OSF_R_NO_LISTENER",
		policy.ReasonNoRDMADevice:    "OSF_R_NO_RDMA_DEVICE",
		policy.ReasonForkNoRDMA:      "OSF_R_FORK_NO_RDMA",
		policy.ReasonStrict:          "OSF_R_STRICT",
		policy.ReasonResource:        "OSF_R_RESOURCE",
		policy.ReasonHandshake:       "OSF_R_HANDSHAKE",
		policy.ReasonTransportKernel: "OSF_R_TRANSPORT_KERNEL",
		policy.ReasonDisabled:        "OSF_R_DISABLED",
		policy.ReasonBacklog:         "OSF_R_BACKLOG",
		policy.ReasonPeerKernel:      "OSF_R_PEER_KERNEL",
		policy.ReasonShmRemote:       "OSF_R_SHM_REMOTE",
		policy.ReasonSandbox:         "OSF_R_SANDBOX",
		policy.ReasonGoOff:           "OSF_R_GO_OFF",
		policy.ReasonGoStripped:      "OSF_R_GO_STRIPPED",
		policy.ReasonGoUnknown:       "OSF_R_GO_UNKNOWN",
	}
	all := policy.AllReasons()
	if len(all) != len(reasons) || len(cReasons) != len(reasons) {
		t.Fatalf("policy has %d reasons, this test %d, enum osf_reason (abi.go) %d", len(all), len(reasons), len(cReasons))
	}
	for _, r := range all {
		name, ok := reasons[r]
		if !ok {
			t.Errorf("policy reason %d (%s) has no C name here", r, r)
			continue
		}
		if c, ok := cReasons[name]; !ok || c != uint8(r) {
			t.Errorf("policy reason %q = %d, %s = %d (defined %v)", r.String(), r, name, c, ok)
		}
	}
	transports := map[policy.Transport]string{
		policy.Kernel:  "OSF_TP_KERNEL",
		policy.Shm:     "OSF_TP_SHM",
		policy.RDMA:    "OSF_TP_RDMA",
		policy.Gateway: "OSF_TP_GATEWAY",
	}
	for tp, name := range transports {
		if c := cTransports[name]; c != uint8(tp) {
			t.Errorf("policy.%s = %d, %s = %d", tp, tp, name, c)
		}
		if got, want := Transport(tp).String(), tp.String(); got != want {
			t.Errorf("Transport(%d).String() = %q, policy says %q", tp, got, want)
		}
	}
}

// TestReasonDescribe checks that the C text of every reason (reason.h,
// which libosf.so's log lines use) is policy.Reason.Describe's, with and
// without a rule number and a detail, undefined reasons included.
func TestReasonDescribe(t *testing.T) {
	for r := 0; r < 32; r++ {
		for _, rule := range []int{0, 3, 64} {
			for _, detail := range []string{"", "EMFILE: too many open files"} {
				want := policy.Reason(r).Describe(rule, detail)
				if got := cDescribe(r, rule, detail); got != want {
					t.Errorf("reason %d rule %d detail %q: C %q, Go %q", r, rule, detail, got, want)
				}
			}
		}
	}
}
