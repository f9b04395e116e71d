//go:build osf_make

/* setup_fam.c: the hello store of an OSF_SHM_KFD listener shared by a fork
 * family (docs/ARCHITECTURE.md "The kernel TCP socket as the connection's
 * fd"). Any process of the family may accept a connection, so the hellos
 * and the links they come on (setup_kfd.c) sit where every process can
 * read them: a SOCK_SEQPACKET socket pair made at the listener's first
 * fork, spawn or exec (its ends hidden and inherited; across exec with
 * the listener's companion: osf_setup_kfd_adopt), one fixed-size
 * record per message, a hello's two fds or a link's one attached, and the
 * client's credentials and the time it was first read in the record (a
 * re-posted message carries the re-poster's). A process scans it under a
 * robust process-shared mutex on a memfd's page only the family maps, and every
 * record it takes out that is not its own goes back before it lets go: no
 * hello is ever in transit while another process looks. A holder that
 * dies leaves the mutex to the next (EOWNERDEAD; what it held out is
 * lost); one that stalls costs the others the handshake bound
 * (HELLO_WAIT_MS: OSF_CONNECT_TIMEOUT_MS, 1 s by default) per accept,
 * then the lost hello's reset (sock_accept.c kfd_reset): a holder merely
 * descheduled on a loaded host must not make resets. */
#include "setup_priv.h"
#include "../sdp/setup.h"
#include "pool.h"

#include <linux/sockios.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>

#define FAM_MAX 16     /* listeners with a store, per process */
#define FAM_RECS 256   /* records a store keeps; the oldest hellos beyond go */
#define FAM_KEEP_S 60  /* a hello's connection not accepted by then: dropped */

enum { FAM_HELLO = 0x6f736668, FAM_LINK = 0x6f73666c };

/* A record of the store. Only the family writes the store (its ends are
 * no other process's), but a record is checked as any message: its size,
 * kind, length and fd count. */
struct fam_rec {
	uint32_t kind; /* FAM_HELLO (2 fds: segment, wake socket), FAM_LINK (1) */
	uint32_t len;  /* FAM_HELLO: bytes of msg; FAM_LINK: 1 when cr is set */
	int64_t since; /* FAM_HELLO: osf_now_ns when first read off its link */
	struct ucred cr; /* the link's SO_PEERCRED, its client's */
	uint32_t pad;
	unsigned char msg[sizeof(struct osf_hello) + sizeof(struct osf_hello_pool)];
};

/* The family's page: a memfd's, mapped MAP_SHARED before the fork (or
 * the spawn or exec it crosses: osf_setup_kfd_adopt maps it again). Its
 * head names the store to a SO_REUSEPORT group's member of another
 * process (setup_group.c). */
struct fam_page {
	struct setup_fam_head h;
	pthread_mutex_t mu; /* robust, process-shared */
};

/* This process's stores, one per companion, under the park lock. A fork
 * child inherits the table with the fds and the mapping; an exec'd image
 * finds them in the fd table (OSF_FDF_STORE, osf_setup_kfd_adopt). */
static struct fam {
	int aux_fd; /* the listener's companion */
	int rd, wr; /* the pair's ends, hidden: records are sent on wr, read on rd */
	int pgfd;   /* the page's memfd, hidden */
	struct fam_page *pg;
} fams[FAM_MAX];
static int nfam;

static struct fam *find_locked(int aux_fd)
{
	int i;

	for (i = 0; i < nfam; i++)
		if (fams[i].aux_fd == aux_fd)
			return &fams[i];
	return NULL;
}

#define PAGE_BYTES SETUP_FAM_PAGE

/* tag records f's fds in the fd table as its store's (osf_fdt_tag_store):
 * 0, or -1. */
static int tag(const struct fam *f)
{
	return osf_fdt_tag_store(f->rd, f->aux_fd, OSF_FDF_STORE_RD) |
	       osf_fdt_tag_store(f->wr, f->aux_fd, OSF_FDF_STORE_WR) |
	       osf_fdt_tag_store(f->pgfd, f->aux_fd, OSF_FDF_STORE_PG);
}

int setup_fam_new(int comp, int st[3])
{
	pthread_mutexattr_t a;
	struct fam_page *pg;
	struct stat sb[3];
	int sv[2], big = 4 << 20, m;

	st[0] = st[1] = st[2] = -1;
	m = memfd_create("osf-kfd-store", MFD_CLOEXEC);
	if (m < 0)
		return -1;
	if (ftruncate(m, PAGE_BYTES) < 0 ||
	    (pg = mmap(NULL, PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0)) == MAP_FAILED) {
		REAL(close)(m);
		return -1;
	}
	if (REAL(socketpair)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) {
		REAL(close)(m);
		munmap(pg, PAGE_BYTES);
		return -1;
	}
	/* The records queued are charged to the sending end (capped by
	 * wmem_max): room for FAM_RECS of them. */
	(void)REAL(setsockopt)(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&pg->mu, &a);
	pthread_mutexattr_destroy(&a);
	if (fstat(comp, &sb[0]) == 0 && fstat(sv[1], &sb[1]) == 0 && fstat(sv[0], &sb[2]) == 0) {
		pg->h.ino[0] = (uint64_t)sb[0].st_ino;
		pg->h.ino[1] = (uint64_t)sb[1].st_ino;
		pg->h.ino[2] = (uint64_t)sb[2].st_ino;
		__atomic_store_n(&pg->h.magic, SETUP_FAM_MAGIC, __ATOMIC_RELEASE);
	}
	munmap(pg, PAGE_BYTES);
	st[0] = sv[1];
	st[1] = sv[0];
	st[2] = m;
	return 0;
}

/* adopt_locked keeps store st (setup_fam_new's, or another process's
 * copies) as listener lfd's store of companion aux_fd, its fds hidden:
 * the store, or NULL (st closed). */
static struct fam *adopt_locked(int lfd, int aux_fd, const int st[3])
{
	struct fam_page *pg = MAP_FAILED;
	int rd = -1, wr = -1, pgfd = -1;

	if (nfam < FAM_MAX)
		pg = mmap(NULL, PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, st[2], 0);
	if (pg == MAP_FAILED) {
		osf_setup_group_drop((int[3]){st[0], st[1], st[2]});
		return NULL;
	}
	wr = osf_fdt_hide(st[1], lfd);
	rd = wr < 0 ? -1 : osf_fdt_hide(st[0], lfd);
	pgfd = rd < 0 ? -1 : osf_fdt_hide(st[2], lfd);
	fams[nfam] = (struct fam){aux_fd, rd, wr, pgfd, pg};
	if (pgfd < 0 || tag(&fams[nfam]) < 0) {
		if (wr >= 0)
			osf_fdt_close_hidden(wr);
		else
			REAL(close)(st[1]);
		if (rd >= 0)
			osf_fdt_close_hidden(rd);
		else
			REAL(close)(st[0]);
		if (pgfd >= 0)
			osf_fdt_close_hidden(pgfd);
		else
			REAL(close)(st[2]);
		munmap(pg, PAGE_BYTES);
		return NULL;
	}
	return &fams[nfam++];
}

/* make_locked makes listener lfd's store (companion aux_fd), or NULL. */
static struct fam *make_locked(int lfd, int aux_fd)
{
	int st[3];

	if (nfam == FAM_MAX || setup_fam_new(aux_fd, st) < 0)
		return NULL;
	return adopt_locked(lfd, aux_fd, st);
}

int setup_fam_adopt(int lfd, int aux_fd, const int st[3])
{
	struct fam *f = NULL;

	setup_park_lock();
	if (!find_locked(aux_fd))
		f = adopt_locked(lfd, aux_fd, st);
	else
		osf_setup_group_drop((int[3]){st[0], st[1], st[2]});
	setup_park_unlock();
	return f ? 0 : -1;
}

/* fam_lock takes the family's mutex, waiting at most HELLO_WAIT_MS: 0, or
 * -1 (a holder stalls). OSF_DEBUG_KFD_STALL=PATH (tests): the process
 * that takes it while PATH exists removes PATH and stops itself
 * (SIGSTOP), holding it. */
static int fam_lock(struct fam_page *pg)
{
	struct timespec ts;
	const char *stall;
	int r;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += HELLO_WAIT_MS / 1000;
	ts.tv_nsec += (HELLO_WAIT_MS % 1000) * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	r = pthread_mutex_clocklock(&pg->mu, CLOCK_MONOTONIC, &ts);
	if (r == EOWNERDEAD) /* records its holder took out are lost */
		r = pthread_mutex_consistent(&pg->mu);
	if (r != 0)
		return -1;
	stall = getenv("OSF_DEBUG_KFD_STALL");
	if (stall && *stall && unlink(stall) == 0)
		raise(SIGSTOP);
	return 0;
}

/* post puts record r with its nfds fds at the end of f's store (the
 * caller closes its own copies): 0, or -1 (the store full: dropped). */
static int post(const struct fam *f, const struct fam_rec *r, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {(void *)r, sizeof(*r)};
	struct msghdr mh;
	struct cmsghdr *cm;

	memset(&mh, 0, sizeof(mh));
	memset(&u, 0, sizeof(u));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	return REAL(sendmsg)(f->wr, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* recv_fds reads one message on fd into buf (up to n bytes) with up to 2
 * fds (more are closed): its length, or -1 with errno; *nfds counts the
 * fds that came (3: more than 2, or truncated, all closed). */
static ssize_t recv_fds(int fd, void *buf, size_t n, int fds[2], int *nfds)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {buf, n};
	struct msghdr mh;
	struct cmsghdr *cm;
	int got[4], k = 0, i;
	ssize_t r;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	r = REAL(recvmsg)(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (r < 0 && errno == ECONNRESET) /* ahead of what is queued (sdp/setup.c) */
		r = REAL(recvmsg)(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	*nfds = 0;
	if (r < 0)
		return r;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			for (i = 0; i < (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int)) && k < 4; i++)
				memcpy(&got[k++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	if (k > 2 || (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) {
		while (k-- > 0)
			REAL(close)(got[k]);
		*nfds = 3;
		return r;
	}
	memcpy(fds, got, (size_t)k * sizeof(int));
	*nfds = k;
	return r;
}

static void close_fds(const int *fds, int n)
{
	while (n-- > 0)
		REAL(close)(fds[n]);
}

/* rec_key reads the client's address and port out of hello record r:
 * 1, or 0 when it names none. */
static int rec_key(const struct fam_rec *r, struct ip *key)
{
	struct osf_hello h;

	if (r->len < sizeof(h) || r->len > sizeof(r->msg))
		return 0;
	memcpy(&h, r->msg, sizeof(h));
	if (!(h.flags & OSF_HELLO_F_KFD) || !setup_get_sockaddr(h.client, key))
		return 0;
	*key = setup_ip_unmap(*key);
	return 1;
}

static int same_ip(const struct ip *a, const struct ip *b)
{
	return a->v4 == b->v4 && a->port == b->port && !memcmp(a->a, b->a, a->v4 ? 4 : 16);
}

/* A scan's outcome: NONE (not found yet), or what osf_setup_kfd_take
 * returns: 0 (cc filled), 1 (its client's is kernel TCP), -1 (bad). */
#define NONE 2

/* A scan's hello whose client let go of its side (setup_kfd_client_gone):
 * taken only when no other hello names the same client port, since the
 * kernel may have given that port to the new connection the scan looks
 * for, whose client sent its hello before its SYN. */
struct gone {
	int have;
	struct osf_core_conn cc;
};

/* took ends a scan with hello cc mapped: 0, or 1 when its client's
 * connection went to kernel TCP (let go). */
static int took(struct osf_core_conn *cc)
{
	const struct osf_seg_hdr *g = osf_seg_hdr((void *)(uintptr_t)cc->seg_addr, cc->ring_bytes);

	if (__atomic_load_n(&g->side[OSF_SIDE_CLIENT].flags, __ATOMIC_ACQUIRE) & OSF_SIDE_KERNEL) {
		setup_kfd_let_go(cc, 1);
		return 1;
	}
	cc->wake_fd = -1;
	return 0;
}

/* take checks and maps hello record r (fds its) into cc: took's outcome,
 * NONE when its client let go (kept in *gone, the first such), or -1. */
static int take(const struct fam_rec *r, int fds[2], const struct osf_core_accept_in *in,
		struct osf_core_conn *cc, struct gone *gone)
{
	struct ip kfd;

	if (setup_take_stored(r->msg, r->len, fds, &r->cr, in, cc, &kfd) != 0)
		return -1;
	if (!setup_kfd_client_gone(cc))
		return took(cc);
	if (gone->have) /* only one connection had that port at a time */
		setup_kfd_let_go(cc, 1);
	else
		gone->cc = *cc, gone->have = 1;
	return NONE;
}

/* group_shut acts on message m (struct setup_group_shut) that a member
 * of f's SO_REUSEPORT group sent on link fd: one that could not take the
 * store (setup_group.c) would reset the connections whose hello it cannot
 * read, so the group's companion is shut down, in every process (new
 * dials refused), and so is every link, stored or queued (their clients'
 * next hellos fail and they dial anew: kernel TCP; the hellos queued on
 * them are still read), before the member is told (its message back), and
 * listens. The mutex is held. */
static void group_shut(const struct fam *f, int fd, const unsigned char *m)
{
	struct setup_group_shut g;
	struct fam_rec r;
	int fds[2], k, n = 0, i, c;

	memcpy(&g, m, sizeof(g));
	if (g.magic != SETUP_GROUP_SHUT_MAGIC)
		return;
	__atomic_store_n(&f->pg->h.shut, 1, __ATOMIC_RELEASE);
	(void)REAL(shutdown)(f->aux_fd, SHUT_RDWR);
	if (REAL(ioctl)(f->rd, SIOCINQ, &n) < 0)
		n = 0;
	n /= (int)sizeof(r);
	for (i = 0; i < n && osf_fdt_fds_free(3); i++) {
		if (recv_fds(f->rd, &r, sizeof(r), fds, &k) < 0)
			break;
		if (k == 3)
			continue;
		if (r.kind == FAM_LINK && k == 1)
			(void)REAL(shutdown)(fds[0], SHUT_RDWR);
		if (k > 0)
			(void)post(f, &r, fds, k);
		close_fds(fds, k);
	}
	memset(&r, 0, sizeof(r));
	r.kind = FAM_LINK;
	for (i = 0; i < FAM_RECS && osf_fdt_fds_free(3); i++) {
		c = REAL(accept4)(f->aux_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c < 0)
			break;
		(void)REAL(shutdown)(c, SHUT_RDWR);
		(void)post(f, &r, &c, 1);
		REAL(close)(c);
	}
	(void)REAL(send)(fd, &g, sizeof(g), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* link_scan reads the hellos queued on link fd without waiting: the one
 * under want taken into cc (*found), the others posted to f's store. It
 * returns 0 while the link lives, -1 when it ended or carried anything
 * but hellos of OSF_SHM_KFD clients (the caller closes it). */
static int link_scan(const struct fam *f, int fd, struct ucred *cr, int known,
		     const struct osf_core_accept_in *in, const struct ip *want,
		     struct kfd_owner *o, struct osf_core_conn *cc, int *found, struct gone *gone)
{
	struct fam_rec r;
	socklen_t crl = sizeof(*cr);
	struct ip key;
	int fds[2], k, n;
	ssize_t len;

	if (!known && REAL(getsockopt)(fd, SOL_SOCKET, SO_PEERCRED, cr, &crl) < 0)
		return -1;
	for (n = 0; n < FAM_RECS && *found == NONE && osf_fdt_fds_free(3); n++) {
		unsigned char buf[sizeof(r.msg) + 1];
		len = recv_fds(fd, buf, sizeof(buf), fds, &k);
		if (len < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		if (k == 0 && len == (ssize_t)sizeof(struct setup_group_shut) && cr->uid == geteuid())
			group_shut(f, fd, buf);
		if (len == 0 || k != 2 || (size_t)len > sizeof(r.msg)) {
			close_fds(fds, k < 3 ? k : 0);
			return -1;
		}
		memset(&r, 0, sizeof(r));
		r.kind = FAM_HELLO;
		r.len = (uint32_t)len;
		r.since = osf_now_ns();
		r.cr = *cr;
		memcpy(r.msg, buf, (size_t)len);
		if (!rec_key(&r, &key)) {
			close_fds(fds, 2);
			return -1;
		}
		if (same_ip(&key, want) && setup_kfd_owner_ok(o, r.cr.uid)) {
			*found = take(&r, fds, in, cc, gone);
			if (*found == NONE)
				continue;
			return *found < 0 ? -1 : 0;
		}
		(void)post(f, &r, fds, 2);
		close_fds(fds, 2);
	}
	return 0;
}

/* keep_link scans link fd (link_scan) and puts it in f's store while it
 * lives, with its client's credentials: cr when not NULL (the record's,
 * SO_PEERCRED read once), else read now; fd is closed here either way. A
 * link record's len 1 says its cr holds them. */
static void keep_link(const struct fam *f, int fd, const struct ucred *cr,
		      const struct osf_core_accept_in *in, const struct ip *want,
		      struct kfd_owner *o, struct osf_core_conn *cc, int *found, struct gone *gone)
{
	struct fam_rec r;
	struct ucred c = cr ? *cr : (struct ucred){0, 0, 0};

	/* A shut group's links: their clients' next hellos fail (EPIPE),
	 * their dials are refused; the hellos queued are still read. */
	if (__atomic_load_n(&f->pg->h.shut, __ATOMIC_ACQUIRE))
		(void)REAL(shutdown)(fd, SHUT_RDWR);
	if (link_scan(f, fd, &c, cr != NULL, in, want, o, cc, found, gone) == 0) {
		memset(&r, 0, sizeof(r));
		r.kind = FAM_LINK;
		r.len = 1;
		r.cr = c;
		(void)post(f, &r, &fd, 1);
	}
	REAL(close)(fd);
}

/* scan looks for the hello under want in f's store, then on the links its
 * companion queued: NONE, or take's outcome. The mutex is held. */
static int scan(const struct fam *f, const struct osf_core_accept_in *in, const struct ip *want,
		struct kfd_owner *o, struct osf_core_conn *cc)
{
	long long now = osf_now_ns();
	int found = NONE, queued = 0, i, k, fds[2], cfd, lfd = -1, noted = 0;
	struct gone gone = {0};
	struct fam_rec r;
	struct ip key;

	if (REAL(ioctl)(f->rd, SIOCINQ, &queued) < 0)
		queued = 0;
	queued /= (int)sizeof(r);
	for (i = 0; i < queued && found == NONE && osf_fdt_fds_free(3); i++) {
		ssize_t len = recv_fds(f->rd, &r, sizeof(r), fds, &k);
		if (len < 0)
			break;
		if (len != (ssize_t)sizeof(r) || k != (r.kind == FAM_LINK ? 1 : 2) ||
		    (r.kind != FAM_LINK && r.kind != FAM_HELLO)) {
			close_fds(fds, k < 3 ? k : 0);
			continue;
		}
		if (r.kind == FAM_LINK) {
			keep_link(f, fds[0], r.len == 1 ? &r.cr : NULL, in, want, o, cc, &found,
				  &gone);
			continue;
		}
		if (!rec_key(&r, &key) || now - r.since > FAM_KEEP_S * 1000000000LL ||
		    queued - i > FAM_RECS) { /* dropped: its connection, if any, is reset */
			close_fds(fds, 2);
			continue;
		}
		if (same_ip(&key, want) && setup_kfd_owner_ok(o, r.cr.uid)) {
			found = take(&r, fds, in, cc, &gone);
			continue;
		}
		(void)post(f, &r, fds, 2);
		close_fds(fds, 2);
	}
	for (i = 0; i < FAM_RECS && found == NONE && osf_fdt_fds_free(3); i++) {
		cfd = REAL(accept4)(f->aux_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (cfd < 0)
			break;
		if (!noted) {
			const struct osf_fdt_entry *e = osf_fdt_lookup(f->aux_fd);
			lfd = e && e->kind == OSF_FD_HIDDEN ? e->owner_fd : -1;
			noted = 1;
		}
		setup_kfd_link_note(cfd, lfd);
		keep_link(f, cfd, NULL, in, want, o, cc, &found, &gone);
	}
	if (gone.have && found == NONE) { /* its own client closed before the accept */
		*cc = gone.cc;
		return took(cc);
	}
	if (gone.have)
		setup_kfd_let_go(&gone.cc, 1);
	return found;
}

/* own_fd puts *fd, one of a hello's fds just taken for slot seg of ring
 * (efd 0: the region's memfd, 1: its writers' eventfd, -1: a writers'
 * socket, no region's), out of the program's numbers, as kfd_find's
 * are: closed (-1) when its region names its own here already (the
 * install takes the region's), else moved above them. */
static void own_fd(const void *seg, uint32_t ring, int *fd, int efd)
{
	int h;

	if (efd >= 0 && setup_kfd_fd_named(seg, ring, fd, efd))
		return;
	if ((h = osf_fdt_dup_high(*fd, 1)) >= 0) {
		REAL(close)(*fd);
		*fd = h;
	}
}

int setup_fam_take(int aux_fd, const struct osf_core_accept_in *in, const struct ip *want,
		   struct kfd_owner *o, struct osf_core_conn *cc)
{
	struct fam f, *p;
	int r;

	setup_park_lock();
	p = find_locked(aux_fd);
	if (p)
		f = *p;
	setup_park_unlock();
	if (!p)
		return NONE;
	if (fam_lock(f.pg) < 0)
		return -2;
	/* The fds may land above the program's limit (setup_take_hello). */
	osf_fdt_high_begin();
	r = scan(&f, in, want, o, cc);
	osf_fdt_high_end();
	pthread_mutex_unlock(&f.pg->mu);
	if (r == 0) {
		const void *seg = (const void *)(uintptr_t)cc->seg_addr;
		own_fd(seg, cc->ring_bytes, &cc->seg_fd, 0);
		own_fd(seg, cc->ring_bytes, &cc->wake_tx_fd, cc->wake_tx_efd ? 1 : -1);
	}
	return r == NONE ? -1 : r;
}

int osf_setup_kfd_family(int aux_fd)
{
	int r;

	setup_park_lock();
	r = find_locked(aux_fd) != NULL;
	setup_park_unlock();
	return r;
}

/* fork_needs_store reports whether a listener of this process may need a
 * store at this fork, looked at without a lock: the park lock's word, on a
 * page the last fork shared, would cost the parent a page fault per fork
 * (TestForkPageFaults). Only the table (a shared mapping) and fams are
 * read; a listener made by another thread meanwhile races with the fork
 * either way (it is then shared without a store: LIMITS.md). */
static int fork_needs_store(void)
{
	struct osf_fdt_entry *e;
	int fd, i, n = __atomic_load_n(&nfam, __ATOMIC_RELAXED);

	OSF_FDT_FOREACH(fd, e) {
		if (e->kind != OSF_FD_LISTEN ||
		    (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) &
		     (OSF_FDF_KFD | OSF_FDF_KFDSHUT | OSF_FDF_EXECSHARED)) != OSF_FDF_KFD)
			continue;
		for (i = 0; i < n && i < FAM_MAX; i++)
			if (__atomic_load_n(&fams[i].aux_fd, __ATOMIC_RELAXED) == e->aux_fd)
				break;
		if (i == n || i == FAM_MAX)
			return n < FAM_MAX;
	}
	return 0;
}

/* give_links_locked puts the links this process accepted on f's
 * companion in f's store, for the family to read (nobody else knows the
 * store yet). */
static void give_links_locked(struct fam *f)
{
	struct fam_rec r;
	int h;

	memset(&r, 0, sizeof(r));
	r.kind = FAM_LINK;
	while ((h = setup_kfd_link_pop_locked(f->aux_fd)) >= 0) {
		(void)post(f, &r, &h, 1);
		osf_fdt_close_hidden(h);
	}
}

/* store_wanted: listener entry e is OSF_SHM_KFD's, and neither shut nor
 * shared where no store reaches. */
static int store_wanted(const struct osf_fdt_entry *e)
{
	return e->kind == OSF_FD_LISTEN &&
	       (e->flags & (OSF_FDF_KFD | OSF_FDF_KFDSHUT | OSF_FDF_EXECSHARED)) == OSF_FDF_KFD;
}

void osf_setup_kfd_fork_prepare(void)
{
	struct {
		int lfd, aux_fd;
	} l[FAM_MAX];
	struct osf_fdt_entry *e;
	struct fam *f;
	int fd, n = 0, i;

	if (!osf.shm_kfd || osf_fdt_table_fd() < 0 || !fork_needs_store())
		return;
	setup_park_lock();
	osf_fdt_lock();
	OSF_FDT_FOREACH(fd, e) {
		if (store_wanted(e) && n < FAM_MAX) {
			l[n].lfd = fd;
			l[n++].aux_fd = e->aux_fd;
		}
	}
	osf_fdt_unlock();
	for (i = 0; i < n; i++) {
		if (find_locked(l[i].aux_fd))
			continue;
		f = make_locked(l[i].lfd, l[i].aux_fd);
		if (f) /* else shared without a store: shut at its first accept */
			give_links_locked(f);
	}
	setup_park_unlock();
}

int osf_setup_kfd_store(int lfd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(lfd);
	struct fam *f;
	int aux;

	if (!e || !store_wanted(e))
		return 0;
	aux = e->aux_fd;
	setup_park_lock();
	f = find_locked(aux);
	if (!f && (f = make_locked(lfd, aux)) != NULL)
		give_links_locked(f);
	setup_park_unlock();
	return f != NULL;
}

void osf_setup_kfd_exec_inherit(int on)
{
	int i, fl;

	if (!__atomic_load_n(&nfam, __ATOMIC_RELAXED))
		return;
	setup_park_lock();
	for (i = 0; i < nfam; i++) {
		fl = on ? REAL(fcntl)(fams[i].aux_fd, F_GETFD, NULL) : FD_CLOEXEC;
		if (fl < 0)
			continue;
		fl &= FD_CLOEXEC; /* the companion's: the store goes where it goes */
		(void)REAL(fcntl)(fams[i].rd, F_SETFD, (void *)(long)fl);
		(void)REAL(fcntl)(fams[i].wr, F_SETFD, (void *)(long)fl);
		(void)REAL(fcntl)(fams[i].pgfd, F_SETFD, (void *)(long)fl);
	}
	setup_park_unlock();
}

/* adopt_one maps the store whose read end rd an exec'd image inherited
 * (its fd table's entry re, the entries found for its write end and page
 * we and pe, all of companion aux_fd): 0, or -1. The fds and the page are
 * the family's, which this image's table names: only their identity and
 * size are checked. */
static int adopt_one(int rd, int wr, int pgfd, int aux_fd, const struct osf_fdt_entry *re,
		     const struct osf_fdt_entry *we, const struct osf_fdt_entry *pe)
{
	struct stat s[3];
	struct fam_page *pg;

	if (nfam == FAM_MAX || fstat(rd, &s[0]) < 0 || fstat(wr, &s[1]) < 0 ||
	    fstat(pgfd, &s[2]) < 0 || (uint64_t)s[0].st_ino != re->ino ||
	    (uint64_t)s[1].st_ino != we->ino || (uint64_t)s[2].st_ino != pe->ino ||
	    !S_ISSOCK(s[0].st_mode) || !S_ISSOCK(s[1].st_mode) || !S_ISREG(s[2].st_mode) ||
	    s[2].st_size < PAGE_BYTES || s[2].st_uid != geteuid())
		return -1;
	pg = mmap(NULL, PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, pgfd, 0);
	if (pg == MAP_FAILED)
		return -1;
	fams[nfam++] = (struct fam){aux_fd, rd, wr, pgfd, pg};
	return 0;
}

/* drop forgets store fd fd (entry e) that could not be adopted, closing
 * it when it is still the file e names (else the number is another's). */
static void drop(int fd, const struct osf_fdt_entry *e)
{
	struct stat st;

	if (fstat(fd, &st) == 0 && (uint64_t)st.st_ino == e->ino)
		osf_fdt_close_hidden(fd);
	else
		osf_fdt_clear(fd);
}

void osf_setup_kfd_adopt(void)
{
	struct osf_fdt_entry *e, *c, *we, *pe, *l;
	int fd, cfd, wr, pgfd, lfd;

	if (osf_fdt_table_fd() < 0)
		return;
	setup_park_lock();
	OSF_FDT_FOREACH(fd, e) {
		if (e->kind != OSF_FD_HIDDEN || !(e->flags & OSF_FDF_STORE_RD) || find_locked(e->aux_fd))
			continue;
		wr = pgfd = -1;
		we = pe = NULL;
		OSF_FDT_FOREACH(cfd, c) {
			if (c->kind != OSF_FD_HIDDEN || c->aux_fd != e->aux_fd)
				continue;
			if (c->flags & OSF_FDF_STORE_WR)
				wr = cfd, we = c;
			else if (c->flags & OSF_FDF_STORE_PG)
				pgfd = cfd, pe = c;
		}
		/* Of an OSF_SHM_KFD listener that crossed the exec too. */
		for (lfd = 0; (l = osf_fdt_next(&lfd)) != NULL; lfd++)
			if (l->kind == OSF_FD_LISTEN && l->aux_fd == e->aux_fd &&
			    (l->flags & (OSF_FDF_KFD | OSF_FDF_KFDSHUT)) == OSF_FDF_KFD)
				break;
		if (l && we && pe && adopt_one(fd, wr, pgfd, e->aux_fd, e, we, pe) == 0)
			continue;
		drop(fd, e);
		if (we)
			drop(wr, we);
		if (pe)
			drop(pgfd, pe);
	}
	setup_park_unlock();
}

void setup_fam_forget_locked(int aux_fd)
{
	struct fam *f = find_locked(aux_fd);

	if (!f)
		return;
	osf_fdt_close_hidden(f->rd);
	osf_fdt_close_hidden(f->wr);
	osf_fdt_close_hidden(f->pgfd);
	munmap(f->pg, PAGE_BYTES);
	*f = fams[--nfam];
}

void setup_fam_moved_locked(int old, int nfd)
{
	int i;

	for (i = 0; i < nfam; i++) {
		fams[i].rd = fams[i].rd == old ? nfd : fams[i].rd;
		fams[i].wr = fams[i].wr == old ? nfd : fams[i].wr;
		fams[i].pgfd = fams[i].pgfd == old ? nfd : fams[i].pgfd;
		if (fams[i].aux_fd == old) { /* the store's entries name it */
			fams[i].aux_fd = nfd;
			(void)tag(&fams[i]);
		}
	}
}
