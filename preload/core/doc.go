// Command core is libosfcore.so, osf's Go core, built with
// `go build -buildmode=c-shared` and loaded by libosf.so with dlopen only
// when a slow path needs it: a listen, connect or accept on an AF_INET or
// AF_INET6 stream socket that needs a route decision or an offloaded
// transport (docs/DESIGN.md D1). A process that never does so never loads it.
//
// The core owns configuration and route policy (package internal/policy),
// zap logging, and connection management. libosf.so reaches it through the
// table of function pointers described in preload/core/core_api.h, always from
// its own osf-core thread, so application threads never run Go code.
//
// Only the osfcore_* entry points are exported (core.map). Asynchronous
// preemption is off by default (-X runtime.godebugDefault in the
// Makefile): the runtime then never sends SIGURG, and libosf.so restores
// the program's own dispositions of asynchronous signals after the load.
//
// Example, from C (what preload/core.c does):
//
//	void *h = dlopen("/usr/lib/osf/libosfcore.so", RTLD_NOW | RTLD_LOCAL);
//	osf_core_init_fn init = (osf_core_init_fn)dlsym(h, "osfcore_init");
//	struct osf_core_init_in in = {.abi = OSF_CORE_ABI, ...};
//	struct osf_core_init_out out;
//	if (init(&in, &out) != 0 || out.disabled) { /* pass-through */ }
package main
