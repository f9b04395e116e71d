//go:build osf_make

/* setup_kfd.c: the server's side of OSF_SHM_KFD's set-up (preload/kfd.c,
 * docs/ARCHITECTURE.md "The kernel TCP socket as the connection's fd"):
 * the hellos kept until their kernel connection is accepted, and the
 * clients' links they come on. The park lock of setup_accept.c guards
 * both. */
#include "setup_priv.h"
#define OSF_CENSUS_SYS(name) REAL(name)
#include "../sdp/census.h"
#include "../sdp/setup.h"
#include "kfd.h"
#include "pool.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>

/* ---- OSF_SHM_KFD: hellos waiting for their kernel connection ---------- */

/* A client sends its hello (OSF_HELLO_F_KFD) to the companion before the
 * kernel's connect, so the hello is queued there by the time the kernel
 * connection can be accepted; the companion's queue is read in order, so
 * the hellos of connections not accepted yet wait here (under the park
 * lock), their fds hidden, until the accept of theirs (kfd_expire_locked).
 * Only the process that read a hello can match it: a listener shared by
 * a fork family keeps its hellos in the family's store instead
 * (setup_fam.c); one shared otherwise is a limit (LIMITS.md). */
#define KFD_MAX 256

static struct {
	int n;
	struct kfd_hello {
		int aux_fd;
		struct ip key; /* the client's address (unmapped) and port */
		uid_t by;      /* who sent it (its link's SO_PEERCRED) */
		long long since;
		struct osf_core_conn cc;
	} h[KFD_MAX];
} kfdq;

/* kfd_forget_locked drops kept hello i; gone: for good (never accepted:
 * the server side lets go of the slot, and its client reads a reset),
 * else a fork child's copy (its parent keeps it). */
OSF_FORK_TEXT static void kfd_forget_locked(int i, int gone)
{
	setup_kfd_let_go(&kfdq.h[i].cc, gone);
	kfdq.h[i] = kfdq.h[--kfdq.n];
}

OSF_FORK_TEXT void setup_kfd_let_go(struct osf_core_conn *cc, int gone)
{
	if (gone) {
		struct osf_seg_hdr *h = osf_seg_hdr((void *)(uintptr_t)cc->seg_addr,
						    cc->ring_bytes);
		__atomic_or_fetch(&h->side[OSF_SIDE_SERVER].flags, OSF_SIDE_RESET,
				  __ATOMIC_ACQ_REL);
		__atomic_or_fetch(&h->slot_done, 1u << OSF_SIDE_SERVER, __ATOMIC_ACQ_REL);
	}
	osf_seg_release((void *)(uintptr_t)cc->seg_addr, cc->ring_bytes, OSF_SIDE_SERVER, 0);
	osf_fdt_close_hidden(cc->seg_fd);
	osf_fdt_close_hidden(cc->wake_tx_fd);
}

int setup_kfd_client_gone(const struct osf_core_conn *cc)
{
	const struct osf_seg_hdr *g = osf_seg_hdr((void *)(uintptr_t)cc->seg_addr,
						  cc->ring_bytes);

	return (__atomic_load_n(&g->slot_done, __ATOMIC_ACQUIRE) & (1u << OSF_SIDE_CLIENT)) ||
	       (!__atomic_load_n(&g->side[OSF_SIDE_CLIENT].holders, __ATOMIC_ACQUIRE) &&
		__atomic_load_n(&g->side[OSF_SIDE_CLIENT].close_seq, __ATOMIC_ACQUIRE));
}

/* kfd_dead reports whether kept hello h's client let go of its side
 * (its connect failed, or it closed): its kernel connection, if any, is
 * queued no more. The words are the client's: it can only hurry the end
 * of its own connection. */
static int kfd_dead(const struct kfd_hello *h)
{
	const struct osf_seg_hdr *g = osf_seg_hdr((void *)(uintptr_t)h->cc.seg_addr,
						  h->cc.ring_bytes);

	if (__atomic_load_n(&g->side[OSF_SIDE_CLIENT].flags, __ATOMIC_ACQUIRE) & OSF_SIDE_KERNEL)
		return 0; /* kept to tell its accept (kfd_find) */
	return setup_kfd_client_gone(&h->cc);
}

/* kfd_expire_locked drops the hellos whose client let go, and those kept
 * longer than KFD_KEEP_S (a connection queued that long in the kernel's
 * backlog then stays on kernel TCP, its client's bytes in the ring: a
 * limit, LIMITS.md). */
#define KFD_KEEP_S 60

static void kfd_expire_locked(long long now)
{
	int i;

	for (i = 0; i < kfdq.n;)
		if (now - kfdq.h[i].since > KFD_KEEP_S * 1000000000LL || kfd_dead(&kfdq.h[i]))
			kfd_forget_locked(i, 1);
		else
			i++;
}

int setup_kfd_fd_named(const void *seg, uint32_t ring, int *fd, int efd)
{
	int r;

	if (*fd < 0)
		return 0;
	r = efd ? osf_pool_name_efd(seg, ring, -1) : osf_pool_name_fd(seg, ring, -1);
	if (r < 0 || r == *fd)
		return 0;
	REAL(close)(*fd);
	*fd = -1;
	return 1;
}

/* kfd_keep_fd keeps fd, a hello's region memfd (efd 0) or writers'
 * eventfd (efd 1) for a slot seg of ring: a region holds one of each for
 * all of its connections here, so fd is closed when it has one, else
 * hidden and given to it (-1: the region's); a segment's own is kept
 * hidden (returned). A kept hello then holds no fd of its own (a client
 * that connects many times before the accepts come costs none per
 * connection: RLIMIT_NOFILE soft = hard, LIMITS "Descriptors"). */
static int kfd_keep_fd(void *seg, uint32_t ring, int fd, int lfd, int efd)
{
	int h, r;

	if (fd < 0 || setup_kfd_fd_named(seg, ring, &fd, efd))
		return fd;
	h = osf_fdt_hide(fd, lfd);
	if (h < 0)
		return fd;
	r = efd ? osf_pool_name_efd(seg, ring, h) : osf_pool_name_fd(seg, ring, h);
	if (r < 0)
		return h; /* no slot */
	if (r != h)
		osf_fdt_close_hidden(h); /* another thread's came first */
	return -1;
}

/* setup_kfd_put_locked keeps the hello taken into cc (from a link of companion
 * aux_fd) under key. */
void setup_kfd_put_locked(int aux_fd, int lfd, struct osf_core_conn *cc,
			   const struct ip *key, uid_t by)
{
	long long now = osf_now_ns();
	void *seg = (void *)(uintptr_t)cc->seg_addr;
	int hw, i, old = 0, own = -1, mine = 0;

	cc->seg_fd = kfd_keep_fd(seg, cc->ring_bytes, cc->seg_fd, lfd, 0);
	if (cc->wake_tx_efd) {
		cc->wake_tx_fd = kfd_keep_fd(seg, cc->ring_bytes, cc->wake_tx_fd, lfd, 1);
	} else {
		hw = osf_fdt_hide(cc->wake_tx_fd, lfd);
		cc->wake_tx_fd = hw < 0 ? cc->wake_tx_fd : hw;
	}
	cc->wake_fd = -1;
	kfd_expire_locked(now);
	if (kfdq.n == KFD_MAX) {
		/* Full: the oldest, unless its sender holds half the table
		 * or more, then the oldest of its own: a user who floods
		 * hellos for connections it never makes (hostile.c claim)
		 * crowds out only its own, never the hellos other users'
		 * clients sent ahead of their connections. */
		for (i = 0; i < kfdq.n; i++) {
			if (kfdq.h[i].since < kfdq.h[old].since)
				old = i;
			if (kfdq.h[i].by == by && (own < 0 || kfdq.h[i].since < kfdq.h[own].since))
				own = i;
			mine += kfdq.h[i].by == by;
		}
		kfd_forget_locked(mine >= KFD_MAX / 2 ? own : old, 1);
	}
	kfdq.h[kfdq.n].aux_fd = aux_fd;
	kfdq.h[kfdq.n].key = *key;
	kfdq.h[kfdq.n].by = by;
	kfdq.h[kfdq.n].since = now;
	kfdq.h[kfdq.n].cc = *cc;
	kfdq.n++;
	memset(cc, 0, sizeof(*cc));
	cc->wake_fd = cc->seg_fd = cc->wake_tx_fd = -1;
}

int setup_kfd_owner_ok(struct kfd_owner *o, uid_t by)
{
	uint8_t p[16], l[16];
	int saved = errno;

	if (by == 0)
		return 1; /* root's: root may bind any port anyway */
	if (o->state == 0) {
		o->state = -1;
		if (o->peer.v4 && o->local.v4 &&
		    osf_census_conn_uid(AF_INET, o->peer.a, o->peer.port, o->local.a,
					o->local.port, &o->uid) == 0) {
			o->state = 1;
		} else {
			/* IPv6, or an IPv6 socket's v4-mapped ends */
			memcpy(p, o->peer.a, 16);
			memcpy(l, o->local.a, 16);
			if (o->peer.v4)
				memcpy(p, osf_name_v4mapped, 12), memcpy(p + 12, o->peer.a, 4);
			if (o->local.v4)
				memcpy(l, osf_name_v4mapped, 12), memcpy(l + 12, o->local.a, 4);
			if (osf_census_conn_uid(AF_INET6, p, o->peer.port, l, o->local.port,
						&o->uid) == 0)
				o->state = 1;
		}
		errno = saved;
	}
	return o->state == 1 && o->uid == by;
}

/* kfd_find takes the kept hello of companion aux_fd under key, sent by
 * the owner of the connection's client end (o), into cc (its fds out of
 * the hidden table, above the program's limit): 0, -1 when there is
 * none, or 1 when its client's connection went to kernel TCP
 * (OSF_SIDE_KERNEL: the hello is let go). A hello under key from anyone
 * else is left alone: a claim on a port another's connection came from,
 * which expires as any kept hello does. */
static int kfd_find(int aux_fd, const struct ip *key, struct kfd_owner *o,
		    struct osf_core_conn *cc)
{
	const struct osf_seg_hdr *g;
	int i, gone;

	setup_park_lock();
	/* A hello whose client let go names a port the kernel may have
	 * given to a new connection since, whose hello is then here too: the
	 * gone one is this connection's only when no other names the port
	 * (its client closed before this accept). */
	for (i = 0, gone = -1; i < kfdq.n; i++) {
		const struct ip *k = &kfdq.h[i].key;
		if (kfdq.h[i].aux_fd != aux_fd || k->v4 != key->v4 || k->port != key->port ||
		    memcmp(k->a, key->a, k->v4 ? 4 : 16) || !setup_kfd_owner_ok(o, kfdq.h[i].by))
			continue;
		if (!setup_kfd_client_gone(&kfdq.h[i].cc))
			break;
		if (gone < 0)
			gone = i;
	}
	if (i < kfdq.n && gone >= 0) { /* the live one's: the gone one is stale */
		kfd_forget_locked(gone, 1);
		if (i == kfdq.n) /* moved into gone's place */
			i = gone;
	} else if (i == kfdq.n && gone >= 0) {
		i = gone;
	}
	if (i == kfdq.n) {
		kfd_expire_locked(osf_now_ns());
		setup_park_unlock();
		return -1;
	}
	g = osf_seg_hdr((void *)(uintptr_t)kfdq.h[i].cc.seg_addr, kfdq.h[i].cc.ring_bytes);
	if (__atomic_load_n(&g->side[OSF_SIDE_CLIENT].flags, __ATOMIC_ACQUIRE) & OSF_SIDE_KERNEL) {
		kfd_forget_locked(i, 1);
		setup_park_unlock();
		return 1;
	}
	*cc = kfdq.h[i].cc;
	kfdq.h[i] = kfdq.h[--kfdq.n];
	setup_park_unlock();
	/* A slot's fds are its region's (kfd_keep_fd): none to move. */
	if (cc->seg_fd >= 0)
		cc->seg_fd = setup_unhide(cc->seg_fd, 1);
	if (cc->wake_tx_fd >= 0)
		cc->wake_tx_fd = setup_unhide(cc->wake_tx_fd, 1);
	return 0;
}

/* ---- OSF_SHM_KFD: links -------------------------------------------------- */

/* A client process sends the hellos of all its connections to a listener
 * on one companion connection, its link (setup_link.c); the links a
 * companion's owner accepted are kept here (under the park lock, setup_park_lock), their fds
 * hidden, and read when an accept looks for a hello. A link that ends
 * (its client closed it: after the hellos it carried) or carries
 * anything but hellos of OSF_SHM_KFD clients is closed, and the regions
 * its client process brought let go of their fds and mapping once no
 * connection of theirs lives here (osf_pool_peer_gone). Besides at an
 * accept, a link's end is seen where the program waits on its listener:
 * selectmux's waits on an OSF_SHM_KFD listener watch the links too
 * (host.h osf_links_copy, osf_mux_link_added), so that a server that
 * takes no more connections closes them (osf_setup_kfd_links_ended). */
#define LINK_MAX 256

static struct {
	int n;
	struct {
		int aux_fd, fd;
		struct ucred cr; /* its client's (SO_PEERCRED, read once) */
	} *l; /* LINK_MAX of them, made at the first (a process without the
		 switch, and its fork children, touch no page of them) */
} links;

int osf_setup_kfd_links_copy(int *fds, int max)
{
	int i, n = 0, saved = errno;

	if (!__atomic_load_n(&links.n, __ATOMIC_RELAXED))
		return 0; /* a poll's look: no lock when there is none */
	setup_park_lock();
	for (i = 0; i < links.n && n < max; i++)
		fds[n++] = links.l[i].fd;
	setup_park_unlock();
	errno = saved;
	return n;
}

/* link_forget_locked closes link i (its client's next hello fails with
 * EPIPE and it dials a new one; hellos left unread on it are lost: their
 * connections are reset at accept). */
OSF_FORK_TEXT static void link_forget_locked(int i)
{
	osf_fdt_close_hidden(links.l[i].fd);
	links.l[i] = links.l[--links.n];
}

/* pid_linked_locked reports whether a link other than link i came from
 * process pid. */
static int pid_linked_locked(pid_t pid, int i)
{
	int j;

	for (j = 0; j < links.n; j++)
		if (j != i && links.l[j].cr.pid == pid)
			return 1;
	return 0;
}

/* conn_marked reports whether the SYN of o's connection carried the mark
 * of a client that sent a hello, or did not say (no SYN saved). */
static int conn_marked(struct kfd_owner *o)
{
	if (!o || !o->marked)
		return 1;
	if (*o->marked == -2)
		*o->marked = osf_kfd_marked(o->nfd);
	return *o->marked != 0;
}

/* link_read_locked takes the hellos queued on link i into the kept ones,
 * never waiting, up to the one under want (NULL: all that fit): 1 when
 * that one was taken, 0 when the link has nothing more now, or when the
 * read is for no hello sure to come (want NULL, or o's connection's SYN
 * unmarked) and the kept ones are KFD_MAX or (want NULL, a tight limit)
 * osf could not afford a new region's two fds; -1 when it ended or was
 * bad (closed and forgotten: slot i holds another link now). A hello of
 * a client without the switch is let go (its client reads a reset:
 * LIMITS.md). Only the accept of a connection whose hello may come lets
 * a new one push the oldest out (setup_kfd_put_locked, against floods).
 * A client far ahead of its server's accepts, its link full at times
 * (those connections kernel TCP, unmarked), had the accept of such a
 * connection read the whole link for it: the oldest kept hellos, of the
 * connections next in the kernel's backlog, were pushed out, and each of
 * those accepts waited for its hello, reset it, and read on
 * (TestFdBudgetSoftEqualsHard under OSF_TEST_SHM_KFD=1 with CPU hogs: the
 * server hung about one run in 75). */
static int link_read_locked(int lfd, int i, const struct osf_core_accept_in *in,
			    const struct ip *want, struct kfd_owner *o)
{
	struct osf_core_conn cc;
	struct ip kfd;
	uid_t by = 0;
	int n, rc;

	for (n = 0; n < KFD_MAX && osf_fdt_fds_free(3); n++) {
		if (kfdq.n == KFD_MAX ? !want || !conn_marked(o)
				      : !want && osf_fdt_tight_seen() && !osf_fdt_budget_ok(2))
			return 0;
		rc = setup_take_hello(links.l[i].fd, &links.l[i].cr, in, &cc, &kfd, &by);
		if (rc == EAGAIN)
			return 0;
		if (rc == 0 && kfd.port) {
			setup_kfd_put_locked(links.l[i].aux_fd, lfd, &cc, &kfd, by);
			if (want && kfd.v4 == want->v4 && kfd.port == want->port &&
			    !memcmp(kfd.a, want->a, kfd.v4 ? 4 : 16) && setup_kfd_owner_ok(o, by))
				return 1;
			continue;
		}
		if (rc == 0) {
			osf_seg_release((void *)(uintptr_t)cc.seg_addr, cc.ring_bytes,
					OSF_SIDE_SERVER, 1);
			REAL(close)(cc.seg_fd);
			REAL(close)(cc.wake_tx_fd);
		}
		/* Its client closed it (it ended), or it was bad: what its
		 * regions keep goes once no connection of theirs lives,
		 * unless another link of its process is here (a thread's
		 * second link, closed after its hello: setup_link.c). */
		if (links.l[i].cr.pid && !pid_linked_locked(links.l[i].cr.pid, i))
			osf_pool_peer_gone(links.l[i].cr.pid);
		link_forget_locked(i);
		return -1;
	}
	return 0;
}

void setup_kfd_link_note(int fd, int lfd)
{
	struct setup_link_note m = {SETUP_LINK_NOTE_MAGIC, 0, 0};
	int defer = 0, saved = errno;
	socklen_t l = sizeof(defer);

	/* Each region of the client's costs this process two fds of the
	 * program's budget when its RLIMIT_NOFILE has no room above it,
	 * and a client process with room makes one per OSF_REGION_SLOTS
	 * connections: ask for a wide one. */
	if (osf.shm_efd)
		m.slots = (uint32_t)osf_fdt_tight_limit();
	if (lfd < 0 || REAL(getsockopt)(lfd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, &l) < 0 ||
	    defer)
		m.flags |= SETUP_LINK_NOTE_DEFER;
	defer = 0;
	l = sizeof(defer);
	/* A tight server takes its hellos before the SYN, as it was
	 * measured at its limit (TestFdBudgetSoftEqualsHard). */
	if (!m.slots && lfd >= 0 &&
	    REAL(getsockopt)(lfd, IPPROTO_TCP, TCP_SAVE_SYN, &defer, &l) == 0 && defer == 1)
		m.flags |= SETUP_LINK_NOTE_SYN;
	/* Best effort: a full link, or a client that never reads it,
	 * costs nothing but its regions and tokens. */
	(void)REAL(send)(fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
	errno = saved;
}

/* link_add_locked keeps cfd, just accepted from companion aux_fd, as a
 * link (hidden): its index, or -1 (cfd closed). With the table full the
 * oldest link is read out and closed. */
static int link_add_locked(int lfd, int aux_fd, int cfd, const struct osf_core_accept_in *in)
{
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	int h;

	if (!links.l)
		links.l = calloc(LINK_MAX, sizeof(*links.l));
	h = links.l && REAL(getsockopt)(cfd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0
		    ? osf_fdt_hide(cfd, lfd) : -1;
	if (h < 0) {
		REAL(close)(cfd);
		return -1;
	}
	if (links.n == LINK_MAX && link_read_locked(lfd, 0, in, NULL, NULL) >= 0)
		link_forget_locked(0);
	links.l[links.n].aux_fd = aux_fd;
	links.l[links.n].fd = h;
	links.l[links.n].cr = cr;
	setup_kfd_link_note(h, lfd);
	osf_mux_link_added(h); /* the epolls watching links (park, then mux locks) */
	return links.n++;
}

/* budget_shut shuts companion aux_fd when the program's RLIMIT_NOFILE
 * has no room above it (soft = hard) and osf could not hold one more
 * client process's fds (a link and a region's two: SETUP_CLIENT_FDS)
 * after the next one's within OSF_FDT_TIGHT_CAP: new client processes
 * then find no companion and connect by kernel TCP, deciding before
 * their SYN, while the links queued already (their clients committed)
 * are still accepted and served, at most the companion's backlog beyond
 * the cap. record (the park lock held, a listener of this process
 * alone): budget_reopen opens it again once osf holds few enough. */
#define BSHUT_MAX 8
static struct {
	int n;
	pid_t pid;        /* the process that shut them: a fork child's
			     listener is its parent's too, never opened
			     again there (no write at the fork: a page
			     fault of every child) */
	long long looked; /* budget_reopen's last look (osf_now_ns) */
	int fd[BSHUT_MAX];
} bshut;

static void budget_shut(int aux_fd, int record)
{
	int i;

	/* The limit the last window read (accepts open windows): no
	 * system call per accept where it has room or is large. */
	if (!osf.shm_efd || !osf_fdt_tight_seen() || osf_fdt_budget_ok(2 * SETUP_CLIENT_FDS))
		return;
	(void)REAL(shutdown)(aux_fd, SHUT_RDWR);
	if (record && bshut.pid != osf_pid()) {
		bshut.n = 0;
		bshut.pid = osf_pid();
	}
	for (i = 0; record && i < bshut.n && bshut.fd[i] != aux_fd; i++)
		;
	if (record && i == bshut.n && bshut.n < BSHUT_MAX)
		bshut.fd[bshut.n++] = aux_fd;
}

/* budget_reopen_locked opens companion aux_fd of listener lfd, which
 * budget_shut shut, again when osf holds few enough fds for two client
 * processes, looking at most every 1 ms: the links still queued on it
 * are taken first (none can queue since it was shut; their hellos kept)
 * and those of client processes gone are closed,
 * then a socket of the same kind takes its number (dup3, so that the
 * number is never free for another thread) with its close-on-exec flag,
 * then its name (the shut one, its last holder gone, freed it) and
 * listens. A bind that fails (another process holds the shut one) leaves
 * an unbound socket: still refused, as shut. The park lock is held. */
static void budget_reopen_locked(int lfd, int aux_fd, const struct osf_core_accept_in *in)
{
	struct sockaddr_un sun;
	socklen_t sl = sizeof(sun);
	struct osf_fdt_entry *e;
	long long now = osf_now_ns();
	int i, s, fl, owner, n;

	for (i = 0; i < bshut.n && bshut.fd[i] != aux_fd; i++)
		;
	if (i == bshut.n || now - bshut.looked < 1000000LL)
		return;
	bshut.looked = now;
	for (n = 0; n < LINK_MAX; n++) {
		osf_fdt_high_begin();
		s = REAL(accept4)(aux_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		osf_fdt_high_end();
		if (s < 0 && errno != EAGAIN && errno != EINVAL)
			return; /* EMFILE: not drained, look again later */
		if (s < 0)
			break;
		if ((s = link_add_locked(lfd, aux_fd, s, in)) >= 0)
			(void)link_read_locked(lfd, s, in, NULL, NULL);
	}
	for (i = 0; i < links.n;) /* those of client processes gone end here */
		i += links.l[i].aux_fd != aux_fd || link_read_locked(lfd, i, in, NULL, NULL) >= 0;
	if (n == LINK_MAX || !osf_fdt_budget_ok(2 * SETUP_CLIENT_FDS))
		return;
	for (i = 0; i < bshut.n && bshut.fd[i] != aux_fd; i++)
		;
	bshut.fd[i] = bshut.fd[--bshut.n];
	e = osf_fdt_lookup(aux_fd);
	owner = e && e->kind == OSF_FD_HIDDEN ? e->owner_fd : lfd;
	if (REAL(getsockname)(aux_fd, (struct sockaddr *)&sun, &sl) < 0 ||
	    sl <= offsetof(struct sockaddr_un, sun_path) + 1 ||
	    (fl = REAL(fcntl)(aux_fd, F_GETFD, NULL)) < 0)
		return;
	osf_fdt_high_begin();
	s = REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	osf_fdt_high_end();
	if (s < 0)
		return;
	if (REAL(dup3)(s, aux_fd, (fl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		REAL(close)(s);
		return;
	}
	REAL(close)(s);
	(void)osf_fdt_keep_hidden(aux_fd, owner); /* its inode now */
	if (REAL(bind)(aux_fd, (struct sockaddr *)&sun, sl) == 0)
		(void)REAL(listen)(aux_fd, SOMAXCONN);
}

/* budget_reopen opens companion aux_fd again when budget_shut shut it and
 * osf holds few enough fds now (budget_reopen_locked); one load when
 * none is shut. */
static void budget_reopen(int lfd, int aux_fd, const struct osf_core_accept_in *in)
{
	int saved = errno;
	struct osf_fdt_entry *e;

	if (!__atomic_load_n(&bshut.n, __ATOMIC_RELAXED) || bshut.pid != osf_pid())
		return;
	/* Shared with another process (forked, spawned, passed): it may
	 * hold the shut one, or accept a connection whose hello this one
	 * would read. */
	e = osf_fdt_lookup(lfd);
	if (!e || (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) &
		   (OSF_FDF_SHARED | OSF_FDF_KFDSHUT | OSF_FDF_EXECSHARED)) ||
	    osf_setup_kfd_family(aux_fd))
		return;
	setup_park_lock();
	budget_reopen_locked(lfd, aux_fd, in);
	setup_park_unlock();
	errno = saved;
}

/* kfd_fill reads, never waiting, the hellos queued on companion aux_fd's
 * links, then on the links it has queued, up to the one under want
 * (NULL: all). A client sends its hello before its SYN, so the hello of
 * an accepted connection is queued by then. */
static void kfd_fill(int lfd, int aux_fd, const struct osf_core_accept_in *in,
		     const struct ip *want, struct kfd_owner *o)
{
	int i, n, cfd;

	setup_park_lock();
	for (i = 0; i < links.n;) {
		int r = links.l[i].aux_fd == aux_fd ? link_read_locked(lfd, i, in, want, o) : 0;
		if (r == 1)
			goto out;
		i += r == 0;
	}
	budget_shut(aux_fd, 1);
	for (n = 0; n < LINK_MAX && osf_fdt_fds_free(3); n++) {
		/* In a window: the program's last free number below its
		 * limit may be its connection's (link_add_locked hides the
		 * link above it). */
		osf_fdt_high_begin();
		cfd = REAL(accept4)(aux_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		osf_fdt_high_end();
		if (cfd < 0)
			break;
		i = link_add_locked(lfd, aux_fd, cfd, in);
		if (i >= 0 && link_read_locked(lfd, i, in, want, o) == 1)
			break;
	}
out:
	setup_park_unlock();
}

int setup_kfd_link_pop_locked(int aux_fd)
{
	int i, fd;

	for (i = 0; i < links.n; i++)
		if (links.l[i].aux_fd == aux_fd) {
			fd = links.l[i].fd;
			links.l[i] = links.l[--links.n];
			return fd;
		}
	return -1;
}

/* links_shut shuts companion aux_fd's links: their clients' next hellos
 * fail (EPIPE) and they dial anew, where the companion, shut too, refuses
 * them; the park lock is held. */
static void links_shut_locked(int aux_fd)
{
	int i;

	for (i = 0; i < links.n; i++)
		if (links.l[i].aux_fd == aux_fd)
			(void)REAL(shutdown)(links.l[i].fd, SHUT_RDWR);
}

/* kfd_poll_fds puts into p (at most max) what a hello for companion
 * aux_fd's listener may come on next: the companion (a new link) and,
 * without a family's store, the links this process keeps. */
static int kfd_poll_fds(int aux_fd, int fam, int comp, struct pollfd *p, int max)
{
	int i, n = 0;

	p[n++] = (struct pollfd){comp ? aux_fd : -1, POLLIN, 0};
	if (fam)
		return n;
	setup_park_lock();
	for (i = 0; i < links.n && n < max; i++)
		if (links.l[i].aux_fd == aux_fd)
			p[n++] = (struct pollfd){links.l[i].fd, POLLIN, 0};
	setup_park_unlock();
	return n;
}

/* KFD_YIELDS: the looks a wait for a late hello makes between yields of
 * the CPU before it sleeps: its client, on this CPU or another, sends
 * the hello right after its connect returned. KFD_POLL_FDS bounds the
 * links it sleeps on. KFD_UNSAVED_MS bounds the wait when the kernel
 * kept no SYN (SYN cookies): the client may be one without the switch,
 * which sends no hello. */
#define KFD_YIELDS 8
#define KFD_POLL_FDS 32
#define KFD_UNSAVED_MS 2

int osf_setup_kfd_take(int lfd, int aux_fd, const struct osf_core_accept_in *in,
		       const uint8_t peer[28], const uint8_t local[28], int *marked, int nfd,
		       struct osf_core_conn *cc)
{
	struct kfd_owner o = {0};
	struct pollfd p[1 + KFD_POLL_FDS];
	struct timespec ts = {0, 0};
	long long end = 0, now;
	struct ip key;
	int r, i, n, fam, hup, wait_ms, comp = 1;

	pthread_once(&setup_cfg.once, setup_cfg_load);
	/* Before the park lock, the family's mutex and the fd window: the
	 * core's loading thread waits for the window's limit lock, and
	 * took_hello's load within it waited 5 s (CORE_LOAD_TIMEOUT_MS),
	 * the family's other accepts resetting their connections meanwhile. */
	setup_debug_core();
	if (!setup_get_sockaddr(peer, &key) || !setup_get_sockaddr(local, &o.local))
		return -1;
	key = setup_ip_unmap(key);
	o.peer = key;
	o.local = setup_ip_unmap(o.local);
	o.nfd = nfd;
	o.marked = marked;
	budget_reopen(lfd, aux_fd, in);
	r = kfd_find(aux_fd, &key, &o, cc);
	if (r >= 0)
		return r;
	/* The mark is asked for only when the hello is not here: a
	 * process's own links are read first (no more than asking, when
	 * it has none); a family's store only for a marked connection. */
	fam = osf_setup_kfd_family(aux_fd);
	if (!fam) {
		kfd_fill(lfd, aux_fd, in, &key, &o);
		r = kfd_find(aux_fd, &key, &o, cc);
		if (r >= 0)
			return r;
	}
	if (*marked == -2)
		*marked = osf_kfd_marked(nfd);
	if (!*marked)
		return -1;
	if (fam)
		budget_shut(aux_fd, 0);
	/* A client that did not bind its port sends its hello right after
	 * its connect (setup_connect.c osf_setup_kfd_announce), so it may
	 * come after the connection can be accepted: looked for again,
	 * yielding the CPU, then asleep on where it comes, up to the
	 * handshake bound; a marked connection whose client closed or reset
	 * it before any hello came (it died, or could not send one and
	 * connected again without the mark) is passed over. */
	wait_ms = *marked == 1 ? HELLO_WAIT_MS : KFD_UNSAVED_MS;
	p[0] = (struct pollfd){nfd, POLLRDHUP, 0};
	for (i = 0;; i++) {
		hup = *marked == 1 && (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR));
		if (!fam && i == 0) {
			r = -1; /* looked just now */
		} else if (fam) {
			r = setup_fam_take(aux_fd, in, &key, &o, cc);
			if (r == -2)
				return -1; /* its mutex not had within the bound */
		} else {
			kfd_fill(lfd, aux_fd, in, &key, &o);
			r = kfd_find(aux_fd, &key, &o, cc);
		}
		if (r >= 0)
			return r;
		if (hup)
			return 2;
		/* A hello is read only with 3 numbers free (its fds): short
		 * of them, one that came could never be taken. */
		if (!osf_fdt_fds_free(3))
			return -1;
		now = osf_now_ns();
		if (!end)
			end = now + wait_ms * 1000000LL;
		if (now >= end)
			return -1;
		if (i < KFD_YIELDS) {
			sched_yield();
			continue;
		}
		/* A family's links are in its store, where nothing wakes a
		 * sleeper: it looks again every 100 µs, then every 1 ms. */
		n = 1 + kfd_poll_fds(aux_fd, fam, comp, p + 1, KFD_POLL_FDS);
		p[0].revents = 0;
		ts.tv_nsec = i < KFD_YIELDS + 10 ? 100000 : 1000000;
		(void)REAL(ppoll)(p, (nfds_t)n, &ts, NULL);
		/* A companion shut (budget_shut, a foreign image's) is
		 * always "ready": not slept on again. */
		comp = comp && !(p[1].revents & (POLLHUP | POLLERR | POLLNVAL));
	}
}

void osf_setup_kfd_shut(int lfd, int aux_fd, const struct osf_core_accept_in *in)
{
	int saved = errno;

	pthread_once(&setup_cfg.once, setup_cfg_load);
	kfd_fill(lfd, aux_fd, in, NULL, NULL);
	/* New connects get ECONNREFUSED (unix_stream_connect), in every
	 * process, and hellos on the links EPIPE (their clients dial anew and
	 * are refused: kernel TCP); what came before is read here, each link
	 * to its end. */
	(void)REAL(shutdown)(aux_fd, SHUT_RDWR);
	setup_park_lock();
	links_shut_locked(aux_fd);
	setup_park_unlock();
	kfd_fill(lfd, aux_fd, in, NULL, NULL);
	errno = saved;
}


void osf_setup_kfd_renote(int aux_fd)
{
	int saved = errno;

	setup_park_lock();
	links_shut_locked(aux_fd);
	setup_park_unlock();
	errno = saved;
}

void setup_kfd_forget_locked(int aux_fd)
{
	int i;

	for (i = 0; i < bshut.n;)
		if (bshut.fd[i] == aux_fd)
			bshut.fd[i] = bshut.fd[--bshut.n];
		else
			i++;
	setup_fam_forget_locked(aux_fd);
	for (i = 0; i < kfdq.n;)
		if (kfdq.h[i].aux_fd == aux_fd)
			kfd_forget_locked(i, 1);
		else
			i++;
	for (i = 0; i < links.n;)
		if (links.l[i].aux_fd == aux_fd)
			link_forget_locked(i);
		else
			i++;
}

void setup_kfd_moved_locked(int old, int nfd)
{
	int i;

	setup_fam_moved_locked(old, nfd);
	for (i = 0; i < bshut.n; i++)
		bshut.fd[i] = bshut.fd[i] == old ? nfd : bshut.fd[i];
	for (i = 0; i < links.n; i++) { /* selectmux rekeys its registrations */
		links.l[i].aux_fd = links.l[i].aux_fd == old ? nfd : links.l[i].aux_fd;
		links.l[i].fd = links.l[i].fd == old ? nfd : links.l[i].fd;
	}
	for (i = 0; i < kfdq.n; i++) {
		struct kfd_hello *h = &kfdq.h[i];
		h->aux_fd = h->aux_fd == old ? nfd : h->aux_fd;
		h->cc.seg_fd = h->cc.seg_fd == old ? nfd : h->cc.seg_fd;
		h->cc.wake_tx_fd = h->cc.wake_tx_fd == old ? nfd : h->cc.wake_tx_fd;
	}
}

void osf_setup_kfd_links_ended(int (*listener)(int aux_fd, struct osf_core_accept_in *in))
{
	struct osf_core_accept_in in;
	struct pollfd p[LINK_MAX];
	int i, j, n, lfd, saved = errno;

	if (!__atomic_load_n(&links.n, __ATOMIC_RELAXED))
		return;
	setup_park_lock();
	for (i = 0; i < links.n; i++)
		p[i] = (struct pollfd){links.l[i].fd, POLLRDHUP, 0};
	n = links.n;
	if (REAL(poll)(p, (nfds_t)n, 0) <= 0)
		n = 0;
	/* Each ended one read to its end: hellos of connections still
	 * queued in the kernel's backlog are kept for their accept. One not
	 * read (no listener here, no fds for its hellos) waits for an
	 * accept. Links move in the table as others go: found by fd. */
	for (i = 0; i < n; i++) {
		if (!p[i].revents)
			continue;
		for (j = 0; j < links.n && links.l[j].fd != p[i].fd; j++)
			;
		if (j < links.n && (lfd = listener(links.l[j].aux_fd, &in)) >= 0)
			(void)link_read_locked(lfd, j, &in, NULL, NULL);
	}
	setup_park_unlock();
	errno = saved;
}

/* kfd_after_fork lets go of a fork child's copies of the kept hellos and
 * of the links: the parent reads them. */
OSF_FORK_TEXT static void kfd_after_fork(void)
{
	while (kfdq.n > 0)
		kfd_forget_locked(kfdq.n - 1, 0);
	while (links.n > 0)
		link_forget_locked(links.n - 1);
}
OSF_AFTER_FORK(kfd_after_fork, OSF_FORK_RELEASE);
