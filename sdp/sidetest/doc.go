// Package sidetest drives the stream protocol's C side (sdp/side.c and
// sdp/lock.c, which libosf.so is built from) from Go tests, so that the
// protocol's rules — locks, end and reset bookkeeping, wake tokens,
// readiness — are checked on their own and not only through whole
// programs under LD_PRELOAD.
//
// It links the two C files as package sdp compiles them (sdp/cside.go,
// with the plain libc system calls of sdp/syslibc.c), so the Go build
// cache rebuilds the test whenever they change, and gives a test a Pair: one segment in shared memory seen
// from both ends, with the two wake socket pairs a real connection has.
// It is for tests only; nothing in osf imports it.
//
// Example:
//
//	p, err := sidetest.NewPair(4096)
//	if err != nil { ... }
//	defer p.Close()
//	p.Client.Write([]byte("hi"))     // wakes the server's readers if armed
//	n := p.Server.Read(buf)
package sidetest
