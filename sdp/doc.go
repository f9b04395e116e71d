// Package sdp is osf's stream protocol: the connection segment (two
// single-producer/single-consumer byte rings and their control words), the
// hello that introduces a segment to the peer, the rules of the wake
// protocol and the TCP state they imply (from segment.h, shared with the
// C side of a connection end in side.c and lock.c, which cgo compiles into
// this package for Go programs that drive it: cside.go), and the endpoint
// every offloaded transport hands to the C data path.
//
// The layout is defined once, in segment.h, which libosf.so's C data path
// and this package (through cgo) both include. The C data path moves the
// bytes; Go code only creates, validates and maps segments, which makes
// this package the place where hostile input from a peer is checked before
// any of it is trusted: OpenSegment verifies the seals, the size and the
// header of a memfd a peer sent before mapping it.
//
// Transports (package shm for peers on this host, package sdp/rdma for
// other hosts) return an Endpoint; the core picks one per connection.
//
// Example:
//
//	seg, err := sdp.CreateSegment(256 << 10) // client side
//	if err != nil { ... }
//	seg.InitHeader(local, remote, os.Getpid())
//	hello := sdp.Hello{RingBytes: seg.RingBytes, Client: local, Server: remote}
//	msg := hello.Marshal()              // sent with seg.FD attached
//
//	peer, err := sdp.OpenSegment(fd, h.RingBytes) // server side, after DecodeHello
package sdp
