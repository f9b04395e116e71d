package sdp

/*
#include <stdint.h>
#include "segment.h"

// The ring functions are static inline in segment.h; these wrappers let Go
// tests drive the very code libosf.so's data path uses.
static int64_t ring_used(uint64_t head, uint64_t tail, uint32_t size) { return osf_ring_used(head, tail, size); }
static void ring_copy_out(const uint8_t *d, uint32_t mask, uint64_t pos, void *dst, size_t n) { osf_ring_copy_out(d, mask, pos, dst, n); }
static void ring_copy_in(uint8_t *d, uint32_t mask, uint64_t pos, const void *src, size_t n) { osf_ring_copy_in(d, mask, pos, src, n); }
static size_t ring_span(uint32_t mask, uint64_t pos, size_t n) { return osf_ring_span(mask, pos, n); }
*/
import "C"

import "unsafe"

// RingUsed returns the bytes between tail and head of a ring of size, or
// -1 when the positions are impossible (a peer corrupted them).
func RingUsed(head, tail uint64, size uint32) int64 {
	return int64(C.ring_used(C.uint64_t(head), C.uint64_t(tail), C.uint32_t(size)))
}

// RingCopyOut copies len(dst) bytes from position pos of ring (whose
// length is a power of two) into dst; len(dst) must not exceed len(ring).
func RingCopyOut(ring []byte, pos uint64, dst []byte) {
	if len(dst) == 0 {
		return
	}
	C.ring_copy_out((*C.uint8_t)(unsafe.Pointer(&ring[0])), C.uint32_t(len(ring)-1), C.uint64_t(pos),
		unsafe.Pointer(&dst[0]), C.size_t(len(dst)))
}

// RingCopyIn copies src into ring at position pos; len(src) must not
// exceed len(ring).
func RingCopyIn(ring []byte, pos uint64, src []byte) {
	if len(src) == 0 {
		return
	}
	C.ring_copy_in((*C.uint8_t)(unsafe.Pointer(&ring[0])), C.uint32_t(len(ring)-1), C.uint64_t(pos),
		unsafe.Pointer(&src[0]), C.size_t(len(src)))
}

// RingSpan returns how many of n bytes from pos are contiguous in a ring
// of size mask+1.
func RingSpan(mask uint32, pos uint64, n int) int {
	return int(C.ring_span(C.uint32_t(mask), C.uint64_t(pos), C.size_t(n)))
}
