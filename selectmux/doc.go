// Package selectmux is the part of libosf.so that multiplexes readiness:
// select, pselect, poll, ppoll and the epoll calls over any mix of kernel
// fds and offloaded fds (mux.c, C, compiled into libosf.so by the
// Makefile; the Go toolchain ignores it through the osf_make build tag).
//
// Readiness of an offloaded connection comes from its rings; the kernel is
// only used to sleep. An application epoll gets a hidden inner epoll of the
// connections' wake sockets nested in it, so a wait costs O(ready + idle)
// rather than O(registered) — docs/ARCHITECTURE.md, "Readiness", has the
// details.
//
// There is nothing to call from Go; programs use it through libc names:
//
//	LD_PRELOAD=$PWD/build/libosf.so nginx
package selectmux
