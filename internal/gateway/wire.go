package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the protocol version this package speaks.
const Version = 1

// Sizes of the messages on the wire.
const (
	ChallengeSize = 40
	RequestSize   = 64
	ReplySize     = 32
	NonceSize     = 32
	macSize       = sha256.Size
)

// Magic numbers at the start of each message.
var (
	magicChallenge = [4]byte{'O', 'S', 'F', 'G'}
	magicRequest   = [4]byte{'O', 'S', 'F', 'Q'}
	magicReply     = [4]byte{'O', 'S', 'F', 'A'}
	magicNotice    = [4]byte{'O', 'S', 'F', 'N'}
)

// macLabel starts the data every request MAC covers, so that a MAC made
// for this protocol is useless anywhere else.
const macLabel = "osfgw1"

// Op is what a request asks the gateway to do.
type Op uint8

// The operations.
const (
	// OpConnect asks the gateway to connect to Request.Dest.
	OpConnect Op = 1
	// OpListen asks the gateway to listen on Request.Dest (an unspecified
	// address: every address of the gateway) and to deliver each
	// connection it accepts to the node's NodePort, prefixed by a Notice.
	OpListen Op = 2
)

// ErrMalformed is wrapped by every parse error: the bytes are not a
// message of this protocol version.
var ErrMalformed = errors.New("gateway: malformed message")

// Challenge is the gateway's first message: a fresh random nonce.
type Challenge struct {
	Nonce [NonceSize]byte
}

// Marshal returns the challenge's wire form.
func (c Challenge) Marshal() []byte {
	b := make([]byte, ChallengeSize)
	copy(b, magicChallenge[:])
	b[4] = Version
	copy(b[8:], c.Nonce[:])
	return b
}

// ParseChallenge parses a challenge of exactly ChallengeSize bytes.
func ParseChallenge(b []byte) (Challenge, error) {
	var c Challenge
	if len(b) != ChallengeSize || [4]byte(b[:4]) != magicChallenge || b[4] != Version {
		return c, fmt.Errorf("gateway: parse challenge: %w", ErrMalformed)
	}
	copy(c.Nonce[:], b[8:])
	return c, nil
}

// Request asks the gateway to connect to Dest, or to listen on it.
type Request struct {
	Op   Op
	Dest netip.AddrPort
	// Timeout bounds the gateway's connect; 0 leaves it to the gateway.
	Timeout time.Duration
	// NodePort is, for OpListen, the port of the node's own listener,
	// where the gateway delivers the connections it accepts.
	NodePort uint16
}

// Marshal returns the request's wire form, authenticated with key over the
// gateway's nonce.
func (r Request) Marshal(key []byte, nonce [NonceSize]byte) []byte {
	b := make([]byte, RequestSize)
	copy(b, magicRequest[:])
	b[4] = Version
	b[5] = byte(r.Op)
	putAddr(b[6:], b[8:], b[16:32], r.Dest)
	binary.BigEndian.PutUint16(b[10:], r.NodePort)
	binary.BigEndian.PutUint32(b[12:], uint32(min(r.Timeout.Milliseconds(), 1<<31)))
	copy(b[32:], mac(key, nonce, b[:32]))
	return b
}

// ParseRequest parses a request of exactly RequestSize bytes and checks its
// MAC against key and the nonce the gateway sent. A request whose bytes are
// not this protocol gives an error wrapping ErrMalformed; one whose MAC
// does not verify, ErrAuth.
func ParseRequest(b []byte, key []byte, nonce [NonceSize]byte) (Request, error) {
	var r Request
	if len(b) != RequestSize || [4]byte(b[:4]) != magicRequest || b[4] != Version {
		return r, fmt.Errorf("gateway: parse request: %w", ErrMalformed)
	}
	if !hmac.Equal(b[32:], mac(key, nonce, b[:32])) {
		return r, ErrAuth
	}
	r.Op = Op(b[5])
	dest, ok := getAddr(b[6], b[8:], b[16:32])
	if !ok {
		return r, fmt.Errorf("gateway: parse request: address family %d: %w", b[6], ErrMalformed)
	}
	r.Dest = dest
	r.Timeout = time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Millisecond
	r.NodePort = binary.BigEndian.Uint16(b[10:])
	return r, nil
}

// NoticeSize is the size of a Notice.
const NoticeSize = 48

// Notice starts each connection a listening gateway delivers to a node:
// the addresses of the connection the gateway accepted, which the node's
// accept and getpeername/getsockname report.
type Notice struct {
	// Remote is the client that connected to the gateway.
	Remote netip.AddrPort
	// Local is the gateway's address on that connection.
	Local netip.AddrPort
}

// Marshal returns the notice's wire form: magic "OSFN", version, the
// families of Remote and Local, a zero byte, their ports, four zero bytes,
// their addresses (16 bytes each).
func (n Notice) Marshal() []byte {
	b := make([]byte, NoticeSize)
	copy(b, magicNotice[:])
	b[4] = Version
	putAddr(b[5:], b[8:], b[16:32], n.Remote)
	putAddr(b[6:], b[10:], b[32:48], n.Local)
	return b
}

// ParseNotice parses a notice of exactly NoticeSize bytes.
func ParseNotice(b []byte) (Notice, error) {
	var n Notice
	if len(b) != NoticeSize || [4]byte(b[:4]) != magicNotice || b[4] != Version {
		return n, fmt.Errorf("gateway: parse notice: %w", ErrMalformed)
	}
	var ok1, ok2 bool
	n.Remote, ok1 = getAddr(b[5], b[8:], b[16:32])
	n.Local, ok2 = getAddr(b[6], b[10:], b[32:48])
	if !ok1 || !ok2 {
		return n, fmt.Errorf("gateway: parse notice: address family: %w", ErrMalformed)
	}
	return n, nil
}

// ErrAuth means a request's MAC did not verify: the node holds another key.
var ErrAuth = errors.New("gateway: authentication failed (wrong key)")

// Reply answers a request. Errno 0 means the connection is established;
// Local is then the gateway's address on it, the one the destination sees.
type Reply struct {
	Errno unix.Errno
	Local netip.AddrPort
}

// Marshal returns the reply's wire form.
func (r Reply) Marshal() []byte {
	b := make([]byte, ReplySize)
	copy(b, magicReply[:])
	b[4] = Version
	if r.Errno != 0 {
		b[5] = 1
	}
	binary.BigEndian.PutUint32(b[8:], uint32(r.Errno))
	putAddr(b[6:], b[12:], b[16:32], r.Local)
	return b
}

// ParseReply parses a reply of exactly ReplySize bytes.
func ParseReply(b []byte) (Reply, error) {
	var r Reply
	if len(b) != ReplySize || [4]byte(b[:4]) != magicReply || b[4] != Version {
		return r, fmt.Errorf("gateway: parse reply: %w", ErrMalformed)
	}
	r.Errno = unix.Errno(binary.BigEndian.Uint32(b[8:]))
	if (b[5] != 0) != (r.Errno != 0) {
		return r, fmt.Errorf("gateway: parse reply: status %d with errno %d: %w", b[5], r.Errno, ErrMalformed)
	}
	r.Local, _ = getAddr(b[6], b[12:], b[16:32])
	return r, nil
}

// TokenSize is the size of a delivery token.
const TokenSize = 32

// DeliveryToken is what a gateway writes after the notice of each
// connection it delivers to a node's listener over the rings:
// HMAC-SHA256(key, "osfgw1" || nonce || "deliver"), nonce the one of the
// LISTEN control connection's challenge. The node checks it, so that no
// other process of its host can pass for the gateway.
func DeliveryToken(key []byte, nonce [NonceSize]byte) [TokenSize]byte {
	return [TokenSize]byte(mac(key, nonce, []byte("deliver")))
}

// mac is HMAC-SHA256(key, macLabel || nonce || msg).
func mac(key []byte, nonce [NonceSize]byte, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(macLabel))
	h.Write(nonce[:])
	h.Write(msg)
	return h.Sum(nil)
}

// putAddr writes an address's family code (4 or 6, 0 when invalid), port
// and 16 address bytes (IPv4 in the first four).
func putAddr(family, port, addr []byte, ap netip.AddrPort) {
	a := ap.Addr().Unmap()
	switch {
	case a.Is4():
		family[0] = 4
		a4 := a.As4()
		copy(addr, a4[:])
	case a.Is6():
		family[0] = 6
		a16 := a.As16()
		copy(addr, a16[:])
	default:
		return
	}
	binary.BigEndian.PutUint16(port, ap.Port())
}

// getAddr reads what putAddr wrote; ok is false for an unknown family.
func getAddr(family byte, port, addr []byte) (netip.AddrPort, bool) {
	p := binary.BigEndian.Uint16(port)
	switch family {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(addr[:4])), p), true
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(addr[:16])), p), true
	}
	return netip.AddrPort{}, false
}
