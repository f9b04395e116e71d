/* fdtable.h: the per-process fd table that libosf.so keeps in a memfd.
 *
 * This header is the one definition of the layout, included by the C data
 * path (libosf.so) and by Go through cgo (package fdtable, osfstat). See
 * docs/ARCHITECTURE.md, "fd table".
 *
 * File layout (memfd named "osf-fdtable", mode 0600, sparse):
 *
 *   offset 0                 struct osf_fdt_header   (one page)
 *   OSF_FDT_HDR_BYTES + i*OSF_FDT_CHUNK_BYTES
 *                            chunk i: OSF_FDT_CHUNK_ENTRIES entries for
 *                            fds [i*1024, (i+1)*1024)
 *
 * Chunks are created on demand and never unmapped while the process image
 * lives, so a lookup is two loads and needs no lock. An fd whose entry has
 * kind OSF_FD_NONE (all zero) is not osf's business: the hooks pass it
 * straight to libc.
 */
#ifndef OSF_FDTABLE_H
#define OSF_FDTABLE_H

#include <stdint.h>

#define OSF_FDT_MAGIC 0x3142544446465351ULL /* "QSFFDTB1" little endian */
#define OSF_FDT_VERSION 1
#define OSF_FDT_NAME "osf-fdtable"

#define OSF_FDT_CHUNK_SHIFT 10
#define OSF_FDT_CHUNK_ENTRIES (1u << OSF_FDT_CHUNK_SHIFT)
#define OSF_FDT_MAX_CHUNKS 1024u /* 1M fds: /proc/sys/fs/nr_open default */
#define OSF_FDT_MAX_FDS (OSF_FDT_CHUNK_ENTRIES * OSF_FDT_MAX_CHUNKS)
#define OSF_FDT_HDR_BYTES 4096u
#define OSF_FDT_ENTRY_BYTES 128u
#define OSF_FDT_CHUNK_BYTES (OSF_FDT_CHUNK_ENTRIES * OSF_FDT_ENTRY_BYTES)

/* Kinds of fd. Code asks about kinds through the predicates in fdt.h
 * (osf_kind_is_conn, ...), never by their order; the numbers are shared
 * with Go (fdtable.Kind) and never change. */
enum osf_fd_kind {
	OSF_FD_NONE = 0,     /* not tracked: pass through */
	OSF_FD_HIDDEN = 1,   /* osf's own fd (table, segment, companion); the
	                        application must not see or close it */
	OSF_FD_RESERVED = 2, /* a placeholder held while the Go core starts,
	                        so that the runtime's fds land in the hidden
	                        range; the program may claim the number */
	OSF_FD_INET = 3,     /* AF_INET/AF_INET6 stream socket, undecided */
	OSF_FD_KERNEL = 4,   /* decided: kernel TCP (reason says why) */
	OSF_FD_EPOLL = 5,    /* epoll instance with osf state */
	OSF_FD_LISTEN = 6,   /* listener with an osf companion */
	OSF_FD_SHM = 7,      /* offloaded connection (a ring segment; the
	                        transport field says whether its other side
	                        is a peer on this host or an RDMA engine) */
};

/* Transport recorded for osfstat; internal/policy.Transport has the same
 * values (TestPolicyABI). */
enum osf_transport {
	OSF_TP_NONE = 0,
	OSF_TP_KERNEL = 1,
	OSF_TP_SHM = 2,
	OSF_TP_RDMA = 3,
	OSF_TP_GATEWAY = 4, /* kind KERNEL: a kernel TCP stream to an osfgw
			       gateway relaying to the peer (peer holds the
			       destination, which getpeername reports) */
};

/* Operations tables (the entry's ops): which of libosf.so's per-kind
 * tables (preload/ops.h) the hooks and selectmux dispatch an fd to. The
 * numbers are recorded in tables that cross exec and are read by Go
 * (fdtable.Ops): never renumber or reuse. */
enum osf_ops_kind {
	OSF_OPS_NONE = 0,       /* the kernel's: the hooks pass the fd on */
	OSF_OPS_SHM = 1,        /* an offloaded connection to a peer on this
				   host (kind SHM, transport SHM) */
	OSF_OPS_RDMA = 2,       /* an offloaded connection whose other side is
				   an RDMA engine (kind SHM, transport RDMA) */
	OSF_OPS_GW_PENDING = 3, /* a kernel socket whose non-blocking connect
				   through a gateway waits for the reply, or
				   failed with SO_ERROR unread */
};

/* Reasons a socket is on the kernel. The one definition: the Go side
 * (internal/policy.Reason, which must stay free of cgo) is held to it by
 * fdtable's TestPolicyABI. The numbers are recorded in fd tables and read
 * by osfstat; never renumber or reuse (12 and 15 are retired). */
enum osf_reason {
	OSF_R_NONE = 0,
	OSF_R_RULE = 1,
	OSF_R_NO_RULE = 2,
	OSF_R_NO_LISTENER = 3,
	OSF_R_NO_RDMA_DEVICE = 4,
	OSF_R_FORK_NO_RDMA = 5,
	OSF_R_STRICT = 6,
	OSF_R_RESOURCE = 7,
	OSF_R_HANDSHAKE = 8,
	OSF_R_TRANSPORT_KERNEL = 9,
	OSF_R_DISABLED = 10,
	OSF_R_BACKLOG = 11,
	OSF_R_PEER_KERNEL = 13,
	OSF_R_SHM_REMOTE = 14,
	OSF_R_SANDBOX = 16,
	OSF_R_GO_OFF = 17,      /* a Go program, OSF_GO is not 1 */
	OSF_R_GO_STRIPPED = 18, /* a Go program without a symbol table */
	OSF_R_GO_UNKNOWN = 19,  /* a Go version or code osf does not know */
};

/* Roles. */
enum osf_role {
	OSF_ROLE_NONE = 0,
	OSF_ROLE_CLIENT = 1,   /* connect() */
	OSF_ROLE_SERVER = 2,   /* accept()ed */
	OSF_ROLE_LISTENER = 3, /* listen() */
};

/* Entry flags. */
#define OSF_FDF_CLOEXEC 0x0001u   /* mirrors FD_CLOEXEC of the fd */
#define OSF_FDF_V6 0x0002u        /* AF_INET6 socket */
#define OSF_FDF_V6ONLY 0x0004u    /* IPV6_V6ONLY set on a listener */
/* 0x0008, 0x0010: unused (were shutdown bits; the segment has them) */
#define OSF_FDF_NODELAY 0x0020u   /* TCP_NODELAY as set by the app */
#define OSF_FDF_KOPTS 0x0040u     /* a TCP or IP option was set on this
				      kernel socket: connections made from
				      it (accepted, or connected) inherit */
#define OSF_FDF_LINGER 0x0080u    /* SO_LINGER on, see linger_secs */
#define OSF_FDF_INPROGRESS 0x0100u /* connect said EINPROGRESS; the next
				      connect returns 0, then EISCONN */
#define OSF_FDF_GATEWAY 0x0200u   /* kind SHM: a stream to an osfgw gateway
				      relaying to the peer (peer holds the
				      destination; osfstat shows transport
				      gateway, the leg's transport is the
				      entry's) */
#define OSF_FDF_OPTSET 0x0400u    /* setsockopt was called on this kernel
				      socket, or it has (had) dups that may
				      have been: the options an offloaded
				      connection carries over are read back
				      only then (sockets.c carry_read) */
#define OSF_FDF_BOUND 0x0800u     /* bind was called on this socket, or it
				      has (had) dups that may have been:
				      connect asks the kernel for the bound
				      address only then */
#define OSF_FDF_SHARED 0x1000u    /* a listener another process may accept
				      from too (forked or spawned with it):
				      it parks no deferred connection */
#define OSF_FDF_GWWAIT 0x2000u    /* kind KERNEL, transport GATEWAY: a
				      non-blocking connect waits for the
				      gateway's reply (preload/gateway.c) */
#define OSF_FDF_GWERR 0x4000u     /* ... whose reply was an error: SO_ERROR
				      is reason_errno until it is read */
#define OSF_FDF_GWTAKE 0x8000u    /* ... a thread is taking the reply */
#define OSF_FDF_MUXITEMS 0x10000u /* kind KERNEL: was registered in an
				      epoll while osf computed its readiness
				      (ops, e.g. waiting for a gateway):
				      selectmux moves it to the kernel's set
				      once ops is none again */
#define OSF_FDF_REUSESET 0x20000u /* SO_REUSEADDR or SO_REUSEPORT was set
				      on this kernel socket, or it has (had)
				      dups through which they may have been:
				      a port hold of its own reads them then */
/* opts_set: every carried option may have been set (through a dup) */
#define OSF_OPTS_ALL 0x80000000u
#define OSF_FDF_NOKEEP 0x40000u   /* this kernel socket has (had) dups or
				      was added to an epoll set: an offloaded
				      connect may not keep it alive as its
				      port hold (sockets.c, setup_connect.c) */
#define OSF_FDF_INHERITS 0x80000u /* HIDDEN: the fd is without FD_CLOEXEC
				      (made so for an inheritable owner, or
				      made so by its accounting) */
#define OSF_FDF_KFD 0x100000u     /* LISTEN (OSF_SHM_KFD): its connections
				      are the kernel listener's, whose
				      readiness and accept are the kernel's;
				      the companion only keeps hellos */
#define OSF_FDF_KFDSHUT 0x200000u /* ... shared by processes: its
				      companion was shut (sockets.c) */
#define OSF_FDF_REGIONFD 0x400000u /* SHM slot: aux_fd is the region's one
				      memfd, which preload/pool.c owns and
				      every connection of the region names;
				      never closed as the connection's */
#define OSF_FDF_REGIONEFD 0x800000u /* SHM slot (OSF_SHM_EFD): aux2_fd is
				      the region's writers' eventfd, owned
				      as OSF_FDF_REGIONFD's memfd; the
				      connection's writers wake on it */
#define OSF_FDF_EXECSHARED 0x1000000u /* LISTEN: shared with a spawned or
				      exec'd image (or passed over a
				      socket) without a hello store
				      (setup_fam.c) */
#define OSF_FDF_NBSOCK 0x2000000u /* INET: made with SOCK_NONBLOCK */
#define OSF_FDF_FLSET 0x4000000u  /* INET: its file status flags may not be
				      socket()'s any more (F_SETFL or
				      FIONBIO through it, it has (had) dups,
				      it crossed an exec): connect reads
				      them (F_GETFL), else O_NONBLOCK is
				      OSF_FDF_NBSOCK (and no fork or spawn
				      shared it: osf.fl_shared) */
/* HIDDEN: one of the three fds of an OSF_SHM_KFD listener's hello store
 * (preload/setup_fam.c), its aux_fd the listener's companion: they cross
 * exec with that companion, and the new image finds the store again. */
#define OSF_FDF_STORE_RD 0x8000000u  /* the read end of its socket pair */
#define OSF_FDF_STORE_WR 0x10000000u /* the write end */
#define OSF_FDF_STORE_PG 0x20000000u /* the memfd of its mutex's page */
#define OSF_FDF_STORE (OSF_FDF_STORE_RD | OSF_FDF_STORE_WR | OSF_FDF_STORE_PG)
#define OSF_FDF_GROUP 0x40000000u /* LISTEN (OSF_SHM_KFD): a member of a
				      SO_REUSEPORT group, whose companion
				      and hello store are the group's
				      (preload/setup_group.c); members of
				      one process share its hidden fd */

struct osf_fdt_entry {
	uint8_t kind;      /* enum osf_fd_kind */
	uint8_t transport; /* enum osf_transport */
	uint8_t reason;    /* enum osf_reason when transport is kernel */
	uint8_t role;      /* enum osf_role */
	uint32_t flags;    /* OSF_FDF_* */
	int32_t aux_fd;    /* hidden fd: segment memfd (a slot's: its
	                      region's, OSF_FDF_REGIONFD), companion
	                      listener, inner epoll; -1 none */
	int32_t rule;      /* route rule that decided, 0 implicit, -1 none */
	uint64_t ino;      /* st_ino of the fd's file: identity after exec */
	uint64_t image;    /* image id for which priv is valid */
	uint64_t priv;     /* process-private pointer (struct osf_conn *) */
	int32_t owner_fd;  /* HIDDEN: the fd it serves; -1 for the table */
	int32_t reason_errno; /* errno detail of the reason, 0 none */
	int32_t aux2_fd;   /* SHM/RDMA: second hidden fd, the writers' wake
			      socket; meaningless for other kinds */
	uint32_t opts_set; /* INET, LISTEN: the carried options (sockets.c
			      carry_read) setsockopt set through this fd, one
			      bit each; OSF_OPTS_ALL: not known */
	uint8_t local[28]; /* sockaddr_in/sockaddr_in6 TCP would report */
	uint8_t peer[28];
	uint32_t linger_secs;
	uint32_t ring_bytes; /* SHM/RDMA: ring size agreed at the handshake
				(never re-read from the peer-writable segment) */
	uint32_t inherit_refs; /* HIDDEN: entries without FD_CLOEXEC that use
				  this fd; it is inheritable while > 0 */
	uint8_t cause;       /* reason OSF_R_STRICT: the fallback refused */
	uint8_t slot1;       /* SHM: 1 + the slot of the region aux_fd is
				(preload/pool.c), 0: a segment of its own */
	uint8_t ops;         /* enum osf_ops_kind: the operations table
				libosf.so chose for this fd when it installed
				it (preload/ops.h: its data calls and, through
				selectmux/ready.h, its readiness); 0: none, the
				kernel's. Below OSF_FDT_OPS_MAX; it crosses
				fork and exec with the entry. osf_fdt_set
				publishes it after kind, osf_fdt_clear takes
				it away first. */
	uint8_t slot1_hi;    /* SHM: slot1's high byte (a wide region's
				slots: OSF_REGION_SLOTS_MAX); osf_fdt_slot1 */
};

/* osf_fdt_slot1 returns e's 1 + slot (0: a segment of its own), and
 * osf_fdt_set_slot1 sets it (below 65536). */
static inline uint32_t osf_fdt_slot1(const struct osf_fdt_entry *e)
{
	return (uint32_t)e->slot1 | (uint32_t)e->slot1_hi << 8;
}

static inline void osf_fdt_set_slot1(struct osf_fdt_entry *e, uint32_t slot1)
{
	e->slot1 = (uint8_t)slot1;
	e->slot1_hi = (uint8_t)(slot1 >> 8);
}

/* OSF_FDT_OPS_MAX bounds the entry's ops (a power of two: readers mask). */
#define OSF_FDT_OPS_MAX 8u

struct osf_fdt_header {
	uint64_t magic;
	uint32_t version;
	uint32_t entry_bytes;
	uint32_t chunk_entries;
	uint32_t nchunks_max;
	int32_t pid;         /* process that owns this copy */
	uint32_t flags;      /* OSF_FDTH_* */
	uint64_t image;      /* image id of the owner */
	uint64_t generation; /* bumped on every change (readers' consistency) */
	uint64_t core_loads; /* times this process loaded the Go core */
	uint8_t chunk_present[OSF_FDT_MAX_CHUNKS]; /* 1 when chunk i exists */
	/* With OSF_FDTH_GO: whether the owner's system calls reach the hooks
	 * (preload/gosys.c): OSF_R_NONE, or the osf_reason why not, and the
	 * Go version or what was not recognised (NUL-terminated). */
	uint8_t go_reason;
	uint8_t go_pad[7];
	char go_detail[120];
};

#define OSF_FDTH_CORE_LOADED 0x1u /* the Go core is loaded in the owner */
#define OSF_FDTH_DISABLED 0x2u    /* osf is pass-through (config error) */
#define OSF_FDTH_GO 0x4u          /* the owner is a Go program (go_reason) */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct osf_fdt_entry) == OSF_FDT_ENTRY_BYTES,
	       "fd table entry size");
_Static_assert(sizeof(struct osf_fdt_header) <= OSF_FDT_HDR_BYTES,
	       "fd table header size");
#endif

#endif
