/* pool_priv.h: what pool.c (the table of regions) and pool_make.c (a new
 * region's memfd, mapping and eventfd) share. */
#ifndef OSF_PRELOAD_POOL_PRIV_H
#define OSF_PRELOAD_POOL_PRIV_H

#include "pool.h"

#define REGION_VIRT (1ull << 30)   /* a region's size, at most (and 1 slot) */
/* A wide region's (osf_pool_take's wide: RLIMIT_NOFILE soft = hard under
 * OSF_SHM_KFD, one region for all of a client's connections to one
 * listener) address space, at most: about 16384 slots of 1 MiB rings. */
#define REGION_VIRT_WIDE OSF_REGION_BYTES_MAX

/* A region made outside the lock (its memfd hidden: the fd table's lock
 * is never taken under this one), then entered. */
struct made {
	uint8_t *base;
	uint64_t bytes, dev, ino;
	uint32_t n;
	int fd, efd;
};

/* pool_make_region makes an owner region's memfd and mapping for ring, of
 * wide slots (0: as many as REGION_VIRT holds, at most OSF_REGION_SLOTS);
 * the caller's fd window is open, pool.c's lock not held. 0, or -1. */
int pool_make_region(uint32_t ring, uint32_t wide, struct made *md);


#define REGIONS 256
#define NARROW OSF_REGION_SLOTS /* slots whose words live in the entry */
#define WORDS(n) (((n) + 63u) / 64u)

/* An entry of the table of regions (pool.c). */
struct region {
	uint8_t *base; /* NULL: free entry */
	uint64_t bytes;
	uint32_t ring, n;
	uint64_t dev, ino;
	int fd;        /* the hidden memfd this process's connections of the
			  region name (OSF_FDF_REGIONFD): the owner's, a
			  mapper's first, one inherited across exec or
			  fork; else -1 */
	int efd;       /* OSF_SHM_EFD: the region's writers' eventfd, hidden,
			  which its connections' entries name
			  (OSF_FDF_REGIONEFD): the owner's, made with the
			  memfd, or the first a hello or an entry brought;
			  goes with fd; else -1 */
	pid_t owner;   /* the process that hands slots out (osf_pid()), else 0 */
	uid_t kuid;    /* owner regions: the companion's owner and name */
	pid_t kpid;
	char kname[108];
	/* Bitmaps of n bits and gen of n words: in the entry's own words
	 * (in_bits, in_gen) up to NARROW slots, else in a private anonymous
	 * mapping of meta_bytes (meta; a fork child's copy is its own). */
	uint64_t *live[2]; /* slots side s's connections of this process hold */
	uint64_t *used;    /* owner: slots handed out at least once */
	uint64_t *clean;   /* owner: free slots whose rings went back since */
	uint32_t *gen;     /* owner: the generation given */
	uint32_t nlive;    /* bits set in live[0] and live[1] */
	void *meta;
	size_t meta_bytes;
	uint64_t in_bits[4 * WORDS(NARROW)];
	uint32_t in_gen[NARROW];
	long long idle_since;
	uint8_t by_hello;  /* a hello brought it (else only entries inherited
			      across exec, or a hand-off): it may be kept */
	uint8_t peer_gone; /* that process ended (osf_pool_peer_gone), or, an
			      owner's, its server's link (osf_pool_owner_gone):
			      unmapped once no connection of it lives here */
	uint16_t defer;    /* owner: the listener's TCP_DEFER_ACCEPT (s, at
			      most 65535) as its server last noted it
			      (osf_pool_deferring) */
	pid_t peer;        /* a mapper's: the client process its hellos came
			      from (their SO_PEERCRED), else 0 */
	uint32_t last1;    /* owner: 1 + the slot handed out last, 0: none
			      (the entry's size as before these: a fork
			      child's resets copy its pages) */
};

/* The table (pool.c), under pool_lock; pool_slot_hdr is slot i's header. */
extern struct region osf_pool_regions[REGIONS];
extern int osf_pool_nregions;
void pool_lock(void);
void pool_unlock(void);
struct osf_seg_hdr *pool_slot_hdr(const struct region *r, uint32_t i);

/* pool_note_last takes owner region r's server's note from the slot
 * handed out last, if its server took that connection's hello (a peer's
 * word: it decides only whether this process's own connections wait for
 * their first byte). The lock is held (pool_note.c). */
void pool_note_last(struct region *r);

#endif
