// Package devroute is osf's one algorithm for which RDMA device serves the
// route to an address, and why none does. The core (sdp/rdma.Transport.
// DeviceFor, through verbs.DeviceForAddr) and `osfrun --explain` both call
// it, so that a fallback's reason reads the same everywhere. It is pure Go
// (sysfs, rdmamap, a UDP socket), without libibverbs, so that osfrun, built
// without cgo, can use it.
package devroute

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"
	"golang.org/x/sys/unix"
)

// NoDevice is the reason when the host has no RDMA device at all.
const NoDevice = "no RDMA device (no /sys/class/infiniband entries)"

// Host is what the algorithm reads of a machine; System is this one, tests
// make others.
type Host struct {
	// Sysfs is where sysfs is mounted ("/sys").
	Sysfs string
	// Lookup returns the RDMA device of a network interface
	// (rdmamap.GetRdmaDeviceForNetdevice).
	Lookup func(ifname string) (string, error)
	// Interfaces lists the network interfaces and their addresses.
	Interfaces func() ([]Interface, error)
	// Source returns the local address the kernel would send from to
	// reach dst.
	Source func(dst netip.Addr) (netip.Addr, error)
}

// Interface is a network interface with its addresses.
type Interface struct {
	Name  string
	Addrs []netip.Addr
}

// System is this machine.
var System = Host{Sysfs: "/sys", Lookup: rdmamapLookup, Interfaces: systemInterfaces, Source: KernelSource}

// Error says why no RDMA device serves an interface or address.
type Error struct {
	What     string // "interface eth0", "address 10.0.0.1 (interface eth0)"
	Reason   string
	NoKernel bool  // the kernel has no RDMA support at all
	Err      error // the cause, if any
}

func (e *Error) Error() string { return "no RDMA device serves " + e.What + ": " + e.Reason }

func (e *Error) Unwrap() error { return e.Err }

// ForRoute reports which RDMA device serves the route to a, as "DEV port
// N", or why none does; it has the signature of policy.Query.RDMADevice.
// For an address of this host it is the device of the interface holding
// it; for another host, that of the interface holding the source address
// the kernel would use; for the unspecified address (a wildcard listener)
// the first device.
//
// "Held by an interface" is deliberately not policy.IsLocal: a device is
// found per interface, so the question is which interface holds a, not
// whether a is this host's. The two differ only for loopback addresses no
// interface lists (127.0.0.2): IsLocal says local, here the kernel's
// source address for it (127.0.0.1) is looked up instead, which leads to
// the interface that carries such a connection (lo), as it should.
func (h Host) ForRoute(a netip.Addr) (device string, ok bool, why string) {
	a = a.Unmap().WithZone("")
	devs := h.Devices()
	if len(devs) == 0 {
		return "", false, NoDevice
	}
	if a.IsUnspecified() {
		return devs[0], true, ""
	}
	ifs, _ := h.Interfaces() // listed once: a connect asks this every time
	src := a
	if _, held := holder(ifs, a); !held {
		s, err := h.Source(a)
		if err != nil {
			return "", false, "no route to " + a.String() + ": " + err.Error()
		}
		src = s.Unmap().WithZone("")
	}
	dev, port, err := h.forAddr(ifs, src)
	if err != nil {
		return "", false, err.Error()
	}
	return dev + " port " + strconv.Itoa(port), true, ""
}

// Devices returns the names of the RDMA devices (sorted), or nil.
func (h Host) Devices() []string {
	return listDir(filepath.Join(h.Sysfs, "class/infiniband"))
}

// holder returns the interface among ifs holding ip.
func holder(ifs []Interface, ip netip.Addr) (string, bool) {
	for _, ifc := range ifs {
		for _, x := range ifc.Addrs {
			if x.Unmap() == ip {
				return ifc.Name, true
			}
		}
	}
	return "", false
}

// ForAddr returns the RDMA device and port that serve the local interface
// holding ip (an IPv4-mapped address is treated as IPv4).
func (h Host) ForAddr(ip netip.Addr) (string, int, *Error) {
	ifs, _ := h.Interfaces()
	return h.forAddr(ifs, ip)
}

// forAddr is ForAddr with the host's interfaces already listed.
func (h Host) forAddr(ifs []Interface, ip netip.Addr) (string, int, *Error) {
	ip = ip.Unmap().WithZone("")
	ifname, ok := holder(ifs, ip)
	if !ok {
		return "", 0, &Error{What: "address " + ip.String(), Reason: "no local interface has address " + ip.String()}
	}
	dev, port, err := h.forInterface(ifname)
	if err != nil {
		err.What = "address " + ip.String() + " (interface " + ifname + ")"
		return "", 0, err
	}
	return dev, port, nil
}

// ForInterface returns the RDMA device and port (from 1) that serve the
// network interface ifname: the RoCE device whose GID table lists it, or
// the InfiniBand device whose node GUID matches an IPoIB interface. It does
// not check that the port is active.
func (h Host) ForInterface(ifname string) (string, int, *Error) {
	ifs, err := h.Interfaces()
	if err != nil {
		return "", 0, &Error{What: "interface " + ifname, Reason: err.Error(), Err: err}
	}
	for _, ifc := range ifs {
		if ifc.Name == ifname {
			return h.forInterface(ifname)
		}
	}
	return "", 0, &Error{What: "interface " + ifname, Reason: "no such network interface"}
}

// forInterface is ForInterface for an interface that exists.
func (h Host) forInterface(ifname string) (string, int, *Error) {
	what := "interface " + ifname
	classDir := filepath.Join(h.Sysfs, "class/infiniband")
	ents, err := os.ReadDir(classDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", 0, &Error{What: what, Reason: classDir + " does not exist (kernel has no RDMA support)", NoKernel: true}
	case err != nil:
		return "", 0, &Error{What: what, Reason: "read " + classDir + ": " + err.Error(), Err: err}
	case len(ents) == 0:
		return "", 0, &Error{What: what, Reason: classDir + " is empty"}
	}
	// The first device (and its lowest port) whose GID table lists the
	// interface: RoCE, soft-RoCE, and any other kind of interface a device
	// lists. Each port's scan stops at the first entry naming it: a
	// soft-RoCE port has 1024 entries, mostly unused, and reading them all
	// took 140 ms of every connect in an emulated guest.
	for _, dev := range h.Devices() {
		for _, port := range h.ports(dev) {
			if portLists(h.Sysfs, dev, port, ifname) {
				return dev, port, nil
			}
		}
	}
	// rdmamap: for IPoIB the device whose node GUID matches the
	// interface's hardware address. For Ethernet it scans the GID tables
	// as above, all 1024 entries of a soft-RoCE port for an interface no
	// device serves: skipped, it doubled the cost of every such answer
	// (osfrun --explain in an emulated guest outlived its test's 10 s).
	reason := "no device's GID table lists it"
	if isEthernet(h.Sysfs, ifname) {
		return "", 0, &Error{What: what, Reason: reason}
	}
	dev, lerr := h.Lookup(ifname)
	if lerr == nil && dev != "" {
		port, perr := h.portForNetdev(dev, ifname)
		if perr != nil {
			return "", 0, &Error{What: what, Reason: "device " + dev + " matches but " + perr.Error(), Err: perr}
		}
		return dev, port, nil
	}
	if lerr != nil {
		reason += " (rdmamap: " + lerr.Error() + ")"
	}
	return "", 0, &Error{What: what, Reason: reason, Err: lerr}
}

// portForNetdev returns the port of dev serving ifname: the lowest port
// whose GID table lists it (RoCE), else the IPoIB port: dev_port (or, on
// older kernels, dev_id) of the netdev plus one.
func (h Host) portForNetdev(dev, ifname string) (int, error) {
	ports := h.ports(dev)
	for _, port := range ports {
		for _, nd := range PortNetdevs(h.Sysfs, dev, port) {
			if nd == ifname {
				return port, nil
			}
		}
	}
	if len(ports) == 0 {
		return 0, errors.New("it has no ports in sysfs")
	}
	idx := 0
	netDir := filepath.Join(h.Sysfs, "class/net", ifname)
	if b, err := os.ReadFile(filepath.Join(netDir, "dev_port")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			idx = n
		}
	}
	if idx == 0 {
		if b, err := os.ReadFile(filepath.Join(netDir, "dev_id")); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 0, 32); err == nil {
				idx = int(n)
			}
		}
	}
	for _, p := range ports {
		if p == idx+1 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("it has no port %d for %s", idx+1, ifname)
}

// ports returns the sorted port numbers of dev.
func (h Host) ports(dev string) []int {
	var ports []int
	for _, name := range listDir(filepath.Join(h.Sysfs, "class/infiniband", dev, "ports")) {
		if n, err := strconv.Atoi(name); err == nil && n > 0 {
			ports = append(ports, n)
		}
	}
	sort.Ints(ports)
	return ports
}

// PortNetdevs returns the sorted, de-duplicated network interfaces listed
// in the GID table of port of dev under the sysfs root (normally /sys).
func PortNetdevs(root, dev string, port int) []string {
	dir := filepath.Join(root, "class/infiniband", dev, "ports", strconv.Itoa(port), "gid_attrs/ndevs")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		// Unused GID entries read back EINVAL; skip them.
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		name := strings.TrimRight(string(b), "\n ")
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// portLists reports whether the GID table of port of dev under the sysfs
// root lists the network interface ifname; it reads entries only until
// one does.
func portLists(root, dev string, port int, ifname string) bool {
	dir := filepath.Join(root, "class/infiniband", dev, "ports", strconv.Itoa(port), "gid_attrs/ndevs")
	// Entries 0 to the table's length - 1, in the order the device fills
	// them (listing the directory first cost as much as reading them).
	for i := 0; ; i++ {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)))
		switch {
		case errors.Is(err, os.ErrNotExist):
			return false
		case err == nil && strings.TrimRight(string(b), "\n ") == ifname:
			return true
		}
		// Unused GID entries read back EINVAL.
	}
}

// isEthernet reports whether sysfs says ifname is an Ethernet interface
// (type ARPHRD_ETHER), whose device only a GID table can name.
func isEthernet(root, ifname string) bool {
	b, err := os.ReadFile(filepath.Join(root, "class/net", ifname, "type"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// listDir returns the sorted entry names of dir, or nil.
func listDir(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// rdmamapLookup calls rdmamap.GetRdmaDeviceForNetdevice, turning a panic
// (rdmamap slices sysfs contents and hardware addresses without checking
// their length) into an error.
func rdmamapLookup(ifname string) (dev string, err error) {
	defer func() {
		if r := recover(); r != nil {
			dev, err = "", fmt.Errorf("rdmamap panicked: %v", r)
		}
	}()
	return rdmamap.GetRdmaDeviceForNetdevice(ifname)
}

// systemInterfaces lists this host's interfaces and addresses.
func systemInterfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	out := make([]Interface, 0, len(ifs))
	for _, ifi := range ifs {
		x := Interface{Name: ifi.Name}
		addrs, err := ifi.Addrs()
		if err == nil {
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
						x.Addrs = append(x.Addrs, ip.Unmap())
					}
				}
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// KernelSource returns the address the kernel would send from to reach
// dst: the local name of a UDP socket connected to it (no packet is sent).
// For an IPv6 (or IPv4-mapped) dst it is an IPv6 address.
func KernelSource(dst netip.Addr) (netip.Addr, error) {
	fam := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: 9, Addr: dst.As16()}
	if dst.Is4() {
		fam, sa = unix.AF_INET, &unix.SockaddrInet4{Port: 9, Addr: dst.As4()}
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("devroute: source address: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return netip.Addr{}, fmt.Errorf("devroute: source address: %w", err)
	}
	local, err := unix.Getsockname(fd)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("devroute: source address: %w", err)
	}
	switch s := local.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(s.Addr), nil
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(s.Addr), nil
	}
	return netip.Addr{}, errors.New("devroute: source address: unexpected socket name")
}
