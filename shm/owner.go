package shm

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// A companion name can be bound by any process of the network namespace,
// so a client trusts the companion only when its owner (SO_PEERCRED: who
// called listen on it) holds a kernel TCP listener that the companion
// stands for: bound to the address itself, or, for a wildcard name, to a
// wildcard. The census of kernel listeners comes from NETLINK_SOCK_DIAG
// (inet_diag), as in preload/setup_connect.c, which does the same in C.

// tcpListener is one kernel TCP listener: its owner and bound address.
type tcpListener struct {
	uid  uint32
	addr netip.Addr // 16-byte form (IPv4 mapped)
}

// Layout of the kernel's inet_diag messages (linux/inet_diag.h).
const (
	sizeofNlmsghdr     = 16
	sizeofInetDiagReq  = 56 // struct inet_diag_req_v2
	sizeofInetDiagMsg  = 72 // struct inet_diag_msg
	tcpListenState     = 10
	inetDiagMsgSrc     = 8  // id.idiag_src within inet_diag_msg
	inetDiagMsgUID     = 64 // idiag_uid within inet_diag_msg
	inetDiagMsgSport   = 4  // id.idiag_sport (big endian)
	nlmsgDone          = 3
	nlmsgError         = 2
	netlinkDumpRequest = unix.NLM_F_REQUEST | unix.NLM_F_DUMP
)

// tcpListeners returns the kernel TCP listeners (IPv4 and IPv6) on port.
func tcpListeners(port uint16) ([]tcpListener, error) {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("shm: sock_diag socket: %w", err)
	}
	defer unix.Close(s)
	var out []tcpListener
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		ls, err := diagDump(s, fam, port)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

func diagDump(s int, fam uint8, port uint16) ([]tcpListener, error) {
	req := make([]byte, sizeofNlmsghdr+sizeofInetDiagReq)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], netlinkDumpRequest)
	r := req[sizeofNlmsghdr:]
	r[0] = fam
	r[1] = unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], 1<<tcpListenState)
	binary.BigEndian.PutUint16(r[8:], port) // id.idiag_sport
	if err := unix.Sendto(s, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("shm: sock_diag request: %w", err)
	}
	var out []tcpListener
	buf := make([]byte, 8192)
	for range 1000 {
		n, _, err := unix.Recvfrom(s, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("shm: sock_diag reply: %w", err)
		}
		for b := buf[:n]; len(b) >= sizeofNlmsghdr; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			if l < sizeofNlmsghdr || l > len(b) {
				return nil, fmt.Errorf("shm: sock_diag: bad reply")
			}
			typ := binary.NativeEndian.Uint16(b[4:])
			d := b[sizeofNlmsghdr:l]
			b = b[min((l+3)&^3, len(b)):]
			switch typ {
			case nlmsgDone:
				return out, nil
			case nlmsgError:
				return nil, fmt.Errorf("shm: sock_diag: %w", unix.EINVAL)
			}
			if len(d) < sizeofInetDiagMsg || d[1] != tcpListenState ||
				binary.BigEndian.Uint16(d[inetDiagMsgSport:]) != port {
				continue
			}
			var a [16]byte
			if fam == unix.AF_INET {
				a = netip.AddrFrom4([4]byte(d[inetDiagMsgSrc : inetDiagMsgSrc+4])).As16()
			} else {
				a = [16]byte(d[inetDiagMsgSrc : inetDiagMsgSrc+16])
			}
			out = append(out, tcpListener{
				uid:  binary.NativeEndian.Uint32(d[inetDiagMsgUID:]),
				addr: netip.AddrFrom16(a),
			})
		}
	}
	return nil, fmt.Errorf("shm: sock_diag: reply does not end")
}

// owned reports whether uid holds a kernel TCP listener that a companion
// named for dst serves: bound to dst's address or to a wildcard (wild: a
// wildcard name, which only a wildcard listener has).
func owned(ls []tcpListener, uid uint32, dst netip.Addr, wild bool) bool {
	want := netip.AddrFrom16(dst.As16())
	for _, l := range ls {
		if l.uid != uid {
			continue
		}
		if l.addr.Unmap().IsUnspecified() || (!wild && l.addr == want) {
			return true
		}
	}
	return false
}

// trusted reports whether the companion at the other end of fd is owned
// by a process that holds a kernel TCP listener it stands for.
func trusted(fd int, ls []tcpListener, dst netip.Addr, wild bool) bool {
	cr, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	return err == nil && owned(ls, cr.Uid, dst, wild)
}
