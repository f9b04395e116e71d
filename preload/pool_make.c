//go:build osf_make

/* pool_make.c: a new region's memfd (sealed, mode 0600), its mapping and
 * its writers' eventfd (pool_priv.h; pool.c enters it in the table). */
#include "pool_priv.h"
#include "osf.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int pool_make_region(uint32_t ring, uint32_t wide, struct made *md)
{
	uint64_t sb = osf_seg_bytes(ring), n = REGION_VIRT / sb;
	struct stat st;
	void *m;
	int fd, h, e;

	if (wide) {
		n = REGION_VIRT_WIDE / sb;
		if (n > wide)
			n = wide;
		if (n > OSF_REGION_SLOTS_MAX)
			n = OSF_REGION_SLOTS_MAX;
	} else if (n > OSF_REGION_SLOTS) {
		n = OSF_REGION_SLOTS;
	}
	if (n < 1)
		n = 1;
	fd = memfd_create(OSF_REGION_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)(n * sb)) < 0 ||
	    REAL(fcntl)(fd, F_ADD_SEALS, (void *)(long)(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) < 0 ||
	    fstat(fd, &st) < 0)
		goto fail;
	m = mmap(NULL, n * sb, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		goto fail;
	h = osf_fdt_hide(fd, 0); /* owner 0: the process's (osf_pool_moved) */
	if (h < 0) {
		munmap(m, n * sb);
		goto fail;
	}
	md->efd = -1;
	if (osf.shm_efd && (e = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) >= 0 &&
	    (md->efd = osf_fdt_hide(e, 0)) < 0)
		REAL(close)(e); /* the slots' writers wake on socket pairs */
	md->base = m;
	md->bytes = n * sb;
	md->n = (uint32_t)n;
	md->dev = (uint64_t)st.st_dev;
	md->ino = (uint64_t)st.st_ino;
	md->fd = h;
	return 0;
fail:
	REAL(close)(fd);
	return -1;
}
