package policy_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

var routeSeeds = []string{
	"",
	"# comment only",
	"kernel both * *:53\noffload both * local",
	"offload 10.0.0.0/8; kernel *",
	"offload server nginx* local:8000-8099",
	"offload client [a-c]?x [fd00::/8]:443",
	"offload [::ffff:10.0.0.0/104]:1-65535",
	"offload fd00::17/16",
	"kernel [::]:*",
	"offload bogus 1.2.3.4:99999",
	"offload *:0",
	"offload [::1",
	"offload fe80::1%eth0",
	"offload client \\* *",
	"kernel\tclient\tcurl\t*:80\r\n",
	"offload 1.2.3.4/33",
	"offload *:90-80",
	"offload *:1-99999999999999999999999",
}

// FuzzParseRoutes checks that ParseRoutes never panics, that its errors are
// *ParseErrors wrapping ErrMalformed, that every rule's String parses back to
// an equal rule, and that Decide and Explain accept every parsed rule.
func FuzzParseRoutes(f *testing.F) {
	for _, s := range routeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rules, err := policy.ParseRoutes(s)
		if err != nil {
			var pe *policy.ParseError
			if !errors.As(err, &pe) || !errors.Is(err, policy.ErrMalformed) || pe.Rule < 1 {
				t.Fatalf("ParseRoutes(%q) error %#v is not a rule *ParseError", s, err)
			}
			return
		}
		for _, r := range rules {
			text := r.String()
			again, err := policy.ParseRoutes(text)
			if err != nil {
				t.Fatalf("rule %q: String() = %q does not parse: %v", r.Text, text, err)
			}
			if len(again) != 1 || !sameRule(again[0], r) {
				t.Fatalf("rule %q: String() = %q parses to %#v, want %#v", r.Text, text, again, r)
			}
			if again[0].String() != text {
				t.Fatalf("rule %q: String() is not stable: %q then %q", r.Text, text, again[0].String())
			}
		}
		c := &policy.Config{Routes: rules}
		for _, addr := range []string{"10.0.0.1:80", "[::1]:53", "0.0.0.0:1", "[::ffff:1.2.3.4]:65535"} {
			for _, role := range []policy.Role{policy.Client, policy.Server} {
				q := policy.Query{Role: role, Program: "prog", Addr: netip.MustParseAddrPort(addr)}
				d := c.Decide(q)
				if d.Rule < 0 || d.Rule > len(rules) {
					t.Fatalf("Decide(%v) chose rule %d of %d", q, d.Rule, len(rules))
				}
				if err := c.Explain(&strings.Builder{}, q); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// FuzzParse checks that Parse never panics on any value of any variable and
// that its errors are *ParseErrors wrapping ErrMalformed.
func FuzzParse(f *testing.F) {
	for _, s := range routeSeeds {
		f.Add(uint8(0), s)
	}
	for _, s := range []string{"", "0", "1", "auto", "RDMA", "256K", "64M", "4k", "3000", "-1", "+5", " 5", "1000001", "99999999999999999999999M", "K", "debug"} {
		for i := range policy.Vars() {
			f.Add(uint8(i), s)
		}
	}
	vars := policy.Vars()
	f.Fuzz(func(t *testing.T, i uint8, value string) {
		name := vars[int(i)%len(vars)].Name
		c, err := policy.Parse([]string{name + "=" + value})
		if err != nil {
			var pe *policy.ParseError
			if c != nil || !errors.As(err, &pe) || !errors.Is(err, policy.ErrMalformed) || pe.Var != name {
				t.Fatalf("Parse(%s=%q) = %v, %#v", name, value, c, err)
			}
			return
		}
		_ = c.Summary()
	})
}
