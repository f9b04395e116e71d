package main

import (
	"net/netip"

	"github.com/Mellanox/rdmamap"
)

// rdmaProbe reports whether an RDMA device could serve a route; the verbs
// transport refines this with the device for the route's interface.
func rdmaProbe(netip.Addr) (string, bool, string) {
	devs := rdmamap.GetRdmaDeviceList()
	if len(devs) == 0 {
		return "", false, "no RDMA device (no /sys/class/infiniband entries)"
	}
	return devs[0], true, ""
}
