package testutil

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/verbs"
)

// SkipIfNoRDMA skips t unless this machine can run RDMA device tests: an
// RDMA device that libibverbs can open, with at least one ACTIVE port, and
// the rdma_cm character device. The skip message says exactly what is
// missing, e.g. "no RDMA device: ibv_get_device_list returned 0 devices
// (errno ENOSYS: kernel has no RDMA support)". The probe runs once per
// test binary.
func SkipIfNoRDMA(t testing.TB) {
	t.Helper()
	rdmaOnce.Do(func() { rdmaReason = probeRDMA() })
	if rdmaReason != "" {
		t.Skip("no RDMA device: " + rdmaReason)
	}
}

var (
	rdmaOnce   sync.Once
	rdmaReason string
)

const (
	ibClassDir = "/sys/class/infiniband"
	rdmaCMDev  = "/dev/infiniband/rdma_cm"
)

// probeRDMA returns why RDMA tests cannot run here, or "" if they can.
func probeRDMA() string {
	devs, err := verbs.Devices()
	if err != nil {
		return noDevicesReason(err)
	}
	var states []string
	active := false
	for _, d := range devs {
		if d.Err != nil {
			states = append(states, fmt.Sprintf("%s cannot be opened (%v)", d.Name, d.Err))
			continue
		}
		for _, p := range d.Ports {
			if p.State.Active() {
				active = true
			}
			states = append(states, fmt.Sprintf("%s port %d is %s", d.Name, p.Num, p.State))
		}
	}
	if !active {
		return "no ACTIVE port: " + strings.Join(states, ", ")
	}
	if _, err := os.Stat(rdmaCMDev); err != nil {
		return rdmaCMDev + " is missing (modprobe rdma_ucm)"
	}
	return ""
}

// noDevicesReason explains a failed verbs.Devices.
func noDevicesReason(err error) string {
	if !errors.Is(err, verbs.ErrNoDevice) {
		return "ibv_get_device_list failed: " + err.Error()
	}
	errno := ""
	var e unix.Errno
	if errors.As(err, &e) {
		errno = unix.ErrnoName(e)
	}
	if errors.Is(err, verbs.ErrNoKernelSupport) {
		return fmt.Sprintf("ibv_get_device_list returned 0 devices (errno %s: kernel has no RDMA support)", errno)
	}
	ents, derr := os.ReadDir(ibClassDir)
	switch {
	case errors.Is(derr, os.ErrNotExist):
		return "ibv_get_device_list returned 0 devices; " + ibClassDir + " does not exist"
	case derr != nil:
		return "ibv_get_device_list returned 0 devices; " + derr.Error()
	case len(ents) == 0:
		return "ibv_get_device_list returned 0 devices; " + ibClassDir + " is empty"
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return "ibv_get_device_list returned 0 devices but " + ibClassDir + " lists " +
		strings.Join(names, ", ") + " (is the provider library, ibverbs-providers, installed?)"
}
