/* fdt.h: libosf.so's operations on the fd table (layout in fdtable.h).
 *
 * Lookups are lock-free: a chunk pointer, once published, stays valid for
 * the life of the process image. Structural changes (creating the table or
 * a chunk, moving a hidden fd, the copy after fork) take one lock.
 * Entries for different fds are written by the threads that own those fds;
 * two threads racing on one fd number are racing in the application too.
 */
#ifndef OSF_FDT_H
#define OSF_FDT_H

#include "fdtable.h"

#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* OSF_FORK_TEXT marks a function every fork runs (the hook, the snapshot,
 * the child's clean-ups): they are placed together in libosf.so's text. A
 * fork child starts with none of the library's code mapped and takes a
 * page fault for each 64 KiB stretch of it it runs (the kernel maps the
 * pages around a fault, 64 KiB, at once): gathered, a fork runs in one or
 * two such stretches instead of one per source file. The section name puts
 * them in the group the linker gathers from every file (.text.hot.*); it
 * changes nothing else about the functions. */
#define OSF_FORK_TEXT __attribute__((section(".text.hot.osf_fork")))

/* OSF_AFTER_FORK(fn, stage) registers fn, a void (void) function of the
 * file it appears in, to run after every fork (preload/process.c,
 * osf_after_fork_run): a file whose state a fork child must reset says so
 * next to that state, and nothing else has to call it. Stages, run in this
 * order in the child of a process that used osf, after the fd table's own
 * reset (osf_fdt_child_after_fork): OSF_FORK_RESET puts locks and state
 * back (the parent's other threads, which held them, do not exist here);
 * OSF_FORK_RELEASE, after every reset, lets go of the child's copies of
 * what the parent keeps (which may take any lock). OSF_FORK_PARENT runs in
 * the parent after a fork that made a child. Within a stage the order is
 * the link order; no entry may depend on it. The entries are gathered by
 * the linker in section osf_after_fork (__start_/__stop_osf_after_fork). */
enum { OSF_FORK_RESET, OSF_FORK_RELEASE, OSF_FORK_PARENT, OSF_FORK_STAGES };
struct osf_after_fork {
	void (*fn)(void);
	long stage;
};
#define OSF_AFTER_FORK(fn, stage)                                              \
	static const struct osf_after_fork osf_after_fork_##fn                 \
		__attribute__((used, section("osf_after_fork"),                \
			       aligned(sizeof(struct osf_after_fork)))) = {fn, stage}

/* osf_fork: the words the fork path writes, in the parent around the fork
 * and in the child after it: the locks, the fd window's state and the
 * pid. A fork write-protects every private page the two processes share:
 * the first write to each, in either process, is a page fault. So these
 * words live on a page of their own marked MADV_WIPEONFORK
 * (osf_fdt_words_init): fork leaves the parent's copy writable (its
 * unlocks after fork fault nothing) and gives the child that page
 * zero-filled, which is just what a child starts with (locks free, no
 * window, pid not yet asked: osf_pid). The child touches it only when it
 * uses osf, and so does a child made past the fork hook (a raw clone).
 * Without the madvise (an old kernel), the child resets them itself
 * (osf_fork_wiped 0). The locks sit on their own cache line, away from
 * pid (read often). */
struct osf_fork_words {
	int lock_word;   /* the table lock: 0 free, else the owner's tid */
	int high_word;   /* the fd window's lock (fdwindow.c), same kind */
	int high_depth;  /* holds of its owner, its signal handlers' included */
	int high_open;   /* the depth whose osf_fdt_high_begin opened the
			    window now open; 0: none (the lock may be held
			    without one: a getrlimit hook, fork, exec) */
	int high_raised; /* RLIMIT_NOFILE raised by the open window */
	int high_base;   /* the open window's base, for nested ones */
	struct rlimit high_saved; /* the program's limit while raised */
	int high_users;  /* threads in a shared window (fdwindow.c) */
	int high_excl;   /* threads waiting for the shared windows to end
			    (an exclusive hold): no new one starts */
	pid_t pid __attribute__((aligned(64))); /* getpid() of this process, 0:
						   not asked yet (osf_pid) */
} __attribute__((aligned(128)));
extern struct osf_fork_words *osf_fork_at;
extern int osf_fork_wiped; /* osf_fork_at's page is MADV_WIPEONFORK */
#define osf_fork (*osf_fork_at)

/* osf_fdt_words_init moves osf_fork to its page (call it first, from the
 * library's constructor). */
void osf_fdt_words_init(void);

/* osf_rawsys makes system call n without the C library and returns what
 * the kernel returns (-errno on failure; errno is not touched). For the
 * fork child's path: its first call of a C library function faults the
 * library's code in (mmap, munmap and syscall share a page the child
 * otherwise never runs). */
static inline long osf_rawsys(long n, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long r;

	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
#else
	long r = syscall(n, a, b, c, d, e, f);

	return r < 0 ? -errno : r;
#endif
}

/* osf_fdt_fork_set returns scratch space on the fork page for the fork
 * path (the table lock's holder): *cap pointer slots, a power of two. */
uintptr_t *osf_fdt_fork_set(unsigned *cap);

/* osf_pid is getpid() of this process, asked once per process. */
static inline pid_t osf_pid(void)
{
	pid_t p = osf_fork.pid;

	if (__builtin_expect(p == 0, 0))
		p = osf_fork.pid = getpid();
	return p;
}

extern struct osf_fdt_entry *osf_fdt_chunks[OSF_FDT_MAX_CHUNKS];

/* osf_fdt_chunk_map: bit i set once chunk i is mapped (osf_fdt_chunks[i];
 * chunks are never unmapped while the image lives), so that a walk over
 * the table (osf_fdt_next, and a fork's snapshot and switch, where the
 * pointers' cache lines are cold) visits the few chunks present, not all
 * OSF_FDT_MAX_CHUNKS pointers (8 KiB). osf_fdt_chunk_next returns the
 * first chunk present at or after i, or OSF_FDT_MAX_CHUNKS. */
extern uint64_t osf_fdt_chunk_map[OSF_FDT_MAX_CHUNKS / 64];
static inline unsigned osf_fdt_chunk_next(unsigned i)
{
	uint64_t w;

	if (i >= OSF_FDT_MAX_CHUNKS)
		return OSF_FDT_MAX_CHUNKS;
	w = __atomic_load_n(&osf_fdt_chunk_map[i / 64], __ATOMIC_RELAXED) & (~0ull << (i % 64));
	while (!w) {
		i = (i & ~63u) + 64;
		if (i >= OSF_FDT_MAX_CHUNKS)
			return OSF_FDT_MAX_CHUNKS;
		w = __atomic_load_n(&osf_fdt_chunk_map[i / 64], __ATOMIC_RELAXED);
	}
	return (i & ~63u) + (unsigned)__builtin_ctzll(w);
}

/* Pages in use: bit p of osf_fdt_pages[i] is set once an entry in page p
 * (OSF_FDT_PAGE_ENTRIES entries, 4 KiB) of chunk i has been handed out
 * for writing (osf_fdt_get, osf_fdt_set, and fdtable.c's own writers);
 * bits are never cleared while the image lives. An entry is written only
 * after that (the other writers change entries already tracked), so every
 * entry of a page whose bit is clear is all zero (kind OSF_FD_NONE): the
 * walk below skips such pages without touching them, and the fork snapshot
 * copies only pages whose bit is set (the rest of the copy reads as zero
 * and costs no memory). */
#define OSF_FDT_PAGE_ENTRIES (4096u / OSF_FDT_ENTRY_BYTES)
#define OSF_FDT_PAGE_SHIFT 5 /* log2(OSF_FDT_PAGE_ENTRIES) */
extern uint32_t osf_fdt_pages[OSF_FDT_MAX_CHUNKS];

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(OSF_FDT_PAGE_ENTRIES == 1u << OSF_FDT_PAGE_SHIFT &&
		       OSF_FDT_CHUNK_ENTRIES / OSF_FDT_PAGE_ENTRIES == 32,
	       "one bit of osf_fdt_pages per page of a chunk");
#endif

/* osf_fdt_lookup returns fd's entry, or NULL when no chunk covers fd (the
 * common case for a process osf has nothing to do with). */
static inline struct osf_fdt_entry *osf_fdt_lookup(int fd)
{
	unsigned u = (unsigned)fd;
	struct osf_fdt_entry *c;

	if (__builtin_expect(u >= OSF_FDT_MAX_FDS, 0))
		return 0;
	c = __atomic_load_n(&osf_fdt_chunks[u >> OSF_FDT_CHUNK_SHIFT],
			    __ATOMIC_ACQUIRE);
	return c ? c + (u & (OSF_FDT_CHUNK_ENTRIES - 1)) : 0;
}

/* osf_fdt_next is the one walk over the table: it returns the entry of the
 * first fd >= *fd that a page in use covers (osf_fdt_pages), and sets *fd
 * to that fd, skipping whole chunks that do not exist (osf_fdt_chunk_map)
 * and pages never used (their entries are all zero, kind OSF_FD_NONE);
 * NULL when there is none (also for a negative *fd). Every entry of a
 * page in use is visited, in fd order, whatever its kind; it takes no lock
 * (callers that need the table stable hold osf_fdt_lock, as before); a
 * chunk made meanwhile may be missed, as one made just after. Use it through
 * OSF_FDT_FOREACH, or from a chosen start:
 * for (fd = from; (e = osf_fdt_next(&fd)); fd++). */
static inline struct osf_fdt_entry *osf_fdt_next(int *fd)
{
	unsigned u = (unsigned)*fd;
	struct osf_fdt_entry *c;
	uint32_t pages;

	while (u < OSF_FDT_MAX_FDS) {
		c = __atomic_load_n(&osf_fdt_chunks[u >> OSF_FDT_CHUNK_SHIFT],
				    __ATOMIC_ACQUIRE);
		pages = c ? __atomic_load_n(&osf_fdt_pages[u >> OSF_FDT_CHUNK_SHIFT],
					    __ATOMIC_ACQUIRE) >>
				    ((u & (OSF_FDT_CHUNK_ENTRIES - 1)) >> OSF_FDT_PAGE_SHIFT)
			  : 0;
		if (!pages) { /* to the next chunk present, at its start */
			u = osf_fdt_chunk_next((u >> OSF_FDT_CHUNK_SHIFT) + 1) << OSF_FDT_CHUNK_SHIFT;
			continue;
		}
		if (!(pages & 1)) /* to the next page in use, at its start */
			u = ((u >> OSF_FDT_PAGE_SHIFT) + (unsigned)__builtin_ctz(pages))
			    << OSF_FDT_PAGE_SHIFT;
		*fd = (int)u;
		return c + (u & (OSF_FDT_CHUNK_ENTRIES - 1));
	}
	return 0;
}

/* OSF_FDT_FOREACH(fd, e) runs the statement after it for every entry e
 * (of fd) in the table, in fd order; break and continue work as in any
 * for loop. fd is an int, e a struct osf_fdt_entry pointer. */
#define OSF_FDT_FOREACH(fd, e) \
	for ((fd) = 0; ((e) = osf_fdt_next(&(fd))) != 0; (fd)++)

/* osf_fdt_kind returns fd's kind, OSF_FD_NONE when untracked. */
static inline int osf_fdt_kind(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	return e ? __atomic_load_n(&e->kind, __ATOMIC_ACQUIRE) : OSF_FD_NONE;
}

/* Kind predicates: what the hooks ask of a kind (enum osf_fd_kind). */

/* osf_kind_is_conn: an offloaded connection; the data hooks take it. */
static inline int osf_kind_is_conn(int k) { return k == OSF_FD_SHM; }

/* osf_fdt_has_aux2: e's aux2_fd is a hidden fd of its own: the writers'
 * wake socket of a connection, or the gateway control connection of a
 * listener that also listens on an osfgw gateway (transport GATEWAY). */
static inline int osf_fdt_has_aux2(const struct osf_fdt_entry *e)
{
	return osf_kind_is_conn(e->kind) ||
	       (e->kind == OSF_FD_LISTEN && e->transport == OSF_TP_GATEWAY);
}

/* osf_kind_is_offloaded: an offloaded listener or connection, for which
 * osf holds hidden fds. */
static inline int osf_kind_is_offloaded(int k)
{
	return k == OSF_FD_LISTEN || k == OSF_FD_SHM;
}

/* osf_kind_is_socket: a TCP socket osf tracks, decided or not. */
static inline int osf_kind_is_socket(int k)
{
	return k == OSF_FD_INET || k == OSF_FD_KERNEL || k == OSF_FD_LISTEN ||
	       k == OSF_FD_SHM;
}

/* osf_kind_may_offload: a socket that is or may become offloaded (the
 * epoll hook must follow it). */
static inline int osf_kind_may_offload(int k)
{
	return k == OSF_FD_INET || k == OSF_FD_LISTEN || k == OSF_FD_SHM;
}

/* osf_kind_is_accepting: a listener osf watches (kernel or offloaded). */
static inline int osf_kind_is_accepting(int k)
{
	return k == OSF_FD_KERNEL || k == OSF_FD_LISTEN;
}

/* osf_fdt_get returns fd's entry, creating the table and the chunk when
 * needed; NULL with errno set when that fails (the fd then simply stays
 * untracked) or when called re-entrantly from a signal handler that
 * interrupted a structural change. */
struct osf_fdt_entry *osf_fdt_get(int fd);

/* osf_fdt_set publishes a filled-in entry for fd: the fields first, the
 * kind last, so lock-free readers never see a half-written entry. */
int osf_fdt_set(int fd, const struct osf_fdt_entry *src);

/* osf_fdt_clear forgets fd (kind first, then the rest). */
void osf_fdt_clear(int fd);

/* osf_fdt_set_cloexec mirrors FD_CLOEXEC of fd into its entry. Whether an
 * offloaded fd (listener or connection) crosses exec decides whether the
 * hidden fds it uses do, and whether the table itself does: the table is
 * inheritable while some offloaded fd is, so that an exec inside glibc
 * (system, popen) still hands it on. When the last such fd goes, the
 * table and the hidden fds stay inheritable until the next exec or spawn
 * (osf_fdt_settle), so that a process whose inheritable connections come
 * and go one at a time sets no flag per connection. */
void osf_fdt_set_cloexec(int fd, int on);

/* osf_fdt_settle makes close-on-exec what is inheritable with no
 * inheritable offloaded fd that needs it (the table, hidden fds): every
 * exec and spawn osf sees calls it first (preload/process.c: the exec
 * family, posix_spawn, system, popen, Go's fork and exec; syscall with
 * SYS_execve), never with the RLIMIT_NOFILE lock held. Costs nothing when
 * nothing was left so. */
void osf_fdt_settle(void);

/* osf_fdt_inheritable reports whether an exec would hand on offloaded
 * fds; osf_fdt_offloaded whether the process holds any at all. */
int osf_fdt_inheritable(void);
int osf_fdt_offloaded(void);

/* osf_fdt_spawn_inherit (on) makes the table and every hidden fd cross
 * the next exec, for a posix_spawn whose file actions may move offloaded
 * fds where no hook sees it (the new image keeps what it received, by
 * inode, and closes the rest); off puts the accounting's flags back. */
void osf_fdt_spawn_inherit(int on);

/* osf_fdt_spawn_snapshot returns an inheritable copy of the table for a
 * spawned image to adopt (it cannot race with this process changing its
 * own table right after the spawn), or -1; the caller closes it after the
 * spawn. */
int osf_fdt_spawn_snapshot(void);

/* osf_fdt_hide moves fd to osf's hidden range (high numbers, so the
 * application's lowest-free-fd numbering is undisturbed), records it as
 * OSF_FD_HIDDEN serving owner, closes the original number and returns the
 * new one; -1 with errno on failure (fd is then left untouched). The new
 * fd is close-on-exec until an owner that crosses exec uses it (see
 * osf_fdt_set_cloexec). An fd osf already placed and marked in the hidden
 * range stays where it is (marked for owner). */
int osf_fdt_hide(int fd, int owner);

/* osf_fdt_hide_placed is osf_fdt_hide for an fd that osf placed and
 * marked hidden itself and has held since (a spare segment's, preload/
 * setup_spare.c): it is recorded for owner with the inode recorded when it
 * was placed, without a look at the file (no fstat); an fd not marked so
 * goes through osf_fdt_hide. */
int osf_fdt_hide_placed(int fd, int owner);

/* osf_fdt_hide_for is osf_fdt_hide (how 0) or osf_fdt_hide_placed
 * (OSF_HIDE_PLACED); with OSF_HIDE_INHERIT the dup it makes is without
 * FD_CLOEXEC, for an owner that crosses exec: its accounting (osf_fdt_set)
 * then finds the flag as wanted and makes no F_SETFD. The caller records
 * the owner in the same fd window (an exec waits for it), so that no exec
 * passes an fd that is not yet accounted for. */
#define OSF_HIDE_PLACED 1
#define OSF_HIDE_INHERIT 2
int osf_fdt_hide_for(int fd, int owner, int how);

/* osf_fdt_hide_known is osf_fdt_hide_for for a file whose inode ino the
 * caller has just read (a check's fstat; 0: not known): the dup records
 * it without another look. */
int osf_fdt_hide_known(int fd, int owner, int how, uint64_t ino);

/* osf_fdt_keep_hidden is osf_fdt_hide for hfd, a close-on-exec fd already
 * placed in the hidden range (osf_fdt_dup_high): it records it and
 * returns it, or closes it and returns -1. */
int osf_fdt_keep_hidden(int hfd, int owner);

/* osf_fdt_hidden_base is the first fd number of osf's hidden range: the
 * program's soft RLIMIT_NOFILE when the hard limit leaves room above it
 * (osf's fds then cost the program none of its limit), else half the soft
 * limit, at most 1024. osf_fdt_inrange_base is the latter always (for the
 * Go core, which places its fds itself, below the limit). */
int osf_fdt_hidden_base(void);
int osf_fdt_inrange_base(void);

/* osf_fdt_high_begin opens a window in which fds can be placed from the
 * returned base (F_DUPFD, dup3) even above the program's soft limit: it
 * takes the limit lock and raises the soft limit to the hard one;
 * osf_fdt_high_end puts the program's limit back and unlocks. Windows
 * nest (in one thread); errno is kept. osf_fdt_dup_high is F_DUPFD[_CLOEXEC]
 * of fd into the hidden range in one window. */
int osf_fdt_high_begin(void);
void osf_fdt_high_end(void);
int osf_fdt_dup_high(int fd, int cloexec);

/* osf_fdt_affordable reports whether a new connection (or listener) may
 * take osf's fds: 0 when the hard limit leaves no room above the soft
 * RLIMIT_NOFILE and the soft one is at most OSF_FDT_TIGHT_MAX (fdwindow.c),
 * or when the room above is full, where osf's fds would take numbers the
 * program may need, and it gets kernel TCP instead. In an open window it
 * looks at the limit the window saved (no system call while the room
 * above is surely not full); else it reads it. */
int osf_fdt_affordable(void);

/* osf_fdt_tight_limit returns the program's soft RLIMIT_NOFILE when osf's
 * fds can only take numbers the program may need (no room above it, soft
 * at most OSF_FDT_TIGHT_MAX: soft = hard), else 0; the window's saved
 * limit in an open window, else one read. Under OSF_SHM_KFD connections
 * are offloaded there all the same while osf holds few fds
 * (osf_fdt_budget_ok); otherwise osf_fdt_affordable sends them to kernel
 * TCP. */
int osf_fdt_tight_limit(void);

/* osf_fdt_tight_seen reports whether the limit the last window read was
 * such a one, without a system call or a lock (0 when none was read, or
 * the program changed its limit through the hooks since): a hint. */
int osf_fdt_tight_seen(void);

/* OSF_FDT_TIGHT_CAP is how many fds osf may hold in a tight limit's
 * budget (osf_fdt_tight_limit) under OSF_SHM_KFD: its table, a listener's
 * companion, a client process's link to a listener and wide region's
 * memfd and eventfd; the program reaches EMFILE at most this many
 * connections before it would under kernel TCP. */
#define OSF_FDT_TIGHT_CAP 8

/* osf_fdt_budget_ok reports whether osf may make need more fds of its
 * own (hidden) and stay within OSF_FDT_TIGHT_CAP: it counts the hidden
 * entries of the table (a walk: for a set-up that would add fds only). */
int osf_fdt_budget_ok(int need);

/* osf_fdt_fds_free reports whether n fd numbers are free for fds osf is
 * about to take (an accepted connection's and its hello's, which the
 * kernel would otherwise drop: MSG_CTRUNC): 1 at once when the hard limit
 * leaves osf room above the soft one that is surely not full (as the last
 * window found), else after one poll of 32 numbers or more (POLLNVAL: not
 * open). osf_fdt_limit_changed forgets what the last window found (the
 * program set its limit). */
int osf_fdt_fds_free(int n);
void osf_fdt_limit_changed(void);

/* osf_fdt_limit_lock serialises RLIMIT_NOFILE reads and changes with the
 * windows (the hooks of getrlimit, setrlimit and prlimit; fork). */
void osf_fdt_limit_lock(void);
void osf_fdt_limit_unlock(void);

/* osf_fdt_mark_hidden records fd, already in place, as osf's own. */
void osf_fdt_mark_hidden(int fd);

/* osf_fdt_reserve_low fills every free fd number below limit with a
 * placeholder recorded as OSF_FD_RESERVED (bits marks them);
 * osf_fdt_release_low closes those still reserved: a number the program
 * claimed meanwhile (dup2 onto it) is its own. */
#define OSF_FDT_RESERVE_MAX 1024
void osf_fdt_reserve_low(int limit, uint64_t bits[OSF_FDT_RESERVE_MAX / 64]);
void osf_fdt_release_low(int limit, const uint64_t bits[OSF_FDT_RESERVE_MAX / 64]);

/* osf_fdt_is_reserved reports a placeholder of osf_fdt_reserve_low. */
static inline int osf_fdt_is_reserved(int fd)
{
	return osf_fdt_kind(fd) == OSF_FD_RESERVED;
}

/* osf_fdt_close_hidden closes a hidden fd and forgets it. */
void osf_fdt_close_hidden(int hfd);

/* osf_fdt_tag_store records on hidden fd hfd's entry that it is one of
 * the fds of companion's hello store (tag: OSF_FDF_STORE_RD, _WR or _PG;
 * preload/setup_fam.c): the entry crosses exec when the companion's does
 * (an exec'd image's adoption keeps it). 0, or -1 when hfd is not hidden. */
int osf_fdt_tag_store(int hfd, int companion, uint32_t tag);

/* osf_fdt_is_hidden reports whether fd is one of osf's own fds, checking
 * its identity so that a stale entry (an fd closed behind osf's back and
 * reused by the application) is forgotten rather than protected. */
int osf_fdt_is_hidden(int fd);

/* osf_fdt_relocate_hidden copies the hidden fd at number fd to a higher
 * number, so that the application can take fd (dup2 onto it), and points
 * every table entry that names fd (aux_fd, aux2_fd: its owner and the
 * owner's dups) at the copy. fd itself stays open (the caller's dup2
 * replaces it atomically, or the caller closes it) but is forgotten. It
 * returns the new number, 0 when fd is not hidden, or -1 with errno
 * (EBUSY: one of the Go runtime's fds, which cannot move). What caches
 * the number elsewhere is the caller's to update (fd.c). */
int osf_fdt_relocate_hidden(int fd);

/* osf_fdt_next_hidden returns the smallest hidden fd >= from, or -1. */
int osf_fdt_next_hidden(int from);

/* osf_fdt_ensure creates the table if there is none yet; 0 or -1. */
int osf_fdt_ensure(void);

/* osf_fdt_core_loaded records in the header that this process loaded the
 * Go core (osfstat reads it). */
void osf_fdt_core_loaded(void);

/* osf_fdt_table_fd returns the table's memfd, -1 when there is none. */
int osf_fdt_table_fd(void);

/* osf_fdt_set_header_flag sets or clears an OSF_FDTH_* flag. */
void osf_fdt_set_header_flag(uint32_t flag, int on);

/* osf_fdt_touch bumps the generation so readers (osfstat) notice. */
void osf_fdt_touch(void);

/* osf_fdt_lock/unlock serialise structural changes; fork holds the lock so
 * the child copies a consistent table. */
void osf_fdt_lock(void);
void osf_fdt_unlock(void);

/* osf_fdt_lock_unheld takes the lock unless this thread holds it already
 * (a signal handler's call inside a structural change): 1 when it took
 * it, for the caller's osf_fdt_unlock. */
int osf_fdt_lock_unheld(void);

/* Fork: with the lock held, the parent takes a snapshot of the table
 * (osf_fdt_fork_prepare, an fd or -1) before fork; the child makes the
 * snapshot its own table (osf_fdt_child_after_fork, which also resets the
 * lock), the parent closes it (osf_fdt_fork_parent). A copy made in the
 * child would race with a parent that closes fds right after fork. */
int osf_fdt_fork_prepare(void);
void osf_fdt_fork_parent(int prepared);
void osf_fdt_child_after_fork(int prepared);

/* osf_fdt_adopt takes over the table an exec'd image inherited at fd
 * (validated first; a copy is made when it belongs to another process),
 * dropping entries whose fds did not survive the exec; -1 when it is not
 * usable, or was made by a user other than root and this process's
 * effective one. */
int osf_fdt_adopt(int fd, uint64_t image);

/* osf_fdt_find_inherited returns the fd of an inherited table, found via
 * the OSF_FDTABLE environment value (may be NULL) or, failing that, at
 * the number osf would have placed it; -1 when there is none. */
int osf_fdt_find_inherited(const char *envval);

/* osf_fdt_cur_image is this process image's id (osf_fdt_set_image,
 * osf_fdt_adopt: the constructor's random id): an entry whose image field
 * differs holds a priv of another image. */
extern uint64_t osf_fdt_cur_image;

/* osf_fdt_set_image records the current image id (constructor). */
void osf_fdt_set_image(uint64_t image);

/* osf_fdt_set_go records that this image is a Go program and whether its
 * system calls reach the hooks (reason OSF_R_NONE) or why not, with
 * detail, in the header now and in any table made or adopted later. */
void osf_fdt_set_go(int reason, const char *detail);

#endif
