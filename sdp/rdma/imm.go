package rdma

import "fmt"

// Immediate data. Every message of an established connection is an RDMA
// WRITE WITH IMMEDIATE, with or without payload, and its 32-bit immediate
// says what it means:
//
//	31    28 27                                    0
//	+-------+---------------------------------------+
//	| kind  |                 value                 |
//	+-------+---------------------------------------+
//
//	kind 0 DATA    value = the low 28 bits of the sender's new producer
//	               position (the head of the ring the payload went into).
//	               The payload, and any plain RDMA WRITE posted before it,
//	               has landed when the receiver sees the completion.
//	kind 1 CREDIT  value = the low 28 bits of the sender's consumer
//	               position (the tail of the ring the receiver writes).
//	kind 2 FLAGS   value = FlagFIN: the sender shut down writing; no DATA
//	               follows.
//	kind 3 CLOSE   value = CloseGraceful or CloseAbort: the sender's
//	               application closed the connection; nothing follows.
//	kinds 4-15     reserved: a protocol error.
//
// Positions are 64-bit byte counts that only grow. A ring holds at most
// 64 MiB (2^26 bytes), so a position never moves by 2^28 or more between
// two messages, and the receiver rebuilds the full position from the low
// 28 bits and the last one it knew (Advance). It then checks that the new
// position is possible: a head at most one ring beyond the last credit it
// gave, a tail at most at what it sent.
type ImmKind uint8

// Immediate kinds.
const (
	ImmData   ImmKind = 0
	ImmCredit ImmKind = 1
	ImmFlags  ImmKind = 2
	ImmClose  ImmKind = 3
)

// Values of FLAGS and CLOSE immediates.
const (
	FlagFIN       = 0x1
	CloseGraceful = 0
	CloseAbort    = 1
)

const (
	immValueBits = 28
	// ImmValueMask selects an immediate's value.
	ImmValueMask = 1<<immValueBits - 1
)

var immNames = [...]string{ImmData: "DATA", ImmCredit: "CREDIT", ImmFlags: "FLAGS", ImmClose: "CLOSE"}

// String returns the kind's name.
func (k ImmKind) String() string {
	if int(k) < len(immNames) {
		return immNames[k]
	}
	return fmt.Sprintf("ImmKind(%d)", uint8(k))
}

// MakeImm builds an immediate; only the low 28 bits of value are kept.
func MakeImm(k ImmKind, value uint64) uint32 {
	return uint32(k)<<immValueBits | uint32(value)&ImmValueMask
}

// ParseImm splits an immediate into kind and value.
func ParseImm(imm uint32) (ImmKind, uint32) {
	return ImmKind(imm >> immValueBits), imm & ImmValueMask
}

// Advance returns the position whose low 28 bits are low and that is the
// nearest at or after from: from + ((low - from) mod 2^28).
func Advance(from uint64, low uint32) uint64 {
	return from + uint64((low-uint32(from))&ImmValueMask)
}
