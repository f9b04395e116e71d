//go:build osf_make

/* sock_listen.c: listen on an AF_INET/AF_INET6 stream socket (sockets.c
 * records them). When the route says so the listener gets a companion
 * listener (a hidden fd) that offloaded clients connect to (preload/setup.c
 * osf_setup_listen, or the core's); under OSF_SHM_KFD a SO_REUSEPORT
 * group's members share one companion and hello store (setup_group.c). */
#include "conn.h"
#include "gateway.h"
#include "kfd.h"
#include "setup.h"
#include "sockets_priv.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The kernel listener appears to clients before an offload listener
 * would be ready for them: a client that meets it in between connects
 * over kernel TCP (osfstat: no osf listener at the peer). So when the
 * socket is bound to a port no kernel listener holds yet (the census:
 * nobody a client could trust a companion for), the companion comes
 * first and the kernel listen last (early); the SYN filter and
 * OSF_SHM_KFD's TCP_SAVE_SYN are then in place before the first SYN. A
 * port bound by listen itself (0) or already listened on keeps the
 * kernel listen first (the companion's name may be another's, and the
 * port must be known). listen_kernel makes the kernel listen of an early
 * listener: -1 when it failed (errno set), 1 when it took another port
 * than named (a listener's shutdown let go of one the kernel chose: the
 * caller sets up again), else 0. */
static int listen_kernel(int fd, int backlog, int *early, uint16_t named)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	uint8_t a[16];
	uint16_t port;
	int32_t fam;

	if (!*early)
		return 0;
	*early = 0;
	if (REAL(listen)(fd, backlog) < 0)
		return -1;
	if (REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    !sock_sa_split((struct sockaddr *)&ss, sl, &fam, a, &port))
		return 0;
	return port != named;
}

#ifndef SO_BINDTOIFINDEX
#define SO_BINDTOIFINDEX 62
#endif

/* reuseport_member finds, for fd about to listen with SO_REUSEPORT under
 * OSF_SHM_KFD on in's address (v6only), a member of its group that this
 * process holds: its entry, or NULL. fd then shares that member's
 * companion and store, as a dup of it would (preload/setup_group.c): a
 * group has one of each. */
static const struct osf_fdt_entry *reuseport_member(int fd, const struct osf_core_listen_in *in,
						 int v6only)
{
	struct osf_fdt_entry *c;
	struct stat st;
	socklen_t l = sizeof(int);
	int32_t fam;
	uint8_t a[16];
	uint16_t port;
	int cfd, dev = 0, cdev;

	if (fstat(fd, &st) < 0 ||
	    REAL(getsockopt)(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &dev, &l) < 0)
		return NULL;
	OSF_FDT_FOREACH(cfd, c) {
		if (c->kind != OSF_FD_LISTEN ||
		    (c->flags & (OSF_FDF_KFD | OSF_FDF_GROUP | OSF_FDF_KFDSHUT | OSF_FDF_EXECSHARED)) !=
			    (OSF_FDF_KFD | OSF_FDF_GROUP) ||
		    c->ino == (uint64_t)st.st_ino || !(c->flags & OSF_FDF_V6ONLY) != !v6only ||
		    !sock_sa_split((struct sockaddr *)c->local, sizeof(c->local), &fam, a, &port) ||
		    fam != in->family || port != in->port ||
		    memcmp(a, in->addr, fam == AF_INET ? 4 : 16) != 0)
			continue;
		cdev = 0;
		l = sizeof(int);
		if (REAL(getsockopt)(cfd, SOL_SOCKET, SO_BINDTOIFINDEX, &cdev, &l) == 0 && cdev == dev)
			return c; /* a socket bound to another device is in another group */
	}
	return NULL;
}

/* listener_set records fd (entry e, bound to ss) as an offloaded listener
 * whose companion is aux (and gateway control connection ctl, to peer). */
static void listener_set(int fd, const struct osf_fdt_entry *e, const struct sockaddr_storage *ss,
			 socklen_t sl, int aux, int ctl, const uint8_t *peer, int rule, uint32_t flags)
{
	struct osf_fdt_entry ent = *e;
	struct stat st;

	ent.kind = OSF_FD_LISTEN;
	ent.transport = ctl >= 0 ? OSF_TP_GATEWAY : OSF_TP_SHM;
	ent.role = OSF_ROLE_LISTENER;
	ent.reason = OSF_R_NONE;
	ent.rule = rule;
	ent.aux_fd = aux;
	ent.aux2_fd = ctl;
	ent.ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
	ent.flags = (ent.flags & ~OSF_FDF_GROUP) | flags; /* of a listen before a shutdown */
	memset(ent.local, 0, sizeof(ent.local));
	memcpy(ent.local, ss, sl < sizeof(ent.local) ? sl : sizeof(ent.local));
	if (peer)
		memcpy(ent.peer, peer, sizeof(ent.peer));
	(void)osf_fdt_set(fd, &ent);
	osf_listen_async(fd, aux, 1);
	osf_mux_offloaded(fd);
}

/* listen_offload makes fd's kernel listen (returned) and, when the route
 * says so, its offload listener; the companion comes first (early) only
 * when may_early. */
static int listen_offload(int fd, struct osf_fdt_entry *e, int backlog, int may_early)
{
	struct osf_core_listen_in in;
	struct osf_core_listen_out out;
	const struct osf_fdt_entry *m;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int v6only = 0, reuseport = 0, rc, hfd, ctl = -1, early, kfd = 0, group;
	int st[3] = {-1, -1, -1};
	socklen_t vl = sizeof(v6only), rl = sizeof(reuseport);
	uint32_t flags = 0;

	osf_sandbox_check();
	if (__atomic_load_n(&osf.sandboxed, __ATOMIC_ACQUIRE)) {
		rc = REAL(listen)(fd, backlog);
		if (rc == 0)
			sock_record_kernel(fd, OSF_ROLE_LISTENER, OSF_R_SANDBOX, -1, 0, NULL, 0);
		return rc;
	}
	memset(&in, 0, sizeof(in));
	if (REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    !sock_sa_split((struct sockaddr *)&ss, sl, &in.family, in.addr, &in.port))
		return REAL(listen)(fd, backlog);
	REAL(getsockopt)(fd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl);
	/* OSF_SHM_KFD: a SO_REUSEPORT group's member listens after its
	 * companion and store are there, the group's already or not: a SYN
	 * the kernel gives it finds its hello then. */
	group = osf.shm_kfd && reuseport;
	early = may_early && in.port != 0 &&
		(group || !osf_setup_port_listened((uint16_t)in.port));
	if (!early) {
		if (REAL(listen)(fd, backlog) < 0)
			return -1;
		if (in.port == 0) { /* bound by listen */
			sl = sizeof(ss);
			if (REAL(getsockname)(fd, (struct sockaddr *)&ss, &sl) < 0 ||
			    !sock_sa_split((struct sockaddr *)&ss, sl, &in.family, in.addr, &in.port))
				return 0;
		}
	}
	if (in.family == AF_INET6)
		REAL(getsockopt)(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vl);
	in.backlog = backlog;
	in.v6only = v6only;
	if (v6only)
		flags |= OSF_FDF_V6ONLY;
	memset(&out, 0, sizeof(out));
	if (group && (m = reuseport_member(fd, &in, v6only)) != NULL) {
		int aux = m->aux_fd, rule = m->rule;
		osf_setup_syn_filter(fd);
		osf_kfd_listen(fd);
		if ((rc = listen_kernel(fd, backlog, &early, in.port)) != 0) {
			osf_setup_syn_unfilter(fd);
			return rc < 0 ? -1 : listen_offload(fd, e, backlog, 0);
		}
		listener_set(fd, e, &ss, sl, aux, -1, NULL, rule, flags | OSF_FDF_KFD | OSF_FDF_GROUP);
		return 0;
	}
	/* OSF_SHM_KFD: a listener the C set-up made (its SOCK_SEQPACKET
	 * companion keeps its clients' links). One the core made may take
	 * RDMA connections, which the core hands over on its SOCK_STREAM
	 * companion and no kernel accept would ever return: it stays the
	 * two-queue listener of the switch's absence (ARCHITECTURE.md,
	 * "The kernel TCP socket as the connection's fd"), and kernel TCP
	 * when SO_REUSEPORT (its clients' hellos and the kernel's spread
	 * would not meet). */
	if (osf_setup_listen(&in, reuseport, &out, group ? st : NULL, !early)) {
		rc = 0, kfd = osf.shm_kfd;
	} else if (group) {
		if (listen_kernel(fd, backlog, &early, in.port) < 0)
			return -1;
		sock_record_kernel(fd, OSF_ROLE_LISTENER, OSF_R_DISABLED, -1, 0, NULL, 0);
		return 0;
	} else if ((rc = listen_kernel(fd, backlog, &early, in.port)) != 0) { /* the core's: kernel first */
		return rc < 0 ? -1 : listen_offload(fd, e, backlog, 0);
	} else {
		rc = osf_core_listen(&in, &out);
	}
	/* Only osf_setup_listen's companion comes early; nothing else waits. */
	if ((rc != 0 || out.fd < 0) && listen_kernel(fd, backlog, &early, in.port) < 0)
		return -1;
	if (rc != 0) {
		sock_record_kernel(fd, OSF_ROLE_LISTENER, sock_core_reason(rc), -1, rc, NULL, 0);
		return 0;
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
			return 0;
		}
		out.fd = out.gw_companion;
	}
	if (out.fd < 0) {
		sock_record_kernel(fd, OSF_ROLE_LISTENER, out.reason, out.rule,
				   out.reason_errno, NULL, 0);
		return 0;
	}
	osf_setup_syn_filter(fd);
	if (kfd)
		osf_kfd_listen(fd);
	rc = listen_kernel(fd, backlog, &early, in.port);
	if (rc != 0) { /* no companion for the port named */
		int saved = errno;

		REAL(close)(out.fd);
		osf_setup_group_drop(st);
		osf_setup_syn_unfilter(fd);
		errno = saved;
		return rc < 0 ? -1 : listen_offload(fd, e, backlog, 0);
	}
	hfd = osf_fdt_hide(out.fd, fd);
	if (hfd < 0)
		hfd = out.fd;
	if (kfd)
		flags |= OSF_FDF_KFD;
	if (group && osf_setup_group_store(fd, hfd, st))
		flags |= OSF_FDF_GROUP;
	if (ctl >= 0)
		osf_gateway_token_set(hfd, out.gw_token);
	listener_set(fd, e, &ss, sl, hfd, ctl, ctl >= 0 ? out.gateway : NULL, out.rule, flags);
	return 0;
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
	if (e->kind == OSF_FD_INET && sock_on())
		return listen_offload(fd, e, backlog, 1);
	rc = REAL(listen)(fd, backlog);
	if (rc == 0 && e->kind == OSF_FD_LISTEN) /* again: a new backlog for both */
		(void)REAL(listen)(e->aux_fd, backlog);
	return rc;
}
