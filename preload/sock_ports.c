//go:build osf_make

/* sock_ports.c: ports the kernel would still hold: a closed listener's
 * address kept by the connections accepted from it, and a connection's
 * port hold passed on at its close (sockets.c).
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

/* ---- per-connection calls --------------------------------------------------- */

/* served_on reports c's local address and port (split16) when it is an
 * offloaded connection accepted in this process. */
static int served_on(const struct osf_fdt_entry *c, uint8_t a[16], uint16_t *port)
{
	return osf_kind_is_conn(c->kind) && c->role == OSF_ROLE_SERVER &&
	       sock_split16(c->local, sizeof(c->local), a, port);
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
void sock_hold_listener_port(int fd, const uint8_t local[28])
{
	uint8_t a[16];
	int32_t fam;
	uint16_t port;
	int saved = errno;

	if (!sock_sa_split((const struct sockaddr *)local, 28, &fam, a, &port) ||
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
		   sock_port_read(fd, &lp->bp) &&
		   sock_split16(&lp->bp.ss, lp->bp.len, a, &port) && accepted_hold(port);
	errno = saved;
}

void osf_listener_port_keep(const struct osf_listener_port *lp)
{
	uint8_t held[OSF_KEPT_ADDRS][16], a[16];
	struct osf_fdt_entry *c;
	uint16_t port = 0, p;
	int n = 0, fd, i, saved = errno;

	if (!lp->keep || !sock_split16(&lp->bp.ss, lp->bp.len, a, &port))
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
		sock_bp_set_addr(&bp, c->local);
		if ((pfd = sock_port_hold(&bp)) < 0 || (h = osf_fdt_hide(pfd, fd)) < 0) {
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
	    sock_split16(&ss, len, want, &port)) {
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
