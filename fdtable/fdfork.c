//go:build osf_make

/* fdfork.c: the fd table across fork and exec (fdt.h): the snapshot a fork
 * child moves to, the fork page, and an exec'd image's adoption of the
 * table it inherited.
 */
#include "fdt_priv.h"

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
OSF_FORK_TEXT int snapshot(void)
{
	struct fork_page *fp = FORK_PAGE;
	struct osf_fdt_header *h = (struct osf_fdt_header *)fp->head;
	struct snap_writer *w = &fp->w;
	const size_t head = sizeof(fp->head);
	const unsigned tchunk = (unsigned)fdt_fd >> OSF_FDT_CHUNK_SHIFT;
	const size_t tpage = ((unsigned)fdt_fd & (OSF_FDT_CHUNK_ENTRIES - 1)) / OSF_FDT_PAGE_ENTRIES;
	const size_t tat = ((unsigned)fdt_fd & (OSF_FDT_PAGE_ENTRIES - 1)) * OSF_FDT_ENTRY_BYTES;
	unsigned i;

	w->n = 0;
	w->fd = memfd_create(OSF_FDT_NAME, MFD_CLOEXEC);
	if (w->fd < 0)
		return -1;
	(void)fchmod(w->fd, 0600);
	memcpy(h, fdt_hdr, head);
	h->pid = 0;
	h->image = osf_fdt_cur_image;
	h->flags &= ~OSF_FDTH_CORE_LOADED;
	h->core_loads = 0;
	hidden_entry(&fp->table_entry, -1, ino_of(w->fd));
	if (ftruncate(w->fd, fdt_size) < 0 || snap_put(w, h, head, 0) < 0 ||
	    snap_put(w, (const char *)fdt_hdr + head, OSF_FDT_HDR_BYTES - head, (off_t)head) < 0)
		goto fail;
	FDT_FOREACH_CHUNK(i, 0) {
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
	(void)mmap(old, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fdt_fd, off);
	return -1;
}

/* switch_to makes the copy in nfd (made by snapshot) this process's
 * table, at the table's fd number and at the same addresses; nfd is
 * consumed. */
/* dup_onto puts nfd at fd's number, keeping fd's close-on-exec flag: 0,
 * or -1 with errno. The number lies below the program's limit unless it is
 * a hidden fd's, at or above the soft limit, or the program lowered the
 * limit since: only then (EBADF) is the fd window worth its system calls
 * (and, in a fork child, the page faults of their code). */
OSF_FORK_TEXT static int dup_onto(int nfd, int fd)
{
	int fl = sys_fcntl(fd, F_GETFD, 0), r, saved;

	fl = (fl > 0 && (fl & FD_CLOEXEC)) ? O_CLOEXEC : 0;
	if (sys_dup3(nfd, fd, fl) >= 0)
		return 0;
	saved = errno;
	if (saved != EBADF)
		return -1;
	osf_fdt_high_begin();
	r = sys_dup3(nfd, fd, fl);
	osf_fdt_high_end();
	errno = saved;
	return r < 0 ? -1 : 0;
}

OSF_FORK_TEXT static int switch_to(int nfd)
{
	int me;
	unsigned i, near = 0;

	/* On failure what is switched stays switched (the copy equals the
	 * table) and the rest stays shared: the caller copies again. */
	if ((char *)fdt_hdr == fdt_base) {
		/* The header and the near chunks in one go: up to the last
		 * near chunk present (those absent in between are mapped
		 * too, unpublished, and mapped again if ever created). */
		FDT_FOREACH_CHUNK(i, 0) {
			if (i >= NEAR_CHUNKS)
				break;
			near = i + 1;
		}
		if (remap(fdt_base, OSF_FDT_HDR_BYTES + (size_t)near * OSF_FDT_CHUNK_BYTES, nfd, 0) < 0)
			goto fail;
	} else if (remap(fdt_hdr, OSF_FDT_HDR_BYTES, nfd, 0) < 0) {
		goto fail;
	}
	FDT_FOREACH_CHUNK(i, near) {
		struct osf_fdt_entry *oc = osf_fdt_chunks[i];
		if (oc && remap(oc, OSF_FDT_CHUNK_BYTES, nfd,
				OSF_FDT_HDR_BYTES + (off_t)i * OSF_FDT_CHUNK_BYTES) < 0)
			goto fail;
	}
	/* The copy says all but the owner (snapshot); its first access a
	 * read, so that the kernel maps the pages around it at once. A raw
	 * getpid: the PLT's page may be one the child would not touch
	 * otherwise (a page fault per fork). */
	me = (pid_t)osf_rawsys(SYS_getpid, 0, 0, 0, 0, 0, 0);
	if (fdt_hdr->pid != me)
		fdt_hdr->pid = me;
	if (dup_onto(nfd, fdt_fd) < 0)
		goto fail;
	sys_close(nfd);
	/* snapshot wrote the table fd's entry if its page was in use (read
	 * here in this process's own copy of osf_fdt_pages: no fault). */
	if (!osf_fdt_chunks[(unsigned)fdt_fd >> OSF_FDT_CHUNK_SHIFT] ||
	    !(osf_fdt_pages[(unsigned)fdt_fd >> OSF_FDT_CHUNK_SHIFT] &
	      (1u << (((unsigned)fdt_fd & (OSF_FDT_CHUNK_ENTRIES - 1)) >> OSF_FDT_PAGE_SHIFT))))
		set_hidden_locked(fdt_fd, -1, 0);
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
	return fdt_hdr ? snapshot() : -1;
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

	fdt_tls_tid = 0; /* this thread has a new id in the child */
	if (fdt_tls_win) /* a handler's fork in a window: none here */
		fdt_tls_win = 0;
	if (!osf_fork_wiped) { /* else fork gave the child them all zero (fdt.h) */
		osf_fork.pid = 0;
		osf_fork.lock_word = 0;
		osf_fork.high_word = osf_fork.high_depth = osf_fork.high_raised = osf_fork.high_open = 0; /* fork held it, not raised */
		osf_fork.high_users = osf_fork.high_excl = 0;
	}
	if (!fdt_hdr)
		return;
	/* The snapshot was taken before fork: the parent may already be
	 * changing the table we shared a moment ago. */
	if (prepared < 0 || switch_to(prepared) < 0)
		(void)copy_private();
	/* Placeholders of a core start under way in the parent are not ours
	 * (no start is under way here). */
	if (!fdt_reserving)
		return;
	fdt_reserving = 0;
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
		if (fd == fdt_fd || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
			continue;
		if (at && osf_kind_is_offloaded(at->kind) && at->ino == (uint64_t)st.st_ino)
			continue;
		OSF_FDT_FOREACH(cfd, c)
			if (osf_kind_is_offloaded(c->kind) && c->ino == (uint64_t)st.st_ino) {
				src = c;
				break;
			}
		if (src && (at = entry_locked(fd)) != NULL) {
			int fdfl = sys_fcntl(fd, F_GETFD, 0);
			*at = *src;
			at->image = 0; /* rebuilt on first use */
			at->priv = 0;
			/* The close-on-exec of the new number, not the old
			 * one's: a dup2 or dup3 without O_CLOEXEC clears it
			 * (os/exec's ExtraFiles from a File, which Go makes
			 * close-on-exec), and the next exec must carry the
			 * connection and the table on. */
			if (fdfl >= 0 && !(fdfl & FD_CLOEXEC))
				at->flags &= ~OSF_FDF_CLOEXEC;
			else if (fdfl >= 0)
				at->flags |= OSF_FDF_CLOEXEC;
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

	fdt_inherit_count = fdt_offload_count = 0;
	OSF_FDT_FOREACH(efd, c)
		if (c->kind == OSF_FD_HIDDEN) {
			c->inherit_refs = 0;
			c->flags |= OSF_FDF_INHERITS; /* it crossed the exec */
		}
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
	/* A listener's hello store crosses with its companion (its fds were
	 * made inheritable for the exec when the companion was). */
	OSF_FDT_FOREACH(efd, c) {
		struct osf_fdt_entry *a;
		if (c->kind == OSF_FD_HIDDEN && (c->flags & OSF_FDF_STORE) && c->aux_fd >= 0 &&
		    c->owner_fd != -2 && (a = osf_fdt_lookup(c->aux_fd)) != NULL &&
		    a->kind == OSF_FD_HIDDEN && a->owner_fd == -2)
			c->owner_fd = -2;
	}
	OSF_FDT_FOREACH(efd, c) {
		if (c->kind != OSF_FD_HIDDEN || efd == fdt_fd)
			continue;
		if (c->owner_fd == -2) {
			c->owner_fd = -1;
			continue;
		}
		memset(c, 0, sizeof(*c));
		sys_close(efd); /* its owners did not cross the exec */
	}
	table_inherit(fdt_inherit_count > 0);
}

/* recount_pages keeps, of an adopted table, the pages in use that hold
 * anything (osf_fdt_pages): its forks copy only those. The lock is held. */
static void recount_pages(void)
{
	unsigned i, p, k;

	FDT_FOREACH_CHUNK(i, 0) {
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
	int efd, nfd;

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
	if (dup_onto(nfd, fd) < 0) {
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
	fdt_hdr = h;
	fdt_fd = fd;
	fdt_size = st.st_size;
	for (i = 0; i < OSF_FDT_MAX_CHUNKS; i++) {
		if (!h->chunk_present[i] ||
		    OSF_FDT_HDR_BYTES + (off_t)(i + 1) * OSF_FDT_CHUNK_BYTES >
			    fdt_size)
			continue;
		osf_fdt_chunks[i] = map_chunk(fd, i);
		if (osf_fdt_chunks[i])
			fdt_chunk_mark(i);
		/* Unknown use: every page, until recount_pages. */
		osf_fdt_pages[i] = osf_fdt_chunks[i] ? ~0u : 0;
	}
	fdt_hdr->pid = getpid();
	fdt_hdr->image = image;
	fdt_hdr->flags &= ~OSF_FDTH_CORE_LOADED;
	go_header(fdt_hdr); /* this image's, not the one before exec */
	remap_moved();
	/* Drop what did not survive the exec (FD_CLOEXEC, closed by spawn
	 * file actions). */
	OSF_FDT_FOREACH(efd, c) {
		/* A pointer is valid only in the image that stored it, and
		 * these words came from another image's table: none is
		 * used (each is rebuilt on first use, from the fds). */
		c->image = 0;
		c->priv = 0;
		/* An undecided socket's file status flags may have been set
		 * before the exec: connect reads them. */
		if (c->kind == OSF_FD_INET)
			c->flags |= OSF_FDF_FLSET;
		if (c->kind == OSF_FD_NONE || c->kind == OSF_FD_HIDDEN ||
		    efd == fdt_fd)
			continue;
		if (!entry_survived(efd, c))
			memset(c, 0, sizeof(*c));
	}
	set_hidden_locked(fdt_fd, -1, 0);
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
