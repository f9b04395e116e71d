/* route.h: the route rules and configuration of internal/policy, evaluated
 * in C (DESIGN.md D1, revised), so that a process whose connections are
 * shm or kernel TCP decides them without loading the Go core.
 *
 * The Go parser (internal/policy) stays the authority: osf_route_parse
 * accepts exactly what policy.Parse accepts, or says it cannot tell
 * (OSF_ROUTE_UNSUPPORTED: the caller then asks the Go core), and
 * osf_route_decide gives policy.Config.Decide's transport, rule and reason,
 * or says that the answer needs the RDMA device probe, which only the Go
 * core has. internal/routec's differential fuzz test checks both against
 * the Go code.
 *
 * Self-contained (libc only): libosf.so (Makefile) and this package's cgo
 * build compile the same route.c. */
#ifndef OSF_PRELOAD_ROUTE_H
#define OSF_PRELOAD_ROUTE_H

#include <stdint.h>

#define OSF_ROUTE_MAX_RULES 64
#define OSF_ROUTE_MAX_GLOB 64

/* Results of osf_route_parse. */
#define OSF_ROUTE_OK 0
#define OSF_ROUTE_MALFORMED 1   /* policy.Parse fails */
#define OSF_ROUTE_UNSUPPORTED 2 /* beyond the C evaluator: ask Go */

/* Transports, as policy.Transport (enum osf_transport's values). */
#define OSF_ROUTE_KERNEL 1
#define OSF_ROUTE_SHM 2
#define OSF_ROUTE_RDMA 3

/* Transport modes, as policy.TransportMode (OSF_TRANSPORT). */
#define OSF_MODE_AUTO 0
#define OSF_MODE_SHM 1
#define OSF_MODE_RDMA 2
#define OSF_MODE_KERNEL 3

/* Log levels, as policy.LogLevel (OSF_LOG_LEVEL). */
#define OSF_LOGL_DEBUG (-1)
#define OSF_LOGL_INFO 0
#define OSF_LOGL_WARN 1
#define OSF_LOGL_ERROR 2

/* Roles, as policy.Role. */
#define OSF_ROUTE_CLIENT 1
#define OSF_ROUTE_SERVER 2

struct osf_route_rule {
	uint8_t offload;
	uint8_t role;     /* OSF_ROUTE_CLIENT | OSF_ROUTE_SERVER */
	uint8_t local;    /* target "local" */
	uint8_t any_addr; /* target "*" */
	uint8_t v6;       /* prefix is IPv6 (else IPv4 in addr[0..3]) */
	uint8_t bits;
	uint16_t first, last; /* ports; 0, 0: every port */
	uint8_t addr[16];     /* masked prefix address */
	char prog[OSF_ROUTE_MAX_GLOB + 1];
};

struct osf_route_config {
	int nrules;
	int default_routes;
	struct osf_route_rule rules[OSF_ROUTE_MAX_RULES];
	int mode;      /* OSF_MODE_* */
	int strict;
	int log_level; /* OSF_LOGL_* */
	int log_file;  /* OSF_LOG_FILE set and not empty */
	uint32_t ring_size;
	uint32_t connect_timeout_ms;
	int debug_load_core;
	int debug_rdma_sim;
};

/* osf_route_parse parses the configuration snapshot env ("K=V\0K=V\0",
 * len bytes; the first occurrence of a name counts) into c. */
int osf_route_parse(const char *env, uint32_t len, struct osf_route_config *c);

/* A route query, as policy.Query. addr is IPv4 in the first 4 bytes when
 * v4, else IPv6 (v4-mapped addresses are unmapped by osf_route_decide).
 * is_local answers for addresses that are neither loopback nor
 * unspecified (policy.HostIsLocal); rdma_absent says that the RDMA device
 * probe would find no device at all (no /sys/class/infiniband entries,
 * no OSF_DEBUG_RDMA_SIM), which is the only probe answer C knows. */
struct osf_route_query {
	int role; /* OSF_ROUTE_CLIENT or OSF_ROUTE_SERVER */
	const char *prog;
	int v4;
	uint8_t addr[16];
	uint16_t port;
	int (*is_local)(int v4, const uint8_t *addr, void *arg);
	void *arg;
	int rdma_absent;
};

struct osf_route_decision {
	int transport; /* OSF_ROUTE_* */
	int rule;      /* 1-based, 0: the implicit rule */
	int reason;    /* policy.Reason (enum osf_reason) when kernel */
	int rdma;      /* server: an RDMA device serves it (never, in C) */
	int need_go;   /* the answer needs the Go core (RDMA probe, or a
			  program name the C glob matcher cannot read) */
	const char *detail;
};

void osf_route_decide(const struct osf_route_config *c,
		      const struct osf_route_query *q,
		      struct osf_route_decision *d);

/* osf_route_fallback reports policy.Reason.Fallback: reasons OSF_STRICT
 * refuses. */
int osf_route_fallback(int reason);

/* The detail of "no RDMA device" (preload/core/rdma.go's noDevice). */
#define OSF_ROUTE_NO_DEVICE "no RDMA device (no /sys/class/infiniband entries)"

#endif
