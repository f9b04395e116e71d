package verbs

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
)

// selectError reports why no RDMA device serves an interface or address.
// It wraps kind (ErrNoDevice or ErrNoKernelSupport) and the cause, if any.
type selectError struct {
	what   string // "interface eth0", "address 10.0.0.1 (interface eth0)"
	reason string
	kind   error
	cause  error
}

func (e *selectError) Error() string {
	return "verbs: no RDMA device serves " + e.what + ": " + e.reason
}

func (e *selectError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// DeviceForInterface returns the RDMA device and port (from 1) that serve
// the network interface ifname: the RoCE device whose GID table lists it,
// or the InfiniBand device whose node GUID matches an IPoIB interface
// (rdmamap). It reads sysfs and asks netlink; it does not block on the
// network. It does not check that the port is active (see
// Context.QueryPort).
//
// When no device serves the interface it returns an error satisfying
// errors.Is(err, ErrNoDevice) whose message gives the reason, e.g.
// "verbs: no RDMA device serves interface lo: ...". Without kernel RDMA
// support the error also satisfies errors.Is(err, ErrNoKernelSupport).
func DeviceForInterface(ifname string) (dev string, port int, err error) {
	if _, err := net.InterfaceByName(ifname); err != nil {
		return "", 0, &selectError{what: "interface " + ifname, reason: "no such network interface", kind: ErrNoDevice, cause: err}
	}
	dev, port, serr := deviceForInterface(sysfsRoot, ifname, rdmamapLookup)
	if serr != nil {
		return "", 0, serr
	}
	return dev, port, nil
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

// DeviceForAddr returns the RDMA device and port that serve the local
// interface holding ip (an IPv4-mapped address is treated as IPv4). Errors
// are as for DeviceForInterface; an address that no local interface holds
// is reported the same way ("no local interface has address ...").
func DeviceForAddr(ip netip.Addr) (dev string, port int, err error) {
	ip = ip.Unmap().WithZone("")
	ifname, err := interfaceForAddr(ip)
	if err != nil {
		return "", 0, &selectError{what: "address " + ip.String(), reason: err.Error(), kind: ErrNoDevice, cause: err}
	}
	dev, port, err = DeviceForInterface(ifname)
	if err != nil {
		var se *selectError
		if errors.As(err, &se) {
			se2 := *se
			se2.what = "address " + ip.String() + " (interface " + ifname + ")"
			return "", 0, &se2
		}
		return "", 0, err
	}
	return dev, port, nil
}

// interfaceForAddr returns the name of the local interface holding ip.
func interfaceForAddr(ip netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if got, ok := netip.AddrFromSlice(ipn.IP); ok && got.Unmap() == ip {
				return ifi.Name, nil
			}
		}
	}
	return "", errors.New("no local interface has address " + ip.String())
}

// deviceForInterface maps ifname to a device and port using sysfs under
// root and lookup (rdmamap.GetRdmaDeviceForNetdevice outside tests). It
// assumes ifname exists.
func deviceForInterface(root, ifname string, lookup func(string) (string, error)) (string, int, *selectError) {
	what := "interface " + ifname
	classDir := filepath.Join(root, "class/infiniband")
	ents, err := os.ReadDir(classDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", 0, &selectError{what: what, reason: classDir + " does not exist (kernel has no RDMA support)", kind: ErrNoKernelSupport}
	case err != nil:
		return "", 0, &selectError{what: what, reason: "read " + classDir + ": " + err.Error(), kind: ErrNoDevice, cause: err}
	case len(ents) == 0:
		return "", 0, &selectError{what: what, reason: classDir + " is empty", kind: ErrNoDevice}
	}

	// rdmamap: for Ethernet the device whose GID table lists the
	// interface (RoCE), for IPoIB the device whose node GUID matches the
	// interface's hardware address.
	dev, lerr := lookup(ifname)
	if lerr == nil && dev != "" {
		port, perr := portForNetdev(root, dev, ifname)
		if perr != nil {
			return "", 0, &selectError{what: what, reason: "device " + dev + " matches but " + perr.Error(), kind: ErrNoDevice, cause: perr}
		}
		return dev, port, nil
	}

	// rdmamap only knows Ethernet and IPoIB interfaces; any other kind
	// that a device lists in its GID table still counts.
	if dev, port := scanGIDNetdevs(root, ifname); dev != "" {
		return dev, port, nil
	}
	reason := "no device's GID table lists it"
	if lerr != nil {
		reason += " (rdmamap: " + lerr.Error() + ")"
	}
	return "", 0, &selectError{what: what, reason: reason, kind: ErrNoDevice, cause: lerr}
}

// portForNetdev returns the port of dev serving ifname: the lowest port
// whose GID table lists it (RoCE), else the IPoIB port.
func portForNetdev(root, dev, ifname string) (int, error) {
	for _, port := range devicePorts(root, dev) {
		for _, nd := range portNetdevs(root, dev, port) {
			if nd == ifname {
				return port, nil
			}
		}
	}
	return ibPortForNetdev(root, dev, ifname)
}

// scanGIDNetdevs looks for ifname in the GID tables of all devices under
// root and returns the first device (by name) and its lowest port listing
// it, or "" and 0.
func scanGIDNetdevs(root, ifname string) (string, int) {
	devs := listDir(filepath.Join(root, "class/infiniband"))
	for _, dev := range devs {
		for _, port := range devicePorts(root, dev) {
			for _, nd := range portNetdevs(root, dev, port) {
				if nd == ifname {
					return dev, port
				}
			}
		}
	}
	return "", 0
}

// ibPortForNetdev returns the port of dev that the IPoIB interface ifname
// runs on: dev_port (or, on older kernels, dev_id) of the netdev plus one,
// checked against the device's ports.
func ibPortForNetdev(root, dev, ifname string) (int, error) {
	ports := devicePorts(root, dev)
	if len(ports) == 0 {
		return 0, errors.New("it has no ports in sysfs")
	}
	idx := 0
	netDir := filepath.Join(root, "class/net", ifname)
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
	want := idx + 1
	for _, p := range ports {
		if p == want {
			return p, nil
		}
	}
	return 0, fmt.Errorf("it has no port %d for %s", want, ifname)
}

// devicePorts returns the sorted port numbers of dev under root.
func devicePorts(root, dev string) []int {
	var ports []int
	for _, name := range listDir(filepath.Join(root, "class/infiniband", dev, "ports")) {
		if n, err := strconv.Atoi(name); err == nil && n > 0 {
			ports = append(ports, n)
		}
	}
	sort.Ints(ports)
	return ports
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
