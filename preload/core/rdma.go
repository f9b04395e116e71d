package main

import (
	"errors"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/sdp/rdma"
	"github.com/osfproject/osf/verbs"
	"github.com/osfproject/osf/verbs/devroute"
)

// noDevice is why RDMA is out of the question on a host without devices;
// osfrun --explain says the same (devroute).
const noDevice = devroute.NoDevice

// rdmaTransport is what the core needs of an RDMA transport: the device
// transport (rdma.Transport) or its software stand-in for tests (rdma.Sim,
// OSF_DEBUG_RDMA_SIM=1).
type rdmaTransport interface {
	Dial(dst, local netip.AddrPort, ringBytes uint32, timeout time.Duration) (*sdp.Endpoint, error)
	Replicate(addr netip.AddrPort, v6only bool, backlog int) error
	DeviceFor(a netip.Addr) (string, bool, string)
	Devices() []string
}

var (
	_ rdmaTransport = (*rdma.Transport)(nil)
	_ rdmaTransport = (*rdma.Sim)(nil)
)

// rdmaState is the core's RDMA transport: started at init when the
// configuration may use RDMA and the host has a device (or the stand-in is
// asked for), so that the fds librdmacm and libibverbs open (rdma_cm, the
// devices' command and event fds, completion channels) or the stand-in's
// engine opens are born while libosf.so holds the program's low fd
// numbers, and land in osf's hidden range.
var rdmaState struct {
	t    rdmaTransport
	why  string // why there is no transport (detail of ReasonNoRDMADevice)
	fork bool   // a fork child that inherited its parent's RDMA state
	dev  string // a device name, for the fork child's probe
}

// startRDMA starts the RDMA transport if the configuration and the host
// allow it.
func startRDMA(cfg *policy.Config, pid, hiddenBase int, fresh bool) {
	if cfg.Transport != policy.Auto && cfg.Transport != policy.RDMAOnly {
		rdmaState.why = "OSF_TRANSPORT=" + cfg.Transport.String()
		return
	}
	rcfg := rdma.Config{
		HiddenBase: hiddenBase,
		PollSpin:   cfg.RDMAPoll,
		PID:        pid,
		ForkChild:  fresh,
		Links:      cfg.RDMALinks,
		Logf:       core.log.Debugf,
	}
	if cfg.DebugRDMASim {
		t, err := rdma.StartSim(rcfg)
		if err != nil {
			rdmaState.why = "RDMA stand-in: " + err.Error()
			return
		}
		rdmaState.t = t
		core.log.Infof("rdma: engine started on the software stand-in (OSF_DEBUG_RDMA_SIM=1)")
		return
	}
	devs := devroute.System.Devices()
	if len(devs) == 0 {
		rdmaState.why = noDevice
		return
	}
	t, err := rdma.Start(rcfg)
	switch {
	case errors.Is(err, rdma.ErrForkChild):
		rdmaState.fork, rdmaState.dev = true, devs[0]
		core.log.Infof("rdma: %v; connections to other hosts use kernel TCP", err)
	case err != nil:
		rdmaState.why = "RDMA devices unusable: " + err.Error()
		core.log.Errorf("rdma: %v; connections to other hosts use kernel TCP", err)
	default:
		rdmaState.t = t
		core.log.Infof("rdma: engine started on %v", t.Devices())
	}
}

// rdmaProbe reports whether an RDMA device serves the route to a; it is
// policy.Query.RDMADevice. A fork child that cannot use RDMA still sees
// the device, so that its connections record ReasonForkNoRDMA.
func rdmaProbe(a netip.Addr) (string, bool, string) {
	switch {
	case rdmaState.t != nil:
		return rdmaState.t.DeviceFor(a)
	case rdmaState.fork:
		return rdmaState.dev, true, ""
	case rdmaState.why != "":
		return "", false, rdmaState.why
	}
	return "", false, noDevice
}

// dialRDMA opens an RDMA connection for connect, or says which fallback
// reason applies (with the error for the detail).
func dialRDMA(dst, local netip.AddrPort) (*sdp.Endpoint, policy.Reason, string, error) {
	if rdmaState.fork {
		return nil, policy.ReasonForkNoRDMA, "process " + strconv.Itoa(os.Getpid()) + " is a fork child of one that set up RDMA; librdmacm's state cannot be shared", nil
	}
	if rdmaState.t == nil {
		return nil, policy.ReasonNoRDMADevice, rdmaState.why, nil
	}
	real := netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	ep, err := rdmaState.t.Dial(real, local, uint32(core.cfg.RingSize), core.cfg.ConnectTimeout)
	switch {
	case err == nil:
		return ep, policy.ReasonNone, "", nil
	case errors.Is(err, sdp.ErrNoListener):
		return nil, policy.ReasonNoListener, "", err
	case errors.Is(err, sdp.ErrBacklog):
		return nil, policy.ReasonBacklog, "", err
	case errors.Is(err, verbs.ErrNoDevice):
		return nil, policy.ReasonNoRDMADevice, "", err
	case errors.Is(err, rdma.ErrResource):
		return nil, policy.ReasonResource, "", err
	}
	return nil, policy.ReasonHandshake, "", err
}

// replicateRDMA makes an offloaded listener accept RDMA connections too.
func replicateRDMA(ap netip.AddrPort, v6only bool, backlog int, d policy.Decision) {
	switch {
	case !d.RDMA:
		if d.NoRDMA != "" {
			core.log.Debugf("listen %s: no RDMA listener: %s", ap, d.NoRDMA)
		}
	case rdmaState.fork:
		core.log.Infof("listen %s: no RDMA listener: fork child of a process that set up RDMA", ap)
	case rdmaState.t == nil:
		core.log.Debugf("listen %s: no RDMA listener: %s", ap, rdmaState.why)
	default:
		if err := rdmaState.t.Replicate(ap, v6only, backlog); err != nil {
			core.log.Errorf("listen %s: no RDMA listener: %v", ap, err)
		} else {
			core.log.Debugf("listen %s: RDMA listener via %s", ap, d.Device)
		}
	}
}
