//go:build osf_make

/* reaper.c: idle rings of threads that only block (sdp/sys.h
 * osf_sys_sleep_begin/_end).
 *
 * A poller gives an idle connection's pages back itself (selectmux), but a
 * thread asleep in a blocking recv runs no code until data comes. Such a
 * sleeper registers its connection end in a slot before it sleeps (only
 * when the ring has pages to give back) and takes it out when it wakes; the
 * reaper thread trims the ends asleep for OSF_TRIM_IDLE_MS
 * (docs/ARCHITECTURE.md, "Memory", says why a trim never loses a byte).
 *
 * One thread per process, started (osf_thread_start: detached, every
 * signal blocked) by the first sleeper that registers, never by a program
 * that never blocks in recv. It looks at the slots every REAP_TICK_MS
 * while an end waits for its trim, and otherwise sleeps on a futex with no
 * timeout: no work while nothing idles. A sleeper wakes it only when it
 * sleeps (one load of a read-mostly word on the sleep path, a futex wake
 * at most once per idle period). It calls nothing but madvise,
 * clock_nanosleep, futex and atomics, so a fork while it runs copies no
 * lock it holds (the child starts its own on demand). The sleeper's
 * reference keeps the connection mapped: on waking it waits for a trim of
 * its end under way. Not under a seccomp filter (a new thread may be
 * forbidden there), and a reader that blocks in recv inside a signal
 * handler that interrupted malloc could deadlock in the pthread_create
 * that starts the reaper (a known limit, once per process). */
#include "base.h"

#include "osf.h"
#include "../sdp/side.h"
#include "../sdp/sys.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>

#define REAP_SLOTS 128
#define REAP_TICK_MS 50

enum { SLOT_FREE, SLOT_CLAIMED, SLOT_ASLEEP, SLOT_TRIMMING, SLOT_TRIMMED };

static struct slot {
	int state;
	struct osf_side *s;
	long long since; /* CLOCK_MONOTONIC ns the reaper first saw it, or 0 */
} slots[REAP_SLOTS];

/* The reaper thread: none yet, looking at the slots, or asleep on the
 * futex until a sleeper registers. */
enum { REAPER_NONE, REAPER_RUNS, REAPER_IDLE };
static int reaper_state;

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
		int st = REAPER_IDLE;
		clock_nanosleep(CLOCK_MONOTONIC, 0, &tick, NULL);
		if (reap())
			continue;
		/* Nothing waits: sleep until a sleeper registers. A sleeper
		 * that registered before the store below is seen by the
		 * second look; one after it sees REAPER_IDLE and wakes us. */
		__atomic_store_n(&reaper_state, REAPER_IDLE, __ATOMIC_SEQ_CST);
		if (reap()) {
			__atomic_compare_exchange_n(&reaper_state, &st, REAPER_RUNS, 0,
						    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
			continue;
		}
		while (__atomic_load_n(&reaper_state, __ATOMIC_SEQ_CST) == REAPER_IDLE)
			syscall(SYS_futex, &reaper_state, FUTEX_WAIT_PRIVATE,
				REAPER_IDLE, NULL, NULL, 0);
	}
	return NULL;
}

/* wake makes sure the reaper looks at the slots (a slot was just filled). */
static void wake(void)
{
	int st = __atomic_load_n(&reaper_state, __ATOMIC_SEQ_CST);

	if (st == REAPER_RUNS)
		return; /* the usual case: a load */
	if (st == REAPER_IDLE) {
		if (__atomic_compare_exchange_n(&reaper_state, &st, REAPER_RUNS, 0,
						__ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			syscall(SYS_futex, &reaper_state, FUTEX_WAKE_PRIVATE, 1,
				NULL, NULL, 0);
		return;
	}
	if (__atomic_compare_exchange_n(&reaper_state, &st, REAPER_RUNS, 0,
					__ATOMIC_SEQ_CST, __ATOMIC_RELAXED) &&
	    osf_thread_start(reaper, "osf-reaper") != 0)
		__atomic_store_n(&reaper_state, REAPER_NONE, __ATOMIC_SEQ_CST);
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
		wake();
		errno = saved;
		return (int)((h + i) % REAP_SLOTS) + 1;
	}
	return 0; /* all taken: this sleep is not trimmed */
}

void osf_sys_sleep_end(int slot)
{
	struct slot *sl;
	int spins = 0;

	if (slot <= 0)
		return;
	sl = &slots[slot - 1];
	for (;;) {
		int st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
		if (st == SLOT_TRIMMING) { /* the reaper is on it: a moment */
			if (++spins < 64)
				__builtin_ia32_pause();
			else
				sched_yield(); /* it may be preempted */
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
	reaper_state = REAPER_NONE;
}
