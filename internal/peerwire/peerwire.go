// Package peerwire reaches libosf.so's C parsers of peer-written data from
// Go, for the fuzz targets in its tests: the hello (sdp/segment.h
// osf_hello_check), the segment header check (osf_seg_hdr_check) and the
// gateway's connect reply and notice (internal/gateway/gwwire.h). They are static
// inline functions, so these are the very instructions libosf.so runs.
// The C is built with UndefinedBehaviorSanitizer; the tests fail when
// it reports (UBSAN_OPTIONS=halt_on_error=1, set by the tests). Nothing
// in osf imports it.
package peerwire

/*
#cgo CFLAGS: -O1 -std=gnu11 -D_GNU_SOURCE -fno-strict-aliasing -fsanitize=undefined
#cgo LDFLAGS: -fsanitize=undefined
#include "../../sdp/segment.h"
#include "../gateway/gwwire.h"

static int hello_check(const void *b, size_t n, uint32_t cap)
{
	struct osf_hello h;

	memset(&h, 0, sizeof(h));
	memcpy(&h, b, n < sizeof(h) ? n : sizeof(h));
	return osf_hello_check(&h, n, cap);
}

static int hdr_check(const void *b, uint32_t ring)
{
	struct osf_seg_hdr h;

	memcpy(&h, b, sizeof(h));
	return osf_seg_hdr_check(&h, ring);
}
*/
import "C"

import (
	"unsafe"

	// The packages of the headers above: they embed them, so that a
	// change to one rebuilds this package (sdp/headers.go).
	_ "github.com/osfproject/osf/internal/gateway"
	_ "github.com/osfproject/osf/sdp"
)

// Sizes of the messages.
const (
	HelloBytes = int(C.sizeof_struct_osf_hello)
	// HelloPoolBytes follow a hello whose flags have HelloFlagPool.
	HelloPoolBytes = int(C.sizeof_struct_osf_hello_pool)
	HdrBytes       = int(C.OSF_SEG_HDR_BYTES)
	ReplyBytes     = int(C.OSF_GW_REPLY_BYTES)
	NoticeBytes    = int(C.OSF_GW_NOTICE_BYTES)
)

// HelloFlagPool is OSF_HELLO_F_POOL: a slot of a region.
const HelloFlagPool = uint32(C.OSF_HELLO_F_POOL)

// Verdicts of HelloCheck.
const (
	HelloOK        = int(C.OSF_HELLO_OK)
	HelloMalformed = int(C.OSF_HELLO_MALFORMED)
	HelloBadRing   = int(C.OSF_HELLO_BAD_RING)
	HelloOverCap   = int(C.OSF_HELLO_OVER_CAP)
)

// HelloCheck runs osf_hello_check on b as a hello of len(b) bytes received.
func HelloCheck(b []byte, cap uint32) int {
	var buf [256]byte
	copy(buf[:], b)
	return int(C.hello_check(unsafe.Pointer(&buf[0]), C.size_t(len(b)), C.uint32_t(cap)))
}

// HdrCheck runs osf_seg_hdr_check on the first HdrBytes of b (zero-padded).
func HdrCheck(b []byte, ring uint32) bool {
	var buf [1024]byte
	copy(buf[:HdrBytes], b)
	return C.hdr_check(unsafe.Pointer(&buf[0]), C.uint32_t(ring)) != 0
}

// ReplyErrno runs osf_gw_reply_errno on the first ReplyBytes of b.
func ReplyErrno(b []byte) int {
	var buf [64]byte
	copy(buf[:ReplyBytes], b)
	return int(C.osf_gw_reply_errno((*C.uint8_t)(unsafe.Pointer(&buf[0]))))
}

// NoticeOK runs osf_gw_notice_ok on the first NoticeBytes of b.
func NoticeOK(b []byte) bool {
	var buf [64]byte
	copy(buf[:NoticeBytes], b)
	return C.osf_gw_notice_ok((*C.uint8_t)(unsafe.Pointer(&buf[0]))) != 0
}

// NoticeAddrs runs osf_gw_put_addr on a notice's two addresses, as an
// accept on a listener of the given family records them: the peer and
// local sockaddrs, 28 bytes each.
func NoticeAddrs(b []byte, v6 bool) (peer, local [28]byte) {
	var buf [64]byte
	copy(buf[:NoticeBytes], b)
	iv6 := C.int(0)
	if v6 {
		iv6 = 1
	}
	p := (*C.uint8_t)(unsafe.Pointer(&buf[0]))
	at := func(off int) *C.uint8_t { return (*C.uint8_t)(unsafe.Add(unsafe.Pointer(p), off)) }
	C.osf_gw_put_addr((*C.uint8_t)(unsafe.Pointer(&peer[0])), iv6, C.uint8_t(buf[5]), at(8), at(16))
	C.osf_gw_put_addr((*C.uint8_t)(unsafe.Pointer(&local[0])), iv6, C.uint8_t(buf[6]), at(10), at(32))
	return peer, local
}
