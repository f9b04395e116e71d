package verbs

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/verbs/devroute"
)

// Transport is the transport an RDMA device speaks (ibv_transport_type).
// InfiniBand and RoCE devices both report TransportIB; the port's LinkLayer
// tells them apart.
type Transport int

// Transports.
const (
	TransportUnknown  Transport = C.IBV_TRANSPORT_UNKNOWN
	TransportIB       Transport = C.IBV_TRANSPORT_IB
	TransportIWARP    Transport = C.IBV_TRANSPORT_IWARP
	TransportUSNIC    Transport = C.IBV_TRANSPORT_USNIC
	TransportUSNICUDP Transport = C.IBV_TRANSPORT_USNIC_UDP
	TransportUnspec   Transport = C.IBV_TRANSPORT_UNSPECIFIED
)

var transportNames = map[Transport]string{
	TransportUnknown:  "unknown",
	TransportIB:       "InfiniBand",
	TransportIWARP:    "iWARP",
	TransportUSNIC:    "usNIC",
	TransportUSNICUDP: "usNIC UDP",
	TransportUnspec:   "unspecified",
}

// String returns the transport's name, e.g. "InfiniBand" or "iWARP".
func (t Transport) String() string {
	if s, ok := transportNames[t]; ok {
		return s
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// PortState is the logical state of a device port (ibv_port_state).
type PortState int

// Port states.
const (
	PortNop         PortState = C.IBV_PORT_NOP
	PortDown        PortState = C.IBV_PORT_DOWN
	PortInit        PortState = C.IBV_PORT_INIT
	PortArmed       PortState = C.IBV_PORT_ARMED
	PortActive      PortState = C.IBV_PORT_ACTIVE
	PortActiveDefer PortState = C.IBV_PORT_ACTIVE_DEFER
)

var portStateNames = map[PortState]string{
	PortNop:         "NOP",
	PortDown:        "DOWN",
	PortInit:        "INIT",
	PortArmed:       "ARMED",
	PortActive:      "ACTIVE",
	PortActiveDefer: "ACTIVE_DEFER",
}

// String returns the state's name as ibv_devinfo prints it, e.g. "ACTIVE".
func (s PortState) String() string {
	if n, ok := portStateNames[s]; ok {
		return n
	}
	return "PortState(" + strconv.Itoa(int(s)) + ")"
}

// Active reports whether the port can carry traffic.
func (s PortState) Active() bool { return s == PortActive || s == PortActiveDefer }

// LinkLayer is the link layer under a port: InfiniBand, or Ethernet (RoCE).
type LinkLayer int

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = C.IBV_LINK_LAYER_UNSPECIFIED
	LinkLayerInfiniBand  LinkLayer = C.IBV_LINK_LAYER_INFINIBAND
	LinkLayerEthernet    LinkLayer = C.IBV_LINK_LAYER_ETHERNET
)

// String returns "InfiniBand", "Ethernet" or "unspecified".
func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	case LinkLayerUnspecified:
		return "unspecified"
	}
	return "LinkLayer(" + strconv.Itoa(int(l)) + ")"
}

// RoCE reports whether the link layer is Ethernet, i.e. the port runs RDMA
// over Converged Ethernet.
func (l LinkLayer) RoCE() bool { return l == LinkLayerEthernet }

// MTU is an InfiniBand path MTU code (ibv_mtu).
type MTU int

// MTUs.
const (
	MTU256  MTU = C.IBV_MTU_256
	MTU512  MTU = C.IBV_MTU_512
	MTU1024 MTU = C.IBV_MTU_1024
	MTU2048 MTU = C.IBV_MTU_2048
	MTU4096 MTU = C.IBV_MTU_4096
)

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// String returns the MTU in bytes, e.g. "4096".
func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return strconv.Itoa(b)
	}
	return "MTU(" + strconv.Itoa(int(m)) + ")"
}

// GUID is a 64-bit InfiniBand globally unique identifier in host byte order.
type GUID uint64

// String formats g as ibv_devinfo does: "0011:2233:4455:6677".
func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// PortInfo describes one port of an RDMA device. Ports are numbered from 1.
type PortInfo struct {
	Num       int
	State     PortState
	LinkLayer LinkLayer
	ActiveMTU MTU
	MaxMTU    MTU
	LID       uint16
	// Netdevs are the network interfaces whose addresses the port's GID
	// table holds (RoCE), from sysfs; empty for InfiniBand ports.
	Netdevs []string
}

// DeviceInfo describes one RDMA device as Devices finds it.
type DeviceInfo struct {
	Name      string
	GUID      GUID
	Transport Transport
	Ports     []PortInfo
	// Err is non-nil when the device is listed but could not be opened or
	// queried (e.g. EACCES on /dev/infiniband/uverbsN); Ports is then
	// empty.
	Err error
}

// sysfsRoot is where sysfs is.
const sysfsRoot = "/sys"

// Devices lists the RDMA devices and their ports. It opens each device
// briefly to query its ports and does not block otherwise.
//
// When there is no device it returns an error satisfying
// errors.Is(err, ErrNoDevice); when the kernel has no RDMA support at all
// (ibv_get_device_list fails with ENOSYS) the error also satisfies
// errors.Is(err, ErrNoKernelSupport). The errno is wrapped too.
func Devices() ([]DeviceInfo, error) {
	var n, e C.int
	list := C.osf_get_device_list(&n, &e)
	if list == nil {
		return nil, opError("get device list", unix.Errno(e))
	}
	defer C.ibv_free_device_list(list)
	if n <= 0 {
		return nil, opError("get device list", unix.ENODEV)
	}
	devs := unsafe.Slice(list, int(n))
	out := make([]DeviceInfo, 0, len(devs))
	for _, d := range devs {
		out = append(out, describeDevice(d))
	}
	return out, nil
}

// describeDevice fills a DeviceInfo for d, opening it to query its ports.
func describeDevice(d *C.struct_ibv_device) DeviceInfo {
	info := DeviceInfo{
		Name:      C.GoString(C.ibv_get_device_name(d)),
		GUID:      GUID(C.osf_device_guid(d)),
		Transport: Transport(d.transport_type),
	}
	ctx, err := C.ibv_open_device(d)
	if ctx == nil {
		info.Err = opError("open device "+info.Name, errnoOf(err, unix.ENODEV))
		return info
	}
	defer C.ibv_close_device(ctx)
	c := &Context{ctx: ctx, name: info.Name}
	attr, err2 := c.Attr()
	if err2 != nil {
		info.Err = err2
		return info
	}
	for p := 1; p <= attr.Ports; p++ {
		pi, err := c.QueryPort(p)
		if err != nil {
			info.Err = err
			info.Ports = nil
			return info
		}
		info.Ports = append(info.Ports, pi)
	}
	return info
}

// Context is an open RDMA device (struct ibv_context).
//
// A Context returned by OpenDevice owns the device handle: Close closes it,
// and fails with an error wrapping unix.EBUSY while PDs, CQs or completion
// channels created from it are still open; a second Close returns
// ErrClosed. A Context returned by CMID.Context belongs to librdmacm and is
// shared by every id on that device: its Close does nothing and returns
// nil. Close must not run concurrently with other methods.
type Context struct {
	ctx      *C.struct_ibv_context
	name     string
	owned    bool // from OpenDevice: Close closes the device
	cm       bool // from CMID.Context: librdmacm's, Close is a no-op
	children atomic.Int32
}

// OpenDevice opens the RDMA device called name (as in DeviceInfo.Name), or
// the first device when name is empty. It does not block. It returns an
// error satisfying errors.Is(err, ErrNoDevice) when there is no such
// device.
func OpenDevice(name string) (*Context, error) {
	var n, e C.int
	list := C.osf_get_device_list(&n, &e)
	if list == nil {
		return nil, opError("open device", unix.Errno(e))
	}
	defer C.ibv_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		dn := C.GoString(C.ibv_get_device_name(d))
		if name != "" && dn != name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, opError("open device "+dn, errnoOf(err, unix.ENODEV))
		}
		return &Context{ctx: ctx, name: dn, owned: true}, nil
	}
	if name == "" {
		return nil, opError("open device", unix.ENODEV)
	}
	return nil, opError("open device "+name, unix.ENODEV)
}

// Name returns the device name, e.g. "mlx5_0" or "rxe0".
func (c *Context) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// DeviceAttr holds the device limits osf sizes its queues by
// (a subset of struct ibv_device_attr).
type DeviceAttr struct {
	FirmwareVersion string
	MaxMRSize       uint64
	MaxQP           int
	MaxQPWR         int // work requests per send or receive queue
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int // entries per CQ
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int // RDMA READ/atomic ops a QP can answer at once
	MaxQPInitRdAtom int // RDMA READ/atomic ops a QP can have outstanding
	Ports           int
}

// Attr queries the device's limits; it does not block.
func (c *Context) Attr() (DeviceAttr, error) {
	if c == nil || c.ctx == nil {
		return DeviceAttr{}, closedError("query device")
	}
	var a C.struct_ibv_device_attr
	if rc := C.osf_query_device(c.ctx, &a); rc != 0 {
		return DeviceAttr{}, opError("query device "+c.name, unix.Errno(rc))
	}
	return DeviceAttr{
		FirmwareVersion: C.GoString(&a.fw_ver[0]),
		MaxMRSize:       uint64(a.max_mr_size),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		MaxSGE:          int(a.max_sge),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		Ports:           int(a.phys_port_cnt),
	}, nil
}

// QueryPort queries port (numbered from 1); it does not block.
func (c *Context) QueryPort(port int) (PortInfo, error) {
	if c == nil || c.ctx == nil {
		return PortInfo{}, closedError("query port")
	}
	if port < 1 || port > 255 {
		return PortInfo{}, opError(fmt.Sprintf("query port %s/%d", c.name, port), unix.EINVAL)
	}
	var a C.struct_ibv_port_attr
	if rc := C.osf_query_port(c.ctx, C.uint8_t(port), &a); rc != 0 {
		return PortInfo{}, opError(fmt.Sprintf("query port %s/%d", c.name, port), unix.Errno(rc))
	}
	return PortInfo{
		Num:       port,
		State:     PortState(a.state),
		LinkLayer: LinkLayer(a.link_layer),
		ActiveMTU: MTU(a.active_mtu),
		MaxMTU:    MTU(a.max_mtu),
		LID:       uint16(a.lid),
		Netdevs:   devroute.PortNetdevs(sysfsRoot, c.name, port),
	}, nil
}

// Close closes the device if this Context owns it. See the type's comment
// for when it fails.
func (c *Context) Close() error {
	if c != nil && c.cm {
		return nil
	}
	if c == nil || c.ctx == nil {
		return closedError("close device")
	}
	if n := c.children.Load(); n > 0 {
		return fmt.Errorf("verbs: close device %s: %d resources still open: %w", c.name, n, unix.EBUSY)
	}
	if c.owned {
		if rc, err := C.ibv_close_device(c.ctx); rc != 0 {
			return opError("close device "+c.name, rcErrno(int(rc), err))
		}
	}
	c.ctx = nil
	return nil
}
