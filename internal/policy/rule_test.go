package policy_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

// sameRule reports whether a and b are equal apart from their texts.
func sameRule(a, b policy.Rule) bool {
	a.Text, b.Text = "", ""
	return a == b
}

func TestParseRoutes(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		in   string
		want []policy.Rule // Text is checked separately against texts
		text []string
		str  []string // canonical String
	}{
		{
			in:   "offload 10.0.0.0/8",
			want: []policy.Rule{{Offload: true, Role: policy.Both, Program: "*", Prefix: p("10.0.0.0/8")}},
			text: []string{"offload 10.0.0.0/8"},
			str:  []string{"offload both * 10.0.0.0/8"},
		},
		{
			in:   "kernel client *:53",
			want: []policy.Rule{{Role: policy.Client, Program: "*", Ports: policy.Ports{53, 53}}},
			str:  []string{"kernel client * *:53"},
		},
		{
			in:   "offload server nginx* local:8000-8099",
			want: []policy.Rule{{Offload: true, Role: policy.Server, Program: "nginx*", Local: true, Ports: policy.Ports{8000, 8099}}},
			str:  []string{"offload server nginx* local:8000-8099"},
		},
		{
			in:   "offload both * *:*",
			want: []policy.Rule{{Offload: true, Role: policy.Both, Program: "*"}},
			str:  []string{"offload both * *"},
		},
		{
			in:   "offload 1.2.3.4/8:1-65535",
			want: []policy.Rule{{Offload: true, Role: policy.Both, Program: "*", Prefix: p("1.0.0.0/8"), Ports: policy.Ports{1, 65535}}},
			text: []string{"offload 1.2.3.4/8:1-65535"},
			str:  []string{"offload both * 1.0.0.0/8:1-65535"},
		},
		{
			in:   "offload 192.168.1.7",
			want: []policy.Rule{{Offload: true, Role: policy.Both, Program: "*", Prefix: p("192.168.1.7/32")}},
			str:  []string{"offload both * 192.168.1.7"},
		},
		{
			in:   "offload [fd00::1]:443",
			want: []policy.Rule{{Offload: true, Role: policy.Both, Program: "*", Prefix: p("fd00::1/128"), Ports: policy.Ports{443, 443}}},
			str:  []string{"offload both * [fd00::1]:443"},
		},
		{
			in:   "offload [fd00::/8]",
			want: []policy.Rule{{Offload: true, Role: policy.Both, Program: "*", Prefix: p("fd00::/8")}},
			str:  []string{"offload both * [fd00::/8]"},
		},
		{
			in:   "offload fd00::17/16",
			want: []policy.Rule{{Offload: true, Role: policy.Both, Program: "*", Prefix: p("fd00::/16")}},
			str:  []string{"offload both * [fd00::/16]"},
		},
		{
			in:   "kernel [::ffff:10.1.2.3]:80",
			want: []policy.Rule{{Role: policy.Both, Program: "*", Prefix: p("10.1.2.3/32"), Ports: policy.Ports{80, 80}}},
			str:  []string{"kernel both * 10.1.2.3:80"},
		},
		{
			in:   "kernel [::ffff:10.0.0.0/104]",
			want: []policy.Rule{{Role: policy.Both, Program: "*", Prefix: p("10.0.0.0/8")}},
			str:  []string{"kernel both * 10.0.0.0/8"},
		},
		{
			in:   "kernel 0.0.0.0/0",
			want: []policy.Rule{{Role: policy.Both, Program: "*", Prefix: p("0.0.0.0/0")}},
			str:  []string{"kernel both * 0.0.0.0/0"},
		},
		{
			in: "  # only a comment\n\n ; ;\t\n",
		},
		{
			in: "",
		},
		{
			in: "kernel *:53 # DNS stays\r\n\toffload\tclient\tcurl\tlocal ; offload [::1]",
			want: []policy.Rule{
				{Role: policy.Both, Program: "*", Ports: policy.Ports{53, 53}},
				{Offload: true, Role: policy.Client, Program: "curl", Local: true},
				{Offload: true, Role: policy.Both, Program: "*", Prefix: p("::1/128")},
			},
			text: []string{"kernel *:53", "offload\tclient\tcurl\tlocal", "offload [::1]"},
			str:  []string{"kernel both * *:53", "offload client curl local", "offload both * [::1]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := policy.ParseRoutes(tt.in)
			if err != nil {
				t.Fatalf("ParseRoutes: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d rules %v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if !sameRule(got[i], tt.want[i]) {
					t.Errorf("rule %d = %#v, want %#v", i+1, got[i], tt.want[i])
				}
				if tt.text != nil && got[i].Text != tt.text[i] {
					t.Errorf("rule %d Text = %q, want %q", i+1, got[i].Text, tt.text[i])
				}
				if s := got[i].String(); s != tt.str[i] {
					t.Errorf("rule %d String() = %q, want %q", i+1, s, tt.str[i])
				}
			}
		})
	}
}

func TestParseRoutesMalformed(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"offload local; offload bogus 1.2.3.4:99999",
			`osf: OSF_ROUTES="offload bogus 1.2.3.4:99999" (rule 2): port 99999 out of range 1-65535`},
		{"offload bogus 1.2.3.4:80",
			`osf: OSF_ROUTES="offload bogus 1.2.3.4:80" (rule 1): unknown role "bogus", want client, server or both (a program glob comes after the role)`},
		{"accept *",
			`osf: OSF_ROUTES="accept *" (rule 1): unknown action "accept", want offload, kernel or gateway`},
		{"# c\n offload  ",
			`osf: OSF_ROUTES="offload" (rule 1): missing target`},
		{"offload client a b c",
			`osf: OSF_ROUTES="offload client a b c" (rule 1): 5 fields, want action [role [program]] target`},
		{"offload client [x *",
			`osf: OSF_ROUTES="offload client [x *" (rule 1): bad program glob "[x": syntax error in pattern`},
		{"offload client bin/x *",
			`osf: OSF_ROUTES="offload client bin/x *" (rule 1): program glob "bin/x" contains '/', but programs are matched by base name`},
		{"offload *:0",
			`osf: OSF_ROUTES="offload *:0" (rule 1): port 0 out of range 1-65535`},
		{"offload *:",
			`osf: OSF_ROUTES="offload *:" (rule 1): bad port ""`},
		{"offload *:http",
			`osf: OSF_ROUTES="offload *:http" (rule 1): bad port "http"`},
		{"offload *:+80",
			`osf: OSF_ROUTES="offload *:+80" (rule 1): bad port "+80"`},
		{"offload *:90-80",
			`osf: OSF_ROUTES="offload *:90-80" (rule 1): port range 90-80 has its first port above its last`},
		{"offload *:80-",
			`osf: OSF_ROUTES="offload *:80-" (rule 1): bad port ""`},
		{"offload *:1-99999999999999999999999",
			`osf: OSF_ROUTES="offload *:1-99999999999999999999999" (rule 1): port 99999999999999999999999 out of range 1-65535`},
		{"offload localhost",
			`osf: OSF_ROUTES="offload localhost" (rule 1): bad address "localhost", want *, local, IPv4 or [IPv6]`},
		{"offload 1.2.3",
			`osf: OSF_ROUTES="offload 1.2.3" (rule 1): bad address "1.2.3", want *, local, IPv4 or [IPv6]`},
		{"offload 10.0.0.0/33",
			`osf: OSF_ROUTES="offload 10.0.0.0/33" (rule 1): prefix length 33 out of range 0-32`},
		{"offload 10.0.0.0/x",
			`osf: OSF_ROUTES="offload 10.0.0.0/x" (rule 1): bad prefix length "x"`},
		{"offload [::1/129]",
			`osf: OSF_ROUTES="offload [::1/129]" (rule 1): prefix length 129 out of range 0-128`},
		{"offload [::1",
			`osf: OSF_ROUTES="offload [::1" (rule 1): missing ']' in "[::1"`},
		{"offload [::1]80",
			`osf: OSF_ROUTES="offload [::1]80" (rule 1): unexpected "80" after ']'`},
		{"offload [1.2.3.4]:80",
			`osf: OSF_ROUTES="offload [1.2.3.4]:80" (rule 1): brackets hold IPv6 addresses, not "1.2.3.4"`},
		{"offload [local]",
			`osf: OSF_ROUTES="offload [local]" (rule 1): bad IPv6 address "local"`},
		{"offload fe80::1%eth0",
			`osf: OSF_ROUTES="offload fe80::1%eth0" (rule 1): address "fe80::1%eth0" has a zone, which rules do not support`},
		{"offload 1.2.3.4:80:90",
			`osf: OSF_ROUTES="offload 1.2.3.4:80:90" (rule 1): bad IPv6 address "1.2.3.4:80:90"`},
		{"kernel *:53\noffload \"x\"",
			`osf: OSF_ROUTES="offload \"x\"" (rule 2): bad address "\"x\"", want *, local, IPv4 or [IPv6]`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			rules, err := policy.ParseRoutes(tt.in)
			if err == nil {
				t.Fatalf("ParseRoutes = %v, want error", rules)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
			if !errors.Is(err, policy.ErrMalformed) {
				t.Errorf("errors.Is(%v, ErrMalformed) = false", err)
			}
			var pe *policy.ParseError
			if !errors.As(err, &pe) || pe.Var != "OSF_ROUTES" || pe.Rule == 0 {
				t.Errorf("error %#v is not a *ParseError for a rule of OSF_ROUTES", err)
			}
		})
	}
}

func TestPorts(t *testing.T) {
	tests := []struct {
		p    policy.Ports
		port uint16
		want bool
	}{
		{policy.Ports{}, 0, true},
		{policy.Ports{}, 65535, true},
		{policy.Ports{80, 80}, 80, true},
		{policy.Ports{80, 80}, 81, false},
		{policy.Ports{1000, 2000}, 999, false},
		{policy.Ports{1000, 2000}, 1000, true},
		{policy.Ports{1000, 2000}, 2000, true},
		{policy.Ports{1000, 2000}, 2001, false},
		{policy.Ports{1, 65535}, 0, false},
	}
	for _, tt := range tests {
		if got := tt.p.Contains(tt.port); got != tt.want {
			t.Errorf("%v.Contains(%d) = %v, want %v", tt.p, tt.port, got, tt.want)
		}
	}
}
