package rdma

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// Links (OSF_RDMA_LINKS=1, docs/RDMA.md "Links"): one link per pair of
// processes, dialing process and listening process, carries many streams:
// over the stand-in's socket (links.go) or a device's RC queue pair
// (qplink.go); this file holds what both share. The first connection from
// this process to a listener of another makes the link; a later one to the
// same listener costs one message on it, a stream-open carrying the
// hello's addresses and the ring size, answered by an accept or a reject
// (no listener: ECONNREFUSED as today), with no handshake of its own. The
// trust domain is unchanged: the peer process that writes a link's streams
// is the one that would write their rings over connections of their own.
//
// Each stream keeps its own rings, credits, FIN and CLOSE (stream.go,
// rx.h), so a stream whose reader stalls stops only its own writer; the
// link only carries the messages, and its receiver places every write in
// the ring of the stream it names, whatever the state of the others.
//
// Immediates on a link name the stream:
//
//	31 30 29      22 21                 0
//	+----+----------+--------------------+
//	|kind|  stream  |  low 22 bits value |
//	+----+----------+--------------------+
//
// kind and value as in a connection's immediates (imm.go: DATA, CREDIT,
// FLAGS, CLOSE); stream 1-255 (0 is never a stream). A stream's position
// moves by at most one ring between two of its messages, so a ring of at
// most 2 MiB (linkMaxRing) lets the receiver rebuild the full position
// from 22 bits and the last one it knew; larger rings use a connection
// of their own.
const (
	linkSlotBits  = 8
	linkValueBits = 22
	linkValueMask = 1<<linkValueBits - 1
	// linkSlots is how many streams a link carries at once; a dial that
	// finds its link full uses a connection of its own.
	linkSlots = 1<<linkSlotBits - 1
	// linkMaxRing is the largest ring a stream on a link may have.
	linkMaxRing = 1 << (linkValueBits - 1)
	// linkReads bounds the reads of one wake-up of the link (16 frames
	// of 64 KiB at most): the engine applies what they brought to the
	// streams, and posts their receives again, before it reads more.
	linkReads = 4
	// linkRNRMax bounds the messages of one stream waiting for a receive
	// the stream has not posted yet (what linkReads can bring, and
	// more): beyond it, a protocol violation.
	linkRNRMax = 1 << 16
)

// MakeLinkImm is the immediate of a stream's message on a link: imm (of
// MakeImm's layout, kinds 0-3) for the stream in slot.
func MakeLinkImm(slot uint8, imm uint32) uint32 {
	k, v := ParseImm(imm)
	return (uint32(k)&3)<<(linkSlotBits+linkValueBits) | uint32(slot)<<linkValueBits | v&linkValueMask
}

// ParseLinkImm splits an immediate received on a link into kind, stream
// slot and the low 22 bits of the value.
func ParseLinkImm(imm uint32) (ImmKind, uint8, uint32) {
	return ImmKind(imm >> (linkSlotBits + linkValueBits)), uint8(imm >> linkValueBits), imm & linkValueMask
}

// advanceLink is Advance for 22-bit values.
func advanceLink(from uint64, low uint32) uint64 {
	return from + uint64((low-uint32(from))&linkValueMask)
}

// linkOpen is a dial waiting for its stream-open's answer.
type linkOpen struct {
	dst          netip.AddrPort
	wake, wakeTx int // the engine's ends of the application's wake sockets
	done         chan error
	cancelled    bool    // the dial gave up: an accept is answered by END
	taken        bool    // a qpLink took the dial's mapping (qpLink.openStream)
	on           *qpLink // the link its stream-open was posted on, if any
	answered     bool    // finish ran
	ready        int     // > 0: an eventfd written just before the answer (the dial sleeps on it)
}

// finish answers the dial.
func (o *linkOpen) finish(err error) {
	o.answered = true
	if o.ready > 0 {
		var one = [8]byte{1}
		_, _ = unix.Write(o.ready, one[:])
	}
	o.done <- err
}

// checkAccept decodes the accept of the stream in slot, of ringBytes.
func checkAccept(p []byte, ringBytes uint32, slot uint8) (AcceptData, error) {
	ad, err := DecodeAcceptData(p)
	if err != nil || ad.RingBytes != ringBytes {
		return ad, fmt.Errorf("bad accept of stream %d (%v)", slot, err)
	}
	return ad, nil
}

// start starts the stream of an accepted stream-open over l, whose
// engine mapping is seg, and tells the dial; a dial that gave up, or a
// stream that cannot start, is dropped. It returns the stream, or nil.
func (o *linkOpen) start(eng *Engine, seg *sdp.Segment, l Link, drop func()) *stream {
	if o.cancelled {
		drop()
		return nil
	}
	st, err := eng.addStream(eng.allocID(), seg, sdp.SideClient, l, o.wake, o.wakeTx)
	if err != nil {
		drop()
		o.finish(resourceError(err))
		return nil
	}
	o.finish(nil)
	return st
}

// rejectCode is the reject block p's code (RejectSetup when p is none).
func rejectCode(p []byte) RejectCode {
	code, ok := DecodeReject(p)
	if !ok {
		code = RejectSetup
	}
	return code
}

// linkSlotsUsed is how many slots dials use (linkSlots; fewer in tests).
var linkSlotsUsed = linkSlots

// linkRecvs are a stream's receives on a link (muxEnd, qpEnd): counted
// here, matched in order with the stream's immediates as they arrive,
// and its completions. Engine goroutine only.
type linkRecvs struct {
	rq  []verbs.WRID // receives posted, not used
	cq  []verbs.WC
	rnr []verbs.WC // immediates that came before a receive was posted

	lastData, lastCredit uint64 // the positions the 22-bit values advance
}

func (r *linkRecvs) complete(wc verbs.WC) { r.cq = append(r.cq, wc) }

// arrive completes the stream's next receive with the immediate imm of a
// write of n bytes, rebuilt in MakeImm's layout: the full position from
// its 22 bits, checked by the stream's rule (rx.h) as any other.
func (r *linkRecvs) arrive(imm, n uint32) error {
	kind, slot, low := ParseLinkImm(imm)
	v := uint64(low)
	switch kind {
	case ImmData:
		r.lastData = advanceLink(r.lastData, low)
		v = r.lastData
	case ImmCredit:
		r.lastCredit = advanceLink(r.lastCredit, low)
		v = r.lastCredit
	}
	wc := verbs.WC{Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: n, ImmData: MakeImm(kind, v), HasImm: true}
	if len(r.rq) == 0 {
		if len(r.rnr) >= linkRNRMax {
			return fmt.Errorf("stream %d: %d messages without a receive", slot, len(r.rnr))
		}
		r.rnr = append(r.rnr, wc)
		return nil
	}
	wc.WRID = uint64(r.rq[0])
	r.rq = r.rq[1:]
	r.complete(wc)
	return nil
}

// flushRecvs completes every posted receive with a flush.
func (r *linkRecvs) flushRecvs() {
	for _, w := range r.rq {
		r.complete(verbs.WC{WRID: uint64(w), Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv})
	}
	r.rq, r.rnr = nil, nil
}

// postRecv posts a receive of a stream whose end is up (ended: flushed
// at once), completing it right away with an immediate that came first.
func (r *linkRecvs) postRecv(wrid verbs.WRID, ended bool) {
	switch {
	case ended:
		r.complete(verbs.WC{WRID: uint64(wrid), Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv})
	case len(r.rnr) > 0:
		wc := r.rnr[0]
		r.rnr = r.rnr[1:]
		wc.WRID = uint64(wrid)
		r.complete(wc)
	default:
		r.rq = append(r.rq, wrid)
	}
}

// Poll takes up to len(wc) of the stream's completions.
func (r *linkRecvs) Poll(wc []verbs.WC) (int, error) { return takeWCs(&r.cq, wc), nil }

// errLinkFull means the link to a listener carries linkSlots streams: the
// dial uses a connection of its own.
var errLinkFull = errors.New("rdma sim: link full")

// newLinkSegment makes the segment of a dial of a stream on a link and
// the engine's mapping of it. On error nothing is left.
func newLinkSegment(ringBytes uint32, local, dst netip.AddrPort, pid int) (seg, mirror *sdp.Segment, err error) {
	if seg, err = sdp.CreateSegment(ringBytes); err != nil {
		return nil, nil, resourceError(err)
	}
	seg.InitHeader(local, dst, pid)
	seg.SetFlags(sdp.SegRDMA | sdp.SegLink)
	if mirror, err = seg.Mirror(); err != nil {
		seg.Close()
		return nil, nil, resourceError(err)
	}
	return seg, mirror, nil
}

// newStreamDial makes what a dial of a stream on a link needs: the
// segment, the engine's mapping of it and the wake sockets. On error
// nothing is left.
func newStreamDial(ringBytes uint32, local, dst netip.AddrPort, pid, hiddenBase int) (seg, mirror *sdp.Segment, ws wakeSockets, err error) {
	if seg, mirror, err = newLinkSegment(ringBytes, local, dst, pid); err != nil {
		return nil, nil, ws, err
	}
	if ws, err = newWakeSockets(hiddenBase); err != nil {
		mirror.Close()
		seg.Close()
		return nil, nil, ws, resourceError(err)
	}
	return seg, mirror, ws, nil
}
