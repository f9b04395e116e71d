package policy_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

func TestGatewayRule(t *testing.T) {
	rules, err := policy.ParseRoutes("gateway 10.0.1.1:7000,[fd00::1]:7000 client curl* 0.0.0.0/0:80-443; gateway 10.0.1.1:7000 *")
	if err != nil {
		t.Fatal(err)
	}
	r := rules[0]
	if r.Gateways != "10.0.1.1:7000,[fd00::1]:7000" || r.Role != policy.Client || r.Program != "curl*" || r.Offload {
		t.Errorf("rule 1 = %+v", r)
	}
	if s := r.String(); s != "gateway 10.0.1.1:7000,[fd00::1]:7000 client curl* 0.0.0.0/0:80-443" {
		t.Errorf("String() = %q", s)
	}
	again, err := policy.ParseRoutes(r.String())
	if err != nil || len(again) != 1 || again[0].Gateways != r.Gateways || again[0].Ports != r.Ports {
		t.Errorf("String() does not parse back: %+v, %v", again, err)
	}
	if rules[1].Role != policy.Client {
		t.Errorf("rule 2 role %s, want client (the default of gateway rules)", rules[1].Role)
	}
	gws := policy.GatewayAddrs(r.Gateways)
	if len(gws) != 2 || gws[1] != netip.MustParseAddrPort("[fd00::1]:7000") {
		t.Errorf("GatewayAddrs = %v", gws)
	}

	c := config(t, "OSF_ROUTES=kernel *:53; gateway 10.0.1.1:7000 10.0.2.0/24; offload local")
	d := c.Decide(policy.Query{Role: policy.Client, Addr: netip.MustParseAddrPort("10.0.2.2:80"), IsLocal: fakeIsLocal})
	if d.Transport != policy.Gateway || d.Gateways != "10.0.1.1:7000" || d.Rule != 2 {
		t.Errorf("Decide = %+v", d)
	}
	if s := d.String(); s != "gateway via 10.0.1.1:7000 (rule 2)" {
		t.Errorf("String() = %q", s)
	}
	var b strings.Builder
	if err := c.Explain(&b, policy.Query{Role: policy.Client, Addr: netip.MustParseAddrPort("10.0.2.2:80")}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "=> gateway 10.0.1.1:7000: through the gateway (rule 2)") {
		t.Errorf("Explain:\n%s", b.String())
	}
	d = c.Decide(policy.Query{Role: policy.Server, Addr: netip.MustParseAddrPort("10.0.2.2:80"), IsLocal: fakeIsLocal})
	if d.Transport == policy.Gateway {
		t.Errorf("a listener matched a client gateway rule: %+v", d)
	}
	c = config(t, "OSF_ROUTES=gateway 10.0.1.1:7000 server *:8080")
	d = c.Decide(policy.Query{Role: policy.Server, Addr: netip.MustParseAddrPort("0.0.0.0:8080")})
	if d.Transport != policy.Gateway || d.Rule != 1 {
		t.Errorf("listener: Decide = %+v, want gateway rule 1", d)
	}
}

func TestGatewayRuleMalformed(t *testing.T) {
	for _, s := range []string{
		"gateway *",
		"gateway 10.0.0.1 *",
		"gateway 10.0.0.1:0 *",
		"gateway 0.0.0.0:7000 *",
		"gateway 10.0.0.1:7000 bogus *",
		"gateway 10.0.0.1:7000, *",
		"gateway 1.1.1.1:1,1.1.1.1:2,1.1.1.1:3,1.1.1.1:4,1.1.1.1:5,1.1.1.1:6,1.1.1.1:7,1.1.1.1:8,1.1.1.1:9 *",
	} {
		if _, err := policy.ParseRoutes(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

func TestParseTargetCovers(t *testing.T) {
	for _, tt := range []struct {
		target, addr string
		want         bool
	}{
		{"10.0.2.0/24:80", "10.0.2.9:80", true},
		{"10.0.2.0/24:80", "10.0.2.9:81", false},
		{"10.0.2.0/24", "10.0.3.9:80", false},
		{"*:5201", "192.168.0.1:5201", true},
		{"[fd00::/8]:443", "[fd00::5]:443", true},
		{"10.0.2.2", "[::ffff:10.0.2.2]:80", true},
	} {
		r, err := policy.ParseTarget(tt.target)
		if err != nil {
			t.Fatalf("%s: %v", tt.target, err)
		}
		if got := r.Covers(netip.MustParseAddrPort(tt.addr), nil); got != tt.want {
			t.Errorf("%s covers %s = %v, want %v", tt.target, tt.addr, got, tt.want)
		}
	}
	if _, err := policy.ParseTarget("10.0.0.0/40"); err == nil {
		t.Error("bad target parsed")
	}
}

func TestGatewayRuleInFile(t *testing.T) {
	f, err := policy.ParseFile("/etc/osf.conf", []byte("gateway 10.0.1.1:7000 client * 0.0.0.0/0\nOSF_GATEWAY_KEY = /etc/osf/gateway.key\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := f.Merge(nil, "curl")
	want := []string{"OSF_GATEWAY_KEY=/etc/osf/gateway.key", "OSF_ROUTES=gateway 10.0.1.1:7000 client * 0.0.0.0/0"}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("Merge = %q, lacks %q", got, w)
		}
	}
}
