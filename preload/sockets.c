//go:build osf_make

/* sockets.c: hooks for socket creation and connection set-up, and the
 * bookkeeping of which fds are AF_INET/AF_INET6 stream sockets. */
#include "conn.h"

#include <netinet/in.h>
#include <string.h>

static int osf_on(void)
{
	return __atomic_load_n(&osf.ready, __ATOMIC_ACQUIRE) && !osf.disabled;
}

static int is_inet_stream(int domain, int type, int protocol)
{
	return (domain == AF_INET || domain == AF_INET6) &&
	       (type & 0xf) == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
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

/* record_kernel notes that fd is on kernel TCP, in a role, and why. */
static void record_kernel(int fd, int role, int reason, int rule,
			  int reason_errno)
{
	struct osf_fdt_entry *e = osf_fdt_get(fd);

	if (!e)
		return;
	e->transport = OSF_TP_KERNEL;
	e->role = (uint8_t)role;
	e->reason = (uint8_t)reason;
	e->rule = rule;
	e->reason_errno = reason_errno;
	if (e->aux_fd == 0)
		e->aux_fd = -1;
	__atomic_store_n(&e->kind, OSF_FD_KERNEL, __ATOMIC_RELEASE);
	osf_fdt_touch();
}

/* route_query fills a route request from a socket address; 0 when the
 * address is not AF_INET/AF_INET6. */
static int route_query(struct osf_core_route_in *q, int role,
		       const struct sockaddr *sa, socklen_t len)
{
	memset(q, 0, sizeof(*q));
	q->role = role;
	if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;
		q->family = AF_INET;
		memcpy(q->addr, &in->sin_addr, 4);
		q->port = ntohs(in->sin_port);
		return 1;
	}
	if (sa && sa->sa_family == AF_INET6 &&
	    len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		q->family = AF_INET6;
		memcpy(q->addr, &in6->sin6_addr, 16);
		q->port = ntohs(in6->sin6_port);
		return 1;
	}
	return 0;
}

/* decide asks the core where fd should go and records the outcome; until
 * an offloaded transport takes the connection, it is kernel TCP. */
static void decide(int fd, int role, const struct sockaddr *sa,
		   socklen_t len)
{
	struct osf_core_route_in q;
	struct osf_core_route_out d;
	int saved = errno, rc, table_role;

	table_role = role == OSF_CORE_ROLE_SERVER ? OSF_ROLE_LISTENER
						  : OSF_ROLE_CLIENT;
	if (!route_query(&q, role, sa, len)) {
		record_kernel(fd, table_role, OSF_R_NOT_STREAM, -1, 0);
		errno = saved;
		return;
	}
	memset(&d, 0, sizeof(d));
	rc = osf_core_route(&q, &d);
	if (rc != 0)
		record_kernel(fd, table_role, OSF_R_DISABLED, -1, rc);
	else if (d.transport == OSF_TP_KERNEL)
		record_kernel(fd, table_role, d.reason, d.rule, 0);
	else /* no offloaded transport in this build answers yet */
		record_kernel(fd, table_role, OSF_R_NO_LISTENER, d.rule, 0);
	errno = saved;
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
	return REAL(bind)(fd, sa, len);
}

OSF_EXPORT int listen(int fd, int backlog)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int rc;

	if (likely(!e || e->kind != OSF_FD_INET))
		return REAL(listen)(fd, backlog);
	rc = REAL(listen)(fd, backlog);
	if (rc == 0 && osf_on() &&
	    REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) == 0)
		decide(fd, OSF_CORE_ROLE_SERVER, (struct sockaddr *)&ss, sl);
	return rc;
}

OSF_EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind != OSF_FD_INET))
		return REAL(connect)(fd, sa, len);
	if (osf_on() && sa && (sa->sa_family == AF_INET ||
			       sa->sa_family == AF_INET6))
		decide(fd, OSF_CORE_ROLE_CLIENT, sa, len);
	return REAL(connect)(fd, sa, len);
}

/* accepted records a connection accepted from a tracked listener. */
static void accepted(int lfd, int nfd, int flags)
{
	struct osf_fdt_entry *l = osf_fdt_lookup(lfd);

	if (nfd < 0 || !l || !osf_on())
		return;
	osf_track_inet(nfd, (l->flags & OSF_FDF_V6) ? AF_INET6 : AF_INET,
		       (flags & SOCK_CLOEXEC) ? SOCK_CLOEXEC : 0);
	record_kernel(nfd, OSF_ROLE_SERVER, OSF_R_PEER_KERNEL, -1, 0);
}

OSF_EXPORT int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int nfd;

	if (likely(!e || e->kind < OSF_FD_KERNEL))
		return REAL(accept4)(fd, sa, len, flags);
	nfd = REAL(accept4)(fd, sa, len, flags);
	accepted(fd, nfd, flags);
	return nfd;
}

OSF_EXPORT int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int nfd;

	if (likely(!e || e->kind < OSF_FD_KERNEL))
		return REAL(accept)(fd, sa, len);
	nfd = REAL(accept)(fd, sa, len);
	accepted(fd, nfd, 0);
	return nfd;
}

OSF_EXPORT int shutdown(int fd, int how)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind < OSF_FD_SHM))
		return REAL(shutdown)(fd, how);
	return osf_conn_shutdown(fd, e, how);
}

OSF_EXPORT int getsockopt(int fd, int level, int name, void *val,
			  socklen_t *len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind < OSF_FD_SHM))
		return REAL(getsockopt)(fd, level, name, val, len);
	return osf_conn_getsockopt(fd, e, level, name, val, len);
}

OSF_EXPORT int setsockopt(int fd, int level, int name, const void *val,
			  socklen_t len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind < OSF_FD_SHM))
		return REAL(setsockopt)(fd, level, name, val, len);
	return osf_conn_setsockopt(fd, e, level, name, val, len);
}

OSF_EXPORT int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind < OSF_FD_SHM))
		return REAL(getsockname)(fd, sa, len);
	return osf_conn_getname(fd, e, 0, sa, len);
}

OSF_EXPORT int getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind < OSF_FD_SHM))
		return REAL(getpeername)(fd, sa, len);
	return osf_conn_getname(fd, e, 1, sa, len);
}
