//go:build osf_make

/* reaper.c: idle rings of threads that only block (sdp/sys.h
 * osf_sys_sleep_begin/_end).
 *
 * A poller gives an idle connection's pages back itself (selectmux), but a
 * thread asleep in a blocking recv runs no code until data comes. Such a
 * sleeper registers its connection end in a slot before it sleeps (only
 * when the ring has pages to give back) and takes it out when it wakes; a
 * reaper thread trims the ends asleep for OSF_TRIM_IDLE_MS. The reaper is
 * started when the first end registers and ends when no end waits for a
 * trim (a trimmed end has nothing to give until it consumes again), so a
 * program that sleeps in recv for long has an extra thread for about
 * 100 ms, and a program that never blocks in recv never has one. It runs
 * with every signal blocked (the program's signals go to its own threads)
 * and calls nothing but madvise, clock_nanosleep and atomics, so a fork
 * while it runs copies no lock it holds (the child starts its own). The
 * sleeper's reference keeps the connection mapped: it waits, on waking,
 * for a trim of its end under way. Not under a seccomp filter (a new
 * thread may be forbidden there), and a reader that blocks in recv inside
 * a signal handler that interrupted malloc could deadlock in the
 * pthread_create that starts the reaper (a known limit). */
#include "base.h"

#include "../sdp/side.h"
#include "../sdp/sys.h"

#include <pthread.h>
#include <time.h>

#define REAP_SLOTS 128
#define REAP_TICK_MS 50

enum { SLOT_FREE, SLOT_CLAIMED, SLOT_ASLEEP, SLOT_TRIMMING, SLOT_TRIMMED };

static struct slot {
	int state;
	struct osf_side *s;
	long long since; /* CLOCK_MONOTONIC ns the reaper first saw it, or 0 */
} slots[REAP_SLOTS];

static int running; /* the reaper thread runs in this process */

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* reap trims the ends asleep long enough; it reports whether any end is
 * still waiting for its trim. */
static int reap(void)
{
	long long now = now_ns();
	int i, waiting = 0;

	for (i = 0; i < REAP_SLOTS; i++) {
		struct slot *sl = &slots[i];
		int st = SLOT_ASLEEP;
		long long since;
		if (__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) != SLOT_ASLEEP)
			continue;
		since = __atomic_load_n(&sl->since, __ATOMIC_RELAXED);
		if (since == 0) { /* first seen asleep now: the sleeper reads no clock */
			__atomic_store_n(&sl->since, now, __ATOMIC_RELAXED);
			waiting = 1;
			continue;
		}
		if (now - since < OSF_TRIM_IDLE_MS * 1000000LL ||
		    !__atomic_compare_exchange_n(&sl->state, &st, SLOT_TRIMMING, 0,
						 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
			waiting |= st == SLOT_ASLEEP;
			continue;
		}
		if (osf_side_trim_due(sl->s))
			(void)osf_side_trim(sl->s);
		__atomic_store_n(&sl->state, SLOT_TRIMMED, __ATOMIC_RELEASE);
	}
	return waiting;
}

static void *reaper(void *arg)
{
	struct timespec tick = {0, REAP_TICK_MS * 1000000L};

	(void)arg;
	for (;;) {
		clock_nanosleep(CLOCK_MONOTONIC, 0, &tick, NULL);
		if (reap())
			continue;
		/* Nothing waits: end, unless a sleeper registered meanwhile
		 * and saw the reaper still running. */
		__atomic_store_n(&running, 0, __ATOMIC_SEQ_CST);
		if (!reap() || __atomic_exchange_n(&running, 1, __ATOMIC_SEQ_CST))
			return NULL;
	}
}

static void start(void)
{
	pthread_attr_t a;
	pthread_t t;
	sigset_t all, old;

	if (__atomic_exchange_n(&running, 1, __ATOMIC_SEQ_CST))
		return;
	sigfillset(&all);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 * 1024);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, &a, reaper, NULL) != 0)
		__atomic_store_n(&running, 0, __ATOMIC_SEQ_CST);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
}

int osf_sys_sleep_begin(struct osf_side *s)
{
	unsigned h, i;
	int saved = errno;

	/* Under a seccomp filter a new thread (clone) may be forbidden. */
	if (__atomic_load_n(&osf.sandboxed, __ATOMIC_RELAXED))
		return 0;
	h = (unsigned)((uintptr_t)s >> 6); /* no shared counter to bounce */

	for (i = 0; i < REAP_SLOTS; i++) {
		struct slot *sl = &slots[(h + i) % REAP_SLOTS];
		int st = SLOT_FREE;
		if (!__atomic_compare_exchange_n(&sl->state, &st, SLOT_CLAIMED, 0,
						 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			continue;
		sl->s = s;
		__atomic_store_n(&sl->since, 0, __ATOMIC_RELAXED); /* the reaper stamps it */
		__atomic_store_n(&sl->state, SLOT_ASLEEP, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&running, __ATOMIC_SEQ_CST))
			start();
		errno = saved;
		return (int)((h + i) % REAP_SLOTS) + 1;
	}
	return 0; /* all taken: this sleep is not trimmed */
}

void osf_sys_sleep_end(int slot)
{
	struct slot *sl;

	if (slot <= 0)
		return;
	sl = &slots[slot - 1];
	for (;;) {
		int st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
		if (st == SLOT_TRIMMING) { /* the reaper is on it: a moment */
			__builtin_ia32_pause();
			continue;
		}
		if (__atomic_compare_exchange_n(&sl->state, &st, SLOT_FREE, 0,
						__ATOMIC_RELEASE, __ATOMIC_RELAXED))
			return;
	}
}

void osf_reaper_child_after_fork(void)
{
	int i;

	/* The child has none of the parent's sleepers, nor its reaper. */
	for (i = 0; i < REAP_SLOTS; i++)
		slots[i].state = SLOT_FREE;
	running = 0;
}
