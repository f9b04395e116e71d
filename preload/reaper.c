//go:build osf_make

/* reaper.c: idle rings of threads that only block (sdp/sys.h
 * osf_sys_sleep_begin/_end).
 *
 * A poller gives an idle connection's pages back itself (selectmux), but a
 * thread asleep in a blocking recv runs no code until data comes. Such a
 * sleeper registers its connection end in a slot before it sleeps (only
 * when the ring has pages to give back; slots come in chunks mapped on
 * demand, 65536 sleepers at most) and takes it out when it wakes; the
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
 * clock_nanosleep, futex, send (a trim wakes writers its stop held back)
 * and atomics, so a fork while it runs copies no lock it holds (the child starts its own on demand). The sleeper's
 * reference keeps the connection mapped: on waking it waits for a trim of
 * its end under way. Not under a seccomp filter (a new thread may be
 * forbidden there), and a reader that blocks in recv inside a signal
 * handler that interrupted malloc could deadlock in the pthread_create
 * that starts the reaper (a known limit, once per process). */
#include "base.h"

#include "osf.h"
#include "setup.h"
#include "../sdp/side.h"
#include "../sdp/sys.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>

#include <sys/mman.h>

/* The slots: chunks of REAP_CHUNK, mapped as sleepers need them (one per
 * thread asleep with pages to give back, at most REAP_CHUNKS * REAP_CHUNK
 * at once; more are not trimmed) and kept for the process's life. */
#define REAP_CHUNK 1024
#define REAP_CHUNKS 64
#define REAP_TICK_MS 50

enum { SLOT_FREE, SLOT_CLAIMED, SLOT_ASLEEP, SLOT_TRIMMING, SLOT_TRIMMED };

struct slot {
	int state;
	struct osf_side *s;
	long long since; /* CLOCK_MONOTONIC ns the reaper first saw it, or 0 */
};

static struct slot *chunks[REAP_CHUNKS];
static int nchunks; /* chunks[0, nchunks) are mapped */

static struct slot *slot_at(unsigned i)
{
	return &chunks[i / REAP_CHUNK][i % REAP_CHUNK];
}

/* The reaper thread: none yet, looking at the slots, or asleep on the
 * futex until a sleeper registers. */
enum { REAPER_NONE, REAPER_RUNS, REAPER_IDLE };
static int reaper_state;

/* reap trims the ends asleep long enough; it reports whether any end is
 * still waiting for its trim. */
static int reap(void)
{
	long long now = osf_now_ns();
	unsigned i, n = (unsigned)__atomic_load_n(&nchunks, __ATOMIC_ACQUIRE) * REAP_CHUNK;
	int waiting = 0;

	for (i = 0; i < n; i++) {
		struct slot *sl = slot_at(i);
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
		osf_spare_idle(); /* the process idles: its made segment goes too */
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

/* claim takes a free slot of the first n: its number + 1, or 0. */
static int claim(unsigned h, unsigned n, struct osf_side *s)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		unsigned k = (h + i) % n;
		struct slot *sl = slot_at(k);
		int st = SLOT_FREE;
		if (__atomic_load_n(&sl->state, __ATOMIC_RELAXED) != SLOT_FREE ||
		    !__atomic_compare_exchange_n(&sl->state, &st, SLOT_CLAIMED, 0,
						 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			continue;
		sl->s = s;
		__atomic_store_n(&sl->since, 0, __ATOMIC_RELAXED); /* the reaper stamps it */
		__atomic_store_n(&sl->state, SLOT_ASLEEP, __ATOMIC_SEQ_CST);
		return (int)k + 1;
	}
	return 0;
}

/* grow maps chunk c unless another sleeper did: 0, or -1 (no memory, or
 * every chunk is mapped). */
static int grow(int c)
{
	struct slot *m, *none = NULL;

	if (c >= REAP_CHUNKS)
		return -1;
	if (!__atomic_load_n(&chunks[c], __ATOMIC_ACQUIRE)) {
		m = mmap(NULL, REAP_CHUNK * sizeof(struct slot), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return -1;
		if (!__atomic_compare_exchange_n(&chunks[c], &none, m, 0,
						 __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
			munmap(m, REAP_CHUNK * sizeof(struct slot));
	}
	__atomic_compare_exchange_n(&nchunks, &c, c + 1, 0, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
	return 0;
}

static int on = -1; /* OSF_REAP_BLOCKING, 1 unless "0"; -1: not read yet */

void osf_sys_debug_punch(void)
{
	static int done;
	const char *v;

	if (__atomic_load_n(&done, __ATOMIC_RELAXED))
		return;
	v = osf_env("OSF_DEBUG_TRIM_STOP");
	if (v && v[0] == '1' && !__atomic_exchange_n(&done, 1, __ATOMIC_RELAXED))
		/* This thread first: the stop takes it before the punch. */
		syscall(SYS_tgkill, getpid(), osf_sys_gettid(), SIGSTOP);
}

int osf_sys_sleep_begin(struct osf_side *s)
{
	unsigned h;
	int saved = errno, k = 0, c;

	/* On unless OSF_REAP_BLOCKING=0. */
	if (__builtin_expect(on < 0, 0)) {
		const char *v = osf_env("OSF_REAP_BLOCKING");
		__atomic_store_n(&on, !(v && v[0] == '0'), __ATOMIC_RELAXED);
	}
	if (!__atomic_load_n(&on, __ATOMIC_RELAXED))
		return 0;
	/* Under a seccomp filter a new thread (clone) may be forbidden. */
	if (__atomic_load_n(&osf.sandboxed, __ATOMIC_RELAXED))
		return 0;
	h = (unsigned)((uintptr_t)s >> 6); /* no shared counter to bounce */
	for (;;) {
		c = __atomic_load_n(&nchunks, __ATOMIC_ACQUIRE);
		if (c > 0 && (k = claim(h, (unsigned)c * REAP_CHUNK, s)) != 0)
			break;
		if (grow(c) < 0)
			break; /* all taken: this sleep is not trimmed */
	}
	if (k)
		wake();
	errno = saved;
	return k;
}

void osf_sys_sleep_end(int slot)
{
	struct slot *sl;
	int spins = 0;

	if (slot <= 0)
		return;
	sl = slot_at((unsigned)slot - 1);
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

OSF_FORK_TEXT void osf_reaper_child_after_fork(void)
{
	unsigned i, n = (unsigned)nchunks * REAP_CHUNK;

	/* The child has none of the parent's sleepers, nor its reaper (it
	 * keeps the parent's chunks). */
	for (i = 0; i < n; i++)
		OSF_RESET(slot_at(i)->state, SLOT_FREE);
	OSF_RESET(reaper_state, REAPER_NONE);
}
