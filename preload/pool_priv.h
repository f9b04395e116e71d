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

#endif
