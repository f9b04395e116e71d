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

#define OSF_CORE_ABI 2

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
	int32_t hidden_base;   /* first fd number of osf's hidden range */
	int32_t pad;
};

/* What the core tells libosf.so after parsing the configuration. (The
 * rest of the configuration stays in the core, which applies it itself.) */
struct osf_core_init_out {
	uint32_t disabled;      /* 1: malformed configuration, pass-through */
	int32_t log_fd;         /* the core's OSF_LOG_FILE fd (hidden), or -1 */
};

/* listen: route decision for a listening socket and, when it is
 * offloaded, the companion listener (a pollable, non-blocking fd). */
struct osf_core_listen_in {
	int32_t family;    /* of the listening socket */
	uint8_t addr[16];  /* bound address, network byte order */
	uint16_t port;     /* bound port (after listen: never 0) */
	uint16_t pad;
	int32_t backlog;
	int32_t v6only;    /* IPV6_V6ONLY of an AF_INET6 listener */
};

struct osf_core_listen_out {
	int32_t fd;           /* companion listener, -1 when kernel only; with
				 gw: the control connection to the gateway */
	int32_t rule;
	int32_t reason;       /* enum osf_reason when fd is -1 */
	int32_t reason_errno;
	char detail[96];
	int32_t gw;           /* 1: a gateway rule decided (preload/gateway.c) */
	int32_t gw_companion; /* gw: the listener's companion, on which the
				 gateway delivers over shm; -1 none */
	uint8_t gateway[28];  /* gw: the gateway's sockaddr */
	uint8_t gw_token[32]; /* gw_companion: the delivery token the gateway
				 writes after each notice over the rings */
};

/* Outcomes of connect. */
#define OSF_CORE_OFFLOADED 0 /* conn describes the offloaded connection */
#define OSF_CORE_KERNEL 1    /* use kernel TCP; reason says why */
#define OSF_CORE_REFUSE 2    /* OSF_STRICT: fail the connect instead */
#define OSF_CORE_GATEWAY 3   /* through a gateway: reason_errno != 0 is the
				errno connect fails with; with wake_fd >= 0
				the stream to the gateway is an offloaded
				connection (shm) described as for
				OSF_CORE_OFFLOADED, whose rings carried the
				request and will carry the reply; else the
				core connected the application's own socket
				(app_fd) to the gateway and sent the
				request. C waits up to gw_wait_ms for the
				reply (preload/gateway.c) */

struct osf_core_connect_in {
	int32_t family;     /* of the application's socket */
	uint8_t addr[16];   /* destination, network byte order (AF_INET6
			       sockets may use v4-mapped addresses) */
	uint16_t port;
	uint16_t pad;
	uint8_t bound[28];  /* sockaddr the socket is bound to, or zero */
	int32_t app_fd;     /* the application's socket (gateway routes) */
	int32_t pad2;
};

/* An offloaded connection, handed from the core to the C data path, which
 * takes over the three fds and the mapping. */
struct osf_core_conn {
	int32_t status;       /* OSF_CORE_* (connect only) */
	int32_t wake_fd;      /* unix socket: becomes the application's fd;
				 wakes its readers, and carries the end */
	int32_t seg_fd;       /* the segment's memfd */
	int32_t side;         /* OSF_SIDE_CLIENT or OSF_SIDE_SERVER */
	int32_t wake_tx_fd;   /* unix socket that wakes its writers, or with
				 wake_tx_efd the region's writers' eventfd */
	int32_t wake_tx_efd;  /* 1: wake_tx_fd is the eventfd of the region
				 the segment is a slot of (OSF_SHM_EFD) */
	uint64_t seg_addr;    /* the segment, mapped MAP_SHARED */
	uint32_t ring_bytes;
	int32_t rule;
	int32_t reason;       /* when not offloaded */
	int32_t reason_errno;
	uint8_t local[28];    /* sockaddr getsockname reports */
	uint8_t peer[28];     /* sockaddr getpeername reports */
	char detail[96];
	uint8_t gateway[28];  /* OSF_CORE_GATEWAY: the gateway's sockaddr */
	uint32_t gw_wait_ms;  /* OSF_CORE_GATEWAY: bound on the reply */
	uint64_t wake_tx_ino; /* wake_tx_efd: its inode, as its check found
				 it (the hidden dup's identity), or 0 */
};

/* accept: a connection accepted from a companion, for the C accept
 * (preload/setup_accept.c; the core has no accept of its own). */
struct osf_core_accept_in {
	int32_t conn_fd;     /* accepted unix socket; closed by C on error */
	int32_t family;      /* of the listening socket */
	uint8_t addr[16];    /* its bound address */
	uint16_t port;
	uint16_t pad;
};

typedef int (*osf_core_init_fn)(const struct osf_core_init_in *,
				struct osf_core_init_out *);
typedef int (*osf_core_listen_fn)(const struct osf_core_listen_in *,
				  struct osf_core_listen_out *);
typedef int (*osf_core_connect_fn)(const struct osf_core_connect_in *,
				   struct osf_core_conn *);
/* rdma_find: the sending state of this process's RDMA connection whose
 * segment memfd is (dev, ino) (sdp/rdma/tx.h) and its generation, or
 * NULL. Plain C in libosfcore.so (sdp/rdma/tx.c): the application's
 * threads call it directly, never through the core thread. */
struct osf_rdma_tx;
typedef struct osf_rdma_tx *(*osf_core_rdma_find_fn)(uint64_t dev, uint64_t ino,
						      uint32_t *gen);

/* Entry points, resolved by name. */
struct osf_core_fns {
	osf_core_init_fn init;       /* "osfcore_init" */
	osf_core_listen_fn listen;   /* "osfcore_listen" */
	osf_core_connect_fn connect; /* "osfcore_connect" */
	osf_core_rdma_find_fn rdma_find; /* "osfcore_rdma_find" */
};

#endif
