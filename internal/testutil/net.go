package testutil

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Servers' ports come from below the ephemeral range (32768-60999 in a
// fresh network namespace), so that no client's port, which the kernel
// picks from that range, can take one between FreePort and the server's
// bind; a counter, started at a per-process offset, hands each port out
// once.
const portLo, portHi = 10000, 32768

var nextPort atomic.Int32

func init() { nextPort.Store(int32(os.Getpid() % (portHi - portLo))) }

// FreePort returns a TCP port that nothing listens on now, on any address
// (IPv4 or IPv6), and that no other FreePort call of this process returns.
// Inside the private network namespace of MainInNetns nobody else takes it.
func FreePort(t testing.TB) int {
	t.Helper()
	for range portHi - portLo {
		p := portLo + int(nextPort.Add(1))%(portHi-portLo)
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	t.Fatalf("testutil: no free port in %d-%d", portLo, portHi-1)
	return 0
}

// WaitListening waits at most timeout until a TCP socket listens on addr
// ("127.0.0.1:8080", "[::1]:8080"; a wildcard listener counts), and fails
// the test otherwise. It reads /proc/net/tcp and /proc/net/tcp6 instead of
// connecting, so the server sees no probe connection.
func WaitListening(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	want, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatalf("testutil: WaitListening: %v", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		ok, err := Listening(want)
		if err != nil {
			t.Fatalf("testutil: %v", err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testutil: nothing listens on %s after %v", addr, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Listening reports whether a TCP socket in this network namespace listens
// on want, or on the wildcard address of its family with want's port.
func Listening(want netip.AddrPort) (bool, error) {
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		ls, err := tcpListeners(file)
		if err != nil {
			return false, err
		}
		for _, l := range ls {
			if l.Port() != want.Port() {
				continue
			}
			a := l.Addr()
			if a == want.Addr() || a.Unmap() == want.Addr().Unmap() || a.IsUnspecified() {
				return true, nil
			}
		}
	}
	return false, nil
}

// tcpListeners parses the LISTEN sockets of /proc/net/tcp or tcp6.
func tcpListeners(file string) ([]netip.AddrPort, error) {
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil, nil // no IPv6
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != "0A" { // TCP_LISTEN
			continue
		}
		ap, err := parseProcAddr(fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %v", file, err)
		}
		out = append(out, ap)
	}
	return out, sc.Err()
}

// parseProcAddr parses "0100007F:1F90": the address as 32-bit words in host
// (little-endian) order, the port in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port in %q", s)
	}
	a, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(a, uint16(port)), nil
}
