package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/osfproject/osf/sdp/rdma"
	"github.com/osfproject/osf/shm"
	"github.com/osfproject/osf/verbs/devroute"
	"golang.org/x/sys/unix"
)

// listenRings binds the shm companion of the gateway's address, in its own
// network namespace and in each of --node-netns, so that nodes on this
// host reach it over shared memory as any osf listener (abstract unix
// names belong to a network namespace; a socket stays in the one it was
// made in). It returns the companion listeners (non-blocking).
func (g *gw) listenRings() ([]int, error) {
	var fds []int
	fd, err := shm.Transport{}.Listen(g.addr, 256, false)
	if err != nil {
		return nil, fmt.Errorf("osfgw: %w", err)
	}
	fds = append(fds, fd)
	for _, ns := range g.netns {
		fd, err := inNetns(ns, func() (int, error) { return shm.Transport{}.Listen(g.addr, 256, false) })
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, fmt.Errorf("osfgw: --node-netns %s: %w", ns, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// inNetns runs f on a thread moved into the network namespace at path,
// and moves the thread back.
func inNetns(path string, f func() (int, error)) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(self)
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("setns: %w", err)
	}
	fd, ferr := f()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: let it die with the
		// goroutine (LockOSThread without Unlock).
		runtime.LockOSThread()
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("setns back: %w", err)
	}
	return fd, ferr
}

// replicateRDMA starts the RDMA transport (the software stand-in with
// OSF_DEBUG_RDMA_SIM=1, for tests) and listens for RDMA connections on the
// gateway's address: the engine hands each one to the companion, where
// acceptRings takes it as any offloaded node. It says what it did, for the
// log; a host without a device simply has no RDMA leg.
func (g *gw) replicateRDMA() string {
	if !g.rdma {
		return "no RDMA (--rdma off)"
	}
	cfg := rdma.Config{PID: os.Getpid(), PollSpin: 20 * time.Microsecond}
	var t interface {
		Replicate(netip.AddrPort, bool, int) error
	}
	switch {
	case os.Getenv("OSF_DEBUG_RDMA_SIM") == "1":
		s, err := rdma.StartSim(cfg)
		if err != nil {
			return "no RDMA (stand-in: " + err.Error() + ")"
		}
		t = s
	case len(devroute.System.Devices()) == 0:
		return "no RDMA (" + devroute.NoDevice + ")"
	default:
		s, err := rdma.Start(cfg)
		if err != nil {
			return "no RDMA (" + err.Error() + ")"
		}
		t = s
	}
	if err := t.Replicate(g.addr, false, 256); err != nil {
		return "no RDMA (" + err.Error() + ")"
	}
	return "over RDMA"
}

// acceptRings accepts offloaded node connections on a companion listener
// until ctx ends; each runs as a node connection over its rings.
func (g *gw) acceptRings(ctx context.Context, lfd int) {
	defer unix.Close(lfd)
	for ctx.Err() == nil {
		p := []unix.PollFd{{Fd: int32(lfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(p, 500); n <= 0 || err != nil {
			continue
		}
		cfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
				g.log.Printf("accept over shm: %v", err)
			}
			continue
		}
		go func() {
			ep, err := shm.Transport{}.Accept(cfd, g.addr, handshakeTimeout)
			if err != nil {
				g.log.Printf("refused a node over shm: %v", err)
				unix.Close(cfd)
				return
			}
			leg, err := newRingLeg(ep)
			if err != nil {
				g.log.Printf("node %s: %v", ep.Remote, err)
				ep.Close()
				return
			}
			g.handle(leg)
		}()
	}
}
