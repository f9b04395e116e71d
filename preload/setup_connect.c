//go:build osf_make

/* setup_connect.c: the client's side of the shm set-up (setup.h): whom to
 * trust (the companion's owner against the kernel's listeners) and
 * connect with its hello and segment. */
#include "setup_priv.h"

#define OSF_CENSUS_SYS(name) REAL(name)
#include "../sdp/census.h"
#include "../sdp/names.h"

/* ---- the companion's owner ------------------------------------------ */

/* Recent censuses, per port, reused for CENSUS_TTL_NS: a connection
 * churn asks the kernel once a second, not once per connect. A listener
 * that changed owner within that time is the only thing missed, and its
 * old owner held the port a moment ago. */
#define CENSUS_TTL_NS 1000000000LL
#define CENSUS_CACHE 8
static struct {
	pthread_mutex_t mu;
	struct {
		uint16_t port;
		long long at;
		struct osf_census c;
	} e[CENSUS_CACHE];
	unsigned next;
} census_cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* census_after_fork resets the census cache's lock in a fork child. */
OSF_FORK_TEXT static void census_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	OSF_RESET_MEM(&census_cache.mu, fresh);
}
OSF_AFTER_FORK(census_after_fork, OSF_FORK_RESET);

/* census_take finds the kernel TCP listeners on port; -1 when the kernel
 * cannot tell (no sock_diag): then nobody is trusted. */
static int census_take(uint16_t port, struct osf_census *c)
{
	long long now = osf_now_ns();
	int r, i;

	pthread_mutex_lock(&census_cache.mu);
	for (i = 0; i < CENSUS_CACHE; i++)
		if (census_cache.e[i].port == port && census_cache.e[i].c.n > 0 &&
		    now - census_cache.e[i].at < CENSUS_TTL_NS) {
			*c = census_cache.e[i].c;
			pthread_mutex_unlock(&census_cache.mu);
			return 0;
		}
	pthread_mutex_unlock(&census_cache.mu);
	r = osf_census_read(port, c);
	if (r == 0 && c->n > 0) {
		pthread_mutex_lock(&census_cache.mu);
		i = (int)(census_cache.next++ % CENSUS_CACHE);
		census_cache.e[i].port = port;
		census_cache.e[i].at = now;
		census_cache.e[i].c = *c;
		pthread_mutex_unlock(&census_cache.mu);
	}
	return r;
}

/* companion_trusted checks the owner of the companion at the other end of
 * s (SO_PEERCRED: who called listen on it) against the census. */
static int companion_trusted(int s, const struct osf_census *c, const struct ip *want, int wild)
{
	struct ip w = setup_as_family(*want, 1);
	struct ucred cr;

	if (osf_companion_owner(s, &cr) < 0)
		return 0;
	if (osf_census_owns(c, cr.uid, w.a, wild))
		return 1;
	if (setup_logs(OSF_LOGL_DEBUG)) {
		char a[80];
		setup_slog(OSF_LOGL_DEBUG, -1, 0, NULL,
		     "connect %s: companion of pid %d not trusted: no kernel TCP "
		     "listener of its uid %u there", setup_fmt_ap(want, a, sizeof(a)),
		     (int)cr.pid, (unsigned)cr.uid);
	}
	return 0;
}

/* ---- connect ---------------------------------------------------------- */

/* source_for is shm.SourceFor without the port: the address the kernel
 * would use to reach dst. */
static int source_for(struct ip dst, struct ip *src)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	uint8_t sa[28];
	int s;

	if (setup_ip_loop(&dst) && (dst.v4 ? dst.a[3] == 1 && dst.a[1] == 0 && dst.a[2] == 0 : 1)) {
		*src = dst; /* 127.0.0.1 and ::1 answer themselves */
		return 0;
	}
	setup_put_sockaddr(sa, &dst);
	s = REAL(socket)(dst.v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	if (REAL(connect)(s, (struct sockaddr *)sa, dst.v4 ? sizeof(struct sockaddr_in)
							  : sizeof(struct sockaddr_in6)) < 0 ||
	    REAL(getsockname)(s, (struct sockaddr *)&ss, &sl) < 0) {
		int e = errno;
		REAL(close)(s);
		errno = e;
		return -1;
	}
	REAL(close)(s);
	memset(sa, 0, sizeof(sa));
	memcpy(sa, &ss, sl < sizeof(sa) ? sl : sizeof(sa));
	return setup_get_sockaddr(sa, src) ? 0 : -1;
}

static uint32_t port_seq;

/* spread_pick returns a pseudo-random number below n (n > 0): which member
 * of a SO_REUSEPORT group a connection tries first. */
static unsigned spread_pick(unsigned n)
{
	uint64_t x = (uint64_t)osf_now_ns() ^
		     ((uint64_t)__atomic_add_fetch(&port_seq, 1, __ATOMIC_RELAXED) << 32);

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (unsigned)(x % n);
}

/* client_port is shm.ClientPort: a synthesized port in the ephemeral
 * range, distinct among this process's connections until it wraps. */
uint16_t setup_client_port(pid_t pid)
{
	uint32_t seq = __atomic_add_fetch(&port_seq, 1, __ATOMIC_RELAXED), span;
	uint16_t lo, hi;

	setup_eph_range(&lo, &hi);
	span = (uint32_t)(hi - lo + 1);
	return (uint16_t)(lo + ((uint32_t)pid * 2654435761u + seq * 40503u) % span);
}

/* fill_header writes the header of a fresh segment. */
static void fill_header(void *seg, uint32_t ring, const struct ip *client,
			const struct ip *server)
{
	struct osf_seg_hdr *h = osf_seg_hdr(seg, ring);

	h->version = OSF_SEG_VERSION;
	h->hdr_bytes = OSF_SEG_HDR_BYTES;
	h->ring_bytes = ring;
	h->client_pid = osf_pid();
	setup_put_sockaddr(h->client_addr, client);
	setup_put_sockaddr(h->server_addr, server);
	__atomic_store_n(&h->magic, OSF_SEG_MAGIC, __ATOMIC_RELEASE);
}

void *setup_seg_new(uint32_t ring, int *fdp)
{
	uint64_t size = osf_seg_bytes(ring);
	void *h;
	int fd = memfd_create(OSF_SEG_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING), e;

	if (fd < 0)
		return NULL;
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)size) < 0 ||
	    REAL(fcntl)(fd, F_ADD_SEALS,
			(void *)(long)(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) < 0)
		goto fail;
	h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		goto fail;
	*fdp = fd;
	return h;
fail:
	e = errno;
	REAL(close)(fd);
	errno = e;
	return NULL;
}

/* make_segment is setup_seg_new with its header written
 * (sdp.CreateSegment). */
static void *make_segment(uint32_t ring, const struct ip *client,
			  const struct ip *server, int *fdp)
{
	void *h = setup_seg_new(ring, fdp);

	if (h)
		fill_header(h, ring, client, server);
	return h;
}

/* send_hello sends the hello with the segment and the server's end of the
 * writers' wake socket. */
static int send_hello(int s, uint32_t ring, const struct ip *client,
		      const struct ip *server, int segfd, int wtx)
{
	struct osf_hello hello;
	struct iovec iov = {&hello, sizeof(hello)};
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh;
	struct cmsghdr *cm;
	int fds[2] = {segfd, wtx};

	memset(&hello, 0, sizeof(hello));
	hello.magic = OSF_HELLO_MAGIC;
	hello.version = OSF_SEG_VERSION;
	hello.size = sizeof(hello);
	hello.ring_bytes = ring;
	setup_put_sockaddr(hello.client, client);
	setup_put_sockaddr(hello.server, server);
	memset(&mh, 0, sizeof(mh));
	memset(&u, 0, sizeof(u));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	return REAL(sendmsg)(s, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(hello)
		       ? 0 : -1;
}

/* kernel fills a "use kernel TCP" (or strict refusal) answer. */
static int kernel(struct osf_core_conn *out, const struct ip *dst, int reason,
		  int err, const char *detail)
{
	char a[80];

	out->status = setup_cfg.c.strict && osf_route_fallback(reason) ? OSF_CORE_REFUSE
								 : OSF_CORE_KERNEL;
	out->reason = reason;
	out->reason_errno = err;
	setup_set_detail(out->detail, err ? strerror(err) : detail);
	if (out->status == OSF_CORE_REFUSE)
		setup_slog(OSF_LOGL_ERROR, reason, out->rule, out->detail,
		     "connect %s refused (OSF_STRICT=1): ", setup_fmt_ap(dst, a, sizeof(a)));
	else if (setup_logs(OSF_LOGL_DEBUG))
		setup_slog(OSF_LOGL_DEBUG, reason, out->rule, out->detail,
		     "connect %s: kernel: ", setup_fmt_ap(dst, a, sizeof(a)));
	return 1;
}

/* The hello's fds: the segment and the writers' wake socket. */
struct parts {
	uint8_t *seg;
	int segfd, wtx[2];
	int placed; /* a spare's: segfd and wtx[0] placed and marked hidden */
};

static int parts_make(struct parts *p, const struct ip *client, const struct ip *server)
{
	int e;

	p->seg = setup_spare_take(setup_cfg.c.ring_size, &p->segfd, p->wtx);
	p->placed = p->seg != NULL;
	if (p->seg) {
		fill_header(p->seg, setup_cfg.c.ring_size, client, server);
		return 0;
	}
	p->seg = make_segment(setup_cfg.c.ring_size, client, server, &p->segfd);
	if (!p->seg)
		return -1;
	if (REAL(socketpair)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->wtx) < 0) {
		e = errno;
		munmap(p->seg, osf_seg_bytes(setup_cfg.c.ring_size));
		REAL(close)(p->segfd);
		p->seg = NULL;
		errno = e;
		return -1;
	}
	return 0;
}

static void parts_drop(struct parts *p)
{
	int e = errno;

	if (!p->seg)
		return;
	munmap(p->seg, osf_seg_bytes(setup_cfg.c.ring_size));
	osf_fdt_close_hidden(p->segfd); /* a spare's are marked hidden */
	osf_fdt_close_hidden(p->wtx[0]);
	osf_fdt_close_hidden(p->wtx[1]);
	p->seg = NULL;
	errno = e;
}

/* reserve_port holds a local port for a connection from the application's
 * unbound TCP socket app_fd: bound to the client address with port 0 (the
 * kernel picks a free ephemeral port, put in *client). sockets.c keeps it,
 * hidden, for the connection's life, so that bind() to that port gets
 * EADDRINUSE as with TCP. The holder is the application's own socket (a
 * dup of it, which the wake socket's dup3 onto app_fd leaves alive): its
 * options are the application's, and making it costs no socket. A socket
 * with dups, or registered in an epoll set (OSF_FDF_NOKEEP), where it would
 * go on reporting under app_fd's number, gets a fresh TCP socket with its
 * SO_REUSEADDR and SO_REUSEPORT instead. Returns the holder, already in the
 * hidden range (the caller's window is open), or -1 (no free port, or
 * no fd for the holder: the connection goes to kernel TCP). */
static uint16_t port_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	uint8_t sa[28];
	struct ip got;

	if (REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) < 0)
		return 0;
	memset(sa, 0, sizeof(sa));
	memcpy(sa, &ss, sl < sizeof(sa) ? sl : sizeof(sa));
	return setup_get_sockaddr(sa, &got) ? got.port : 0;
}

static int reserve_port(int app_fd, int family, struct ip *client)
{
	static const int opts[] = {SO_REUSEADDR, SO_REUSEPORT};
	struct ip a = setup_as_family(*client, family == AF_INET6);
	uint8_t sa[28];
	struct osf_fdt_entry *e = osf_fdt_lookup(app_fd);
	uint32_t fl = e ? __atomic_load_n(&e->flags, __ATOMIC_RELAXED)
			: OSF_FDF_NOKEEP | OSF_FDF_REUSESET;
	int saved = errno, pl = -1, h, i;
	uint16_t port = 0;
	socklen_t al;

	a.port = 0;
	setup_put_sockaddr(sa, &a);
	al = a.v4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	if (!(fl & OSF_FDF_NOKEEP) && (pl = osf_fdt_dup_high(app_fd, 1)) >= 0) {
		if (REAL(bind)(pl, (struct sockaddr *)sa, al) < 0) {
			int err = errno;
			REAL(close)(pl);
			if (err == EADDRINUSE) { /* no free port: a fresh socket has none either */
				errno = saved;
				return -1;
			}
			pl = -1;
		} else if ((port = port_of(pl)) == 0) { /* IP_BIND_ADDRESS_NO_PORT */
			REAL(close)(pl);
			pl = -1;
		}
	}
	if (pl < 0) { /* a socket of its own (bound already, dups, epoll) */
		pl = REAL(socket)(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (pl < 0) {
			errno = saved;
			return -1;
		}
		/* Never set through any fd of it (OSF_FDF_REUSESET): both off. */
		for (i = 0; i < 2 && (fl & OSF_FDF_REUSESET); i++) {
			int v = 0;
			socklen_t vl = sizeof(v);
			if (REAL(getsockopt)(app_fd, SOL_SOCKET, opts[i], &v, &vl) == 0 && v)
				(void)REAL(setsockopt)(pl, SOL_SOCKET, opts[i], &v, sizeof(v));
		}
		if (REAL(bind)(pl, (struct sockaddr *)sa, al) < 0 ||
		    (port = port_of(pl)) == 0 || (h = osf_fdt_dup_high(pl, 1)) < 0) {
			REAL(close)(pl);
			errno = saved;
			return -1;
		}
		REAL(close)(pl);
		pl = h;
	}
	client->port = port;
	errno = saved;
	return pl;
}

/* OSF_R_NO_PORT: dial's own reason, reported as OSF_R_RESOURCE with a
 * detail (not an osf_reason: never recorded). */
#define OSF_R_NO_PORT 1000

/* dial tries each companion name that could serve dst (sdp/names.h).
 * A companion is trusted only when its owner holds the kernel TCP
 * listener it stands for (the census, taken first); the hello goes right
 * after that check, so that a server sees the connection without it only
 * for the time of one system call; the local port is reserved (need_port:
 * *port_fd) only then, when the connection is sure to be offloaded. Returns the connected socket with p
 * filled, or -1 with *why (an osf_reason) and errno. */
static int dial(struct ip a, struct ip *client, const struct osf_core_connect_in *in,
		int need_port, int *port_fd, struct parts *p, int *why,
		char full_name[108])
{
	char names[3][OSF_NAME_MAX];
	int wild[3];
	struct osf_census c;
	struct ip w;
	unsigned order[OSF_CENSUS_MAX + 1], u;
	int n = 0, i, j, k, r, full = 0, e;

	p->seg = NULL;
	*why = OSF_R_NO_LISTENER;
	errno = 0;
	if (census_take(a.port, &c) < 0 || c.n == 0)
		return -1; /* nothing a companion could stand for */
	w = setup_as_family(a, 1);
	n = osf_dial_names(w.a, a.port, setup_is_local(a), names, wild);
	if (parts_make(p, client, &a) < 0) {
		*why = OSF_R_RESOURCE;
		return -1;
	}
	/* SO_REUSEPORT groups: companions in slots 0..k (setup_slot_name),
	 * k the kernel listeners on the port (one slot more: a member that
	 * went away leaves a gap until another takes its slot). The slots are
	 * tried in random order, which spreads connections evenly over the
	 * members as the kernel does, gap or not. */
	k = c.n > 1 && c.n < OSF_CENSUS_MAX ? c.n : 0;
	for (i = 0, j = 0; i < n; j = (j + 1) % (k + 1), i += j == 0) {
		struct sockaddr_un sun;
		char slot[144];
		socklen_t sl;
		int s;
		if (j == 0)
			for (r = 0; r <= k; r++)
				order[r] = (unsigned)r;
		r = j + (int)spread_pick((unsigned)(k + 1 - j));
		u = order[r];
		order[r] = order[j];
		order[j] = u;
		setup_slot_name(names[i], u, slot, sizeof(slot));
		sl = setup_abstract(&sun, slot);
		s = REAL(socket)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (s < 0) {
			*why = OSF_R_RESOURCE;
			break;
		}
		if (REAL(connect)(s, (struct sockaddr *)&sun, sl) < 0) {
			if (errno == EAGAIN) {
				/* A full member of a group is full for this
				 * connection (the kernel does not try another
				 * either): on to the next name. The first full
				 * one is where a waiting SYN looks for room. */
				if (!full++) {
					memcpy(full_name, slot, 107); /* names fit */
					full_name[107] = 0;
				}
				j = k;
			}
			REAL(close)(s);
			continue;
		}
		if (!companion_trusted(s, &c, &a, wild[i])) {
			REAL(close)(s); /* a squatter: it gets nothing */
			continue;
		}
		if (need_port) {
			*port_fd = reserve_port(in->app_fd, in->family, client);
			if (*port_fd < 0) {
				/* No free port: kernel TCP, whose connect then
				 * fails as it would without osf (EADDRNOTAVAIL),
				 * or finds a port freed meanwhile. The companion
				 * sees a connection without a hello and drops it. */
				REAL(close)(s);
				parts_drop(p);
				*why = OSF_R_NO_PORT;
				errno = 0;
				return -1;
			}
			setup_put_sockaddr(osf_seg_hdr(p->seg, setup_cfg.c.ring_size)->client_addr,
					   client);
		}
		osf_seg_hdr(p->seg, setup_cfg.c.ring_size)->connect_ns = osf_now_ns();
		if (send_hello(s, setup_cfg.c.ring_size, client, &a, p->segfd, p->wtx[1]) < 0) {
			e = errno;
			REAL(close)(s);
			if (*port_fd >= 0)
				REAL(close)(*port_fd);
			*port_fd = -1;
			parts_drop(p);
			*why = OSF_R_HANDSHAKE;
			errno = e;
			return -1;
		}
		REAL(close)(p->wtx[1]);
		p->wtx[1] = -1;
		return s;
	}
	parts_drop(p);
	if (full)
		*why = OSF_R_BACKLOG;
	errno = 0;
	return -1;
}

int osf_setup_connect(const struct osf_core_connect_in *in,
		      struct osf_core_conn *out, int *port_fd, int *placed, int *window)
{
	struct osf_route_decision d;
	struct ip dst, real, local, bound, src, hello_client;
	struct parts p;
	char full_name[108] = "";
	int s, why, have_bound;

	if (!setup_usable())
		return 0;
	dst = setup_ip_from(in->family, in->addr, in->port);
	setup_decide(OSF_ROUTE_CLIENT, dst, &d);
	if (d.need_go)
		return 0;
	out->rule = d.rule;
	if (d.transport != OSF_ROUTE_SHM)
		return kernel(out, &dst, d.reason, 0, d.detail);
	real = setup_ip_unmap(dst);
	/* clientAddr: the bound address and port, else the kernel's source
	 * address with the port reserve_port holds */
	have_bound = setup_get_sockaddr(in->bound, &bound);
	/* The set-up's fds (census, segment, wake sockets) may lie above the
	 * program's RLIMIT_NOFILE: they cost it none, as TCP's connect. */
	osf_fdt_high_begin();
	if (!osf_fdt_affordable()) { /* soft = hard, a limit a program may fill */
		osf_fdt_high_end();
		return kernel(out, &dst, OSF_R_RESOURCE, 0, FD_ROOM_DETAIL);
	}
	if (source_for(real, &src) < 0) {
		osf_fdt_high_end();
		return kernel(out, &dst, OSF_R_HANDSHAKE, errno, NULL);
	}
	local = src;
	local.port = 0; /* the port reserve_port holds */
	if (have_bound && !setup_ip_unspec(&bound))
		memcpy(local.a, bound.a, 16), local.v4 = bound.v4;
	if (have_bound && bound.port)
		local.port = bound.port;
	hello_client = setup_as_family(local, !real.v4);
	*port_fd = -1;
	s = dial(real, &hello_client, in, !(have_bound && bound.port), port_fd, &p, &why,
		 full_name);
	/* An offloaded connection's install takes this window over (one
	 * RLIMIT_NOFILE read per connect), unless a line is to be logged:
	 * the core's logger is never called inside a window. */
	*window = s >= 0 && !setup_logs(OSF_LOGL_DEBUG);
	if (!*window)
		osf_fdt_high_end();
	if (s < 0) {
		if (why == OSF_R_NO_PORT)
			kernel(out, &dst, OSF_R_RESOURCE, 0, "cannot hold a local port");
		else
			kernel(out, &dst, why, errno, NULL);
		/* A full companion: the SYN waits, as TCP's would. */
		if (why == OSF_R_BACKLOG && out->status == OSF_CORE_KERNEL)
			(void)setup_syn_hold(in->app_fd, in->family == AF_INET6, full_name);
		return 1;
	}
	local.port = hello_client.port;
	*placed = p.placed;
	out->status = OSF_CORE_OFFLOADED;
	out->wake_fd = s;
	out->seg_fd = p.segfd;
	out->wake_tx_fd = p.wtx[0];
	out->side = OSF_SIDE_CLIENT;
	out->seg_addr = (uint64_t)(uintptr_t)p.seg;
	out->ring_bytes = setup_cfg.c.ring_size;
	local = setup_as_family(local, in->family == AF_INET6);
	setup_put_sockaddr(out->local, &local);
	setup_put_sockaddr(out->peer, &dst);
	if (setup_logs(OSF_LOGL_DEBUG)) {
		char a[80], b[80];
		setup_slog(OSF_LOGL_DEBUG, -1, 0, NULL, "connect %s: shm (rule %d), local %s",
		     setup_fmt_ap(&dst, a, sizeof(a)), d.rule, setup_fmt_ap(&local, b, sizeof(b)));
	}
	return 1;
}

