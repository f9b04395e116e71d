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
// bytes. The shm set-up is C too, one implementation (setup.h, setup.c:
// the client's segment, the companion and whom to trust, the hello sent,
// and the server's checks of a hello and of the segment it carries, where
// hostile input from a peer is checked before any of it is trusted),
// which libosf.so compiles and this package links for the Go programs:
// package shm drives it, SendHello sends an RDMA engine's hand-off.
//
// Transports (package shm for peers on this host, package sdp/rdma for
// other hosts) return an Endpoint; the core picks one per connection.
//
// Example (an RDMA engine handing a connection to a companion):
//
//	seg, err := sdp.CreateSegment(256 << 10)
//	if err != nil { ... }
//	seg.InitHeader(client, server, 0)
//	err = sdp.SendHello(companionFD, sdp.Hello{RingBytes: seg.RingBytes, Flags: sdp.HelloRDMA,
//		Client: client, Server: server}, seg.FD, appTx)
package sdp
