//go:build osf_make

/* sockets.c: socket creation and connection set-up.
 *
 * socket records AF_INET/AF_INET6 stream sockets. listen asks the core for
 * a route decision and, when the listener is offloaded, for a companion
 * listener (a hidden fd) that offloaded clients connect to. connect asks
 * the core to open an offloaded connection; when it can, the wake socket
 * it returns replaces the application's TCP socket under the same fd
 * number (dup3), else the connect goes to the kernel. accept on an
 * offloaded listener takes whichever of the two listeners is ready.
 */
#include "conn.h"
#include "gateway.h"
#include "pool.h"
#include "setup.h"
#include "spin.h"
#include "../sdp/names.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int osf_on(void)
{
	return __atomic_load_n(&osf.ready, __ATOMIC_ACQUIRE) && !osf.disabled;
}

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

/* is_inet_stream: a TCP socket, or an MPTCP one (Go's listeners since 1.24
 * ask for IPPROTO_MPTCP): its clients are TCP clients, and a kernel MPTCP
 * connection to a TCP peer is TCP on the wire, so osf treats it as TCP. */
static int is_inet_stream(int domain, int type, int protocol)
{
	return (domain == AF_INET || domain == AF_INET6) &&
	       (type & 0xf) == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP || protocol == IPPROTO_MPTCP);
}

void osf_track_inet(int fd, int domain, int type)
{
	struct osf_fdt_entry e;
	int saved = errno;

	memset(&e, 0, sizeof(e));
	e.kind = OSF_FD_INET;
	e.aux_fd = -1;
	e.rule = -1;
	if (domain == AF_INET6)
		e.flags |= OSF_FDF_V6;
	if (type & SOCK_CLOEXEC)
		e.flags |= OSF_FDF_CLOEXEC;
	(void)osf_fdt_set(fd, &e);
	errno = saved;
}

/* core_reason is the reason recorded when the core could not be asked:
 * no room for it under RLIMIT_AS (ENOMEM), else it is unavailable. */
static int core_reason(int rc)
{
	return rc == ENOMEM ? OSF_R_RESOURCE : OSF_R_DISABLED;
}

/* record_kernel notes that fd is on kernel TCP, in a role, and why; peer
 * is the address it connects to (NULL: ask the kernel). */
static void record_kernel(int fd, int role, int reason, int rule,
			  int reason_errno, const struct sockaddr *peer,
			  socklen_t peerlen)
{
	struct osf_fdt_entry *e = osf_fdt_get(fd);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct stat st;
	int saved = errno;

	if (!e)
		return;
	e->transport = OSF_TP_KERNEL;
	e->role = (uint8_t)role;
	e->reason = (uint8_t)reason;
	e->rule = rule;
	e->reason_errno = reason_errno;
	e->aux_fd = -1;
	e->ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
	if (role != OSF_ROLE_CLIENT &&
	    REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) == 0)
		memcpy(e->local, &ss, sl < sizeof(e->local) ? sl : sizeof(e->local));
	if (peer)
		memcpy(e->peer, peer, peerlen < sizeof(e->peer) ? peerlen : sizeof(e->peer));
	__atomic_store_n(&e->kind, OSF_FD_KERNEL, __ATOMIC_RELEASE);
	osf_fdt_touch();
	errno = saved;
}

/* kernel_connected records the local address of a kernel TCP client once
 * connect has bound it. */
static void kernel_connected(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int saved = errno;

	if (e && e->kind == OSF_FD_KERNEL &&
	    REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) == 0) {
		memcpy(e->local, &ss, sl < sizeof(e->local) ? sl : sizeof(e->local));
		osf_fdt_touch();
	}
	errno = saved;
}

/* kernel_connect connects fd over kernel TCP and records its address. */
static int kernel_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	int r = REAL(connect)(fd, sa, len);

	if (r == 0 || errno == EINPROGRESS)
		kernel_connected(fd);
	return r;
}

/* sa_split takes family, address and port out of a sockaddr; 0 when it is
 * not a complete AF_INET/AF_INET6 address. */
static int sa_split(const struct sockaddr *sa, socklen_t len, int32_t *family,
		    uint8_t addr[16], uint16_t *port)
{
	if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;
		*family = AF_INET;
		memcpy(addr, &in->sin_addr, 4);
		*port = ntohs(in->sin_port);
		return 1;
	}
	if (sa && sa->sa_family == AF_INET6 &&
	    len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		*family = AF_INET6;
		memcpy(addr, &in6->sin6_addr, 16);
		*port = ntohs(in6->sin6_port);
		return 1;
	}
	return 0;
}

OSF_EXPORT int socket(int domain, int type, int protocol)
{
	int fd = REAL(socket)(domain, type, protocol);

	if (fd >= 0 && is_inet_stream(domain, type, protocol) && osf_on())
		osf_track_inet(fd, domain, type);
	return fd;
}

OSF_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	return REAL(socketpair)(domain, type, protocol, sv);
}

OSF_EXPORT int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind != OSF_FD_INET))
		return REAL(bind)(fd, sa, len);
	/* Marked before the call, whatever its outcome: connect then asks
	 * the kernel, which knows. */
	__atomic_or_fetch(&e->flags, OSF_FDF_BOUND, __ATOMIC_RELAXED);
	return REAL(bind)(fd, sa, len);
}

/* ---- listen ------------------------------------------------------------ */

static void listen_offload(int fd, struct osf_fdt_entry *e, int backlog)
{
	struct osf_core_listen_in in;
	struct osf_core_listen_out out;
	struct osf_fdt_entry ent;
	struct sockaddr_storage ss;
	struct stat st;
	socklen_t sl = sizeof(ss);
	int v6only = 0, reuseport = 0, rc, hfd, ctl = -1;
	socklen_t vl = sizeof(v6only), rl = sizeof(reuseport);

	osf_sandbox_check();
	if (__atomic_load_n(&osf.sandboxed, __ATOMIC_ACQUIRE)) {
		record_kernel(fd, OSF_ROLE_LISTENER, OSF_R_SANDBOX, -1, 0, NULL, 0);
		return;
	}
	memset(&in, 0, sizeof(in));
	if (REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    !sa_split((struct sockaddr *)&ss, sl, &in.family, in.addr, &in.port))
		return;
	if (in.family == AF_INET6)
		REAL(getsockopt)(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vl);
	in.backlog = backlog;
	in.v6only = v6only;
	REAL(getsockopt)(fd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl);
	memset(&out, 0, sizeof(out));
	rc = osf_setup_listen(&in, reuseport, &out) ? 0 : osf_core_listen(&in, &out);
	if (rc != 0) {
		record_kernel(fd, OSF_ROLE_LISTENER, core_reason(rc), -1, rc, NULL, 0);
		return;
	}
	if (out.gw) {
		/* With a companion, an offloaded listener (below) that also
		 * holds the gateway's control connection (aux2_fd). */
		if (out.gw_companion >= 0 && out.fd >= 0 &&
		    (ctl = osf_fdt_hide(out.fd, fd)) < 0) {
			REAL(close)(out.gw_companion);
			out.gw_companion = -1;
		}
		if (out.gw_companion < 0 || out.fd < 0) {
			if (out.gw_companion >= 0)
				REAL(close)(out.gw_companion);
			osf_gateway_listen(fd, &out, &ss, sl);
			return;
		}
		out.fd = out.gw_companion;
	}
	if (out.fd < 0) {
		record_kernel(fd, OSF_ROLE_LISTENER, out.reason, out.rule,
			      out.reason_errno, NULL, 0);
		return;
	}
	osf_setup_syn_filter(fd);
	hfd = osf_fdt_hide(out.fd, fd);
	if (hfd < 0)
		hfd = out.fd;
	ent = *e;
	ent.kind = OSF_FD_LISTEN;
	ent.transport = ctl >= 0 ? OSF_TP_GATEWAY : OSF_TP_SHM;
	ent.role = OSF_ROLE_LISTENER;
	ent.reason = OSF_R_NONE;
	ent.rule = out.rule;
	ent.aux_fd = hfd;
	ent.aux2_fd = ctl;
	ent.ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
	if (v6only)
		ent.flags |= OSF_FDF_V6ONLY;
	memset(ent.local, 0, sizeof(ent.local));
	memcpy(ent.local, &ss, sl < sizeof(ent.local) ? sl : sizeof(ent.local));
	if (ctl >= 0) {
		memcpy(ent.peer, out.gateway, sizeof(ent.peer));
		osf_gateway_token_set(hfd, out.gw_token);
	}
	(void)osf_fdt_set(fd, &ent);
	osf_listen_async(fd, hfd, 1);
	osf_mux_offloaded(fd);
}

void osf_listen_async(int fd, int cfd, int only_async)
{
	struct f_owner_ex o;
	int fl = REAL(fcntl)(fd, F_GETFL, NULL), cfl, sig, saved = errno;

	if (fl < 0 || (only_async && !(fl & O_ASYNC)))
		return;
	cfl = REAL(fcntl)(cfd, F_GETFL, NULL);
	if (REAL(fcntl)(fd, F_GETOWN_EX, &o) == 0)
		(void)REAL(fcntl)(cfd, F_SETOWN_EX, &o);
	sig = REAL(fcntl)(fd, F_GETSIG, NULL);
	if (sig >= 0)
		(void)REAL(fcntl)(cfd, F_SETSIG, (void *)(long)sig);
	if (cfl >= 0 && ((cfl ^ fl) & O_ASYNC))
		(void)REAL(fcntl)(cfd, F_SETFL, (void *)(long)((cfl & ~O_ASYNC) | (fl & O_ASYNC)));
	errno = saved;
}

OSF_EXPORT int listen(int fd, int backlog)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int rc;

	if (likely(!e || (e->kind != OSF_FD_INET && e->kind != OSF_FD_LISTEN)))
		return REAL(listen)(fd, backlog);
	rc = REAL(listen)(fd, backlog);
	if (rc < 0)
		return rc;
	if (e->kind == OSF_FD_LISTEN) /* again: a new backlog for both */
		(void)REAL(listen)(e->aux_fd, backlog);
	else if (osf_on())
		listen_offload(fd, e, backlog);
	return rc;
}

/* ---- options carried from a TCP socket to an offloaded one -------------- */

struct carried {
	struct timeval rcvtimeo, sndtimeo;
	struct linger linger;
	int keepalive, nodelay, rcvlowat;
	int bufs[2]; /* SO_RCVBUF, SO_SNDBUF as the kernel has them (doubled),
			0: not set */
	int oobinline;
	int nkopts; /* TCP and IP options, when any was set (kopt.c) */
	struct osf_kopt kopts[8];
};

/* carried_option reports whether an option is one carry_read reads back
 * (or a TCP/IP one, osf_kopt_carry's): setting it marks the socket
 * OSF_FDF_OPTSET. */
static int carried_option(int level, int name)
{
	if (level == IPPROTO_TCP || level == IPPROTO_IP || level == IPPROTO_IPV6)
		return 1;
	if (level != SOL_SOCKET)
		return 0;
	switch (name) {
	case SO_RCVTIMEO_OLD:
	case SO_SNDTIMEO_OLD:
#ifdef SO_RCVTIMEO_NEW
	case SO_RCVTIMEO_NEW:
	case SO_SNDTIMEO_NEW:
#endif
	case SO_LINGER:
	case SO_KEEPALIVE:
	case SO_RCVLOWAT:
	case SO_RCVBUF:
	case SO_SNDBUF:
	case SO_RCVBUFFORCE:
	case SO_SNDBUFFORCE:
	case SO_OOBINLINE:
		return 1;
	}
	return 0;
}

/* The opts_set bits of the options carry_read reads itself (osf_kopt_bit
 * has the TCP and IP ones, below 16). */
#define OPT_RCVTIMEO (1u << 16)
#define OPT_SNDTIMEO (1u << 17)
#define OPT_LINGER (1u << 18)
#define OPT_KEEPALIVE (1u << 19)
#define OPT_NODELAY (1u << 20)
#define OPT_RCVLOWAT (1u << 21)
#define OPT_RCVBUF (1u << 22)
#define OPT_SNDBUF (1u << 23)
#define OPT_OOBINLINE (1u << 24)

/* carried_bit is the opts_set bit of an option carry_read reads back (0
 * for one it does not: setting it costs a connection nothing). */
static uint32_t carried_bit(int level, int name)
{
	if (level == IPPROTO_TCP && name == TCP_NODELAY)
		return OPT_NODELAY;
	if (level != SOL_SOCKET)
		return osf_kopt_bit(level, name);
	switch (name) {
	case SO_RCVTIMEO_OLD:
#ifdef SO_RCVTIMEO_NEW
	case SO_RCVTIMEO_NEW:
#endif
		return OPT_RCVTIMEO;
	case SO_SNDTIMEO_OLD:
#ifdef SO_SNDTIMEO_NEW
	case SO_SNDTIMEO_NEW:
#endif
		return OPT_SNDTIMEO;
	case SO_LINGER:
		return OPT_LINGER;
	case SO_KEEPALIVE:
		return OPT_KEEPALIVE;
	case SO_RCVLOWAT:
		return OPT_RCVLOWAT;
	case SO_RCVBUF:
	case SO_RCVBUFFORCE:
		return OPT_RCVBUF;
	case SO_SNDBUF:
	case SO_SNDBUFFORCE:
		return OPT_SNDBUF;
	case SO_OOBINLINE:
		return OPT_OOBINLINE;
	}
	return 0;
}

/* carry_bufs reads fd's buffer sizes the program set (set: opts_set's
 * bits, ~0u when not known which: then those that differ from a fresh
 * socket's). A socket's sizes cannot say whether they were set (a size
 * set to what TCP starts with reads the same but stops autotuning), so
 * only the bits tell for sure. */
static void carry_bufs(int fd, int fam, uint32_t set, int bufs[2])
{
	static const int names[2] = {SO_RCVBUF, SO_SNDBUF};
	static const uint32_t bits[2] = {OPT_RCVBUF, OPT_SNDBUF};
	int fresh = -1, i;

	for (i = 0; i < 2; i++) {
		socklen_t l = sizeof(int);
		int d = 0;
		if (!(set & bits[i]) ||
		    REAL(getsockopt)(fd, SOL_SOCKET, names[i], &bufs[i], &l) < 0) {
			bufs[i] = 0;
			continue;
		}
		if (set != ~0u)
			continue;
		if (fresh < 0 && (fresh = REAL(socket)(fam, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
			bufs[i] = 0;
			continue;
		}
		l = sizeof(int);
		if (REAL(getsockopt)(fresh, SOL_SOCKET, names[i], &d, &l) < 0 || d == bufs[i])
			bufs[i] = 0;
	}
	if (fresh >= 0)
		REAL(close)(fresh);
}

/* carry_read reads the options a connection made from fd carries over:
 * none when none was ever set through any fd of it, those set through
 * fd when it never had a dup (opts_set), else every one. */
static void carry_read(int fd, struct carried *o)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	uint32_t set = OSF_OPTS_ALL;
	socklen_t l;

	memset(o, 0, sizeof(*o));
	if (e && !(__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_OPTSET))
		return; /* never set through any fd: the defaults, all zero */
	if (e)
		set = __atomic_load_n(&e->opts_set, __ATOMIC_RELAXED);
	if (set & OSF_OPTS_ALL)
		set = ~0u;
	if (e && (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_KOPTS) &&
	    (set & 0xffffu))
		o->nkopts = osf_kopt_carry(fd, (e->flags & OSF_FDF_V6) ? AF_INET6 : AF_INET,
					   set == ~0u ? OSF_OPTS_ALL : set & 0xffffu,
					   o->kopts, 8);
	l = sizeof(o->rcvtimeo);
	if (set & OPT_RCVTIMEO)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &o->rcvtimeo, &l);
	l = sizeof(o->sndtimeo);
	if (set & OPT_SNDTIMEO)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_SNDTIMEO, &o->sndtimeo, &l);
	l = sizeof(o->linger);
	if (set & OPT_LINGER)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_LINGER, &o->linger, &l);
	l = sizeof(int);
	if (set & OPT_KEEPALIVE)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_KEEPALIVE, &o->keepalive, &l);
	l = sizeof(int);
	if (set & OPT_NODELAY)
		REAL(getsockopt)(fd, IPPROTO_TCP, TCP_NODELAY, &o->nodelay, &l);
	l = sizeof(int);
	if (set & OPT_RCVLOWAT)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &o->rcvlowat, &l);
	l = sizeof(int);
	if (set & OPT_OOBINLINE)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_OOBINLINE, &o->oobinline, &l);
	if (set & (OPT_RCVBUF | OPT_SNDBUF))
		carry_bufs(fd, e && (e->flags & OSF_FDF_V6) ? AF_INET6 : AF_INET, set, o->bufs);
}

static void carry_apply(int fd, const struct carried *o)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int saved = errno;

	if (!e || !osf_kind_is_conn(e->kind))
		return;
	for (int i = 0; i < o->nkopts; i++)
		osf_conn_carry_kopt(fd, e, o->kopts[i].level, o->kopts[i].name,
				    o->kopts[i].val, o->kopts[i].len);
	if (o->rcvtimeo.tv_sec || o->rcvtimeo.tv_usec)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_RCVTIMEO,
				    &o->rcvtimeo, sizeof(o->rcvtimeo));
	if (o->sndtimeo.tv_sec || o->sndtimeo.tv_usec)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_SNDTIMEO,
				    &o->sndtimeo, sizeof(o->sndtimeo));
	if (o->linger.l_onoff)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_LINGER, &o->linger,
				    sizeof(o->linger));
	if (o->keepalive)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_KEEPALIVE,
				    &o->keepalive, sizeof(int));
	if (o->nodelay)
		osf_conn_carry_kopt(fd, e, IPPROTO_TCP, TCP_NODELAY,
				    &o->nodelay, sizeof(int));
	if (o->rcvlowat > 1)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_RCVLOWAT,
				    &o->rcvlowat, sizeof(int));
	if (o->oobinline)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_OOBINLINE,
				    &o->oobinline, sizeof(int));
	for (int i = 0; i < 2; i++)
		if (o->bufs[i] > 0) /* the kernel doubles what it is given */
			osf_conn_carry_buf(fd, e, i ? SO_SNDBUF : SO_RCVBUF, o->bufs[i]);
	errno = saved;
}

/* abandon releases what the core handed over when it cannot be used. */
static void abandon(const struct osf_core_conn *cc)
{
	if (cc->seg_addr) /* never held: this side lets go for good */
		osf_seg_release((void *)(uintptr_t)cc->seg_addr, cc->ring_bytes, cc->side, 1);
	if (cc->seg_fd >= 0)
		REAL(close)(cc->seg_fd);
	if (cc->wake_tx_fd >= 0)
		REAL(close)(cc->wake_tx_fd);
	if (cc->wake_fd >= 0)
		REAL(close)(cc->wake_fd);
}

/* ---- connect ------------------------------------------------------------ */

/* struct osf_bound_port (osf.h): the port the application bound its
 * socket to before connect, taken over by a socket of osf's once the
 * application's is gone (port_hold), with the same SO_REUSEADDR and
 * SO_REUSEPORT. */

static const int reuse_opts[2] = {SO_REUSEADDR, SO_REUSEPORT};

/* port_read notes fd's bound port in bp; 0 when it has none. */
static int port_read(int fd, struct osf_bound_port *bp)
{
	int32_t fam;
	uint8_t a[16];
	uint16_t port = 0;
	int i;

	bp->len = sizeof(bp->ss);
	if (REAL(getsockname)(fd, (struct sockaddr *)&bp->ss, &bp->len) < 0 ||
	    !sa_split((struct sockaddr *)&bp->ss, bp->len, &fam, a, &port) || port == 0)
		return 0;
	for (i = 0; i < 2; i++) {
		socklen_t l = sizeof(int);
		bp->reuse[i] = 0;
		(void)REAL(getsockopt)(fd, SOL_SOCKET, reuse_opts[i], &bp->reuse[i], &l);
	}
	return 1;
}

/* port_hold binds a fresh TCP socket to the port in bp (which the
 * application's socket held until it was replaced a moment ago): -1 when
 * it is gone meanwhile. */
static int port_hold(const struct osf_bound_port *bp)
{
	int fd = REAL(socket)(bp->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), i;

	if (fd < 0)
		return -1;
	for (i = 0; i < 2; i++)
		if (bp->reuse[i])
			(void)REAL(setsockopt)(fd, SOL_SOCKET, reuse_opts[i], &bp->reuse[i], sizeof(int));
	if (REAL(bind)(fd, (const struct sockaddr *)&bp->ss, bp->len) < 0) {
		REAL(close)(fd);
		return -1;
	}
	return fd;
}

/* addr16 is address a of family fam in IPv6 form (an IPv4 one
 * v4-mapped, so that a v4 socket's and a dual-stack one's compare). */
static void addr16(int32_t fam, const uint8_t *a, uint8_t a16[16])
{
	if (fam == AF_INET) {
		memcpy(a16, osf_name_v4mapped, 12);
		memcpy(a16 + 12, a, 4);
	} else {
		memcpy(a16, a, 16);
	}
}

/* split16 splits the sockaddr at b (len bytes; the fd table and
 * connect's in.bound keep them in 28) into its address in IPv6 form (an
 * IPv4 one v4-mapped, so that a v4 socket's and a dual-stack one's
 * compare) and its port; 0 when it is no IPv4 or IPv6 address. */
static int split16(const void *b, size_t len, uint8_t a16[16], uint16_t *port)
{
	struct sockaddr_storage ss;
	int32_t fam;
	uint8_t a[16];

	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, b, len < sizeof(ss) ? len : sizeof(ss));
	if (!sa_split((struct sockaddr *)&ss, sizeof(struct sockaddr_in6), &fam, a, port))
		return 0;
	addr16(fam, a, a16);
	return 1;
}

/* wildcard_bound reports whether b is a wildcard address with a port. */
static int wildcard_bound(const uint8_t b[28])
{
	uint8_t a[16];
	uint16_t port = 0;

	return split16(b, 28, a, &port) && port && osf_name_unspec(a);
}

/* connect_unspec: a connect to the unspecified address goes where the
 * kernel sends it (ip_route_connect: to the address the socket is bound
 * to, else 127.0.0.1; tcp_v6_connect: ::1, or 127.0.0.1 for a socket
 * bound to a v4-mapped address), and both ends' names are that address,
 * as with TCP. */
static void connect_unspec(struct osf_core_connect_in *in)
{
	static const uint8_t lo4[4] = {127, 0, 0, 1}, lo6[16] = {[15] = 1};
	uint8_t a16[16], b16[16];
	uint16_t bport;
	int v4 = in->family == AF_INET;
	int bound4 = split16(in->bound, sizeof(in->bound), b16, &bport) && osf_name_is4(b16);

	addr16(in->family, in->addr, a16);
	if (!osf_name_unspec(a16))
		return;
	if (!v4 && !osf_name_is4(a16) && !bound4) {
		memcpy(in->addr, lo6, 16);
		return;
	}
	if (!v4)
		memcpy(in->addr, osf_name_v4mapped, 12);
	memcpy(v4 ? in->addr : in->addr + 12,
	       bound4 && !osf_name_unspec(b16) ? b16 + 12 : lo4, 4);
}

/* bp_set_addr makes the connection address local (28 bytes, the fd
 * table's) bp's address, keeping its options. */
static void bp_set_addr(struct osf_bound_port *bp, const uint8_t local[28])
{
	memcpy(&bp->ss, local, 28);
	bp->len = bp->ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					       : sizeof(struct sockaddr_in);
}

/* narrow_to_local: a socket bound to a wildcard address before connect
 * holds, once connected, only the address it connected from (TCP sets
 * the bound address at connect: a dual-stack [::]:P connected over ::1
 * leaves 127.0.0.1:P free). bp is the application's bound address; local
 * the connection's own, with the same port. */
static void narrow_to_local(struct osf_bound_port *bp, const uint8_t local[28])
{
	if (wildcard_bound((const uint8_t *)&bp->ss))
		bp_set_addr(bp, local);
}

/* narrow_hold does the same to a kept holder h (the application's own
 * socket): a fresh socket with its options takes the connection's
 * address and port (SO_REUSEADDR on both for the moment they overlap,
 * so the port is never free), then replaces h under its number. */
static void narrow_hold(int h, const uint8_t local[28])
{
	struct osf_bound_port bp;
	int one = 1, n, saved = errno;

	if (!port_read(h, &bp) || !wildcard_bound((const uint8_t *)&bp.ss))
		return;
	narrow_to_local(&bp, local);
	n = REAL(socket)(bp.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (n < 0)
		goto out;
	(void)REAL(setsockopt)(h, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	(void)REAL(setsockopt)(n, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bp.reuse[1])
		(void)REAL(setsockopt)(n, SOL_SOCKET, SO_REUSEPORT, &bp.reuse[1], sizeof(int));
	if (REAL(bind)(n, (const struct sockaddr *)&bp.ss, bp.len) == 0 &&
	    REAL(setsockopt)(n, SOL_SOCKET, SO_REUSEADDR, &bp.reuse[0], sizeof(int)) == 0)
		(void)REAL(dup3)(n, h, O_CLOEXEC);
	else
		(void)REAL(setsockopt)(h, SOL_SOCKET, SO_REUSEADDR, &bp.reuse[0], sizeof(int));
	REAL(close)(n);
out:
	errno = saved;
}

/* port_give hands the port socket pfd to fd's offloaded connection, in
 * osf's hidden range (pfd is there already when high); errno is kept. */
static void port_give(int fd, int pfd, int high)
{
	struct osf_fdt_entry *e;
	int saved = errno, h;

	if (pfd < 0)
		return;
	h = high ? osf_fdt_keep_hidden(pfd, fd) : osf_fdt_hide(pfd, fd);
	if (h < 0) {
		if (!high)
			REAL(close)(pfd);
	} else if ((e = osf_fdt_lookup(fd)) != NULL) {
		osf_conn_hold_port(e, h);
	} else {
		osf_fdt_close_hidden(h);
	}
	errno = saved;
}

/* bound_port_of reports whether the sockaddr connect read back from a
 * bound socket (in.bound) has a port. */
static int bound_port_of(const uint8_t *b)
{
	uint8_t a[16];
	uint16_t port = 0;

	return split16(b, 28, a, &port) && port != 0;
}

/* tuple_taken reports whether an offloaded connection of this process
 * already has the 4-tuple a connect from the bound address (with its
 * port, in->bound) to in's destination would make. TCP refuses such a connect with EADDRNOTAVAIL
 * (two sockets may share a port with SO_REUSEADDR, never a 4-tuple).
 * Only this process's connections are seen: another's sharing the tuple
 * goes unnoticed. */
static int tuple_taken(const struct osf_core_connect_in *in)
{
	struct osf_fdt_entry *c;
	uint8_t b[16], d[16], x[16];
	uint16_t bport = 0, dport = in->port, p;
	int fd;

	if (!split16(in->bound, sizeof(in->bound), b, &bport) || bport == 0)
		return 0;
	addr16(in->family, in->addr, d);
	OSF_FDT_FOREACH(fd, c) {
		if (!osf_kind_is_conn(c->kind) || !split16(c->local, 28, x, &p) || p != bport ||
		    (!osf_name_unspec(b) && memcmp(b, x, 16)))
			continue;
		if (split16(c->peer, 28, x, &p) && p == dport && !memcmp(x, d, 16))
			return 1;
	}
	return 0;
}

static int connect_offload(int fd, struct osf_fdt_entry *e,
			   const struct sockaddr *sa, socklen_t len)
{
	struct osf_core_connect_in in;
	struct osf_core_conn cc;
	struct sockaddr_storage ss;
	struct carried opts;
	socklen_t sl = sizeof(ss);
	struct osf_bound_port bp;
	int rc, fl, fdfl, by_c, pfd = -1, bound = 0, kept = -1, placed = 0, window;
	int want = (e->flags & OSF_FDF_V6) ? AF_INET6 : AF_INET;
	int saved = errno;

	memset(&in, 0, sizeof(in));
	if (!sa_split(sa, len, &in.family, in.addr, &in.port) ||
	    in.family != want || in.port == 0)
		return REAL(connect)(fd, sa, len); /* the kernel's errno */
	osf_sandbox_check();
	if (__atomic_load_n(&osf.sandboxed, __ATOMIC_ACQUIRE)) {
		record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_SANDBOX, -1, 0, sa, len);
		return kernel_connect(fd, sa, len);
	}
	if ((__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_BOUND) &&
	    REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) == 0)
		memcpy(in.bound, &ss, sl < sizeof(in.bound) ? sl : sizeof(in.bound));
	connect_unspec(&in);
	if (tuple_taken(&in))
		return OSF_FAIL(EADDRNOTAVAIL);
	memset(&cc, 0, sizeof(cc));
	cc.wake_fd = cc.seg_fd = cc.wake_tx_fd = -1;
	in.app_fd = fd;
	/* window: the C set-up's fd window, left open for the install (one
	 * RLIMIT_NOFILE read per connect; three with room above the soft
	 * limit); the install's nests in it. */
	window = 0;
	by_c = osf_setup_connect(&in, &cc, &pfd, &placed, &window);
	if (!by_c)
		pfd = -1;
	rc = by_c ? 0 : osf_core_connect(&in, &cc);
	errno = saved;
	if (rc != 0) {
		record_kernel(fd, OSF_ROLE_CLIENT, core_reason(rc), -1, rc, sa, len);
		return kernel_connect(fd, sa, len);
	}
	if (cc.status == OSF_CORE_GATEWAY && cc.wake_fd < 0)
		return osf_gateway_connect(fd, sa, len, &cc);
	if (cc.status == OSF_CORE_KERNEL) {
		record_kernel(fd, OSF_ROLE_CLIENT, cc.reason, cc.rule,
			      cc.reason_errno, sa, len);
		return kernel_connect(fd, sa, len);
	}
	if (cc.status == OSF_CORE_REFUSE) {
		/* The reason says strict mode; cause says what it refused. */
		record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_STRICT, cc.rule,
			      cc.reason_errno, sa, len);
		if ((e = osf_fdt_lookup(fd)) != NULL)
			e->cause = (uint8_t)cc.reason;
		return OSF_FAIL(EPROTONOSUPPORT);
	}
	fl = REAL(fcntl)(fd, F_GETFL, NULL);
	fdfl = REAL(fcntl)(fd, F_GETFD, NULL);
	carry_read(fd, &opts);
	/* A socket bound to a port before connect keeps holding it: osf keeps
	 * it alive behind the wake socket (a hidden dup), unless it has dups
	 * or epoll registrations (OSF_FDF_NOKEEP); then a socket of osf's
	 * rebinds the port once the application's is gone (port_hold). */
	if (pfd < 0 && fl >= 0 && fdfl >= 0 &&
	    (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_BOUND) &&
	    !(__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_NOKEEP) &&
	    bound_port_of(in.bound))
		kept = osf_fdt_dup_high(fd, 1);
	bound = pfd < 0 && kept < 0 && port_read(fd, &bp);
	if (fl < 0 || fdfl < 0 ||
	    osf_conn_install(fd, &cc, OSF_ROLE_CLIENT, fdfl & FD_CLOEXEC,
			     (fl & O_NONBLOCK) != 0,
			     OSF_INSTALL_DUP | (by_c ? OSF_INSTALL_FL_OWN : 0) |
				     (placed ? OSF_INSTALL_PLACED : 0)) < 0) {
		if (window)
			osf_fdt_high_end();
		abandon(&cc);
		if (pfd >= 0)
			REAL(close)(pfd);
		if (kept >= 0)
			REAL(close)(kept);
		if (cc.status == OSF_CORE_GATEWAY) /* no route but the gateway */
			return OSF_FAIL(ENOBUFS);
		record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_RESOURCE, cc.rule, errno,
			      sa, len);
		errno = saved;
		return kernel_connect(fd, sa, len);
	}
	if (kept >= 0 && wildcard_bound(in.bound) && (e = osf_fdt_lookup(fd)) != NULL)
		narrow_hold(kept, e->local);
	if (bound && (e = osf_fdt_lookup(fd)) != NULL)
		narrow_to_local(&bp, e->local);
	if (pfd >= 0 || kept >= 0)
		port_give(fd, pfd >= 0 ? pfd : kept, 1);
	else if (bound)
		port_give(fd, port_hold(&bp), 0);
	if (window)
		osf_fdt_high_end();
	carry_apply(fd, &opts);
	if (cc.status == OSF_CORE_GATEWAY) /* before epoll may look at it */
		osf_gateway_leg_begin(fd, e);
	osf_mux_offloaded(fd);
	if (cc.status == OSF_CORE_GATEWAY)
		return osf_gateway_leg_connect(fd, e, (fl & O_NONBLOCK) != 0,
					       cc.gw_wait_ms);
	if (fl & O_NONBLOCK) { /* as loopback TCP: in progress, then done */
		e->flags |= OSF_FDF_INPROGRESS;
		return OSF_FAIL(EINPROGRESS);
	}
	return 0;
}

OSF_EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || !osf_kind_is_socket(e->kind)))
		return REAL(connect)(fd, sa, len);
	if (osf_kind_is_conn(e->kind)) {
		if (unlikely(e->flags & OSF_FDF_GATEWAY))
			return osf_gateway_connect_again(fd, e);
		if (e->flags & OSF_FDF_INPROGRESS) {
			e->flags &= ~OSF_FDF_INPROGRESS;
			return 0;
		}
		return OSF_FAIL(EISCONN);
	}
	if (unlikely(e->transport == OSF_TP_GATEWAY &&
		     (e->flags & (OSF_FDF_INPROGRESS | OSF_FDF_GWWAIT |
				  OSF_FDF_GWERR)))) /* as for TCP */
		return osf_gateway_pending_connect(fd, e);
	if (e->kind != OSF_FD_INET || !osf_on() || !sa ||
	    (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
		return REAL(connect)(fd, sa, len);
	return connect_offload(fd, e, sa, len);
}

/* ---- accept ------------------------------------------------------------- */

/* accepted records a kernel TCP connection accepted from a tracked
 * listener; sa is what accept returned (may be NULL). */
static void accepted(int lfd, int nfd, int flags, const struct sockaddr *sa,
		     const socklen_t *len)
{
	struct osf_fdt_entry *l = osf_fdt_lookup(lfd);
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	int saved = errno;

	if (nfd < 0 || !l || !osf_on())
		return;
	osf_track_inet(nfd, (l->flags & OSF_FDF_V6) ? AF_INET6 : AF_INET,
		       (flags & SOCK_CLOEXEC) ? SOCK_CLOEXEC : 0);
	if (sa && len && *len <= sizeof(peer)) {
		memcpy(&peer, sa, *len);
		pl = *len;
	} else if (REAL(getpeername)(nfd, (struct sockaddr *)&peer, &pl) < 0) {
		pl = 0;
	}
	if (l->kind == OSF_FD_LISTEN)
		osf_setup_syn_unfilter(nfd);
	record_kernel(nfd, OSF_ROLE_SERVER, OSF_R_PEER_KERNEL, -1, 0,
		      pl ? (struct sockaddr *)&peer : NULL, pl);
	errno = saved;
}

/* accept_companion takes one offloaded connection from the companion
 * (preload/setup.c, which never waits for a hello): its fd, or -2 when
 * there was none after all (another process took it, its hello is not
 * there yet, or its handshake failed), or -1 with errno (EMFILE: the
 * connection stays queued). */
static int accept_companion(int lfd, struct osf_fdt_entry *e,
			    struct sockaddr *sa, socklen_t *len, int flags,
			    int *wait_ms)
{
	struct osf_core_accept_in in;
	struct osf_core_conn cc;
	struct carried opts;
	socklen_t sl;
	sa_family_t fam;
	int cfd, rc, saved = errno, as_asked, window = 0;

	memset(&in, 0, sizeof(in));
	(void)sa_split((struct sockaddr *)e->local, sizeof(e->local), &in.family,
		       in.addr, &in.port);
	memset(&cc, 0, sizeof(cc));
	cc.wake_fd = cc.seg_fd = cc.wake_tx_fd = -1;
	cfd = osf_setup_accept(lfd, e->aux_fd, &in, &cc, wait_ms, flags, &as_asked, &window);
	if (cfd < 0) {
		if (cfd == -2)
			errno = saved;
		return cfd;
	}
	carry_read(lfd, &opts);
	rc = osf_conn_install(cfd, &cc, OSF_ROLE_SERVER, flags & SOCK_CLOEXEC,
			      (flags & SOCK_NONBLOCK) != 0,
			      as_asked ? OSF_INSTALL_AS_ASKED : OSF_INSTALL_FL_OWN);
	if (window)
		osf_fdt_high_end(); /* osf_setup_accept's */
	if (rc < 0) {
		cc.wake_fd = -1; /* that is cfd */
		abandon(&cc);
		REAL(close)(cfd);
		errno = saved;
		return -2;
	}
	carry_apply(cfd, &opts);
	if (unlikely(e->transport == OSF_TP_GATEWAY)) {
		struct osf_fdt_entry *ce = osf_fdt_lookup(cfd);
		osf_gateway_ring_accepted(e, cfd);
		if (ce)
			memcpy(cc.peer, ce->peer, sizeof(cc.peer));
	}
	if (sa && len) {
		memcpy(&fam, cc.peer, sizeof(fam));
		sl = fam == AF_INET6 ? sizeof(struct sockaddr_in6)
				     : sizeof(struct sockaddr_in);
		memcpy(sa, cc.peer, *len < sl ? *len : sl);
		*len = sl;
	}
	errno = saved;
	return cfd;
}

/* listener_timeout returns the poll timeout of a blocking accept: the
 * listener's SO_RCVTIMEO, or -1. */
static int listener_timeout(int fd, const struct osf_fdt_entry *e)
{
	struct timeval tv = {0, 0};
	socklen_t l = sizeof(tv);

	if (!(__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_OPTSET))
		return -1; /* no option was ever set: none */
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) < 0 ||
	    (!tv.tv_sec && !tv.tv_usec))
		return -1;
	return (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
}

/* PARKED_POLL bounds the parked connections (hello not there yet) a
 * blocking accept also waits on. */
#define PARKED_POLL 8

/* no_fd_left reports whether the program has no free fd number below its
 * limit: TCP's accept answers EMFILE then before it looks for a
 * connection (blocking or not). */
static int no_fd_left(int fd)
{
	int d = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (void *)0L);

	if (d < 0)
		return errno == EMFILE;
	REAL(close)(d);
	return 0;
}

/* listener_mode reads, once per accept, the listener's O_NONBLOCK (its
 * open file's, which another process may change) into *fl and the wait
 * it allows into *timeout: 0, or -1 when the fd is gone. */
static int listener_mode(int fd, const struct osf_fdt_entry *e, int *fl, int *timeout)
{
	int saved = errno;

	if (*fl >= 0)
		return 0;
	*fl = REAL(fcntl)(fd, F_GETFL, NULL);
	if (*fl < 0)
		return -1;
	*timeout = (*fl & O_NONBLOCK) ? 0 : listener_timeout(fd, e);
	errno = saved;
	return 0;
}

/* accept_tcp is the kernel's accept4 on the TCP listener itself, and the
 * tracking of the connection it returns. */
static int accept_tcp(int fd, struct osf_fdt_entry *e, struct sockaddr *sa,
		      socklen_t *len, int flags)
{
	int nfd = REAL(accept4)(fd, sa, len, flags);

	accepted(fd, nfd, flags, sa, len);
	if (unlikely(nfd >= 0 && e->transport == OSF_TP_GATEWAY))
		osf_gateway_accepted(e, nfd, sa, len);
	return nfd;
}

static int accept_offload(int fd, struct osf_fdt_entry *e, struct sockaddr *sa,
			  socklen_t *len, int flags)
{
	static unsigned turn;
	/* The listener's mode is read only when the first look found
	 * nothing ready (a connection ready at once is accepted alike on
	 * a blocking listener and a non-blocking one). */
	int fl = -1, timeout = 0, wait_ms = -1; /* for late hellos, this call */
	/* 0: nothing looked at yet; 1: nothing was ready at the first look;
	 * 2: and a free fd number was found before the first sleep. */
	int looked = 0;

	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
		return REAL(accept4)(fd, sa, len, flags); /* EINVAL */
	for (;;) {
		struct pollfd p[2 + PARKED_POLL] = {{fd, POLLIN, 0}, {e->aux_fd, POLLIN, 0}};
		int n, first, nfd, np, i, ready;
		np = osf_setup_parked_fds(e->aux_fd, p + 2, PARKED_POLL);
		osf_intr_begin();
		/* Spin first, as a poll on the listener does: a churn of
		 * short connections then finds the next one without a
		 * sleep and a wake-up of the server's CPU. */
		n = looked ? osf_spin_poll(p, 2 + (unsigned long)np, timeout) : 0;
		if (n == 0) {
			/* About to sleep: TCP's accept answers EMFILE rather
			 * than wait when no fd number is free. A connection
			 * the spin found needs no such look: its accept4
			 * answers EMFILE itself, and leaves it queued. */
			if (looked == 1 && timeout != 0) {
				if (no_fd_left(fd))
					return OSF_FAIL(EMFILE);
				looked = 2;
			}
			if (looked && timeout != 0)
				osf_conn_unmap_due(0); /* about to sleep (conn.c) */
			n = REAL(poll)(p, (nfds_t)(2 + np), looked ? timeout : 0);
		}
		if (n <= 0 && !looked && listener_mode(fd, e, &fl, &timeout) < 0)
			return -1;
		if (n == 0 && !looked) {
			looked = 1;
			/* Non-blocking, nothing ready: the kernel's accept on
			 * the listener answers as TCP's (EMFILE when no fd
			 * number is free, before it looks; else EAGAIN, or a
			 * connection that came meanwhile), in one call where
			 * a look for a free number (a dup and its close) took
			 * two. Go's accept loop ends each wake-up so. */
			if (timeout == 0)
				return accept_tcp(fd, e, sa, len, flags);
			continue;
		}
		if (n < 0) {
			/* As accept: restarted after SA_RESTART handlers,
			 * unless SO_RCVTIMEO is set. */
			if (errno == EINTR && timeout < 0 && osf_intr_restart())
				continue;
			return -1;
		}
		if (n == 0)
			return OSF_FAIL(EAGAIN);
		if (p[0].revents & POLLNVAL)
			return OSF_FAIL(EBADF);
		ready = (p[1].revents & POLLIN) != 0;
		for (i = 0; i < np; i++)
			ready |= p[2 + i].revents != 0;
		first = __atomic_fetch_add(&turn, 1, __ATOMIC_RELAXED) & 1;
		if (p[0].revents & (POLLHUP | POLLERR)) /* shut down: EINVAL */
			ready = 0;
		if (ready && (first || !(p[0].revents & POLLIN))) {
			nfd = accept_companion(fd, e, sa, len, flags, &wait_ms);
			if (nfd != -2)
				return nfd;
			continue;
		}
		if (p[0].revents) {
			nfd = accept_tcp(fd, e, sa, len, flags);
			if (nfd >= 0)
				return nfd;
			if (errno != EAGAIN || listener_mode(fd, e, &fl, &timeout) < 0 ||
			    (fl & O_NONBLOCK))
				return -1;
		}
	}
}

OSF_EXPORT int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int nfd;

	if (likely(!e || !osf_kind_is_accepting(e->kind)))
		return REAL(accept4)(fd, sa, len, flags);
	if (e->kind == OSF_FD_LISTEN)
		return accept_offload(fd, e, sa, len, flags);
	nfd = REAL(accept4)(fd, sa, len, flags);
	accepted(fd, nfd, flags, sa, len);
	if (unlikely(e->transport == OSF_TP_GATEWAY))
		osf_gateway_accepted(e, nfd, sa, len);
	return nfd;
}

OSF_EXPORT int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int nfd;

	if (likely(!e || !osf_kind_is_accepting(e->kind)))
		return REAL(accept)(fd, sa, len);
	if (e->kind == OSF_FD_LISTEN)
		return accept_offload(fd, e, sa, len, 0);
	nfd = REAL(accept)(fd, sa, len);
	accepted(fd, nfd, 0, sa, len);
	if (unlikely(e->transport == OSF_TP_GATEWAY))
		osf_gateway_accepted(e, nfd, sa, len);
	return nfd;
}

/* ---- per-connection calls --------------------------------------------------- */

/* served_on reports c's local address and port (split16) when it is an
 * offloaded connection accepted in this process. */
static int served_on(const struct osf_fdt_entry *c, uint8_t a[16], uint16_t *port)
{
	return osf_kind_is_conn(c->kind) && c->role == OSF_ROLE_SERVER &&
	       split16(c->local, sizeof(c->local), a, port);
}

/* accepted_hold reports whether this process has offloaded connections
 * accepted on port (they stand for TCP connections that would hold it). */
static int accepted_hold(uint16_t port)
{
	struct osf_fdt_entry *c;
	uint8_t a[16];
	uint16_t p;
	int fd;

	OSF_FDT_FOREACH(fd, c)
		if (served_on(c, a, &p) && p == port)
			return 1;
	return 0;
}

/* hold_listener_port: a listener was shut down (SHUT_RD). The kernel then
 * lets go of its port unless it was bound to a chosen one, but the TCP
 * connections accepted from it still hold the port: when offloaded ones
 * stand for them here, the listener's socket takes its address (local)
 * back, so that a bind() there still fails with EADDRINUSE (until the
 * listener is closed). */
static void hold_listener_port(int fd, const uint8_t local[28])
{
	uint8_t a[16];
	int32_t fam;
	uint16_t port;
	int saved = errno;

	if (!sa_split((const struct sockaddr *)local, 28, &fam, a, &port) ||
	    !accepted_hold(port))
		return;
	(void)REAL(bind)(fd, (const struct sockaddr *)local,
			 fam == AF_INET6 ? sizeof(struct sockaddr_in6)
					 : sizeof(struct sockaddr_in)); /* EINVAL: still bound */
	errno = saved;
}

/* A closed listener's port. The kernel's connections accepted from a
 * listener hold its port after it is closed (a bind() there fails with
 * EADDRINUSE, or succeeds when both set SO_REUSEADDR, as the kernel
 * decides) until the last of them is gone; each holds the address it was
 * accepted on, not a wildcard listener's whole port. Offloaded ones stand
 * for them: once the listener's socket is closed, a fresh socket with its
 * SO_REUSEADDR and SO_REUSEPORT binds each local address they use (at most
 * OSF_KEPT_ADDRS), as the hold of one connection there (osf_conn_keep_port),
 * passed on at its close to another on that address (osf_port_pass_on).
 * The listener's own socket is not kept: another process may still listen
 * on it (one forked, or handed the socket). */
#define OSF_KEPT_ADDRS 8

void osf_listener_port_read(int fd, const struct osf_fdt_entry *e, int alone,
			    struct osf_listener_port *lp)
{
	uint8_t a[16];
	uint16_t port = 0;
	int saved = errno;

	lp->keep = alone && !(e->flags & OSF_FDF_SHARED) &&
		   port_read(fd, &lp->bp) &&
		   split16(&lp->bp.ss, lp->bp.len, a, &port) && accepted_hold(port);
	errno = saved;
}

void osf_listener_port_keep(const struct osf_listener_port *lp)
{
	uint8_t held[OSF_KEPT_ADDRS][16], a[16];
	struct osf_fdt_entry *c;
	uint16_t port = 0, p;
	int n = 0, fd, i, saved = errno;

	if (!lp->keep || !split16(&lp->bp.ss, lp->bp.len, a, &port))
		return;
	OSF_FDT_FOREACH(fd, c) {
		struct osf_bound_port bp = lp->bp;
		int pfd, h;
		if (!served_on(c, a, &p) || p != port || osf_conn_port_held(c))
			continue;
		for (i = 0; i < n && memcmp(held[i], a, 16) != 0; i++)
			;
		if (i < n)
			continue;
		bp_set_addr(&bp, c->local);
		if ((pfd = port_hold(&bp)) < 0 || (h = osf_fdt_hide(pfd, fd)) < 0) {
			if (pfd >= 0)
				REAL(close)(pfd);
			continue; /* taken meanwhile, or no fd: not held */
		}
		osf_conn_keep_port(c, h);
		memcpy(held[n++], a, 16);
		if (n == OSF_KEPT_ADDRS)
			break;
	}
	errno = saved;
}

void osf_port_pass_on(int pfd, const struct osf_conn *self)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct osf_fdt_entry *c;
	uint8_t want[16], a[16];
	uint16_t port = 0, p;
	int fd, saved = errno;

	if (REAL(getsockname)(pfd, (struct sockaddr *)&ss, &len) == 0 &&
	    split16(&ss, len, want, &port)) {
		OSF_FDT_FOREACH(fd, c) {
			if (!served_on(c, a, &p) || p != port || memcmp(a, want, 16) ||
			    (uintptr_t)c->priv == (uintptr_t)self || osf_conn_port_held(c))
				continue;
			osf_conn_keep_port(c, pfd);
			errno = saved;
			return;
		}
	}
	osf_fdt_close_hidden(pfd);
	errno = saved;
}

/* listener_shutdown: shutdown(SHUT_RD or SHUT_RDWR) of a TCP listener
 * stops it (inet_shutdown: it disconnects, state CLOSE) and resets the
 * connections in its queue; osf does the same to the companion's
 * (osf_fd_unlisten: the fd is an undecided TCP socket again). */
static int listener_shutdown(int fd, struct osf_fdt_entry *e, int how)
{
	uint8_t local[28];
	int r;

	memcpy(local, e->local, sizeof(local));
	r = REAL(shutdown)(fd, how);
	if (r == 0 && (how == SHUT_RD || how == SHUT_RDWR)) {
		osf_fd_unlisten(fd);
		hold_listener_port(fd, local);
	}
	return r;
}

OSF_EXPORT int shutdown(int fd, int how)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || !osf_kind_is_conn(e->kind))) {
		if (unlikely(e && e->kind == OSF_FD_LISTEN))
			return listener_shutdown(fd, e, how);
		return REAL(shutdown)(fd, how);
	}
	return osf_conn_shutdown(fd, e, how);
}

OSF_EXPORT int getsockopt(int fd, int level, int name, void *val,
			  socklen_t *len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || !osf_kind_is_conn(e->kind))) {
		if (unlikely(e && level == SOL_SOCKET && name == SO_ERROR &&
			     osf_gw_pending(e)))
			return osf_gateway_sockerr(fd, e, val, len);
		return REAL(getsockopt)(fd, level, name, val, len);
	}
	return osf_conn_getsockopt(fd, e, level, name, val, len);
}

OSF_EXPORT int setsockopt(int fd, int level, int name, const void *val,
			  socklen_t len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e))
		return REAL(setsockopt)(fd, level, name, val, len);
	if (!osf_kind_is_conn(e->kind)) {
		if (carried_option(level, name)) {
			__atomic_or_fetch(&e->opts_set, carried_bit(level, name),
					  __ATOMIC_RELAXED);
			__atomic_or_fetch(&e->flags, OSF_FDF_OPTSET, __ATOMIC_RELAXED);
		}
		else if (level == SOL_SOCKET && (name == SO_REUSEADDR || name == SO_REUSEPORT))
			__atomic_or_fetch(&e->flags, OSF_FDF_REUSESET, __ATOMIC_RELAXED);
		if (level == IPPROTO_TCP || level == IPPROTO_IP ||
		    level == IPPROTO_IPV6) /* for carry_read */
			__atomic_or_fetch(&e->flags, OSF_FDF_KOPTS,
					  __ATOMIC_RELAXED);
		return REAL(setsockopt)(fd, level, name, val, len);
	}
	return osf_conn_setsockopt(fd, e, level, name, val, len);
}

OSF_EXPORT int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || !osf_kind_is_conn(e->kind))) {
		if (unlikely(e && e->transport == OSF_TP_GATEWAY &&
			     e->kind == OSF_FD_KERNEL && e->role == OSF_ROLE_SERVER))
			return osf_gateway_getname(fd, e, 0, sa, len);
		return REAL(getsockname)(fd, sa, len);
	}
	return osf_conn_getname(fd, e, 0, sa, len);
}

OSF_EXPORT int getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || !osf_kind_is_conn(e->kind))) {
		if (unlikely(e && e->transport == OSF_TP_GATEWAY &&
			     e->kind == OSF_FD_KERNEL))
			return osf_gateway_getname(fd, e, 1, sa, len);
		return REAL(getpeername)(fd, sa, len);
	}
	return osf_conn_getname(fd, e, 1, sa, len);
}
