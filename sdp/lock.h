/* lock.h: the segment locks (osf_seg_side.tx_lock / rx_lock).
 *
 * A lock word is 0 when free, else the owner's tid, with OSF_LOCK_WAITERS
 * set when someone sleeps on it (a shared futex). The word lives in the
 * segment, so the peer can write it: a holder that no longer runs is
 * replaced, and a lock held impossibly long means a corrupt segment.
 */
#ifndef OSF_SDP_LOCK_H
#define OSF_SDP_LOCK_H

#include "segment.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OSF_LOCK_STUCK_MS 5000 /* a segment lock held this long is corrupt */

/* osf_lock_tid returns the calling thread's id (cached per thread). */
extern __thread uint32_t osf_lock_tls_tid
	__attribute__((tls_model("initial-exec")));
static inline uint32_t osf_lock_tid(void)
{
	uint32_t t = osf_lock_tls_tid;

	if (__builtin_expect(t == 0, 0))
		t = osf_lock_tls_tid = (uint32_t)syscall(SYS_gettid);
	return t;
}

/* osf_lock_slow waits for a contended lock: 0 when taken, -1 when it
 * cannot be (the caller holds it already, from a signal handler, or the
 * peer wrote the word: the connection is broken). */
int osf_lock_slow(uint32_t *w, uint32_t me);

/* osf_seg_lock takes a segment lock: 0, or -1 (see osf_lock_slow). */
static inline int osf_seg_lock(uint32_t *w)
{
	uint32_t me = osf_lock_tid(), cur = 0;

	if (__builtin_expect(__atomic_compare_exchange_n(w, &cur, me, 0,
							 __ATOMIC_ACQUIRE,
							 __ATOMIC_RELAXED),
			     1))
		return 0;
	return osf_lock_slow(w, me);
}

/* osf_lock_wake wakes the sleepers of a lock word just released. */
void osf_lock_wake(uint32_t *w);

/* osf_seg_unlock releases a segment lock. */
static inline void osf_seg_unlock(uint32_t *w)
{
	uint32_t old = __atomic_exchange_n(w, 0, __ATOMIC_RELEASE);

	if (__builtin_expect((old & OSF_LOCK_WAITERS) != 0, 0))
		osf_lock_wake(w);
}

/* osf_lock_after_fork resets per-thread state in a fork child. */
void osf_lock_after_fork(void);

#endif
