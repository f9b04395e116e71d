package sdp

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ErrMsgTimeout means the other side did not send a whole message in time.
var ErrMsgTimeout = errors.New("sdp: message timed out")

// ReadMsg reads exactly len(b) bytes that the other side sent into side's
// receive ring, before the C data path owns the connection (a handshake
// carried in the stream, such as a gateway's challenge): it waits for
// them on wakeFD, the endpoint's wake socket, until deadline. It fails
// when the other side ends first (its FIN, or the wake socket's end) or
// the ring's positions are impossible (ErrSegment).
func (s *Segment) ReadMsg(side, wakeFD int, b []byte, deadline time.Time) error {
	rx := 1 - side
	size := uint64(s.RingBytes)
	data := s.RingData(rx)
	var tok [MaxWakeTokens]byte
	for {
		head, tail := s.Head(rx), s.Tail(rx)
		used := head - tail
		if used > size {
			return fmt.Errorf("%w: receive ring positions %d, %d", ErrSegment, head, tail)
		}
		if used >= uint64(len(b)) {
			for i := range b {
				b[i] = data[s.RingPos(rx, tail+uint64(i))]
			}
			s.SetTail(rx, tail+uint64(len(b)))
			return nil
		}
		if s.SideFlags(1 - side).FIN() {
			return fmt.Errorf("%w: the other side ended after %d of %d bytes", ErrHandshake, used, len(b))
		}
		s.SetWant(side, WantRx, 1) // then look again: no wake-up is lost
		if s.Head(rx)-tail >= uint64(len(b)) {
			continue
		}
		ms := time.Until(deadline).Milliseconds()
		if ms <= 0 {
			return ErrMsgTimeout
		}
		p := []unix.PollFd{{Fd: int32(wakeFD), Events: unix.POLLIN}}
		n, err := unix.Poll(p, int(ms))
		switch {
		case errors.Is(err, unix.EINTR) || n == 0:
			continue
		case err != nil:
			return fmt.Errorf("sdp: wait for a message: %w", err)
		}
		got, _, err := unix.Recvfrom(wakeFD, tok[:], unix.MSG_DONTWAIT)
		switch {
		case got > 0:
			s.TakeTokens(side, WantRx, uint32(got))
		case err == nil:
			return fmt.Errorf("%w: the other side closed after %d of %d bytes", ErrHandshake, used, len(b))
		case !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
			return fmt.Errorf("sdp: wait for a message: %w", err)
		}
	}
}

// WriteMsg writes b into side's send ring and wakes the other side's
// readers on wakeFD if they asked for it, before the C data path owns
// the connection. It never waits: without room for all of b it fails.
func (s *Segment) WriteMsg(side, wakeFD int, b []byte) error {
	size := uint64(s.RingBytes)
	head, tail := s.Head(side), s.Tail(side)
	if head-tail > size || size-(head-tail) < uint64(len(b)) {
		return fmt.Errorf("%w: no room for a %d-byte message", ErrHandshake, len(b))
	}
	data := s.RingData(side)
	for i, c := range b {
		data[s.RingPos(side, head+uint64(i))] = c
	}
	s.SetHead(side, head+uint64(len(b)))
	peer := 1 - side
	if !s.TakeWant(peer, WantRx) {
		return nil
	}
	n := WakeTokens(s.Waiters(peer, WantRx))
	s.AddTokens(peer, WantRx, n)
	var tok [MaxWakeTokens]byte
	sent, err := unix.SendmsgN(wakeFD, tok[:n], nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	if err != nil {
		sent = 0
	}
	if uint32(sent) < n {
		s.TakeTokens(peer, WantRx, n-uint32(sent))
		s.SetWant(peer, WantRx, 1) // the next publish tries again
	}
	return nil
}
