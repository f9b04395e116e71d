package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/osfproject/osf/sdp"
)

// The RDMA wire protocol (docs/ARCHITECTURE.md, "RDMA wire protocol").
// Everything multi-byte in private data is big endian, so that hosts of
// any byte order interoperate; immediates are 32-bit values that the verbs
// layer carries in network byte order and hands over in host order.

// WireVersion is the protocol version carried in every private data block.
// A peer with another version is refused (RejectBadHello) and the client
// uses kernel TCP. Version 2: segment layout 3 (segment.h), each ring
// registered apart, the ring base that of the ring the peer writes.
const WireVersion = 2

// wireMagic starts every osf private data block: "QS". It tells osf peers
// from other users of the RDMA_PS_TCP port space (rsockets, for one).
var wireMagic = [2]byte{'Q', 'S'}

// Sizes of the private data blocks. ConnectData fills the 56 bytes that an
// RC connection request carries over InfiniBand and RoCE exactly.
const (
	SizeofConnectData = 56
	SizeofAcceptData  = 24
	SizeofRejectData  = 4
)

// ErrWire means a private data block or an immediate is malformed.
var ErrWire = errors.New("rdma: malformed wire data")

// connect data flags
const (
	flagV6   = 0x1 // the two addresses are IPv6 (else IPv4)
	flagLink = 0x2 // the connection is a link: its streams open on it (qplink.go)
)

// ConnectData is the hello a client puts in rdma_connect's private data:
//
//	off len
//	  0   2  magic "QS"
//	  2   1  version (2)
//	  3   1  flags: bit 0 = the addresses are IPv6 (else IPv4 in the first
//	         4 bytes of each address field, the other 12 zero); bit 1 =
//	         a link (OSF_RDMA_LINKS: no stream of its own, no rings; its
//	         streams open on it, qplink.go); others 0
//	  4   1  ring shift: log2 of the ring bytes per direction, 12..26
//	  5   1  reserved, 0
//	  6   2  client port: what the server's getpeername reports
//	  8   2  server port: the port the client connected to
//	 10   2  reserved, 0
//	 12   4  rkey of the client's ring 1 region
//	 16   8  ring base: the address of the client's ring 1 region (the
//	         ring the server writes; a position's offset in it is
//	         sdp.Segment.RingPos's)
//	 24  16  client address (TCP-visible)
//	 40  16  server address (the one the client connected to)
//
// Over InfiniBand and RoCE the server receives the block zero-padded to the
// transport's size; bytes past 56 are ignored.
type ConnectData struct {
	RingBytes uint32
	RKey      uint32
	RingBase  uint64
	Client    netip.AddrPort
	Server    netip.AddrPort
	Link      bool // the connection is a link (flag bit 1)
}

// Marshal encodes d; it fails for a bad ring size or when the two
// addresses are not of one family.
func (d ConnectData) Marshal() ([]byte, error) {
	shift, err := ringShift(d.RingBytes)
	if err != nil {
		return nil, err
	}
	c, s := d.Client.Addr().Unmap(), d.Server.Addr().Unmap()
	if !c.IsValid() || !s.IsValid() || c.Is4() != s.Is4() {
		return nil, fmt.Errorf("%w: addresses %v and %v are not of one family", ErrWire, d.Client, d.Server)
	}
	b := make([]byte, SizeofConnectData)
	copy(b, wireMagic[:])
	b[2] = WireVersion
	if !c.Is4() {
		b[3] = flagV6
	}
	if d.Link {
		b[3] |= flagLink
	}
	b[4] = shift
	binary.BigEndian.PutUint16(b[6:], d.Client.Port())
	binary.BigEndian.PutUint16(b[8:], d.Server.Port())
	binary.BigEndian.PutUint32(b[12:], d.RKey)
	binary.BigEndian.PutUint64(b[16:], d.RingBase)
	putAddr(b[24:40], c)
	putAddr(b[40:56], s)
	return b, nil
}

// DecodeConnectData parses a client's hello. It checks everything it can:
// magic, version, flags, ring size, reserved bytes and addresses.
func DecodeConnectData(b []byte) (ConnectData, error) {
	var d ConnectData
	if err := checkHeader(b, SizeofConnectData); err != nil {
		return d, err
	}
	if b[3]&^(flagV6|flagLink) != 0 || b[5] != 0 || b[10] != 0 || b[11] != 0 {
		return d, fmt.Errorf("%w: reserved bits set", ErrWire)
	}
	rb, err := ringBytes(b[4])
	if err != nil {
		return d, err
	}
	d.RingBytes = rb
	d.RKey = binary.BigEndian.Uint32(b[12:])
	d.RingBase = binary.BigEndian.Uint64(b[16:])
	v6 := b[3]&flagV6 != 0
	d.Link = b[3]&flagLink != 0
	ca, err := getAddr(b[24:40], v6)
	if err != nil {
		return d, err
	}
	sa, err := getAddr(b[40:56], v6)
	if err != nil {
		return d, err
	}
	d.Client = netip.AddrPortFrom(ca, binary.BigEndian.Uint16(b[6:]))
	d.Server = netip.AddrPortFrom(sa, binary.BigEndian.Uint16(b[8:]))
	return d, nil
}

// AcceptData is what the server puts in rdma_accept's private data:
//
//	off len
//	  0   2  magic "QS"
//	  2   1  version (2)
//	  3   1  flags, 0
//	  4   1  ring shift: must equal the client's
//	  5   3  reserved, 0
//	  8   4  rkey of the server's ring 0 region
//	 12   4  reserved, 0
//	 16   8  ring base: the address of the server's ring 0 region (the
//	         ring the client writes)
//
// The client receives it zero-padded (196 bytes over InfiniBand and RoCE).
type AcceptData struct {
	RingBytes uint32
	RKey      uint32
	RingBase  uint64
}

// Marshal encodes d.
func (d AcceptData) Marshal() ([]byte, error) {
	shift, err := ringShift(d.RingBytes)
	if err != nil {
		return nil, err
	}
	b := make([]byte, SizeofAcceptData)
	copy(b, wireMagic[:])
	b[2] = WireVersion
	b[4] = shift
	binary.BigEndian.PutUint32(b[8:], d.RKey)
	binary.BigEndian.PutUint64(b[16:], d.RingBase)
	return b, nil
}

// DecodeAcceptData parses the server's answer.
func DecodeAcceptData(b []byte) (AcceptData, error) {
	var d AcceptData
	if err := checkHeader(b, SizeofAcceptData); err != nil {
		return d, err
	}
	if b[3] != 0 || b[5] != 0 || b[6] != 0 || b[7] != 0 || binary.BigEndian.Uint32(b[12:]) != 0 {
		return d, fmt.Errorf("%w: reserved bits set", ErrWire)
	}
	rb, err := ringBytes(b[4])
	if err != nil {
		return d, err
	}
	d.RingBytes = rb
	d.RKey = binary.BigEndian.Uint32(b[8:])
	d.RingBase = binary.BigEndian.Uint64(b[16:])
	return d, nil
}

// RejectCode says why an osf server refused a connection request; it
// travels in rdma_reject's private data: magic "QS", version, code.
type RejectCode uint8

// Reject codes. A client maps each to its fallback reason.
const (
	// RejectNoListener: the application's listener is gone.
	RejectNoListener RejectCode = 1
	// RejectBacklog: the listener's accept queue is full.
	RejectBacklog RejectCode = 2
	// RejectBadHello: the hello was malformed or of another version.
	RejectBadHello RejectCode = 3
	// RejectResource: the server ran out of a resource (memory, queue
	// pairs, locked memory).
	RejectResource RejectCode = 4
	// RejectSetup: the server could not set the connection up for another
	// reason (e.g. the request was no longer valid: the client had given
	// up). A client of an older version reports it as a refusal too.
	RejectSetup RejectCode = 5
)

var rejectNames = map[RejectCode]string{
	RejectNoListener: "no listener",
	RejectBacklog:    "listener backlog full",
	RejectBadHello:   "bad hello",
	RejectResource:   "server out of resources",
	RejectSetup:      "server could not set the connection up",
}

// String describes the code.
func (c RejectCode) String() string {
	if s, ok := rejectNames[c]; ok {
		return s
	}
	return fmt.Sprintf("reject code %d", uint8(c))
}

// Marshal encodes the reject block.
func (c RejectCode) Marshal() []byte {
	return []byte{wireMagic[0], wireMagic[1], WireVersion, byte(c)}
}

// DecodeReject parses rdma_reject's private data; ok is false when it is
// not an osf block (a peer without osf, or the CM rejecting on its own,
// for instance because nothing listens on the port).
func DecodeReject(b []byte) (code RejectCode, ok bool) {
	if len(b) < SizeofRejectData || b[0] != wireMagic[0] || b[1] != wireMagic[1] || b[2] != WireVersion {
		return 0, false
	}
	return RejectCode(b[3]), b[3] != 0
}

func checkHeader(b []byte, size int) error {
	if len(b) < size {
		return fmt.Errorf("%w: %d bytes, want %d", ErrWire, len(b), size)
	}
	if b[0] != wireMagic[0] || b[1] != wireMagic[1] {
		return fmt.Errorf("%w: not an osf peer (magic %#x %#x)", ErrWire, b[0], b[1])
	}
	if b[2] != WireVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrWire, b[2], WireVersion)
	}
	return nil
}

func ringShift(n uint32) (uint8, error) {
	if !sdp.RingSizeOK(n) {
		return 0, fmt.Errorf("%w: %w: %d", ErrWire, sdp.ErrRingSize, n)
	}
	return uint8(bits.TrailingZeros32(n)), nil
}

func ringBytes(shift uint8) (uint32, error) {
	if shift >= 32 || !sdp.RingSizeOK(1<<shift) {
		return 0, fmt.Errorf("%w: ring shift %d", ErrWire, shift)
	}
	return 1 << shift, nil
}

func putAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

func getAddr(b []byte, v6 bool) (netip.Addr, error) {
	if v6 {
		a := netip.AddrFrom16([16]byte(b[:16]))
		if a.Is4In6() {
			return netip.Addr{}, fmt.Errorf("%w: v4-mapped address in an IPv6 hello", ErrWire)
		}
		return a, nil
	}
	for _, c := range b[4:16] {
		if c != 0 {
			return netip.Addr{}, fmt.Errorf("%w: IPv4 address with trailing bytes", ErrWire)
		}
	}
	return netip.AddrFrom4([4]byte(b[:4])), nil
}
