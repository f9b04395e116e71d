//go:build osf_make

/* sockets.c: socket creation and connection set-up.
 *
 * socket records AF_INET/AF_INET6 stream sockets; listen is
 * sock_listen.c's. connect asks
 * the core to open an offloaded connection; when it can, the wake socket
 * it returns replaces the application's TCP socket under the same fd
 * number (dup3), else the connect goes to the kernel. accept on an
 * offloaded listener takes whichever of the two listeners is ready
 * (sock_accept.c); options set before connect are carried (sock_carry.c);
 * closed listeners' and connections' ports are held (sock_ports.c).
 */
#include "conn.h"
#include "gateway.h"
#include "kfd.h"
#include "pool.h"
#include "setup.h"
#include "sockets_priv.h"
#include "spin.h"
#include "../sdp/names.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int sock_on(void)
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
	if (type & SOCK_NONBLOCK)
		e.flags |= OSF_FDF_NBSOCK;
	(void)osf_fdt_set(fd, &e);
	errno = saved;
}

/* sock_core_reason is the reason recorded when the core could not be
 * asked: no room for it under RLIMIT_AS (ENOMEM), else it is unavailable. */
int sock_core_reason(int rc)
{
	return rc == ENOMEM ? OSF_R_RESOURCE : OSF_R_DISABLED;
}

/* sock_record_kernel notes that fd is on kernel TCP, in a role, and why; peer
 * is the address it connects to (NULL: ask the kernel). */
void sock_record_kernel(int fd, int role, int reason, int rule,
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

/* sock_kernel_connected records the local address of a kernel TCP client
 * once connect has bound it. */
void sock_kernel_connected(int fd)
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
		sock_kernel_connected(fd);
	return r;
}

/* sock_sa_split takes family, address and port out of a sockaddr; 0 when it is
 * not a complete AF_INET/AF_INET6 address. */
int sock_sa_split(const struct sockaddr *sa, socklen_t len, int32_t *family,
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

	if (fd >= 0 && is_inet_stream(domain, type, protocol) && sock_on())
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

/* ---- connect ------------------------------------------------------------ */

/* struct osf_bound_port (osf.h): the port the application bound its
 * socket to before connect, taken over by a socket of osf's once the
 * application's is gone (port_hold), with the same SO_REUSEADDR and
 * SO_REUSEPORT. */

static const int reuse_opts[2] = {SO_REUSEADDR, SO_REUSEPORT};

/* sock_port_read notes fd's bound port in bp; 0 when it has none. */
int sock_port_read(int fd, struct osf_bound_port *bp)
{
	int32_t fam;
	uint8_t a[16];
	uint16_t port = 0;
	int i;

	bp->len = sizeof(bp->ss);
	if (REAL(getsockname)(fd, (struct sockaddr *)&bp->ss, &bp->len) < 0 ||
	    !sock_sa_split((struct sockaddr *)&bp->ss, bp->len, &fam, a, &port) || port == 0)
		return 0;
	for (i = 0; i < 2; i++) {
		socklen_t l = sizeof(int);
		bp->reuse[i] = 0;
		(void)REAL(getsockopt)(fd, SOL_SOCKET, reuse_opts[i], &bp->reuse[i], &l);
	}
	return 1;
}

/* sock_port_hold binds a fresh TCP socket to the port in bp (which the
 * application's socket held until it was replaced a moment ago): -1 when
 * it is gone meanwhile. */
int sock_port_hold(const struct osf_bound_port *bp)
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

/* sock_split16 splits the sockaddr at b (len bytes; the fd table and
 * connect's in.bound keep them in 28) into its address in IPv6 form (an
 * IPv4 one v4-mapped, so that a v4 socket's and a dual-stack one's
 * compare) and its port; 0 when it is no IPv4 or IPv6 address. */
int sock_split16(const void *b, size_t len, uint8_t a16[16], uint16_t *port)
{
	struct sockaddr_storage ss;
	int32_t fam;
	uint8_t a[16];

	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, b, len < sizeof(ss) ? len : sizeof(ss));
	if (!sock_sa_split((struct sockaddr *)&ss, sizeof(struct sockaddr_in6), &fam, a, port))
		return 0;
	addr16(fam, a, a16);
	return 1;
}

/* wildcard_bound reports whether b is a wildcard address with a port. */
static int wildcard_bound(const uint8_t b[28])
{
	uint8_t a[16];
	uint16_t port = 0;

	return sock_split16(b, 28, a, &port) && port && osf_name_unspec(a);
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
	int bound4 = sock_split16(in->bound, sizeof(in->bound), b16, &bport) && osf_name_is4(b16);

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

/* sock_bp_set_addr makes the connection address local (28 bytes, the fd
 * table's) bp's address, keeping its options. */
void sock_bp_set_addr(struct osf_bound_port *bp, const uint8_t local[28])
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
		sock_bp_set_addr(bp, local);
}

/* narrow_hold does the same to a kept holder h (the application's own
 * socket): a fresh socket with its options takes the connection's
 * address and port (SO_REUSEADDR on both for the moment they overlap,
 * so the port is never free), then replaces h under its number. */
static void narrow_hold(int h, const uint8_t local[28])
{
	struct osf_bound_port bp;
	int one = 1, n, saved = errno;

	if (!sock_port_read(h, &bp) || !wildcard_bound((const uint8_t *)&bp.ss))
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

	return sock_split16(b, 28, a, &port) && port != 0;
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

	if (!sock_split16(in->bound, sizeof(in->bound), b, &bport) || bport == 0)
		return 0;
	addr16(in->family, in->addr, d);
	OSF_FDT_FOREACH(fd, c) {
		if (!osf_kind_is_conn(c->kind) || !sock_split16(c->local, 28, x, &p) || p != bport ||
		    (!osf_name_unspec(b) && memcmp(b, x, 16)))
			continue;
		if (sock_split16(c->peer, 28, x, &p) && p == dport && !memcmp(x, d, 16))
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
	if (!sock_sa_split(sa, len, &in.family, in.addr, &in.port) ||
	    in.family != want || in.port == 0)
		return REAL(connect)(fd, sa, len); /* the kernel's errno */
	osf_sandbox_check();
	if (__atomic_load_n(&osf.sandboxed, __ATOMIC_ACQUIRE)) {
		sock_record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_SANDBOX, -1, 0, sa, len);
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
		sock_record_kernel(fd, OSF_ROLE_CLIENT, sock_core_reason(rc), -1, rc, sa, len);
		return kernel_connect(fd, sa, len);
	}
	if (cc.status == OSF_CORE_GATEWAY && cc.wake_fd < 0)
		return osf_gateway_connect(fd, sa, len, &cc);
	if (cc.status == OSF_CORE_KERNEL) {
		sock_record_kernel(fd, OSF_ROLE_CLIENT, cc.reason, cc.rule,
				   cc.reason_errno, sa, len);
		return kernel_connect(fd, sa, len);
	}
	if (cc.status == OSF_CORE_REFUSE) {
		/* The reason says strict mode; cause says what it refused. */
		sock_record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_STRICT, cc.rule,
				   cc.reason_errno, sa, len);
		if ((e = osf_fdt_lookup(fd)) != NULL)
			e->cause = (uint8_t)cc.reason;
		return OSF_FAIL(EPROTONOSUPPORT);
	}
	/* The socket's file status flags as socket() set them, unless
	 * something may have changed them since (OSF_FDF_FLSET): no F_GETFL. */
	fl = (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_FLSET) ||
		     __atomic_load_n(&osf.fl_shared, __ATOMIC_RELAXED)
		     ? REAL(fcntl)(fd, F_GETFL, NULL)
		     : O_RDWR | ((e->flags & OSF_FDF_NBSOCK) ? O_NONBLOCK : 0);
	/* The fd's own flag, which only this process sets, through hooks
	 * that keep the entry's copy (socket, fcntl, ioctl, dup3,
	 * close_range): no F_GETFD. */
	fdfl = (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_CLOEXEC) ? FD_CLOEXEC : 0;
	sock_carry_read(fd, &opts);
	if (by_c && cc.status == OSF_CORE_OFFLOADED && cc.wake_fd < 0) /* OSF_SHM_KFD */
		return sock_connect_kfd(fd, sa, len, &cc, &opts, fl, fdfl, window);
	/* A socket bound to a port before connect keeps holding it: osf keeps
	 * it alive behind the wake socket (a hidden dup), unless it has dups
	 * or epoll registrations (OSF_FDF_NOKEEP); then a socket of osf's
	 * rebinds the port once the application's is gone (port_hold). */
	if (pfd < 0 && fl >= 0 && fdfl >= 0 &&
	    (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_BOUND) &&
	    !(__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_NOKEEP) &&
	    bound_port_of(in.bound))
		kept = osf_fdt_dup_high(fd, 1);
	bound = pfd < 0 && kept < 0 && sock_port_read(fd, &bp);
	if (fl < 0 || fdfl < 0 ||
	    osf_conn_install(fd, &cc, OSF_ROLE_CLIENT, fdfl & FD_CLOEXEC,
			     (fl & O_NONBLOCK) != 0,
			     OSF_INSTALL_DUP | (by_c ? OSF_INSTALL_FL_OWN : 0) |
				     (placed ? OSF_INSTALL_PLACED : 0)) < 0) {
		if (window)
			osf_fdt_high_end();
		osf_setup_hello_abandon((void *)(uintptr_t)cc.seg_addr);
		sock_abandon(&cc);
		if (pfd >= 0)
			REAL(close)(pfd);
		if (kept >= 0)
			REAL(close)(kept);
		if (cc.status == OSF_CORE_GATEWAY) /* no route but the gateway */
			return OSF_FAIL(ENOBUFS);
		sock_record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_RESOURCE, cc.rule, errno,
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
		port_give(fd, sock_port_hold(&bp), 0);
	if (by_c)
		osf_conn_hello_attach(fd, osf_fdt_lookup(fd));
	if (window)
		osf_fdt_high_end();
	sock_carry_apply(fd, &opts);
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
	if (e->kind != OSF_FD_INET || !sock_on() || !sa ||
	    (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
		return REAL(connect)(fd, sa, len);
	return connect_offload(fd, e, sa, len);
}

static int listener_shutdown(int fd, struct osf_fdt_entry *e, int how)
{
	uint8_t local[28];
	int r;

	memcpy(local, e->local, sizeof(local));
	r = REAL(shutdown)(fd, how);
	if (r == 0 && (how == SHUT_RD || how == SHUT_RDWR)) {
		osf_fd_unlisten(fd);
		sock_hold_listener_port(fd, local);
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
	int r, saved;

	if (likely(!e))
		return REAL(setsockopt)(fd, level, name, val, len);
	if (!osf_kind_is_conn(e->kind)) {
		if (sock_carried_option(level, name)) {
			__atomic_or_fetch(&e->opts_set, sock_carried_bit(level, name),
					  __ATOMIC_RELAXED);
			__atomic_or_fetch(&e->flags, OSF_FDF_OPTSET, __ATOMIC_RELAXED);
		}
		else if (level == SOL_SOCKET && (name == SO_REUSEADDR || name == SO_REUSEPORT))
			__atomic_or_fetch(&e->flags, OSF_FDF_REUSESET, __ATOMIC_RELAXED);
		if (level == IPPROTO_TCP || level == IPPROTO_IP ||
		    level == IPPROTO_IPV6) /* for sock_carry_read */
			__atomic_or_fetch(&e->flags, OSF_FDF_KOPTS,
					  __ATOMIC_RELAXED);
		r = REAL(setsockopt)(fd, level, name, val, len);
		if (sock_carried_option(level, name)) { /* after it: a listener's */
			saved = errno;
			sock_carry_changed();
			errno = saved;
		}
		if (r == 0 && level == IPPROTO_TCP && name == TCP_DEFER_ACCEPT &&
		    e->kind == OSF_FD_LISTEN && (e->flags & OSF_FDF_KFD) && e->aux_fd >= 0)
			osf_setup_kfd_renote(e->aux_fd); /* its links' notes say otherwise */
		return r;
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
