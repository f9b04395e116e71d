package shm

/*
#cgo CFLAGS: -O2 -std=gnu11 -D_GNU_SOURCE -fno-strict-aliasing
#include "../sdp/census.h"

// companion_trust: 1 when the companion at the other end of s may have
// this connection (census.h); gateway also trusts a companion of root's or
// of this process's own user (osfgw's shm legs have no kernel listener in
// the node's namespace).
static int companion_trust(int s, uint16_t port, const uint8_t *want, int wild, int gateway)
{
	struct ucred cr;
	struct osf_census c;

	if (osf_companion_owner(s, &cr) < 0)
		return 0;
	if (gateway && (cr.uid == 0 || cr.uid == geteuid()))
		return 1;
	if (osf_census_read(port, &c) < 0)
		return 0;
	return osf_census_owns(&c, cr.uid, want, wild);
}
*/
import "C"

import (
	"net/netip"
	"unsafe"
)

// trusted reports whether the companion at the other end of the connected
// socket fd may have a connection to dst: its owner holds a kernel TCP
// listener that the companion's name serves (wild: a wildcard name), the
// rule libosf.so's connect applies (sdp/census.h, one implementation). With
// gateway, a companion of root's or of this process's user is trusted too.
// The census is taken in the calling thread's network namespace.
func trusted(fd int, dst netip.AddrPort, wild, gateway bool) bool {
	want := dst.Addr().Unmap().As16() // an IPv4 address v4-mapped, as the census keeps it
	return C.companion_trust(C.int(fd), C.uint16_t(dst.Port()), (*C.uint8_t)(unsafe.Pointer(&want[0])),
		cbool(wild), cbool(gateway)) == 1
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
