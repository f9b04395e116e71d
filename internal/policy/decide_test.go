package policy_test

import (
	"net/netip"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

// Fake host: 10.0.0.5 and fd00::5 are assigned to it.
func fakeIsLocal(a netip.Addr) bool {
	return a == netip.MustParseAddr("10.0.0.5") || a == netip.MustParseAddr("fd00::5")
}

// Fake RDMA: a device serves 10.0.0.0/8 and 192.168.0.0/16; the unspecified
// address asks whether any device exists.
func fakeRDMA(a netip.Addr) (string, bool, string) {
	if a.IsUnspecified() || netip.MustParsePrefix("10.0.0.0/8").Contains(a) || netip.MustParsePrefix("192.168.0.0/16").Contains(a) {
		return "mlx5_0", true, ""
	}
	return "", false, "no route"
}

func noRDMA(netip.Addr) (string, bool, string) { return "", false, "no RDMA device" }

func config(t *testing.T, env ...string) *policy.Config {
	t.Helper()
	c, err := policy.Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMatch checks which rule matches; the rules' actions do not matter here.
func TestMatch(t *testing.T) {
	const routes = `
		kernel client * 10.9.9.9:1        # 1
		kernel server * 10.9.9.9:1        # 2
		kernel both nginx* *:8080         # 3
		kernel both ? *:8081              # 4
		kernel 192.168.0.0/16:1000-2000   # 5
		kernel [fd00::/16]:443            # 6
		kernel both * local:9000          # 7
		kernel *:9001 ; kernel *:9001     # 8, 9
		kernel [2001:db8::1]              # 10
		kernel 172.16.0.0/12              # 11
	`
	c := config(t, "OSF_ROUTES="+routes)
	addr := netip.MustParseAddrPort
	tests := []struct {
		name    string
		role    policy.Role
		program string
		addr    string
		want    int
	}{
		{"client role", policy.Client, "x", "10.9.9.9:1", 1},
		{"server role", policy.Server, "x", "10.9.9.9:1", 2},
		{"zero role is client", 0, "x", "10.9.9.9:1", 1},
		{"program glob", policy.Client, "nginx", "1.1.1.1:8080", 3},
		{"program glob suffix", policy.Client, "nginx-worker", "1.1.1.1:8080", 3},
		{"program glob miss", policy.Client, "curl", "1.1.1.1:8080", 0},
		{"program path is cut to base name", policy.Client, "/usr/sbin/nginx", "1.1.1.1:8080", 3},
		{"any program matches every glob", policy.Client, "", "1.1.1.1:8080", 3},
		{"single character glob", policy.Client, "a", "1.1.1.1:8081", 4},
		{"single character glob miss", policy.Client, "ab", "1.1.1.1:8081", 0},
		{"prefix and port range low", policy.Client, "x", "192.168.3.4:1000", 5},
		{"prefix and port range high", policy.Client, "x", "192.168.3.4:2000", 5},
		{"port below range", policy.Client, "x", "192.168.3.4:999", 0},
		{"port above range", policy.Client, "x", "192.168.3.4:2001", 0},
		{"IPv6 prefix", policy.Client, "x", "[fd00:1::2]:443", 6},
		{"IPv6 prefix other port", policy.Client, "x", "[fd00:1::2]:444", 0},
		{"IPv6 zone dropped", policy.Client, "x", "[fd00:1::2%eth0]:443", 6},
		{"v4-mapped matches IPv4 rule", policy.Client, "x", "[::ffff:192.168.1.1]:1500", 5},
		{"v4-mapped never matches IPv6 rule", policy.Client, "x", "[::ffff:10.0.0.1]:443", 0},
		{"IPv4 never matches IPv6 rule", policy.Client, "x", "10.0.0.1:443", 0},
		{"local by IsLocal", policy.Client, "x", "10.0.0.5:9000", 7},
		{"local IPv6 by IsLocal", policy.Client, "x", "[fd00::5]:9000", 7},
		{"loopback is local", policy.Client, "x", "127.1.2.3:9000", 7},
		{"IPv6 loopback is local", policy.Client, "x", "[::1]:9000", 7},
		{"v4-mapped loopback is local", policy.Client, "x", "[::ffff:127.0.0.1]:9000", 7},
		{"unspecified destination is local", policy.Client, "x", "0.0.0.0:9000", 7},
		{"remote is not local", policy.Client, "x", "10.0.0.6:9000", 0},
		{"first match wins", policy.Client, "x", "1.1.1.1:9001", 8},
		{"IPv6 host", policy.Client, "x", "[2001:db8::1]:1", 10},
		{"IPv6 host miss", policy.Client, "x", "[2001:db8::2]:1", 0},
		{"wildcard listener matches a prefix rule", policy.Server, "x", "0.0.0.0:1500", 5},
		{"wildcard IPv6 listener matches an IPv4 rule", policy.Server, "x", "[::]:1500", 5},
		{"wildcard IPv4 listener matches an IPv6 rule", policy.Server, "x", "0.0.0.0:443", 6},
		{"wildcard listener matches local", policy.Server, "x", "0.0.0.0:9000", 7},
		{"wildcard listener matches any host rule", policy.Server, "x", "0.0.0.0:1", 2},
		{"wildcard listener needs the ports to fit", policy.Server, "x", "0.0.0.0:2", 10},
		{"specific listener", policy.Server, "x", "172.20.0.1:7", 11},
		{"specific listener outside prefix", policy.Server, "x", "172.32.0.1:7", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := c.Decide(policy.Query{Role: tt.role, Program: tt.program, Addr: addr(tt.addr), IsLocal: fakeIsLocal})
			if d.Rule != tt.want {
				t.Errorf("Decide(%s %s %s).Rule = %d (%s), want %d", tt.role, tt.program, tt.addr, d.Rule, d.RuleText, tt.want)
			}
		})
	}
}

func TestDefaultRules(t *testing.T) {
	c := policy.Default()
	tests := []struct {
		role     policy.Role
		addr     string
		rule     int
		ruleText string
	}{
		{policy.Client, "127.0.0.1:53", 1, "kernel both * *:53"},
		{policy.Server, "0.0.0.0:53", 1, "kernel both * *:53"},
		{policy.Client, "127.0.0.1:80", 2, "offload both * local"},
		{policy.Client, "10.0.0.5:80", 2, "offload both * local"},
		{policy.Server, "[::]:80", 2, "offload both * local"},
		{policy.Client, "8.8.8.8:443", 0, "kernel both * *"},
	}
	for _, tt := range tests {
		d := c.Decide(policy.Query{Role: tt.role, Addr: netip.MustParseAddrPort(tt.addr), IsLocal: fakeIsLocal})
		if d.Rule != tt.rule || d.RuleText != tt.ruleText {
			t.Errorf("Decide(%s %s) matched rule %d %q, want %d %q", tt.role, tt.addr, d.Rule, d.RuleText, tt.rule, tt.ruleText)
		}
	}
}

func TestDecide(t *testing.T) {
	const routes = "kernel *:53; offload *:1-1000; offload server *"
	tests := []struct {
		name   string
		mode   string
		role   policy.Role
		addr   string
		rdma   func(netip.Addr) (string, bool, string)
		want   policy.Decision
		string string
	}{
		{"kernel rule", "auto", policy.Client, "10.0.0.5:53", fakeRDMA,
			policy.Decision{Transport: policy.Kernel, Rule: 1, RuleText: "kernel *:53", Reason: policy.ReasonRule},
			"kernel: route rule 1 chose kernel"},
		{"implicit rule", "auto", policy.Client, "10.0.0.5:2000", fakeRDMA,
			policy.Decision{Transport: policy.Kernel, RuleText: "kernel both * *", Reason: policy.ReasonNoRule},
			"kernel: no route rule matched"},

		// Client to this host.
		{"local auto", "auto", policy.Client, "10.0.0.5:80", fakeRDMA,
			policy.Decision{Transport: policy.Shm, Rule: 2, RuleText: "offload *:1-1000"}, "shm (rule 2)"},
		{"local shm", "shm", policy.Client, "127.0.0.1:80", noRDMA,
			policy.Decision{Transport: policy.Shm, Rule: 2, RuleText: "offload *:1-1000"}, "shm (rule 2)"},
		{"local rdma with device", "rdma", policy.Client, "10.0.0.5:80", fakeRDMA,
			policy.Decision{Transport: policy.RDMA, Rule: 2, RuleText: "offload *:1-1000", Device: "mlx5_0"}, "rdma via mlx5_0 (rule 2)"},
		{"local rdma without device", "rdma", policy.Client, "127.0.0.1:80", noRDMA,
			policy.Decision{Transport: policy.Kernel, Rule: 2, RuleText: "offload *:1-1000", Reason: policy.ReasonNoRDMADevice, Detail: "no RDMA device"},
			"kernel: peer is another host and no RDMA device serves the route: no RDMA device"},
		{"local kernel", "kernel", policy.Client, "127.0.0.1:80", fakeRDMA,
			policy.Decision{Transport: policy.Kernel, Rule: 2, RuleText: "offload *:1-1000", Reason: policy.ReasonTransportKernel},
			"kernel: OSF_TRANSPORT=kernel"},

		// Client to another host.
		{"remote auto with device", "auto", policy.Client, "192.168.1.1:80", fakeRDMA,
			policy.Decision{Transport: policy.RDMA, Rule: 2, RuleText: "offload *:1-1000", Device: "mlx5_0"}, "rdma via mlx5_0 (rule 2)"},
		{"remote auto without device", "auto", policy.Client, "8.8.8.8:80", fakeRDMA,
			policy.Decision{Transport: policy.Kernel, Rule: 2, RuleText: "offload *:1-1000", Reason: policy.ReasonNoRDMADevice, Detail: "no route"},
			"kernel: peer is another host and no RDMA device serves the route: no route"},
		{"remote without probe", "auto", policy.Client, "8.8.8.8:80", nil,
			policy.Decision{Transport: policy.Kernel, Rule: 2, RuleText: "offload *:1-1000", Reason: policy.ReasonNoRDMADevice, Detail: "RDMA devices not probed"},
			"kernel: peer is another host and no RDMA device serves the route: RDMA devices not probed"},
		{"remote rdma with device", "rdma", policy.Client, "192.168.1.1:80", fakeRDMA,
			policy.Decision{Transport: policy.RDMA, Rule: 2, RuleText: "offload *:1-1000", Device: "mlx5_0"}, "rdma via mlx5_0 (rule 2)"},
		{"remote shm", "shm", policy.Client, "192.168.1.1:80", fakeRDMA,
			policy.Decision{Transport: policy.Kernel, Rule: 2, RuleText: "offload *:1-1000", Reason: policy.ReasonShmRemote},
			"kernel: OSF_TRANSPORT=shm and the peer is another host"},
		{"remote kernel", "kernel", policy.Client, "192.168.1.1:80", fakeRDMA,
			policy.Decision{Transport: policy.Kernel, Rule: 2, RuleText: "offload *:1-1000", Reason: policy.ReasonTransportKernel},
			"kernel: OSF_TRANSPORT=kernel"},

		// Server.
		{"server auto with device", "auto", policy.Server, "0.0.0.0:8080", fakeRDMA,
			policy.Decision{Transport: policy.Shm, Rule: 3, RuleText: "offload server *", RDMA: true, Device: "mlx5_0"},
			"shm and rdma via mlx5_0 (rule 3)"},
		{"server auto without device", "auto", policy.Server, "127.0.0.1:8080", noRDMA,
			policy.Decision{Transport: policy.Shm, Rule: 3, RuleText: "offload server *", NoRDMA: "no RDMA device"}, "shm (rule 3)"},
		{"server shm", "shm", policy.Server, "0.0.0.0:8080", fakeRDMA,
			policy.Decision{Transport: policy.Shm, Rule: 3, RuleText: "offload server *"}, "shm (rule 3)"},
		{"server rdma with device", "rdma", policy.Server, "10.0.0.5:8080", fakeRDMA,
			policy.Decision{Transport: policy.RDMA, Rule: 3, RuleText: "offload server *", RDMA: true, Device: "mlx5_0"},
			"rdma via mlx5_0 (rule 3)"},
		{"server rdma without device", "rdma", policy.Server, "127.0.0.1:8080", noRDMA,
			policy.Decision{Transport: policy.Kernel, Rule: 3, RuleText: "offload server *", Reason: policy.ReasonNoRDMADevice, Detail: "no RDMA device"},
			"kernel: peer is another host and no RDMA device serves the route: no RDMA device"},
		{"server kernel", "kernel", policy.Server, "0.0.0.0:8080", fakeRDMA,
			policy.Decision{Transport: policy.Kernel, Rule: 3, RuleText: "offload server *", Reason: policy.ReasonTransportKernel},
			"kernel: OSF_TRANSPORT=kernel"},
		{"client skips server rule", "auto", policy.Client, "10.0.0.5:8080", fakeRDMA,
			policy.Decision{Transport: policy.Kernel, RuleText: "kernel both * *", Reason: policy.ReasonNoRule},
			"kernel: no route rule matched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config(t, "OSF_ROUTES="+routes, "OSF_TRANSPORT="+tt.mode)
			q := policy.Query{Role: tt.role, Addr: netip.MustParseAddrPort(tt.addr), IsLocal: fakeIsLocal, RDMADevice: tt.rdma}
			d := c.Decide(q)
			if d != tt.want {
				t.Errorf("Decide\n got %+v\nwant %+v", d, tt.want)
			}
			if s := d.String(); s != tt.string {
				t.Errorf("String() = %q, want %q", s, tt.string)
			}
		})
	}
}

func TestDecideNoRules(t *testing.T) {
	c := config(t, "OSF_ROUTES=# nothing")
	d := c.Decide(policy.Query{Role: policy.Client, Addr: netip.MustParseAddrPort("127.0.0.1:80")})
	want := policy.Decision{Transport: policy.Kernel, RuleText: "kernel both * *", Reason: policy.ReasonNoRule}
	if d != want {
		t.Errorf("Decide = %+v, want %+v", d, want)
	}
}

func TestDecideInvalidAddr(t *testing.T) {
	c := config(t, "OSF_ROUTES=offload 10.0.0.0/8; offload local; offload *")
	d := c.Decide(policy.Query{Role: policy.Client, RDMADevice: fakeRDMA})
	if d.Rule != 3 || d.Transport != policy.Kernel || d.Reason != policy.ReasonNoRDMADevice {
		t.Errorf("Decide(zero address) = %+v, want rule 3, kernel, no RDMA device", d)
	}
}
