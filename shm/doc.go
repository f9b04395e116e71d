// Package shm is osf's transport between processes on one host: an
// offloaded connection is a connected AF_UNIX stream socket (which becomes
// the application's fd) plus a memfd segment holding the rings (package
// sdp), as docs/DESIGN.md D2 describes.
//
// A kernel TCP listener that the route policy offloads gets a companion:
// an abstract-namespace AF_UNIX listener whose name is derived from the
// protocol version, address family, address and port (ListenName).
// Abstract names belong to a network namespace, which is exactly the scope
// in which a TCP address means the same listener. A client tries the names
// that could serve its destination (DialNames); when one answers and its
// owner holds the kernel TCP listener it stands for, it sends a hello with
// a freshly created, sealed segment attached, and may start writing at
// once, as TCP lets a client write before accept. No companion, or a full
// backlog, means kernel TCP.
//
// The set-up itself is libosf.so's, in C (sdp/setup.h): this package is
// its binding for the Go programs (the core when libosf.so's C declines a
// connect, osfgw's deliveries to a node's listener and the accepts on its
// companion, the RDMA tests), so that both sides make and check a
// connection the same way. IsLocal is libosf.so's "is local" too.
//
// Example (what the core does for connect and accept):
//
//	var t shm.Transport
//	ep, err := t.Dial(dst, local, 256<<10, time.Second)
//	if errors.Is(err, sdp.ErrNoListener) {
//		// kernel TCP
//	}
//
//	lfd, _ := t.Listen(listenAddr, 128, false)
//	// ... C accepts connFD from lfd ...
//	ep, err = t.Accept(connFD, listenAddr, time.Second)
package shm
