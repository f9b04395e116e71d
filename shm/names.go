package shm

import (
	"net/netip"
	"strconv"
)

// namePrefix carries the protocol version: peers of different versions
// never find each other and simply use kernel TCP.
const namePrefix = "osf1/"

// Families in names: "4" IPv4, "6" IPv6 only, "46" a dual-stack IPv6
// wildcard listener, which also serves IPv4 clients.
const (
	fam4    = "4"
	fam6    = "6"
	famDual = "46"
)

// ListenName is the abstract socket name (without the leading NUL) of the
// companion of a listener bound to addr. v6only is the IPV6_V6ONLY option
// of an IPv6 listener.
func ListenName(addr netip.AddrPort, v6only bool) string {
	a := addr.Addr().WithZone("")
	port := strconv.Itoa(int(addr.Port()))
	switch {
	case a.Is4() || a.Is4In6():
		return name(fam4, a.Unmap(), port)
	case a.IsUnspecified() && !v6only:
		return namePrefix + famDual + "/*/" + port
	default:
		return name(fam6, a, port)
	}
}

func name(fam string, a netip.Addr, port string) string {
	host := a.String()
	if a.IsUnspecified() {
		host = "*"
	}
	return namePrefix + fam + "/" + host + "/" + port
}

// DialNames returns, in order, the companion names that could serve a
// connection to dst: a listener bound to dst itself, and, when dst is an
// address of this host, wildcard listeners of its family and dual-stack
// ones.
func DialNames(dst netip.AddrPort, local bool) []string {
	a := dst.Addr().WithZone("").Unmap()
	port := strconv.Itoa(int(dst.Port()))
	fam := fam6
	if a.Is4() {
		fam = fam4
	}
	names := []string{name(fam, a, port)}
	if local {
		if !a.IsUnspecified() {
			names = append(names, namePrefix+fam+"/*/"+port)
		}
		names = append(names, namePrefix+famDual+"/*/"+port)
	}
	return names
}
