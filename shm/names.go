package shm

/*
#cgo CFLAGS: -O2 -std=gnu11 -D_GNU_SOURCE -fno-strict-aliasing
#include "../sdp/names.h"

static void listen_name(const uint8_t *a, uint16_t port, int v6only, char *out)
{
	osf_listen_name(a, port, v6only, out, OSF_NAME_MAX);
}

struct dial_names {
	char name[3][OSF_NAME_MAX];
	int wild[3];
	int n;
};

static void dial_names(const uint8_t *a, uint16_t port, int local, struct dial_names *d)
{
	d->n = osf_dial_names(a, port, local, d->name, d->wild);
}
*/
import "C"

import (
	"net/netip"
	"unsafe"
)

// The companion names are libosf.so's own (sdp/names.h: one
// implementation, its comment says the format).

// ListenName is the abstract socket name (without the leading NUL) of the
// companion of a listener bound to addr. v6only is the IPV6_V6ONLY option
// of an IPv6 listener.
func ListenName(addr netip.AddrPort, v6only bool) string {
	a := addr.Addr().WithZone("").As16()
	var out [C.OSF_NAME_MAX]C.char
	C.listen_name((*C.uint8_t)(unsafe.Pointer(&a[0])), C.uint16_t(addr.Port()), cbool(v6only), &out[0])
	return C.GoString(&out[0])
}

// companionName is a name DialNames returns; wild: only a wildcard
// listener has it.
type companionName struct {
	name string
	wild bool
}

// DialNames returns, in order, the companion names that could serve a
// connection to dst: a listener bound to dst itself, and, when dst is an
// address of this host, wildcard listeners of its family and dual-stack
// ones.
func DialNames(dst netip.AddrPort, local bool) []string {
	var names []string
	for _, n := range dialNames(dst, local) {
		names = append(names, n.name)
	}
	return names
}

func dialNames(dst netip.AddrPort, local bool) []companionName {
	a := dst.Addr().WithZone("").As16()
	var d C.struct_dial_names
	C.dial_names((*C.uint8_t)(unsafe.Pointer(&a[0])), C.uint16_t(dst.Port()), cbool(local), &d)
	names := make([]companionName, 0, int(d.n))
	for i := 0; i < int(d.n); i++ {
		names = append(names, companionName{C.GoString(&d.name[i][0]), d.wild[i] != 0})
	}
	return names
}
