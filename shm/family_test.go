package shm

import (
	"net/netip"
	"testing"
)

func TestAsFamily(t *testing.T) {
	for _, tc := range []struct{ ap, like, want string }{
		{"127.0.0.1:5", "127.0.0.1", "127.0.0.1:5"},
		{"127.0.0.1:5", "::", "[::ffff:127.0.0.1]:5"},
		{"127.0.0.1:5", "::1", "[::ffff:127.0.0.1]:5"},
		// An IPv6 client connected to a v4-mapped address.
		{"127.0.0.1:5", "::ffff:127.0.0.1", "[::ffff:127.0.0.1]:5"},
		{"[::ffff:127.0.0.1]:5", "127.0.0.1", "127.0.0.1:5"},
		{"[::ffff:127.0.0.1]:5", "::", "[::ffff:127.0.0.1]:5"},
		{"[::1]:5", "::1", "[::1]:5"},
	} {
		got := AsFamily(netip.MustParseAddrPort(tc.ap), netip.MustParseAddr(tc.like))
		if got.String() != tc.want {
			t.Errorf("AsFamily(%s, %s) = %s, want %s", tc.ap, tc.like, got, tc.want)
		}
	}
}
