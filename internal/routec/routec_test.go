package routec_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/internal/routec"
)

// seeds are rule sets for both the table test and the fuzz corpus: the
// grammar's corners (internal/policy's own fuzz seeds cover the parser
// alone), each checked against every address and role below.
var seeds = []string{
	"", "# only a comment\n;;",
	"kernel both * *:53\noffload both * local",
	"offload 10.0.0.0/8; kernel *", "offload server nginx* local:8000-8099",
	"offload client [a-c]?x [fd00::/8]:443", "offload [::ffff:10.0.0.0/104]:1-65535",
	"offload fd00::17/16", "kernel [::]:*", "offload bogus 1.2.3.4:99999", "offload *:0",
	"offload [::1", "offload fe80::1%eth0", "offload client \\* *",
	"kernel\tclient\tcurl\t*:80\r\n", "offload 1.2.3.4/33", "offload *:90-80",
	"offload *:1-99999999999999999999999",
	"offload both [^x]* 127.0.0.0/8:1000-2000; kernel client * *",
	"offload client *[ 1.2.3.4",
	"offload ::ffff:1.2.3.4/120",
	"offload 01.2.3.4",
	"offload [1::2::3]",
	"offload server * 0.0.0.0/0:80",
	"offload [::1.2.3.4]; offload [1:2:3:4:5:6:7:8:9]; offload [::ffff:1.2.3.04]",
	"offload [1:2:3:4:5:6:7::]; offload [1::2:3:4:5:6:7:8]",
	"offload [:1]", "offload [1:2:3:4:5:6:7:8]/129", "offload [0:0:0:0:0:ffff:7f00:1]/104",
	"offload [::ffff:0:0]/96:1-2", "offload [1:2:3:4:5:6:1.2.3.4]", "offload [12345::]",
	"offload local:*; kernel [::]/0", "offload 1.2.3.4/08", "offload 1.2.3.4/", "offload 256.1.1.1",
	"gateway 10.0.0.1:7000 client * 192.0.2.0/24", "gateway bogus",
}

var vars = []string{
	"", "OSF_TRANSPORT=shm", "OSF_TRANSPORT=RDMA", "OSF_TRANSPORT=kernel", "OSF_TRANSPORT=Auto",
	"OSF_TRANSPORT=tcp", "OSF_STRICT=1", "OSF_STRICT=yes", "OSF_RING_SIZE=64k", "OSF_RING_SIZE=3M",
	"OSF_RING_SIZE=128M", "OSF_GATEWAY_TIMEOUT_MS=0", "OSF_GATEWAY_TIMEOUT_MS=600000", "OSF_LOG_LEVEL=DEBUG", "OSF_LOG_LEVEL=loud", "OSF_SPIN_US=1000001",
	"OSF_CONNECT_TIMEOUT_MS=0", "OSF_DEBUG_RDMA_SIM=1", "OSF_RDMA_LINKS=1", "OSF_RDMA_LINKS=on", "OSF_ROUTES", "OSF_RING_SIZE=",
}

// check compares the C evaluator with internal/policy for one
// configuration and one query.
func check(t *testing.T, env []string, server bool, prog string, ap netip.AddrPort, local bool) {
	t.Helper()
	cfg, err := policy.Parse(env)
	cc, rc := routec.Parse(env)
	switch {
	case rc == routec.Unsupported:
		return
	case rc == routec.Malformed && err == nil:
		t.Fatalf("env %q: C says malformed, Go accepts", env)
	case rc == routec.OK && err != nil:
		t.Fatalf("env %q: C accepts, Go says %v", env, err)
	case rc != routec.OK:
		return
	}
	defer cc.Free()
	if cc.RingSize != cfg.RingSize || (cc.Strict != 0) != cfg.Strict || cc.Mode != int(cfg.Transport) {
		t.Fatalf("env %q: C ring %d strict %d mode %d, Go %d %v %d", env, cc.RingSize, cc.Strict, cc.Mode,
			cfg.RingSize, cfg.Strict, cfg.Transport)
	}
	role := policy.Client
	if server {
		role = policy.Server
	}
	probed := false
	q := policy.Query{
		Role: role, Program: prog, Addr: ap,
		IsLocal: func(netip.Addr) bool { return local },
		RDMADevice: func(netip.Addr) (string, bool, string) {
			probed = true
			return "", false, routec.NoDevice
		},
	}
	want := cfg.Decide(q)
	got := cc.Decide(server, prog, ap, local, true)
	if got.NeedGo {
		if isASCII(prog) {
			t.Fatalf("env %q %s %v %q: C needs Go without an RDMA question", env, ap, role, prog)
		}
		return
	}
	if got.Transport != int(want.Transport) || got.Rule != want.Rule || got.Reason != int(want.Reason) ||
		got.Detail != want.Detail || want.RDMA {
		t.Fatalf("env %q, %v %s prog %q local %v: C %+v, Go %+v", env, role, ap, prog, local, got, want)
	}
	got = cc.Decide(server, prog, ap, local, false)
	if got.NeedGo != probed {
		t.Fatalf("env %q, %v %s: C asks for the RDMA probe %v, Go probed %v", env, role, ap, got.NeedGo, probed)
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

var addrs = []string{
	"127.0.0.1:80", "127.9.9.9:53", "10.1.2.3:8000", "0.0.0.0:8080", "[::1]:443", "[::]:80",
	"[fd00::17]:443", "[::ffff:10.1.2.3]:5000", "[::ffff:127.0.0.1]:53", "192.0.2.1:1", "1.2.3.4:65535",
}

// TestAgreeTable runs every seed configuration against every address,
// role, program and locality.
func TestAgreeTable(t *testing.T) {
	for _, r := range seeds {
		for _, v := range vars {
			env := []string{"OSF_ROUTES=" + r}
			if v != "" {
				env = append(env, v)
			}
			for _, a := range addrs {
				ap := netip.MustParseAddrPort(a)
				for _, server := range []bool{false, true} {
					for _, prog := range []string{"", "curl", "nginx-worker", "bx", "x"} {
						for _, local := range []bool{false, true} {
							check(t, env, server, prog, ap, local)
						}
					}
				}
			}
		}
	}
	check(t, nil, false, "curl", netip.MustParseAddrPort("127.0.0.1:53"), false)
	check(t, nil, false, "curl", netip.MustParseAddrPort("10.0.0.1:80"), true)
}

// FuzzAgree is the differential test: the same configuration and query
// give the same decision in C and in Go.
func FuzzAgree(f *testing.F) {
	for i, r := range seeds {
		f.Add(r, vars[i%len(vars)], []byte{127, 0, 0, 1}, uint16(80), i%2 == 0, "curl", i%3 == 0)
	}
	f.Add("offload [fd00::/8]", "", []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(443), false, "x", false)
	f.Fuzz(func(t *testing.T, routes, extra string, addr []byte, port uint16, server bool, prog string, local bool) {
		var ap netip.AddrPort
		switch len(addr) {
		case 4:
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(addr)), port)
		case 16:
			ap = netip.AddrPortFrom(netip.AddrFrom16([16]byte(addr)), port)
		default:
			return
		}
		if strings.ContainsAny(routes+extra, "\x00") {
			return
		}
		prog = strings.ReplaceAll(strings.ReplaceAll(prog, "/", ""), "\x00", "")
		env := []string{"OSF_ROUTES=" + routes}
		if extra != "" {
			env = append(env, extra)
		}
		check(t, env, server, prog, ap, local)
	})
}
