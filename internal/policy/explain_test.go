package policy_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

func TestExplain(t *testing.T) {
	q := func(role policy.Role, program, addr string) policy.Query {
		return policy.Query{Role: role, Program: program, Addr: netip.MustParseAddrPort(addr), IsLocal: fakeIsLocal, RDMADevice: fakeRDMA}
	}
	tests := []struct {
		name string
		env  []string
		qs   []policy.Query
		want string
	}{
		{
			name: "default rules",
			qs: []policy.Query{
				q(policy.Client, "", "8.8.8.8:80"),
				q(policy.Client, "curl", "10.0.0.5:80"),
				q(policy.Server, "nginx", "0.0.0.0:53"),
			},
			want: `routes (default, OSF_ROUTES is unset):
  1  kernel both * *:53
  2  offload both * local
     (implicit) kernel both * *
transport=auto strict=0

client 8.8.8.8:80, program any:
  rule 1  no: port 80 not in 53
  rule 2  no: 8.8.8.8 is not local
  (implicit) yes: no rule matched
  => kernel: no route rule matched
     hint: Add an offload rule for this address to OSF_ROUTES; the default rules offload only addresses of this host.

client 10.0.0.5:80, program curl:
  rule 1  no: port 80 not in 53
  rule 2  yes: 10.0.0.5 is local (assigned to this host)
  => shm: offloaded
     note: kernel TCP instead if the peer has no osf listener

server 0.0.0.0:53, program nginx:
  rule 1  yes: any address, port 53 in 53
  => kernel: route rule 1 chose kernel
     hint: Change OSF_ROUTES (or osfrun --routes) so that an offload rule matches before this kernel rule; osfrun --explain ADDR:PORT shows which rule matches.
`,
		},
		{
			name: "configured rules, strict",
			env: []string{"OSF_STRICT=1", "OSF_ROUTES=kernel client curl *;offload server 10.1.2.3/8:80 ; offload [fd00::/8]" +
				";offload 1.0.0.0;offload 2.0.0.0;offload 3.0.0.0;offload 4.0.0.0;offload 5.0.0.0;offload 6.0.0.0;offload 7.0.0.0"},
			qs: []policy.Query{
				q(policy.Client, "/usr/bin/wget", "[fd00::9]:443"),
				q(policy.Server, "a", "[::ffff:10.9.9.9]:80"),
				q(policy.Server, "a", "127.0.0.1:80"),
			},
			want: `routes (OSF_ROUTES):
   1  kernel client curl *
   2  offload server 10.1.2.3/8:80
   3  offload [fd00::/8]
   4  offload 1.0.0.0
   5  offload 2.0.0.0
   6  offload 3.0.0.0
   7  offload 4.0.0.0
   8  offload 5.0.0.0
   9  offload 6.0.0.0
  10  offload 7.0.0.0
      (implicit) kernel both * *
transport=auto strict=1

client [fd00::9]:443, program wget:
  rule  1  no: program wget does not match curl
  rule  2  no: rule is for servers only
  rule  3  yes: fd00::9 in fd00::/8
  => kernel: peer is another host and no RDMA device serves the route: no route
     hint: Reach the peer through an interface served by an RDMA device (see rdma link or ibv_devices), or route the address to kernel on purpose.
     strict: OSF_STRICT=1 makes this fail instead of falling back

server [::ffff:10.9.9.9]:80 (matched as 10.9.9.9:80), program a:
  rule  1  no: rule is for clients only
  rule  2  yes: 10.9.9.9 in 10.0.0.0/8, port 80 in 80
  => shm listener: offloaded; rdma listener via mlx5_0

server 127.0.0.1:80, program a:
  rule  1  no: rule is for clients only
  rule  2  no: 127.0.0.1 not in 10.0.0.0/8
  rule  3  no: 127.0.0.1 not in fd00::/8
  rule  4  no: 127.0.0.1 is not 1.0.0.0
  rule  5  no: 127.0.0.1 is not 2.0.0.0
  rule  6  no: 127.0.0.1 is not 3.0.0.0
  rule  7  no: 127.0.0.1 is not 4.0.0.0
  rule  8  no: 127.0.0.1 is not 5.0.0.0
  rule  9  no: 127.0.0.1 is not 6.0.0.0
  rule 10  no: 127.0.0.1 is not 7.0.0.0
  (implicit) yes: no rule matched
  => kernel: no route rule matched
     hint: Add an offload rule for this address to OSF_ROUTES; the default rules offload only addresses of this host.
`,
		},
		{
			name: "no rules, rdma",
			env:  []string{"OSF_ROUTES=", "OSF_TRANSPORT=rdma"},
			want: `routes (OSF_ROUTES has no rules):
     (implicit) kernel both * *
transport=rdma strict=0
`,
		},
		{
			name: "rdma transport",
			env:  []string{"OSF_ROUTES=offload server * local ; offload client * *", "OSF_TRANSPORT=rdma"},
			qs: []policy.Query{
				q(policy.Client, "x", "[::ffff:10.0.0.7]:80"),
				q(policy.Server, "x", "127.0.0.1:80"),
				q(policy.Server, "x", "[::]:80"),
			},
			want: `routes (OSF_ROUTES):
  1  offload server * local
  2  offload client * *
     (implicit) kernel both * *
transport=rdma strict=0

client [::ffff:10.0.0.7]:80 (matched as 10.0.0.7:80), program x:
  rule 1  no: rule is for servers only
  rule 2  yes: any address
  => rdma via mlx5_0: offloaded
     note: kernel TCP instead if the peer has no osf listener

server 127.0.0.1:80, program x:
  rule 1  yes: 127.0.0.1 is local (loopback)
  => kernel: peer is another host and no RDMA device serves the route: no route
     hint: Reach the peer through an interface served by an RDMA device (see rdma link or ibv_devices), or route the address to kernel on purpose.

server [::]:80, program x:
  rule 1  yes: listening on every address
  => rdma listener via mlx5_0: offloaded
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config(t, tt.env...)
			var b strings.Builder
			if err := c.Explain(&b, tt.qs...); err != nil {
				t.Fatalf("Explain: %v", err)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("Explain wrote\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestExplainAgreesWithDecide checks that Explain marks as matching the rule
// that Decide picks.
func TestExplainAgreesWithDecide(t *testing.T) {
	c := config(t, "OSF_ROUTES=kernel client * 10.0.0.0/8:22; offload server ng* *; offload local:1-1024; kernel [::/0]")
	for _, addr := range []string{"10.0.0.5:22", "10.0.0.5:80", "10.0.0.6:80", "[::1]:80", "[fd00::9]:9000", "0.0.0.0:22"} {
		for _, role := range []policy.Role{policy.Client, policy.Server} {
			q := policy.Query{Role: role, Program: "nginx", Addr: netip.MustParseAddrPort(addr), IsLocal: fakeIsLocal}
			d := c.Decide(q)
			var b strings.Builder
			if err := c.Explain(&b, q); err != nil {
				t.Fatal(err)
			}
			mark := "(implicit) yes:"
			if d.Rule > 0 {
				mark = "rule " + string(rune('0'+d.Rule)) + "  yes:"
			}
			if !strings.Contains(b.String(), mark) {
				t.Errorf("%s %s: Decide chose rule %d but Explain says\n%s", role, addr, d.Rule, b.String())
			}
		}
	}
}

func TestExplainHostRule(t *testing.T) {
	c := config(t, "OSF_ROUTES=offload client 10.0.0.5:80")
	var b strings.Builder
	q := policy.Query{Role: policy.Client, Addr: netip.MustParseAddrPort("10.0.0.5:80"), IsLocal: fakeIsLocal}
	if err := c.Explain(&b, q); err != nil {
		t.Fatal(err)
	}
	if want := "  rule 1  yes: 10.0.0.5 is the rule's address, port 80 in 80\n"; !strings.Contains(b.String(), want) {
		t.Errorf("Explain lacks %q:\n%s", want, b.String())
	}
}

type failWriter struct{}

var errWrite = errors.New("write failed")

func (failWriter) Write([]byte) (int, error) { return 0, errWrite }

func TestExplainWriteError(t *testing.T) {
	if err := policy.Default().Explain(failWriter{}); !errors.Is(err, errWrite) {
		t.Errorf("Explain = %v, want %v", err, errWrite)
	}
}
