//go:build osf_make

/* pool.c: shm segments as slots of a region (pool.h; the default,
 * OSF_SHM_POOL=0 turns it off;
 * docs/ARCHITECTURE.md "Connection segment", "Slots of a region").
 *
 * This process's regions are one table, under one short lock: the ones it
 * owns (made here, hands slots out; their memfd is a hidden fd of the
 * process) and the ones it maps for a peer's slots or for connections it
 * inherited (known by the memfd's inode, which cannot name another file
 * while this mapping pins it). Per region and side, a private bitmap of
 * the slots this process's connections hold: a hello, an adoption or a
 * take that names one held already is refused, so no two connections of
 * one process ever share rings, whatever a peer writes.
 *
 * A region's memfd is one hidden fd of the process, which every
 * connection of the region names in its entry (OSF_FDF_REGIONFD) and none
 * closes. The owner's goes with its region (trimmed); a region not owned
 * here has one while a connection of it lives here: the first memfd such
 * a connection brought (a hello's, a hand-off's: osf_pool_name_fd; later
 * ones are closed), or one inherited across exec (osf_pool_adopt's keep),
 * closed when its last connection here lets go (unhold; the mapping stays
 * for the next), unless an entry inherited across exec and not rebuilt
 * yet still names it (named). */
#include "pool_priv.h"
#include "osf.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define IDLE_MAX 16                 /* mapped regions with no slot held here */
#define OWN_IDLE_MAX 8              /* owner regions with every slot free */
#define TRIM_MAX 4                  /* of those, dropped at one time */

/* On a page boundary: a fork child's reset (pool_after_fork) writes the
 * owner word of the regions in use, the first few entries, so it copies
 * one page for them, wherever the other variables move. */
struct region osf_pool_regions[REGIONS] __attribute__((aligned(4096)));
int osf_pool_nregions; /* entries in use or freed below this */
/* kept: the mapper's region that went idle last, which keeps its memfd and
 * eventfd for its next connection (a client's next one, one region per
 * client process and listener), if hellos brought its connections (one
 * that came with connections inherited across exec goes with them): a
 * hello's copies are then closed, not hidden, and its eventfd needs no
 * check. The one kept before lets go of its fds, so an idle process holds
 * those of one region at most. */
static struct region *kept;
static int lk;

void pool_lock(void)
{
	while (__atomic_exchange_n(&lk, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

void pool_unlock(void) { __atomic_store_n(&lk, 0, __ATOMIC_RELEASE); }

static int bit(const uint64_t *b, uint32_t i) { return (int)(b[i / 64] >> (i % 64) & 1); }
static void bit_set(uint64_t *b, uint32_t i) { b[i / 64] |= 1ull << (i % 64); }
static void bit_clr(uint64_t *b, uint32_t i) { b[i / 64] &= ~(1ull << (i % 64)); }

/* region_words points r's bitmaps and generations for n slots at its own
 * words, or (more than NARROW) at a private mapping: 0, or -1 (r as it
 * was). */
static int region_words(struct region *r, uint32_t n)
{
	uint64_t *b = r->in_bits;
	uint32_t w = WORDS(n);

	r->meta = NULL;
	r->meta_bytes = 0;
	if (n > NARROW) {
		size_t bytes = (size_t)w * 4 * sizeof(uint64_t) + (size_t)n * sizeof(uint32_t);
		void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return -1;
		r->meta = m;
		r->meta_bytes = bytes;
		b = m;
	}
	r->live[0] = b;
	r->live[1] = b + w;
	r->used = b + 2 * w;
	r->clean = b + 3 * w;
	r->gen = n > NARROW ? (uint32_t *)(b + 4 * w) : r->in_gen;
	return 0;
}

/* region_clear empties entry r (its words' mapping let go). */
OSF_FORK_TEXT static void region_clear(struct region *r)
{
	if (r->meta)
		(void)osf_rawsys(SYS_munmap, (long)r->meta, (long)r->meta_bytes, 0, 0, 0, 0);
	memset(r, 0, sizeof(*r));
}

/* live_set and live_clr change side's bit for slot i, counted in nlive. */
static void live_set(struct region *r, int side, uint32_t i)
{
	if (!bit(r->live[side], i))
		r->nlive++;
	bit_set(r->live[side], i);
}

static void live_clr(struct region *r, int side, uint32_t i)
{
	if (bit(r->live[side], i))
		r->nlive--;
	bit_clr(r->live[side], i);
}

/* unlock_drop unlocks, then closes drop[0..1], the memfd and eventfd of a
 * region entry() let go (-1: none): the fd table's lock is never taken
 * under this one. */
static void unlock_drop(const int drop[2])
{
	pool_unlock();
	osf_fdt_close_hidden(drop[0]); /* -1: nothing */
	osf_fdt_close_hidden(drop[1]);
}

static uint8_t *slot_seg(const struct region *r, uint32_t i)
{
	return r->base + (uint64_t)i * osf_seg_bytes(r->ring);
}

struct osf_seg_hdr *pool_slot_hdr(const struct region *r, uint32_t i)
{
	return osf_seg_hdr(slot_seg(r, i), r->ring);
}

/* find_addr returns the region holding seg (a slot's start), with its slot
 * in *slot; the lock is held. */
static struct region *find_addr(const void *seg, uint32_t ring, uint32_t *slot)
{
	int i;

	for (i = 0; i < osf_pool_nregions; i++) {
		struct region *r = &osf_pool_regions[i];
		uint64_t off;
		if (!r->base || r->ring != ring || (const uint8_t *)seg < r->base ||
		    (const uint8_t *)seg >= r->base + r->bytes)
			continue;
		off = (uint64_t)((const uint8_t *)seg - r->base);
		if (off % osf_seg_bytes(ring))
			return NULL;
		*slot = (uint32_t)(off / osf_seg_bytes(ring));
		return r;
	}
	return NULL;
}

/* adopted: a region took a memfd that entries inherited across exec
 * name (osf_pool_adopt's keep): entries not rebuilt yet may name a
 * region's fd while it has no connection here. */
static int adopted;

/* named reports whether an entry of a connection names region fd fd
 * (OSF_FDF_REGIONFD, or its eventfd: OSF_FDF_REGIONEFD) that is not being closed (one closing has no priv
 * in this image); only after adopted, for an idle region (otherwise
 * only its live connections' entries name it). */
OSF_FORK_TEXT static int named(int fd)
{
	struct osf_fdt_entry *e;
	int efd;

	if (!__atomic_load_n(&adopted, __ATOMIC_RELAXED))
		return 0;
	OSF_FDT_FOREACH(efd, e)
		if (osf_kind_is_conn(e->kind) &&
		    (((e->flags & OSF_FDF_REGIONFD) && e->aux_fd == fd) ||
		     ((e->flags & OSF_FDF_REGIONEFD) && e->aux2_fd == fd)) &&
		    (__atomic_load_n(&e->image, __ATOMIC_ACQUIRE) != osf.image ||
		     __atomic_load_n(&e->priv, __ATOMIC_ACQUIRE)))
			return 1;
	return 0;
}

/* entry returns a free table entry, unmapping the oldest idle region not
 * owned here when there are IDLE_MAX idle ones or no free entry; NULL when
 * the table is full of regions in use. An idle region whose memfd an
 * entry still names stays; one that goes leaves its memfd in *drop, for
 * the caller to close once the lock is released (else -1). The lock is
 * held. */
static struct region *entry(int drop[2])
{
	struct region *free_e = NULL, *old = NULL;
	int i, idle = 0;

	drop[0] = drop[1] = -1;
	for (i = 0; i < osf_pool_nregions; i++) {
		struct region *r = &osf_pool_regions[i];
		if (!r->base) {
			if (!free_e)
				free_e = r;
			continue;
		}
		if (r->owner || r->nlive)
			continue;
		idle++;
		if (!old || r->idle_since < old->idle_since)
			old = r;
	}
	if (old && ((old->fd >= 0 && named(old->fd)) || (old->efd >= 0 && named(old->efd))))
		old = NULL; /* one look per call: the table can be long */
	if (old && (idle >= IDLE_MAX || (!free_e && osf_pool_nregions == REGIONS))) {
		munmap(old->base, old->bytes);
		drop[0] = old->fd;
		drop[1] = old->efd;
		region_clear(old);
		if (!free_e)
			free_e = old;
	}
	if (!free_e && osf_pool_nregions < REGIONS)
		free_e = &osf_pool_regions[osf_pool_nregions++];
	if (free_e)
		free_e->fd = free_e->efd = -1;
	return free_e;
}

/* enter_region enters made region md as an owner region; the lock is
 * held. NULL when the table is full. drop: entry()'s. */
static struct region *enter_region(const struct made *md, uint32_t ring,
				   const struct ucred *owner, const char *name, int drop[2])
{
	struct region *r = entry(drop);

	if (!r)
		return NULL;
	memset(r, 0, sizeof(*r));
	if (region_words(r, md->n) < 0)
		return NULL; /* a free entry still (base NULL) */
	r->base = md->base;
	r->bytes = md->bytes;
	r->ring = ring;
	r->n = md->n;
	r->dev = md->dev;
	r->ino = md->ino;
	r->fd = md->fd;
	r->efd = md->efd;
	r->owner = osf_pid();
	r->kuid = owner->uid;
	r->kpid = owner->pid;
	memcpy(r->kname, name, sizeof(r->kname) - 1);
	r->idle_since = osf_now_ns();
	return r;
}

/* free_slot returns the lowest slot of owner region r this process may
 * hand out, or -1: one no connection of this process holds on either side
 * (its own knowledge), never handed out, or let go by both sides. */
static int free_slot(struct region *r)
{
	uint32_t i, w;

	for (w = 0; w < WORDS(r->n); w++) {
		uint64_t busy = r->live[0][w] | r->live[1][w];
		if (busy == ~0ull)
			continue;
		for (i = w * 64; i < r->n && i < w * 64 + 64; i++) {
			if (busy >> (i % 64) & 1)
				continue;
			if (!bit(r->used, i) ||
			    __atomic_load_n(&pool_slot_hdr(r, i)->slot_done, __ATOMIC_ACQUIRE) == 3)
				return (int)i;
		}
	}
	return -1;
}

/* all_free reports whether owner region r has no slot taken: none held
 * here, every one handed out let go by both sides. The lock is held. */
static int all_free(const struct region *r)
{
	uint32_t i;

	if (r->nlive)
		return 0;
	for (i = 0; i < r->n; i++)
		if (bit(r->used, i) &&
		    __atomic_load_n(&pool_slot_hdr(r, i)->slot_done, __ATOMIC_ACQUIRE) != 3)
			return 0;
	return 1;
}

/* trim_owned takes out of the table the owner regions of this process
 * that have every slot free beyond the keep used last (a client that met
 * many listeners, each with a region, keeps few), at most max
 * of them, into gone, for drop_gone once the lock is released; the lock
 * is held. Returns how many. */
static int trim_owned(struct made *gone, int max, int keep)
{
	pid_t me = osf_pid();
	int i, idle, k = 0;

	while (k < max) {
		struct region *old = NULL;
		for (i = 0, idle = 0; i < osf_pool_nregions; i++) {
			struct region *r = &osf_pool_regions[i];
			if (!r->base || r->owner != me || !all_free(r))
				continue;
			idle++;
			if (!old || r->idle_since < old->idle_since)
				old = r;
		}
		if (idle <= keep)
			break;
		gone[k].base = old->base;
		gone[k].bytes = old->bytes;
		gone[k].efd = old->efd;
		gone[k++].fd = old->fd;
		region_clear(old);
	}
	return k;
}

/* own_idle_max is how many owner regions with every slot free
 * trim_owned keeps: OWN_IDLE_MAX, or 1 when the limit the last fd window
 * read was soft = hard, where their fds are the program's
 * (osf_fdt_budget_ok counts them: a process whose tests each make a
 * listener kept one region per listener met). */
static int own_idle_max(void)
{
	return osf_fdt_tight_seen() ? 1 : OWN_IDLE_MAX;
}

/* drop_gone unmaps and closes what trim_owned took out; the lock is not
 * held. */
static void drop_gone(const struct made *gone, int k)
{
	while (k-- > 0) {
		munmap(gone[k].base, gone[k].bytes);
		osf_fdt_close_hidden(gone[k].fd);
		osf_fdt_close_hidden(gone[k].efd);
	}
}

void *osf_pool_take(uint32_t ring, const struct ucred *owner, const char *name,
		    int make, uint32_t wide, int *fdp, int *efdp, struct osf_hello_pool *hp)
{
	struct made md = {0}, drop[TRIM_MAX];
	struct region *r = NULL;
	struct osf_seg_hdr *h;
	pid_t me = osf_pid();
	int i, s = -1, saved = errno, fd = -1, made = 0, k, round, dropfd[2] = {-1, -1};

	for (round = 0; round < 2; round++) {
		pool_lock();
		for (i = 0; i < osf_pool_nregions && s < 0; i++) {
			r = &osf_pool_regions[i];
			if (r->base && r->owner == me && r->ring == ring &&
			    r->kuid == owner->uid && r->kpid == owner->pid &&
			    strncmp(r->kname, name, sizeof(r->kname)) == 0)
				s = free_slot(r);
		}
		if (s < 0 && made && (r = enter_region(&md, ring, owner, name, dropfd)) != NULL) {
			made = 0; /* the table's now */
			s = 0;
		}
		if (s >= 0 || made || make == OSF_POOL_NOMAKE)
			break;
		/* None free: make a region, outside the lock (the fd table's
		 * lock is never taken under this one). */
		k = trim_owned(drop, TRIM_MAX, make == OSF_POOL_CAPPED ? 0 : own_idle_max());
		pool_unlock();
		drop_gone(drop, k);
		/* Capped: the program's budget holds osf's fds (soft =
		 * hard), a region's two among them. */
		if ((make == OSF_POOL_CAPPED && !osf_fdt_budget_ok(2)) ||
		    pool_make_region(ring, wide, &md) < 0) {
			errno = saved;
			return NULL;
		}
		made = 1;
	}
	if (s >= 0)
		fd = r->fd; /* the region's: every connection names it */
	if (fd >= 0) {
		live_set(r, OSF_SIDE_CLIENT, (uint32_t)s);
		bit_set(r->used, (uint32_t)s);
		bit_clr(r->clean, (uint32_t)s);
		r->gen[s]++;
		pool_note_last(r);
		r->last1 = (uint32_t)s + 1;
		h = pool_slot_hdr(r, (uint32_t)s);
		memset(h, 0, sizeof(*h)); /* no one else's any more: both let go */
		h->slot_gen = r->gen[s];
		hp->slot = (uint32_t)s;
		hp->gen = r->gen[s];
		hp->region_bytes = r->bytes;
		*fdp = fd;
		*efdp = r->efd;
	}
	unlock_drop(dropfd);
	if (made) { /* a slot came free meanwhile, or the table is full */
		munmap(md.base, md.bytes);
		osf_fdt_close_hidden(md.fd);
		osf_fdt_close_hidden(md.efd);
	}
	errno = saved;
	return fd >= 0 ? slot_seg(r, (uint32_t)s) : NULL;
}

/* hold maps (or finds) the region whose memfd is fd, st its fstat (the
 * caller's: one per hello or adoption), and takes side's hold on slot:
 * the segment, or NULL with why. A region it maps anew must have the
 * seals need; one mapped here already had them (a seal is never removed,
 * and the mapping pins the file, so no other file has its inode
 * meanwhile): no F_GET_SEALS per connection. keep: fd is the region's for
 * this process (an entry's OSF_FDF_REGIONFD), which the region takes when
 * it has none. */
static void *hold(int fd, const struct stat *st, uint32_t ring, uint64_t bytes,
		  uint32_t slot, int side, int keep, int need, char *why, size_t wn)
{
	struct region *r = NULL;
	int i, seals, drop[2] = {-1, -1};

	if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size != bytes) {
		snprintf(why, wn, "region: not a regular file of %llu bytes",
			 (unsigned long long)bytes);
		return NULL;
	}
	pool_lock();
	for (i = 0; i < osf_pool_nregions; i++)
		if (osf_pool_regions[i].base && osf_pool_regions[i].dev == (uint64_t)st->st_dev &&
		    osf_pool_regions[i].ino == (uint64_t)st->st_ino) {
			r = &osf_pool_regions[i];
			break;
		}
	if (r && (r->bytes != bytes || r->ring != ring)) {
		pool_unlock();
		snprintf(why, wn, "region: mapped here with another size or ring");
		return NULL;
	}
	if (!r) {
		void *m;
		seals = REAL(fcntl)(fd, F_GET_SEALS, NULL);
		if (seals < 0 || (seals & need) != need) {
			pool_unlock();
			snprintf(why, wn, "invalid segment: seals 0x%x, want 0x%x",
				 seals < 0 ? 0 : seals, need);
			return NULL;
		}
		r = entry(drop);
		if (!r) {
			unlock_drop(drop);
			snprintf(why, wn, "region: %d regions mapped already", REGIONS);
			return NULL;
		}
		m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			unlock_drop(drop);
			snprintf(why, wn, "map region: %s", strerror(errno));
			return NULL;
		}
		memset(r, 0, sizeof(*r));
		r->n = (uint32_t)(bytes / osf_seg_bytes(ring));
		if (region_words(r, r->n) < 0) {
			munmap(m, bytes);
			r->n = 0;
			unlock_drop(drop);
			snprintf(why, wn, "region: no memory for its slots' words");
			return NULL;
		}
		r->base = m;
		r->bytes = bytes;
		r->ring = ring;
		r->dev = (uint64_t)st->st_dev;
		r->ino = (uint64_t)st->st_ino;
		r->fd = r->efd = -1;
		r->idle_since = osf_now_ns();
	}
	if (slot >= r->n || bit(r->live[side], slot)) {
		unlock_drop(drop);
		snprintf(why, wn, "region: slot %u held here already (or beyond %u)", slot, r->n);
		return NULL;
	}
	live_set(r, side, slot);
	if (keep && r->fd < 0) {
		r->fd = fd;
		__atomic_store_n(&adopted, 1, __ATOMIC_RELAXED);
	}
	unlock_drop(drop);
	return slot_seg(r, slot);
}

/* give_back gives back the rings' pages (all but the shared page, the
 * header's) of owner region r's slots that both sides let go of since
 * they were last handed out (slot_done = 3): a slot waiting for its next
 * connection holds no more memory than an unmapped segment, here and in a
 * peer that keeps the region mapped. Under the lock, so none is handed
 * out meanwhile; only what the owner could hand out again anyway (a side
 * never punches at its own release: a process spawned with the
 * connection may not have adopted it yet when its parent's close counts
 * the side's last holder gone). A ring whose head stayed within its part
 * of the shared page (the slot's header starts at 0 at each hand-out, and
 * positions below that part never leave the page, whatever the base) has
 * no page to give back and is not punched: a punch of an untouched 1 MiB
 * costs a few microseconds per ring (zapping both processes' mappings).
 * The head is the peer's word:
 * a lie only keeps pages the peer could keep anyway, or punches ours. The
 * lock is held. */
static void give_back(struct region *r)
{
	uint64_t rb = r->ring;
	struct osf_seg_hdr *h;
	uint32_t i;

	for (i = 0; i < r->n; i++) {
		uint8_t *seg;
		uint64_t w = r->used[i / 64] & ~(r->live[0][i / 64] | r->live[1][i / 64] |
						 r->clean[i / 64]);
		if (!(w >> (i % 64))) {
			i |= 63; /* none further in this word */
			continue;
		}
		if (!(w >> (i % 64) & 1))
			continue;
		seg = slot_seg(r, i);
		h = pool_slot_hdr(r, i);
		if (__atomic_load_n(&h->slot_done, __ATOMIC_ACQUIRE) != 3)
			continue;
		if (__atomic_load_n(&h->ring[0].head, __ATOMIC_ACQUIRE) > OSF_SEG_RING0_SHARED)
			(void)madvise(seg, rb, MADV_REMOVE); /* ring 0's */
		if (__atomic_load_n(&h->ring[1].head, __ATOMIC_ACQUIRE) > OSF_SEG_RING1_SHARED)
			(void)madvise(seg + rb + OSF_SEG_PAGE, rb, MADV_REMOVE); /* ring 1's */
		bit_set(r->clean, i);
	}
}

/* take_gone takes region r, idle, out of the table into g, for drop_gone
 * once the lock is released: its client process ended (a mapper's
 * peer_gone), or its server's link did (an owner's: the companion's
 * owner or listener is gone, so no connection of it is coming; the slots
 * that server never let go of would never come free). An entry inherited
 * across exec and not rebuilt yet that names its fds keeps it (0). The
 * lock is held. */
static int take_gone(struct region *r, struct made *g)
{
	if ((r->fd >= 0 && named(r->fd)) || (r->efd >= 0 && named(r->efd)))
		return 0;
	g->base = r->base;
	g->bytes = r->bytes;
	g->fd = r->fd;
	g->efd = r->efd;
	if (kept == r)
		kept = NULL;
	region_clear(r);
	return 1;
}

/* mark_gone marks gone the mapper regions of client process peer
 * (owner NULL), or this process's own regions for owner's companion
 * name, and takes out those no connection of this process holds. */
static void mark_gone(pid_t peer, const struct ucred *owner, const char *name)
{
	struct made gone[TRIM_MAX];
	pid_t me = osf_pid();
	int i, k, more = 1;

	while (more) {
		more = k = 0;
		pool_lock();
		for (i = 0; i < osf_pool_nregions; i++) {
			struct region *r = &osf_pool_regions[i];
			if (!r->base ||
			    (owner ? r->owner != me || r->kuid != owner->uid || r->kpid != owner->pid ||
					     strncmp(r->kname, name, sizeof(r->kname))
				   : r->owner == me || r->peer != peer))
				continue;
			r->peer_gone = 1;
			if (r->nlive)
				continue;
			if (k == TRIM_MAX) {
				more = 1;
				break;
			}
			k += take_gone(r, &gone[k]);
		}
		pool_unlock();
		drop_gone(gone, k);
		more &= k > 0;
	}
}

void osf_pool_peer_gone(pid_t pid) { mark_gone(pid, NULL, NULL); }

void osf_pool_owner_gone(const struct ucred *owner, const char *name)
{
	mark_gone(0, owner, name);
}

/* unhold lets go of side's hold on seg, setting done in its slot_done
 * first (0: none), under the lock: a thread of this process that takes
 * the lock for a hello naming the slot again (the owner handed it out
 * once it saw slot_done 3) finds the hold gone, and no other thread
 * unmaps the region before the word is written. The lock is not held. */
static void unhold(void *seg, uint32_t ring, int side, uint32_t done)
{
	struct made drop[TRIM_MAX];
	struct region *r;
	uint32_t slot;
	int k = 0, dropfd[2] = {-1, -1};
	/* Soft = hard: no idle region keeps its fds, which are the
	 * program's (osf_fdt_budget_ok counts them): a server would shut
	 * its companion for a client process that is gone. */
	int keep = !osf_fdt_tight_seen();

	pool_lock();
	r = find_addr(seg, ring, &slot);
	if (r) {
		if (done)
			__atomic_or_fetch(&pool_slot_hdr(r, slot)->slot_done, done, __ATOMIC_ACQ_REL);
		live_clr(r, side, slot);
		if (r->owner == osf_pid())
			give_back(r);
		if (!r->nlive) {
			r->idle_since = osf_now_ns();
			if (r->peer_gone) /* its client (its server) ended */
				k = take_gone(r, &drop[0]);
			else if (r->owner == osf_pid())
				k = trim_owned(drop, TRIM_MAX, own_idle_max());
			else if ((r->fd >= 0 || r->efd >= 0) && !named(r->fd) &&
				 !named(r->efd) && (!r->by_hello || !keep)) {
				dropfd[0] = r->fd; /* a mapper's: until its next connection */
				dropfd[1] = r->efd;
				r->fd = r->efd = -1;
			} else if ((r->fd >= 0 || r->efd >= 0) && !named(r->fd) &&
				   !named(r->efd)) {
				struct region *o = kept; /* a mapper's: kept (kept) */
				kept = r;
				if (o && o != r && o->base && !o->owner &&
				    !o->nlive && (o->fd >= 0 || o->efd >= 0) &&
				    !named(o->fd) && !named(o->efd)) {
					dropfd[0] = o->fd;
					dropfd[1] = o->efd;
					o->fd = o->efd = -1;
				}
			}
		}
	}
	unlock_drop(dropfd);
	drop_gone(drop, k);
}

void *osf_pool_map(int fd, const struct stat *st, uint32_t ring,
		   const struct osf_hello_pool *p, int efd, uint64_t *efd_ino,
		   const struct ucred *cr, char *why, size_t wn)
{
	uint8_t *seg = hold(fd, st, ring, p->region_bytes, p->slot, OSF_SIDE_SERVER, 0,
			    OSF_REGION_SEALS, why, wn);
	const struct osf_seg_hdr *h;
	struct region *r;
	uint32_t slot;

	if (!seg)
		return NULL;
	h = osf_seg_hdr(seg, ring);
	if (!osf_seg_hdr_check(h, ring) ||
	    __atomic_load_n(&h->slot_gen, __ATOMIC_ACQUIRE) != p->gen) {
		unhold(seg, ring, OSF_SIDE_SERVER, 0);
		snprintf(why, wn, "invalid slot %u: header or generation does not match the hello",
			 p->slot);
		return NULL;
	}
	/* The hello's writers' eventfd: one that the region names here
	 * already (checked when it came, kept while a slot is held) is the
	 * one the install uses, and the hello's is closed unlooked at. */
	if (efd >= 0 && osf_pool_name_efd(seg, ring, -1) < 0 && !osf_wake_efd_ok(efd, efd_ino)) {
		unhold(seg, ring, OSF_SIDE_SERVER, 0);
		snprintf(why, wn, "writers' wake eventfd: not an eventfd");
		return NULL;
	}
	pool_lock();
	r = find_addr(seg, ring, &slot);
	if (r) {
		r->by_hello = 1;
		if (cr) { /* its client lives: a link's end comes after its hellos */
			r->peer = cr->pid;
			r->peer_gone = 0;
		}
	}
	pool_unlock();
	return seg;
}

void *osf_pool_adopt(int fd, uint32_t ring, uint32_t slot, int side, uint64_t ino,
		     int keep)
{
	struct stat st;
	uint8_t *seg;
	char why[160];

	if (!osf_ring_size_ok(ring) || fstat(fd, &st) < 0 || st.st_size <= 0 ||
	    osf_region_slots((uint64_t)st.st_size, ring) == 0 || ino == 0)
		return NULL;
	seg = hold(fd, &st, ring, (uint64_t)st.st_size, slot, side, keep,
		   F_SEAL_SHRINK | F_SEAL_GROW, why, sizeof(why));
	if (!seg)
		return NULL;
	/* Recycled since this connection took it: its side is another
	 * socket's now (a socket's inode is no other's while it is held). */
	if (!osf_seg_hdr_check(osf_seg_hdr(seg, ring), ring) ||
	    __atomic_load_n(&osf_seg_hdr(seg, ring)->slot_ino[side], __ATOMIC_ACQUIRE) != ino) {
		unhold(seg, ring, side, 0);
		return NULL;
	}
	return seg;
}

uint64_t osf_pool_ino(const void *seg, uint32_t ring)
{
	struct region *r;
	uint32_t slot;
	uint64_t ino = 0;

	if (!__atomic_load_n(&osf_pool_nregions, __ATOMIC_RELAXED))
		return 0;
	pool_lock();
	r = find_addr(seg, ring, &slot);
	if (r)
		ino = r->ino;
	pool_unlock();
	return ino;
}

int osf_pool_slot(const void *seg, uint32_t ring)
{
	uint32_t slot;
	int r;

	if (!__atomic_load_n(&osf_pool_nregions, __ATOMIC_RELAXED))
		return -1;
	pool_lock();
	r = find_addr(seg, ring, &slot) ? (int)slot : -1;
	pool_unlock();
	return r;
}

void osf_seg_release(void *seg, uint32_t ring, int side, int gone)
{
	int saved = errno;

	if (osf_pool_slot(seg, ring) < 0) {
		munmap(seg, (size_t)osf_seg_bytes(ring));
		errno = saved;
		return;
	}
	/* A client's connection to a listener that defers: its next ones
	 * look for the note (setup_defer.c). */
	if (side == OSF_SIDE_CLIENT && !osf_pool_defer_seen &&
	    __atomic_load_n(&osf_seg_hdr(seg, ring)->srv_defer, __ATOMIC_RELAXED))
		__atomic_store_n(&osf_pool_defer_seen, 1, __ATOMIC_RELAXED);
	/* gone: after every use of the slot here, the owner may reuse it */
	unhold(seg, ring, side, gone ? 1u << side : 0);
	errno = saved;
}

void osf_pool_abandon(void *seg, uint32_t ring)
{
	unhold(seg, ring, OSF_SIDE_CLIENT, 3u);
}

/* name_in is osf_pool_name_fd (efd 0) and osf_pool_name_efd (efd 1). */
static int name_in(const void *seg, uint32_t ring, int fd, int efd)
{
	struct region *r;
	uint32_t slot;
	int rfd = -1, *f;

	pool_lock();
	r = find_addr(seg, ring, &slot);
	if (r) {
		f = efd ? &r->efd : &r->fd;
		if (*f < 0)
			*f = fd;
		rfd = *f;
	}
	pool_unlock();
	return rfd;
}

int osf_pool_name_fd(const void *seg, uint32_t ring, int fd)
{
	return name_in(seg, ring, fd, 0);
}

int osf_pool_name_efd(const void *seg, uint32_t ring, int fd)
{
	return name_in(seg, ring, fd, 1);
}

int osf_pool_is_region_fd(int fd)
{
	int i, r = 0;

	if (fd < 0 || !__atomic_load_n(&osf_pool_nregions, __ATOMIC_RELAXED))
		return 0;
	pool_lock();
	for (i = 0; i < osf_pool_nregions && !r; i++)
		r = osf_pool_regions[i].base && (osf_pool_regions[i].fd == fd || osf_pool_regions[i].efd == fd);
	pool_unlock();
	return r;
}

void osf_pool_moved(int old, int nfd)
{
	int i;

	pool_lock();
	for (i = 0; i < osf_pool_nregions; i++)
		if (osf_pool_regions[i].base && osf_pool_regions[i].fd == old)
			osf_pool_regions[i].fd = nfd;
		else if (osf_pool_regions[i].base && osf_pool_regions[i].efd == old)
			osf_pool_regions[i].efd = nfd;
	pool_unlock();
}

/* pool_after_fork: a fork child hands no slot of its parent's regions out
 * (the parent does; the owner pid says so); it unmaps the regions none of
 * its inherited connections uses and closes their memfds, and keeps the
 * memfd of the others (its connections' entries name it). */
OSF_FORK_TEXT static void pool_reset(void) { OSF_RESET(lk, 0); }
OSF_AFTER_FORK(pool_reset, OSF_FORK_RESET);

OSF_FORK_TEXT static void pool_after_fork(void)
{
	int i;

	for (i = 0; i < osf_pool_nregions; i++) {
		struct region *r = &osf_pool_regions[i];
		if (!r->base)
			continue;
		OSF_RESET(r->owner, 0); /* a mapper's is 0: no page copied for it */
		if ((r->fd >= 0 || r->efd >= 0) && !r->nlive &&
		    !named(r->fd) && !named(r->efd)) {
			osf_fdt_close_hidden(r->fd);
			osf_fdt_close_hidden(r->efd);
			r->fd = r->efd = -1;
		}
		if (!r->nlive && r->fd < 0 && r->efd < 0) {
			(void)osf_rawsys(SYS_munmap, (long)r->base, (long)r->bytes, 0, 0, 0, 0);
			region_clear(r);
		}
	}
}
OSF_AFTER_FORK(pool_after_fork, OSF_FORK_RELEASE);
