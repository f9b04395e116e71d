package rdma

import (
	"github.com/osfproject/osf/verbs"
)

// Link is the reliable connection a stream mirrors its rings over: an RC
// queue pair whose peer registered a segment laid out like ours (verbsLink),
// or an in-process fake in tests. Rings are numbered as in the segment:
// ring 0 carries client-to-server bytes, ring 1 server-to-client.
//
// Work requests complete in the order they were posted; a receive
// completion for a write with immediate implies that its payload and every
// write posted before it on the peer's side has landed. Post methods never
// block; they fail with an error wrapping unix.ENOMEM when the send or
// receive queue is full (the stream never lets that happen) and with other
// errors once the link is broken.
type Link interface {
	// PostWrite copies n bytes at offset off of the local ring's data into
	// the same offset of the peer's copy of that ring; with withImm it is a
	// WRITE WITH IMMEDIATE carrying imm and consumes one of the peer's
	// posted receives. n > 0 and off+n <= ring bytes.
	PostWrite(wrid verbs.WRID, ring int, off, n uint32, imm uint32, withImm, signaled bool) error
	// PostImm posts a zero-length WRITE WITH IMMEDIATE.
	PostImm(wrid verbs.WRID, imm uint32, signaled bool) error
	// PostProbe posts a signaled zero-length RDMA WRITE: the peer's
	// device acknowledges it without consuming a receive or telling its
	// engine; it completes with an error when the peer is unreachable.
	PostProbe(wrid verbs.WRID) error
	// PostRecv posts one receive for the peer's next immediate.
	PostRecv(wrid verbs.WRID) error
	// Poll takes up to len(wc) completions without blocking.
	Poll(wc []verbs.WC) (int, error)
	// Notify arms the link so that its wake-up source (the device's
	// completion channel, or the fake's eventfd) fires at the next
	// completion; poll again after arming.
	Notify() error
	// Disconnect breaks the link: every posted work request that has not
	// completed completes with a flush error, and the peer learns of it.
	// It does not block.
	Disconnect() error
	// Close releases the link's resources; call it once the flush
	// completions have been seen (or the link is beyond caring).
	Close() error
}

// Work request kinds (the kind field of verbs.WRID). The seq field holds
// the stream's send sequence number for sends (the count of send work
// requests posted before this one), and the receive slot for receives.
const (
	wrWrite  uint8 = 1 // plain RDMA WRITE: the first part of wrapped data
	wrData   uint8 = 2 // WRITE WITH IMMEDIATE: data and new head
	wrCredit uint8 = 3 // zero-length WRITE WITH IMMEDIATE: credit
	wrFlags  uint8 = 4 // zero-length WRITE WITH IMMEDIATE: FIN
	wrClose  uint8 = 5 // zero-length WRITE WITH IMMEDIATE: CLOSE
	wrRecv   uint8 = 6 // receive
	wrProbe  uint8 = 7 // zero-length RDMA WRITE: is the peer alive?
)
