package policy

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestAddrCache(t *testing.T) {
	now := time.Unix(1000, 0)
	loads := 0
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fe80::1%eth0")}
	var loadErr error
	c := &addrCache{
		load: func() ([]netip.Addr, error) {
			loads++
			return addrs, loadErr
		},
		now: func() time.Time { return now },
		ttl: time.Second,
	}
	check := func(a string, want bool) {
		t.Helper()
		if got := isLocal(netip.MustParseAddr(a), c.has); got != want {
			t.Errorf("isLocal(%s) = %v, want %v", a, got, want)
		}
	}

	check("127.0.0.1", true) // loopback needs no load
	if loads != 0 {
		t.Errorf("loopback loaded the address list")
	}
	check("10.0.0.5", true)
	check("::ffff:10.0.0.5", true)
	check("fe80::1", true)
	check("fe80::1%eth1", true)
	check("10.0.0.6", false)
	if loads != 1 {
		t.Errorf("loaded %d times within the TTL, want 1", loads)
	}

	now = now.Add(time.Second)
	addrs = []netip.Addr{netip.MustParseAddr("10.0.0.6")}
	check("10.0.0.6", true)
	check("10.0.0.5", false)
	if loads != 2 {
		t.Errorf("loaded %d times after the TTL, want 2", loads)
	}

	now = now.Add(time.Second)
	addrs, loadErr = nil, errors.New("no netlink")
	check("10.0.0.6", false)
	check("::1", true)
}

func TestIsLocal(t *testing.T) {
	// Unspecified addresses are local: connect to 0.0.0.0 or :: reaches
	// 127.0.0.1 or ::1 on Linux.
	for _, a := range []string{"127.0.0.1", "::1", "::ffff:127.0.0.2", "0.0.0.0", "::", "::ffff:0.0.0.0"} {
		if !IsLocal(netip.MustParseAddr(a)) {
			t.Errorf("IsLocal(%s) = false, want true", a)
		}
	}
	addrs, err := interfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	for _, a := range addrs {
		if !IsLocal(a) {
			t.Errorf("IsLocal(%s) = false for an interface address", a)
		}
	}
	testNet := netip.MustParseAddr("192.0.2.1") // TEST-NET-1, not normally assigned
	if !slices.Contains(addrs, testNet) && IsLocal(testNet) {
		t.Errorf("IsLocal(%s) = true, but no interface has it", testNet)
	}
}
