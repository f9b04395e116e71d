package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/shm"
)

// deliverRingBytes is the ring size of a delivery over shm (OSF_RING_SIZE's
// default).
const deliverRingBytes = 1 << 20

// nodeNetns finds the network namespace of this host that the node of
// control connection ctl runs in, among --node-netns and the gateway's own
// (""): the one holding the other end of ctl, a TCP socket whose local
// address is ctl's remote one and whose remote address is ctl's local one.
// ok is false when none does (the node is on another host).
func (g *gw) nodeNetns(ctl *net.TCPConn) (ns string, ok bool) {
	node, err1 := netip.ParseAddrPort(ctl.RemoteAddr().String())
	self, err2 := netip.ParseAddrPort(ctl.LocalAddr().String())
	if err1 != nil || err2 != nil {
		return "", false
	}
	for _, ns := range append(append([]string(nil), g.netns...), "") {
		found := false
		look := func() (int, error) { found = holdsTCP(node, self); return -1, nil }
		if ns == "" {
			runtime.LockOSThread()
			look()
			runtime.UnlockOSThread()
		} else if _, err := inNetns(ns, look); err != nil {
			continue
		}
		if found {
			return ns, true
		}
	}
	return "", false
}

// holdsTCP reports whether the calling thread's network namespace has a
// TCP socket from local to remote (/proc/thread-self/net/tcp and tcp6).
func holdsTCP(local, remote netip.AddrPort) bool {
	for _, f := range []string{"tcp", "tcp6"} {
		want := procAddr(local, f == "tcp6") + " " + procAddr(remote, f == "tcp6")
		file, err := os.Open("/proc/thread-self/net/" + f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 2 && strings.EqualFold(fields[1]+" "+fields[2], want) {
				file.Close()
				return true
			}
		}
		file.Close()
	}
	return false
}

// procAddr formats ap as /proc/net/tcp (v6: tcp6) does: the address's
// 32-bit words in host (little-endian) order, in hex, then the port.
func procAddr(ap netip.AddrPort, v6 bool) string {
	var b []byte
	if v6 {
		a := ap.Addr().As16()
		b = a[:]
	} else {
		a := ap.Addr().Unmap().As4()
		b = a[:]
	}
	var s strings.Builder
	for i := 0; i+4 <= len(b); i += 4 {
		fmt.Fprintf(&s, "%08X", binary.LittleEndian.Uint32(b[i:]))
	}
	fmt.Fprintf(&s, ":%04X", ap.Port())
	return s.String()
}

// deliverRing connects to the shm companion of the node's listener in the
// node's network namespace ns as the gateway's address self, with the
// notice already in the ring: the node's accept takes the notice, then
// the relayed bytes. sdp.ErrNoListener: the listener has no companion
// there (or no longer listens).
func deliverRing(ns string, listener, self netip.AddrPort, notice []byte) (*sdp.Endpoint, error) {
	var ep *sdp.Endpoint
	dial := func() (int, error) {
		var err error
		ep, err = shm.Transport{}.DialFirst(listener, self, deliverRingBytes, notice)
		return -1, err
	}
	if ns == "" {
		_, err := dial()
		return ep, err
	}
	if _, err := inNetns(ns, dial); err != nil {
		if ep != nil {
			ep.Close()
		}
		return nil, err
	}
	return ep, nil
}
