// Command osfrun runs a program under osf, or explains what osf would do for
// an address.
//
// Usage:
//
//	osfrun [flags] [--] prog [args...]
//	osfrun [flags] --explain ADDR:PORT [--role client|server|both] [--prog NAME]
//
// In run mode osfrun sets the OSF_* variables its flags name (flags override
// the environment), checks the resulting configuration exactly as libosf.so
// will, puts libosf.so in front of LD_PRELOAD (unless it is already there)
// and execs prog, found through PATH. Flags end at the first argument that is
// not a flag, or at "--"; everything after belongs to prog.
//
// Flags:
//
//	--routes R          OSF_ROUTES: route rules
//	--transport T       OSF_TRANSPORT: auto, shm, rdma or kernel
//	--strict            OSF_STRICT=1: fail instead of falling back to kernel TCP
//	--log-level L       OSF_LOG_LEVEL: debug, info, warn or error
//	--log-file F        OSF_LOG_FILE
//	--spin-us N         OSF_SPIN_US
//	--ring-size S       OSF_RING_SIZE, such as 1M
//	--static            run prog through osfload (found next to libosf.so):
//	                    a statically linked prog is mapped into it and its
//	                    system calls reach osf's hooks (Syscall User
//	                    Dispatch, docs/STATIC.md); any other prog is exec'd
//	                    as without --static. Off by default.
//	--lib PATH          libosf.so to preload
//	--explain ADDR:PORT explain instead of running (IPv6 as [::1]:80)
//	--role R            with --explain: client, server or both (default both)
//	--prog NAME         with --explain: program name for the rules' globs
//	-h, --help          help
//
// The library is --lib, else $OSF_LIB, else ../libosf.so relative to the real
// path of the osfrun executable (the build puts osfrun in build/bin and the
// library in build), else libosf.so next to osfrun.
//
// With --explain, osfrun prints the active route rules and, for the client
// (connect to ADDR:PORT) and server (listen on ADDR:PORT) roles, which rule
// matches, the transport osf would choose and why, probing this host's
// addresses and RDMA devices. The program name matched against the rules'
// globs is --prog, else the base name of prog when one is given after the
// flags, else any program. Both modes warn about OSF_* variables osf does not
// know, which are most likely typos.
//
// Examples:
//
//	osfrun ./server --port 5000
//	osfrun --routes 'offload 10.0.0.0/8; kernel *' --strict -- ./client 10.0.0.2 5000
//	osfrun --transport shm redis-server
//	osfrun --explain 10.0.0.2:5000
//	osfrun --explain '[::1]:6379' --role server --prog redis-server
//
// Exit status: 0 after --explain; 2 for bad flags, a malformed configuration
// (printed as libosf.so prints it, such as
// osf: OSF_RING_SIZE="5000": not a power of two) or a missing library; 127
// when prog is not found and 126 when it cannot be executed. Otherwise the
// status is prog's own.
package main
