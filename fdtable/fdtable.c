//go:build osf_make

/* fdtable.c: the fd table of libosf.so (layout: fdtable.h, API: fdt.h):
 * its memory (the memfd, the reserved range, chunks and their pages in
 * use), the table lock, and the entries with what they account for. The
 * fd window and hidden fds are fdwindow.c's, fork and exec fdfork.c's.
 *
 * The table lives in a memfd so that it survives exec and so that osfstat
 * can read it from outside. Calls that libosf.so itself hooks (close,
 * fcntl, dup3) are made as raw system calls here, so the table never
 * re-enters the hooks.
 */
#include "fdt_priv.h"

struct osf_fdt_entry *osf_fdt_chunks[OSF_FDT_MAX_CHUNKS];
uint32_t osf_fdt_pages[OSF_FDT_MAX_CHUNKS];
uint64_t osf_fdt_chunk_map[OSF_FDT_MAX_CHUNKS / 64];

struct osf_fdt_header *fdt_hdr; /* NULL until the first tracked fd */
int fdt_fd = -1;               /* the table's memfd */
off_t fdt_size;                /* current size of the memfd */
char *fdt_base;                /* the reserved range, or NULL */
uint64_t osf_fdt_cur_image;
_Static_assert(sizeof(struct osf_fork_words) == 128, "osf_fork: one aligned 128 bytes");
int fdt_reserving; /* osf_fdt_reserve_low calls not yet released; a fork child looks */
int fdt_inherit_count; /* offloaded entries without FD_CLOEXEC */
int fdt_table_inherits; /* the table's fd is without FD_CLOEXEC */
int fdt_stale; /* the table or a hidden fd may be inheritable with no
		* entry that needs it: made close-on-exec before an exec
		* (osf_fdt_settle) */
int fdt_offload_count; /* offloaded entries */
__thread int fdt_tls_tid __attribute__((tls_model("initial-exec")));
__thread int fdt_tls_win __attribute__((tls_model("initial-exec")));
__thread int fdt_tls_excl_wait __attribute__((tls_model("initial-exec")));

struct osf_fdt_entry *osf_fdt_chunks[OSF_FDT_MAX_CHUNKS];
uint32_t osf_fdt_pages[OSF_FDT_MAX_CHUNKS];

static __thread int tls_lock_waits __attribute__((tls_model("initial-exec")));

/* word_lock takes the lock word w (the table's, or the rlimit window's). */
OSF_FORK_TEXT void word_lock(int *w)
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

OSF_FORK_TEXT void word_unlock(int *w)
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

int osf_fdt_lock_unheld(void)
{
	if (held_by_me())
		return 0;
	osf_fdt_lock();
	return 1;
}

/* held_by_me reports a re-entrant call (a signal handler that interrupted
 * this thread inside a structural change). */
int held_by_me(void)
{
	return (__atomic_load_n(&osf_fork.lock_word, __ATOMIC_RELAXED) & ~LOCK_WAITERS) == my_tid();
}

OSF_FORK_TEXT uint64_t ino_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

OSF_FORK_TEXT static int grow_to(off_t size)
{
	if (size <= fdt_size)
		return 0;
	if (ftruncate(fdt_fd, size) < 0)
		return -1;
	fdt_size = size;
	return 0;
}

void reserve(void)
{
	void *p;

	if (fdt_base)
		return;
	p = mmap(NULL, NEAR_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	fdt_base = p == MAP_FAILED ? NULL : p;
}

/* map_at maps len bytes of the table file fd at off, at want (MAP_FIXED)
 * or anywhere (want NULL); NULL on failure. */
static void *map_at(void *want, size_t len, int fd, off_t off)
{
	void *p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_SHARED | (want ? MAP_FIXED : 0),
		       fd, off);

	return p == MAP_FAILED ? NULL : p;
}

void *map_hdr(int fd) { return map_at(fdt_base, OSF_FDT_HDR_BYTES, fd, 0); }

OSF_FORK_TEXT struct osf_fdt_entry *map_chunk(int fd, unsigned i)
{
	off_t off = OSF_FDT_HDR_BYTES + (off_t)i * OSF_FDT_CHUNK_BYTES;

	return map_at(fdt_base && i < NEAR_CHUNKS ? fdt_base + off : NULL, OSF_FDT_CHUNK_BYTES, fd, off);
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
	c = map_chunk(fdt_fd, i);
	if (!c)
		return NULL;
	fdt_hdr->chunk_present[i] = 1;
	fdt_chunk_mark(i);
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

OSF_FORK_TEXT struct osf_fdt_entry *entry_locked(int fd)
{
	struct osf_fdt_entry *c = chunk_create((unsigned)fd >> OSF_FDT_CHUNK_SHIFT);

	if (!c)
		return NULL;
	mark_page((unsigned)fd);
	return c + ((unsigned)fd & (OSF_FDT_CHUNK_ENTRIES - 1));
}

/* hidden_entry fills e as the entry of a hidden fd for owner, with inode
 * ino, the kind last. */
OSF_FORK_TEXT void hidden_entry(struct osf_fdt_entry *e, int owner, uint64_t ino)
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
OSF_FORK_TEXT void set_hidden_locked(int fd, int owner, uint64_t ino)
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
	go_header(h);
	__atomic_store_n(&h->magic, OSF_FDT_MAGIC, __ATOMIC_RELEASE);
}

/* table_create makes the memfd, maps the header and records the table's
 * own fd as hidden; the lock is held. */
int table_create(void)
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
	fdt_fd = hfd;
	fdt_size = OSF_FDT_HDR_BYTES;
	fdt_hdr = h;
	set_hidden_locked(fdt_fd, -1, 0);
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
	if (!fdt_hdr && table_create() < 0)
		e = NULL;
	else
		e = entry_locked(fd);
	osf_fdt_unlock();
	return e;
}

int osf_fdt_tag_store(int hfd, int companion, uint32_t tag)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(hfd);

	if (!e || e->kind != OSF_FD_HIDDEN || held_by_me())
		return -1;
	osf_fdt_lock();
	e->flags = (e->flags & ~OSF_FDF_STORE) | (tag & OSF_FDF_STORE);
	e->aux_fd = companion;
	osf_fdt_unlock();
	osf_fdt_touch();
	return 0;
}

void osf_fdt_touch(void)
{
	if (fdt_hdr)
		__atomic_add_fetch(&fdt_hdr->generation, 1, __ATOMIC_RELEASE);
}

/* accounted: entries whose hidden fds may cross exec: offloaded fds, and
 * epoll fds (their registrations' record, selectmux). */
int accounted(int kind)
{
	return osf_kind_is_offloaded(kind) || kind == OSF_FD_EPOLL;
}

/* has_aux2: the entry's aux2_fd is a hidden fd of its own that crosses
 * exec with it: a connection's writers' wake socket or an epoll fd's
 * registrations record (a gateway listener's control connection,
 * osf_fdt_has_aux2, is close-on-exec: recount). */
int has_aux2(const struct osf_fdt_entry *e)
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
 * inheritable while it has any, and after its last goes until the next
 * exec (osf_fdt_settle): a process whose inheritable connections come
 * and go one at a time (a churn) sets no flag per connection. The lock
 * is held. */
static void account_aux(int afd, int delta)
{
	struct osf_fdt_entry *a;

	if (afd < 0 || !(a = osf_fdt_lookup(afd)) || a->kind != OSF_FD_HIDDEN)
		return;
	a->inherit_refs += (uint32_t)delta;
	if (!a->inherit_refs) {
		if (a->flags & OSF_FDF_INHERITS)
			__atomic_store_n(&fdt_stale, 1, __ATOMIC_RELAXED);
		return;
	}
	/* A hidden fd made without FD_CLOEXEC for the owner it serves
	 * (osf_fdt_hide_for, OSF_HIDE_INHERIT), or left so, is as wanted. */
	if (!(a->flags & OSF_FDF_INHERITS) && sys_fcntl(afd, F_SETFD, 0) == 0)
		a->flags |= OSF_FDF_INHERITS;
}

void table_inherit(int on)
{
	if (fdt_hdr && sys_fcntl(fdt_fd, F_SETFD, on ? 0 : FD_CLOEXEC) == 0)
		fdt_table_inherits = on;
}

/* account adds (delta 1) or removes (-1) entry e's share in what must
 * cross exec: its hidden fds, and the table (inheritable from the first
 * inheritable entry on; after the last, until the next exec). The lock is
 * held. */
void account(const struct osf_fdt_entry *e, int delta)
{
	if (osf_kind_is_offloaded(e->kind))
		fdt_offload_count += delta;
	if (!inheritable(e))
		return;
	fdt_inherit_count += delta;
	if (fdt_inherit_count > 0 && !fdt_table_inherits)
		table_inherit(1);
	else if (!fdt_inherit_count && fdt_table_inherits)
		__atomic_store_n(&fdt_stale, 1, __ATOMIC_RELAXED);
	account_aux(e->aux_fd, delta);
	if (has_aux2(e))
		account_aux(e->aux2_fd, delta);
}

void osf_fdt_settle(void)
{
	struct osf_fdt_entry *c;
	int efd;

	if (!__atomic_load_n(&fdt_stale, __ATOMIC_RELAXED) || !fdt_hdr || held_by_me())
		return;
	osf_fdt_lock();
	__atomic_store_n(&fdt_stale, 0, __ATOMIC_RELAXED);
	OSF_FDT_FOREACH(efd, c)
		if (c->kind == OSF_FD_HIDDEN && efd != fdt_fd && !c->inherit_refs &&
		    (c->flags & OSF_FDF_INHERITS) && sys_fcntl(efd, F_SETFD, FD_CLOEXEC) == 0)
			c->flags &= ~OSF_FDF_INHERITS;
	if (!fdt_inherit_count && fdt_table_inherits)
		table_inherit(0);
	osf_fdt_unlock();
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
	__atomic_store_n(&e->ops, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&e->kind, OSF_FD_NONE, __ATOMIC_RELEASE);
	memcpy((char *)e + 1, (const char *)src + 1,
	       offsetof(struct osf_fdt_entry, ops) - 1);
	memcpy(&e->slot1_hi, &src->slot1_hi,
	       sizeof(*e) - offsetof(struct osf_fdt_entry, slot1_hi));
	__atomic_store_n(&e->kind, src->kind, __ATOMIC_RELEASE);
	__atomic_store_n(&e->ops, src->ops, __ATOMIC_RELEASE);
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
	__atomic_store_n(&e->ops, 0, __ATOMIC_RELEASE);
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
	return __atomic_load_n(&fdt_inherit_count, __ATOMIC_RELAXED) > 0;
}

int osf_fdt_offloaded(void)
{
	return __atomic_load_n(&fdt_offload_count, __ATOMIC_RELAXED) > 0;
}

int osf_fdt_spawn_snapshot(void)
{
	int snap, hfd;

	if (!fdt_hdr || held_by_me())
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

	if (!fdt_hdr || held_by_me())
		return;
	osf_fdt_lock();
	OSF_FDT_FOREACH(efd, c) {
		int want = on || c->inherit_refs;
		if (c->kind != OSF_FD_HIDDEN || efd == fdt_fd ||
		    sys_fcntl(efd, F_SETFD, want ? 0 : FD_CLOEXEC) < 0)
			continue;
		if (want)
			c->flags |= OSF_FDF_INHERITS;
		else
			c->flags &= ~OSF_FDF_INHERITS;
	}
	/* The spawned image gets a snapshot (osf_fdt_spawn_snapshot), not
	 * this table, which its parent goes on changing. Off: every flag is
	 * as the accounting wants it (none stale). */
	table_inherit(!on && fdt_inherit_count);
	if (!on)
		__atomic_store_n(&fdt_stale, 0, __ATOMIC_RELAXED);
	osf_fdt_unlock();
}

int osf_fdt_table_fd(void) { return fdt_hdr ? fdt_fd : -1; }

int osf_fdt_ensure(void)
{
	int r = 0;

	if (fdt_hdr)
		return 0;
	if (held_by_me())
		return OSF_FDT_EDEADLK();
	osf_fdt_lock();
	if (!fdt_hdr)
		r = table_create();
	osf_fdt_unlock();
	return r;
}

void osf_fdt_core_loaded(void)
{
	if (osf_fdt_ensure() < 0)
		return;
	__atomic_add_fetch(&fdt_hdr->core_loads, 1, __ATOMIC_RELAXED);
	osf_fdt_set_header_flag(OSF_FDTH_CORE_LOADED, 1);
}

void osf_fdt_set_header_flag(uint32_t flag, int on)
{
	if (!fdt_hdr)
		return;
	if (on)
		__atomic_or_fetch(&fdt_hdr->flags, flag, __ATOMIC_RELEASE);
	else
		__atomic_and_fetch(&fdt_hdr->flags, ~flag, __ATOMIC_RELEASE);
	osf_fdt_touch();
}

static struct {
	int set, reason;
	char detail[sizeof(((struct osf_fdt_header *)0)->go_detail)];
} go_state;

void go_header(struct osf_fdt_header *h)
{
	h->go_reason = (uint8_t)go_state.reason;
	memcpy(h->go_detail, go_state.detail, sizeof(h->go_detail));
	if (go_state.set)
		__atomic_or_fetch(&h->flags, OSF_FDTH_GO, __ATOMIC_RELEASE);
	else
		__atomic_and_fetch(&h->flags, ~OSF_FDTH_GO, __ATOMIC_RELEASE);
}

void osf_fdt_set_go(int reason, const char *detail)
{
	go_state.set = 1;
	go_state.reason = reason;
	snprintf(go_state.detail, sizeof(go_state.detail), "%s", detail);
	if (fdt_hdr) {
		go_header(fdt_hdr);
		osf_fdt_touch();
	}
}

void osf_fdt_set_image(uint64_t image)
{
	osf_fdt_cur_image = image;
	if (fdt_hdr)
		fdt_hdr->image = image;
}
