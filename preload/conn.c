//go:build osf_make

/* conn.c: the life of an offloaded connection in this process: the pool of
 * connection objects, installing one on an fd after a handshake, dups and
 * closes, the mapping of a connection inherited across exec, and the
 * holder counts around fork (an exec osf cannot follow: conn_exec.c).
 *
 * An offloaded connection is the application's fd, which is a connected
 * AF_UNIX stream socket (the "wake socket"), plus a mapped segment with
 * two byte rings (sdp/segment.h), driven by the stream protocol's C side
 * (sdp/side.h). The other preload/conn_*.c files hold what the hooks do
 * with it: conn_io.c the data calls, conn_tcp.c what TCP would answer
 * (options, names, ioctls), conn_poll.c readiness.
 */
#include "conn_priv.h"
#include "kfd.h"
#include "pool.h"
#include "setup.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the pool of connection structs ---------------------------------- */

#define POOL_CHUNK 256

/* Structs come from the free list, else from the untouched rest of the
 * last chunk (carved one at a time: a chunk is ~400 KiB, and linking all
 * of it at once cost a short-lived process ~100 page faults, a quarter of
 * its first connect), else from a new chunk. */
static struct osf_conn *free_list, *chunk_next, *chunk_end;
static int pool_lock;

static void pool_acquire(void)
{
	while (__atomic_exchange_n(&pool_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void pool_release(void) { __atomic_store_n(&pool_lock, 0, __ATOMIC_RELEASE); }

static struct osf_conn *conn_alloc(void)
{
	struct osf_conn *c;

	pool_acquire();
	if (!free_list && chunk_next == chunk_end) {
		struct osf_conn *chunk =
			mmap(NULL, POOL_CHUNK * sizeof(*chunk),
			     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			     -1, 0);
		if (chunk == MAP_FAILED) {
			pool_release();
			return NULL;
		}
		chunk_next = chunk;
		chunk_end = chunk + POOL_CHUNK;
	}
	if (free_list) {
		c = free_list;
		free_list = c->next_free;
	} else {
		c = chunk_next++;
	}
	pool_release();
	return c;
}

static void conn_free(struct osf_conn *c)
{
	pool_acquire();
	c->next_free = free_list;
	free_list = c;
	pool_release();
}

/* conn_init fills a fresh struct (refs still 0) for a mapped segment; an
 * RDMA engine's segment never gives its pages back (its rings are pinned
 * memory the NIC writes). */
static void conn_init(struct osf_conn *c, uint8_t *base, uint32_t ring_bytes,
		      int side, int seg_fd, int wfd, int v6, int rdma)
{
	osf_fault_arm(); /* a bad buffer is EFAULT from now on (fault.c) */
	osf_side_init(&c->s, base, ring_bytes, side, wfd);
	/* The segment's own flag as well as the fd table's transport: a
	 * progress engine writes the rings without the producer's lock. */
	osf_side_set_trim(&c->s, !rdma && !(__atomic_load_n(&osf_seg_hdr(base, ring_bytes)->flags,
							    __ATOMIC_RELAXED) & OSF_SEG_F_RDMA));
	/* The same test: an engine maps positions without the base. */
	c->s.rebase = c->s.trim;
	c->fds = 1;
	c->base = base;
	c->map_bytes = (size_t)osf_seg_bytes(ring_bytes);
	c->seg_fd = seg_fd;
	c->seg_shared = 0;
	c->gone = 0;
	c->hello = NULL;
	c->kfd = 0;
	c->port_fd = -1;
	c->port_kept = 0;
	c->nonblock = 0;
	c->bufset = 0;
	c->v6 = v6;
	memset(c->opts, 0, sizeof(c->opts));
	c->cm_ts = c->cm_inq = 0;
	c->rcvlowat = 1;
	c->peek_off = -1;
	c->zerocopy = c->zc_pending = 0;
	c->zc_next = c->zc_lo = c->zc_hi = 0;
	c->async = 0;
	c->gw = OSF_CONN_GW_NONE;
	c->rtx = NULL;
	c->rtx_gen = 0;
	c->hold_fd = -1;
	c->hold_users = c->hold_closed = c->hold_lock = 0;
	c->rcvtimeo = c->blocked_at = 0;
	c->rtx_look = rdma || (__atomic_load_n(&osf_seg_hdr(base, ring_bytes)->flags,
					       __ATOMIC_RELAXED) & OSF_SEG_F_RDMA)
			      ? OSF_CONN_RTX_LOOKS
			      : 0;
	if (__atomic_load_n(&c->s.trim, __ATOMIC_RELAXED)) {
		c->reap = 0;
		c->reap_at = conn_reap_at(c);
	} else {
		c->reap = OSF_REAP_NEVER;
		c->reap_at = UINT64_MAX;
	}
	__atomic_store_n(&c->refs, 1, __ATOMIC_RELEASE);
}

/* ---- segments unmapped later ---------------------------------------------
 *
 * The last unmap of a segment frees its pages and its memfd: ~10 µs for a
 * small exchange's three pages on a 2-vCPU VM, where an unmap that is not
 * the last costs ~3 µs. Of a connection's two ends, the one that closes
 * first (an HTTP/1.0 server: its client still reads the reply) is not the
 * last unless its peer is quicker, and on a connection churn that peer is
 * the client, on whose time the next connection waits. So a connection
 * closed while its peer still holds the segment (holders of the peer's
 * side, a count the peer's close drops) keeps its mapping (its fds are
 * closed at once: the mapping holds the memfd): the peer's unmap is then
 * the cheap one, and this process pays for the pages when it would wait
 * anyway. Nothing the peer or the kernel sees changes: the wake sockets
 * and the port are closed, the side's holders count dropped, at the
 * application's close, as before; nothing is written to a kept mapping.
 *
 * Kept: at most LATER_MAX mappings of segments whose rings carried at
 * most LATER_BYTES between them (the pages a closed connection keeps
 * alive are few), shm only (an RDMA engine's segment is its own). They
 * are unmapped by the next close in the process, a blocking accept or
 * read about to wait, or a poll/epoll idle trim, once the peer let go or
 * OSF_TRIM_IDLE_MS after the close; the oldest at once when a ninth comes,
 * and one whose close meets the list busy (another thread, or a signal
 * handler's close inside one) is not kept. A process that never closes,
 * waits or polls again keeps them until it exits or execs. A fork child
 * unmaps its copies; a fork while another thread unmaps a due one leaves
 * that one mapped in the child (it left the list first). */
#define LATER_MAX 8
#define LATER_BYTES (64u << 10)

static struct later {
	void *base;
	size_t bytes;
	const struct osf_seg_side *peer; /* in the mapping */
	long long since;
} later[LATER_MAX];
int osf_conn_later_n;
static int later_lock;

/* later_due reports whether kept mapping l may go now. */
static int later_due(const struct later *l, long long now, int all)
{
	return all || !__atomic_load_n(&l->peer->holders, __ATOMIC_ACQUIRE) ||
	       now - l->since > OSF_TRIM_IDLE_MS * 1000000LL;
}

void osf_conn_unmap_due_slow(int all)
{
	struct later go[LATER_MAX];
	long long now = osf_now_ns();
	int i, k = 0, n, saved = errno;

	if (__atomic_exchange_n(&later_lock, 1, __ATOMIC_ACQUIRE))
		return; /* another thread unmaps them */
	n = osf_conn_later_n;
	for (i = 0; i < n;) {
		if (later_due(&later[i], now, all)) {
			go[k++] = later[i];
			later[i] = later[--n];
		} else {
			i++;
		}
	}
	__atomic_store_n(&osf_conn_later_n, n, __ATOMIC_RELAXED);
	__atomic_store_n(&later_lock, 0, __ATOMIC_RELEASE);
	for (i = 0; i < k; i++)
		munmap(go[i].base, go[i].bytes);
	errno = saved;
}

/* conn_ring is c's ring size (its mapping is a segment of it). */
static uint32_t conn_ring(const struct osf_conn *c)
{
	return (uint32_t)((c->map_bytes - OSF_SEG_PAGE) / 2);
}

/* keep_mapped keeps the mapping of closed connection c for later: 1, or 0
 * when it is to be unmapped now. */
static int keep_mapped(struct osf_conn *c)
{
	struct later victim = {0};
	uint64_t tx, rx;
	int n;

	if (!__atomic_load_n(&c->s.trim, __ATOMIC_RELAXED) || /* shm only */
	    !__atomic_load_n(&c->s.peer->holders, __ATOMIC_ACQUIRE))
		return 0; /* the peer let go: this unmap is the last anyway */
	tx = __atomic_load_n(&c->s.tx->head, __ATOMIC_RELAXED);
	rx = __atomic_load_n(&c->s.rx->head, __ATOMIC_RELAXED); /* the peer's word */
	if (tx > LATER_BYTES || rx > LATER_BYTES - tx ||
	    __atomic_exchange_n(&later_lock, 1, __ATOMIC_ACQUIRE))
		return 0;
	n = osf_conn_later_n;
	if (n == LATER_MAX) { /* full: the oldest goes now */
		int i, old = 0;
		for (i = 1; i < n; i++)
			if (later[i].since < later[old].since)
				old = i;
		victim = later[old];
		later[old] = later[--n];
	}
	later[n].base = c->base;
	later[n].bytes = c->map_bytes;
	later[n].peer = c->s.peer;
	later[n].since = osf_now_ns();
	__atomic_store_n(&osf_conn_later_n, n + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&later_lock, 0, __ATOMIC_RELEASE);
	if (victim.base)
		munmap(victim.base, victim.bytes);
	return 1;
}

OSF_FORK_TEXT static void later_after_fork(void)
{
	int i;

	for (i = 0; i < osf_conn_later_n; i++) /* the child's copies */
		munmap(later[i].base, later[i].bytes);
	OSF_RESET(osf_conn_later_n, 0);
	OSF_RESET(later_lock, 0);
}

void osf_conn_destroy(struct osf_conn *c)
{
	int saved = errno;

	if (c->hello) /* never sent (close sends it): the server never saw it */
		osf_conn_hello_drop(c);
	/* Out of the reaper's list first: it may be looking at the rings or
	 * sending a writer's token on the writers' socket. */
	osf_reap_forget(c);
	/* Those whose peer let go since: this close is no one's wait. */
	osf_conn_unmap_due(0);
	if (!c->seg_shared)
		osf_fdt_close_hidden(c->seg_fd);
	osf_fdt_close_hidden(c->s.wfd);
	osf_conn_rdma_unhold(c, 1);
	if (c->port_kept && c->port_fd >= 0)
		osf_port_pass_on(c->port_fd, c);
	else
		osf_fdt_close_hidden(c->port_fd);
	c->port_fd = -1;
	c->port_kept = 0;
	if (osf_pool_slot(c->base, conn_ring(c)) >= 0) { /* a slot: never unmapped */
		osf_seg_release(c->base, conn_ring(c), c->s.side, c->gone);
	} else {
		/* An RDMA segment's progress engine reuses its registered
		 * rings once this side let go everywhere and its QP is gone
		 * (sdp/rdma/recycle.go): the same word and moment as a slot's. */
		struct osf_seg_hdr *h = osf_seg_hdr(c->base, conn_ring(c));
		if (c->gone && (__atomic_load_n(&h->flags, __ATOMIC_RELAXED) & OSF_SEG_F_RDMA))
			__atomic_or_fetch(&h->slot_done, 1u << c->s.side, __ATOMIC_ACQ_REL);
		if (!keep_mapped(c))
			munmap(c->base, c->map_bytes);
	}
	c->base = NULL;
	conn_free(c);
	errno = saved;
}

/* give_port makes pfd e's connection's port socket; kept: a closed
 * listener's (osf_conn_keep_port). */
static void give_port(struct osf_fdt_entry *e, int pfd, int kept)
{
	struct osf_conn *c = conn_get(-1, e);

	if (!c) {
		osf_fdt_close_hidden(pfd);
		return;
	}
	osf_fdt_close_hidden(c->port_fd);
	c->port_fd = pfd;
	c->port_kept = kept;
	conn_put(c);
}

void osf_conn_hold_port(struct osf_fdt_entry *e, int pfd) { give_port(e, pfd, 0); }

void osf_conn_keep_port(struct osf_fdt_entry *e, int pfd) { give_port(e, pfd, 1); }

int osf_conn_port_held(struct osf_fdt_entry *e)
{
	struct osf_conn *c = conn_get(-1, e);
	int held;

	if (!c)
		return 1; /* gone: nothing to give it */
	held = c->port_fd >= 0;
	conn_put(c);
	return held;
}

void osf_conn_setfl(struct osf_fdt_entry *e, long fl)
{
	struct osf_conn *c = conn_get(-1, e);

	if (c) {
		c->nonblock = (fl & O_NONBLOCK) != 0;
		conn_set_async(c, (fl & O_ASYNC) != 0);
		conn_put(c);
	}
}

/* ---- life cycle --------------------------------------------------------------- */

/* release_handed closes what the core handed over and install did not
 * take, and marks it gone in cc. */
static void release_handed(struct osf_core_conn *cc)
{
	if (cc->seg_addr) /* a slot stays taken: a passed one's sender holds it */
		osf_seg_release((void *)(uintptr_t)cc->seg_addr, cc->ring_bytes,
				cc->side, 0);
	if (cc->seg_fd >= 0 && !osf_pool_is_region_fd(cc->seg_fd))
		REAL(close)(cc->seg_fd);
	if (cc->wake_tx_fd >= 0 && !osf_pool_is_region_fd(cc->wake_tx_fd))
		REAL(close)(cc->wake_tx_fd);
	cc->seg_addr = 0;
	cc->seg_fd = cc->wake_tx_fd = -1;
}

/* name_efd is install's region eventfd for cc (wake_tx_efd): the one
 * seg's region names already (cc's copy, a hello's, closed), else cc's,
 * hidden for fd, which the region then names; -1 when seg is no slot. */
static int name_efd(void *seg, struct osf_core_conn *cc, int fd, int hide_how)
{
	int e = osf_pool_name_efd(seg, cc->ring_bytes, -1), h;

	if (e >= 0) {
		if (e != cc->wake_tx_fd)
			osf_fdt_close_hidden(cc->wake_tx_fd);
		return e;
	}
	h = osf_fdt_hide_known(cc->wake_tx_fd, fd, hide_how, cc->wake_tx_ino);
	if (h < 0)
		h = cc->wake_tx_fd;
	e = osf_pool_name_efd(seg, cc->ring_bytes, h);
	if (e != h)
		osf_fdt_close_hidden(h); /* another thread's came first, or no slot */
	return e;
}

int osf_conn_install(int fd, struct osf_core_conn *cc, int role, int cloexec,
		     int nonblock, int how)
{
	struct osf_fdt_entry ent;
	struct osf_conn *c;
	struct stat st;
	int hfd, hwfd, fl, hide_how, slot, shared;
	uint32_t seg_flags;
	void *seg;
	sa_family_t fam;

	c = conn_alloc();
	if (!c) {
		release_handed(cc);
		return OSF_FAIL(ENOMEM);
	}
	fl = (how & OSF_INSTALL_AS_ASKED) ? (nonblock ? O_NONBLOCK : 0)
	     : (how & OSF_INSTALL_FL_OWN) ? O_NONBLOCK
					  : REAL(fcntl)(cc->wake_fd, F_GETFL, NULL);
	if (fl < 0 ||
	    (((fl & O_NONBLOCK) != 0) != (nonblock != 0) && /* else already so */
	     REAL(fcntl)(cc->wake_fd, F_SETFL,
			 (void *)(long)(nonblock ? (fl | O_NONBLOCK)
						 : (fl & ~O_NONBLOCK))) < 0))
		goto fail;
	if (how & OSF_INSTALL_DUP) {
		if (REAL(dup3)(cc->wake_fd, fd, cloexec ? O_CLOEXEC : 0) < 0)
			goto fail;
		REAL(close)(cc->wake_fd);
		cc->wake_fd = -1;
	} else if (!(how & OSF_INSTALL_AS_ASKED) &&
		   REAL(fcntl)(fd, F_SETFD, (void *)(long)(cloexec ? FD_CLOEXEC : 0)) < 0) {
		goto fail;
	}
	/* One window for both and the entry: the hidden fds of an
	 * inheritable connection are made inheritable (no F_SETFD when the
	 * entry accounts for them), and no exec passes them before the entry
	 * does (an exec waits for the window). */
	osf_fdt_high_begin();
	hide_how = ((how & OSF_INSTALL_PLACED) ? OSF_HIDE_PLACED : 0) |
		   (cloexec ? 0 : OSF_HIDE_INHERIT);
	/* A slot's entry names its region's one memfd, hidden already (the
	 * client's own, or the first a hello or hand-off brought here, which
	 * the region then keeps), and its inherit accounting keeps it
	 * inheritable (osf_fdt_set); a later copy is closed. */
	seg = (void *)(uintptr_t)cc->seg_addr;
	hfd = osf_pool_name_fd(seg, cc->ring_bytes, -1);
	if (hfd >= 0 && hfd != cc->seg_fd)
		osf_fdt_close_hidden(cc->seg_fd);
	shared = hfd >= 0;
	if (!shared) /* a region's copy: the inode its check read */
		hfd = osf_fdt_hide_known(cc->seg_fd, fd, hide_how,
					 osf_pool_ino(seg, cc->ring_bytes));
	if (!shared && hfd >= 0 && (slot = osf_pool_name_fd(seg, cc->ring_bytes, hfd)) >= 0) {
		if (slot != hfd) /* another thread's came first */
			osf_fdt_close_hidden(hfd);
		hfd = slot;
		shared = 1;
	}
	if (hfd < 0)
		hfd = cc->seg_fd; /* keep it where it is */
	if (cc->wake_tx_efd) /* the region's, as its memfd */
		hwfd = name_efd(seg, cc, fd, hide_how);
	else if ((hwfd = osf_fdt_hide_for(cc->wake_tx_fd, fd, hide_how)) < 0)
		hwfd = cc->wake_tx_fd;
	memcpy(&fam, cc->peer, sizeof(fam));
	/* Informational, set by the segment's creator before it was shared:
	 * an RDMA progress engine's segments say so, for osfstat. */
	seg_flags = __atomic_load_n(
		&osf_seg_hdr((void *)(uintptr_t)cc->seg_addr, cc->ring_bytes)->flags,
		__ATOMIC_RELAXED);
	conn_init(c, (uint8_t *)(uintptr_t)cc->seg_addr, cc->ring_bytes,
		  cc->side, hfd, cc->wake_tx_efd ? -1 : hwfd, fam == AF_INET6,
		  (seg_flags & OSF_SEG_F_RDMA) != 0);
	if (cc->wake_tx_efd)
		osf_side_use_efd(&c->s, hwfd);
	c->seg_shared = shared;
	cc->seg_addr = 0; /* the connection owns them now */
	cc->seg_fd = cc->wake_tx_fd = -1;
	c->nonblock = nonblock;
	c->kfd = !(how & OSF_INSTALL_KFD)                                      ? 0
		 : role == OSF_ROLE_CLIENT && !(how & OSF_INSTALL_NOPOKE) ? OSF_KFD_CLIENT
									  : 1;
	c->s.kfd = c->kfd != 0;
	__atomic_add_fetch(&c->s.me->holders, 1, __ATOMIC_RELAXED);

	memset(&ent, 0, sizeof(ent));
	ent.kind = OSF_FD_SHM;
	ent.transport = (seg_flags & OSF_SEG_F_RDMA) ? OSF_TP_RDMA : OSF_TP_SHM;
	ent.ops = (seg_flags & OSF_SEG_F_RDMA) ? OSF_OPS_RDMA : OSF_OPS_SHM;
	ent.role = (uint8_t)role;
	ent.flags = (cloexec ? OSF_FDF_CLOEXEC : 0) |
		    (fam == AF_INET6 ? OSF_FDF_V6 : 0) | (shared ? OSF_FDF_REGIONFD : 0) |
		    (cc->wake_tx_efd ? OSF_FDF_REGIONEFD : 0);
	ent.aux_fd = hfd;
	ent.aux2_fd = hwfd;
	ent.rule = cc->rule;
	ent.ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
	ent.image = osf.image;
	ent.priv = (uint64_t)(uintptr_t)c;
	ent.ring_bytes = cc->ring_bytes;
	slot = osf_pool_slot(c->base, cc->ring_bytes);
	if (slot >= 0) { /* whoever adopts this side must hold this socket */
		osf_fdt_set_slot1(&ent, (uint32_t)slot + 1);
		__atomic_store_n(&osf_seg_hdr(c->base, cc->ring_bytes)->slot_ino[c->s.side],
				 ent.ino, __ATOMIC_RELEASE);
	}
	memcpy(ent.local, cc->local, sizeof(ent.local));
	memcpy(ent.peer, cc->peer, sizeof(ent.peer));
	if (osf_fdt_set(fd, &ent) < 0) {
		osf_fdt_high_end();
		conn_put(c); /* unmaps, closes both hidden fds */
		return -1;
	}
	osf_fdt_high_end();
	return 0;
fail:
	conn_free(c);
	release_handed(cc);
	return -1;
}

void osf_conn_dup(struct osf_fdt_entry *e)
{
	struct osf_conn *c = conn_get(-1, e);

	if (!c)
		return;
	__atomic_add_fetch(&c->fds, 1, __ATOMIC_ACQ_REL);
	/* keep the reference: it belongs to the new table entry */
}

void osf_conn_close(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c;
	int locked;

	/* Inherited across exec and never used in this image: map it now, so
	 * that its last close here releases the hidden fds and the holder
	 * count as any other does. */
	if (__atomic_load_n(&e->image, __ATOMIC_ACQUIRE) != osf.image &&
	    osf_conn_rebuild(fd, e) < 0)
		return;
	c = (struct osf_conn *)(uintptr_t)e->priv;
	if (!c)
		return;
	if (__atomic_sub_fetch(&c->fds, 1, __ATOMIC_ACQ_REL) == 0) {
		/* This process drops its last descriptor for this side: a
		 * server that defers accepts a connection that closes (TCP's
		 * FIN ends the deferral too). */
		conn_hello(c);
		osf_conn_cork_closed(c, fd);
		if ((e->flags & OSF_FDF_LINGER) && e->linger_secs == 0)
			__atomic_or_fetch(&c->s.me->flags, OSF_SIDE_RESET,
					  __ATOMIC_ACQ_REL);
		c->gone = __atomic_sub_fetch(&c->s.me->holders, 1, __ATOMIC_RELAXED) == 0;
		osf_debug_pause_us(osf_conn_debug_close_us);
		__atomic_add_fetch(&c->s.me->close_seq, 1, __ATOMIC_ACQ_REL);
		if (c->kfd && c->gone)
			osf_kfd_close(c, fd, (e->flags & OSF_FDF_LINGER) && e->linger_secs == 0);
		osf_conn_rdma_unhold(c, 0);
	}
	/* Under the table lock, as fork's and posix_spawn's walks read
	 * priv and count on c (osf_conn_fork_holders): an entry they see
	 * holding c still holds its reference, so c and its rings stay
	 * mapped and c this connection's while they look. */
	locked = osf_fdt_lock_unheld();
	__atomic_store_n(&e->priv, 0, __ATOMIC_RELEASE);
	if (locked)
		osf_fdt_unlock();
	conn_put(c); /* the table entry's reference */
}

void osf_conn_set_oobinline(struct osf_conn *c, int on)
{
	c->s.oobinline = on;
	if (on)
		__atomic_or_fetch(&c->s.me->flags, OSF_SIDE_OOBINLINE, __ATOMIC_RELAXED);
	else
		__atomic_and_fetch(&c->s.me->flags, ~OSF_SIDE_OOBINLINE, __ATOMIC_RELAXED);
}

/* rebuild maps the segment of an fd inherited across exec, sharing the
 * struct with other fds (dups) of the same connection. */
static int rebuild_lock;

/* same_conn reports whether entry d is of the connection of entry e (a
 * dup): the same segment fd, and for a region's, the same slot and side. */
static int same_conn(const struct osf_fdt_entry *d, const struct osf_fdt_entry *e)
{
	return osf_kind_is_conn(d->kind) && d->aux_fd == e->aux_fd &&
	       osf_fdt_slot1(d) == osf_fdt_slot1(e) && d->role == e->role;
}

/* adopt_dups gives the new struct c of entry e to every other inherited
 * entry of the same connection (same segment fd), each with its
 * reference, so that c counts every fd of this process (the last one's
 * close releases the hidden fds, not the first one's). rebuild_lock is
 * held. */
static void adopt_dups(struct osf_conn *c, struct osf_fdt_entry *e)
{
	struct osf_fdt_entry *d;
	int fd;

	OSF_FDT_FOREACH(fd, d) {
		if (d == e || !same_conn(d, e) ||
		    __atomic_load_n(&d->image, __ATOMIC_ACQUIRE) == osf.image)
			continue;
		__atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
		__atomic_add_fetch(&c->fds, 1, __ATOMIC_ACQ_REL);
		__atomic_store_n(&d->priv, (uint64_t)(uintptr_t)c, __ATOMIC_RELEASE);
		__atomic_store_n(&d->image, osf.image, __ATOMIC_RELEASE);
	}
}

int osf_conn_rebuild(int fd, struct osf_fdt_entry *e)
{
	struct osf_conn *c = NULL;
	struct osf_fdt_entry *d;
	struct stat st;
	void *base;
	int fl, dfd, locked;

	while (__atomic_exchange_n(&rebuild_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
	if (__atomic_load_n(&e->image, __ATOMIC_ACQUIRE) == osf.image)
		goto out;
	locked = osf_fdt_lock_unheld(); /* a dup's close lets go under it */
	OSF_FDT_FOREACH(dfd, d)
		if (same_conn(d, e) && d->image == osf.image && d->priv) {
			c = (struct osf_conn *)(uintptr_t)d->priv;
			__atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
			__atomic_add_fetch(&c->fds, 1, __ATOMIC_ACQ_REL);
			break;
		}
	if (locked)
		osf_fdt_unlock();
	if (!c) {
		int side = e->role == OSF_ROLE_SERVER ? OSF_SIDE_SERVER : OSF_SIDE_CLIENT;
		if (osf_fdt_slot1(e)) {
			/* A slot: refused when it is no longer this
			 * connection's (recycled: another socket's now). */
			base = osf_pool_adopt(e->aux_fd, e->ring_bytes, osf_fdt_slot1(e) - 1u, side,
					      e->ino, (e->flags & OSF_FDF_REGIONFD) != 0);
			if (!base)
				goto fail;
		} else {
			if (!osf_ring_size_ok(e->ring_bytes) || fstat(e->aux_fd, &st) < 0 ||
			    (uint64_t)st.st_size != osf_seg_bytes(e->ring_bytes))
				goto fail;
			base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
				    MAP_SHARED, e->aux_fd, 0);
			if (base == MAP_FAILED)
				goto fail;
		}
		c = conn_alloc();
		if (!c) {
			osf_seg_release(base, e->ring_bytes, side, 0);
			goto fail;
		}
		conn_init(c, base, e->ring_bytes,
			  e->role == OSF_ROLE_SERVER ? OSF_SIDE_SERVER
						     : OSF_SIDE_CLIENT,
			  e->aux_fd, (e->flags & OSF_FDF_REGIONEFD) ? -1 : e->aux2_fd,
			  (e->flags & OSF_FDF_V6) != 0, e->transport == OSF_TP_RDMA);
		if (e->flags & OSF_FDF_REGIONEFD) /* the region's, which it keeps */
			osf_side_use_efd(&c->s, osf_pool_name_efd(base, e->ring_bytes, e->aux2_fd));
		c->seg_shared = (e->flags & OSF_FDF_REGIONFD) != 0;
		fl = fd >= 0 ? REAL(fcntl)(fd, F_GETFL, NULL) : 0;
		c->nonblock = fl > 0 && (fl & O_NONBLOCK);
		if (fl > 0 && (fl & O_ASYNC))
			conn_set_async(c, 1);
		if (fd >= 0) { /* SO_RCVLOWAT, SO_OOBINLINE: the wake socket keeps them */
			socklen_t l = sizeof(c->rcvlowat);
			int v = 0;
			if (REAL(getsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT,
					     &c->rcvlowat, &l) < 0)
				c->rcvlowat = 1;
			l = sizeof(v);
			if (REAL(getsockopt)(fd, SOL_SOCKET, SO_OOBINLINE, &v, &l) == 0)
				osf_conn_set_oobinline(c, v != 0);
		}
		adopt_dups(c, e);
	}
	__atomic_store_n(&e->priv, (uint64_t)(uintptr_t)c, __ATOMIC_RELEASE);
	__atomic_store_n(&e->image, osf.image, __ATOMIC_RELEASE);
out:
	__atomic_store_n(&rebuild_lock, 0, __ATOMIC_RELEASE);
	return 0;
fail:
	__atomic_store_n(&rebuild_lock, 0, __ATOMIC_RELEASE);
	return OSF_FAIL(EBADF);
}

/* fork_seen reports whether c was seen already in this count (set: a
 * hash set of conn pointers on the fork page, cap slots, half used at
 * most), recording it if not. */
OSF_FORK_TEXT static int fork_seen(uintptr_t *set, unsigned cap, struct osf_conn *c)
{
	uintptr_t v = (uintptr_t)c;
	unsigned i = (unsigned)(v >> 6) & (cap - 1);

	while (set[i]) {
		if (set[i] == v)
			return 1;
		i = (i + 1) & (cap - 1);
	}
	set[i] = v;
	return 0;
}

unsigned osf_conn_debug_fork_us;
unsigned osf_conn_debug_close_us;

OSF_FORK_TEXT void osf_conn_fork_holders(int delta)
{
	static uint32_t round;
	struct osf_fdt_entry *e;
	unsigned cap, n = 0;
	uintptr_t *set;
	int fd;

	if (!osf_fdt_offloaded())
		return; /* no connection */
	/* Each connection once, its dups not again: up to half the fork
	 * page's set, the set tells (the parent writes nothing a fork
	 * write-protected, which would be a page fault per page); beyond,
	 * a mark in each connection. */
	set = osf_fdt_fork_set(&cap);
	OSF_FDT_FOREACH(fd, e)
		n += osf_kind_is_conn(e->kind);
	if (n <= cap / 2)
		memset(set, 0, cap * sizeof(*set));
	else
		round++;
	OSF_FDT_FOREACH(fd, e) {
		struct osf_conn *c;
		if (!osf_kind_is_conn(e->kind) || e->image != osf.image || !e->priv)
			continue;
		c = (struct osf_conn *)(uintptr_t)e->priv;
		osf_debug_pause_us(osf_conn_debug_fork_us);
		if (n <= cap / 2) {
			if (fork_seen(set, cap, c))
				continue; /* a dup of one already counted */
		} else {
			if (c->fork_round == round)
				continue;
			c->fork_round = round;
		}
		__atomic_add_fetch(&c->s.me->holders, (uint32_t)delta,
				   __ATOMIC_RELAXED);
	}
}

void osf_conn_spawn_holders(const int *fds, int nfds, int all, int delta)
{
	static uint32_t round;
	struct osf_fdt_entry *e;
	int fd, i, locked;

	if (!osf_fdt_offloaded())
		return;
	locked = osf_fdt_lock_unheld(); /* as fork's (osf_conn_close) */
	round++;
	OSF_FDT_FOREACH(fd, e) {
		struct osf_conn *c;
		int take = all || !(__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_CLOEXEC);
		if (!osf_kind_is_conn(e->kind) || e->image != osf.image || !e->priv)
			continue;
		for (i = 0; !take && i < nfds; i++)
			take = fds[i] == fd;
		if (!take)
			continue;
		c = (struct osf_conn *)(uintptr_t)e->priv;
		if (c->spawn_round == round)
			continue; /* a dup of one already counted */
		c->spawn_round = round;
		__atomic_add_fetch(&c->s.me->holders, (uint32_t)delta, __ATOMIC_RELAXED);
	}
	if (locked)
		osf_fdt_unlock();
}

void osf_conn_hidden_moved(int old, int nfd)
{
	struct osf_fdt_entry *e;
	int fd;

	OSF_FDT_FOREACH(fd, e) {
		struct osf_conn *c;
		int o = old;
		if (!osf_kind_is_conn(e->kind) || e->image != osf.image || !e->priv)
			continue;
		/* Type-stable: a struct reused meanwhile cannot hold
		 * old, which is still open as the hidden fd. */
		c = (struct osf_conn *)(uintptr_t)e->priv;
		__atomic_compare_exchange_n(&c->seg_fd, &o, nfd, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		o = old;
		__atomic_compare_exchange_n(&c->s.wfd, &o, nfd, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		o = old;
		__atomic_compare_exchange_n(&c->s.efd, &o, nfd, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		o = old;
		__atomic_compare_exchange_n(&c->port_fd, &o, nfd, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		o = old;
		__atomic_compare_exchange_n(&c->hold_fd, &o, nfd, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
	}
	osf_pool_moved(old, nfd);
}

/* child_after_fork resets per-thread and pool state in a fork child (its
 * only thread is the one that forked; the segment locks' too, sdp/lock.h)
 * and unmaps its copies of the segments the parent unmaps later. */
OSF_FORK_TEXT static void child_after_fork(void)
{
	osf_lock_after_fork();
	OSF_RESET(pool_lock, 0);
	OSF_RESET(rebuild_lock, 0);
	OSF_RESET(osf_hello_lk, 0);
	OSF_RESET(osf_hello_thread, 0);
	if (osf_hello_n)
		osf_conn_hello_after_fork();
	later_after_fork();
}
OSF_AFTER_FORK(child_after_fork, OSF_FORK_RESET);
