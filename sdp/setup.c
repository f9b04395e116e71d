/* setup.c: the shm set-up's one implementation (setup.h). */
#include "sys.h"
#define OSF_CENSUS_SYS(name) osf_sys_##name
#include "setup.h"

#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the segment ------------------------------------------------------ */

void *osf_seg_new(uint32_t ring, int *fdp)
{
	uint64_t size = osf_seg_bytes(ring);
	void *h;
	int fd = memfd_create(OSF_SEG_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING), e;

	if (fd < 0)
		return NULL;
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)size) < 0 ||
	    osf_sys_fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto fail;
	h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		goto fail;
	*fdp = fd;
	return h;
fail:
	e = errno;
	osf_sys_close(fd);
	errno = e;
	return NULL;
}

void osf_seg_init(void *seg, uint32_t ring, const uint8_t client[28],
		  const uint8_t server[28], int32_t client_pid)
{
	struct osf_seg_hdr *h = osf_seg_hdr(seg, ring);

	h->version = OSF_SEG_VERSION;
	h->hdr_bytes = OSF_SEG_HDR_BYTES;
	h->ring_bytes = ring;
	h->client_pid = client_pid;
	memcpy(h->client_addr, client, 28);
	memcpy(h->server_addr, server, 28);
	__atomic_store_n(&h->magic, OSF_SEG_MAGIC, __ATOMIC_RELEASE);
}

void *osf_seg_parts(uint32_t ring, const uint8_t client[28], const uint8_t server[28],
		    int32_t client_pid, int *segfd, int wtx[2])
{
	void *m = osf_seg_new(ring, segfd);
	int e;

	if (!m)
		return NULL;
	osf_seg_init(m, ring, client, server, client_pid);
	if (osf_sys_socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, wtx) < 0) {
		e = errno;
		munmap(m, osf_seg_bytes(ring));
		osf_sys_close(*segfd);
		errno = e;
		return NULL;
	}
	return m;
}

/* ---- the companion ---------------------------------------------------- */

/* abstract fills sun with the abstract name (no leading NUL in name). */
static socklen_t abstract(struct sockaddr_un *sun, const char *name)
{
	size_t l = strnlen(name, sizeof(sun->sun_path) - 1);

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path + 1, name, l);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + l);
}

static uint32_t spread_seq;

/* spread_pick returns a pseudo-random number below n (n > 0): which member
 * of a SO_REUSEPORT group a connection tries first. */
static unsigned spread_pick(unsigned n)
{
	uint64_t x = (uint64_t)now_ns() ^
		     ((uint64_t)__atomic_add_fetch(&spread_seq, 1, __ATOMIC_RELAXED) << 32);

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (unsigned)(x % n);
}

/* trusted checks the owner of the companion at the other end of s
 * (SO_PEERCRED: who called listen on it) against the census. */
static int trusted(struct osf_dial *d, int s, int wild)
{
	struct ucred cr;

	if (osf_companion_owner(s, &cr) < 0)
		return 0;
	d->owner = cr;
	if (d->gateway && (cr.uid == 0 || cr.uid == geteuid()))
		return 1;
	if (d->census && osf_census_owns(d->census, cr.uid, d->addr, wild))
		return 1;
	if (d->untrusted)
		d->untrusted(d->arg, &cr);
	return 0;
}

int osf_dial_companion(struct osf_dial *d)
{
	char names[3][OSF_NAME_MAX];
	int wild[3];
	unsigned order[OSF_CENSUS_MAX + 1], u;
	int n, i, j, k, r, full = 0, cn = d->census ? d->census->n : 0;

	d->why = OSF_DIAL_NO_LISTENER;
	d->full_name[0] = 0;
	if (cn == 0 && !d->gateway)
		return -1; /* nothing a companion could stand for */
	n = osf_dial_names(d->addr, d->port, d->local, names, wild);
	/* SO_REUSEPORT groups: companions in slots 0..k (osf_slot_name), k the kernel listeners on the
	 * port (one slot more: a member that went away leaves a gap until
	 * another takes its slot). The slots are tried in random order, which
	 * spreads connections evenly over the members as the kernel does,
	 * gap or not. A census that counted more listeners than a group
	 * has companions tries them all. */
	k = cn > 1 ? (cn < (int)OSF_SLOT_MAX ? cn : (int)OSF_SLOT_MAX - 1) : 0;
	/* OSF_SHM_KFD (seqpacket): the kernel spreads the connections, and a
	 * group has one companion, slot 0 (preload/setup_group.c). */
	if (d->seqpacket)
		k = 0;
	for (i = 0, j = 0; i < n; j = (j + 1) % (k + 1), i += j == 0) {
		struct sockaddr_un sun;
		char slot[OSF_NAME_MAX + 16];
		socklen_t sl;
		int s;
		if (j == 0)
			for (r = 0; r <= k; r++)
				order[r] = (unsigned)r;
		r = j + (int)spread_pick((unsigned)(k + 1 - j));
		u = order[r];
		order[r] = order[j];
		order[j] = u;
		osf_slot_name(names[i], u, slot, sizeof(slot));
		sl = abstract(&sun, slot);
		d->stream = !d->seqpacket;
	retype:
		s = osf_sys_socket(AF_UNIX, (d->stream ? SOCK_STREAM : SOCK_SEQPACKET) |
						    SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (s < 0) {
			d->why = full ? OSF_DIAL_BACKLOG : OSF_DIAL_RESOURCE;
			return -1;
		}
		if (osf_sys_connect(s, (struct sockaddr *)&sun, sl) < 0) {
			/* An abstract name is found with its socket type: a
			 * companion of the other kind refuses. */
			if (errno == ECONNREFUSED && d->seqpacket == OSF_DIAL_EITHER && !d->stream) {
				osf_sys_close(s);
				d->stream = 1;
				goto retype;
			}
			if (errno == EAGAIN) {
				/* A full member of a group is full for this
				 * connection (the kernel does not try another
				 * either): on to the next name. The first full
				 * one is where a waiting SYN looks for room. */
				if (!full++) {
					memcpy(d->full_name, slot, sizeof(d->full_name) - 1);
					d->full_name[sizeof(d->full_name) - 1] = 0; /* names fit */
				}
				j = k;
			}
			osf_sys_close(s);
			continue;
		}
		if (!trusted(d, s, wild[i])) {
			osf_sys_close(s); /* a squatter: it gets nothing */
			continue;
		}
		memcpy(d->name, slot, sizeof(d->name) - 1);
		d->name[sizeof(d->name) - 1] = 0;
		return s;
	}
	if (full)
		d->why = OSF_DIAL_BACKLOG;
	errno = 0;
	return -1;
}

int osf_dial_on(int s, const char *name, int wait_ms, struct ucred *owner)
{
	struct sockaddr_un sun;
	socklen_t sl = abstract(&sun, name);
	struct timespec ms = {0, 1000000};
	int waited = 0;

	/* A full companion: retried every millisecond, as a SYN that waits
	 * (s's file status flags are its program's: none changed). */
	while (osf_sys_connect(s, (struct sockaddr *)&sun, sl) < 0) {
		if (errno != EAGAIN || waited++ >= wait_ms)
			return -1;
		nanosleep(&ms, NULL);
	}
	return osf_companion_owner(s, owner);
}

/* ---- the hello -------------------------------------------------------- */

static int hello_send(int s, uint32_t ring, uint32_t flags, const uint8_t client[28],
		      const uint8_t server[28], int segfd, int wtx,
		      const struct osf_hello_pool *p)
{
	struct osf_hello hello;
	struct osf_hello_pool pool;
	struct iovec iov[2] = {{&hello, sizeof(hello)}, {&pool, sizeof(pool)}};
	size_t want = sizeof(hello) + (p ? sizeof(pool) : 0);
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh;
	struct cmsghdr *cm;
	int fds[2] = {segfd, wtx};
	ssize_t n;

	memset(&hello, 0, sizeof(hello));
	hello.magic = OSF_HELLO_MAGIC;
	hello.version = OSF_SEG_VERSION;
	hello.size = sizeof(hello);
	hello.ring_bytes = ring;
	hello.flags = flags | (p ? OSF_HELLO_F_POOL : 0);
	memcpy(hello.client, client, 28);
	memcpy(hello.server, server, 28);
	if (p)
		pool = *p;
	memset(&mh, 0, sizeof(mh));
	memset(&u, 0, sizeof(u));
	mh.msg_iov = iov;
	mh.msg_iovlen = p ? 2 : 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	n = osf_sys_sendmsg(s, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n == (ssize_t)want)
		return 0;
	if (n >= 0)
		errno = EPROTO; /* a stream socket takes 72 (88) bytes whole or not at all */
	return -1;
}

int osf_hello_send(int s, uint32_t ring, uint32_t flags, const uint8_t client[28],
		   const uint8_t server[28], int segfd, int wtx)
{
	return hello_send(s, ring, flags & ~OSF_HELLO_F_POOL, client, server, segfd, wtx, NULL);
}

int osf_hello_send_pool(int s, uint32_t ring, uint32_t flags, const uint8_t client[28],
			const uint8_t server[28], int regionfd, int wtx,
			const struct osf_hello_pool *p)
{
	return hello_send(s, ring, flags, client, server, regionfd, wtx, p);
}

/* is_wake_socket accepts only a connected AF_UNIX stream socket as the
 * writers' wake socket: the data path sleeps in recv on it. */
static int is_wake_socket(int fd)
{
	int t = 0, d = 0;
	socklen_t l = sizeof(int);

	if (osf_sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &l) < 0 || t != SOCK_STREAM)
		return 0;
	l = sizeof(int);
	return osf_sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &d, &l) == 0 && d == AF_UNIX;
}

/* osf_wake_efd_ok (setup.h): a file of no type (an anonymous inode) that
 * takes an 8-byte write of 0, which leaves an eventfd's counter as it is
 * and never blocks; the other anonymous files (epoll, timerfd, signalfd,
 * inotify, userfaultfd, io_uring) have no write. */
int osf_wake_efd_ok(int fd, uint64_t *ino)
{
	struct stat st;
	uint64_t zero = 0;
	int fl;

	if (fstat(fd, &st) < 0 || (st.st_mode & S_IFMT) != 0)
		return 0;
	if (ino)
		*ino = (uint64_t)st.st_ino;
	fl = osf_sys_fcntl(fd, F_GETFL, 0);
	if (fl < 0 || (!(fl & O_NONBLOCK) && osf_sys_fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0))
		return 0;
	return osf_sys_write(fd, &zero, sizeof(zero)) == (ssize_t)sizeof(zero);
}

/* open_segment validates and maps a peer's segment (or, with p, the slot
 * p names of the peer's region, through map, which checks the region's
 * seals and the writers' eventfd efd); NULL with why set when it is
 * unusable. */
static void *open_segment(int fd, uint32_t ring, const struct osf_hello_pool *p,
			  osf_region_map_fn map, int efd, uint64_t *efd_ino,
			  const struct ucred *cr, char *why, size_t wn)
{
	struct stat st;
	void *m;
	int seals;
	uint64_t size = p ? p->region_bytes : osf_seg_bytes(ring);
	const int need = OSF_REGION_SEALS;
	uint32_t n;

	if (p && (!map || (n = osf_region_slots(p->region_bytes, ring)) == 0 || p->slot >= n)) {
		snprintf(why, wn, "invalid pooled hello: %s, region %llu bytes, slot %u",
			 map ? "bad bounds" : "this server maps no regions",
			 (unsigned long long)p->region_bytes, p->slot);
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
		snprintf(why, wn, "invalid segment: size %lld, want %llu",
			 (long long)st.st_size, (unsigned long long)size);
		return NULL;
	}
	if (p)
		return map(fd, &st, ring, p, efd, efd_ino, cr, why, wn);
	seals = osf_sys_fcntl(fd, F_GET_SEALS, 0);
	if (seals < 0 || (seals & need) != need) {
		snprintf(why, wn, "invalid segment: seals 0x%x, want 0x%x",
			 seals < 0 ? 0 : seals, need);
		return NULL;
	}
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		snprintf(why, wn, "map segment: %s", strerror(errno));
		return NULL;
	}
	if (!osf_seg_hdr_check(osf_seg_hdr(m, ring), ring)) {
		munmap(m, size);
		snprintf(why, wn, "invalid segment: header does not match the hello");
		return NULL;
	}
	return m;
}

int osf_hello_take(int cfd, uint32_t cap, struct osf_hello_in *in, char *why, size_t wn)
{
	return osf_hello_take_pool(cfd, cap, in, why, wn, NULL);
}

/* hello_verdict checks a hello received with its fds (n bytes, of which
 * h and the tail hold the first; ctrunc: the fds were truncated) and maps
 * its segment: osf_hello_take_pool's checks, in its order. The client's
 * credentials are cr, or when NULL cfd's SO_PEERCRED. */
static int hello_verdict(int cfd, const struct ucred *cr, ssize_t n, int ctrunc, int *fds,
			 int nfds, const struct osf_hello_pool *tail, uint32_t cap,
			 struct osf_hello_in *in, char *why, size_t wn, osf_region_map_fn map)
{
	struct osf_hello *h = &in->h;
	socklen_t crl = sizeof(in->cr);
	int verdict;
	void *seg = NULL;

	in->wake_tx_ino = 0;
	if (n == 0)
		snprintf(why, wn, "closed before its hello");
	else if (ctrunc)
		snprintf(why, wn, "hello's fds truncated");
	else if (nfds != 2)
		snprintf(why, wn, "hello carried %d fds, want 2", nfds);
	else if ((verdict = osf_hello_check(h, (size_t)n, cap)) == OSF_HELLO_MALFORMED)
		snprintf(why, wn, "malformed hello: %zd bytes, bad magic or version", n);
	else if (verdict == OSF_HELLO_BAD_RING)
		snprintf(why, wn, "malformed hello: bad ring size %u", h->ring_bytes);
	else if (verdict == OSF_HELLO_OVER_CAP)
		snprintf(why, wn, "ring size %u above this server's limit %u", h->ring_bytes, cap);
	else if ((h->flags & OSF_HELLO_F_EFD) && (!(h->flags & OSF_HELLO_F_POOL) || !map))
		snprintf(why, wn, "writers' eventfd without a region");
	else if (!(h->flags & OSF_HELLO_F_EFD) && !is_wake_socket(fds[1]))
		snprintf(why, wn, "writers' wake socket: not a stream socket");
	else if (!cr && osf_sys_getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &in->cr, &crl) < 0)
		snprintf(why, wn, "SO_PEERCRED: %s", strerror(errno));
	else {
		if (cr)
			in->cr = *cr;
		if (h->flags & OSF_HELLO_F_POOL)
			memcpy(&in->pool, tail, sizeof(in->pool));
		/* The eventfd is map's to check (osf_region_map_fn). */
		seg = open_segment(fds[0], h->ring_bytes,
				   (h->flags & OSF_HELLO_F_POOL) ? &in->pool : NULL, map,
				   (h->flags & OSF_HELLO_F_EFD) ? fds[1] : -1, &in->wake_tx_ino,
				   &in->cr, why, wn);
	}
	if (!seg) {
		while (nfds-- > 0)
			osf_sys_close(fds[nfds]);
		return n == 0 ? ECONNRESET : EPROTO;
	}
	in->seg = seg;
	in->seg_fd = fds[0];
	in->wake_tx_fd = fds[1];
	return 0;
}

int osf_hello_take_pool(int cfd, uint32_t cap, struct osf_hello_in *in, char *why,
			size_t wn, osf_region_map_fn map)
{
	return osf_hello_take_cred(cfd, NULL, cap, in, why, wn, map);
}

int osf_hello_take_cred(int cfd, const struct ucred *cr, uint32_t cap, struct osf_hello_in *in,
			char *why, size_t wn, osf_region_map_fn map)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh;
	struct cmsghdr *cm;
	int fds[4], nfds = 0;
	ssize_t n;
	struct {
		struct osf_hello_pool p;
		char extra;
	} tail; /* the pooled hello's second part, or a byte too many */
	struct iovec iov[2] = {{&in->h, sizeof(in->h)}, {&tail, sizeof(tail.p) + 1}};

	memset(&mh, 0, sizeof(mh));
	memset(&in->pool, 0, sizeof(in->pool));
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	why[0] = 0;
	n = osf_sys_recvmsg(cfd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	/* A client that closed its link with the server's note unread
	 * leaves ECONNRESET, reported once and ahead of the hellos it
	 * sent, which are still queued: read on (a link read to its end
	 * on this error lost them). */
	if (n < 0 && errno == ECONNRESET)
		n = osf_sys_recvmsg(cfd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? EAGAIN : errno;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int)), j;
			for (j = 0; j < k && nfds < 4; j++)
				memcpy(&fds[nfds++], CMSG_DATA(cm) + j * sizeof(int), sizeof(int));
		}
	}
	return hello_verdict(cfd, cr, n, (mh.msg_flags & MSG_CTRUNC) != 0, fds, nfds, &tail.p,
			     cap, in, why, wn, map);
}

int osf_hello_take_stored(const void *msg, size_t n, int fds[2], const struct ucred *cr,
			  uint32_t cap, struct osf_hello_in *in, char *why, size_t wn,
			  osf_region_map_fn map)
{
	struct osf_hello_pool tail;
	size_t t = n > sizeof(in->h) ? n - sizeof(in->h) : 0;

	memset(&in->h, 0, sizeof(in->h));
	memset(&in->pool, 0, sizeof(in->pool));
	memset(&tail, 0, sizeof(tail));
	memcpy(&in->h, msg, n < sizeof(in->h) ? n : sizeof(in->h));
	memcpy(&tail, (const char *)msg + sizeof(in->h), t < sizeof(tail) ? t : sizeof(tail));
	why[0] = 0;
	return hello_verdict(-1, cr, (ssize_t)n, 0, fds, 2, &tail, cap, in, why, wn, map);
}

/* ---- is local --------------------------------------------------------- */

/* The interfaces' addresses (getifaddrs), all of them, reloaded at most
 * every 2 s. */
#define HOST_TTL_NS 2000000000LL
pthread_mutex_t osf_host_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	long long loaded;
	int valid;
	struct ifaddrs *list;
} host;

/* host_has reports whether a (IPv6 form, unmapped when IPv4) is an
 * interface's address; osf_host_mu is held. */
static int host_has(const uint8_t a[16])
{
	long long now = now_ns();
	struct ifaddrs *i;
	int v4 = osf_name_is4(a);

	if (!host.valid || now - host.loaded >= HOST_TTL_NS) {
		if (host.list)
			freeifaddrs(host.list);
		host.list = NULL;
		host.valid = 1;
		host.loaded = now;
		if (getifaddrs(&host.list) < 0)
			host.list = NULL;
	}
	for (i = host.list; i; i = i->ifa_next) {
		const struct sockaddr *sa = i->ifa_addr;
		if (!sa)
			continue;
		if (sa->sa_family == AF_INET && v4 &&
		    memcmp(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, a + 12, 4) == 0)
			return 1;
		if (sa->sa_family == AF_INET6) {
			const uint8_t *b = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
			if (memcmp(b, a, 16) == 0)
				return 1; /* a v4-mapped interface address matches its IPv4 form too */
		}
	}
	return 0;
}

int osf_addr_local(const uint8_t a[16])
{
	static const uint8_t one[16] = {[15] = 1};
	int r;

	if (osf_name_unspec(a) || (osf_name_is4(a) ? a[12] == 127 : memcmp(a, one, 16) == 0))
		return 1;
	pthread_mutex_lock(&osf_host_mu);
	r = host_has(a);
	pthread_mutex_unlock(&osf_host_mu);
	return r;
}
