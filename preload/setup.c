//go:build osf_make

/* setup.c: the shm connection set-up in C (see setup.h; the steps every
 * side shares, Go's included, are sdp/setup.c's).
 *
 * What the Go core did, without its 4.8 ms load and 0.19 ms per call, plus
 * the checks a hostile local user makes necessary (docs/ARCHITECTURE.md,
 * "Security"):
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
#include "setup_priv.h"
#include "../sdp/names.h"
#include "../sdp/setup.h"
#include "../fdtable/reason.h"

/* ---- configuration, once per process ---------------------------------- */

struct setup_cfg setup_cfg = {.once = PTHREAD_ONCE_INIT};

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
	int n;

	if (osf_read_file(path, buf, sizeof(buf)) <= 0)
		return 0;
	n = sscanf(buf, "%u %u", a, b);
	return n < 0 ? 0 : (unsigned)n;
}

void setup_cfg_load(void)
{
	setup_cfg.rc = osf_route_parse(osf.env, osf.env_len, &setup_cfg.c);
}

/* Facts of the host, each read the first time a decision needs it (a
 * short client's connect to a local listener needs none of them: ~12 µs
 * of /sys and /proc reads saved per process). A race reads twice and
 * stores the same answer; no lock, so a fork child never waits for one. */
static int rdma_absent = -1; /* -1: not looked at yet */
static uint32_t eph_range;   /* lo << 16 | hi; 0: not read yet */
static int unpriv_port = -1;

int setup_rdma_absent(void)
{
	int v = __atomic_load_n(&rdma_absent, __ATOMIC_RELAXED);

	if (v < 0) {
		v = setup_cfg.c.debug_rdma_sim ? 0 : no_rdma_devices();
		__atomic_store_n(&rdma_absent, v, __ATOMIC_RELAXED);
	}
	return v;
}

void setup_eph_range(uint16_t *lo, uint16_t *hi)
{
	uint32_t v = __atomic_load_n(&eph_range, __ATOMIC_RELAXED);
	unsigned a = 0, b = 0;

	if (!v) {
		if (read_uints("/proc/sys/net/ipv4/ip_local_port_range", &a, &b) == 2 &&
		    a > 0 && b <= 65535 && a <= b)
			v = a << 16 | b;
		else
			v = 32768u << 16 | 60999u;
		__atomic_store_n(&eph_range, v, __ATOMIC_RELAXED);
	}
	*lo = (uint16_t)(v >> 16);
	*hi = (uint16_t)v;
}

unsigned setup_unpriv_port(void)
{
	int v = __atomic_load_n(&unpriv_port, __ATOMIC_RELAXED);
	unsigned up = 0, x;

	if (v < 0) {
		v = 1024;
		if (read_uints("/proc/sys/net/ipv4/ip_unprivileged_port_start", &up, &x) >= 1 &&
		    up <= 65536)
			v = (int)up;
		__atomic_store_n(&unpriv_port, v, __ATOMIC_RELAXED);
	}
	return (unsigned)v;
}

/* usable reports whether the C evaluator can take this process's
 * configuration; the debug stand-in for RDMA always goes through Go. */
int setup_usable(void)
{
	pthread_once(&setup_cfg.once, setup_cfg_load);
	return setup_cfg.rc == OSF_ROUTE_OK && !setup_cfg.c.debug_rdma_sim;
}

void setup_debug_core(void)
{
	if (osf.debug_core_at_setup)
		(void)osf_core_ready();
}

/* ---- addresses ------------------------------------------------------- */

const uint8_t setup_v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};


struct ip setup_ip_from(int family, const uint8_t *addr, uint16_t port)
{
	struct ip ip;

	memset(&ip, 0, sizeof(ip));
	ip.v4 = family == AF_INET;
	memcpy(ip.a, addr, ip.v4 ? 4 : 16);
	ip.port = port;
	return ip;
}

struct ip setup_ip_unmap(struct ip ip)
{
	if (!ip.v4 && memcmp(ip.a, setup_v4mapped, 12) == 0) {
		memmove(ip.a, ip.a + 12, 4);
		memset(ip.a + 4, 0, 12);
		ip.v4 = 1;
	}
	return ip;
}

/* as_family is shm.AsFamily: ip in the family of a socket whose address
 * is like (v6like: an IPv6 one). */
struct ip setup_as_family(struct ip ip, int v6like)
{
	if (!v6like)
		return setup_ip_unmap(ip);
	if (ip.v4) {
		uint8_t a4[4];
		memcpy(a4, ip.a, 4);
		memcpy(ip.a, setup_v4mapped, 12);
		memcpy(ip.a + 12, a4, 4);
		ip.v4 = 0;
	}
	return ip;
}

int setup_ip_unspec(const struct ip *ip)
{
	static const uint8_t zero[16];

	return memcmp(ip->a, zero, ip->v4 ? 4 : 16) == 0;
}

int setup_ip_loop(const struct ip *ip)
{
	static const uint8_t one[16] = {[15] = 1};

	return ip->v4 ? ip->a[0] == 127 : memcmp(ip->a, one, 16) == 0;
}

void setup_put_sockaddr(uint8_t out[28], const struct ip *ip)
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
int setup_get_sockaddr(const uint8_t in[28], struct ip *ip)
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

/* The addresses of this host: sdp/setup.c's osf_addr_local, whose lock
 * a fork child resets. */
OSF_FORK_TEXT static void host_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	OSF_RESET_MEM(&osf_host_mu, fresh);
}
OSF_AFTER_FORK(host_after_fork, OSF_FORK_RESET);

/* host_has is the route evaluator's is_local (route.h): a is v4's 4 bytes
 * or 16. */
static int host_has(int v4, const uint8_t *a, void *arg)
{
	(void)arg;
	return setup_is_local(setup_ip_from(v4 ? AF_INET : AF_INET6, a, 0));
}

/* setup_is_local is osf_addr_local (sdp/setup.h): loopback, unspecified
 * or an address of this host. */
int setup_is_local(struct ip ip)
{
	struct ip w = setup_as_family(ip, 1);

	return osf_addr_local(w.a);
}

/* ---- companion names (sdp/names.h) ------------------------------------- */

void setup_fmt_host(const struct ip *ip, char *out, size_t n)
{
	struct ip w = setup_as_family(*ip, 1);

	osf_name_host(w.a, out, n);
}

/* listen_name is the companion's name; without the leading NUL. */
static void listen_name(struct ip ip, int v6only, char *out, size_t n)
{
	struct ip w = setup_as_family(ip, 1);

	osf_listen_name(w.a, ip.port, v6only, out, n);
}

socklen_t setup_abstract(struct sockaddr_un *sun, const char *name)
{
	size_t l = strlen(name);

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path + 1, name, l);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + l);
}

/* ---- route decisions ----------------------------------------------- */

void setup_decide(int role, struct ip ip, struct osf_route_decision *d)
{
	struct osf_route_query q;

	memset(&q, 0, sizeof(q));
	q.role = role;
	q.prog = osf.prog;
	q.v4 = ip.v4;
	memcpy(q.addr, ip.a, 16);
	q.port = ip.port;
	q.is_local = host_has;
	/* First as if an RDMA device were there: osf_route_decide reads
	 * rdma_absent only where a device would make the answer "ask Go",
	 * so any other answer stands without looking for one. */
	q.rdma_absent = 0;
	osf_route_decide(&setup_cfg.c, &q, d);
	if (d->need_go && setup_rdma_absent()) {
		q.rdma_absent = 1;
		osf_route_decide(&setup_cfg.c, &q, d);
	}
}

int setup_begin(int role, int family, const uint8_t *addr, uint16_t port,
		struct ip *ip, struct osf_route_decision *d)
{
	setup_debug_core();
	if (!setup_usable())
		return 0;
	*ip = setup_ip_from(family, addr, port);
	setup_decide(role, *ip, d);
	return !d->need_go;
}

void setup_set_detail(char out[96], const char *s)
{
	snprintf(out, 96, "%s", s ? s : "");
}

/* ---- logging (in C: preload/log.c) ---------------------------------- */

/* fmt_ap formats ip:port as netip.AddrPort.String does. */
const char *setup_fmt_ap(const struct ip *ip, char *out, size_t n)
{
	char h[64];

	if (ip->v4) {
		snprintf(out, n, "%u.%u.%u.%u:%u", ip->a[0], ip->a[1], ip->a[2],
			 ip->a[3], ip->port);
		return out;
	}
	if (memcmp(ip->a, setup_v4mapped, 12) == 0)
		snprintf(h, sizeof(h), "::ffff:%u.%u.%u.%u", ip->a[12], ip->a[13],
			 ip->a[14], ip->a[15]);
	else
		osf_name_fmt6(ip->a, h, sizeof(h));
	snprintf(out, n, "[%s]:%u", h, ip->port);
	return out;
}

/* logs reports whether a line of level would be written. */
int setup_logs(int level)
{
	return setup_cfg.rc == OSF_ROUTE_OK && level >= setup_cfg.c.log_level;
}

/* slog writes a line (preload/log.c, never through the core) when the
 * configured level keeps it; reason >= 0 appends its description
 * (fdtable/reason.h, policy.Reason.Describe's text). */
__attribute__((format(printf, 5, 6))) void
setup_slog(int level, int reason, int rule, const char *detail, const char *fmt, ...)
{
	char msg[256], why[256];
	va_list ap;
	int saved = errno;

	if (!setup_logs(level))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	why[0] = 0;
	if (reason >= 0)
		osf_reason_describe(reason, rule, detail, why, sizeof(why));
	osf_log(level, "%s%s", msg, why);
	errno = saved;
}

/* ---- listen ---------------------------------------------------------- */

/* GROUP_KERNEL_DETAIL: a SO_REUSEPORT group under OSF_SHM_KFD whose
 * first members osf does not serve (no companion): kernel TCP. */
#define GROUP_KERNEL_DETAIL "SO_REUSEPORT group with listeners osf does not serve"

int osf_setup_listen(const struct osf_core_listen_in *in, int reuseport,
		     struct osf_core_listen_out *out, int group[3], int listening)
{
	struct osf_route_decision d;
	struct sockaddr_un sun;
	struct ip ip;
	char base[128], name[144], a[80];
	socklen_t sl;
	unsigned slot;
	int fd, r, tight;

	if (!setup_begin(OSF_ROUTE_SERVER, in->family, in->addr, in->port, &ip, &d))
		return 0;
	out->fd = -1;
	out->rule = d.rule;
	setup_set_detail(out->detail, d.detail);
	if (d.transport == OSF_ROUTE_KERNEL) {
		out->reason = d.reason;
		if (setup_logs(OSF_LOGL_DEBUG))
			setup_slog(OSF_LOGL_DEBUG, d.reason, d.rule, d.detail,
			     "listen %s: kernel: ", setup_fmt_ap(&ip, a, sizeof(a)));
		return 1;
	}
	listen_name(ip, in->v6only, base, sizeof(base));
	osf_fdt_high_begin(); /* the companion needs none of the program's fds */
	/* Under OSF_SHM_KFD a tight limit takes a companion while osf may
	 * hold it and a client process's link and region (OSF_FDT_TIGHT_CAP):
	 * its connections hold no fd of their own. */
	tight = osf.shm_kfd && osf.shm_efd ? osf_fdt_tight_limit() : 0;
	if (tight ? !osf_fdt_budget_ok(1 + SETUP_CLIENT_FDS) &&
		    (setup_link_prune(), !osf_fdt_budget_ok(1 + SETUP_CLIENT_FDS))
		  : !osf_fdt_affordable()) {
		/* soft = hard, a limit a program may fill: no companion, so
		 * clients connect by kernel TCP, whose accepts cost the
		 * program one fd each, as without osf (fdtable/fdwindow.c). */
		osf_fdt_high_end();
		out->reason = OSF_R_RESOURCE;
		setup_set_detail(out->detail, tight ? FD_CAP_DETAIL : FD_ROOM_DETAIL);
		if (setup_logs(OSF_LOGL_DEBUG))
			setup_slog(OSF_LOGL_DEBUG, OSF_R_RESOURCE, d.rule, out->detail,
				   "listen %s: kernel: ", setup_fmt_ap(&ip, a, sizeof(a)));
		return 1;
	}
	/* OSF_SHM_KFD: a SOCK_SEQPACKET companion, which only its clients'
	 * links dial (struct osf_dial's seqpacket): a client without the
	 * switch, whose hello it would never read, is refused and connects
	 * over kernel TCP, as one with it to a server without it. */
	fd = REAL(socket)(AF_UNIX, (osf.shm_kfd ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC |
					   SOCK_NONBLOCK, 0);
	/* OSF_SHM_KFD: a SO_REUSEPORT group's one companion, at slot 0, and
	 * its store, made or taken from another member's process
	 * (setup_group.c), listening (r 0 or 1); r 2: none to take, fd is a
	 * companion no client dials; 3: kernel TCP. */
	name[0] = 0;
	r = -1;
	if (group)
		group[0] = group[1] = group[2] = -1;
	if (group && fd >= 0) {
		osf_slot_name(base, 0, name, sizeof(name));
		r = setup_group_bind(&fd, name, in, listening, group);
	}
	osf_fdt_high_end();
	if (group && r == 3) {
		REAL(close)(fd);
		out->reason = OSF_R_DISABLED;
		setup_set_detail(out->detail, GROUP_KERNEL_DETAIL);
		if (setup_logs(OSF_LOGL_DEBUG))
			setup_slog(OSF_LOGL_DEBUG, OSF_R_DISABLED, d.rule, out->detail,
				   "listen %s: kernel: ", setup_fmt_ap(&ip, a, sizeof(a)));
		return 1;
	}
	/* A SO_REUSEPORT listener takes the first free slot of its group
	 * (clients spread over the slots, setup_connect.c). */
	for (slot = 0; !group && fd >= 0 && slot < (reuseport ? OSF_SLOT_MAX : 1u);
	     slot++) {
		osf_slot_name(base, slot, name, sizeof(name));
		sl = setup_abstract(&sun, name);
		r = REAL(bind)(fd, (struct sockaddr *)&sun, sl);
		if (r == 0 || errno != EADDRINUSE)
			break;
	}
	if (group && r == 2 && setup_logs(OSF_LOGL_DEBUG))
		setup_slog(OSF_LOGL_DEBUG, -1, 0, NULL,
			   "listen %s: SO_REUSEPORT group of another process whose hello store "
			   "could not be had: its companion shut, connections whose hello it "
			   "has reset", setup_fmt_ap(&ip, a, sizeof(a)));
	if (fd < 0 || r < 0 || (!group && REAL(listen)(fd, in->backlog) < 0)) {
		out->reason = OSF_R_RESOURCE;
		out->reason_errno = errno;
		setup_set_detail(out->detail, strerror(errno));
		if (fd >= 0)
			REAL(close)(fd);
		if (group)
			osf_setup_group_drop(group);
		setup_slog(OSF_LOGL_ERROR, -1, 0, NULL,
		     "listen %s: no offload listener: companion %s: %s",
		     setup_fmt_ap(&ip, a, sizeof(a)), name, out->detail);
		return 1;
	}
	out->fd = fd;
	if (setup_logs(OSF_LOGL_DEBUG))
		setup_slog(OSF_LOGL_DEBUG, -1, 0, NULL, "listen %s: shm (rule %d), companion fd %d",
		     setup_fmt_ap(&ip, a, sizeof(a)), d.rule, fd);
	return 1;
}
