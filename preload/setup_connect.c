//go:build osf_make

/* setup_connect.c: the client's side of the shm set-up (setup.h): the
 * route decision, the census cache, the local address and port, and the
 * connect with its hello and segment (the companion, its trust, the
 * segment and the hello are sdp/setup.c's, which the Go dialers share). */
#include "setup_priv.h"

#define OSF_CENSUS_SYS(name) REAL(name)
#include "../sdp/census.h"
#include "../sdp/setup.h"
#include "pool.h"

#include <stdlib.h>

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

int osf_setup_port_listened(uint16_t port)
{
	struct osf_census c;

	return osf_census_read(port, &c) < 0 || c.n > 0;
}

/* untrusted logs a companion osf_dial_companion did not trust. */
static void untrusted(void *arg, const struct ucred *cr)
{
	char a[80];

	if (setup_logs(OSF_LOGL_DEBUG))
		setup_slog(OSF_LOGL_DEBUG, -1, 0, NULL,
			   "connect %s: companion of pid %d not trusted: no kernel TCP "
			   "listener of its uid %u there", setup_fmt_ap(arg, a, sizeof(a)),
			   (int)cr->pid, (unsigned)cr->uid);
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

/* fill_header writes the header of a fresh segment (osf_seg_init). */
static void fill_header(void *seg, uint32_t ring, const struct ip *client,
			const struct ip *server)
{
	uint8_t c[28], v[28];

	setup_put_sockaddr(c, client);
	setup_put_sockaddr(v, server);
	osf_seg_init(seg, ring, c, v, osf_pid());
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

/* The hello's fds: the segment and the writers' wake socket (or the
 * region's eventfd). */
struct parts {
	uint8_t *seg;
	int segfd, wtx[2];
	int efd;    /* a slot's region's writers' eventfd (OSF_SHM_EFD), else -1 */
	int placed; /* a spare's: segfd and wtx[0] placed and marked hidden */
	int pool;   /* OSF_SHM_POOL: the segment is taken after the dial */
	struct osf_hello_pool hp; /* seg is a slot of a region: its hello part */
	int slot;   /* seg is a slot (hp) */
};

static int parts_make(struct parts *p, const struct ip *client, const struct ip *server)
{
	uint8_t c[28], v[28];

	p->slot = 0;
	p->efd = -1;
	p->pool = osf.shm_pool;
	if (p->pool) { /* the writers' pair now, the slot once the companion is known */
		p->seg = NULL;
		p->segfd = -1;
		p->placed = 0;
		p->wtx[0] = p->wtx[1] = -1;
		/* The region's eventfd, or the pair after all (OSF_SHM_KFD
		 * too: a peer killed after its shutdown(SHUT_WR) is a reset on
		 * the TCP socket, osf_side_probe_peer). */
		if (osf.shm_efd)
			return 0;
		return REAL(socketpair)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->wtx);
	}

	p->seg = setup_spare_take(setup_cfg.c.ring_size, &p->segfd, p->wtx);
	p->placed = p->seg != NULL;
	if (p->seg) {
		fill_header(p->seg, setup_cfg.c.ring_size, client, server);
		return 0;
	}
	setup_put_sockaddr(c, client);
	setup_put_sockaddr(v, server);
	p->seg = osf_seg_parts(setup_cfg.c.ring_size, c, v, osf_pid(), &p->segfd, p->wtx);
	return p->seg ? 0 : -1;
}

static void parts_drop(struct parts *p)
{
	int e = errno;

	if (!p->seg && !p->pool)
		return;
	if (p->seg && p->slot)
		osf_pool_abandon(p->seg, setup_cfg.c.ring_size); /* no peer saw it */
	else if (p->seg)
		munmap(p->seg, osf_seg_bytes(setup_cfg.c.ring_size));
	if (!p->slot) /* a slot's is its region's */
		osf_fdt_close_hidden(p->segfd); /* a spare's are marked hidden */
	osf_fdt_close_hidden(p->wtx[0]);
	osf_fdt_close_hidden(p->wtx[1]);
	p->seg = NULL;
	p->pool = p->slot = 0;
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

/* ---- OSF_SHM_KFD: the hello after the kernel's connect ------------- */

/* A connection from a socket the program did not bind to a port takes
 * the port the kernel's connect picks, as TCP's does: the kernel reuses
 * a TIME_WAIT port there (tcp_tw_reuse), shares a port across
 * destinations and keeps IP_BIND_ADDRESS_NO_PORT, where a bind to port 0
 * takes only a port nothing holds (a client making many short
 * connections ran out of ports after the namespace's range). The hello
 * names the connection by that port, so it goes after the connect: dial
 * leaves it here, ready, for osf_setup_kfd_announce, the same thread's
 * next step (sockets.c connect_kfd; a connect made meanwhile on this
 * thread, by a signal handler, is kernel TCP). The server waits for it,
 * bounded (setup_kfd.c osf_setup_kfd_take). */
static __thread struct announce {
	int on;
	unsigned link; /* the link's generation (setup_link_get) */
	uint32_t hf;
	struct ip dst, client; /* the hello's, the client's port still 0 */
	struct parts p;
	struct osf_core_connect_in in;
	int tight;
} tls_an __attribute__((tls_model("initial-exec")));

/* tls_nopoke: the link of the connection dial just made says its
 * listener has no TCP_DEFER_ACCEPT (setup_link_note_flags), for
 * osf_setup_kfd_announce to report. */
static __thread int tls_nopoke __attribute__((tls_model("initial-exec")));

/* hello_send sends p's hello (flags hf, from client) on s, or with link
 * on the link of that generation to a (another thread dropped it:
 * EPIPE): 0, or -1 with errno. */
static int hello_send(const struct ip *a, unsigned link, int s, const struct parts *p,
		      uint32_t hf, const struct ip *client)
{
	uint8_t cl[28], sv[28];
	int r, e;

	setup_put_sockaddr(cl, client);
	setup_put_sockaddr(sv, a);
	if (link && (s = setup_link_lock(a, link)) < 0) {
		errno = EPIPE;
		return -1;
	}
	r = p->slot ? osf_hello_send_pool(s, setup_cfg.c.ring_size, hf, cl, sv, p->segfd,
					  p->efd >= 0 ? p->efd : p->wtx[1], &p->hp)
		    : osf_hello_send(s, setup_cfg.c.ring_size, hf, cl, sv, p->segfd, p->wtx[1]);
	e = errno;
	if (link)
		setup_link_unlock(a, r < 0 ? e : 0);
	errno = e;
	return r;
}

/* kfd_bind binds the application's unbound TCP socket app_fd to the
 * client address with port 0 (OSF_SHM_KFD, a connection whose hello goes
 * before its SYN: its link's first, or its listener keeps no SYN): the
 * kernel picks a free ephemeral port, put in *client, which the socket
 * holds as TCP's own; the server finds the hello by it. -1 when no port
 * is free or the socket cannot be bound (IP_BIND_ADDRESS_NO_PORT, bound
 * already): kernel TCP. */
static int kfd_bind(int app_fd, int family, struct ip *client)
{
	struct ip a = setup_as_family(*client, family == AF_INET6);
	struct osf_fdt_entry *e = osf_fdt_lookup(app_fd);
	uint8_t sa[28];
	int saved = errno, noport = 0, zero = 0, r;
	socklen_t l = sizeof(noport);
	uint16_t port;

	a.port = 0;
	setup_put_sockaddr(sa, &a);
	/* IP_BIND_ADDRESS_NO_PORT would leave the port to connect: the
	 * port is taken at this bind instead (LIMITS.md), the option kept. */
	if (e && (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_KOPTS) &&
	    REAL(getsockopt)(app_fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &noport, &l) == 0 &&
	    noport)
		(void)REAL(setsockopt)(app_fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &zero,
				       sizeof(zero));
	r = REAL(bind)(app_fd, (struct sockaddr *)sa,
		       a.v4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	if (noport)
		(void)REAL(setsockopt)(app_fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &noport,
				       sizeof(noport));
	if (r < 0 || (port = port_of(app_fd)) == 0) {
		errno = saved;
		return -1;
	}
	client->port = port;
	errno = saved;
	return 0;
}

/* OSF_R_NO_PORT, OSF_R_FD_CAP: dial's own reasons, reported as
 * OSF_R_RESOURCE with a detail (not osf_reasons: never recorded). */
#define OSF_R_NO_PORT 1000
#define OSF_R_FD_CAP 1001

/* ---- a hello that waits for the first byte (TCP_DEFER_ACCEPT) ------- */

/* defer_dial makes the connection to a whose companion connection waits
 * for its first byte (a slot of the region d names; p's writers' pair
 * made if it needs one): its wake socket, a unix stream socket not yet
 * connected, returned; the hello's parts in tls_wait; the port reserved
 * as dial does. -2: no free slot there (the ordinary dial), -1 with *why
 * (p dropped). */
static int defer_dial(const struct ip *a, struct ip *client, const struct osf_core_connect_in *in,
		      int need_port, int *port_fd, struct parts *p, const struct osf_dial *d,
		      uint32_t secs, int *why)
{
	struct osf_hello_wait *w;
	int s;

	*why = OSF_R_RESOURCE;
	p->seg = osf_pool_take(setup_cfg.c.ring_size, &d->owner, d->name, OSF_POOL_NOMAKE, 0,
			       &p->segfd, &p->efd, &p->hp);
	p->slot = p->seg != NULL;
	if (!p->seg)
		return -2;
	if ((p->efd < 0 && p->wtx[0] < 0 &&
	     REAL(socketpair)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->wtx) < 0)) {
		parts_drop(p);
		return -1;
	}
	w = calloc(1, sizeof(*w));
	s = w ? REAL(socket)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0) : -1;
	if (s < 0) {
		free(w);
		parts_drop(p);
		return -1;
	}
	fill_header(p->seg, setup_cfg.c.ring_size, client, a);
	if (need_port) {
		*port_fd = reserve_port(in->app_fd, in->family, client);
		if (*port_fd < 0) {
			REAL(close)(s);
			free(w);
			parts_drop(p);
			*why = OSF_R_NO_PORT;
			errno = 0;
			return -1;
		}
		setup_put_sockaddr(osf_seg_hdr(p->seg, setup_cfg.c.ring_size)->client_addr, client);
	}
	memcpy(w->name, d->name, sizeof(w->name));
	w->owner = d->owner;
	w->ring = setup_cfg.c.ring_size;
	w->hf = p->efd >= 0 ? OSF_HELLO_F_EFD : 0;
	setup_put_sockaddr(w->client, client);
	setup_put_sockaddr(w->server, a);
	w->regionfd = p->segfd;
	w->wtx_own = p->efd < 0;
	w->wtx = p->efd >= 0 ? p->efd : p->wtx[1];
	p->wtx[1] = -1;
	w->hp = p->hp;
	w->sock = -1;
	/* Then the server accepts it without data, as TCP's does after the
	 * defer time (SETUP_DEFER_DUE_S at most). */
	w->due = osf_now_ns() + (secs < SETUP_DEFER_DUE_S ? (long long)secs : SETUP_DEFER_DUE_S) *
					1000000000LL;
	setup_hello_leave(w);
	return s;
}

/* dial tries each companion that could serve dst (osf_dial_companion,
 * sdp/setup.c). A companion is trusted only when its owner holds the
 * kernel TCP listener it stands for (the census, taken first, from the
 * cache); the segment is made before, so that the hello goes right after
 * that check and a server sees the connection without it only for the
 * time of one system call; the local port is reserved (need_port:
 * *port_fd) only then, when the connection is sure to be offloaded.
 * OSF_SHM_KFD: the hello goes on the process's link to dst's companion
 * when it has one (setup_link.c: no census, no dial), else on a fresh
 * companion connection kept as the link; a link found broken is
 * forgotten and one fresh dial tried; a listener whose companion is a
 * SOCK_STREAM one (OSF_DIAL_EITHER) gets the hello of the switch's
 * absence, on a companion connection of its own (*kfdp 0, else 1); with
 * need_port the hello is left for osf_setup_kfd_announce (returns 0).
 * Returns the socket the hello went on (under OSF_SHM_KFD the link's,
 * not the caller's to close) with p filled, or -1 with *why (an
 * osf_reason) and errno. */
static int dial(struct ip a, struct ip *client, const struct osf_core_connect_in *in,
		int need_port, int *port_fd, struct parts *p, int *why,
		char full_name[108], int tight, int *kfdp)
{
	struct osf_census c;
	struct osf_dial d;
	struct ip w = setup_as_family(a, 1);
	uint32_t hf, secs;
	unsigned link = 0, note;
	int s = -1, e, r, retried = 0, kfd;

again:
	kfd = osf.shm_kfd; /* a link is a SOCK_SEQPACKET companion's */
	p->seg = NULL;
	*why = OSF_R_NO_LISTENER;
	errno = 0;
	memset(&d, 0, sizeof(d));
	if (osf.shm_kfd && !retried)
		link = setup_link_get(&a, &d.owner, d.name);
	if (!link && (census_take(a.port, &c) < 0 || c.n == 0))
		return -1; /* nothing a companion could stand for */
	if (!link && tight && !osf_fdt_budget_ok(1) &&
	    (setup_link_prune(), !osf_fdt_budget_ok(1))) { /* closed servers' links count */
		*why = OSF_R_FD_CAP; /* no fd for a link: before the SYN */
		return -1;
	}
	if (parts_make(p, client, &a) < 0) {
		*why = OSF_R_RESOURCE;
		return -1;
	}
	/* A listener that defers, noted by its server: the hello waits for
	 * the connection's first byte (osf_setup_hello_go). Not under the
	 * switch (its kernel connection defers as TCP's). */
	if (!link && !osf.shm_kfd && p->pool && !tight && osf.shm_defer &&
	    (secs = setup_defer_find(&a, &c, &d)) != 0) {
		s = defer_dial(&a, client, in, need_port, port_fd, p, &d, secs, why);
		if (s != -2) {
			*kfdp = 0;
			return s;
		}
	}
	if (!link) {
		memcpy(d.addr, w.a, 16);
		d.port = a.port;
		d.local = setup_is_local(a);
		d.census = &c;
		d.untrusted = untrusted;
		d.arg = &a;
		/* OSF_SHM_KFD: a listener of the switch's absence (the Go
		 * core's, whose route may take RDMA connections; a server
		 * without the switch) has a SOCK_STREAM companion: its
		 * hello as without the switch, the connection not its
		 * kernel socket. Not at a tight limit, where such a
		 * connection's hidden fds would be the program's. */
		d.seqpacket = !osf.shm_kfd ? 0 : tight ? 1 : OSF_DIAL_EITHER;
		s = osf_dial_companion(&d);
		kfd = osf.shm_kfd && !d.stream;
		if (s < 0) {
			parts_drop(p);
			*why = d.why == OSF_DIAL_BACKLOG ? OSF_R_BACKLOG
			       : d.why == OSF_DIAL_RESOURCE ? OSF_R_RESOURCE : OSF_R_NO_LISTENER;
			memcpy(full_name, d.full_name, 108);
			errno = 0;
			return -1;
		}
	}
	if (p->pool) { /* a slot of this listener's region, else a segment */
		p->seg = osf_pool_take(setup_cfg.c.ring_size, &d.owner, d.name, OSF_POOL_NOMAKE,
				       0, &p->segfd, &p->efd, &p->hp);
		if (!p->seg) /* a region: wide when the program's limit or the server's is tight */
			p->seg = osf_pool_take(setup_cfg.c.ring_size, &d.owner, d.name,
					       tight ? OSF_POOL_CAPPED : OSF_POOL_MAKE,
					       tight ? (uint32_t)tight
					       : link ? setup_link_wide(&a, link) : 0,
					       &p->segfd, &p->efd, &p->hp);
		p->slot = p->seg != NULL;
		if (!p->seg && tight) { /* a segment's memfd would cost the program */
			if (!link)
				REAL(close)(s);
			parts_drop(p);
			*why = OSF_R_FD_CAP;
			errno = 0;
			return -1;
		}
		if (!p->seg)
			p->seg = osf_seg_new(setup_cfg.c.ring_size, &p->segfd);
		if (!p->slot)
			p->efd = -1;
		if (!p->seg || (p->efd < 0 && p->wtx[0] < 0 &&
				REAL(socketpair)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->wtx) < 0)) {
			if (!link)
				REAL(close)(s);
			parts_drop(p);
			*why = OSF_R_RESOURCE;
			return -1;
		}
		fill_header(p->seg, setup_cfg.c.ring_size, client, &a);
	}
	hf = (kfd ? OSF_HELLO_F_KFD : 0) | (p->efd >= 0 ? OSF_HELLO_F_EFD : 0);
	note = kfd && link ? setup_link_note_flags(&a, link) : 0;
	tls_nopoke = (note & SETUP_LINK_NOTED) && !(note & SETUP_LINK_NOTE_DEFER);
	if (need_port && (note & SETUP_LINK_NOTED) && (note & SETUP_LINK_NOTE_SYN) && !tls_an.on) {
		/* The kernel's connect picks the port: the hello goes after
		 * it, on the link, osf_setup_kfd_announce; its server looks
		 * for a late one only for a SYN it kept, so only when the
		 * link's note says its listener keeps them. */
		osf_seg_hdr(p->seg, setup_cfg.c.ring_size)->connect_ns = osf_now_ns();
		tls_an.on = 1;
		tls_an.link = link;
		tls_an.hf = hf;
		tls_an.dst = a;
		tls_an.client = *client;
		tls_an.p = *p;
		tls_an.in = *in;
		tls_an.tight = tight;
		*kfdp = kfd;
		return 0;
	} else if (need_port && kfd) { /* the application's socket takes the port */
		if (kfd_bind(in->app_fd, in->family, client) < 0) {
			if (!link)
				REAL(close)(s);
			parts_drop(p);
			*why = OSF_R_NO_PORT;
			errno = 0;
			return -1;
		}
		setup_put_sockaddr(osf_seg_hdr(p->seg, setup_cfg.c.ring_size)->client_addr, client);
	} else if (need_port) {
		*port_fd = reserve_port(in->app_fd, in->family, client);
		if (*port_fd < 0) {
			/* No free port: kernel TCP, whose connect then fails as
			 * it would without osf (EADDRNOTAVAIL), or finds a port
			 * freed meanwhile. The companion sees a connection
			 * without a hello and drops it. */
			REAL(close)(s);
			parts_drop(p);
			*why = OSF_R_NO_PORT;
			errno = 0;
			return -1;
		}
		setup_put_sockaddr(osf_seg_hdr(p->seg, setup_cfg.c.ring_size)->client_addr, client);
	}
	osf_seg_hdr(p->seg, setup_cfg.c.ring_size)->connect_ns = osf_now_ns();
	r = hello_send(&a, link, s, p, hf, client);
	e = errno;
	if (r < 0) {
		if (!link)
			REAL(close)(s);
		if (*port_fd >= 0)
			REAL(close)(*port_fd);
		*port_fd = -1;
		parts_drop(p);
		if (link && e != EAGAIN && !retried++) {
			link = 0; /* broken: a fresh dial */
			s = -1;
			goto again;
		}
		*why = OSF_R_HANDSHAKE; /* a full link (EAGAIN) too: kernel TCP, no SYN held */
		errno = e;
		return -1;
	}
	if (p->wtx[1] >= 0)
		REAL(close)(p->wtx[1]);
	p->wtx[1] = -1;
	if (kfd && !link)
		setup_link_keep(&a, s, &d.owner, d.name);
	*kfdp = kfd;
	return link ? 0 : s; /* the link's is not the caller's */
}

int osf_setup_connect(const struct osf_core_connect_in *in,
		      struct osf_core_conn *out, int *port_fd, int *placed, int *window)
{
	struct osf_route_decision d;
	struct ip dst, real, local, bound, src, hello_client;
	struct parts p;
	char full_name[108] = "";
	int s, why, have_bound, tight, kfd = 0;

	if (!setup_begin(OSF_ROUTE_CLIENT, in->family, in->addr, in->port, &dst, &d))
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
	/* Soft = hard, a limit a program may fill: OSF_SHM_KFD's
	 * connections hold no fd of their own (the writers' wake-ups on
	 * the region's eventfd), and its wide regions make osf's few per
	 * listener (OSF_FDT_TIGHT_CAP, checked where a set-up adds one). */
	tight = osf.shm_kfd && osf.shm_efd ? osf_fdt_tight_limit() : 0;
	if (!tight && !osf_fdt_affordable()) {
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
		 full_name, tight, &kfd);
	/* An offloaded connection's install takes this window over (one
	 * RLIMIT_NOFILE read per connect). */
	*window = s >= 0;
	if (!*window)
		osf_fdt_high_end();
	if (s < 0) {
		if (why == OSF_R_NO_PORT)
			kernel(out, &dst, OSF_R_RESOURCE, 0, "cannot hold a local port");
		else if (why == OSF_R_FD_CAP)
			kernel(out, &dst, OSF_R_RESOURCE, 0, FD_CAP_DETAIL);
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
	if (kfd) /* the hello waits on the link (setup_link.c) */
		out->wake_fd = -1;
	out->seg_fd = p.segfd;
	out->wake_tx_fd = p.efd >= 0 ? p.efd : p.wtx[0];
	out->wake_tx_efd = p.efd >= 0;
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

int osf_setup_kfd_announce(int fd, struct osf_core_conn *cc, int *poke)
{
	struct announce an;
	char full_name[108];
	struct parts p;
	uint16_t port, np;
	int s, why, pfd = -1, saved = errno, kfd = 0;

	*poke = !tls_nopoke;
	tls_nopoke = 0;
	if (!tls_an.on)
		return 0;
	an = tls_an;
	tls_an.on = 0;
	port = port_of(fd);
	if (port == 0) {
		parts_drop(&an.p);
		errno = saved;
		return -1;
	}
	an.client.port = port;
	np = htons(port);
	memcpy(cc->local + 2, &np, 2); /* sin_port and sin6_port alike */
	setup_put_sockaddr(osf_seg_hdr(an.p.seg, setup_cfg.c.ring_size)->client_addr, &an.client);
	if (hello_send(&an.dst, an.link, -1, &an.p, an.hf, &an.client) == 0) {
		if (an.p.wtx[1] >= 0)
			REAL(close)(an.p.wtx[1]);
		errno = saved;
		return 0;
	}
	/* A full link: kernel TCP. A broken one (its server restarted:
	 * setup_link_unlock dropped it): a fresh dial, with the port known
	 * now, and a slot of the new companion's region. */
	parts_drop(&an.p);
	if (errno == EAGAIN) {
		errno = saved;
		return -1;
	}
	osf_fdt_high_begin();
	s = dial(an.dst, &an.client, &an.in, 0, &pfd, &p, &why, full_name, an.tight, &kfd);
	osf_fdt_high_end();
	*poke = !tls_nopoke;
	tls_nopoke = 0;
	if (s >= 0 && !kfd) {
		/* The server restarted without the switch: this socket is
		 * connected by the kernel already, so kernel TCP. */
		REAL(close)(s);
		parts_drop(&p);
		s = -1;
	}
	if (s < 0) {
		errno = saved;
		return -1;
	}
	cc->seg_fd = p.segfd;
	cc->wake_tx_fd = p.efd >= 0 ? p.efd : p.wtx[0];
	cc->wake_tx_efd = p.efd >= 0;
	cc->seg_addr = (uint64_t)(uintptr_t)p.seg;
	errno = saved;
	return 0;
}

int osf_setup_kfd_unannounced(void)
{
	tls_nopoke = 0;
	if (!tls_an.on)
		return 0;
	tls_an.on = 0;
	parts_drop(&tls_an.p);
	return 1;
}
