/* setup.h: the shm set-up's one implementation (setup.c), for every side
 * that makes or takes an offloaded shm connection: libosf.so's connect and
 * accept (preload/setup_connect.c, setup_accept.c, which add what only a
 * hooked process needs: route decisions, fd windows, parked connections,
 * spare segments, held ports, logging) and the Go programs through cgo
 * (package shm: the core when C declines, osfgw's deliveries and its
 * companion's accepts; package sdp/rdma: the engine's hand-offs to a
 * companion).
 *
 * What it does, each step one function:
 * - the client's segment: a sealed memfd of mode 0600 with its header
 *   (osf_seg_new, osf_seg_init);
 * - the companion: the names that could serve an address (names.h), the
 *   members of a SO_REUSEPORT group, and whom to trust (census.h: the
 *   companion's owner holds the kernel TCP listener it stands for)
 *   (osf_dial_companion);
 * - the hello with the segment and the server's end of the writers' wake
 *   socket (osf_hello_send);
 * - the server's reading and checking of a hello and of everything it
 *   carries, before any of it is used (osf_hello_take);
 * - "is local": loopback, unspecified, or an address of this host's
 *   interfaces (osf_addr_local; policy.IsLocal is the Go one, which osfrun
 *   needs without cgo, held to this one by shm's FuzzIsLocalAgree).
 *
 * Addresses are in IPv6 form (IPv4 v4-mapped) where names.h and census.h
 * have them so; sockaddrs are the 28 bytes of a sockaddr_in or _in6, as the
 * hello and the segment header carry them. System calls go through sys.h
 * (libosf.so: its real functions, never its hooks). */
#ifndef OSF_SDP_SETUP_H
#define OSF_SDP_SETUP_H

#include "census.h"
#include "names.h"
#include "segment.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

/* osf_seg_new creates, sizes (rings of ring bytes), seals and maps a fresh
 * segment memfd (close-on-exec, mode 0600, at the lowest free fd): the
 * mapping with the fd in *fdp, or NULL with errno. The header is the
 * caller's to write (osf_seg_init). */
void *osf_seg_new(uint32_t ring, int *fdp);

/* osf_seg_init writes the header of a fresh segment (sizes, the two
 * addresses, the client's pid); the magic goes last. */
void osf_seg_init(void *seg, uint32_t ring, const uint8_t client[28],
		  const uint8_t server[28], int32_t client_pid);

/* osf_seg_parts makes what a client's hello carries: a fresh segment
 * (osf_seg_new, header written by osf_seg_init, *segfd) and the writers'
 * wake socket pair (wtx[0] the client's end, wtx[1] the server's; both
 * close-on-exec): the mapping, or NULL with errno and nothing left open. */
void *osf_seg_parts(uint32_t ring, const uint8_t client[28], const uint8_t server[28],
		    int32_t client_pid, int *segfd, int wtx[2]);

/* What osf_dial_companion found when it returns -1. */
#define OSF_DIAL_NO_LISTENER 0 /* no trusted companion answered */
#define OSF_DIAL_BACKLOG 1     /* a companion's backlog was full */
#define OSF_DIAL_RESOURCE 2    /* no socket for the attempt (errno) */

/* struct osf_dial's seqpacket: either kind of companion. */
#define OSF_DIAL_EITHER 2

/* A connect to a companion: what to dial, whom to trust, what was found. */
struct osf_dial {
	uint8_t addr[16]; /* the destination, IPv6 form */
	uint16_t port;
	int local; /* addr is this host's (osf_addr_local): wildcard names too */
	/* The kernel TCP listeners on port (census.h); a companion is trusted
	 * only when its owner holds one its name serves. */
	const struct osf_census *census;
	/* gateway: a companion of root's or of this process's effective uid
	 * is trusted too (an osfgw gateway's holds no kernel TCP listener in
	 * the node's network namespace). */
	int gateway;
	/* untrusted, if set, is told of each companion not trusted. */
	void (*untrusted)(void *arg, const struct ucred *cr);
	void *arg;
	/* seqpacket: dial an OSF_SHM_KFD listener's companion, a
	 * SOCK_SEQPACKET one (its clients' links); 0: a SOCK_STREAM one.
	 * Either connect is refused by the other's (ECONNREFUSED: an
	 * abstract name is found with its socket type). With
	 * OSF_DIAL_EITHER a SOCK_SEQPACKET one first, then, refused, a
	 * SOCK_STREAM one at the same name (a listener of the switch's
	 * absence: the Go core's, a server without the switch; stream). */
	int seqpacket;
	/* out */
	int stream;          /* OSF_DIAL_EITHER: the socket is a SOCK_STREAM one */
	int why;             /* OSF_DIAL_*, when it returns -1 */
	char full_name[108]; /* the first full companion's name, "" if none */
	struct ucred owner;  /* the trusted companion's owner (SO_PEERCRED) */
	char name[108];      /* and its name (a SO_REUSEPORT slot's too) */
};

/* osf_dial_companion tries each companion that could serve d->addr,
 * d->port (names.h; the members of a SO_REUSEPORT group in random order,
 * which spreads connections as the kernel does) and returns the first
 * trusted one's connected socket (close-on-exec, non-blocking), or -1 with
 * d->why. It never waits: a companion takes the connection now or the
 * caller uses kernel TCP. An untrusted companion is closed before it gets
 * anything. Without a census entry (and not d->gateway) it connects to
 * nothing. */
int osf_dial_companion(struct osf_dial *d);

/* osf_dial_on connects unix stream socket s to companion name alone (a
 * connection that waited for its first byte, preload/setup_connect.c),
 * retrying a full one for up to wait_ms, and reads its owner
 * (SO_PEERCRED, which the caller checks): 0, or -1 with errno. */
int osf_dial_on(int s, const char *name, int wait_ms, struct ucred *owner);

/* osf_hello_send sends, on the connected companion socket s, the hello
 * with the segment segfd and wtx, the server's end of the writers' wake
 * socket: 0, or -1 with errno. Never waits (MSG_DONTWAIT) and never raises
 * SIGPIPE. */
int osf_hello_send(int s, uint32_t ring, uint32_t flags, const uint8_t client[28],
		   const uint8_t server[28], int segfd, int wtx);

/* osf_hello_send_pool is osf_hello_send for a slot of a region: regionfd
 * is the region's memfd, p names the slot (OSF_HELLO_F_POOL is added to
 * flags). */
int osf_hello_send_pool(int s, uint32_t ring, uint32_t flags, const uint8_t client[28],
			const uint8_t server[28], int regionfd, int wtx,
			const struct osf_hello_pool *p);

/* osf_wake_efd_ok accepts a region's writers' eventfd another process
 * handed over (a pooled hello's with OSF_HELLO_F_EFD, a hand-off's) only
 * as what an eventfd is, and makes it non-blocking (a blocking one at its
 * maximum would block a waker): 1, or 0 for anything else. With ino, the
 * inode its check found (the identity a hidden dup of it records, without
 * another fstat). */
int osf_wake_efd_ok(int fd, uint64_t *ino);

/* OSF_REGION_SEALS are the seals a hello's segment or region must have. */
#define OSF_REGION_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* What a server that maps regions does with a pooled hello's memfd
 * (preload/pool.c): fd is the region, already checked to be a regular
 * file of p->region_bytes (a whole number of slots, at most
 * OSF_REGION_SLOTS_MAX), st its fstat (the check's: the region is known
 * by its inode without another), and p->slot below its slot count. A
 * region it maps anew must have OSF_REGION_SEALS (one it maps already
 * had them). efd is the hello's writers' eventfd (OSF_HELLO_F_EFD), else
 * -1: unless the region has one here already (which the connection then
 * uses, closing the hello's), it must pass osf_wake_efd_ok (its inode in
 * *efd_ino). cr is the client's credentials (its hello's sender:
 * SO_PEERCRED, or a store's record). It returns the slot's segment (the
 * region mapped once per process, known by its inode) or NULL with why
 * set: seals missing, a
 * slot this process holds already, a header that does not match, a
 * generation that is not the slot's, an eventfd that is none. */
typedef void *(*osf_region_map_fn)(int fd, const struct stat *st, uint32_t ring,
				    const struct osf_hello_pool *p, int efd, uint64_t *efd_ino,
				    const struct ucred *cr, char *why, size_t wn);

/* A hello taken by osf_hello_take, with what came with it. */
struct osf_hello_in {
	struct osf_hello h;
	struct osf_hello_pool pool; /* with OSF_HELLO_F_POOL in h.flags */
	int seg_fd, wake_tx_fd; /* close-on-exec, the caller's */
	uint64_t wake_tx_ino;   /* an eventfd's inode (osf_wake_efd_ok), else 0 (also when
				 * the region had one: the hello's goes unused) */
	void *seg;              /* the segment, mapped (osf_seg_bytes(h.ring_bytes)) */
	struct ucred cr;        /* the client (SO_PEERCRED) */
};

/* osf_hello_take reads the hello on the accepted companion connection cfd,
 * without waiting, and checks everything a hostile client controls in
 * one place, in order: its size, magic and version, two fds, the second a
 * connected AF_UNIX stream socket, the ring size (a power of two within
 * the protocol's bounds and at most cap), the client's credentials, and
 * the segment (a regular memfd of exactly the size the ring implies,
 * sealed against shrinking and growing, whose header matches). Returns 0
 * with in filled (the segment's server pid is the caller's to write),
 * EAGAIN when the hello has not arrived, ECONNRESET when the client
 * closed first, EPROTO for a bad hello (why says what, every fd that came
 * with it closed); cfd stays the caller's either way. */
int osf_hello_take(int cfd, uint32_t cap, struct osf_hello_in *in, char *why, size_t wn);

/* osf_hello_take_pool is osf_hello_take that also takes a pooled hello
 * (OSF_HELLO_F_POOL), its region checked as osf_region_map_fn says and
 * mapped by map; osf_hello_take refuses one (EPROTO). */
int osf_hello_take_pool(int cfd, uint32_t cap, struct osf_hello_in *in, char *why,
			size_t wn, osf_region_map_fn map);

/* osf_hello_take_cred is osf_hello_take_pool on a connection whose
 * client's credentials (SO_PEERCRED, fixed at its connect) the caller
 * read once already: cr, or NULL to ask. */
int osf_hello_take_cred(int cfd, const struct ucred *cr, uint32_t cap, struct osf_hello_in *in,
			char *why, size_t wn, osf_region_map_fn map);

/* osf_hello_take_stored is osf_hello_take_pool for a hello read earlier
 * (n bytes at msg, as its client sent them, kept with its two fds and its
 * client's credentials cr where a re-posted message would carry the
 * re-poster's: preload/setup_fam.c): the same checks, fds closed on
 * failure. */
int osf_hello_take_stored(const void *msg, size_t n, int fds[2], const struct ucred *cr,
			  uint32_t cap, struct osf_hello_in *in, char *why, size_t wn,
			  osf_region_map_fn map);

/* osf_addr_local reports whether a connection to a (IPv6 form) stays on
 * this host, in this network namespace: loopback, the unspecified address
 * (connect reaches 127.0.0.1 or ::1), or an address of an interface. The
 * interfaces' addresses are read again when older than 2 s, all of them
 * (no cap); if they cannot be read, only loopback and unspecified are
 * local. Safe for concurrent use. */
int osf_addr_local(const uint8_t a[16]);

/* osf_host_mu guards osf_addr_local's cache: libosf.so resets it in a
 * fork child (preload/setup.c). */
extern pthread_mutex_t osf_host_mu;

#endif
