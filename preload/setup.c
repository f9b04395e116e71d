//go:build osf_make

/* setup.c: the shm connection set-up in C (see setup.h).
 *
 * What the Go core did (preload/core/conn.go, shm/transport.go), without
 * its 4.8 ms load and 0.19 ms per call, plus the checks a hostile local
 * user makes necessary (docs/ARCHITECTURE.md, "Security"):
 * - a client trusts a companion only when a kernel TCP listener on that
 *   address and port exists and belongs to the uid that created the
 *   companion (SO_PEERCRED against NETLINK_SOCK_DIAG), else kernel TCP;
 * - the server believes the hello's addresses only as far as the kernel
 *   would let the peer have them: addresses of this host, a privileged
 *   source port only for a privileged peer;
 * - accept never waits for a hello: a connection without one is parked
 *   and looked at again later; at EMFILE the connection stays queued;
 * - the server bounds the ring size a client makes it map;
 * - nothing is printed for a peer's failure (stderr is for configuration
 *   errors only).
 */
#include "setup.h"
#include "../internal/routec/route.h"
#include "../sdp/segment.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A server maps at most this much ring per direction for a client, or its
 * own OSF_RING_SIZE if larger (kernel TCP's buffers are ~4-6 MiB). */
#define SERVER_RING_CAP (4u << 20)
#define PARK_MAX 32
#define ACCEPT_TRIES 16
/* What one accept call may wait, in all, for hellos not there yet: the
 * handshake bound (OSF_CONNECT_TIMEOUT_MS, 1 s by default). */
#define HELLO_WAIT_MS (cfg.rc == OSF_ROUTE_OK ? (int)cfg.c.connect_timeout_ms : 1000)

/* ---- configuration, once per process ---------------------------------- */

static struct {
	pthread_once_t once;
	int rc; /* OSF_ROUTE_* of the parse */
	struct osf_route_config c;
	int rdma_absent;
	uint16_t eph_lo, eph_hi;
	unsigned unpriv_port;
} cfg = {.once = PTHREAD_ONCE_INIT};

static int no_rdma_devices(void)
{
	DIR *d = opendir("/sys/class/infiniband");
	struct dirent *de;
	int none = 1;

	if (!d)
		return 1;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			none = 0;
	closedir(d);
	return none;
}

static unsigned read_uints(const char *path, unsigned *a, unsigned *b)
{
	char buf[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC), n;
	ssize_t r;

	if (fd < 0)
		return 0;
	r = REAL(read)(fd, buf, sizeof(buf) - 1);
	REAL(close)(fd);
	if (r <= 0)
		return 0;
	buf[r] = 0;
	n = sscanf(buf, "%u %u", a, b);
	return n < 0 ? 0 : (unsigned)n;
}

static void cfg_load(void)
{
	unsigned lo = 0, hi = 0, up = 0, x;

	cfg.rc = osf_route_parse(osf.env, osf.env_len, &cfg.c);
	cfg.rdma_absent = !cfg.c.debug_rdma_sim && no_rdma_devices();
	if (read_uints("/proc/sys/net/ipv4/ip_local_port_range", &lo, &hi) == 2 &&
	    lo > 0 && hi <= 65535 && lo <= hi) {
		cfg.eph_lo = (uint16_t)lo;
		cfg.eph_hi = (uint16_t)hi;
	} else {
		cfg.eph_lo = 32768;
		cfg.eph_hi = 60999;
	}
	cfg.unpriv_port = 1024;
	if (read_uints("/proc/sys/net/ipv4/ip_unprivileged_port_start", &up, &x) >= 1)
		cfg.unpriv_port = up;
}

/* usable reports whether the C evaluator can take this process's
 * configuration; the debug stand-in for RDMA always goes through Go. */
static int usable(void)
{
	pthread_once(&cfg.once, cfg_load);
	return cfg.rc == OSF_ROUTE_OK && !cfg.c.debug_rdma_sim;
}

/* ---- addresses ------------------------------------------------------- */

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* An address in one form: v4 in a[0..3] when v4, else 16 bytes. */
struct ip {
	int v4;
	uint8_t a[16];
	uint16_t port;
};

static struct ip ip_from(int family, const uint8_t *addr, uint16_t port)
{
	struct ip ip;

	memset(&ip, 0, sizeof(ip));
	ip.v4 = family == AF_INET;
	memcpy(ip.a, addr, ip.v4 ? 4 : 16);
	ip.port = port;
	return ip;
}

static struct ip ip_unmap(struct ip ip)
{
	if (!ip.v4 && memcmp(ip.a, v4mapped, 12) == 0) {
		memmove(ip.a, ip.a + 12, 4);
		memset(ip.a + 4, 0, 12);
		ip.v4 = 1;
	}
	return ip;
}

/* as_family is shm.AsFamily: ip in the family of a socket whose address
 * is like (v6like: an IPv6 one). */
static struct ip as_family(struct ip ip, int v6like)
{
	if (!v6like)
		return ip_unmap(ip);
	if (ip.v4) {
		uint8_t a4[4];
		memcpy(a4, ip.a, 4);
		memcpy(ip.a, v4mapped, 12);
		memcpy(ip.a + 12, a4, 4);
		ip.v4 = 0;
	}
	return ip;
}

static int ip_unspec(const struct ip *ip)
{
	static const uint8_t zero[16];

	return memcmp(ip->a, zero, ip->v4 ? 4 : 16) == 0;
}

static int ip_loop(const struct ip *ip)
{
	static const uint8_t one[16] = {[15] = 1};

	return ip->v4 ? ip->a[0] == 127 : memcmp(ip->a, one, 16) == 0;
}

static void put_sockaddr(uint8_t out[28], const struct ip *ip)
{
	memset(out, 0, 28);
	if (ip->v4) {
		struct sockaddr_in *in = (void *)out;
		in->sin_family = AF_INET;
		in->sin_port = htons(ip->port);
		memcpy(&in->sin_addr, ip->a, 4);
	} else {
		struct sockaddr_in6 *in6 = (void *)out;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(ip->port);
		memcpy(&in6->sin6_addr, ip->a, 16);
	}
}

/* get_sockaddr decodes 28 bytes of sockaddr_in/in6; 0 for another family. */
static int get_sockaddr(const uint8_t in[28], struct ip *ip)
{
	sa_family_t fam;

	memcpy(&fam, in, sizeof(fam));
	memset(ip, 0, sizeof(*ip));
	if (fam == AF_INET) {
		const struct sockaddr_in *s = (const void *)in;
		ip->v4 = 1;
		memcpy(ip->a, &s->sin_addr, 4);
		ip->port = ntohs(s->sin_port);
		return 1;
	}
	if (fam == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)in;
		memcpy(ip->a, &s->sin6_addr, 16);
		ip->port = ntohs(s->sin6_port);
		return 1;
	}
	return 0;
}

/* Addresses of this host, as policy.HostIsLocal: interface addresses,
 * reloaded at most every 2 s. */
#define HOST_TTL_NS 2000000000LL
#define HOST_MAX 64
static struct {
	pthread_mutex_t mu;
	long long loaded;
	int n;
	struct ip addrs[HOST_MAX];
} host = {.mu = PTHREAD_MUTEX_INITIALIZER, .loaded = -HOST_TTL_NS * 2};

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void host_reload(long long now)
{
	struct ifaddrs *ifa, *i;

	host.n = 0;
	host.loaded = now;
	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i && host.n < HOST_MAX; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET)
			host.addrs[host.n++] = ip_from(AF_INET,
				(const uint8_t *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr, 0);
		else if (i->ifa_addr->sa_family == AF_INET6)
			host.addrs[host.n++] = ip_unmap(ip_from(AF_INET6,
				(const uint8_t *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 0));
	}
	freeifaddrs(ifa);
}

static int host_has(int v4, const uint8_t *a, void *arg)
{
	long long now = now_ns();
	int i, found = 0;

	(void)arg;
	pthread_mutex_lock(&host.mu);
	if (now - host.loaded >= HOST_TTL_NS)
		host_reload(now);
	for (i = 0; i < host.n && !found; i++)
		found = host.addrs[i].v4 == v4 &&
			memcmp(host.addrs[i].a, a, v4 ? 4 : 16) == 0;
	pthread_mutex_unlock(&host.mu);
	return found;
}

/* is_local is shm.IsLocal: loopback, unspecified or an address of this
 * host. */
static int is_local(struct ip ip)
{
	ip = ip_unmap(ip);
	return ip_loop(&ip) || ip_unspec(&ip) || host_has(ip.v4, ip.a, NULL);
}

/* ---- companion names (shm/names.go) ----------------------------------- */

/* fmt_ip6 formats an IPv6 address as netip.Addr.String does (RFC 5952:
 * the first longest run of two or more zero groups becomes "::"). */
static void fmt_ip6(const uint8_t *a, char *out, size_t n)
{
	int g[8], i, best = -1, bestlen = 0, run = 0;
	size_t o = 0;

	for (i = 0; i < 8; i++)
		g[i] = a[2 * i] << 8 | a[2 * i + 1];
	for (i = 0; i <= 8; i++) {
		if (i < 8 && g[i] == 0) {
			run++;
			continue;
		}
		if (run >= 2 && run > bestlen) {
			best = i - run;
			bestlen = run;
		}
		run = 0;
	}
	out[0] = 0;
	for (i = 0; i < 8; i++) {
		if (i == best) {
			o += (size_t)snprintf(out + o, n - o, "::");
			i += bestlen - 1;
			continue;
		}
		o += (size_t)snprintf(out + o, n - o, "%s%x",
				      (i > 0 && i != best + bestlen) ? ":" : "", g[i]);
	}
}

static void fmt_host(const struct ip *ip, char *out, size_t n)
{
	if (ip_unspec(ip))
		snprintf(out, n, "*");
	else if (ip->v4)
		snprintf(out, n, "%u.%u.%u.%u", ip->a[0], ip->a[1], ip->a[2], ip->a[3]);
	else
		fmt_ip6(ip->a, out, n);
}

/* listen_name is shm.ListenName; the result is without the leading NUL. */
static void listen_name(struct ip ip, int v6only, char *out, size_t n)
{
	char h[64];

	ip = ip_unmap(ip);
	fmt_host(&ip, h, sizeof(h));
	if (ip.v4)
		snprintf(out, n, "osf1/4/%s/%u", h, ip.port);
	else if (ip_unspec(&ip) && !v6only)
		snprintf(out, n, "osf1/46/*/%u", ip.port);
	else
		snprintf(out, n, "osf1/6/%s/%u", h, ip.port);
}

static socklen_t abstract(struct sockaddr_un *sun, const char *name)
{
	size_t l = strlen(name);

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path + 1, name, l);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + l);
}

/* ---- route decisions ----------------------------------------------- */

static void decide(int role, struct ip ip, struct osf_route_decision *d)
{
	struct osf_route_query q;

	memset(&q, 0, sizeof(q));
	q.role = role;
	q.prog = osf.prog;
	q.v4 = ip.v4;
	memcpy(q.addr, ip.a, 16);
	q.port = ip.port;
	q.is_local = host_has;
	q.rdma_absent = cfg.rdma_absent;
	osf_route_decide(&cfg.c, &q, d);
}

static void set_detail(char out[96], const char *s)
{
	snprintf(out, 96, "%s", s ? s : "");
}

/* ---- logging, through the core, only when asked for ---------------- */

/* fmt_ap formats ip:port as netip.AddrPort.String does. */
static const char *fmt_ap(const struct ip *ip, char *out, size_t n)
{
	char h[64];

	if (ip->v4) {
		snprintf(out, n, "%u.%u.%u.%u:%u", ip->a[0], ip->a[1], ip->a[2],
			 ip->a[3], ip->port);
		return out;
	}
	if (memcmp(ip->a, v4mapped, 12) == 0)
		snprintf(h, sizeof(h), "::ffff:%u.%u.%u.%u", ip->a[12], ip->a[13],
			 ip->a[14], ip->a[15]);
	else
		fmt_ip6(ip->a, h, sizeof(h));
	snprintf(out, n, "[%s]:%u", h, ip->port);
	return out;
}

/* logs reports whether a line of level would be written. */
static int logs(int level)
{
	return cfg.rc == OSF_ROUTE_OK && level >= cfg.c.log_level;
}

/* slog hands a line to the core's logger; reason >= 0 appends its
 * description (policy.Reason.Describe). The core is loaded only for
 * lines the configured level keeps. */
__attribute__((format(printf, 5, 6))) static void
slog(int level, int reason, int rule, const char *detail, const char *fmt, ...)
{
	struct osf_core_log_in in;
	va_list ap;
	int saved = errno;

	if (!logs(level))
		return;
	memset(&in, 0, sizeof(in));
	in.level = level;
	in.reason = reason;
	in.rule = rule;
	set_detail(in.detail, detail);
	va_start(ap, fmt);
	vsnprintf(in.msg, sizeof(in.msg), fmt, ap);
	va_end(ap);
	(void)osf_core_log(&in);
	errno = saved;
}

/* ---- listen ---------------------------------------------------------- */

int osf_setup_listen(const struct osf_core_listen_in *in,
		     struct osf_core_listen_out *out)
{
	struct osf_route_decision d;
	struct sockaddr_un sun;
	struct ip ip;
	char name[128], a[80];
	socklen_t sl;
	int fd;

	if (!usable())
		return 0;
	ip = ip_from(in->family, in->addr, in->port);
	decide(OSF_ROUTE_SERVER, ip, &d);
	if (d.need_go)
		return 0;
	out->fd = -1;
	out->rule = d.rule;
	set_detail(out->detail, d.detail);
	if (d.transport == OSF_ROUTE_KERNEL) {
		out->reason = d.reason;
		if (logs(OSF_LOGL_DEBUG))
			slog(OSF_LOGL_DEBUG, d.reason, d.rule, d.detail,
			     "listen %s: kernel: ", fmt_ap(&ip, a, sizeof(a)));
		return 1;
	}
	listen_name(ip, in->v6only, name, sizeof(name));
	sl = abstract(&sun, name);
	fd = REAL(socket)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || REAL(bind)(fd, (struct sockaddr *)&sun, sl) < 0 ||
	    REAL(listen)(fd, in->backlog) < 0) {
		out->reason = OSF_R_RESOURCE;
		out->reason_errno = errno;
		set_detail(out->detail, strerror(errno));
		if (fd >= 0)
			REAL(close)(fd);
		slog(OSF_LOGL_ERROR, -1, 0, NULL,
		     "listen %s: no offload listener: companion %s: %s",
		     fmt_ap(&ip, a, sizeof(a)), name, out->detail);
		return 1;
	}
	out->fd = fd;
	if (logs(OSF_LOGL_DEBUG))
		slog(OSF_LOGL_DEBUG, -1, 0, NULL, "listen %s: shm (rule %d), companion fd %d",
		     fmt_ap(&ip, a, sizeof(a)), d.rule, fd);
	return 1;
}

/* ---- the companion's owner ------------------------------------------ */

/* The kernel TCP listeners on one port, as NETLINK_SOCK_DIAG reports
 * them: who owns each and where it is bound (IPv6 form; v4 mapped). */
#define CENSUS_MAX 16
struct census {
	int n;
	struct {
		uid_t uid;
		uint8_t a[16];
	} l[CENSUS_MAX];
};

/* census_dump adds the listeners of family fam on port to c over the
 * netlink socket s; 0, or -1 when the kernel did not answer. */
static int census_dump(int s, int fam, uint16_t port, struct census *c)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req;
	struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
	char buf[8192];
	int rounds = 0;

	memset(&req, 0, sizeof(req));
	req.nlh.nlmsg_len = sizeof(req);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.r.sdiag_family = (uint8_t)fam;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = 1u << 10; /* TCP_LISTEN */
	req.r.id.idiag_sport = htons(port);
	if (REAL(sendto)(s, &req, sizeof(req), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0)
		return -1;
	while (rounds++ < 1000) {
		ssize_t n = REAL(recv)(s, buf, sizeof(buf), 0);
		struct nlmsghdr *h;
		if (n <= 0)
			return -1;
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			struct inet_diag_msg *m;
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR)
				return -1;
			m = NLMSG_DATA(h);
			if (m->idiag_state != 10 || ntohs(m->id.idiag_sport) != port ||
			    c->n >= CENSUS_MAX)
				continue;
			c->l[c->n].uid = m->idiag_uid;
			if (fam == AF_INET) {
				memcpy(c->l[c->n].a, v4mapped, 12);
				memcpy(c->l[c->n].a + 12, m->id.idiag_src, 4);
			} else {
				memcpy(c->l[c->n].a, m->id.idiag_src, 16);
			}
			c->n++;
		}
	}
	return -1;
}

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
		struct census c;
	} e[CENSUS_CACHE];
	unsigned next;
} census_cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* census_take finds the kernel TCP listeners on port; -1 when the kernel
 * cannot tell (no sock_diag): then nobody is trusted. */
static int census_take(uint16_t port, struct census *c)
{
	long long now = now_ns();
	int s, r, i;

	pthread_mutex_lock(&census_cache.mu);
	for (i = 0; i < CENSUS_CACHE; i++)
		if (census_cache.e[i].port == port && census_cache.e[i].c.n > 0 &&
		    now - census_cache.e[i].at < CENSUS_TTL_NS) {
			*c = census_cache.e[i].c;
			pthread_mutex_unlock(&census_cache.mu);
			return 0;
		}
	pthread_mutex_unlock(&census_cache.mu);
	c->n = 0;
	s = REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (s < 0)
		return -1;
	r = census_dump(s, AF_INET, port, c);
	if (r == 0)
		r = census_dump(s, AF_INET6, port, c);
	REAL(close)(s);
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

static int unspec16(const uint8_t *a)
{
	static const uint8_t zero[16];

	return memcmp(a, zero, 16) == 0 ||
	       (memcmp(a, v4mapped, 12) == 0 && memcmp(a + 12, zero, 4) == 0);
}

/* census_owns reports whether uid holds a kernel TCP listener that a
 * companion named for want serves: bound to want itself or to a wildcard
 * (wild: a wildcard name, which only a wildcard listener has). */
static int census_owns(const struct census *c, uid_t uid, const struct ip *want, int wild)
{
	struct ip w = as_family(*want, 1);
	int i;

	for (i = 0; i < c->n; i++)
		if (c->l[i].uid == uid &&
		    (unspec16(c->l[i].a) || (!wild && memcmp(c->l[i].a, w.a, 16) == 0)))
			return 1;
	return 0;
}

/* companion_trusted checks the owner of the companion at the other end of
 * s (SO_PEERCRED: who called listen on it) against the census. */
static int companion_trusted(int s, const struct census *c, const struct ip *want, int wild)
{
	struct ucred cr;
	socklen_t l = sizeof(cr);

	if (REAL(getsockopt)(s, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
		return 0;
	if (census_owns(c, cr.uid, want, wild))
		return 1;
	if (logs(OSF_LOGL_DEBUG)) {
		char a[80];
		slog(OSF_LOGL_DEBUG, -1, 0, NULL,
		     "connect %s: companion of pid %d not trusted: no kernel TCP "
		     "listener of its uid %u there", fmt_ap(want, a, sizeof(a)),
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

	if (ip_loop(&dst) && (dst.v4 ? dst.a[3] == 1 && dst.a[1] == 0 && dst.a[2] == 0 : 1)) {
		*src = dst; /* 127.0.0.1 and ::1 answer themselves */
		return 0;
	}
	put_sockaddr(sa, &dst);
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
	return get_sockaddr(sa, src) ? 0 : -1;
}

static uint32_t port_seq;

/* client_port is shm.ClientPort: a synthesized port in the ephemeral
 * range, distinct among this process's connections until it wraps. */
static uint16_t client_port(pid_t pid)
{
	uint32_t span = (uint32_t)(cfg.eph_hi - cfg.eph_lo + 1);
	uint32_t seq = __atomic_add_fetch(&port_seq, 1, __ATOMIC_RELAXED);

	return (uint16_t)(cfg.eph_lo + ((uint32_t)pid * 2654435761u + seq * 40503u) % span);
}

/* make_segment creates, sizes, seals and maps a segment (sdp.CreateSegment)
 * and writes its header: the mapping, or NULL with errno. */
static void *make_segment(uint32_t ring, const struct ip *client,
			  const struct ip *server, int *fdp)
{
	uint64_t size = osf_seg_bytes(ring);
	struct osf_seg_hdr *h;
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
	h->version = OSF_SEG_VERSION;
	h->hdr_bytes = OSF_SEG_HDR_BYTES;
	h->ring_bytes = ring;
	h->client_pid = osf.pid;
	put_sockaddr(h->client_addr, client);
	put_sockaddr(h->server_addr, server);
	__atomic_store_n(&h->magic, OSF_SEG_MAGIC, __ATOMIC_RELEASE);
	*fdp = fd;
	return h;
fail:
	e = errno;
	REAL(close)(fd);
	errno = e;
	return NULL;
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
	put_sockaddr(hello.client, client);
	put_sockaddr(hello.server, server);
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

	out->status = cfg.c.strict && osf_route_fallback(reason) ? OSF_CORE_REFUSE
								 : OSF_CORE_KERNEL;
	out->reason = reason;
	out->reason_errno = err;
	set_detail(out->detail, err ? strerror(err) : detail);
	if (out->status == OSF_CORE_REFUSE)
		slog(OSF_LOGL_ERROR, reason, out->rule, out->detail,
		     "connect %s refused (OSF_STRICT=1): ", fmt_ap(dst, a, sizeof(a)));
	else if (logs(OSF_LOGL_DEBUG))
		slog(OSF_LOGL_DEBUG, reason, out->rule, out->detail,
		     "connect %s: kernel: ", fmt_ap(dst, a, sizeof(a)));
	return 1;
}

/* The hello's fds: the segment and the writers' wake socket. */
struct parts {
	uint8_t *seg;
	int segfd, wtx[2];
};

static int parts_make(struct parts *p, const struct ip *client, const struct ip *server)
{
	int e;

	p->seg = make_segment(cfg.c.ring_size, client, server, &p->segfd);
	if (!p->seg)
		return -1;
	if (REAL(socketpair)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->wtx) < 0) {
		e = errno;
		munmap(p->seg, osf_seg_bytes(cfg.c.ring_size));
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
	munmap(p->seg, osf_seg_bytes(cfg.c.ring_size));
	REAL(close)(p->segfd);
	REAL(close)(p->wtx[0]);
	REAL(close)(p->wtx[1]);
	p->seg = NULL;
	errno = e;
}

/* dial tries each companion name that could serve dst (shm.DialNames).
 * A companion is trusted only when its owner holds the kernel TCP
 * listener it stands for (the census, taken first); the hello goes right
 * after that check, so that a server sees the connection without it only
 * for the time of one system call. Returns the connected socket with p
 * filled, or -1 with *why (an osf_reason) and errno. */
static int dial(struct ip a, const struct ip *client, struct parts *p, int *why)
{
	struct {
		char name[128];
		int wild;
	} nm[3];
	struct census c;
	char h[64];
	int n = 0, i, full = 0, e;

	p->seg = NULL;
	*why = OSF_R_NO_LISTENER;
	errno = 0;
	if (census_take(a.port, &c) < 0 || c.n == 0)
		return -1; /* nothing a companion could stand for */
	fmt_host(&a, h, sizeof(h));
	snprintf(nm[n].name, sizeof(nm[n].name), "osf1/%s/%s/%u", a.v4 ? "4" : "6", h, a.port);
	nm[n++].wild = ip_unspec(&a);
	if (is_local(a)) {
		if (!ip_unspec(&a)) {
			snprintf(nm[n].name, sizeof(nm[n].name), "osf1/%s/*/%u",
				 a.v4 ? "4" : "6", a.port);
			nm[n++].wild = 1;
		}
		snprintf(nm[n].name, sizeof(nm[n].name), "osf1/46/*/%u", a.port);
		nm[n++].wild = 1;
	}
	if (parts_make(p, client, &a) < 0) {
		*why = OSF_R_RESOURCE;
		return -1;
	}
	for (i = 0; i < n; i++) {
		struct sockaddr_un sun;
		socklen_t sl = abstract(&sun, nm[i].name);
		int s = REAL(socket)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (s < 0) {
			*why = OSF_R_RESOURCE;
			break;
		}
		if (REAL(connect)(s, (struct sockaddr *)&sun, sl) < 0) {
			full |= errno == EAGAIN;
			REAL(close)(s);
			continue;
		}
		if (!companion_trusted(s, &c, &a, nm[i].wild)) {
			REAL(close)(s); /* a squatter: it gets nothing */
			continue;
		}
		if (send_hello(s, cfg.c.ring_size, client, &a, p->segfd, p->wtx[1]) < 0) {
			e = errno;
			REAL(close)(s);
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
		      struct osf_core_conn *out)
{
	struct osf_route_decision d;
	struct ip dst, real, local, bound, src, hello_client;
	struct parts p;
	int s, why, have_bound;

	if (!usable())
		return 0;
	dst = ip_from(in->family, in->addr, in->port);
	decide(OSF_ROUTE_CLIENT, dst, &d);
	if (d.need_go)
		return 0;
	out->rule = d.rule;
	if (d.transport != OSF_ROUTE_SHM)
		return kernel(out, &dst, d.reason, 0, d.detail);
	real = ip_unmap(dst);
	/* clientAddr: the bound address and port, else the kernel's source
	 * address with a synthesized port */
	have_bound = get_sockaddr(in->bound, &bound);
	if (source_for(real, &src) < 0)
		return kernel(out, &dst, OSF_R_HANDSHAKE, errno, NULL);
	local = src;
	local.port = client_port(osf.pid);
	if (have_bound && !ip_unspec(&bound))
		memcpy(local.a, bound.a, 16), local.v4 = bound.v4;
	if (have_bound && bound.port)
		local.port = bound.port;
	hello_client = as_family(local, !real.v4);
	s = dial(real, &hello_client, &p, &why);
	if (s < 0)
		return kernel(out, &dst, why, errno, NULL);
	out->status = OSF_CORE_OFFLOADED;
	out->wake_fd = s;
	out->seg_fd = p.segfd;
	out->wake_tx_fd = p.wtx[0];
	out->side = OSF_SIDE_CLIENT;
	out->seg_addr = (uint64_t)(uintptr_t)p.seg;
	out->ring_bytes = cfg.c.ring_size;
	local = as_family(local, in->family == AF_INET6);
	put_sockaddr(out->local, &local);
	put_sockaddr(out->peer, &dst);
	if (logs(OSF_LOGL_DEBUG)) {
		char a[80], b[80];
		slog(OSF_LOGL_DEBUG, -1, 0, NULL, "connect %s: shm (rule %d), local %s",
		     fmt_ap(&dst, a, sizeof(a)), d.rule, fmt_ap(&local, b, sizeof(b)));
	}
	return 1;
}

/* ---- accept ------------------------------------------------------------ */

/* Connections taken from a companion whose hello has not arrived yet, in
 * osf's hidden range. */
static struct {
	pthread_mutex_t mu;
	int n;
	struct parked {
		int aux_fd, hfd;
		long long since;
		int kicked; /* the watcher made the companion readable for it */
	} p[PARK_MAX];
	int watcher; /* the watcher thread runs (in this process) */
} park = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* kick makes companion aux_fd readable: a connection from this process
 * that closes at once, which accept drops (it carries no hello). The
 * application's poll, epoll or accept then wakes and takes the parked
 * connection whose hello has arrived. */
static void kick(int aux_fd)
{
	struct sockaddr_un sun;
	socklen_t sl = sizeof(sun);
	int s;

	if (REAL(getsockname)(aux_fd, (struct sockaddr *)&sun, &sl) < 0)
		return;
	s = REAL(socket)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return;
	(void)REAL(connect)(s, (struct sockaddr *)&sun, sl);
	REAL(close)(s);
}

/* watcher waits, on its own thread (every signal blocked), for the hellos
 * of parked connections, and kicks their companion when one arrives, so
 * that an application sleeping in epoll or poll on the listener learns of
 * it; it ends when nothing is parked. */
static void *watcher(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd p[PARK_MAX];
		int aux[PARK_MAX], n = 0, i;
		pthread_mutex_lock(&park.mu);
		for (i = 0; i < park.n; i++)
			if (!park.p[i].kicked) {
				p[n].fd = park.p[i].hfd;
				p[n].events = POLLIN;
				p[n].revents = 0;
				aux[n++] = park.p[i].aux_fd;
			}
		if (n == 0) {
			park.watcher = 0;
			pthread_mutex_unlock(&park.mu);
			return NULL;
		}
		pthread_mutex_unlock(&park.mu);
		if (REAL(poll)(p, (nfds_t)n, 50) <= 0)
			continue;
		pthread_mutex_lock(&park.mu);
		for (i = 0; i < n; i++) {
			int k;
			if (!p[i].revents)
				continue;
			for (k = 0; k < park.n; k++)
				if (park.p[k].hfd == p[i].fd)
					park.p[k].kicked = 1;
		}
		pthread_mutex_unlock(&park.mu);
		for (i = 0; i < n; i++)
			if (p[i].revents)
				kick(aux[i]);
	}
}

/* start_watcher starts the watcher unless it runs; park.mu is held. */
static void start_watcher(void)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;

	if (park.watcher)
		return;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, watcher, NULL) == 0) {
		park.watcher = 1;
		pthread_setname_np(t, "osf-hello");
	}
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void park_drop_locked(int i)
{
	osf_fdt_close_hidden(park.p[i].hfd);
	park.p[i] = park.p[--park.n];
}

/* park_add parks cfd for companion aux_fd; the oldest parked connection
 * makes room when all slots are taken (a client that connects and stays
 * silent loses its place, never anyone else's). */
static void park_add(int aux_fd, int lfd, int cfd)
{
	int hfd = osf_fdt_hide(cfd, lfd), i, old = 0;

	if (hfd < 0) {
		REAL(close)(cfd);
		return;
	}
	pthread_mutex_lock(&park.mu);
	if (park.n == PARK_MAX) {
		for (i = 1; i < park.n; i++)
			if (park.p[i].since < park.p[old].since)
				old = i;
		park_drop_locked(old);
	}
	park.p[park.n].aux_fd = aux_fd;
	park.p[park.n].hfd = hfd;
	park.p[park.n].since = now_ns();
	park.p[park.n].kicked = 0;
	park.n++;
	start_watcher();
	pthread_mutex_unlock(&park.mu);
}

int osf_setup_parked_fds(int aux_fd, struct pollfd *p, int max)
{
	int i, n = 0;

	pthread_mutex_lock(&park.mu);
	for (i = 0; i < park.n && n < max; i++)
		if (park.p[i].aux_fd == aux_fd) {
			p[n].fd = park.p[i].hfd;
			p[n].events = POLLIN;
			p[n].revents = 0;
			n++;
		}
	pthread_mutex_unlock(&park.mu);
	return n;
}

void osf_setup_forget_companion(int aux_fd)
{
	int i;

	pthread_mutex_lock(&park.mu);
	for (i = 0; i < park.n;)
		if (park.p[i].aux_fd == aux_fd)
			park_drop_locked(i);
		else
			i++;
	pthread_mutex_unlock(&park.mu);
}

void osf_setup_child_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	park.mu = fresh;
	park.watcher = 0;
	census_cache.mu = fresh;
	host.mu = fresh;
	while (park.n > 0)
		park_drop_locked(park.n - 1);
}

/* server_ring_cap is the largest ring a client may make this server map. */
static uint32_t server_ring_cap(void)
{
	uint32_t own = cfg.rc == OSF_ROUTE_OK ? cfg.c.ring_size : (1u << 20);

	return own > SERVER_RING_CAP ? own : SERVER_RING_CAP;
}

/* derive_names sets the connection's addresses as the kernel would let
 * the peer (cred) have them; the hello's word counts only for osf's own
 * RDMA engine in this process. */
static void derive_names(const struct osf_core_accept_in *in, const struct osf_hello *h,
			 const struct ucred *cr, struct osf_core_conn *cc)
{
	struct ip lis = ip_from(in->family, in->addr, in->port), client, server;
	int v6 = in->family == AF_INET6, okc, oks;

	okc = get_sockaddr(h->client, &client);
	oks = get_sockaddr(h->server, &server);
	if (cr->pid == osf.pid && okc && oks) {
		server.port = in->port;
		server = as_family(server, v6);
		client = as_family(client, v6);
		put_sockaddr(cc->local, &server);
		put_sockaddr(cc->peer, &client);
		return;
	}
	/* The server's own address: the listener's, or for a wildcard
	 * listener the one the client connected to if it is this host's. */
	if (ip_unspec(&lis)) {
		int claims_v4 = okc && ip_unmap(client).v4;
		if (!oks || !is_local(server) || ip_unspec(&server)) {
			static const uint8_t lo4[4] = {127, 0, 0, 1};
			static const uint8_t lo6[16] = {[15] = 1};
			server = (!v6 || claims_v4) ? ip_from(AF_INET, lo4, 0)
						    : ip_from(AF_INET6, lo6, 0);
		}
	} else {
		server = lis;
	}
	server.port = in->port;
	server = as_family(server, v6);
	/* The client: an address of this host, and a privileged port only
	 * for a privileged peer. */
	if (!okc || !is_local(client) || ip_unspec(&client) ||
	    (!v6 && !ip_unmap(client).v4)) {
		uint16_t p = okc ? client.port : 0;
		client = server;
		client.port = p;
	}
	if (client.port == 0 || (client.port < cfg.unpriv_port && cr->uid != 0))
		client.port = client_port(cr->pid);
	client = as_family(client, v6);
	put_sockaddr(cc->local, &server);
	put_sockaddr(cc->peer, &client);
}

/* reserve takes n free fd numbers (close-on-exec dups of fd) into r, so
 * that the hello's fds have room: 0, or -1 with errno (EMFILE) and none
 * taken. */
static int reserve(int fd, int *r, int n)
{
	int i, e;

	for (i = 0; i < n; i++) {
		r[i] = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (void *)0L);
		if (r[i] < 0) {
			e = errno;
			while (i-- > 0)
				REAL(close)(r[i]);
			errno = e;
			return -1;
		}
	}
	return 0;
}

static void unreserve(int *r, int n)
{
	while (n-- > 0)
		REAL(close)(r[n]);
}

static void close_fds(const int *fds, int n)
{
	while (n-- > 0)
		REAL(close)(fds[n]);
}

/* is_wake_socket accepts only a connected AF_UNIX stream socket as the
 * writers' wake socket (shm.checkWakeSocket). */
static int is_wake_socket(int fd)
{
	int t = 0, d = 0;
	socklen_t l = sizeof(int);

	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &t, &l) < 0 || t != SOCK_STREAM)
		return 0;
	l = sizeof(int);
	return REAL(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &d, &l) == 0 && d == AF_UNIX;
}

/* open_segment validates and maps a peer's segment (sdp.OpenSegment);
 * NULL with why set when it is unusable. */
static void *open_segment(int fd, uint32_t ring, char *why, size_t wn)
{
	struct stat st;
	struct osf_seg_hdr *h;
	int seals;
	uint64_t size = osf_seg_bytes(ring);
	const int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
		snprintf(why, wn, "invalid segment: size %lld, want %llu",
			 (long long)st.st_size, (unsigned long long)size);
		return NULL;
	}
	seals = REAL(fcntl)(fd, F_GET_SEALS, NULL);
	if (seals < 0 || (seals & need) != need) {
		snprintf(why, wn, "invalid segment: seals 0x%x, want 0x%x",
			 seals < 0 ? 0 : seals, need);
		return NULL;
	}
	h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		snprintf(why, wn, "map segment: %s", strerror(errno));
		return NULL;
	}
	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != OSF_SEG_MAGIC ||
	    h->version != OSF_SEG_VERSION || h->ring_bytes != ring ||
	    h->hdr_bytes != OSF_SEG_HDR_BYTES) {
		munmap(h, size);
		snprintf(why, wn, "invalid segment: header does not match the hello");
		return NULL;
	}
	return h;
}

/* take_hello reads and checks the hello on cfd: 0 with cc filled, EAGAIN
 * when it has not arrived, another errno when the connection is bad
 * (logged at debug level only: a peer's fault is no reason to write on
 * the server's stderr). */
static int take_hello(int cfd, const struct osf_core_accept_in *in,
		      struct osf_core_conn *cc)
{
	struct osf_hello h;
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh;
	struct cmsghdr *cm;
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	int fds[4], nfds = 0;
	ssize_t n;
	void *seg = NULL;
	char extra, why[160] = "";
	struct iovec iov[2] = {{&h, sizeof(h)}, {&extra, 1}};

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	n = REAL(recvmsg)(cfd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? EAGAIN : errno;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int)), j;
			for (j = 0; j < k && nfds < 4; j++)
				memcpy(&fds[nfds++], CMSG_DATA(cm) + j * sizeof(int), sizeof(int));
		}
	}
	if (n == 0)
		snprintf(why, sizeof(why), "closed before its hello");
	else if (mh.msg_flags & MSG_CTRUNC)
		snprintf(why, sizeof(why), "hello's fds truncated");
	else if (nfds != 2)
		snprintf(why, sizeof(why), "hello carried %d fds, want 2", nfds);
	else if (!is_wake_socket(fds[1]))
		snprintf(why, sizeof(why), "writers' wake socket: not a stream socket");
	else if (n != (ssize_t)sizeof(h) || h.magic != OSF_HELLO_MAGIC ||
		 h.version != OSF_SEG_VERSION || h.size != sizeof(h))
		snprintf(why, sizeof(why), "malformed hello: %zd bytes, bad magic or version", n);
	else if (!osf_ring_size_ok(h.ring_bytes))
		snprintf(why, sizeof(why), "malformed hello: bad ring size %u", h.ring_bytes);
	else if (h.ring_bytes > server_ring_cap())
		snprintf(why, sizeof(why), "ring size %u above this server's limit %u",
			 h.ring_bytes, server_ring_cap());
	else if (REAL(getsockopt)(cfd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0)
		snprintf(why, sizeof(why), "SO_PEERCRED: %s", strerror(errno));
	else
		seg = open_segment(fds[0], h.ring_bytes, why, sizeof(why));
	if (!seg) {
		if (logs(OSF_LOGL_DEBUG)) {
			struct ip lis = ip_from(in->family, in->addr, in->port);
			char a[80];
			slog(OSF_LOGL_DEBUG, -1, 0, NULL, "accept on %s: handshake failed: %s",
			     fmt_ap(&lis, a, sizeof(a)), why);
		}
		close_fds(fds, nfds);
		return n == 0 ? ECONNRESET : EPROTO;
	}
	((struct osf_seg_hdr *)seg)->server_pid = osf.pid;
	memset(cc, 0, sizeof(*cc));
	cc->status = OSF_CORE_OFFLOADED;
	cc->wake_fd = cfd;
	cc->seg_fd = fds[0];
	cc->wake_tx_fd = fds[1];
	cc->side = OSF_SIDE_SERVER;
	cc->seg_addr = (uint64_t)(uintptr_t)seg;
	cc->ring_bytes = h.ring_bytes;
	derive_names(in, &h, &cr, cc);
	if (logs(OSF_LOGL_DEBUG)) {
		struct ip lis = ip_from(in->family, in->addr, in->port), peer;
		char a[80], b[80];
		get_sockaddr(cc->peer, &peer);
		slog(OSF_LOGL_DEBUG, -1, 0, NULL, "accept on %s: %s from %s (pid %d uid %u)",
		     fmt_ap(&lis, a, sizeof(a)),
		     (((struct osf_seg_hdr *)seg)->flags & OSF_SEG_F_RDMA)
			     ? "rdma (the engine's hand-off)" : "shm",
		     fmt_ap(&peer, b, sizeof(b)), (int)cr.pid, (unsigned)cr.uid);
	}
	return 0;
}

/* unpark tries the parked connections of aux_fd: a connection fd (moved
 * out of the hidden range) with cc filled, or -2. */
static int unpark(int lfd, int aux_fd, const struct osf_core_accept_in *in,
		  struct osf_core_conn *cc)
{
	long long now = now_ns(), limit;
	int i, r[2];

	limit = (long long)(cfg.rc == OSF_ROUTE_OK ? cfg.c.connect_timeout_ms : 1000) * 1000000LL;
	pthread_mutex_lock(&park.mu);
	for (i = 0; i < park.n;) {
		struct pollfd p;
		int nfd, rc;
		if (park.p[i].aux_fd != aux_fd) {
			i++;
			continue;
		}
		p.fd = park.p[i].hfd;
		p.events = POLLIN;
		p.revents = 0;
		if (REAL(poll)(&p, 1, 0) <= 0) {
			if (now - park.p[i].since > limit)
				park_drop_locked(i); /* silent too long */
			else
				i++;
			continue;
		}
		if (reserve(aux_fd, r, 2) < 0)
			break; /* EMFILE: stays parked */
		nfd = REAL(fcntl)(park.p[i].hfd, F_DUPFD_CLOEXEC, (void *)0L);
		unreserve(r, 2);
		if (nfd < 0)
			break;
		osf_fdt_close_hidden(park.p[i].hfd);
		park.p[i] = park.p[--park.n];
		rc = take_hello(nfd, in, cc);
		if (rc == 0) {
			pthread_mutex_unlock(&park.mu);
			return nfd;
		}
		REAL(close)(nfd);
	}
	pthread_mutex_unlock(&park.mu);
	(void)lfd;
	return -2;
}

int osf_setup_accept(int lfd, int aux_fd, const struct osf_core_accept_in *in,
		     struct osf_core_conn *cc, int *wait_ms)
{
	int tries, r[2], cfd, rc;

	pthread_once(&cfg.once, cfg_load);
	if (*wait_ms < 0)
		*wait_ms = HELLO_WAIT_MS;
	cfd = unpark(lfd, aux_fd, in, cc);
	if (cfd >= 0)
		return cfd;
	for (tries = 0; tries < ACCEPT_TRIES; tries++) {
		if (reserve(aux_fd, r, 2) < 0)
			return -1; /* EMFILE: the connection stays queued */
		cfd = REAL(accept4)(aux_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		rc = errno;
		unreserve(r, 2);
		if (cfd < 0) {
			if (rc == EMFILE || rc == ENFILE || rc == ENOBUFS || rc == ENOMEM) {
				errno = rc;
				return -1;
			}
			return -2; /* EAGAIN, ECONNABORTED, EINTR */
		}
		rc = take_hello(cfd, in, cc);
		if (rc == EAGAIN && *wait_ms > 0) {
			/* An honest client sends its hello in the system call
			 * after its connect, unless preempted in between: give
			 * it a moment, once per call (parking is a last resort:
			 * a parked connection waits for this process's next
			 * accept or the watcher's kick). */
			struct pollfd pf = {cfd, POLLIN, 0};
			(void)REAL(poll)(&pf, 1, *wait_ms);
			*wait_ms = 0;
			rc = take_hello(cfd, in, cc);
		}
		if (rc == 0)
			return cfd;
		if (rc == EAGAIN)
			park_add(aux_fd, lfd, cfd);
		else
			REAL(close)(cfd);
	}
	return -2;
}
