//go:build osf_make

/* handoff.c: offloaded sockets passed to another process with SCM_RIGHTS.
 *
 * An offloaded connection's fd is osf's wake socket; passed alone, the
 * receiver would hold an AF_UNIX socket with no ring behind it and read
 * end-of-file while the peer's bytes sit in the segment. So the sender's
 * sendmsg appends, to the SCM_RIGHTS array that carries offloaded fds, a
 * sealed record memfd naming them, followed by each one's hidden fds (a
 * connection: its segment memfd and writers' wake socket; a listener: its
 * companion). The receiver's recvmsg (under osf) finds the record, installs
 * each connection or listener on the fd it received, closes the extra fds
 * and hands the application exactly the array that was sent; every byte
 * in the rings is still there.
 *
 *   SCM_RIGHTS: [app fd 0 .. app fd n-1][record][extra fds of item 0]...
 *
 * A receiver without osf could not read the rings, so the sender first
 * checks (SO_PEERCRED, then the peer's /proc/PID/maps) that the process at
 * the other end of the socket has libosf.so loaded; if it cannot tell, or
 * the peer does not, sendmsg fails with EOPNOTSUPP and osf says why once on
 * stderr: nothing is sent, nothing is lost, and the program can fall back
 * (README: "Passing connections between processes").
 *
 * Everything in a record is hostile input (any process that can write to
 * the receiver's socket can send one): indexes are bounded, the segment is
 * mapped only when its size, seals and header agree with the record.
 */
#include "pool.h"
#include "conn.h"

#include "../sdp/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HANDOFF_MAGIC 0x31464f444e414846ULL /* "FHANDOF1" */
#define HANDOFF_VERSION 2 /* 2: slot1 of 32 bits (wide regions) */
#define HANDOFF_MAX 64 /* offloaded fds in one message */

struct handoff_item {
	uint32_t index; /* position of the application's fd in the array */
	uint8_t kind;   /* OSF_FD_SHM (2 extra fds) or OSF_FD_LISTEN (1) */
	uint8_t transport;
	uint8_t role;
	uint8_t pad;
	uint32_t slot1; /* the fd table's: 1 + the slot of the region passed */
	uint32_t ring_bytes;
	uint32_t flags; /* OSF_FDF_V6, V6ONLY, NODELAY, REGIONEFD; KFD (a
			   listener) */
	int32_t rule;
	uint8_t local[28];
	uint8_t peer[28];
};

struct handoff_rec {
	uint64_t magic;
	uint32_t version;
	uint32_t count;
	struct handoff_item item[HANDOFF_MAX];
};

static int extra_fds(const struct handoff_item *it)
{
	return it->kind == OSF_FD_SHM ? 2 : 1;
}

/* ---- sending --------------------------------------------------------------- */

/* maps_have_osf reports whether process pid has libosf.so mapped. */
static int maps_have_osf(pid_t pid)
{
	char path[64], buf[4096];
	size_t keep = 0;
	int mfd, found = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	mfd = open(path, O_RDONLY | O_CLOEXEC);
	if (mfd < 0)
		return 0;
	for (;;) { /* a line ending in "/libosf.so"; keep a partial line */
		ssize_t n = REAL(read)(mfd, buf + keep, sizeof(buf) - 1 - keep);
		size_t len;
		char *p;
		if (n <= 0)
			break;
		len = keep + (size_t)n;
		buf[len] = 0;
		if (strstr(buf, "/libosf.so\n")) {
			found = 1;
			break;
		}
		p = strrchr(buf, '\n');
		keep = p ? len - (size_t)(p + 1 - buf) : 0;
		if (keep > 1024)
			keep = 0;
		memmove(buf, buf + len - keep, keep);
	}
	REAL(close)(mfd);
	return found;
}

/* peer_ino returns the inode of the socket at the other end of unix
 * socket fd (sock_diag, UNIX_DIAG_PEER), 0 when it cannot tell. */
static uint32_t peer_ino(int fd)
{
	struct {
		struct nlmsghdr nh;
		struct unix_diag_req r;
	} req;
	union {
		struct nlmsghdr nh;
		char b[1024];
	} resp;
	struct stat st;
	struct nlmsghdr *nh;
	uint32_t peer = 0;
	ssize_t n;
	int nl;

	if (fstat(fd, &st) < 0)
		return 0;
	nl = REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return 0;
	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len = sizeof(req);
	req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = AF_UNIX;
	req.r.udiag_states = ~0u;
	req.r.udiag_ino = (uint32_t)st.st_ino;
	req.r.udiag_show = UDIAG_SHOW_PEER;
	req.r.udiag_cookie[0] = req.r.udiag_cookie[1] = ~0u;
	if (REAL(send)(nl, &req, sizeof(req), 0) != (ssize_t)sizeof(req) ||
	    (n = REAL(recv)(nl, &resp, sizeof(resp), 0)) <= 0) {
		REAL(close)(nl);
		return 0;
	}
	REAL(close)(nl);
	for (nh = &resp.nh; NLMSG_OK(nh, (size_t)n); nh = NLMSG_NEXT(nh, n)) {
		struct unix_diag_msg *m = NLMSG_DATA(nh);
		struct rtattr *a;
		int len;
		if (nh->nlmsg_type != SOCK_DIAG_BY_FAMILY)
			break;
		len = (int)nh->nlmsg_len - NLMSG_LENGTH(sizeof(*m));
		for (a = (struct rtattr *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len))
			if (a->rta_type == UNIX_DIAG_PEER &&
			    RTA_PAYLOAD(a) >= sizeof(uint32_t))
				memcpy(&peer, RTA_DATA(a), sizeof(peer));
		break;
	}
	return peer;
}

/* holds reports whether process p has socket link want ("socket:[INO]")
 * among its fds. */
static int holds(pid_t p, const char *want)
{
	char path[320], link[64];
	struct dirent *f;
	DIR *fds;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)p);
	fds = opendir(path);
	if (!fds)
		return 0; /* gone, or not ours to see */
	while (!found && (f = readdir(fds)) != NULL) {
		ssize_t k;
		if (f->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)p, f->d_name);
		k = readlink(path, link, sizeof(link) - 1);
		if (k <= 0)
			continue;
		link[k] = 0;
		found = strcmp(link, want) == 0;
	}
	closedir(fds);
	return found;
}

/* Verdicts of holders_have_osf. */
#define HOLDERS_OSF 1
#define HOLDERS_NOT 0
#define HOLDERS_NONE 2 /* no process of those looked at holds it */

/* check_holder folds process p into the verdict *v. */
static void check_holder(pid_t p, const char *want, int *v, pid_t *pid)
{
	if (*v == HOLDERS_NOT || !holds(p, want))
		return;
	if (maps_have_osf(p)) {
		*v = HOLDERS_OSF;
	} else {
		*v = HOLDERS_NOT;
		*pid = p;
	}
}

/* descendants_check looks at the descendants of p (the children files of
 * its threads), depth levels deep. */
static void descendants_check(pid_t p, const char *want, int *v, pid_t *pid,
			      int depth)
{
	char path[320], buf[1024];
	struct dirent *t;
	DIR *tasks;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)p);
	tasks = opendir(path);
	if (!tasks)
		return;
	while (*v != HOLDERS_NOT && (t = readdir(tasks)) != NULL) {
		char *q, *end;
		if (t->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int)p,
			 t->d_name);
		if (osf_read_file(path, buf, sizeof(buf)) <= 0)
			continue;
		for (q = buf; *v != HOLDERS_NOT; q = end) {
			long c = strtol(q, &end, 10);
			if (end == q || c <= 0)
				break;
			check_holder((pid_t)c, want, v, pid);
			if (depth > 1)
				descendants_check((pid_t)c, want, v, pid, depth - 1);
		}
	}
	closedir(tasks);
}

/* holders_have_osf checks the other processes that hold socket inode ino:
 * this process's descendants (a socketpair's other end is inherited), or,
 * when none of them does, every process (/proc/PID/fd). 1 when each holder
 * has libosf.so mapped (or none but this one holds it), else 0 with *pid
 * the first that does not. */
static int holders_have_osf(uint32_t ino, pid_t *pid)
{
	char want[32];
	pid_t self = getpid();
	struct dirent *d;
	DIR *proc;
	int v = HOLDERS_NONE;

	snprintf(want, sizeof(want), "socket:[%u]", ino);
	descendants_check(self, want, &v, pid, 4);
	if (v != HOLDERS_NONE)
		return v == HOLDERS_OSF;
	proc = opendir("/proc");
	if (!proc)
		return 0;
	while (v != HOLDERS_NOT && (d = readdir(proc)) != NULL) {
		pid_t p = (pid_t)atoi(d->d_name);
		if (p > 0 && p != self)
			check_holder(p, want, &v, pid);
	}
	closedir(proc);
	return v != HOLDERS_NOT;
}

/* peer_has_osf reports whether the process at the other end of unix socket
 * fd has libosf.so mapped. A socketpair's peer credentials name its
 * creator (this process) whoever holds the other end now (a child that
 * inherited it, perhaps after exec'ing a program without osf): then the
 * processes that hold the other end are asked. */
static int peer_has_osf(int fd, pid_t *pid)
{
	struct ucred u;
	socklen_t l = sizeof(u);
	uint32_t ino;

	*pid = 0;
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_PEERCRED, &u, &l) < 0 || u.pid <= 0)
		return 0;
	*pid = u.pid;
	if (u.pid != getpid())
		return maps_have_osf(u.pid);
	ino = peer_ino(fd);
	if (!ino)
		return 0; /* cannot tell: refuse, nothing is lost */
	return holders_have_osf(ino, pid);
}

/* record_fd writes rec into a sealed memfd: its fd, or -1. */
static int record_fd(const struct handoff_rec *rec)
{
	size_t n = offsetof(struct handoff_rec, item) +
		   rec->count * sizeof(struct handoff_item);
	int fd = memfd_create("osf-handoff", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	if (REAL(write)(fd, rec, n) != (ssize_t)n ||
	    fcntl(fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		REAL(close)(fd);
		return -1;
	}
	return fd;
}

/* describe fills it for the offloaded fd at index i of an SCM_RIGHTS
 * array and appends its hidden fds to extra; 0, or -1 when fd is not an
 * offloaded socket. */
static int describe(int fd, uint32_t i, struct handoff_item *it, int *extra,
		    int *nextra)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (!e || !osf_kind_is_offloaded(e->kind))
		return -1;
	memset(it, 0, sizeof(*it));
	it->index = i;
	it->kind = e->kind;
	it->transport = e->transport;
	it->role = e->role;
	it->ring_bytes = e->ring_bytes;
	it->slot1 = e->kind == OSF_FD_SHM ? osf_fdt_slot1(e) : 0;
	it->flags = e->flags & (OSF_FDF_V6 | OSF_FDF_V6ONLY | OSF_FDF_NODELAY | OSF_FDF_REGIONEFD |
				(e->kind == OSF_FD_LISTEN ? OSF_FDF_KFD : 0));
	/* An OSF_SHM_KFD listener that another process may accept on is a
	 * listener shared without a store, here and there: the first
	 * accept shuts its companion (sock_accept.c), so that no hello
	 * waits in one process for a connection the other accepts. */
	if (e->kind == OSF_FD_LISTEN && (e->flags & OSF_FDF_KFD))
		__atomic_or_fetch(&e->flags, OSF_FDF_SHARED | OSF_FDF_EXECSHARED, __ATOMIC_RELAXED);
	it->rule = e->rule;
	memcpy(it->local, e->local, sizeof(it->local));
	memcpy(it->peer, e->peer, sizeof(it->peer));
	extra[(*nextra)++] = e->aux_fd;
	if (e->kind == OSF_FD_SHM)
		extra[(*nextra)++] = e->aux2_fd;
	return 0;
}

/* handoff_refused explains once why offloaded fds could not be passed. */
static void handoff_refused(pid_t pid)
{
	static int said;

	if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		return;
	if (pid > 0)
		osf_report("cannot pass an offloaded socket to pid %d: it does "
			   "not run under osf (sendmsg fails with EOPNOTSUPP; "
			   "route such connections to the kernel with OSF_ROUTES)",
			   (int)pid);
	else
		osf_report("cannot pass an offloaded socket over a socket whose "
			   "peer is unknown (sendmsg fails with EOPNOTSUPP)");
}

ssize_t osf_handoff_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	static struct handoff_rec rec; /* written under rec_lock */
	static int rec_lock;
	struct msghdr m = *msg;
	struct cmsghdr *c, *out;
	size_t room;
	uint8_t *buf;
	int extra[2 * HANDOFF_MAX], nextra = 0, rfd = -1, found = 0;
	ssize_t r;
	pid_t pid;

	osf_conn_hello_flush(); /* the receiver may write them */
	for (c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR((struct msghdr *)msg, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int *fds = (int *)CMSG_DATA(c);
			size_t i, n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (i = 0; i < n && !found; i++) {
				struct osf_fdt_entry *e = osf_fdt_lookup(fds[i]);
				found = e && osf_kind_is_offloaded(e->kind);
			}
		}
	if (!found)
		return REAL(sendmsg)(fd, msg, flags);
	if (!peer_has_osf(fd, &pid)) {
		handoff_refused(pid);
		return OSF_FAIL(EOPNOTSUPP);
	}
	room = msg->msg_controllen + CMSG_SPACE(sizeof(int) * (1 + 2 * HANDOFF_MAX));
	buf = calloc(1, room);
	if (!buf)
		return OSF_FAIL(ENOBUFS);
	while (__atomic_exchange_n(&rec_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
	memset(&rec, 0, sizeof(rec));
	rec.magic = HANDOFF_MAGIC;
	rec.version = HANDOFF_VERSION;
	m.msg_control = buf;
	m.msg_controllen = 0;
	out = (struct cmsghdr *)buf;
	for (c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
		size_t len = c->cmsg_len;
		memcpy(out, c, len);
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    rfd < 0) {
			int *fds = (int *)CMSG_DATA(out);
			size_t i, n = (len - CMSG_LEN(0)) / sizeof(int);
			for (i = 0; i < n && rec.count < HANDOFF_MAX; i++)
				if (describe(fds[i], (uint32_t)i, &rec.item[rec.count],
					     extra, &nextra) == 0)
					rec.count++;
			if (rec.count) {
				rfd = record_fd(&rec);
				if (rfd < 0) {
					r = OSF_FAIL(ENOBUFS);
					goto out;
				}
				fds[n] = rfd;
				memcpy(&fds[n + 1], extra, sizeof(int) * (size_t)nextra);
				len = CMSG_LEN(sizeof(int) * (n + 1 + (size_t)nextra));
				out->cmsg_len = len;
			}
		}
		m.msg_controllen += CMSG_SPACE(len - CMSG_LEN(0));
		out = (struct cmsghdr *)(buf + m.msg_controllen);
	}
	r = REAL(sendmsg)(fd, &m, flags);
out:
	__atomic_store_n(&rec_lock, 0, __ATOMIC_RELEASE);
	if (rfd >= 0)
		REAL(close)(rfd);
	free(buf);
	return r;
}

/* ---- receiving -------------------------------------------------------------- */

/* read_record reads a handoff record from fd: 1 if fd is one (rec
 * filled), else 0. */
static int read_record(int fd, struct handoff_rec *rec)
{
	struct stat st;
	ssize_t n;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size < (off_t)offsetof(struct handoff_rec, item) ||
	    st.st_size > (off_t)sizeof(*rec))
		return 0;
	n = pread(fd, rec, (size_t)st.st_size, 0);
	if (n != st.st_size || rec->magic != HANDOFF_MAGIC ||
	    rec->version != HANDOFF_VERSION || rec->count > HANDOFF_MAX ||
	    (size_t)n != offsetof(struct handoff_rec, item) +
				 rec->count * sizeof(struct handoff_item))
		return 0;
	return 1;
}

/* map_segment maps the segment memfd of a passed connection after checking
 * it against the record: the address, or NULL. */
static void *map_segment(int sfd, uint32_t ring)
{
	const int need = F_SEAL_SHRINK | F_SEAL_GROW;
	struct osf_seg_hdr h;
	struct stat st;
	int seals;
	void *base;

	if (!osf_ring_size_ok(ring) || fstat(sfd, &st) < 0 ||
	    (uint64_t)st.st_size != osf_seg_bytes(ring))
		return NULL;
	seals = fcntl(sfd, F_GET_SEALS);
	if (seals < 0 || (seals & need) != need ||
	    pread(sfd, &h, sizeof(h), (off_t)osf_seg_hdr_off(ring)) != (ssize_t)sizeof(h) ||
	    !osf_seg_hdr_check(&h, ring))
		return NULL;
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		    sfd, 0);
	return base == MAP_FAILED ? NULL : base;
}

/* adopt installs one passed item on fd with its extra fds x; on failure
 * the extra fds are closed and fd stays what the kernel passed. */
static void adopt(int fd, const struct handoff_item *it, const int *x,
		  int cloexec)
{
	struct osf_fdt_entry ent;
	struct stat st;
	int fl;

	osf_sandbox_check(); /* the data path depends on it */
	fl = REAL(fcntl)(fd, F_GETFL, NULL);

	if (it->kind == OSF_FD_LISTEN) {
		memset(&ent, 0, sizeof(ent));
		ent.kind = OSF_FD_LISTEN;
		ent.transport = OSF_TP_SHM;
		ent.role = OSF_ROLE_LISTENER;
		ent.rule = it->rule;
		ent.flags = (it->flags & (OSF_FDF_V6 | OSF_FDF_V6ONLY)) |
			    (cloexec ? OSF_FDF_CLOEXEC : 0);
		/* The sender's OSF_SHM_KFD listener: the kernel's accept,
		 * the hello looked up (or the companion shut at the first
		 * accept: shared with the sender), never a connection read as
		 * a plain TCP one whose client writes into a ring. */
		if (osf.shm_kfd && (it->flags & OSF_FDF_KFD))
			ent.flags |= OSF_FDF_KFD | OSF_FDF_SHARED | OSF_FDF_EXECSHARED;
		ent.aux_fd = osf_fdt_hide(x[0], fd);
		if (ent.aux_fd < 0)
			ent.aux_fd = x[0];
		ent.ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
		memcpy(ent.local, it->local, sizeof(ent.local));
		(void)osf_fdt_set(fd, &ent);
		osf_mux_offloaded(fd);
		return;
	}
	struct osf_core_conn cc;
	void *base = NULL;
	if (fl >= 0 && it->slot1) /* a slot: this socket's, as its side says */
		base = fstat(fd, &st) < 0 ? NULL
		       : osf_pool_adopt(x[0], it->ring_bytes, it->slot1 - 1u,
					it->role == OSF_ROLE_SERVER ? OSF_SIDE_SERVER
								    : OSF_SIDE_CLIENT,
					(uint64_t)st.st_ino, 0); /* x[0] its own */
	else if (fl >= 0)
		base = map_segment(x[0], it->ring_bytes);
	if (base && (it->flags & OSF_FDF_REGIONEFD) && (!it->slot1 || !osf_wake_efd_ok(x[1], NULL))) {
		osf_seg_release(base, it->ring_bytes,
				it->role == OSF_ROLE_SERVER ? OSF_SIDE_SERVER : OSF_SIDE_CLIENT, 0);
		base = NULL; /* the writers would sleep on what is no eventfd */
	}
	if (!base) {
		REAL(close)(x[0]);
		REAL(close)(x[1]);
		return;
	}
	memset(&cc, 0, sizeof(cc));
	cc.seg_addr = (uint64_t)(uintptr_t)base;
	cc.ring_bytes = it->ring_bytes;
	cc.side = it->role == OSF_ROLE_SERVER ? OSF_SIDE_SERVER : OSF_SIDE_CLIENT;
	cc.seg_fd = x[0];
	cc.wake_tx_fd = x[1];
	cc.wake_tx_efd = (it->flags & OSF_FDF_REGIONEFD) != 0;
	cc.wake_fd = fd;
	cc.rule = it->rule;
	memcpy(cc.local, it->local, sizeof(it->local));
	memcpy(cc.peer, it->peer, sizeof(it->peer));
	if (osf_conn_install(fd, &cc, it->role, cloexec, (fl & O_NONBLOCK) != 0,
			     0) < 0)
		return; /* install released the mapping and the extra fds */
	if (it->flags & OSF_FDF_NODELAY) {
		struct osf_fdt_entry *e = osf_fdt_lookup(fd);
		if (e)
			e->flags |= OSF_FDF_NODELAY;
	}
	osf_mux_offloaded(fd);
}

/* take_handoff looks for a record in the SCM_RIGHTS array fds[0..*n):
 * when there is one, it installs what the record describes, closes the
 * record and the extra fds, and cuts *n to the application's fds. */
static void take_handoff(int *fds, size_t *n, int cloexec)
{
	struct handoff_rec rec;
	size_t r, need, i;
	int x;

	for (r = 0; r < *n; r++)
		if (read_record(fds[r], &rec))
			break;
	if (r == *n)
		return;
	for (need = 0, i = 0; i < rec.count; i++)
		need += (size_t)extra_fds(&rec.item[i]);
	if (r + 1 + need != *n) { /* not a record osf wrote: leave it */
		return;
	}
	for (i = 0, x = (int)r + 1; i < rec.count; i++) {
		const struct handoff_item *it = &rec.item[i];
		int k = extra_fds(it), j, ok = it->index < r &&
					      (it->kind == OSF_FD_SHM ||
					       it->kind == OSF_FD_LISTEN);
		for (j = 0; ok && j < (int)i; j++) /* each app fd once */
			ok = rec.item[j].index != it->index;
		if (ok)
			adopt(fds[it->index], it, &fds[x], cloexec);
		else
			for (j = 0; j < k; j++)
				REAL(close)(fds[x + j]);
		x += k;
	}
	REAL(close)(fds[r]);
	*n = r;
}

ssize_t osf_handoff_recvmsg(int fd, struct msghdr *msg, int flags)
{
	size_t app = msg->msg_controllen,
	       room = app + CMSG_SPACE(sizeof(int) * (1 + 2 * HANDOFF_MAX));
	uint8_t stack[4096] __attribute__((aligned(8)));
	struct msghdr m = *msg;
	struct cmsghdr *c;
	uint8_t *buf = room <= sizeof(stack) ? stack : malloc(room);
	size_t used = 0;
	ssize_t r;

	if (!buf)
		return REAL(recvmsg)(fd, msg, flags);
	memset(buf, 0, room);
	m.msg_control = buf;
	m.msg_controllen = room;
	r = REAL(recvmsg)(fd, &m, flags);
	if (r < 0) {
		if (buf != stack)
			free(buf);
		return r;
	}
	msg->msg_namelen = m.msg_namelen;
	msg->msg_flags = m.msg_flags & ~MSG_CTRUNC;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		size_t data = c->cmsg_len - CMSG_LEN(0), avail = app - used, fit;
		int rights = c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS;
		int *fds = (int *)CMSG_DATA(c);
		struct cmsghdr *out = (struct cmsghdr *)((uint8_t *)msg->msg_control + used);
		if (rights) {
			size_t n = data / sizeof(int);
			take_handoff(fds, &n, (flags & MSG_CMSG_CLOEXEC) != 0);
			data = n * sizeof(int);
		}
		/* What does not fit is cut as the kernel cuts it: whole fds,
		 * the rest closed, and MSG_CTRUNC. */
		fit = avail >= CMSG_LEN(0) ? avail - CMSG_LEN(0) : 0;
		if (data > fit || avail < CMSG_LEN(0)) {
			msg->msg_flags |= MSG_CTRUNC;
			if (rights) {
				size_t keep = avail < CMSG_LEN(0) ? 0 : fit / sizeof(int), i;
				for (i = keep; i < data / sizeof(int); i++)
					REAL(close)(fds[i]);
				fit = keep * sizeof(int);
			}
			if (avail < CMSG_LEN(0))
				continue;
			data = fit;
		}
		memcpy(out, c, CMSG_LEN(0));
		out->cmsg_len = CMSG_LEN(data);
		memcpy(CMSG_DATA(out), CMSG_DATA(c), data);
		used += CMSG_SPACE(data) < avail ? CMSG_SPACE(data) : avail;
	}
	msg->msg_controllen = used;
	if (buf != stack)
		free(buf);
	return r;
}
