package shm

import (
	"flag"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/internal/testutil"
)

// manyAddrs is more interface addresses than libosf.so's list once held
// (64): "local" has no cap.
const manyAddrs = 100

var addOnce sync.Once

// addHostAddrs gives lo, in the tests' private network namespace, manyAddrs
// IPv4 addresses and two IPv6 ones, and waits until both address caches
// (2 s) have surely expired; it returns them.
func addHostAddrs(t testing.TB) []netip.Addr {
	var addrs []netip.Addr
	for i := 1; i <= manyAddrs; i++ {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 77, byte(i >> 8), byte(i)}))
	}
	addrs = append(addrs, netip.MustParseAddr("fd00::77"), netip.MustParseAddr("2001:db8::77"))
	if !testutil.InNetns() {
		return nil // not in a namespace of its own: leave the host alone
	}
	if w := flag.Lookup("test.fuzzworker"); w != nil && w.Value.String() == "true" {
		return addrs // the coordinator, in the same namespace, added them
	}
	addOnce.Do(func() {
		var b strings.Builder
		for _, a := range addrs {
			bits := 32
			if a.Is6() {
				bits = 128
			}
			fmt.Fprintf(&b, "addr add %s/%d dev lo\n", a, bits)
		}
		cmd := exec.Command("ip", "-force", "-batch", "-")
		cmd.Stdin = strings.NewReader(b.String())
		if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
			t.Fatalf("ip addr add: %v: %s", err, out)
		}
		time.Sleep(2100 * time.Millisecond)
	})
	return addrs
}

// TestIsLocalNoCap: every address of this host is local, however many.
func TestIsLocalNoCap(t *testing.T) {
	addrs := addHostAddrs(t)
	if addrs == nil {
		t.Skip("not in a private network namespace")
	}
	for _, a := range addrs {
		if !IsLocal(a) || !policy.IsLocal(a) {
			t.Errorf("%s: C says local %v, Go %v; want both true", a, IsLocal(a), policy.IsLocal(a))
		}
	}
	for _, a := range []string{"10.77.1.1", "192.0.2.1", "fd00::78"} {
		if IsLocal(netip.MustParseAddr(a)) {
			t.Errorf("%s: C says local", a)
		}
	}
}

// FuzzIsLocalAgree holds policy.IsLocal (Go, for osfrun, built without
// cgo) to libosf.so's osf_addr_local (C, IsLocal here): the same answer
// for every address, IPv4, v4-mapped or IPv6, the interfaces' included
// (the seeds are fixed: every fuzzing process must see the same ones).
func FuzzIsLocalAgree(f *testing.F) {
	seed := func(a netip.Addr) { b := a.As16(); f.Add(b[:], a.Is4()) }
	for _, s := range []string{"127.0.0.1", "127.255.0.9", "0.0.0.0", "::", "::1", "::2",
		"::ffff:127.0.0.1", "::ffff:0.0.0.0", "10.77.0.1", "10.77.0.100", "10.77.0.101",
		"fd00::77", "::ffff:10.77.0.50", "fe80::1", "128.0.0.1", "192.0.2.1", "2001:db8::77"} {
		seed(netip.MustParseAddr(s))
	}
	addHostAddrs(f) // the seeds above include some of them
	f.Fuzz(func(t *testing.T, b []byte, v4 bool) {
		var raw [16]byte
		copy(raw[:], b)
		a := netip.AddrFrom16(raw)
		if v4 {
			a = netip.AddrFrom4([4]byte(raw[12:]))
		}
		if c, g := IsLocal(a), policy.IsLocal(a); c != g {
			t.Fatalf("%s: C (osf_addr_local) says local %v, Go (policy.IsLocal) %v", a, c, g)
		}
	})
}
