//go:build osf_make

/* reaper.c: idle connections give their rings' pages back, whatever the
 * program does meanwhile (docs/ARCHITECTURE.md, "Memory": why a trim never
 * loses a byte, and what this costs).
 *
 * The list. A reader that consumed OSF_TRIM_BYTES since its ring's last
 * trim puts the connection on the list (conn_consumed, conn_priv.h: one
 * comparison per recv, with the connection's reap_at, UINT64_MAX while it
 * is listed; osf_reap_list once per idle period), in a slot of chunks
 * mapped as connections need them (1024 a chunk, 65536 at most; beyond, a
 * connection is listed when a slot frees). The slot names the connection,
 * the connection its slot (osf_conn.reap: the slot's number and
 * generation, or OSF_REAP_NEVER for rings that are never trimmed).
 *
 * The reaper. One thread per process (osf_thread_start: detached, every
 * signal blocked, named osf-reaper). A listing makes no system call: it
 * notes the work (osf_reap_kick_due), and the process's next sleep in the
 * kernel through osf (a blocking call, a poll, select or epoll wait, even
 * one on other fds) starts or wakes the reaper (osf_reap_kick, selectmux/ready.h);
 * never in a process whose readers never consumed a page. Every
 * REAP_TICK_MS it looks at each listed connection's rx ring positions; a
 * ring whose positions stood still for OSF_TRIM_IDLE_MS is trimmed
 * (osf_side_trim); a connection with nothing left to give back is parked,
 * and leaves the list at the next look unless its reader consumed a page
 * meanwhile (the reader unparks it with one compare-and-swap). With
 * nothing listed for REAP_LINGER_TICKS it sleeps on a futex, woken by the
 * next kick, and looks once a second meanwhile (a listing no sleep
 * through osf followed).
 *
 * Lifetime. A look holds the slot (SLOT_LOOKING) and no reference: the
 * last reference's osf_conn_destroy takes the connection out of its slot
 * first (osf_reap_forget), waiting while a look is under way, so the
 * reaper never touches an unmapped segment or a closed writers' socket.
 * It calls nothing but madvise, clock_nanosleep, futex and send (a trim
 * wakes writers its stop held back), and the idle process's spare segment
 * and kept mappings are freed as a poller's trim frees them; it takes no
 * lock a fork child could inherit: the child keeps the list (its
 * connections are the parent's, at the same addresses) and starts its own
 * reaper at its first wait after a read of a listed connection, or after
 * a listing. Not under a seccomp filter (a new thread may be forbidden
 * there: no trim but a poller's), nor with OSF_REAP_BLOCKING=0. A first
 * such wait inside a signal handler that interrupted malloc could
 * deadlock in the pthread_create that starts the reaper (a known limit,
 * once per process). */
#include "conn_priv.h"
#include "setup.h"
#include "../sdp/sys.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#define REAP_CHUNK 1024
#define REAP_CHUNKS 64
#define REAP_TICK_MS 50
#define REAP_LINGER_TICKS 20 /* a second of nothing listed, then sleep */

/* A slot's word: its generation (high 32 bits, one more at each claim)
 * and its state. A connection's reap word names the slot by number + 1
 * (low 31 bits) and generation; bit 31 (OSF_REAP_PARKED) says parked. */
enum { SLOT_FREE, SLOT_CLAIMED, SLOT_LISTED, SLOT_LOOKING };
#define GEN(w) ((w) & ~(uint64_t)0xffffffffu)
#define STATE(w) ((uint32_t)(w))
#define SLOT_NO(r) ((unsigned)((r) & 0x7fffffffu)) /* number + 1, 0: none */

struct slot {
	uint64_t word;
	struct osf_conn *c; /* written by the claimer before SLOT_LISTED */
	uint64_t stamp;	    /* the rx ring's positions at the last look */
	long long since;    /* CLOCK_MONOTONIC ns they were first seen so, 0: not yet */
};

static struct slot chunk0[REAP_CHUNK]; /* the first: no mmap on a read */
static struct slot *chunks[REAP_CHUNKS];
static int nchunks; /* chunks[0, nchunks) are mapped */
static int full;    /* every slot was taken at the last claim */

static struct slot *slot_at(unsigned i)
{
	return &chunks[i / REAP_CHUNK][i % REAP_CHUNK];
}

/* The reaper thread: none yet, looking at the slots, or asleep on the
 * futex until a connection is listed. */
enum { REAPER_NONE, REAPER_RUNS, REAPER_IDLE };
static int reaper_state;

static int on = -1; /* OSF_REAP_BLOCKING, 1 unless "0"; -1: not read yet */
static int slow; /* OSF_DEBUG_REAP_SLOW=1: each look holds its connection
		    5 ms before reading it (tests: a close must wait) */

/* ring_stamp changes whenever the rx ring's head or tail moves. */
static uint64_t ring_stamp(const struct osf_side *s)
{
	return __atomic_load_n(&s->rx->head, __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&s->rx->tail, __ATOMIC_ACQUIRE) * 0x9e3779b97f4a7c15ULL;
}

/* set_reap moves c's reap word from *cur to v: 1, or 0 with *cur the word
 * another thread put there (a reader unparking it). */
static int set_reap(struct osf_conn *c, uint64_t *cur, uint64_t v)
{
	return __atomic_compare_exchange_n(&c->reap, cur, v, 0, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

/* park marks listed connection c (reap word me) as having nothing more to
 * give back: a read past the next page unparks it; the reaper's next look
 * lets the slot go if none did. */
static void park(struct osf_conn *c, uint64_t me)
{
	__atomic_store_n(&c->reap_at, conn_reap_at(c), __ATOMIC_RELAXED);
	(void)set_reap(c, &me, me | OSF_REAP_PARKED);
}

/* look looks at slot k once (now: the time of this pass): it trims a
 * connection idle for OSF_TRIM_IDLE_MS, parks one with nothing to give
 * back and frees the slot of one parked since the last look. It returns
 * 1 when the slot is still taken, and sets *trimmed after a trim. */
static int look(unsigned k, long long now, int *trimmed)
{
	struct slot *sl = slot_at(k);
	uint64_t w = __atomic_load_n(&sl->word, __ATOMIC_ACQUIRE), me, cur, st;
	struct osf_conn *c;
	struct osf_side *s;
	int keep = 1;

	if (STATE(w) == SLOT_FREE)
		return 0;
	if (STATE(w) != SLOT_LISTED ||
	    !__atomic_compare_exchange_n(&sl->word, &w, GEN(w) | SLOT_LOOKING, 0,
					 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return 1; /* being claimed */
	/* Ours until we let go: the connection stays mapped meanwhile, and
	 * until its reap word no longer names this slot (its close then goes
	 * on without waiting: nothing here touches it after that). */
	if (slow) {
		struct timespec ts = {0, 5000000L};
		clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
	}
	c = sl->c;
	s = &c->s;
	me = GEN(w) | (k + 1);
	cur = __atomic_load_n(&c->reap, __ATOMIC_ACQUIRE);
	if ((cur & ~OSF_REAP_PARKED) != me) {
		keep = 0; /* cannot be: the slot names c, c its slot */
	} else if (!__atomic_load_n(&s->trim, __ATOMIC_RELAXED)) {
		/* Trimming was turned off (a punch failed): never again. */
		__atomic_store_n(&c->reap_at, UINT64_MAX, __ATOMIC_RELAXED);
		keep = !set_reap(c, &cur, OSF_REAP_NEVER);
	} else if (cur & OSF_REAP_PARKED) {
		/* Parked at the last look. A reader that consumed a page
		 * since unparks it, or, if it read the word before the park
		 * was visible, left its tail for this look to see. */
		if (osf_side_trim_due(s)) {
			(void)set_reap(c, &cur, me);
		} else {
			/* Out: the next page read lists it again. */
			__atomic_store_n(&c->reap_at, conn_reap_at(c), __ATOMIC_RELAXED);
			keep = !set_reap(c, &cur, 0);
		}
		sl->since = 0;
	} else if (!osf_side_trim_due(s)) {
		park(c, me); /* a poller trimmed it */
	} else if ((st = ring_stamp(s)) != sl->stamp || !sl->since) {
		sl->stamp = st; /* moving: idle from now, perhaps */
		sl->since = now;
	} else if (now - sl->since >= OSF_TRIM_IDLE_MS * 1000000LL) {
		(void)osf_side_trim(s);
		*trimmed = 1;
		if (!osf_side_trim_due(s)) /* all given back */
			park(c, me);
		else /* the producers' lock was busy, or it was read meanwhile */
			sl->since = 0;
	}
	/* Listed: reads need not call osf_reap_list until it is parked. */
	if (keep && !(__atomic_load_n(&c->reap, __ATOMIC_RELAXED) & OSF_REAP_PARKED))
		__atomic_store_n(&c->reap_at, UINT64_MAX, __ATOMIC_RELAXED);
	if (!keep)
		__atomic_store_n(&full, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&sl->word, GEN(w) | (keep ? SLOT_LISTED : SLOT_FREE),
			 __ATOMIC_RELEASE);
	return keep;
}

/* reap looks at every slot once; it reports whether any is taken. */
static int reap(void)
{
	long long now = osf_now_ns();
	unsigned i, n = (unsigned)__atomic_load_n(&nchunks, __ATOMIC_ACQUIRE) * REAP_CHUNK;
	int taken = 0, trimmed = 0;

	for (i = 0; i < n; i++)
		taken |= look(i, now, &trimmed);
	if (trimmed) { /* the process idles: its made segment goes too */
		osf_spare_idle();
		osf_conn_unmap_due(0);
	}
	return taken;
}

static void *reaper(void *arg)
{
	struct timespec tick = {0, REAP_TICK_MS * 1000000L}, idle = {1, 0};
	const char *v = osf_env("OSF_DEBUG_REAP_SLOW");
	int quiet = 0;

	(void)arg;
	slow = v && v[0] == '1';
	for (;;) {
		int st = REAPER_IDLE;
		clock_nanosleep(CLOCK_MONOTONIC, 0, &tick, NULL);
		if (reap()) {
			quiet = 0;
			continue;
		}
		if (++quiet < REAP_LINGER_TICKS)
			continue;
		quiet = 0;
		/* Nothing listed for a while: sleep until a connection is. A
		 * listing after the store below notes a kick (due), and the
		 * process's next sleep in the kernel wakes us; one before it,
		 * or one no such sleep follows, is seen by a look: at once,
		 * then once a second. */
		__atomic_store_n(&reaper_state, REAPER_IDLE, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(&reaper_state, __ATOMIC_SEQ_CST) == REAPER_IDLE) {
			if (reap()) {
				st = REAPER_IDLE;
				__atomic_compare_exchange_n(&reaper_state, &st, REAPER_RUNS, 0,
							    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
				break;
			}
			syscall(SYS_futex, &reaper_state, FUTEX_WAIT_PRIVATE, REAPER_IDLE,
				&idle, NULL, 0);
		}
	}
	return NULL;
}

int osf_reap_kick_due;

/* due notes that the reaper must look at the slots (a connection was just
 * listed or unparked) without a system call: the process's next sleep in
 * the kernel starts or wakes it (osf_reap_kick, selectmux/ready.h). */
static void due(void)
{
	if (__builtin_expect(__atomic_load_n(&reaper_state, __ATOMIC_RELAXED) != REAPER_RUNS, 0) &&
	    !__atomic_load_n(&osf_reap_kick_due, __ATOMIC_RELAXED))
		__atomic_store_n(&osf_reap_kick_due, 1, __ATOMIC_RELAXED);
}

/* wake makes sure the reaper looks at the slots, starting it if need be. */
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

/* grow maps chunk c unless another thread did: 0, or -1 (no memory, or
 * every chunk is mapped). The first is in the library's bss: a process's
 * first listing, on the data path, makes no system call (a page fault);
 * the next ones, for more than 1024 listed connections, are mmap'd. */
static int grow(int c)
{
	struct slot *m, *none = NULL;

	if (c >= REAP_CHUNKS)
		return -1;
	if (!__atomic_load_n(&chunks[c], __ATOMIC_ACQUIRE)) {
		m = c == 0 ? chunk0
			   : mmap(NULL, REAP_CHUNK * sizeof(struct slot),
				  PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return -1;
		if (!__atomic_compare_exchange_n(&chunks[c], &none, m, 0,
						 __ATOMIC_RELEASE, __ATOMIC_ACQUIRE) &&
		    m != chunk0)
			munmap(m, REAP_CHUNK * sizeof(struct slot));
	}
	__atomic_compare_exchange_n(&nchunks, &c, c + 1, 0, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
	return 0;
}

/* claim takes a free slot for c (SLOT_CLAIMED): the reap word naming it,
 * or 0 when every slot is taken. */
static uint64_t claim(struct osf_conn *c)
{
	static unsigned next; /* where the search starts: spreads claimers */

	if (__atomic_load_n(&full, __ATOMIC_RELAXED))
		return 0;
	for (;;) {
		int nc = __atomic_load_n(&nchunks, __ATOMIC_ACQUIRE);
		unsigned n = (unsigned)nc * REAP_CHUNK, i,
			 h = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
		for (i = 0; i < n; i++) {
			unsigned k = (h + i) % n;
			struct slot *sl = slot_at(k);
			uint64_t w = __atomic_load_n(&sl->word, __ATOMIC_RELAXED), nw;
			if (STATE(w) != SLOT_FREE)
				continue;
			nw = (GEN(w) + ((uint64_t)1 << 32)) | SLOT_CLAIMED;
			if (!__atomic_compare_exchange_n(&sl->word, &w, nw, 0,
							 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				continue;
			sl->c = c;
			sl->stamp = 0;
			sl->since = 0;
			return GEN(nw) | (k + 1);
		}
		if (grow(nc) < 0) {
			__atomic_store_n(&full, 1, __ATOMIC_RELAXED);
			return 0;
		}
	}
}

void osf_reap_list(struct osf_conn *c)
{
	uint64_t cur = __atomic_load_n(&c->reap, __ATOMIC_ACQUIRE), r;
	int saved = errno, tries;

	/* On unless OSF_REAP_BLOCKING=0; under a seccomp filter a new
	 * thread (clone) may be forbidden. */
	if (__builtin_expect(on < 0, 0)) {
		const char *v = osf_env("OSF_REAP_BLOCKING");
		__atomic_store_n(&on, !(v && v[0] == '0'), __ATOMIC_RELAXED);
	}
	if (!__atomic_load_n(&on, __ATOMIC_RELAXED) ||
	    !__atomic_load_n(&c->s.trim, __ATOMIC_RELAXED) ||
	    (__atomic_load_n(&osf.sandboxed, __ATOMIC_RELAXED) &&
	     __atomic_load_n(&reaper_state, __ATOMIC_RELAXED) == REAPER_NONE)) {
		if (cur == 0 && set_reap(c, &cur, OSF_REAP_NEVER))
			__atomic_store_n(&c->reap_at, UINT64_MAX, __ATOMIC_RELAXED);
		return;
	}
	for (tries = 0; tries < 4; tries++) {
		if (cur & OSF_REAP_PARKED) { /* the reaper's next look keeps it */
			if (!set_reap(c, &cur, cur & ~OSF_REAP_PARKED))
				continue;
			due();
			goto listed;
		}
		if (cur != 0) { /* by another thread meanwhile, or before a fork */
			due();
			goto listed;
		}
		r = claim(c);
		if (!r)
			break; /* no slot: the next read past a page asks again */
		if (!set_reap(c, &cur, r)) { /* another thread listed it */
			__atomic_store_n(&slot_at(SLOT_NO(r) - 1)->word, GEN(r) | SLOT_FREE,
					 __ATOMIC_RELEASE);
			continue;
		}
		__atomic_store_n(&slot_at(SLOT_NO(r) - 1)->word, GEN(r) | SLOT_LISTED,
				 __ATOMIC_RELEASE);
		due();
		goto listed;
	}
	errno = saved;
	return;
listed:
	/* Reads need not call here until the reaper parks it, which sets
	 * reap_at before the park; a park that came meanwhile sets it back. */
	__atomic_store_n(&c->reap_at, UINT64_MAX, __ATOMIC_RELAXED);
	cur = __atomic_load_n(&c->reap, __ATOMIC_SEQ_CST);
	if (cur == 0 || (cur & OSF_REAP_PARKED))
		__atomic_store_n(&c->reap_at, conn_reap_at(c), __ATOMIC_RELAXED);
	errno = saved;
}

void osf_reap_kick_slow(void)
{
	int saved = errno;

	if (!__atomic_exchange_n(&osf_reap_kick_due, 0, __ATOMIC_RELAXED))
		return;
	/* Under a seccomp filter a new thread (clone) may be forbidden. */
	if (!__atomic_load_n(&osf.sandboxed, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&reaper_state, __ATOMIC_RELAXED) != REAPER_NONE)
		wake();
	errno = saved;
}

void osf_reap_forget(struct osf_conn *c)
{
	uint64_t r = __atomic_load_n(&c->reap, __ATOMIC_ACQUIRE);
	unsigned k = SLOT_NO(r);
	struct slot *sl;
	int spins = 0;

	if (k == 0 || k > (unsigned)__atomic_load_n(&nchunks, __ATOMIC_ACQUIRE) * REAP_CHUNK)
		return; /* in no slot (OSF_REAP_NEVER names none either) */
	sl = slot_at(k - 1);
	for (;;) {
		uint64_t w = __atomic_load_n(&sl->word, __ATOMIC_ACQUIRE);
		if (GEN(w) != GEN(r) || STATE(w) == SLOT_FREE)
			break; /* the reaper let it go */
		if (STATE(w) == SLOT_LISTED) {
			if (__atomic_compare_exchange_n(&sl->word, &w, GEN(w) | SLOT_FREE, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				break;
			continue;
		}
		/* A look under way: a moment (a trim: a few madvise calls). */
		if (++spins < 64)
			__builtin_ia32_pause();
		else
			sched_yield(); /* the reaper may be preempted */
	}
	__atomic_store_n(&full, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&c->reap, 0, __ATOMIC_RELEASE);
}

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

/* child_after_fork forgets the parent's list of connections to trim and
 * its reaper thread. */
OSF_FORK_TEXT static void child_after_fork(void)
{
	unsigned i, n = (unsigned)nchunks * REAP_CHUNK;

	/* The child has none of the parent's threads: no reaper, no look
	 * or claim under way. Its connections are the parent's, at the same
	 * addresses: it keeps the list (a look under way is undone, a claim
	 * stands if it named its connection already), and its own reaper
	 * starts at its next listing or unparking. */
	for (i = 0; i < n; i++) {
		struct slot *sl = slot_at(i);
		uint64_t w = sl->word;
		if (STATE(w) == SLOT_LOOKING)
			sl->word = w = GEN(w) | SLOT_LISTED;
		else if (STATE(w) == SLOT_CLAIMED)
			sl->word = w = GEN(w) | (sl->c && (sl->c->reap & ~OSF_REAP_PARKED) ==
								  (GEN(w) | (i + 1))
							 ? SLOT_LISTED
							 : SLOT_FREE);
		/* Its next read starts the child's reaper (osf_reap_list). */
		if (STATE(w) == SLOT_LISTED)
			OSF_RESET(sl->c->reap_at, 0);
	}
	OSF_RESET(reaper_state, REAPER_NONE);
}
OSF_AFTER_FORK(child_after_fork, OSF_FORK_RESET);
