//go:build osf_make

/* fdwindow.c: the fd table's part in the program's fd space (fdt.h): where
 * osf's own fds go relative to the program's RLIMIT_NOFILE (the fd window
 * a connect or accept opens), and the hidden fds: marking, moving and
 * closing them, and the low numbers a set-up keeps from them.
 */
#include "fdt_priv.h"
#include "fdscan.h"

/* ---- osf's fds and the program's RLIMIT_NOFILE -------------------------
 *
 * The kernel refuses an fd (EMFILE) when no number below the soft
 * RLIMIT_NOFILE is free, and checks the limit only when it hands out a
 * number. So osf keeps its own fds at and above the program's soft limit,
 * where they cost the program none of it: the soft limit is raised to the
 * hard one for the few system calls that place them (a "window") and put
 * back at once, and the program's numbering, its EMFILE and its getrlimit
 * stay the kernel's. Windows are shared: threads connect and accept at
 * once, the first window raises the limit and the last puts it back. The
 * hooks of getrlimit/setrlimit/prlimit, fork and exec hold the limit
 * exclusively (no window open), so no thread of the program sees the
 * raised value or has its own change undone, and no child inherits it.
 * When the hard limit leaves no room (soft == hard) or the soft limit is
 * very large (above OSF_FDT_HIGH_MAX: the kernel's fd array would grow
 * that far), osf's fds live from half the soft limit, at most 1024, as
 * they did before. */

#define OSF_FDT_HIGH_MAX 65536

/* The window's lock word is the table lock's kind (word_lock): the
 * owner's tid, with LOCK_WAITERS once another thread sleeps on it, so
 * that an uncontended window makes no futex call. A shared window holds
 * it only to count itself in and out (osf_fork.high_users: the first
 * raises the limit, the last puts it back); an exclusive hold holds it
 * throughout, once the shared windows have ended (osf_fdt_limit_lock).
 *
 * A signal handler may open a window (or hold the lock) on a thread that
 * holds one: in this thread's shared window it nests (fdt_tls_win); on a
 * thread that holds the word it nests (osf_fork.high_depth), and a window
 * it opens while none is open is its own, put back by its own
 * osf_fdt_high_end (osf_fork.high_open names the depth that opened it): a
 * handler that opened one while the thread held the lock only for a
 * getrlimit hook once left the limit raised. The owner's steps are ordered for a handler that lands
 * between them (SIGNAL_FENCE: program order as a handler sees it). No
 * signal is blocked: a window may cover a blocking connect, and an exec
 * or fork under the lock would pass a blocked mask on. */
#define SIGNAL_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)

static int high_mine(void)
{
	return (__atomic_load_n(&osf_fork.high_word, __ATOMIC_RELAXED) & ~LOCK_WAITERS) == my_tid();
}

/* in_window: this thread holds a window (its own, shared, or one under
 * the word): the limit it saved is the program's. */
static int in_window(void)
{
	return fdt_tls_win > 0 || high_mine();
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

	if (in_window() && osf_fork.high_raised)
		return base_of(&osf_fork.high_saved);
	if (sys_prlimit(NULL, &rl) < 0)
		return 1024;
	return base_of(&rl);
}

int osf_fdt_inrange_base(void)
{
	struct rlimit rl;

	if (in_window() && osf_fork.high_raised)
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

/* seen_rl is the limit the last read found, at seen_at
 * (CLOCK_MONOTONIC_COARSE ns; 0: none, or changed through a hook since). A flat one (soft = hard:
 * a window raises nothing) read within FLAT_TTL_NS is what a shared
 * window's first opener takes without reading it again: a change through
 * the hooks is seen at once, one made past them (prlimit(1) on the
 * process, a raw system call) within FLAT_TTL_NS; meanwhile a window's
 * F_DUPFD above a lowered limit falls back below it (osf_fdt_dup_high).
 * Both are written with the window's word held. */
#define FLAT_TTL_NS 100000000LL
static struct rlimit seen_rl;
static long long seen_at;

static long long coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + 1;
}

static void note_limit(const struct rlimit *rl)
{
	seen_soft = lim_int(rl->rlim_cur);
	seen_hard = lim_int(rl->rlim_max);
	seen_rl = *rl;
	__atomic_store_n(&seen_at, coarse_ns(), __ATOMIC_RELAXED);
	__atomic_store_n(&seen_room, room_above(rl), __ATOMIC_RELAXED);
}

/* flat_recent sets *rl to the limit last read when it is flat and
 * recent (seen_rl); 0: read it. The word is held. */
static int flat_recent(struct rlimit *rl)
{
	long long at = __atomic_load_n(&seen_at, __ATOMIC_RELAXED);

	if (!at || room_above(&seen_rl) || coarse_ns() - at >= FLAT_TTL_NS)
		return 0;
	*rl = seen_rl;
	return 1;
}

void osf_fdt_limit_changed(void)
{
	__atomic_store_n(&seen_at, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&seen_room, -1, __ATOMIC_RELAXED);
}

/* FREE_LOOK is how many fd numbers one poll looks at; FREE_FIRST the
 * first poll of a look, from where free numbers were last seen: it
 * usually finds them there, and each number costs the poll a file look-up
 * (and an open one its poll method). */
#define FREE_LOOK 32
#define FREE_FIRST 8

/* free_in reports whether n numbers in [lo, hi) are free: ppoll marks a
 * number that names no open file POLLNVAL; the first call looks at
 * FREE_FIRST numbers (FREE_LOOK when n is more), the next ones at
 * FREE_LOOK, from *hint (where free ones were last seen), round the range
 * at most once, each number once (fdscan.h). No telling (the call
 * failed) counts as free. */
static int free_in(int lo, int hi, int n, int *hint)
{
	struct pollfd p[FREE_LOOK];
	struct timespec zero = {0, 0};
	int from = *hint >= lo && *hint < hi ? *hint : lo, done, got = 0, k, i;

	for (done = 0; done < hi - lo && got < n; done += k) {
		int look = done || n >= FREE_FIRST ? FREE_LOOK : FREE_FIRST;
		k = fdt_scan_len(lo, hi, from, done, look);
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
			from = fdt_scan_next(lo, hi, from, k);
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

/* limit_now sets *rl to the program's limit: the window's saved one in
 * an open window, else one read. 0, or -1. */
static int limit_now(struct rlimit *rl)
{
	int r;

	if (fdt_tls_win > 0 || (high_mine() && osf_fork.high_open)) {
		*rl = osf_fork.high_saved;
		return 0;
	}
	osf_fdt_limit_lock(); /* not a window's raised value */
	r = sys_prlimit(NULL, rl);
	osf_fdt_limit_unlock();
	return r;
}

int osf_fdt_tight_limit(void)
{
	struct rlimit rl;
	int saved = errno, r;

	/* Outside a window: room above at the last look (or a change
	 * through the hooks since) is not tight, without a read. */
	if (!in_window() && __atomic_load_n(&seen_room, __ATOMIC_RELAXED) == 1)
		return 0;
	r = limit_now(&rl) == 0 && tight(&rl) ? (int)rl.rlim_cur : 0;
	errno = saved;
	return r;
}

int osf_fdt_tight_seen(void)
{
	return __atomic_load_n(&seen_at, __ATOMIC_RELAXED) && tight(&seen_rl);
}

int osf_fdt_budget_ok(int need)
{
	struct osf_fdt_entry *e;
	int fd, n = 0;

	OSF_FDT_FOREACH(fd, e)
		if (__atomic_load_n(&e->kind, __ATOMIC_RELAXED) == OSF_FD_HIDDEN && ++n + need > OSF_FDT_TIGHT_CAP)
			return 0;
	return n + need <= OSF_FDT_TIGHT_CAP;
}

/* OSF_FDT_ROOM_NEED is what a connection may place in the room above:
 * a client's segment, writers' wake socket and port holder, and one
 * more. */
#define OSF_FDT_ROOM_NEED 4

int osf_fdt_affordable(void)
{
	struct rlimit rl;
	int saved = errno, r;

	if (limit_now(&rl) < 0) {
		errno = saved;
		return 1;
	}
	/* With room above it must not be full: the rest would land below
	 * the limit, in the program's budget. */
	r = !tight(&rl) && (!room_above(&rl) ||
			    room_left(lim_int(rl.rlim_cur), lim_int(rl.rlim_max),
				      OSF_FDT_ROOM_NEED));
	errno = saved;
	return r;
}

/* word_take and word_give hold the window's lock word as its owner
 * (high_depth: a signal handler that lands on the owner nests). */
OSF_FORK_TEXT static void word_take(void)
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

OSF_FORK_TEXT static void word_give(void)
{
	SIGNAL_FENCE();
	if (--osf_fork.high_depth > 0)
		return;
	SIGNAL_FENCE();
	word_unlock(&osf_fork.high_word);
}

/* nap sleeps until *w may no longer be v (or LOCK_NAP_NS passed). */
OSF_FORK_TEXT static void nap(int *w, int v)
{
	struct timespec t = {0, LOCK_NAP_NS};
	int saved = errno;

	(void)syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, &t, NULL, 0);
	errno = saved;
}

OSF_FORK_TEXT static void wake_all(int *w)
{
	int saved = errno;

	(void)syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	errno = saved;
}

/* An exclusive hold (the hooks of getrlimit, setrlimit and prlimit, fork,
 * exec, the spare kit's changes) takes the word and waits until no shared
 * window is open (high_users 0); high_excl, counted meanwhile, keeps new
 * shared windows from starting, so a fork is not starved by threads that
 * connect in a loop. A thread in a shared window nests in it instead
 * (fdt_tls_win): its own window keeps the others from ending. */
OSF_FORK_TEXT void osf_fdt_limit_lock(void)
{
	int u;

	if (fdt_tls_win > 0) {
		fdt_tls_win++;
		return;
	}
	word_take();
	if (osf_fork.high_depth > 1 || !__atomic_load_n(&osf_fork.high_users, __ATOMIC_RELAXED))
		return;
	osf_fork.high_excl++;
	fdt_tls_excl_wait++; /* a handler's window here does not wait for us */
	while ((u = __atomic_load_n(&osf_fork.high_users, __ATOMIC_RELAXED)) > 0) {
		word_give();
		nap(&osf_fork.high_users, u);
		word_take();
	}
	fdt_tls_excl_wait--;
	if (--osf_fork.high_excl == 0)
		wake_all(&osf_fork.high_excl);
}

OSF_FORK_TEXT void osf_fdt_limit_unlock(void)
{
	if (fdt_tls_win > 0) {
		fdt_tls_win--;
		return;
	}
	word_give();
}

/* own_begin opens a window on a thread that holds the word (an exclusive
 * hold, or a signal handler that landed while its thread took or gave the
 * word for a shared window): it nests in the window open, if any, else
 * opens its own, which its osf_fdt_high_end puts back. */
OSF_FORK_TEXT static int own_begin(void)
{
	struct rlimit rl, up;
	int saved = errno;

	word_take();
	if (osf_fork.high_open || __atomic_load_n(&osf_fork.high_users, __ATOMIC_RELAXED))
		return osf_fork.high_base; /* nested in an open window */
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

OSF_FORK_TEXT static void own_end(void)
{
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
	word_give();
}

/* shared_begin opens this thread's window, shared with the other
 * threads': the first raises the limit (under the word), the others
 * count themselves in, and the word is let go at once, so that threads
 * connect and accept at the same time. */
static int shared_begin(void)
{
	struct rlimit rl, up;
	int saved = errno, base, x;

	for (;;) {
		word_take();
		x = osf_fork.high_excl;
		if (!x || fdt_tls_excl_wait)
			break;
		word_give(); /* an exclusive hold waits: after it */
		nap(&osf_fork.high_excl, x);
	}
	if (osf_fork.high_users == 0) {
		if (flat_recent(&rl)) {
			/* soft = hard, read a moment ago: nothing to raise */
		} else if (sys_prlimit(NULL, &rl) < 0) {
			rl.rlim_cur = rl.rlim_max = RLIM_INFINITY; /* base 1024, nothing raised */
		} else {
			note_limit(&rl);
		}
		osf_fork.high_saved = rl;
		osf_fork.high_raised = 0;
		osf_fork.high_base = base_of(&rl);
		SIGNAL_FENCE();
		__atomic_store_n(&osf_fork.high_users, 1, __ATOMIC_RELAXED); /* a handler now nests */
		SIGNAL_FENCE();
		if (room_above(&rl)) {
			up.rlim_cur = up.rlim_max = rl.rlim_max;
			if (sys_prlimit(&up, NULL) == 0)
				osf_fork.high_raised = 1;
		}
	} else {
		__atomic_store_n(&osf_fork.high_users, osf_fork.high_users + 1, __ATOMIC_RELAXED);
	}
	base = osf_fork.high_base;
	SIGNAL_FENCE();
	fdt_tls_win = 1;
	SIGNAL_FENCE();
	word_give();
	errno = saved;
	return base;
}

static void shared_end(void)
{
	int saved = errno;

	word_take();
	SIGNAL_FENCE();
	fdt_tls_win = 0;
	SIGNAL_FENCE();
	if (osf_fork.high_users == 1) {
		/* Copies first, as own_end. */
		struct rlimit back = osf_fork.high_saved;
		int raised = osf_fork.high_raised;
		SIGNAL_FENCE();
		__atomic_store_n(&osf_fork.high_users, 0, __ATOMIC_RELAXED);
		SIGNAL_FENCE();
		if (raised)
			(void)sys_prlimit(&back, NULL);
		osf_fork.high_raised = 0;
		if (osf_fork.high_excl)
			wake_all(&osf_fork.high_users);
	} else if (osf_fork.high_users > 1) {
		__atomic_store_n(&osf_fork.high_users, osf_fork.high_users - 1, __ATOMIC_RELAXED);
	}
	word_give();
	errno = saved;
}

OSF_FORK_TEXT int osf_fdt_high_begin(void)
{
	if (fdt_tls_win > 0) { /* nested in this thread's window */
		fdt_tls_win++;
		return osf_fork.high_base;
	}
	if (high_mine())
		return own_begin();
	return shared_begin();
}

OSF_FORK_TEXT void osf_fdt_high_end(void)
{
	int saved = errno;

	if (fdt_tls_win > 1)
		fdt_tls_win--;
	else if (fdt_tls_win == 1)
		shared_end();
	else
		own_end();
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

/* mark_hidden records nfd, already in the hidden range, as hidden for
 * owner (ino: its inode, 0 to look it up, before the lock; inherits: nfd
 * is without FD_CLOEXEC): 0, or -1 (nfd left open). */
static int mark_hidden(int nfd, int owner, uint64_t ino, int inherits)
{
	struct osf_fdt_entry *e;

	if (held_by_me()) {
		errno = EDEADLK;
		return -1;
	}
	if (!ino)
		ino = ino_of(nfd);
	osf_fdt_lock();
	if (!fdt_hdr && table_create() < 0) {
		osf_fdt_unlock();
		return -1;
	}
	e = entry_locked(nfd);
	if (e) {
		set_hidden_locked(nfd, owner, ino);
		if (inherits)
			e->flags |= OSF_FDF_INHERITS;
	}
	osf_fdt_unlock();
	return e ? 0 : -1;
}

/* hide is osf_fdt_hide_for: with OSF_HIDE_PLACED an fd osf placed in the
 * hidden range and marked (a spare segment's, preload/setup_spare.c)
 * stays there, now for owner, when it is still the file the entry
 * records: trusted takes the entry's word for it, else one fstat tells;
 * with OSF_HIDE_INHERIT a dup is made without FD_CLOEXEC. The dup records
 * known, the file's inode as the caller read it, or (0) one fstat's. */
static int hide(int fd, int owner, int how, uint64_t known)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	uint64_t ino = e && e->kind == OSF_FD_HIDDEN ? e->ino : 0;
	int inherit = (how & OSF_HIDE_INHERIT) != 0, nfd;

	if (ino && ((how & OSF_HIDE_PLACED) || ino_of(fd) == ino) &&
	    mark_hidden(fd, owner, ino, 0) == 0) {
		osf_fdt_touch();
		return fd;
	}
	nfd = osf_fdt_dup_high(fd, !inherit);
	if (nfd < 0)
		return -1;
	if (mark_hidden(nfd, owner, known, inherit) < 0) {
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
	return hide(fd, owner, 0, 0);
}

int osf_fdt_hide_placed(int fd, int owner)
{
	return hide(fd, owner, OSF_HIDE_PLACED, 0);
}

int osf_fdt_hide_for(int fd, int owner, int how)
{
	return hide(fd, owner, how, 0);
}

int osf_fdt_hide_known(int fd, int owner, int how, uint64_t ino)
{
	return hide(fd, owner, how, ino);
}

int osf_fdt_keep_hidden(int hfd, int owner)
{
	if (mark_hidden(hfd, owner, 0, 0) < 0) {
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
	if (fdt_hdr || table_create() == 0)
		set_hidden_locked(fd, -1, 0);
	osf_fdt_unlock();
	osf_fdt_touch();
}

void osf_fdt_reserve_low(int limit, uint64_t bits[OSF_FDT_RESERVE_MAX / 64])
{
	int ph, fd;

	__atomic_add_fetch(&fdt_reserving, 1, __ATOMIC_SEQ_CST);
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
	__atomic_sub_fetch(&fdt_reserving, 1, __ATOMIC_SEQ_CST);
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
	if (e->owner_fd < 0 && fd != fdt_fd)
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
	if (fd == fdt_fd)
		fdt_fd = nfd;
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
