// Package selectmux is the part of libosf.so that multiplexes readiness:
// select, pselect, poll, ppoll and the epoll calls over any mix of kernel
// fds and offloaded fds (C, compiled into libosf.so by the Makefile; the Go
// toolchain ignores it through the osf_make build tag): poll.c (poll,
// select), epoll.c (the registry and epoll_ctl), epoll_wait.c,
// epoll_exec.c (registrations across exec), notify.c (what libosf.so's
// other hooks tell it, mux.h) and lock.c (its lock, and what a signal
// handler asks while its thread holds it).
//
// selectmux includes nothing of preload/: it declares what it needs from
// the library that embeds it — the readiness of offloaded connections
// (ready.h), the real libc functions, the spin policy and the signal
// bookkeeping (host.h) — and preload/ implements that.
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
