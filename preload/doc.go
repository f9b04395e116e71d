// Package preload is libosf.so, the library LD_PRELOAD names: C hooks with
// the names of the libc functions a program uses for sockets, I/O, fds,
// readiness, processes and signals (docs/DESIGN.md D1 explains, with
// measurements, why this part is C and the rest Go).
//
// The C files here carry the build tag osf_make, so the Go toolchain
// ignores them; the Makefile compiles them, with fdtable/*.c and
// selectmux/*.c, into build/libosf.so, exporting exactly the names in
// libosf.map. The Go core loaded on demand is the subpackage core
// (build/libosfcore.so). This package's Go files are tests of the built
// library: the exported symbols are exactly the hooks, the qsock API and
// osf_static_exec (osfload's entry, static.c), each hook resolves to a libc
// definition, and libosf.so links no rdma-core library.
//
// Use:
//
//	make build
//	LD_PRELOAD=$PWD/build/libosf.so redis-server
package preload
