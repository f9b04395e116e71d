//go:build osf_make

/* fdtable.c: the fd table of libosf.so (layout: fdtable.h, API: fdt.h).
 *
 * The table lives in a memfd so that it survives exec and so that osfstat
 * can read it from outside. Calls that libosf.so itself hooks (close,
 * fcntl, dup3) are made as raw system calls here, so the table never
 * re-enters the hooks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stddef.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fdt.h"

struct osf_fdt_entry *osf_fdt_chunks[OSF_FDT_MAX_CHUNKS];
uint32_t osf_fdt_pages[OSF_FDT_MAX_CHUNKS];

static struct osf_fdt_header *hdr; /* NULL until the first tracked fd */
static int tfd = -1;               /* the table's memfd */
static off_t tsize;                /* current size of the memfd */
uint64_t osf_fdt_cur_image;
_Static_assert(sizeof(struct osf_fork_words) == 128, "osf_fork: one aligned 128 bytes");
static int reserving; /* osf_fdt_reserve_low calls not yet released; a fork child looks */
static int inherit_count; /* offloaded entries without FD_CLOEXEC */
static int offload_count; /* offloaded entries */

/* sys_ret turns osf_rawsys's result into the C library's convention. */
OSF_FORK_TEXT static int sys_ret(long r)
{
	if (r < 0 && r > -4096) {
		errno = (int)-r;
		return -1;
	}
	return (int)r;
}
OSF_FORK_TEXT static int sys_close(int fd) { return sys_ret(osf_rawsys(SYS_close, fd, 0, 0, 0, 0, 0)); }
OSF_FORK_TEXT static int sys_fcntl(int fd, int cmd, long arg)
{
	return sys_ret(osf_rawsys(SYS_fcntl, fd, cmd, arg, 0, 0, 0));
}
OSF_FORK_TEXT static int sys_dup3(int oldfd, int newfd, int flags)
{
	return sys_ret(osf_rawsys(SYS_dup3, oldfd, newfd, flags, 0, 0, 0));
}
/* my_tid is the calling thread's id, asked of the kernel once per thread
 * (and again in a fork child, osf_fdt_child_after_fork): the lock below
 * runs several times per connection set-up and close. */
static __thread int tls_tid __attribute__((tls_model("initial-exec")));
static int my_tid(void)
{
	if (__builtin_expect(tls_tid == 0, 0))
		tls_tid = (int)syscall(SYS_gettid);
	return tls_tid;
}

/* The lock word holds the owner's tid, with LOCK_WAITERS once another
 * thread sleeps on it: an uncontended lock and unlock make no system call.
 *
 * Contended, the lock is handed over, not dropped: an unlock that finds
 * sleepers stores LOCK_HANDOFF and wakes one, and only a thread that has
 * slept on the word may take a handed-over lock. A thread that takes the
 * lock again right after letting go of it (a connecting thread's next fd
 * window) queues behind the sleepers instead of overtaking them every
 * time: a fork waiting for the window lock while two threads connect in a
 * loop got it a few hundred times in 3 s against thousands bare. The kernel
 * wakes futex sleepers of equal priority in arrival order.
 *
 * A handed-over lock is never stranded: a sleeper wakes at least every
 * LOCK_NAP_NS and may then take it (the woken thread may have left the
 * wait by siglongjmp from a handler); an unlock that woke nobody drops the
 * lock and wakes again; and a signal handler that interrupted its own
 * thread's wait may take it at once (tls_lock_waits), since the interrupted
 * wait cannot run until the handler returns. */
#define LOCK_WAITERS 0x40000000
#define LOCK_HANDOFF 0x3fffffff /* above any tid (PID_MAX_LIMIT is 2^22) */
#define LOCK_NAP_NS 20000000L

static __thread int tls_lock_waits __attribute__((tls_model("initial-exec")));

/* word_lock takes the lock word w (the table's, or the rlimit window's). */
OSF_FORK_TEXT static void word_lock(int *w)
{
	int me = my_tid(), cur = 0, slept, saved;

	if (__atomic_compare_exchange_n(w, &cur, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	saved = errno;
	slept = tls_lock_waits > 0; /* a handler on a waiting thread */
	tls_lock_waits++;
	for (;;) {
		if (cur == 0 || (slept && (cur & ~LOCK_WAITERS) == LOCK_HANDOFF)) {
			/* Free, or handed over to a sleeper: take it with the
			 * announcement kept (other sleepers may remain). */
			if (__atomic_compare_exchange_n(w, &cur, me | LOCK_WAITERS, 0,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				break;
			continue;
		}
		/* Held, or handed to another: announce a sleeper and sleep. */
		if (!(cur & LOCK_WAITERS) &&
		    !__atomic_compare_exchange_n(w, &cur, cur | LOCK_WAITERS, 0,
						 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			continue;
		struct timespec nap = {0, LOCK_NAP_NS};
		if (syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, cur | LOCK_WAITERS, &nap, NULL,
			    0) == 0 || errno != EAGAIN)
			slept = 1; /* woken, napped out or interrupted */
		cur = __atomic_load_n(w, __ATOMIC_RELAXED);
	}
	tls_lock_waits--;
	errno = saved;
}

OSF_FORK_TEXT static void word_unlock(int *w)
{
	int cur = __atomic_load_n(w, __ATOMIC_RELAXED), saved;

	/* Only the owner changes the word, but for the waiters' bit. */
	while (!(cur & LOCK_WAITERS))
		if (__atomic_compare_exchange_n(w, &cur, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			return;
	saved = errno;
	__atomic_store_n(w, LOCK_HANDOFF | LOCK_WAITERS, __ATOMIC_RELEASE);
	if (syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0) <= 0) {
		/* Nobody asleep (they left, or are in a handler): drop it,
		 * and wake one that went to sleep on the handed-over word
		 * meanwhile. */
		cur = LOCK_HANDOFF | LOCK_WAITERS;
		if (__atomic_compare_exchange_n(w, &cur, 0, 0, __ATOMIC_RELEASE,
						__ATOMIC_RELAXED))
			syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	}
	errno = saved;
}

OSF_FORK_TEXT void osf_fdt_lock(void)
{
	word_lock(&osf_fork.lock_word);
}

OSF_FORK_TEXT void osf_fdt_unlock(void)
{
	word_unlock(&osf_fork.lock_word);
}

#define OSF_FDT_EDEADLK() (errno = EDEADLK, -1)
#define OSF_FAIL_EBUSY() (errno = EBUSY, -1)

static int snapshot(void);

/* held_by_me reports a re-entrant call (a signal handler that interrupted
 * this thread inside a structural change). */
static int held_by_me(void)
{
	return (__atomic_load_n(&osf_fork.lock_word, __ATOMIC_RELAXED) & ~LOCK_WAITERS) == my_tid();
}

/* ---- osf's fds and the program's RLIMIT_NOFILE -------------------------
 *
 * The kernel refuses an fd (EMFILE) when no number below the soft
 * RLIMIT_NOFILE is free, and checks the limit only when it hands out a
 * number. So osf keeps its own fds at and above the program's soft limit,
 * where they cost the program none of it: the soft limit is raised to the
 * hard one for the few system calls that place them (a "window", one lock)
 * and put back at once, and the program's numbering, its EMFILE and its
 * getrlimit stay the kernel's. The hooks of getrlimit/setrlimit/prlimit
 * take the same lock, so no thread of the program sees the raised value or
 * has its own change undone. When the hard limit leaves no room (soft ==
 * hard) or the soft limit is very large (above OSF_FDT_HIGH_MAX: the
 * kernel's fd array would grow that far), osf's fds live from half the
 * soft limit, at most 1024, as they did before. */

#define OSF_FDT_HIGH_MAX 65536


/* The window's lock word is the table lock's kind (word_lock): the
 * owner's tid, with LOCK_WAITERS once another thread sleeps on it, so
 * that an uncontended window makes no futex call.
 *
 * A signal handler may open a window (or hold the lock) on a thread that
 * holds it, at any point: it nests (osf_fork.high_depth), and a window it opens
 * while none is open is its own, put back by its own osf_fdt_high_end
 * (osf_fork.high_open names the depth that opened it): a handler that opened one
 * while the thread held the lock only for a getrlimit hook once left the
 * limit raised. The owner's steps are ordered for a handler that lands
 * between them (SIGNAL_FENCE: program order as a handler sees it). No
 * signal is blocked: a window may cover a blocking connect, and an exec
 * or fork under the lock would pass a blocked mask on. */
#define SIGNAL_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)

static int high_mine(void)
{
	return (__atomic_load_n(&osf_fork.high_word, __ATOMIC_RELAXED) & ~LOCK_WAITERS) == my_tid();
}

OSF_FORK_TEXT static int sys_prlimit(const struct rlimit *nw, struct rlimit *old)
{
	return (int)syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, nw, old);
}

/* legacy_base is the range below the limit, for a limit with no room
 * above it. */
static int legacy_base(rlim_t soft)
{
	if (soft >= 128)
		return soft / 2 > 1024 ? 1024 : (int)(soft / 2);
	return soft > 19 ? (int)soft - 16 : 3;
}

static int room_above(const struct rlimit *rl)
{
	return rl->rlim_cur != RLIM_INFINITY && rl->rlim_cur < rl->rlim_max &&
	       rl->rlim_cur <= OSF_FDT_HIGH_MAX;
}

/* OSF_FDT_TIGHT_MAX: with no room above the soft limit (soft = hard), a
 * limit up to this is one a program may well fill (`ulimit -n 1024` sets
 * both, so do containers and service managers), and osf's fds there
 * would cost it: its connections go to kernel TCP instead
 * (osf_fdt_affordable). Above it (runtimes that raise the soft limit to a
 * hard one of 2^19 or 2^20: the JVM, Go, churn here) osf keeps its fds from
 * legacy_base, as before. */
#define OSF_FDT_TIGHT_MAX 16384

static int tight(const struct rlimit *rl)
{
	return !room_above(rl) && rl->rlim_cur != RLIM_INFINITY &&
	       rl->rlim_cur <= OSF_FDT_TIGHT_MAX;
}

static int base_of(const struct rlimit *rl)
{
	if (rl->rlim_cur == RLIM_INFINITY)
		return 1024;
	return room_above(rl) ? (int)rl->rlim_cur : legacy_base(rl->rlim_cur);
}

int osf_fdt_hidden_base(void)
{
	struct rlimit rl;

	if (high_mine() && osf_fork.high_raised)
		return base_of(&osf_fork.high_saved);
	if (sys_prlimit(NULL, &rl) < 0)
		return 1024;
	return base_of(&rl);
}

int osf_fdt_inrange_base(void)
{
	struct rlimit rl;

	if (high_mine() && osf_fork.high_raised)
		return legacy_base(osf_fork.high_saved.rlim_cur);
	if (sys_prlimit(NULL, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1024;
	return legacy_base(rl.rlim_cur);
}

/* What the last window (or look) found: whether osf's fds cost the
 * program none of its limit (room above it), and its soft and hard
 * limits; -1: not known (none yet, or the program changed its limit
 * since). A hint for osf_fdt_fds_free, which a stale value can only make
 * look once more. max_placed is the highest number osf_fdt_dup_high
 * placed: osf places lowest first, so every number above it is free (the
 * room above is sure without a look while hard - 1 - max_placed is
 * enough; fds an exec'd image inherited there are not counted). */
static int seen_room = -1;
static int seen_soft, seen_hard;
static int max_placed = -1;

static int lim_int(rlim_t v)
{
	return v == RLIM_INFINITY || v > 1 << 30 ? 1 << 30 : (int)v;
}

static void note_limit(const struct rlimit *rl)
{
	seen_soft = lim_int(rl->rlim_cur);
	seen_hard = lim_int(rl->rlim_max);
	__atomic_store_n(&seen_room, room_above(rl), __ATOMIC_RELAXED);
}

void osf_fdt_limit_changed(void)
{
	__atomic_store_n(&seen_room, -1, __ATOMIC_RELAXED);
}

/* FREE_LOOK is how many fd numbers one poll looks at. */
#define FREE_LOOK 32

/* free_in reports whether n numbers in [lo, hi) are free: ppoll marks a
 * number that names no open file POLLNVAL; one call looks at FREE_LOOK
 * numbers, from *hint (where free ones were last seen), round the range
 * at most once. No telling (the call failed) counts as free. */
static int free_in(int lo, int hi, int n, int *hint)
{
	struct pollfd p[FREE_LOOK];
	struct timespec zero = {0, 0};
	int from = *hint >= lo && *hint < hi ? *hint : lo, done, got = 0, k, i;

	for (done = 0; done < hi - lo && got < n; done += k) {
		k = hi - from < FREE_LOOK ? hi - from : FREE_LOOK;
		for (i = 0; i < k; i++) {
			p[i].fd = from + i;
			p[i].events = 0;
			p[i].revents = 0;
		}
		if (osf_rawsys(SYS_ppoll, (long)p, k, (long)&zero, 0, 8, 0) < 0)
			return 1;
		for (i = 0; i < k; i++)
			if (p[i].revents & POLLNVAL)
				got++;
		if (got < n)
			from = from + k >= hi ? lo : from + k;
	}
	*hint = from;
	return got >= n;
}

/* room_left reports whether n more fds fit between soft and hard: sure
 * above max_placed, else looked at. */
static int room_left(int soft, int hard, int n)
{
	static int hint;
	int top = __atomic_load_n(&max_placed, __ATOMIC_RELAXED);

	if (top < soft)
		top = soft - 1;
	return hard - 1 - top >= n || free_in(soft, hard, n, &hint);
}

int osf_fdt_fds_free(int n)
{
	static int hint;
	struct rlimit rl;
	int saved = errno, r;

	if (__atomic_load_n(&seen_room, __ATOMIC_RELAXED) < 0) {
		osf_fdt_limit_lock(); /* not a window's raised value */
		if (sys_prlimit(NULL, &rl) == 0)
			note_limit(&rl);
		osf_fdt_limit_unlock();
	}
	r = __atomic_load_n(&seen_room, __ATOMIC_RELAXED);
	if (r < 0 || (r > 0 && room_left(seen_soft, seen_hard, n - 1))) {
		errno = saved;
		return 1; /* room above (or no telling): osf's fds cost none */
	}
	/* Below the limit, or (room above full) anywhere below the hard
	 * one, where a window's receive puts them. */
	r = free_in(0, r > 0 ? seen_hard : seen_soft, n, &hint);
	errno = saved;
	return r;
}

/* OSF_FDT_ROOM_NEED is what a connection may place in the room above:
 * a client's segment, writers' wake socket and port holder, and one
 * more. */
#define OSF_FDT_ROOM_NEED 4

int osf_fdt_affordable(void)
{
	struct rlimit rl;
	int saved = errno, r;

	if (high_mine() && osf_fork.high_open) {
		rl = osf_fork.high_saved;
	} else {
		osf_fdt_limit_lock(); /* not a window's raised value */
		r = sys_prlimit(NULL, &rl);
		osf_fdt_limit_unlock();
		if (r < 0) {
			errno = saved;
			return 1;
		}
	}
	/* With room above it must not be full: the rest would land below
	 * the limit, in the program's budget. */
	r = !tight(&rl) && (!room_above(&rl) ||
			    room_left(lim_int(rl.rlim_cur), lim_int(rl.rlim_max),
				      OSF_FDT_ROOM_NEED));
	errno = saved;
	return r;
}

OSF_FORK_TEXT void osf_fdt_limit_lock(void)
{
	if (high_mine()) {
		/* Nested in this thread. Depth 0: a handler that interrupted
		 * the owner between taking the word and counting itself (or
		 * between uncounting itself and letting go): it counts the
		 * owner too, so its own unlock never lets go of the word. */
		osf_fork.high_depth = osf_fork.high_depth ? osf_fork.high_depth + 1 : 2;
		SIGNAL_FENCE();
		return;
	}
	word_lock(&osf_fork.high_word);
	SIGNAL_FENCE();
	osf_fork.high_depth = 1;
	SIGNAL_FENCE();
}

OSF_FORK_TEXT void osf_fdt_limit_unlock(void)
{
	SIGNAL_FENCE();
	if (--osf_fork.high_depth > 0)
		return;
	SIGNAL_FENCE();
	word_unlock(&osf_fork.high_word);
}

OSF_FORK_TEXT int osf_fdt_high_begin(void)
{
	struct rlimit rl, up;
	int saved = errno;

	osf_fdt_limit_lock();
	if (osf_fork.high_open) /* nested in an open window */
		return osf_fork.high_base;
	if (sys_prlimit(NULL, &rl) < 0) {
		errno = saved;
		return 1024;
	}
	osf_fork.high_saved = rl;
	note_limit(&rl);
	osf_fork.high_raised = 0;
	osf_fork.high_base = base_of(&rl);
	SIGNAL_FENCE();
	osf_fork.high_open = osf_fork.high_depth; /* a handler from now on nests in it */
	SIGNAL_FENCE();
	if (room_above(&rl)) {
		up.rlim_cur = up.rlim_max = rl.rlim_max;
		if (sys_prlimit(&up, NULL) == 0)
			osf_fork.high_raised = 1;
	}
	errno = saved;
	return osf_fork.high_base;
}

OSF_FORK_TEXT void osf_fdt_high_end(void)
{
	int saved = errno;

	if (osf_fork.high_open == osf_fork.high_depth) {
		/* Copies first: a handler that lands once the window is
		 * closed opens its own (at the raised limit: no room
		 * above, nothing to put back) and overwrites them. */
		struct rlimit back = osf_fork.high_saved;
		int raised = osf_fork.high_raised;
		SIGNAL_FENCE();
		osf_fork.high_open = 0;
		SIGNAL_FENCE();
		if (raised)
			(void)sys_prlimit(&back, NULL);
		osf_fork.high_raised = 0;
	}
	osf_fdt_limit_unlock();
	errno = saved;
}

int osf_fdt_dup_high(int fd, int cloexec)
{
	int cmd = cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, nfd, err;

	nfd = sys_fcntl(fd, cmd, osf_fdt_high_begin());
	err = errno;
	if (nfd > __atomic_load_n(&max_placed, __ATOMIC_RELAXED))
		__atomic_store_n(&max_placed, nfd, __ATOMIC_RELAXED);
	osf_fdt_high_end();
	if (nfd < 0 && err == EINVAL) /* base above a limit lowered meanwhile */
		return sys_fcntl(fd, cmd, 3);
	errno = err;
	return nfd;
}

OSF_FORK_TEXT static uint64_t ino_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

OSF_FORK_TEXT static int grow_to(off_t size)
{
	if (size <= tsize)
		return 0;
	if (ftruncate(tfd, size) < 0)
		return -1;
	tsize = size;
	return 0;
}

/* The table's addresses: the header and the chunks of fds below
 * NEAR_CHUNKS * 1024 (past the highest hidden base, OSF_FDT_HIGH_MAX) sit
 * at their file offsets in one reserved range (tbase), so that the kernel
 * keeps them as one mapping and a fork child moves to its copy with one
 * mmap; chunks above it are mapped one by one, as is everything when the
 * reservation failed (tbase NULL). The reservation is address space only
 * (PROT_NONE, no memory): 9 MiB. */
#define NEAR_CHUNKS 72u
#define NEAR_BYTES (OSF_FDT_HDR_BYTES + (size_t)NEAR_CHUNKS * OSF_FDT_CHUNK_BYTES)
static char *tbase;

static void reserve(void)
{
	void *p;

	if (tbase)
		return;
	p = mmap(NULL, NEAR_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	tbase = p == MAP_FAILED ? NULL : p;
}

/* map_at maps len bytes of the table file fd at off, at want (MAP_FIXED)
 * or anywhere (want NULL); NULL on failure. */
static void *map_at(void *want, size_t len, int fd, off_t off)
{
	void *p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_SHARED | (want ? MAP_FIXED : 0),
		       fd, off);

	return p == MAP_FAILED ? NULL : p;
}

static void *map_hdr(int fd) { return map_at(tbase, OSF_FDT_HDR_BYTES, fd, 0); }

OSF_FORK_TEXT static struct osf_fdt_entry *map_chunk(int fd, unsigned i)
{
	off_t off = OSF_FDT_HDR_BYTES + (off_t)i * OSF_FDT_CHUNK_BYTES;

	return map_at(tbase && i < NEAR_CHUNKS ? tbase + off : NULL, OSF_FDT_CHUNK_BYTES, fd, off);
}

/* chunk_create maps chunk i; the lock is held. */
OSF_FORK_TEXT static struct osf_fdt_entry *chunk_create(unsigned i)
{
	struct osf_fdt_entry *c = osf_fdt_chunks[i];

	if (c)
		return c;
	if (grow_to(OSF_FDT_HDR_BYTES + (off_t)(i + 1) * OSF_FDT_CHUNK_BYTES) <
	    0)
		return NULL;
	c = map_chunk(tfd, i);
	if (!c)
		return NULL;
	hdr->chunk_present[i] = 1;
	__atomic_store_n(&osf_fdt_chunks[i], c, __ATOMIC_RELEASE);
	return c;
}

/* mark_page records that fd's entry is about to be written (fdt.h,
 * osf_fdt_pages): before the write, so that a walk that finds the page
 * unused has seen it all zero. */
OSF_FORK_TEXT static void mark_page(unsigned fd)
{
	uint32_t *w = &osf_fdt_pages[fd >> OSF_FDT_CHUNK_SHIFT];
	uint32_t bit = 1u << ((fd & (OSF_FDT_CHUNK_ENTRIES - 1)) >> OSF_FDT_PAGE_SHIFT);

	if (!(__atomic_load_n(w, __ATOMIC_RELAXED) & bit))
		__atomic_or_fetch(w, bit, __ATOMIC_SEQ_CST);
}

OSF_FORK_TEXT static struct osf_fdt_entry *entry_locked(int fd)
{
	struct osf_fdt_entry *c = chunk_create((unsigned)fd >> OSF_FDT_CHUNK_SHIFT);

	if (!c)
		return NULL;
	mark_page((unsigned)fd);
	return c + ((unsigned)fd & (OSF_FDT_CHUNK_ENTRIES - 1));
}

/* hidden_entry fills e as the entry of a hidden fd for owner, with inode
 * ino, the kind last. */
OSF_FORK_TEXT static void hidden_entry(struct osf_fdt_entry *e, int owner, uint64_t ino)
{
	memset(e, 0, sizeof(*e));
	e->aux_fd = -1;
	e->owner_fd = owner;
	e->ino = ino;
	e->rule = -1;
	__atomic_store_n(&e->kind, OSF_FD_HIDDEN, __ATOMIC_RELEASE);
}

/* set_hidden_locked records fd as hidden for owner, with its inode ino
 * (0: look it up); the lock is held. */
OSF_FORK_TEXT static void set_hidden_locked(int fd, int owner, uint64_t ino)
{
	struct osf_fdt_entry *e = entry_locked(fd);

	if (!e)
		return;
	hidden_entry(e, owner, ino ? ino : ino_of(fd));
}

static void header_init(struct osf_fdt_header *h)
{
	h->version = OSF_FDT_VERSION;
	h->entry_bytes = OSF_FDT_ENTRY_BYTES;
	h->chunk_entries = OSF_FDT_CHUNK_ENTRIES;
	h->nchunks_max = OSF_FDT_MAX_CHUNKS;
	h->pid = getpid();
	h->image = osf_fdt_cur_image;
	__atomic_store_n(&h->magic, OSF_FDT_MAGIC, __ATOMIC_RELEASE);
}

/* table_create makes the memfd, maps the header and records the table's
 * own fd as hidden; the lock is held. */
static int table_create(void)
{
	int fd, hfd;
	void *h;

	fd = memfd_create(OSF_FDT_NAME, MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	hfd = osf_fdt_dup_high(fd, 1);
	if (hfd < 0)
		hfd = fd;
	else
		sys_close(fd);
	(void)fchmod(hfd, 0600);
	reserve();
	{
		/* Written whole, so that a reader (osfstat) that sees the
		 * table sized also sees its magic: a table sized first and
		 * filled in after looked like an unknown layout meanwhile. */
		static union {
			struct osf_fdt_header h;
			char page[OSF_FDT_HDR_BYTES];
		} first;
		memset(&first, 0, sizeof(first));
		header_init(&first.h);
		if (syscall(SYS_pwrite64, hfd, &first, sizeof(first), 0) !=
		    (long)sizeof(first))
			goto fail;
	}
	h = map_hdr(hfd);
	if (!h)
		goto fail;
	tfd = hfd;
	tsize = OSF_FDT_HDR_BYTES;
	hdr = h;
	set_hidden_locked(tfd, -1, 0);
	return 0;
fail:
	sys_close(hfd);
	return -1;
}

struct osf_fdt_entry *osf_fdt_get(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (e) {
		mark_page((unsigned)fd);
		return e;
	}
	if (fd < 0 || (unsigned)fd >= OSF_FDT_MAX_FDS) {
		errno = EBADF;
		return NULL;
	}
	if (held_by_me()) {
		errno = EDEADLK;
		return NULL;
	}
	osf_fdt_lock();
	if (!hdr && table_create() < 0)
		e = NULL;
	else
		e = entry_locked(fd);
	osf_fdt_unlock();
	return e;
}

void osf_fdt_touch(void)
{
	if (hdr)
		__atomic_add_fetch(&hdr->generation, 1, __ATOMIC_RELEASE);
}

/* accounted: entries whose hidden fds may cross exec: offloaded fds, and
 * epoll fds (their registrations' record, selectmux). */
static int accounted(int kind)
{
	return osf_kind_is_offloaded(kind) || kind == OSF_FD_EPOLL;
}

/* has_aux2: the entry's aux2_fd is a hidden fd of its own that crosses
 * exec with it: a connection's writers' wake socket or an epoll fd's
 * registrations record (a gateway listener's control connection,
 * osf_fdt_has_aux2, is close-on-exec: recount). */
static int has_aux2(const struct osf_fdt_entry *e)
{
	return osf_kind_is_conn(e->kind) || (e->kind == OSF_FD_EPOLL && e->aux2_fd >= 0);
}

/* inheritable: an offloaded fd (listener or connection), or an epoll fd
 * with a record of its registrations, that crosses exec. */
static int inheritable(const struct osf_fdt_entry *e)
{
	return (osf_kind_is_offloaded(e->kind) ||
		(e->kind == OSF_FD_EPOLL && e->aux2_fd >= 0)) &&
	       !(e->flags & OSF_FDF_CLOEXEC);
}

/* account_aux adds delta to the inheriting users of hidden fd afd: it is
 * inheritable while it has any. The lock is held. */
static void account_aux(int afd, int delta)
{
	struct osf_fdt_entry *a;

	if (afd < 0 || !(a = osf_fdt_lookup(afd)) || a->kind != OSF_FD_HIDDEN)
		return;
	a->inherit_refs += (uint32_t)delta;
	if (a->inherit_refs == 0 || (delta > 0 && a->inherit_refs == 1))
		sys_fcntl(afd, F_SETFD, a->inherit_refs ? 0 : FD_CLOEXEC);
}

/* account adds (delta 1) or removes (-1) entry e's share in what must
 * cross exec: its hidden fds, and the table. The lock is held. */
static void account(const struct osf_fdt_entry *e, int delta)
{
	if (osf_kind_is_offloaded(e->kind))
		offload_count += delta;
	if (!inheritable(e))
		return;
	inherit_count += delta;
	if (hdr && (inherit_count == 0 || (delta > 0 && inherit_count == 1)))
		sys_fcntl(tfd, F_SETFD, inherit_count ? 0 : FD_CLOEXEC);
	account_aux(e->aux_fd, delta);
	if (has_aux2(e))
		account_aux(e->aux2_fd, delta);
}

int osf_fdt_set(int fd, const struct osf_fdt_entry *src)
{
	struct osf_fdt_entry *e = osf_fdt_get(fd);
	int mine;

	if (!e)
		return -1;
	mine = !held_by_me() && (accounted(e->kind) || accounted(src->kind));
	if (mine) {
		osf_fdt_lock();
		account(e, -1);
	}
	__atomic_store_n(&e->kind, OSF_FD_NONE, __ATOMIC_RELEASE);
	memcpy((char *)e + 1, (const char *)src + 1, sizeof(*e) - 1);
	__atomic_store_n(&e->kind, src->kind, __ATOMIC_RELEASE);
	if (mine) {
		account(e, 1);
		osf_fdt_unlock();
	}
	osf_fdt_touch();
	return 0;
}

OSF_FORK_TEXT void osf_fdt_clear(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int mine;

	if (!e || e->kind == OSF_FD_NONE)
		return;
	mine = accounted(e->kind) && !held_by_me();
	if (mine) {
		osf_fdt_lock();
		account(e, -1);
	}
	__atomic_store_n(&e->kind, OSF_FD_NONE, __ATOMIC_RELEASE);
	memset((char *)e + 1, 0, sizeof(*e) - 1);
	if (mine)
		osf_fdt_unlock();
	osf_fdt_touch();
}

void osf_fdt_set_cloexec(int fd, int on)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (!e || e->kind == OSF_FD_NONE || held_by_me())
		return;
	osf_fdt_lock();
	account(e, -1);
	if (on)
		e->flags |= OSF_FDF_CLOEXEC;
	else
		e->flags &= ~OSF_FDF_CLOEXEC;
	account(e, 1);
	osf_fdt_unlock();
	osf_fdt_touch();
}

int osf_fdt_inheritable(void)
{
	return __atomic_load_n(&inherit_count, __ATOMIC_RELAXED) > 0;
}

int osf_fdt_offloaded(void)
{
	return __atomic_load_n(&offload_count, __ATOMIC_RELAXED) > 0;
}

int osf_fdt_spawn_snapshot(void)
{
	int snap, hfd;

	if (!hdr || held_by_me())
		return -1;
	osf_fdt_lock();
	snap = snapshot();
	osf_fdt_unlock();
	if (snap < 0)
		return -1;
	hfd = osf_fdt_dup_high(snap, 0);
	sys_close(snap);
	return hfd; /* inheritable: the spawned image takes it */
}

void osf_fdt_spawn_inherit(int on)
{
	struct osf_fdt_entry *c;
	int efd;

	if (!hdr || held_by_me())
		return;
	osf_fdt_lock();
	OSF_FDT_FOREACH(efd, c) {
		if (c->kind == OSF_FD_HIDDEN && efd != tfd)
			sys_fcntl(efd, F_SETFD,
				  on || c->inherit_refs ? 0 : FD_CLOEXEC);
	}
	/* The spawned image gets a snapshot (osf_fdt_spawn_snapshot), not
	 * this table, which its parent goes on changing. */
	sys_fcntl(tfd, F_SETFD, !on && inherit_count ? 0 : FD_CLOEXEC);
	osf_fdt_unlock();
}

/* mark_hidden records nfd, already in the hidden range, as hidden for
 * owner (ino: its inode, 0 to look it up): 0, or -1 (nfd left open). */
static int mark_hidden(int nfd, int owner, uint64_t ino)
{
	struct osf_fdt_entry *e;

	if (held_by_me()) {
		errno = EDEADLK;
		return -1;
	}
	osf_fdt_lock();
	if (!hdr && table_create() < 0) {
		osf_fdt_unlock();
		return -1;
	}
	e = entry_locked(nfd);
	if (e)
		set_hidden_locked(nfd, owner, ino);
	osf_fdt_unlock();
	return e ? 0 : -1;
}

/* hide is osf_fdt_hide, and osf_fdt_hide_placed with trusted set: an fd
 * osf placed in the hidden range and marked (a spare segment's,
 * preload/setup_spare.c) stays there, now for owner, when it is still the
 * file the entry records: trusted takes the entry's word for it, else one
 * fstat tells. */
static int hide(int fd, int owner, int trusted)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	uint64_t ino = e && e->kind == OSF_FD_HIDDEN ? e->ino : 0;
	int nfd;

	if (ino && (trusted || ino_of(fd) == ino) && mark_hidden(fd, owner, ino) == 0) {
		osf_fdt_touch();
		return fd;
	}
	nfd = osf_fdt_dup_high(fd, 1);
	if (nfd < 0)
		return -1;
	if (mark_hidden(nfd, owner, 0) < 0) {
		int e = errno;
		sys_close(nfd);
		errno = e;
		return -1;
	}
	sys_close(fd);
	osf_fdt_touch();
	return nfd;
}

int osf_fdt_hide(int fd, int owner)
{
	return hide(fd, owner, 0);
}

int osf_fdt_hide_placed(int fd, int owner)
{
	return hide(fd, owner, 1);
}

int osf_fdt_keep_hidden(int hfd, int owner)
{
	if (mark_hidden(hfd, owner, 0) < 0) {
		int e = errno;
		sys_close(hfd);
		errno = e;
		return -1;
	}
	osf_fdt_touch();
	return hfd;
}

void osf_fdt_mark_hidden(int fd)
{
	if (held_by_me())
		return;
	osf_fdt_lock();
	if (hdr || table_create() == 0)
		set_hidden_locked(fd, -1, 0);
	osf_fdt_unlock();
	osf_fdt_touch();
}

void osf_fdt_reserve_low(int limit, uint64_t bits[OSF_FDT_RESERVE_MAX / 64])
{
	int ph, fd;

	__atomic_add_fetch(&reserving, 1, __ATOMIC_SEQ_CST);
	memset(bits, 0, OSF_FDT_RESERVE_MAX / 8);
	if (limit > (int)OSF_FDT_RESERVE_MAX)
		limit = OSF_FDT_RESERVE_MAX;
	if (osf_fdt_ensure() < 0)
		return;
	ph = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (ph < 0)
		return;
	for (fd = ph; fd >= 0 && fd < limit;
	     fd = sys_fcntl(ph, F_DUPFD_CLOEXEC, 0)) {
		struct osf_fdt_entry e;
		memset(&e, 0, sizeof(e));
		e.kind = OSF_FD_RESERVED;
		e.aux_fd = e.owner_fd = -1;
		e.rule = -1;
		if (osf_fdt_set(fd, &e) < 0) {
			sys_close(fd);
			break;
		}
		bits[fd / 64] |= 1ULL << (fd % 64);
	}
	if (fd >= limit)
		sys_close(fd);
}

void osf_fdt_release_low(int limit, const uint64_t bits[OSF_FDT_RESERVE_MAX / 64])
{
	int fd;

	if (limit > (int)OSF_FDT_RESERVE_MAX)
		limit = OSF_FDT_RESERVE_MAX;
	for (fd = 0; fd < limit; fd++) {
		struct osf_fdt_entry *e;
		if (!(bits[fd / 64] & (1ULL << (fd % 64))))
			continue;
		e = osf_fdt_lookup(fd);
		if (!e || !__atomic_compare_exchange_n(&e->kind, &(uint8_t){OSF_FD_RESERVED},
						       OSF_FD_NONE, 0, __ATOMIC_ACQ_REL,
						       __ATOMIC_RELAXED))
			continue; /* the program claimed it */
		sys_close(fd);
	}
	__atomic_sub_fetch(&reserving, 1, __ATOMIC_SEQ_CST);
	osf_fdt_touch();
}

OSF_FORK_TEXT void osf_fdt_close_hidden(int hfd)
{
	if (hfd < 0)
		return;
	osf_fdt_clear(hfd);
	sys_close(hfd);
}

int osf_fdt_is_hidden(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int saved = errno;

	if (e && e->kind == OSF_FD_RESERVED)
		return 1;
	if (!e || e->kind != OSF_FD_HIDDEN)
		return 0;
	if (ino_of(fd) != e->ino) { /* closed behind our back, reused */
		osf_fdt_clear(fd);
		errno = saved;
		return 0;
	}
	errno = saved;
	return 1;
}

int osf_fdt_relocate_hidden(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd), *c;
	int fdflags, nfd, cfd;

	if (!e || e->kind != OSF_FD_HIDDEN)
		return 0;
	/* The Go runtime's own fds (and its log fd) are known to it by
	 * number only: they cannot move (core.c, mark_runtime_fds). */
	if (e->owner_fd < 0 && fd != tfd)
		return OSF_FAIL_EBUSY();
	fdflags = sys_fcntl(fd, F_GETFD, 0);
	if (fdflags < 0)
		return -1;
	nfd = osf_fdt_high_begin();
	nfd = sys_fcntl(fd, (fdflags & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD,
			nfd > fd ? nfd : fd + 1);
	osf_fdt_high_end();
	if (nfd < 0)
		return -1;
	if (osf_fdt_set(nfd, e) < 0) {
		sys_close(nfd);
		return -1;
	}
	if (fd == tfd)
		tfd = nfd;
	/* Every entry that names it (its owner and the owner's dups). */
	OSF_FDT_FOREACH(cfd, c) {
		int k = c->kind;
		if (k == OSF_FD_NONE || k == OSF_FD_HIDDEN ||
		    k == OSF_FD_RESERVED)
			continue;
		if (c->aux_fd == fd)
			c->aux_fd = nfd;
		if ((has_aux2(c) || osf_fdt_has_aux2(c)) && c->aux2_fd == fd)
			c->aux2_fd = nfd;
	}
	osf_fdt_clear(fd);
	osf_fdt_touch();
	return nfd;
}

int osf_fdt_next_hidden(int from)
{
	struct osf_fdt_entry *c;
	int fd = from < 0 ? 0 : from;

	for (; (c = osf_fdt_next(&fd)) != NULL; fd++)
		if (c->kind == OSF_FD_HIDDEN || c->kind == OSF_FD_RESERVED)
			return fd;
	return -1;
}

int osf_fdt_table_fd(void) { return hdr ? tfd : -1; }

int osf_fdt_ensure(void)
{
	int r = 0;

	if (hdr)
		return 0;
	if (held_by_me())
		return OSF_FDT_EDEADLK();
	osf_fdt_lock();
	if (!hdr)
		r = table_create();
	osf_fdt_unlock();
	return r;
}

void osf_fdt_core_loaded(void)
{
	if (osf_fdt_ensure() < 0)
		return;
	__atomic_add_fetch(&hdr->core_loads, 1, __ATOMIC_RELAXED);
	osf_fdt_set_header_flag(OSF_FDTH_CORE_LOADED, 1);
}

void osf_fdt_set_header_flag(uint32_t flag, int on)
{
	if (!hdr)
		return;
	if (on)
		__atomic_or_fetch(&hdr->flags, flag, __ATOMIC_RELEASE);
	else
		__atomic_and_fetch(&hdr->flags, ~flag, __ATOMIC_RELEASE);
	osf_fdt_touch();
}

void osf_fdt_set_image(uint64_t image)
{
	osf_fdt_cur_image = image;
	if (hdr)
		hdr->image = image;
}

/* A snapshot is written with pwritev: runs of the file that are
 * contiguous go in one call, SNAP_IOV pieces at most. */
#define SNAP_IOV 64

struct snap_writer {
	int fd;
	int n;
	off_t start, end; /* the file range the pending pieces cover */
	struct iovec iov[SNAP_IOV];
};

OSF_FORK_TEXT static int snap_flush(struct snap_writer *w)
{
	ssize_t want = (ssize_t)(w->end - w->start);

	if (w->n && syscall(SYS_pwritev, w->fd, w->iov, w->n, (long)w->start, 0L) != want)
		return -1;
	w->n = 0;
	return 0;
}

/* snap_put queues len bytes at p for file offset off. */
OSF_FORK_TEXT static int snap_put(struct snap_writer *w, const void *p, size_t len, off_t off)
{
	if (!len)
		return 0;
	if (w->n && (off != w->end || w->n == SNAP_IOV) && snap_flush(w) < 0)
		return -1;
	if (!w->n)
		w->start = w->end = off;
	w->iov[w->n].iov_base = (void *)p;
	w->iov[w->n].iov_len = len;
	w->n++;
	w->end += (off_t)len;
	return 0;
}

/* The fork page (osf_fork_at, fdt.h): the fork words, then what the
 * parent's snapshot writes at every fork, so that a fork writes nothing
 * on a page an earlier fork write-protected (the snapshot's pieces on the
 * stack reached a page below the program's usual depth). */
#define FORK_SET 256
struct fork_page {
	struct osf_fork_words words;
	struct snap_writer w;
	/* The copy's header up to chunk_present, as its new owner will
	 * have it, and the copy's entry for the table fd. */
	unsigned char head[offsetof(struct osf_fdt_header, chunk_present)];
	struct osf_fdt_entry table_entry;
	uintptr_t set[FORK_SET]; /* osf_fdt_fork_set */
};
_Static_assert(sizeof(struct fork_page) <= 4096, "the fork page is one page");
static union {
	struct fork_page p;
	char page[4096];
} fork_page_static __attribute__((aligned(4096)));
struct osf_fork_words *osf_fork_at = &fork_page_static.p.words;
int osf_fork_wiped;
#define FORK_PAGE ((struct fork_page *)osf_fork_at)

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

OSF_FORK_TEXT uintptr_t *osf_fdt_fork_set(unsigned *cap)
{
	*cap = FORK_SET;
	return FORK_PAGE->set;
}

void osf_fdt_words_init(void)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return;
	if (madvise(p, 4096, MADV_WIPEONFORK) < 0) {
		munmap(p, 4096);
		return;
	}
	memcpy(p, osf_fork_at, sizeof(struct osf_fork_words));
	__atomic_store_n(&osf_fork_at, (struct osf_fork_words *)p, __ATOMIC_RELEASE);
	osf_fork_wiped = 1;
}

/* snapshot copies the table into a new memfd (close-on-exec) and returns
 * it, or -1. The copy is written as the process that receives it (a fork
 * child, or this image adopting another process's table) will have it,
 * so that it writes only its pid there: no owner yet (pid 0: adopted in
 * place), this image's id, no core loaded, and the table fd's entry
 * naming the copy's inode. Only the header and the pages in use
 * (osf_fdt_pages) are written, straight from the table into the new file:
 * the rest of the file is a hole, which reads as zero and holds no
 * memory. The lock is held. */
OSF_FORK_TEXT static int snapshot(void)
{
	struct fork_page *fp = FORK_PAGE;
	struct osf_fdt_header *h = (struct osf_fdt_header *)fp->head;
	struct snap_writer *w = &fp->w;
	const size_t head = sizeof(fp->head);
	const unsigned tchunk = (unsigned)tfd >> OSF_FDT_CHUNK_SHIFT;
	const size_t tpage = ((unsigned)tfd & (OSF_FDT_CHUNK_ENTRIES - 1)) / OSF_FDT_PAGE_ENTRIES;
	const size_t tat = ((unsigned)tfd & (OSF_FDT_PAGE_ENTRIES - 1)) * OSF_FDT_ENTRY_BYTES;
	unsigned i;

	w->n = 0;
	w->fd = memfd_create(OSF_FDT_NAME, MFD_CLOEXEC);
	if (w->fd < 0)
		return -1;
	(void)fchmod(w->fd, 0600);
	memcpy(h, hdr, head);
	h->pid = 0;
	h->image = osf_fdt_cur_image;
	h->flags &= ~OSF_FDTH_CORE_LOADED;
	h->core_loads = 0;
	hidden_entry(&fp->table_entry, -1, ino_of(w->fd));
	if (ftruncate(w->fd, tsize) < 0 || snap_put(w, h, head, 0) < 0 ||
	    snap_put(w, (const char *)hdr + head, OSF_FDT_HDR_BYTES - head, (off_t)head) < 0)
		goto fail;
	for (i = 0; i < OSF_FDT_MAX_CHUNKS; i++) {
		uint32_t pages = __atomic_load_n(&osf_fdt_pages[i], __ATOMIC_ACQUIRE);
		off_t at = OSF_FDT_HDR_BYTES + (off_t)i * OSF_FDT_CHUNK_BYTES;
		const char *c = (const char *)osf_fdt_chunks[i];
		unsigned p;
		if (!c)
			continue;
		for (p = 0; pages; p++, pages >>= 1) {
			const char *pg = c + (size_t)p * 4096;
			off_t o = at + (off_t)p * 4096;
			if (!(pages & 1))
				continue;
			if (i != tchunk || p != tpage) {
				if (snap_put(w, pg, 4096, o) < 0)
					goto fail;
			} else if (snap_put(w, pg, tat, o) < 0 ||
				   snap_put(w, &fp->table_entry, OSF_FDT_ENTRY_BYTES,
					    o + (off_t)tat) < 0 ||
				   snap_put(w, pg + tat + OSF_FDT_ENTRY_BYTES,
					    4096 - tat - OSF_FDT_ENTRY_BYTES,
					    o + (off_t)(tat + OSF_FDT_ENTRY_BYTES)) < 0) {
				goto fail;
			}
		}
	}
	if (snap_flush(w) < 0)
		goto fail;
	return w->fd;
fail:
	sys_close(w->fd);
	return -1;
}

/* remap maps the table file nfd's range (len bytes at off) over the
 * mapping at old, in place, so that lock-free readers holding old see the
 * one table or the other, never a hole; 0, or -1 with the old mapping put
 * back as it was (MAP_FIXED may unmap before it fails). */
OSF_FORK_TEXT static int remap(void *old, size_t len, int nfd, off_t off)
{
	if (osf_rawsys(SYS_mmap, (long)old, (long)len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_FIXED, nfd, (long)off) == (long)old)
		return 0;
	(void)mmap(old, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, tfd, off);
	return -1;
}

/* switch_to makes the copy in nfd (made by snapshot) this process's
 * table, at the table's fd number and at the same addresses; nfd is
 * consumed. */
OSF_FORK_TEXT static int switch_to(int nfd)
{
	int fdflags, me;
	unsigned i, near = 0;

	/* On failure what is switched stays switched (the copy equals the
	 * table) and the rest stays shared: the caller copies again. */
	if ((char *)hdr == tbase) {
		/* The header and the near chunks in one go: up to the last
		 * near chunk present (those absent in between are mapped
		 * too, unpublished, and mapped again if ever created). */
		for (i = 0; i < NEAR_CHUNKS; i++)
			if (osf_fdt_chunks[i])
				near = i + 1;
		if (remap(tbase, OSF_FDT_HDR_BYTES + (size_t)near * OSF_FDT_CHUNK_BYTES, nfd, 0) < 0)
			goto fail;
	} else if (remap(hdr, OSF_FDT_HDR_BYTES, nfd, 0) < 0) {
		goto fail;
	}
	for (i = near; i < OSF_FDT_MAX_CHUNKS; i++) {
		struct osf_fdt_entry *oc = osf_fdt_chunks[i];
		if (oc && remap(oc, OSF_FDT_CHUNK_BYTES, nfd,
				OSF_FDT_HDR_BYTES + (off_t)i * OSF_FDT_CHUNK_BYTES) < 0)
			goto fail;
	}
	/* The copy says all but the owner (snapshot); its first access a
	 * read, so that the kernel maps the pages around it at once. */
	me = getpid();
	if (hdr->pid != me)
		hdr->pid = me;
	fdflags = sys_fcntl(tfd, F_GETFD, 0);
	fdflags = (fdflags > 0 && (fdflags & FD_CLOEXEC)) ? O_CLOEXEC : 0;
	/* tfd lies below the program's limit unless the program lowered it
	 * since: only then (EBADF) is the fd window worth its system calls
	 * (and, in a fork child, the page faults of their code). */
	if (sys_dup3(nfd, tfd, fdflags) < 0) {
		int saved = errno, r = -1;

		if (saved == EBADF) {
			osf_fdt_high_begin();
			r = sys_dup3(nfd, tfd, fdflags);
			osf_fdt_high_end();
		}
		errno = saved;
		if (r < 0)
			goto fail;
	}
	sys_close(nfd);
	/* snapshot wrote the table fd's entry if its page was in use (read
	 * here in this process's own copy of osf_fdt_pages: no fault). */
	if (!osf_fdt_chunks[(unsigned)tfd >> OSF_FDT_CHUNK_SHIFT] ||
	    !(osf_fdt_pages[(unsigned)tfd >> OSF_FDT_CHUNK_SHIFT] &
	      (1u << (((unsigned)tfd & (OSF_FDT_CHUNK_ENTRIES - 1)) >> OSF_FDT_PAGE_SHIFT))))
		set_hidden_locked(tfd, -1, 0);
	return 0;
fail:
	sys_close(nfd);
	return -1;
}

/* copy_private gives this process its own copy of the table it shares
 * (an exec'd image that inherited another process's table). */
static int copy_private(void)
{
	int nfd = snapshot();

	return nfd < 0 ? -1 : switch_to(nfd);
}

OSF_FORK_TEXT int osf_fdt_fork_prepare(void)
{
	return hdr ? snapshot() : -1;
}

OSF_FORK_TEXT void osf_fdt_fork_parent(int prepared)
{
	if (prepared >= 0)
		sys_close(prepared);
}

OSF_FORK_TEXT void osf_fdt_child_after_fork(int prepared)
{
	struct osf_fdt_entry *e;
	int fd;

	tls_tid = 0; /* this thread has a new id in the child */
	if (!osf_fork_wiped) { /* else fork gave the child them all zero (fdt.h) */
		osf_fork.pid = 0;
		osf_fork.lock_word = 0;
		osf_fork.high_word = osf_fork.high_depth = osf_fork.high_raised = osf_fork.high_open = 0; /* fork held it, not raised */
	}
	if (!hdr)
		return;
	/* The snapshot was taken before fork: the parent may already be
	 * changing the table we shared a moment ago. */
	if (prepared < 0 || switch_to(prepared) < 0)
		(void)copy_private();
	/* Placeholders of a core start under way in the parent are not ours
	 * (no start is under way here). */
	if (!reserving)
		return;
	reserving = 0;
	OSF_FDT_FOREACH(fd, e) {
		if (fd >= (int)OSF_FDT_RESERVE_MAX)
			break;
		if (e->kind == OSF_FD_RESERVED) {
			osf_fdt_clear(fd);
			sys_close(fd);
		}
	}
}

/* entry_survived reports whether an inherited entry still describes the
 * same open file after exec. */
static int entry_survived(int fd, const struct osf_fdt_entry *e)
{
	struct stat st;

	if (e->kind == OSF_FD_EPOLL) { /* epoll fds share one inode */
		char p[40], l[32];
		ssize_t n;
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		n = readlink(p, l, sizeof(l) - 1);
		if (n < 0)
			return 0;
		l[n] = 0;
		return strcmp(l, "anon_inode:[eventpoll]") == 0;
	}
	if (fstat(fd, &st) < 0)
		return 0;
	if (e->ino)
		return (uint64_t)st.st_ino == e->ino;
	return S_ISSOCK(st.st_mode);
}

#define ADOPT_SCAN 1024 /* fds looked at for moved connections */

/* remap_moved finds offloaded sockets that exec's file actions moved to
 * other fd numbers (posix_spawn dup2s them without passing through osf's
 * hooks), by their inode, and gives them their entries. The lock is held. */
static void remap_moved(void)
{
	struct osf_fdt_entry *c;
	int fd, cfd, hi = 64;

	OSF_FDT_FOREACH(cfd, c)
		if (osf_kind_is_offloaded(c->kind) && cfd + 1 > hi)
			hi = cfd + 1;
	if (hi > ADOPT_SCAN)
		hi = ADOPT_SCAN;
	for (fd = 0; fd < hi; fd++) {
		struct osf_fdt_entry *at = osf_fdt_lookup(fd), *src = NULL;
		struct stat st;
		if (fd == tfd || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
			continue;
		if (at && osf_kind_is_offloaded(at->kind) && at->ino == (uint64_t)st.st_ino)
			continue;
		OSF_FDT_FOREACH(cfd, c)
			if (osf_kind_is_offloaded(c->kind) && c->ino == (uint64_t)st.st_ino) {
				src = c;
				break;
			}
		if (src && (at = entry_locked(fd)) != NULL) {
			*at = *src;
			at->image = 0; /* rebuilt on first use */
			at->priv = 0;
		}
	}
}

/* mark_in_use marks hidden fd afd as used by a surviving entry. */
static void mark_in_use(int afd)
{
	struct osf_fdt_entry *a = afd >= 0 ? osf_fdt_lookup(afd) : NULL;

	if (a && a->kind == OSF_FD_HIDDEN)
		a->owner_fd = -2; /* in use */
}

/* recount rebuilds the inheritance accounting after adoption and closes
 * hidden fds that no surviving entry uses. The lock is held. */
static void recount(void)
{
	struct osf_fdt_entry *c;
	int efd;

	inherit_count = offload_count = 0;
	OSF_FDT_FOREACH(efd, c)
		if (c->kind == OSF_FD_HIDDEN)
			c->inherit_refs = 0;
	OSF_FDT_FOREACH(efd, c) {
		if (accounted(c->kind))
			mark_in_use(c->aux_fd);
		if (has_aux2(c))
			mark_in_use(c->aux2_fd);
		else if (osf_fdt_has_aux2(c)) {
			/* A gateway listener's control connection does not
			 * cross exec (close-on-exec): a node-local listener. */
			struct osf_fdt_entry *a = c->aux2_fd >= 0 ? osf_fdt_lookup(c->aux2_fd) : NULL;
			if (a && a->kind == OSF_FD_HIDDEN && sys_fcntl(c->aux2_fd, F_GETFD, 0) >= 0) {
				mark_in_use(c->aux2_fd);
			} else {
				c->transport = OSF_TP_SHM;
				c->aux2_fd = -1;
			}
		}
		account(c, 1);
	}
	OSF_FDT_FOREACH(efd, c) {
		if (c->kind != OSF_FD_HIDDEN || efd == tfd)
			continue;
		if (c->owner_fd == -2) {
			c->owner_fd = -1;
			continue;
		}
		memset(c, 0, sizeof(*c));
		sys_close(efd); /* its owners did not cross the exec */
	}
	sys_fcntl(tfd, F_SETFD, inherit_count ? 0 : FD_CLOEXEC);
}

/* recount_pages keeps, of an adopted table, the pages in use that hold
 * anything (osf_fdt_pages): its forks copy only those. The lock is held. */
static void recount_pages(void)
{
	unsigned i, p, k;

	for (i = 0; i < OSF_FDT_MAX_CHUNKS; i++) {
		const uint64_t *c = (const uint64_t *)osf_fdt_chunks[i];
		uint32_t used = 0;
		if (!c)
			continue;
		for (p = 0; p < 32; p++)
			for (k = p * 512; k < (p + 1) * 512; k++)
				if (c[k]) {
					used |= 1u << p;
					break;
				}
		__atomic_store_n(&osf_fdt_pages[i], used, __ATOMIC_RELEASE);
	}
}

/* copy_in copies the inherited table file fd (size bytes, header first)
 * into a new memfd of this process's own and returns it, or -1. It reads
 * the file, never maps it: the process that handed it on, or any process
 * that process gave it to, may write or truncate it meanwhile, and a
 * mapping would let it change what this process has validated. Only the
 * pages of chunks the header lists, within size, that hold anything are
 * written (the rest of the copy is a hole). */
static int copy_in(int fd, off_t size, const void *first)
{
	static char page[4096]; /* the constructor's, single-threaded */
	int nfd = memfd_create(OSF_FDT_NAME, MFD_CLOEXEC);
	const struct osf_fdt_header *h = first;
	unsigned i, p;

	if (nfd < 0)
		return -1;
	(void)fchmod(nfd, 0600);
	if (ftruncate(nfd, size) < 0 ||
	    pwrite(nfd, first, OSF_FDT_HDR_BYTES, 0) != (ssize_t)OSF_FDT_HDR_BYTES)
		goto fail;
	for (i = 0; i < OSF_FDT_MAX_CHUNKS; i++) {
		off_t at = OSF_FDT_HDR_BYTES + (off_t)i * OSF_FDT_CHUNK_BYTES;
		if (!h->chunk_present[i] || at + (off_t)OSF_FDT_CHUNK_BYTES > size)
			continue;
		for (p = 0; p < OSF_FDT_CHUNK_BYTES / 4096; p++) {
			off_t o = at + (off_t)p * 4096;
			ssize_t n = pread(fd, page, sizeof(page), o);
			size_t k;
			if (n <= 0)
				break; /* truncated meanwhile: the rest stays zero */
			memset(page + n, 0, sizeof(page) - (size_t)n);
			for (k = 0; k < sizeof(page) && !page[k]; k++)
				;
			if (k < sizeof(page) &&
			    pwrite(nfd, page, sizeof(page), o) != (ssize_t)sizeof(page))
				goto fail;
		}
	}
	return nfd;
fail:
	sys_close(nfd);
	return -1;
}

int osf_fdt_adopt(int fd, uint64_t image)
{
	static union {
		struct osf_fdt_header h;
		char page[OSF_FDT_HDR_BYTES];
	} first;
	struct osf_fdt_header *h;
	struct stat st;
	struct osf_fdt_entry *c;
	unsigned i;
	int efd, nfd, fdflags;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size < (off_t)OSF_FDT_HDR_BYTES)
		return -1;
	/* A table another user made (its memfd is theirs) may still be
	 * mapped writable by them: a process never adopts one, but from
	 * root, who may hand its connections to a user it became. */
	if (st.st_uid != geteuid() && st.st_uid != 0)
		return -1;
	if (st.st_size > (off_t)OSF_FDT_HDR_BYTES + (off_t)OSF_FDT_MAX_CHUNKS * OSF_FDT_CHUNK_BYTES)
		st.st_size = (off_t)OSF_FDT_HDR_BYTES + (off_t)OSF_FDT_MAX_CHUNKS * OSF_FDT_CHUNK_BYTES;
	if (pread(fd, &first, sizeof(first), 0) != (ssize_t)sizeof(first) ||
	    first.h.magic != OSF_FDT_MAGIC || first.h.version != OSF_FDT_VERSION ||
	    first.h.entry_bytes != OSF_FDT_ENTRY_BYTES ||
	    first.h.chunk_entries != OSF_FDT_CHUNK_ENTRIES)
		return -1;
	/* This process's own copy takes the inherited table's fd number (the
	 * inherited file is let go of) and is all it ever maps. */
	nfd = copy_in(fd, st.st_size, &first);
	if (nfd < 0)
		return -1;
	fdflags = sys_fcntl(fd, F_GETFD, 0);
	if (sys_dup3(nfd, fd, fdflags > 0 && (fdflags & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		sys_close(nfd);
		return -1;
	}
	sys_close(nfd);
	reserve();
	h = map_hdr(fd);
	if (!h)
		return -1;
	osf_fdt_lock();
	osf_fdt_cur_image = image;
	hdr = h;
	tfd = fd;
	tsize = st.st_size;
	for (i = 0; i < OSF_FDT_MAX_CHUNKS; i++) {
		if (!h->chunk_present[i] ||
		    OSF_FDT_HDR_BYTES + (off_t)(i + 1) * OSF_FDT_CHUNK_BYTES >
			    tsize)
			continue;
		osf_fdt_chunks[i] = map_chunk(fd, i);
		/* Unknown use: every page, until recount_pages. */
		osf_fdt_pages[i] = osf_fdt_chunks[i] ? ~0u : 0;
	}
	hdr->pid = getpid();
	hdr->image = image;
	hdr->flags &= ~OSF_FDTH_CORE_LOADED;
	remap_moved();
	/* Drop what did not survive the exec (FD_CLOEXEC, closed by spawn
	 * file actions). */
	OSF_FDT_FOREACH(efd, c) {
		/* A pointer is valid only in the image that stored it, and
		 * these words came from another image's table: none is
		 * used (each is rebuilt on first use, from the fds). */
		c->image = 0;
		c->priv = 0;
		if (c->kind == OSF_FD_NONE || c->kind == OSF_FD_HIDDEN ||
		    efd == tfd)
			continue;
		if (!entry_survived(efd, c))
			memset(c, 0, sizeof(*c));
	}
	set_hidden_locked(tfd, -1, 0);
	recount();
	recount_pages();
	osf_fdt_unlock();
	osf_fdt_touch();
	return 0;
}

static int is_table(int fd)
{
	uint64_t magic = 0;

	return pread(fd, &magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) &&
	       magic == OSF_FDT_MAGIC;
}

int osf_fdt_find_inherited(const char *envval)
{
	int fd;

	if (envval && *envval) {
		char *end;
		long v = strtol(envval, &end, 10);
		if (*end == '\0' && v >= 0 && v < (long)OSF_FDT_MAX_FDS &&
		    is_table((int)v))
			return (int)v;
	}
	fd = osf_fdt_hidden_base();
	return is_table(fd) ? fd : -1;
}
