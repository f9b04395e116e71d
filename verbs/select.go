package verbs

import (
	"net/netip"

	"github.com/osfproject/osf/verbs/devroute"
)

// selectError reports why no RDMA device serves an interface or address
// (devroute's reason, the one osfrun --explain prints too). It wraps
// ErrNoDevice, or ErrNoKernelSupport, and the cause if any.
type selectError struct{ e *devroute.Error }

func (e *selectError) Error() string { return "verbs: " + e.e.Error() }

func (e *selectError) Unwrap() []error {
	kind := ErrNoDevice
	if e.e.NoKernel {
		kind = ErrNoKernelSupport
	}
	if e.e.Err == nil {
		return []error{kind}
	}
	return []error{kind, e.e.Err}
}

// DeviceForInterface returns the RDMA device and port (from 1) that serve
// the network interface ifname: the RoCE device whose GID table lists it,
// or the InfiniBand device whose node GUID matches an IPoIB interface
// (devroute, which osfrun --explain uses too). It reads sysfs and asks
// netlink; it does not block on the network. It does not check that the
// port is active (see Context.QueryPort).
//
// When no device serves the interface it returns an error satisfying
// errors.Is(err, ErrNoDevice) whose message gives the reason, e.g.
// "verbs: no RDMA device serves interface lo: ...". Without kernel RDMA
// support the error also satisfies errors.Is(err, ErrNoKernelSupport).
func DeviceForInterface(ifname string) (dev string, port int, err error) {
	dev, port, serr := devroute.System.ForInterface(ifname)
	if serr != nil {
		return "", 0, &selectError{serr}
	}
	return dev, port, nil
}

// DeviceForAddr returns the RDMA device and port that serve the local
// interface holding ip (an IPv4-mapped address is treated as IPv4). Errors
// are as for DeviceForInterface; an address that no local interface holds
// is reported the same way ("no local interface has address ...").
func DeviceForAddr(ip netip.Addr) (dev string, port int, err error) {
	dev, port, serr := devroute.System.ForAddr(ip)
	if serr != nil {
		return "", 0, &selectError{serr}
	}
	return dev, port, nil
}
