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
type ringMRs [2]*verbs.MR

// regRings registers the two rings of seg (the engine's mapping, which
// comes from mmap).
//
// The mapping is MAP_SHARED, so it is never copied on write after fork:
// the NIC and this process keep seeing the same pages, and a forked child
// keeps its own mapping of the segment (the C data path's) without any
// help from ibv_fork_init, which osf never calls.
func regRings(pd *verbs.PD, seg *sdp.Segment) (*ringMRs, error) {
	var m ringMRs
	for r := range m {
		data := seg.RingData(r)
		mr, err := pd.RegMR(unsafe.Pointer(&data[0]), len(data), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			m.Close()
			return nil, err
		}
		m[r] = mr
	}
	return &m, nil
}

// Close deregisters both regions; the first error is returned.
func (m *ringMRs) Close() error {
	var err error
	for r, mr := range m {
		if mr == nil {
			continue
		}
		if e := mr.Close(); err == nil {
			err = e
		}
		m[r] = nil
	}
	return err
}
