package verbs

// WRID is a work request identifier laid out so that a completion can be
// routed without a lookup table. The 64 bits are:
//
//	63      56 55                      32 31                              0
//	+---------+--------------------------+--------------------------------+
//	|  kind   |          conn            |              seq               |
//	| 8 bits  |         24 bits          |            32 bits             |
//	+---------+--------------------------+--------------------------------+
//
// kind says what the work request was for (the caller defines the values),
// conn names the connection (at most MaxWRIDConn), and seq is a per-kind
// sequence number or ring position that wraps modulo 2^32. The zero WRID is
// kind 0, conn 0, seq 0. Post methods take and WC reports the plain uint64;
// convert with WRID(wc.WRID) and uint64(id).
type WRID uint64

// Bit layout of a WRID.
const (
	wridSeqBits  = 32
	wridConnBits = 24
	wridKindBits = 8

	wridConnShift = wridSeqBits
	wridKindShift = wridSeqBits + wridConnBits

	// MaxWRIDConn is the largest connection number a WRID can carry.
	MaxWRIDConn = 1<<wridConnBits - 1
)

// MakeWRID packs kind, conn and seq into a WRID. Only the low 24 bits of
// conn are kept; callers must keep connection numbers at or below
// MaxWRIDConn.
func MakeWRID(kind uint8, conn uint32, seq uint32) WRID {
	return WRID(uint64(kind)<<wridKindShift |
		uint64(conn&MaxWRIDConn)<<wridConnShift |
		uint64(seq))
}

// Kind returns the kind field of w.
func (w WRID) Kind() uint8 { return uint8(w >> wridKindShift) }

// Conn returns the connection field of w.
func (w WRID) Conn() uint32 { return uint32(w>>wridConnShift) & MaxWRIDConn }

// Seq returns the sequence field of w.
func (w WRID) Seq() uint32 { return uint32(w) }
