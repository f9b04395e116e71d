package sdp

import "testing"

// TestStateOf pins the one TCP-state mapping (osf_tcp_state) to what
// kernel TCP reports over loopback through TCP_INFO, measured with a probe
// (both ends): after connect ESTABLISHED; shutdown(SHUT_WR) here
// FIN_WAIT2, there CLOSE_WAIT; both shut down CLOSE on both ends; the
// peer closed CLOSE_WAIT; the peer reset (SO_LINGER 0, or closed with
// bytes unread) CLOSE; shut down here and the peer closed CLOSE.
func TestStateOf(t *testing.T) {
	for _, tc := range []struct {
		me, peer        SideFlags
		peerGone, reset bool
		want            TCPState
	}{
		{0, 0, false, false, TCPEstablished},
		{SideRDShut, 0, false, false, TCPEstablished},
		{SideFIN, 0, false, false, TCPFinWait2},
		{0, SideFIN, false, false, TCPCloseWait},
		{SideFIN, SideFIN, false, false, TCPClose},
		{0, SideFIN, true, false, TCPCloseWait},
		{0, 0, true, false, TCPCloseWait},
		{0, SideReset, true, true, TCPClose},
		{0, 0, true, true, TCPClose},
		{SideFIN, 0, true, false, TCPClose},
		{0, 0, false, true, TCPClose}, // a corrupt segment: reset
	} {
		if got := StateOf(tc.me, tc.peer, tc.peerGone, tc.reset); got != tc.want {
			t.Errorf("StateOf(%v, %v, gone %v, reset %v) = %d, want %d", tc.me, tc.peer, tc.peerGone, tc.reset, got, tc.want)
		}
	}
	// The numbers are Linux's (include/net/tcp_states.h).
	if TCPEstablished != 1 || TCPFinWait2 != 5 || TCPClose != 7 || TCPCloseWait != 8 {
		t.Errorf("TCP state numbers %d %d %d %d, want Linux's 1 5 7 8", TCPEstablished, TCPFinWait2, TCPClose, TCPCloseWait)
	}
}

func TestEndIsReset(t *testing.T) {
	for _, tc := range []struct {
		gone   SideFlags
		unread bool
		want   bool
	}{
		{0, false, false},
		{SideFIN, false, false},
		{SideReset, false, true},
		{0, true, true},
		{SideFIN | SideReset, true, true},
	} {
		if got := EndIsReset(tc.gone, tc.unread); got != tc.want {
			t.Errorf("EndIsReset(%v, unread %v) = %v, want %v", tc.gone, tc.unread, got, tc.want)
		}
	}
}

func TestWakeRules(t *testing.T) {
	for waiters, want := range map[uint32]uint32{0: 1, 1: 1, 2: 2, 31: 31, 32: 32, 33: 32, 1 << 31: 32} {
		if got := WakeTokens(waiters); got != want {
			t.Errorf("WakeTokens(%d) = %d, want %d", waiters, got, want)
		}
	}
	if MaxWakeTokens != 32 {
		t.Errorf("MaxWakeTokens = %d, want 32", MaxWakeTokens)
	}
	if got := WakeLowat(1 << 20); got != 1<<19 {
		t.Errorf("WakeLowat(1M) = %d, want half", got)
	}
}

// TestTxLimit: the in-flight limit and the writable room, as the C data
// path reckons them from the buffer sizes the programs set.
func TestTxLimit(t *testing.T) {
	const ring = 1 << 20
	for _, c := range []struct {
		snd, rcv     uint32
		limit, lowat uint64
	}{
		{0, 0, ring, ring / 2},                        // unset: the ring
		{4096, 0, 4096 + 131072, (4096 + 131072) / 2}, // SO_SNDBUF here, a fresh receive buffer there
		{0, 8192, ring/2 + 8192, (ring/2 + 8192) / 2}, // SO_RCVBUF there: half the ring and it
		{ring, ring, ring, ring / 2},                  // at most the ring
		{1000, 2000, 3000, 1500},
	} {
		if l, w := TxLimit(ring, c.snd, c.rcv); l != c.limit || w != c.lowat {
			t.Errorf("TxLimit(%d, %d, %d) = %d, %d, want %d, %d", ring, c.snd, c.rcv, l, w, c.limit, c.lowat)
		}
	}
	seg, err := CreateSegment(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	seg.side(0).sndlim = 100
	seg.side(1).rcvlim = 200
	if s, r := seg.BufLimits(0); s != 100 || r != 200 {
		t.Errorf("BufLimits(0) = %d, %d, want 100, 200", s, r)
	}
	if s, r := seg.BufLimits(1); s != 0 || r != 0 {
		t.Errorf("BufLimits(1) = %d, %d, want 0, 0", s, r)
	}
}
