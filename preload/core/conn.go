package main

/*
#include <sys/socket.h>
#include "core_api.h"
#include "../../fdtable/fdtable.h"
*/
import "C"

import (
	"errors"
	"net/netip"
	"time"
	"unsafe"

	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/shm"
	"golang.org/x/sys/unix"
)

var shmTransport shm.Transport

//export osfcore_listen
func osfcore_listen(in *C.struct_osf_core_listen_in, out *C.struct_osf_core_listen_out) C.int {
	out.fd, out.gw_companion = -1, -1
	if core.cfg == nil {
		return C.int(unix.ENOSYS)
	}
	ap, err := addrPort(in.family, &in.addr, in.port)
	if err != nil {
		return C.int(unix.EAFNOSUPPORT)
	}
	d := core.cfg.Decide(query(policy.Server, ap))
	out.rule = C.int32_t(d.Rule)
	if d.Transport == policy.Gateway {
		return gatewayListen(in, out, ap, d)
	}
	if d.Transport == policy.Kernel {
		out.reason = C.int32_t(d.Reason)
		core.log.Debugf("listen %s: %s", ap, d)
		return 0
	}
	fd, err := shmTransport.Listen(ap, int(in.backlog), in.v6only != 0)
	if err != nil {
		out.reason = C.int32_t(policy.ReasonResource)
		out.reason_errno = C.int32_t(errnoOf(err))
		setDetail(&out.detail, err.Error())
		core.log.Errorf("listen %s: no offload listener: %v", ap, err)
		return 0
	}
	out.fd = C.int32_t(fd)
	core.log.Debugf("listen %s: %s, companion fd %d", ap, d, fd)
	// Connections the RDMA listener accepts arrive on the companion.
	replicateRDMA(ap, in.v6only != 0, int(in.backlog), d)
	return 0
}

//export osfcore_connect
func osfcore_connect(in *C.struct_osf_core_connect_in, out *C.struct_osf_core_conn) C.int {
	out.wake_fd, out.seg_fd, out.wake_tx_fd = -1, -1, -1
	if core.cfg == nil {
		return C.int(unix.ENOSYS)
	}
	dst, err := addrPort(in.family, &in.addr, in.port)
	if err != nil {
		return C.int(unix.EAFNOSUPPORT)
	}
	t0 := time.Now()
	d := core.cfg.Decide(query(policy.Client, dst))
	out.rule = C.int32_t(d.Rule)
	if d.Transport == policy.Gateway {
		return gatewayConnect(in, out, dst, d)
	}
	if d.Transport == policy.Kernel {
		return kernel(out, dst, d.Reason, d.Detail, nil)
	}
	local, err := clientAddr(in, dst)
	if err != nil {
		return kernel(out, dst, policy.ReasonHandshake, "", err)
	}
	if d.Transport == policy.RDMA {
		t1 := time.Now()
		ep, r, detail, err := dialRDMA(dst, local)
		if ep == nil {
			return kernel(out, dst, r, detail, err)
		}
		ep.Local, ep.Remote = local, dst
		fill(out, ep)
		core.log.Debugf("connect %s: rdma via %s (rule %d), local %s; decision and source address %v, dial %v", dst, d.Device, d.Rule, local, t1.Sub(t0), time.Since(t1))
		return 0
	}
	real := netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	ep, err := shmTransport.Dial(real, shm.AsFamily(local, real.Addr()), uint32(core.cfg.RingSize), core.cfg.ConnectTimeout)
	switch {
	case errors.Is(err, sdp.ErrNoListener):
		return kernel(out, dst, policy.ReasonNoListener, "", nil)
	case errors.Is(err, sdp.ErrBacklog):
		return kernel(out, dst, policy.ReasonBacklog, "", nil)
	case err != nil:
		return kernel(out, dst, policy.ReasonHandshake, "", err)
	}
	ep.Local, ep.Remote = local, dst
	fill(out, ep)
	core.log.Debugf("connect %s: shm (rule %d), local %s", dst, d.Rule, local)
	return 0
}

// kernel answers "use kernel TCP" for a connect, or "refuse" in strict mode
// when the reason is a fallback.
func kernel(out *C.struct_osf_core_conn, dst netip.AddrPort, r policy.Reason, detail string, err error) C.int {
	out.status = C.OSF_CORE_KERNEL
	if core.cfg.Strict && r.Fallback() {
		out.status = C.OSF_CORE_REFUSE
	}
	out.reason = C.int32_t(r)
	if err != nil {
		out.reason_errno = C.int32_t(errnoOf(err))
		detail = err.Error()
	}
	setDetail(&out.detail, detail)
	if out.status == C.OSF_CORE_REFUSE {
		core.log.Errorf("connect %s refused (OSF_STRICT=1): %s", dst, r.Describe(int(out.rule), detail))
	} else {
		core.log.Debugf("connect %s: kernel: %s", dst, r.Describe(int(out.rule), detail))
	}
	return 0
}

// clientAddr is the address the client reports as its own: the one it is
// bound to, else the kernel's source address for dst; with a synthesized
// port unless it bound one.
func clientAddr(in *C.struct_osf_core_connect_in, dst netip.AddrPort) (netip.AddrPort, error) {
	var raw [28]byte
	for i := range raw {
		raw[i] = byte(in.bound[i])
	}
	bound, ok := sdp.Sockaddr(raw[:])
	a, err := sources.get(dst.Addr().Unmap())
	if err != nil {
		return netip.AddrPort{}, err
	}
	port := shm.ClientPort()
	if ok && !bound.Addr().IsUnspecified() {
		a = bound.Addr()
	}
	if ok && bound.Port() != 0 {
		port = bound.Port()
	}
	return shm.AsFamily(netip.AddrPortFrom(a, port), dst.Addr()), nil
}

// sources caches the kernel's source address per destination for
// sourceTTL: a connect asked it each time (a UDP socket connected and
// named: 1-4 ms of each RDMA connect's core work in an emulated guest,
// with the route decision), as routes' devices are cached
// (rdma.Transport.DeviceFor). Core's thread only (its calls are served
// one at a time).
var sources sourceCache

// sourceTTL is how long a source address is trusted: as a device's
// answer for a route.
const sourceTTL = 2 * time.Second

type sourceCache struct {
	m map[netip.Addr]sourceAnswer
}

type sourceAnswer struct {
	src netip.Addr
	at  time.Time
}

// get returns the kernel's source address for dst (shm.SourceFor's),
// asking the kernel when it has none younger than sourceTTL.
func (c *sourceCache) get(dst netip.Addr) (netip.Addr, error) {
	now := time.Now()
	if r, ok := c.m[dst]; ok && now.Sub(r.at) < sourceTTL {
		return r.src, nil
	}
	src, err := shm.SourceFor(netip.AddrPortFrom(dst, 0))
	if err != nil {
		return netip.Addr{}, err
	}
	if c.m == nil || len(c.m) >= 256 {
		c.m = map[netip.Addr]sourceAnswer{} // a bound, not an LRU: start over
	}
	c.m[dst] = sourceAnswer{src: src.Addr(), at: now}
	return src.Addr(), nil
}

// fill hands an endpoint's fds and mapping to C.
func fill(out *C.struct_osf_core_conn, ep *sdp.Endpoint) {
	out.status = C.OSF_CORE_OFFLOADED
	out.ring_bytes = C.uint32_t(ep.Segment.RingBytes)
	addr, segFD := ep.Segment.Release()
	out.seg_addr = C.uint64_t(addr)
	out.seg_fd = C.int32_t(segFD)
	out.wake_fd = C.int32_t(ep.WakeFD)
	out.wake_tx_fd = C.int32_t(ep.WakeTxFD)
	out.side = C.int32_t(ep.Side)
	putSockaddr(&out.local, ep.Local)
	putSockaddr(&out.peer, ep.Remote)
}

// putSockaddr writes ap into dst, a C struct's 28-byte sockaddr (C.uint8_t
// is a byte).
func putSockaddr(dst *[28]C.uint8_t, ap netip.AddrPort) {
	sdp.PutSockaddr((*[28]byte)(unsafe.Pointer(dst))[:], ap)
}

func query(role policy.Role, ap netip.AddrPort) policy.Query {
	return policy.Query{Role: role, Program: core.prog, Addr: ap, IsLocal: core.isLocal, RDMADevice: core.rdma}
}

var errFamily = errors.New("core: address family not supported")

// addrPort converts a C family/address/port triple.
func addrPort(family C.int32_t, addr *[16]C.uint8_t, port C.uint16_t) (netip.AddrPort, error) {
	raw := (*[16]byte)(unsafe.Pointer(addr))
	switch family {
	case C.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[:4])), uint16(port)), nil
	case C.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(*raw), uint16(port)), nil
	}
	return netip.AddrPort{}, errFamily
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

func errnoOr(err error, def unix.Errno) unix.Errno {
	if e := errnoOf(err); e != 0 {
		return e
	}
	return def
}
