package policy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

// TestReasonABI pins the numeric values and texts shared with C. A failure
// here means the ABI changed: add new reasons at the end instead.
func TestReasonABI(t *testing.T) {
	tests := []struct {
		r    policy.Reason
		code uint8
		text string
	}{
		{policy.ReasonNone, 0, "offloaded"},
		{policy.ReasonRule, 1, "route rule chose kernel"},
		{policy.ReasonNoRule, 2, "no route rule matched"},
		{policy.ReasonNoListener, 3, "no osf listener at the peer (peer without osf, or not listening)"},
		{policy.ReasonNoRDMADevice, 4, "peer is another host and no RDMA device serves the route"},
		{policy.ReasonForkNoRDMA, 5, "fork child could not set up RDMA"},
		{policy.ReasonStrict, 6, "strict mode refused the fallback"},
		{policy.ReasonResource, 7, "resource limit"},
		{policy.ReasonHandshake, 8, "handshake failed"},
		{policy.ReasonTransportKernel, 9, "OSF_TRANSPORT=kernel"},
		{policy.ReasonDisabled, 10, "osf disabled (malformed configuration or core unavailable)"},
		{policy.ReasonBacklog, 11, "osf listener backlog full"},
		{policy.ReasonPeerKernel, 13, "peer connected over kernel TCP (peer without osf or routed to kernel)"},
		{policy.ReasonShmRemote, 14, "OSF_TRANSPORT=shm and the peer is another host"},
		{policy.ReasonSandbox, 16, "seccomp filter in this process"},
		{policy.ReasonGoOff, 17, "Go program and OSF_GO is not 1"},
		{policy.ReasonGoStripped, 18, "Go program without a symbol table (stripped)"},
		{policy.ReasonGoUnknown, 19, "Go version or code not recognised"},
	}
	all := policy.AllReasons()
	if len(all) != len(tests) {
		t.Fatalf("AllReasons has %d reasons, the ABI table %d", len(all), len(tests))
	}
	for i, tt := range tests {
		if uint8(tt.r) != tt.code {
			t.Errorf("%q = %d, want %d", tt.text, tt.r, tt.code)
		}
		if all[i] != tt.r {
			t.Errorf("AllReasons()[%d] = %d, want %d", i, all[i], tt.r)
		}
		if got := tt.r.String(); got != tt.text {
			t.Errorf("Reason(%d).String() = %q, want %q", tt.code, got, tt.text)
		}
		if !tt.r.Valid() {
			t.Errorf("Reason(%d).Valid() = false", tt.code)
		}
	}
	// 12 and 15 are retired, never reused; 19 is the last one ever used.
	for _, n := range []int{12, 15, 20} {
		if r := policy.Reason(n); r.Valid() || r.String() != "reason("+strconv.Itoa(n)+")" || r.Hint() != "" {
			t.Errorf("undefined reason %d: Valid %v, String %q, Hint %q", n, r.Valid(), r.String(), r.Hint())
		}
	}
}

func TestReasonHints(t *testing.T) {
	for _, r := range policy.AllReasons() {
		h := r.Hint()
		if h == "" || !strings.HasSuffix(h, ".") || strings.ToUpper(h[:1]) != h[:1] {
			t.Errorf("Reason(%d).Hint() = %q, want one sentence", r, h)
		}
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		r      policy.Reason
		rule   int
		detail string
		want   string
	}{
		{policy.ReasonRule, 3, "", "route rule 3 chose kernel"},
		{policy.ReasonRule, 0, "", "route rule chose kernel"},
		{policy.ReasonRule, 12, "x", "route rule 12 chose kernel: x"},
		{policy.ReasonNoRDMADevice, 2, "no RDMA device", "peer is another host and no RDMA device serves the route: no RDMA device"},
		{policy.ReasonNone, 1, "", "offloaded"},
		{policy.Reason(200), 0, "d", "reason(200): d"},
	}
	for _, tt := range tests {
		if got := tt.r.Describe(tt.rule, tt.detail); got != tt.want {
			t.Errorf("Reason(%d).Describe(%d, %q) = %q, want %q", tt.r, tt.rule, tt.detail, got, tt.want)
		}
	}
}

func TestFallback(t *testing.T) {
	fallbacks := map[policy.Reason]bool{
		policy.ReasonNoListener:   true,
		policy.ReasonNoRDMADevice: true,
		policy.ReasonForkNoRDMA:   true,
		policy.ReasonResource:     true,
		policy.ReasonHandshake:    true,
		policy.ReasonBacklog:      true,
		policy.ReasonShmRemote:    true,
	}
	for _, r := range policy.AllReasons() {
		if got := r.Fallback(); got != fallbacks[r] {
			t.Errorf("%v.Fallback() = %v, want %v", r, got, fallbacks[r])
		}
	}
}
