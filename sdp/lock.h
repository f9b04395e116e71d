/* lock.h: the segment locks (osf_seg_side.tx_lock / rx_lock).
 *
 * A lock word is 0 when free, else the owner's tid, with OSF_LOCK_WAITERS
 * set when someone sleeps on it (a shared futex). The word lives in the
 * segment, so the peer can write it: a holder that no longer runs is
 * replaced, a stopped one waited for (never longer than the caller's
 * O_NONBLOCK or timeout allows), and running holders that keep it from
 * this process impossibly long in all mean a corrupt segment.
 */
#ifndef OSF_SDP_LOCK_H
#define OSF_SDP_LOCK_H

#include "segment.h"
#include "sys.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OSF_LOCK_STUCK_MS 5000 /* a segment lock held this long is corrupt */

/* osf_lock_tid returns the calling thread's id (cached per thread). */
#ifdef OSF_LOCK_TLS_GD /* built by cgo (cside.go): maybe in a dlopened library */
#define OSF_LOCK_TLS_MODEL "global-dynamic"
#else
#define OSF_LOCK_TLS_MODEL "initial-exec"
#endif
extern __thread uint32_t osf_lock_tls_tid
	__attribute__((tls_model(OSF_LOCK_TLS_MODEL)));
static inline uint32_t osf_lock_tid(void)
{
	uint32_t t = osf_lock_tls_tid;

	if (__builtin_expect(t == 0, 0))
		t = osf_lock_tls_tid = (uint32_t)osf_sys_gettid();
	return t;
}

/* osf_mono_us is CLOCK_MONOTONIC in microseconds. */
static inline long osf_mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* osf_wait_ms is how long a wait may still sleep before deadline (in
 * osf_mono_us's microseconds): poll's milliseconds rounded up, so that a
 * timed wait never ends before its timeout (as the kernel's never do); 0
 * once the deadline passed. */
static inline long osf_wait_ms(long deadline)
{
	long left = deadline - osf_mono_us();

	return left <= 0 ? 0 : (left + 999) / 1000;
}

/* osf_debug_pause_us sleeps us microseconds (tests' OSF_DEBUG_*_US: a
 * thread preempted at that point), nothing for 0. */
static inline void osf_debug_pause_us(unsigned us)
{
	if (__builtin_expect(us != 0, 0)) {
		struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
		nanosleep(&ts, NULL);
	}
}

/* osf_sock_timeout_ms returns socket fd's SO_RCVTIMEO (snd: SO_SNDTIMEO)
 * in ms, rounded up, or -1 for none (or fd -1, or no such socket); errno
 * is kept. */
long osf_sock_timeout_ms(int fd, int snd);

/* How a caller may wait for a contended lock (osf_seg_lock_wait). */
struct osf_lock_wait {
	int nonblock; /* O_NONBLOCK or MSG_DONTWAIT: never wait for a holder
			 that is stopped, nor long for a running one */
	int timeo_fd; /* a blocking call gives up when this socket's
			 SO_RCVTIMEO expires (the application's fd for the
			 readers' lock; the writers' socket, which carries
			 SO_SNDTIMEO, for the writers' lock); -1: none */
	long *since;  /* the connection's stuck clock (process memory, ms of
			 CLOCK_MONOTONIC, 0: not held against us): when this
			 lock was first found held, kept across calls and
			 across owners until this process takes it */
	int sndtimeo; /* 1: timeo_fd's SO_SNDTIMEO rather than SO_RCVTIMEO */
};

/* Results of osf_seg_lock_wait besides 0 (taken). */
#define OSF_LOCK_AGAIN (-EAGAIN)     /* would block, or timed out */
#define OSF_LOCK_BROKEN (-ECONNRESET) /* the peer wrote the word, or the
					 caller holds it (a signal
					 handler): the connection is reset */

/* osf_lock_slow waits for a contended lock as how allows: 0 when taken,
 * else OSF_LOCK_AGAIN or OSF_LOCK_BROKEN. A holder that no longer exists
 * (or is a zombie) is replaced. (A consumer that trims the ring holds its
 * producers' lock only to read head and set the trim stop, never across
 * a punch: sdp/side_mem.c osf_side_trim.) A stopped holder (SIGSTOP, a debugger) is
 * a process sharing the connection that will continue: a non-blocking
 * caller gets OSF_LOCK_AGAIN at once, a blocking one waits (SO_RCVTIMEO),
 * and the connection is never reset for it, as TCP would not. Running
 * holders may keep the lock from this process for OSF_LOCK_STUCK_MS in
 * all, whoever they are (the clock does not restart when the owner
 * changes): past that the word is the peer's doing and the connection is
 * broken. A non-blocking caller waits at most OSF_LOCK_NB_WAIT_MS per call
 * for a running holder (a ring copy in progress). */
int osf_lock_slow(uint32_t *w, uint32_t me, const struct osf_lock_wait *how);

#define OSF_LOCK_NB_WAIT_MS 2

/* osf_seg_lock_wait takes a segment lock: 0, OSF_LOCK_AGAIN or
 * OSF_LOCK_BROKEN (see osf_lock_slow). */
static inline int osf_seg_lock_wait(uint32_t *w, const struct osf_lock_wait *how)
{
	uint32_t me = osf_lock_tid(), cur = 0;

	if (__builtin_expect(__atomic_compare_exchange_n(w, &cur, me, 0,
							 __ATOMIC_ACQUIRE,
							 __ATOMIC_RELAXED),
			     1)) {
		if (__builtin_expect(*how->since != 0, 0))
			*how->since = 0;
		return 0;
	}
	return osf_lock_slow(w, me, how);
}

/* osf_seg_lock takes a segment lock for a caller that may wait (no
 * timeout, its own stuck clock): 0, or OSF_LOCK_BROKEN. */
static inline int osf_seg_lock(uint32_t *w)
{
	long since = 0;
	struct osf_lock_wait how = {0, -1, &since, 0};

	return osf_seg_lock_wait(w, &how);
}

/* osf_lock_holder_gone tells whether thread tid (a word another process
 * may have written) does not exist or is a zombie: 0 when it runs, is
 * stopped, or tid is 0. Reads /proc; for slow paths only. */
int osf_lock_holder_gone(uint32_t tid);

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
