package main

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

// fakeProbe is a host with eth0 (10.0.0.5/24, served by mlx5_0), eth1
// (192.168.1.5/24, no RDMA) and lo; the kernel routes 172.16.0.0/12 through
// eth0 and everything else fails.
func fakeProbe(devices ...string) *rdmaProbe {
	return &rdmaProbe{
		devices: func() []string { return devices },
		deviceFor: func(netdev string) (string, error) {
			if netdev == "eth0" {
				return "mlx5_0", nil
			}
			return "", errors.New("rdma device not found for netdev " + netdev)
		},
		routeIface: func(a netip.Addr) (string, error) {
			if netip.MustParsePrefix("172.16.0.0/12").Contains(a) {
				return "eth0", nil
			}
			return "", errors.New("no route")
		},
		interfaces: func() ([]netIface, error) {
			return []netIface{
				{"lo", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")}},
				{"eth1", []netip.Prefix{netip.MustParsePrefix("192.168.1.5/24")}},
				{"eth0", []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}},
			}, nil
		},
	}
}

func TestRDMAProbe(t *testing.T) {
	tests := []struct {
		name    string
		devices []string
		addr    string
		device  string
		why     string
	}{
		{"no devices", nil, "10.0.0.7", "", "no RDMA device (no /sys/class/infiniband entries)"},
		{"own address", []string{"mlx5_0"}, "10.0.0.5", "mlx5_0 (eth0)", ""},
		{"subnet", []string{"mlx5_0"}, "10.0.0.7", "mlx5_0 (eth0)", ""},
		{"kernel route", []string{"mlx5_0"}, "172.20.1.1", "mlx5_0 (eth0)", ""},
		{"interface without device", []string{"mlx5_0", "mlx5_1"}, "192.168.1.9", "",
			"interface eth1 is not served by an RDMA device (devices: mlx5_0, mlx5_1)"},
		{"loopback", []string{"mlx5_0"}, "127.0.0.1", "", "interface lo is not served by an RDMA device (devices: mlx5_0)"},
		{"no route", []string{"mlx5_0"}, "8.8.8.8", "", "no interface routes to 8.8.8.8"},
		{"unspecified", []string{"mlx5_0"}, "0.0.0.0", "mlx5_0 (eth0)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev, ok, why := fakeProbe(tt.devices...).device(netip.MustParseAddr(tt.addr))
			if dev != tt.device || ok != (tt.device != "") || why != tt.why {
				t.Errorf("device(%s) = %q, %v, %q; want %q, %q", tt.addr, dev, ok, why, tt.device, tt.why)
			}
		})
	}

	p := fakeProbe("mlx5_0")
	p.deviceFor = func(string) (string, error) { return "", errors.New("none") }
	if _, ok, why := p.device(netip.IPv6Unspecified()); ok || why != "no network interface is served by an RDMA device (devices: mlx5_0)" {
		t.Errorf("device(::) without served interfaces = %v, %q", ok, why)
	}
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
				"  => shm listener: offloaded; rdma listener via mlx5_0 (eth0)",
			},
		},
		{
			name: "remote with RDMA",
			env:  []string{"OSF_ROUTES=offload client * 10.0.0.0/8"},
			args: []string{"--explain", "10.0.0.7:5000", "--role", "client", "--prog", "ib_send_bw"},
			want: []string{
				"client 10.0.0.7:5000, program ib_send_bw:",
				"  rule 1  yes: 10.0.0.7 in 10.0.0.0/8",
				"  => rdma via mlx5_0 (eth0): offloaded",
			},
		},
		{
			name: "remote without RDMA, program from the command",
			args: []string{"--routes", "kernel client curl *; offload *", "--explain", "192.168.1.9:443", "--role", "client", "/usr/bin/wget"},
			want: []string{
				"client 192.168.1.9:443, program wget:",
				"  rule 1  no: program wget does not match curl",
				"  rule 2  yes: any address",
				"  => kernel: peer is another host and no RDMA device serves the route: interface eth1 is not served by an RDMA device (devices: mlx5_0)",
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
			if err := explain(&b, cfg, opts, isLocal, fakeProbe("mlx5_0").device); err != nil {
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

func TestToPrefix(t *testing.T) {
	tests := []struct {
		ip   net.IP
		mask net.IPMask
		want string
	}{
		{net.ParseIP("10.0.0.5"), net.CIDRMask(24, 32), "10.0.0.5/24"},
		{net.ParseIP("10.0.0.5"), net.CIDRMask(120, 128), "10.0.0.5/24"},
		{net.ParseIP("fd00::5"), net.CIDRMask(64, 128), "fd00::5/64"},
	}
	for _, tt := range tests {
		if got := toPrefix(&net.IPNet{IP: tt.ip, Mask: tt.mask}); got.String() != tt.want {
			t.Errorf("toPrefix(%v/%v) = %v, want %s", tt.ip, tt.mask, got, tt.want)
		}
	}
}

// TestHostProbe runs the real probe; it must not fail, whatever the host.
func TestHostProbe(t *testing.T) {
	p := newRDMAProbe()
	for _, a := range []string{"127.0.0.1", "0.0.0.0", "192.0.2.1", "::1"} {
		dev, ok, why := p.device(netip.MustParseAddr(a))
		if ok == (why != "") || ok != (dev != "") {
			t.Errorf("device(%s) = %q, %v, %q: inconsistent", a, dev, ok, why)
		}
		t.Logf("device(%s) = %q, %v, %q", a, dev, ok, why)
	}
	if _, err := hostInterfaces(); err != nil {
		t.Errorf("hostInterfaces: %v", err)
	}
	name, err := kernelRoute(netip.MustParseAddr("127.0.0.1"))
	switch {
	case err != nil:
		t.Logf("kernelRoute(127.0.0.1): %v (netlink unavailable?)", err)
	case name != "lo":
		t.Errorf("kernelRoute(127.0.0.1) = %q, want lo", name)
	}
}
