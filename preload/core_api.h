/* core_api.h: the calls libosf.so (C) makes into libosfcore.so (Go).
 *
 * One definition for both sides: libosf.so includes it, and the Go core
 * (preload/core) includes it through cgo. libosf.so resolves each entry
 * point with dlsym into struct osf_core_fns and calls them only from its
 * own core thread (see preload/core.c): application threads never run Go
 * code, so they never acquire Go's signal stack or signal mask.
 *
 * Every call is non-blocking or bounded by OSF_CONNECT_TIMEOUT_MS.
 * Return value: 0 on success, otherwise a positive errno value.
 */
#ifndef OSF_CORE_API_H
#define OSF_CORE_API_H

#include <stddef.h>
#include <stdint.h>

#define OSF_CORE_ABI 1

/* Configuration handed to the core at load: a block of "KEY=VALUE\0"
 * strings captured by libosf.so's constructor (so programs that wipe their
 * environment still configure the core), plus facts about the process. */
struct osf_core_init_in {
	uint32_t abi;          /* OSF_CORE_ABI */
	uint32_t fresh_copy;   /* 1: loaded from a memfd copy in a fork child */
	int32_t pid;
	uint32_t env_len;      /* bytes in env */
	const char *env;       /* "OSF_X=v\0OSF_Y=w\0" */
	const char *prog;      /* program short name (argv[0] basename) */
	const char *lib_path;  /* absolute path of libosf.so */
};

/* What the core tells libosf.so after parsing the configuration. */
struct osf_core_init_out {
	uint32_t disabled;      /* 1: malformed configuration, pass-through */
	uint32_t strict;        /* OSF_STRICT=1 */
	uint32_t transport;     /* 0 auto, 1 shm, 2 rdma, 3 kernel */
	uint32_t ring_size;     /* bytes per ring direction */
	uint32_t connect_timeout_ms;
	uint32_t reserved[3];
};

/* Roles for a route query (match enum osf_role in fdtable.h). */
#define OSF_CORE_ROLE_CLIENT 1
#define OSF_CORE_ROLE_SERVER 2

/* A route decision request: which transport should this socket use? */
struct osf_core_route_in {
	int32_t role;         /* OSF_CORE_ROLE_* */
	int32_t family;       /* AF_INET or AF_INET6 */
	uint8_t addr[16];     /* network byte order; IPv4 in the first 4 */
	uint16_t port;        /* host byte order */
	uint16_t pad;
};

struct osf_core_route_out {
	int32_t transport;    /* enum osf_transport (fdtable.h) */
	int32_t rule;         /* 1-based rule index, 0 the implicit rule */
	int32_t reason;       /* enum osf_reason when transport is kernel */
	int32_t rdma;         /* server role: an RDMA device serves it */
	char detail[96];      /* NUL-terminated detail for the reason */
};

typedef int (*osf_core_init_fn)(const struct osf_core_init_in *,
				struct osf_core_init_out *);
typedef int (*osf_core_route_fn)(const struct osf_core_route_in *,
				 struct osf_core_route_out *);

/* Entry points, resolved by name. */
struct osf_core_fns {
	osf_core_init_fn init;   /* "osfcore_init" */
	osf_core_route_fn route; /* "osfcore_route" */
};

#endif
