/* cdefs.h: the C conventions every folder of libosf.so shares (preload/,
 * selectmux/, fdtable/): exported hooks, branch hints, the errno macro and
 * the fork child's resets. It includes nothing, so it sits at the bottom of
 * the library's include graph with fdt.h. */
#ifndef OSF_FDTABLE_CDEFS_H
#define OSF_FDTABLE_CDEFS_H

#include <errno.h>

#define OSF_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* OSF_RESET(v, x) sets v to x only when it differs, and OSF_RESET_MEM(p,
 * fresh) *p to fresh: a fork child resetting the state it shares
 * copy-on-write with its parent then writes, and so copies, only the
 * pages that really change (each copied page costs the fork a fault and
 * a page copy in one process or the other). */
#define OSF_RESET(v, x)                                                        \
	do {                                                                   \
		if ((v) != (x))                                                \
			(v) = (x);                                             \
	} while (0)
#define OSF_RESET_MEM(p, fresh)                                                \
	do {                                                                   \
		if (__builtin_memcmp((p), &(fresh), sizeof(*(p))) != 0)        \
			*(p) = (fresh);                                        \
	} while (0)

/* OSF_FAIL sets errno and evaluates to -1: `return OSF_FAIL(EBADF);`. */
#define OSF_FAIL(e) (errno = (e), -1)

#endif
