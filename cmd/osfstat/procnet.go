package main

import (
	"bufio"
	"encoding/binary"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// tcpRow is one line of /proc/PID/net/tcp or tcp6: a kernel TCP socket.
type tcpRow struct {
	local, remote netip.AddrPort
	state         tcpState
	sendQ, recvQ  int64
}

// tcpTable maps socket inodes to the kernel's view of the sockets of one
// network namespace.
type tcpTable map[uint64]tcpRow

// readTCPTable reads /proc/PID/net/tcp and tcp6, the TCP sockets of pid's
// network namespace. A file that cannot be read contributes nothing.
func readTCPTable(pid int) tcpTable {
	t := tcpTable{}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/" + name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		sc.Scan() // the header
		for sc.Scan() {
			if ino, row, ok := parseTCPLine(sc.Text()); ok && ino != 0 {
				t[ino] = row
			}
		}
		f.Close()
	}
	return t
}

// parseTCPLine parses a line such as
//
//	0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 12345 1 ...
//
// (sl, local, remote, st, tx_queue:rx_queue, tr:tm->when, retrnsmt, uid,
// timeout, inode, ...).
func parseTCPLine(line string) (ino uint64, row tcpRow, ok bool) {
	f := strings.Fields(line)
	if len(f) < 10 {
		return 0, row, false
	}
	var okL, okR bool
	row.local, okL = parseHexAddr(f[1])
	row.remote, okR = parseHexAddr(f[2])
	st, err := strconv.ParseUint(f[3], 16, 8)
	if !okL || !okR || err != nil {
		return 0, row, false
	}
	row.state = tcpState(st)
	tx, rx, found := strings.Cut(f[4], ":")
	if !found {
		return 0, row, false
	}
	sq, err1 := strconv.ParseUint(tx, 16, 64)
	rq, err2 := strconv.ParseUint(rx, 16, 64)
	ino, err3 := strconv.ParseUint(f[9], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, row, false
	}
	row.sendQ, row.recvQ = int64(sq), int64(rq)
	return ino, row, true
}

// parseHexAddr parses "0100007F:1F90" (IPv4) or 32 hex digits and a port
// (IPv6). The kernel prints each 32-bit word of the address as a number in
// the host's byte order.
func parseHexAddr(s string) (netip.AddrPort, bool) {
	a, p, found := strings.Cut(s, ":")
	if !found {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	var b [16]byte
	n := len(a) / 8
	if (n != 1 && n != 4) || len(a)%8 != 0 {
		return netip.AddrPort{}, false
	}
	for i := 0; i < n; i++ {
		w, err := strconv.ParseUint(a[8*i:8*i+8], 16, 32)
		if err != nil {
			return netip.AddrPort{}, false
		}
		binary.NativeEndian.PutUint32(b[4*i:], uint32(w))
	}
	if n == 1 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), uint16(port)), true
	}
	return netip.AddrPortFrom(netip.AddrFrom16(b), uint16(port)), true
}

// socketInode returns the inode of the socket at pid's fd, from the link
// "socket:[N]" in /proc/PID/fd; 0 when the fd is not a socket (any more).
func socketInode(pid, fd int) uint64 {
	link, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd))
	if err != nil {
		return 0
	}
	s, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return 0
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return 0
	}
	ino, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return ino
}

// netnsOf identifies pid's network namespace ("net:[4026531840]"); "" when
// it cannot be read.
func netnsOf(pid int) string {
	link, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	return link
}
