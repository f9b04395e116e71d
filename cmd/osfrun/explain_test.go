package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/verbs/devroute"
)

// fakeDevice is the RDMA probe of a host whose eth0 (10.0.0.5/24) is served
// by mlx5_0 and whose eth1 (192.168.1.5/24) is not.
func fakeDevice(a netip.Addr) (string, bool, string) {
	if a.IsUnspecified() || netip.MustParsePrefix("10.0.0.0/24").Contains(a) {
		return "mlx5_0 port 1", true, ""
	}
	return "", false, "no RDMA device serves address 192.168.1.5 (interface eth1): no device's GID table lists it"
}

func TestExplain(t *testing.T) {
	isLocal := func(a netip.Addr) bool {
		return a == netip.MustParseAddr("10.0.0.5") || a == netip.MustParseAddr("192.168.1.5")
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string // lines of the query sections, in order
	}{
		{
			name: "local, both roles",
			args: []string{"--explain", "10.0.0.5:80"},
			want: []string{
				"client 10.0.0.5:80, program any:",
				"  rule 2  yes: 10.0.0.5 is local (assigned to this host)",
				"  => shm: offloaded",
				"server 10.0.0.5:80, program any:",
				"  => shm listener: offloaded; rdma listener via mlx5_0 port 1",
			},
		},
		{
			name: "remote with RDMA",
			env:  []string{"OSF_ROUTES=offload client * 10.0.0.0/8"},
			args: []string{"--explain", "10.0.0.7:5000", "--role", "client", "--prog", "ib_send_bw"},
			want: []string{
				"client 10.0.0.7:5000, program ib_send_bw:",
				"  rule 1  yes: 10.0.0.7 in 10.0.0.0/8",
				"  => rdma via mlx5_0 port 1: offloaded",
			},
		},
		{
			name: "remote without RDMA, program from the command",
			args: []string{"--routes", "kernel client curl *; offload *", "--explain", "192.168.1.9:443", "--role", "client", "/usr/bin/wget"},
			want: []string{
				"client 192.168.1.9:443, program wget:",
				"  rule 1  no: program wget does not match curl",
				"  rule 2  yes: any address",
				"  => kernel: peer is another host and no RDMA device serves the route: no RDMA device serves address 192.168.1.5 (interface eth1): no device's GID table lists it",
			},
		},
		{
			name: "IPv6 server",
			args: []string{"--explain", "[::]:8080", "--role", "server", "--transport", "shm"},
			want: []string{
				"server [::]:8080, program any:",
				"  rule 2  yes: listening on every address",
				"  => shm listener: offloaded",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := parseArgs(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := policy.Parse(opts.apply(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := explain(&b, cfg, opts, isLocal, fakeDevice); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			rest := out
			for _, line := range tt.want {
				i := strings.Index(rest, line+"\n")
				if i < 0 {
					t.Fatalf("output lacks line %q (in order):\n%s", line, out)
				}
				rest = rest[i+len(line):]
			}
		})
	}
}

// TestExplainProbesOnce: --explain for both roles asks the RDMA probe
// once per address, not once per role.
func TestExplainProbesOnce(t *testing.T) {
	opts, err := parseArgs([]string{"--routes", "offload both * 10.0.0.0/24", "--explain", "10.0.0.7:80"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(opts.apply(nil))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	probe := func(a netip.Addr) (string, bool, string) { calls++; return fakeDevice(a) }
	var b strings.Builder
	local := func(netip.Addr) bool { return false }
	if err := explain(&b, cfg, opts, local, probe); err != nil {
		t.Fatal(err)
	}
	if calls > 1 {
		t.Errorf("the RDMA probe ran %d times for one address:\n%s", calls, b.String())
	}
}

// TestHostDevice runs the real probe; it must not fail, whatever the host,
// and it is the core's algorithm (devroute).
func TestHostDevice(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "0.0.0.0", "192.0.2.1", "::1"} {
		addr := netip.MustParseAddr(a)
		dev, ok, why := hostDevice(addr)
		if ok == (why != "") || ok != (dev != "") {
			t.Errorf("hostDevice(%s) = %q, %v, %q: inconsistent", a, dev, ok, why)
		}
		if d2, ok2, why2 := devroute.System.ForRoute(addr); d2 != dev || ok2 != ok || why2 != why {
			t.Errorf("hostDevice(%s) = %q, %q; devroute says %q, %q", a, dev, why, d2, why2)
		}
	}
}
