package rdma

import (
	"unsafe"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// ringMRs are the registrations of a segment's two ring regions, one
// memory region each: the peer writes into one ring (the one the local
// application consumes), the other is the source of our writes. The
// rings are not adjacent (the shared page between them holds the header
// too, segment.h), and the header is never registered, so the peer can
// never write the control words.
//
// Both are in a protection domain of their own, the segment's, and the
// connection's QP is created in it (and, when the segment is reused, the
// next connection's): the NIC lets an RDMA write through only when the
// rkey's region and the QP it arrived on share a domain, so a remote
// peer can write only its own connection's rings, whatever rkey and
// address of another registration of this process it knows or guesses.
type ringMRs struct {
	pd *verbs.PD
	mr [2]*verbs.MR
}

// regRings allocates a protection domain on ctx and registers the two
// rings of seg (the engine's mapping, which comes from mmap) in it.
//
// The mapping is MAP_SHARED, so it is never copied on write after fork:
// the NIC and this process keep seeing the same pages, and a forked child
// keeps its own mapping of the segment (the C data path's) without any
// help from ibv_fork_init, which osf never calls.
func regRings(ctx *verbs.Context, seg *sdp.Segment) (*ringMRs, error) {
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, err
	}
	m := &ringMRs{pd: pd}
	for r := range m.mr {
		data := seg.RingData(r)
		mr, err := pd.RegMR(unsafe.Pointer(&data[0]), len(data), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.mr[r] = mr
	}
	return m, nil
}

// Close deregisters both regions, then frees the protection domain (the
// QP made in it must be destroyed first); the first error is returned.
func (m *ringMRs) Close() error {
	var err error
	for r, mr := range m.mr {
		if mr == nil {
			continue
		}
		if e := mr.Close(); err == nil {
			err = e
		}
		m.mr[r] = nil
	}
	if m.pd != nil {
		e := m.pd.Close()
		if e == nil {
			m.pd = nil
		} else if err == nil {
			err = e
		}
	}
	return err
}

// regStreamRings registers the two rings of seg (the engine's mapping) in
// pd, a link's domain, for a stream on that link whose local application
// plays side: ring 1-side, the one the peer writes, with remote write
// access, ring side, the source of our writes, for local reads only (the
// peer cannot write it). Close releases both; pd stays.
func regStreamRings(pd *verbs.PD, seg *sdp.Segment, side int) (*ringMRs, error) {
	m := &ringMRs{}
	for r := range m.mr {
		access := verbs.Access(0)
		if r != side {
			access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
		}
		data := seg.RingData(r)
		mr, err := pd.RegMR(unsafe.Pointer(&data[0]), len(data), access)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.mr[r] = mr
	}
	return m, nil
}

// regLocal registers buf (from mmap) in pd for local writes only: a
// link's receive and send buffers.
func regLocal(pd *verbs.PD, buf []byte) (*verbs.MR, error) {
	return pd.RegMR(unsafe.Pointer(&buf[0]), len(buf), verbs.AccessLocalWrite)
}
