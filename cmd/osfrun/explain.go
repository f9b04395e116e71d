package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/Mellanox/rdmamap"
	"github.com/vishvananda/netlink"

	"github.com/osfproject/osf/internal/policy"
)

// explain writes the policy explanation for opts.addr, one query per role in
// opts.roles, using isLocal and rdma as the locality and RDMA probes.
func explain(w io.Writer, cfg *policy.Config, opts options, isLocal func(netip.Addr) bool, rdma func(netip.Addr) (string, bool, string)) error {
	qs := make([]policy.Query, len(opts.roles))
	for i, role := range opts.roles {
		qs[i] = policy.Query{
			Role:       role,
			Program:    opts.program(),
			Addr:       opts.addr,
			IsLocal:    isLocal,
			RDMADevice: rdma,
		}
	}
	return cfg.Explain(w, qs...)
}

// simDevice is the RDMA probe under OSF_DEBUG_RDMA_SIM=1: as the core's
// software stand-in (sdp/rdma.Sim), it serves every route.
func simDevice(netip.Addr) (string, bool, string) { return "sim", true, "" }

// netIface is a network interface with its address prefixes.
type netIface struct {
	name     string
	prefixes []netip.Prefix
}

// rdmaProbe finds the RDMA device that serves the route to an address. Its
// functions are replaceable for tests.
type rdmaProbe struct {
	devices    func() []string                     // RDMA device names
	deviceFor  func(netdev string) (string, error) // RDMA device of a network interface
	routeIface func(netip.Addr) (string, error)    // interface the kernel routes an address through
	interfaces func() ([]netIface, error)          // interfaces that are up
}

// newRDMAProbe returns a probe of this host, based on rdmamap and netlink.
func newRDMAProbe() *rdmaProbe {
	return &rdmaProbe{
		devices:    rdmamap.GetRdmaDeviceList,
		deviceFor:  rdmamap.GetRdmaDeviceForNetdevice,
		routeIface: kernelRoute,
		interfaces: hostInterfaces,
	}
}

// device reports the RDMA device, as "device (interface)", that serves the
// route to a, or why none does; it has the signature of
// policy.Query.RDMADevice. The interface is the one that holds a, else the
// one the kernel routes a through, else one whose subnet contains a; for the
// unspecified address any interface served by a device will do.
func (p *rdmaProbe) device(a netip.Addr) (device string, ok bool, why string) {
	devs := p.devices()
	if len(devs) == 0 {
		return "", false, "no RDMA device (no /sys/class/infiniband entries)"
	}
	ifs, err := p.interfaces()
	if err != nil {
		ifs = nil
	}
	if a.IsUnspecified() {
		for _, ifc := range ifs {
			if dev, ok := p.served(ifc.name); ok {
				return dev + " (" + ifc.name + ")", true, ""
			}
		}
		return "", false, fmt.Sprintf("no network interface is served by an RDMA device (devices: %s)", strings.Join(devs, ", "))
	}
	name := p.iface(a, ifs)
	if name == "" {
		return "", false, "no interface routes to " + a.String()
	}
	if dev, ok := p.served(name); ok {
		return dev + " (" + name + ")", true, ""
	}
	return "", false, fmt.Sprintf("interface %s is not served by an RDMA device (devices: %s)", name, strings.Join(devs, ", "))
}

// served returns the RDMA device of network interface netdev, if any.
func (p *rdmaProbe) served(netdev string) (string, bool) {
	dev, err := p.deviceFor(netdev)
	return dev, err == nil && dev != ""
}

// iface returns the interface that carries traffic to a, or "".
func (p *rdmaProbe) iface(a netip.Addr, ifs []netIface) string {
	for _, ifc := range ifs {
		for _, pfx := range ifc.prefixes {
			if pfx.Addr() == a {
				return ifc.name
			}
		}
	}
	if name, err := p.routeIface(a); err == nil && name != "" {
		return name
	}
	for _, ifc := range ifs {
		for _, pfx := range ifc.prefixes {
			if pfx.Contains(a) {
				return ifc.name
			}
		}
	}
	return ""
}

// kernelRoute returns the interface the kernel routes a through.
func kernelRoute(a netip.Addr) (string, error) {
	routes, err := netlink.RouteGet(net.IP(a.AsSlice()))
	if err != nil {
		return "", fmt.Errorf("osfrun: route get: %w", err)
	}
	for _, r := range routes {
		if r.LinkIndex <= 0 {
			continue
		}
		ifc, err := net.InterfaceByIndex(r.LinkIndex)
		if err != nil {
			return "", fmt.Errorf("osfrun: interface by index: %w", err)
		}
		return ifc.Name, nil
	}
	return "", errors.New("osfrun: route get: no route")
}

// hostInterfaces returns the interfaces of this host that are up.
func hostInterfaces() ([]netIface, error) {
	all, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("osfrun: list interfaces: %w", err)
	}
	var ifs []netIface
	for _, ifc := range all {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		ni := netIface{name: ifc.Name}
		for _, addr := range addrs {
			if ipNet, ok := addr.(*net.IPNet); ok {
				ni.prefixes = append(ni.prefixes, toPrefix(ipNet))
			}
		}
		ifs = append(ifs, ni)
	}
	return ifs, nil
}

// toPrefix converts an interface address to a netip.Prefix that keeps the
// host bits, with IPv4 addresses in their 4-byte form.
func toPrefix(n *net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	a = a.Unmap()
	ones, _ := n.Mask.Size()
	if a.Is4() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones)
}
