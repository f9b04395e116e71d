package main

/*
#include <string.h>
#include <sys/socket.h>
#include "core_api.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/osfproject/osf/internal/gateway"
	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/shm"
	"golang.org/x/sys/unix"
)

// gw is the node side's gateway state: the key, read at first use, which
// gateway to try first next (new connections are spread across a rule's
// gateways), and gateways recently found dead, skipped for deadFor.
var gw struct {
	once    sync.Once
	key     []byte
	keyErr  error
	next    int
	deadTil map[netip.AddrPort]time.Time
}

// deadFor is how long a gateway that could not be reached is skipped
// (unless every gateway of the rule is).
const deadFor = 5 * time.Second

// gatewayConnect connects the application's own socket to one of the
// decision's gateways and sends the request for dst; C then waits for the
// reply on the application's thread (preload/gateway.c). On failure it
// answers the errno connect must fail with.
func gatewayConnect(in *C.struct_osf_core_connect_in, out *C.struct_osf_core_conn, dst netip.AddrPort, d policy.Decision) C.int {
	out.status = C.OSF_CORE_GATEWAY
	putSockaddr(&out.peer, dst)
	out.gw_wait_ms = C.uint32_t((core.cfg.GatewayTimeout + core.cfg.ConnectTimeout).Milliseconds())
	if loadGatewayKey() != nil {
		core.log.Errorf("connect %s through a gateway (rule %d): %v", dst, d.Rule, gw.keyErr)
		out.reason_errno = C.int32_t(unix.EACCES)
		return 0
	}
	fd := int(in.app_fd)
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		out.reason_errno = C.int32_t(errnoOr(err, unix.EBADF))
		return 0
	}
	unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK)
	defer unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
	v6 := in.family == C.AF_INET6
	gws := policy.GatewayAddrs(d.Gateways)
	order := gatewayOrder(gws)
	req := gateway.Request{Op: gateway.OpConnect, Dest: dst, Timeout: core.cfg.GatewayTimeout}
	var last error
	for _, g := range order {
		if ep, via, err := gatewayRing(g, req); ep != nil {
			ep.Local, ep.Remote = shm.AsFamily(ep.Local, dst.Addr()), dst
			fill(out, ep)
			out.status = C.OSF_CORE_GATEWAY
			putSockaddr(&out.gateway, g)
			out.rule = C.int32_t(d.Rule)
			core.log.Debugf("connect %s: gateway %s over %s (rule %d), request sent", dst, g, via, d.Rule)
			return 0
		} else if !errors.Is(err, sdp.ErrNoListener) {
			core.log.Warnf("connect %s: gateway %s offloaded: %v; trying kernel TCP", dst, g, err)
		}
		_, err := gatewayOffer(fd, v6, g, req)
		if err == nil {
			putSockaddr(&out.gateway, g)
			out.rule = C.int32_t(d.Rule)
			core.log.Debugf("connect %s: gateway %s (rule %d), request sent", dst, g, d.Rule)
			return 0
		}
		gw.deadTil[g] = time.Now().Add(deadFor)
		core.log.Warnf("connect %s: gateway %s: %v", dst, g, err)
		disconnect(fd)
		last = err
	}
	core.log.Errorf("connect %s: no gateway of rule %d reachable (%s): %v", dst, d.Rule, d.Gateways, last)
	out.reason_errno = C.int32_t(unix.ENETUNREACH)
	return 0
}

// gatewayRing opens the stream to gateway g as an offloaded connection,
// as a connect to g would be under OSF_TRANSPORT: shm when g serves this
// host (its companion is reachable here), else RDMA when a device serves
// the route to g and g accepts RDMA connections. It reads the challenge
// and sends req through the rings, and says which transport it used. It
// returns sdp.ErrNoListener when g offers no offloaded stream here.
func gatewayRing(g netip.AddrPort, req gateway.Request) (*sdp.Endpoint, string, error) {
	real := netip.AddrPortFrom(g.Addr().Unmap(), g.Port())
	local, err := shm.SourceFor(real)
	if err != nil {
		return nil, "", err
	}
	mode, via := core.cfg.Transport, "shm"
	var ep *sdp.Endpoint
	err = sdp.ErrNoListener
	if mode == policy.Auto || mode == policy.ShmOnly {
		ep, err = shm.Transport{Gateway: true}.Dial(real, local, uint32(core.cfg.RingSize), core.cfg.ConnectTimeout)
	}
	if errors.Is(err, sdp.ErrNoListener) && (mode == policy.Auto || mode == policy.RDMAOnly) {
		if _, ok, _ := rdmaProbe(real.Addr()); ok {
			var rerr error
			if ep, _, _, rerr = dialRDMA(real, local); ep != nil {
				err, via = nil, "rdma"
			} else if rerr != nil {
				err = rerr
			}
		}
	}
	if err != nil {
		return nil, "", err
	}
	ep.Local = local
	b := make([]byte, gateway.ChallengeSize)
	err = ep.ReadMsg(b, time.Now().Add(core.cfg.ConnectTimeout))
	var ch gateway.Challenge
	if err == nil {
		ch, err = gateway.ParseChallenge(b)
	}
	if err == nil {
		err = ep.WriteMsg(req.Marshal(gw.key, ch.Nonce))
	}
	if err != nil {
		ep.Close()
		return nil, "", fmt.Errorf("core: gateway %s over %s: %w", g, via, err)
	}
	return ep, via, nil
}

// loadGatewayKey reads the key once; it returns why there is none.
func loadGatewayKey() error {
	gw.once.Do(func() {
		gw.deadTil = make(map[netip.AddrPort]time.Time)
		if core.cfg.GatewayKey == "" {
			gw.keyErr = errors.New("OSF_GATEWAY_KEY is not set")
			return
		}
		gw.key, gw.keyErr = gateway.LoadKey(core.cfg.GatewayKey)
	})
	return gw.keyErr
}

// gatewayListen asks one of the decision's gateways to listen on the
// listener's port and deliver connections to it, over a control connection
// it hands to C (which hides it and closes it with the listener). On
// failure the listener stays a node-local kernel listener, and the reason
// says why. Unless OSF_TRANSPORT rules shm out, the listener also gets its
// shm companion, on which a gateway serving this host delivers the
// connections it accepts over shared memory (osfgw's deliverRing).
func gatewayListen(in *C.struct_osf_core_listen_in, out *C.struct_osf_core_listen_out, ap netip.AddrPort, d policy.Decision) C.int {
	out.gw = 1
	fail := func(errno unix.Errno, err error) C.int {
		out.reason = C.int32_t(policy.ReasonHandshake)
		out.reason_errno = C.int32_t(errno)
		setDetail(&out.detail, "gateway: "+err.Error())
		core.log.Errorf("listen %s through a gateway (rule %d): %v", ap, d.Rule, err)
		return 0
	}
	if err := loadGatewayKey(); err != nil {
		return fail(unix.EACCES, err)
	}
	if ap.Addr().Unmap().IsLoopback() {
		return fail(unix.EADDRNOTAVAIL, errors.New("the listener is bound to loopback, which the gateway cannot reach"))
	}
	bind := netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port())
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		bind = netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())
	}
	req := gateway.Request{Op: gateway.OpListen, Dest: bind, NodePort: ap.Port()}
	var last error = errors.New("no gateway")
	lastErrno := unix.ENETUNREACH
	for _, g := range gatewayOrder(policy.GatewayAddrs(d.Gateways)) {
		family := unix.AF_INET
		if !g.Addr().Is4() {
			family = unix.AF_INET6
		}
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return fail(errnoOr(err, unix.EMFILE), err)
		}
		r, nonce, err := gatewayListenOffer(fd, family == unix.AF_INET6, g, req)
		switch {
		case err != nil:
			gw.deadTil[g] = time.Now().Add(deadFor)
			last, lastErrno = fmt.Errorf("%s: %w", g, err), unix.ENETUNREACH
		case r.Errno != 0:
			last, lastErrno = fmt.Errorf("%s refused: %w", g, r.Errno), r.Errno
		default:
			out.fd = C.int32_t(fd)
			putSockaddr(&out.gateway, g)
			tok := gateway.DeliveryToken(gw.key, nonce)
			C.memcpy(unsafe.Pointer(&out.gw_token[0]), unsafe.Pointer(&tok[0]), C.size_t(len(tok)))
			if mode := core.cfg.Transport; mode == policy.Auto || mode == policy.ShmOnly {
				if cfd, err := shmTransport.Listen(ap, int(in.backlog), in.v6only != 0); err == nil {
					out.gw_companion = C.int32_t(cfd)
				} else {
					core.log.Infof("listen %s: no companion, the gateway delivers over kernel TCP: %v", ap, err)
				}
			}
			core.log.Infof("listen %s: gateway %s listens on %s for it (rule %d)", ap, g, r.Local, d.Rule)
			return 0
		}
		unix.Close(fd)
	}
	return fail(lastErrno, last)
}

// gatewayListenOffer sends a LISTEN request over fd and reads the reply.
// It also returns the challenge's nonce (the delivery token's).
func gatewayListenOffer(fd int, v6 bool, g netip.AddrPort, req gateway.Request) (gateway.Reply, [gateway.NonceSize]byte, error) {
	nonce, err := gatewayOffer(fd, v6, g, req)
	if err != nil {
		return gateway.Reply{}, nonce, err
	}
	deadline := time.Now().Add(core.cfg.ConnectTimeout)
	b := make([]byte, gateway.ReplySize)
	if err := readFull(fd, b, deadline, "reply"); err != nil {
		return gateway.Reply{}, nonce, err
	}
	r, err := gateway.ParseReply(b)
	return r, nonce, err
}

// gatewayOrder returns gws starting at the next one in turn, the ones
// recently found dead last.
func gatewayOrder(gws []netip.AddrPort) []netip.AddrPort {
	n := len(gws)
	start := gw.next % n
	gw.next++
	var alive, dead []netip.AddrPort
	now := time.Now()
	for i := range n {
		g := gws[(start+i)%n]
		if gw.deadTil[g].After(now) {
			dead = append(dead, g)
		} else {
			alive = append(alive, g)
		}
	}
	return append(alive, dead...)
}

// gatewayOffer connects fd (non-blocking) to gateway g, reads its challenge
// and sends req, each step within OSF_CONNECT_TIMEOUT_MS.
func gatewayOffer(fd int, v6 bool, g netip.AddrPort, req gateway.Request) (nonce [gateway.NonceSize]byte, err error) {
	var sa unix.Sockaddr
	switch {
	case g.Addr().Is4() && !v6:
		sa = &unix.SockaddrInet4{Port: int(g.Port()), Addr: g.Addr().As4()}
	case g.Addr().Is4():
		sa = &unix.SockaddrInet6{Port: int(g.Port()), Addr: g.Addr().As16()}
	case v6:
		sa = &unix.SockaddrInet6{Port: int(g.Port()), Addr: g.Addr().As16()}
	default:
		return nonce, errors.New("an IPv6 gateway for an IPv4 socket")
	}
	deadline := time.Now().Add(core.cfg.ConnectTimeout)
	err = unix.Connect(fd, sa)
	if errors.Is(err, unix.EINPROGRESS) {
		if err = waitFD(fd, unix.POLLOUT, deadline); err == nil {
			var soerr int
			soerr, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			if err == nil && soerr != 0 {
				err = unix.Errno(soerr)
			}
		}
		if err == nil {
			// Completes the socket's connect as the kernel sees it, so
			// that the application's next connect says EISCONN.
			unix.Connect(fd, sa)
		}
	}
	if err != nil {
		return nonce, err
	}
	b := make([]byte, gateway.ChallengeSize)
	if err := readFull(fd, b, deadline, "challenge"); err != nil {
		return nonce, err
	}
	ch, err := gateway.ParseChallenge(b)
	if err != nil {
		return nonce, err
	}
	wire := req.Marshal(gw.key, ch.Nonce)
	n, err := unix.SendmsgN(fd, wire, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	if err == nil && n != len(wire) {
		err = errors.New("short write of the request")
	}
	return ch.Nonce, err
}

// readFull reads len(b) bytes of the gateway's message what from the
// non-blocking fd by the deadline.
func readFull(fd int, b []byte, deadline time.Time, what string) error {
	for got := 0; got < len(b); {
		if err := waitFD(fd, unix.POLLIN, deadline); err != nil {
			return err
		}
		n, _, err := unix.Recvfrom(fd, b[got:], unix.MSG_DONTWAIT)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
		case err != nil:
			return err
		case n == 0:
			return errors.New("closed before its " + what)
		default:
			got += n
		}
	}
	return nil
}

// errTimeout is a step with a gateway that took too long.
var errTimeout = errors.New("timed out")

// waitFD waits until fd is ready for events or the deadline passes.
func waitFD(fd int, events int16, deadline time.Time) error {
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return errTimeout
		}
		p := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(p, ms)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return err
		case n > 0:
			return nil
		}
	}
}

// disconnect dissolves fd's connection (connect with AF_UNSPEC), so that
// the socket may connect again.
func disconnect(fd int) {
	var sa [16]byte // sa_family AF_UNSPEC
	unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa[0])), uintptr(len(sa)))
}
