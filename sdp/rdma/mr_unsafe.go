package rdma

import (
	"unsafe"

	"github.com/osfproject/osf/sdp"
	"github.com/osfproject/osf/verbs"
)

// regRings registers the two rings of seg (the engine's mapping, which
// comes from mmap) as one region the peer may write: the data the peer
// sends lands in one ring, and the other is the source of our writes. The
// header page is not registered, so the peer can never write the control
// words.
//
// The mapping is MAP_SHARED, so it is never copied on write after fork:
// the NIC and this process keep seeing the same pages, and a forked child
// keeps its own mapping of the segment (the C data path's) without any
// help from ibv_fork_init, which osf never calls.
func regRings(pd *verbs.PD, seg *sdp.Segment) (*verbs.MR, error) {
	off := seg.DataOffset(0)
	n := 2 * int(seg.RingBytes)
	return pd.RegMR(unsafe.Pointer(&seg.Mem[off]), n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
}
