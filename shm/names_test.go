package shm

import (
	"math/rand"
	"net/netip"
	"reflect"
	"testing"
)

func TestNames(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		addr   string
		v6only bool
		want   string
	}{
		{"127.0.0.1:80", false, "osf1/4/127.0.0.1/80"},
		{"[::ffff:10.0.0.1]:80", false, "osf1/4/10.0.0.1/80"},
		{"0.0.0.0:80", false, "osf1/4/*/80"},
		{"[::]:80", false, "osf1/46/*/80"},
		{"[::]:80", true, "osf1/6/*/80"},
		{"[::1]:65535", false, "osf1/6/::1/65535"},
		{"[2001:db8:0:0:1:0:0:1]:1", false, "osf1/6/2001:db8::1:0:0:1/1"},
		{"[fe80::1%lo]:7", false, "osf1/6/fe80::1/7"},
	} {
		if got := ListenName(ap(tc.addr), tc.v6only); got != tc.want {
			t.Errorf("ListenName(%s, %v) = %q, want %q", tc.addr, tc.v6only, got, tc.want)
		}
	}
	got := DialNames(ap("127.0.0.1:80"), true)
	want := []string{"osf1/4/127.0.0.1/80", "osf1/4/*/80", "osf1/46/*/80"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DialNames(127.0.0.1:80, local) = %q, want %q", got, want)
	}
	if got := DialNames(ap("[::]:80"), true); !reflect.DeepEqual(got, []string{"osf1/6/*/80", "osf1/46/*/80"}) {
		t.Errorf("DialNames([::]:80, local) = %q", got)
	}
	if got := DialNames(ap("10.1.2.3:80"), false); !reflect.DeepEqual(got, []string{"osf1/4/10.1.2.3/80"}) {
		t.Errorf("DialNames(10.1.2.3:80, remote) = %q", got)
	}
}

// TestNamesFormatLikeNetip: the C formatter prints IPv6 addresses as Go's
// netip does (RFC 5952), which names written before it were made with.
func TestNamesFormatLikeNetip(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 20000; i++ {
		var a [16]byte
		for g := 0; g < 8; g++ {
			switch r.Intn(3) {
			case 0: // zero group, for runs of all lengths
			case 1:
				a[2*g+1] = byte(r.Intn(3))
			default:
				a[2*g], a[2*g+1] = byte(r.Intn(256)), byte(r.Intn(256))
			}
		}
		addr := netip.AddrFrom16(a)
		if addr.Is4In6() || addr.IsUnspecified() {
			continue
		}
		want := "osf1/6/" + addr.String() + "/9"
		if got := ListenName(netip.AddrPortFrom(addr, 9), true); got != want {
			t.Fatalf("ListenName(%s) = %q, want %q", addr, got, want)
		}
	}
}
