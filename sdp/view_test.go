package sdp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func selfFD(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// set stores v in a field of the C layout, whatever its C integer type.
func set[T ~uint32](p *T, v uint32) { *p = T(v) }

// TestPeekHeader writes a segment the way the data path does and reads it
// back through /proc as osfstat does.
func TestPeekHeader(t *testing.T) {
	const ring = 4096
	seg, err := CreateSegment(ring)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	seg.InitHeader(netip.MustParseAddrPort("127.0.0.1:5000"), netip.MustParseAddrPort("127.0.0.1:80"), 1234)
	seg.SetServerPID(5678)
	h := seg.header()
	h.ring[SideClient].head, h.ring[SideClient].tail = 7000, 6000
	h.ring[SideServer].head, h.ring[SideServer].tail = 300, 300
	h.side[SideClient].send_calls, h.side[SideClient].recv_calls = 3, 4
	h.side[SideClient].sleeps, h.side[SideClient].wakes_sent = 5, 6
	set(&h.side[SideServer].flags, uint32(SideFIN|SideRDShut))
	h.side[SideServer].close_seq, h.side[SideServer].holders = 1, 0

	var st unix.Stat_t
	if err := unix.Fstat(seg.FD, &st); err != nil {
		t.Fatal(err)
	}
	v, err := PeekHeader(selfFD(seg.FD), ring, st.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if bad := v.Check(ring); len(bad) != 0 {
		t.Errorf("Check: %q", bad)
	}
	if v.ClientPID != 1234 || v.ServerPID != 5678 || v.Ring[0] != (RingView{7000, 6000}) ||
		v.Ring[1] != (RingView{300, 300}) || v.Side[0].SendCalls != 3 || v.Side[0].RecvCalls != 4 ||
		v.Side[0].Sleeps != 5 || v.Side[0].WakesSent != 6 || v.Side[1].Flags.String() != "FIN|RDSHUT" ||
		v.Side[1].CloseSeq != 1 {
		t.Errorf("PeekHeader = %+v", v)
	}
	if used, ok := v.Ring[0].Used(ring); used != 1000 || !ok {
		t.Errorf("Used = %d %v", used, ok)
	}

	// A segment closed while being read is gone, not invalid.
	if _, err := PeekHeader("/proc/self/fd/999999", ring, st.Ino); !errors.Is(err, ErrSegmentGone) {
		t.Errorf("PeekHeader of a closed fd: %v, want ErrSegmentGone", err)
	}
	if _, err := PeekHeader(selfFD(seg.FD), ring, st.Ino+1); !errors.Is(err, ErrSegmentGone) {
		t.Errorf("PeekHeader of a reused fd: %v, want ErrSegmentGone", err)
	}

	// Impossible positions are shown, not trusted.
	h.ring[SideClient].head, h.ring[SideClient].tail = 10, 20
	v, err = PeekHeader(selfFD(seg.FD), ring, 0)
	if err != nil {
		t.Fatal(err)
	}
	if used, ok := v.Ring[0].Used(ring); used != -10 || ok {
		t.Errorf("Used of head 10 tail 20 = %d %v, want -10 false", used, ok)
	}
	h.ring[SideClient].head = 20 + 2*ring
	v, _ = PeekHeader(selfFD(seg.FD), ring, 0)
	if used, ok := v.Ring[0].Used(ring); used != 2*ring || ok {
		t.Errorf("Used of an overfull ring = %d %v", used, ok)
	}
	h.ring_bytes = 1 << 30
	v, _ = PeekHeader(selfFD(seg.FD), ring, 0)
	if bad := v.Check(ring); len(bad) != 1 {
		t.Errorf("Check of a header with another ring size: %q", bad)
	}

	for _, tc := range []struct {
		name string
		ring uint32
		ino  uint64
	}{{"other size", 8192, 0}, {"other inode", ring, st.Ino + 1}, {"bad ring size", 1000, 0}} {
		if _, err := PeekHeader(selfFD(seg.FD), tc.ring, tc.ino); !errors.Is(err, ErrSegment) {
			t.Errorf("%s: err %v, want ErrSegment", tc.name, err)
		}
	}
}

// TestPeekHeaderRefuses checks that PeekHeader refuses what could hurt or
// disturb: an unsealed memfd (it could shrink under the mapping), and a
// FIFO (opening one would block, or wake a writer).
func TestPeekHeaderRefuses(t *testing.T) {
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(Bytes(4096))); err != nil {
		t.Fatal(err)
	}
	if _, err := PeekHeader(selfFD(fd), 4096, 0); !errors.Is(err, ErrSegment) {
		t.Errorf("unsealed memfd: err %v, want ErrSegment", err)
	}

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := PeekHeader(fifo, 4096, 0); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrSegment) {
			t.Errorf("FIFO: err %v, want ErrSegment", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PeekHeader blocked on a FIFO")
	}
	if _, err := PeekHeader(filepath.Join(t.TempDir(), "missing"), 4096, 0); err == nil || errors.Is(err, ErrSegment) {
		t.Errorf("missing file: err %v, want the stat error", err)
	}
	if _, err := ReadHeader(make([]byte, 16)); !errors.Is(err, ErrSegment) {
		t.Errorf("ReadHeader of 16 bytes: err %v", err)
	}
	_ = os.Remove(fifo)
}

func TestSideFlagsString(t *testing.T) {
	for f, want := range map[SideFlags]string{0: "-", SideFIN: "FIN", SideFIN | SideReset: "FIN|RESET", 0x80: "0x80", SideRDShut | 0x100: "RDSHUT|0x100"} {
		if got := f.String(); got != want {
			t.Errorf("SideFlags(%#x) = %q, want %q", uint32(f), got, want)
		}
	}
}

// TestReadFault checks that a header that faults (a file shrunk under the
// mapping, which the seals normally prevent) gives an error, not a crash.
func TestReadFault(t *testing.T) {
	fd, err := unix.MemfdCreate("shrink", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, SizeofHeader); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(fd, 0, SizeofHeader, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if err := unix.Ftruncate(fd, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := readGuarded(m); !errors.Is(err, ErrSegment) {
		t.Errorf("reading a faulting header: err %v, want ErrSegment", err)
	}
}
