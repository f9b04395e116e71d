//go:build osf_make

/* sock_accept.c: accept and accept4 on an offloaded listener: whichever of
 * the kernel listener and its companion is ready, the hello taken and the
 * connection installed under the accepted fd (sockets.c for the rest).
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

	if (nfd < 0 || !l || !sock_on())
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
	sock_record_kernel(nfd, OSF_ROLE_SERVER, OSF_R_PEER_KERNEL, -1, 0,
			   pl ? (struct sockaddr *)&peer : NULL, pl);
	errno = saved;
}

/* peer_out writes peer address p (pl bytes) to the program's sa and len
 * as the kernel's accept does (osf_addr_out; sa NULL asks for nothing): 0,
 * or -1 with errno, and the caller drops the connection it took, as the
 * kernel's accept does. */
static int peer_out(struct sockaddr *sa, socklen_t *len, const void *p, socklen_t pl)
{
	return sa ? osf_addr_out(sa, len, p, pl) : 0;
}

/* drop closes connection nfd, just taken by an accept that then failed
 * (peer_out), as the kernel's accept drops it. */
static void drop(int nfd)
{
	int saved = errno;

	osf_fd_closed(nfd);
	REAL(close)(nfd);
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
	(void)sock_sa_split((struct sockaddr *)e->local, sizeof(e->local), &in.family,
			    in.addr, &in.port);
	memset(&cc, 0, sizeof(cc));
	cc.wake_fd = cc.seg_fd = cc.wake_tx_fd = -1;
	cfd = osf_setup_accept(lfd, e->aux_fd, &in, &cc, wait_ms, flags, &as_asked, &window);
	if (cfd < 0) {
		if (cfd == -2)
			errno = saved;
		return cfd;
	}
	sock_carry_read(lfd, &opts);
	rc = osf_conn_install(cfd, &cc, OSF_ROLE_SERVER, flags & SOCK_CLOEXEC,
			      (flags & SOCK_NONBLOCK) != 0,
			      as_asked ? OSF_INSTALL_AS_ASKED : OSF_INSTALL_FL_OWN);
	if (window)
		osf_fdt_high_end(); /* osf_setup_accept's */
	if (rc < 0) {
		cc.wake_fd = -1; /* that is cfd */
		sock_abandon(&cc);
		REAL(close)(cfd);
		errno = saved;
		return -2;
	}
	sock_carry_apply(cfd, &opts);
	if (unlikely(e->transport == OSF_TP_GATEWAY)) {
		struct osf_fdt_entry *ce = osf_fdt_lookup(cfd);
		osf_gateway_ring_accepted(e, cfd);
		if (ce)
			memcpy(cc.peer, ce->peer, sizeof(cc.peer));
	}
	memcpy(&fam, cc.peer, sizeof(fam));
	sl = fam == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	if (peer_out(sa, len, cc.peer, sl) < 0) {
		drop(cfd);
		return -1;
	}
	errno = saved;
	return cfd;
}

/* kfd_in fills in with listener e's address. */
static void kfd_in(const struct osf_fdt_entry *e, struct osf_core_accept_in *in)
{
	memset(in, 0, sizeof(*in));
	(void)sock_sa_split((struct sockaddr *)e->local, sizeof(e->local), &in->family, in->addr,
			    &in->port);
}

/* kfd_listener finds the OSF_SHM_KFD listener of companion aux_fd: its
 * fd, with in its address (osf_setup_kfd_links_ended), or -1. */
static int kfd_listener(int aux_fd, struct osf_core_accept_in *in)
{
	struct osf_fdt_entry *e;
	int fd;

	OSF_FDT_FOREACH(fd, e)
		if (e->kind == OSF_FD_LISTEN && (e->flags & OSF_FDF_KFD) && e->aux_fd == aux_fd) {
			kfd_in(e, in);
			return fd;
		}
	return -1;
}

/* selectmux's links (host.h): the server's links and their end
 * (setup.h osf_setup_kfd_links_copy). */
int osf_links_copy(int *fds, int max) { return osf_setup_kfd_links_copy(fds, max); }

void osf_links_ended(void) { osf_setup_kfd_links_ended(kfd_listener); }

/* kfd_shut keeps the hellos companion of OSF_SHM_KFD listener lfd queued
 * and shuts it, in every process (osf_setup_kfd_shut). */
static void kfd_shut(int lfd, const struct osf_fdt_entry *e)
{
	struct osf_core_accept_in in;

	kfd_in(e, &in);
	osf_setup_kfd_shut(lfd, e->aux_fd, &in);
}

void osf_kfd_shut_foreign(int any)
{
	struct osf_fdt_entry *e;
	int fd;

	OSF_FDT_FOREACH(fd, e) {
		if (e->kind != OSF_FD_LISTEN ||
		    (e->flags & (OSF_FDF_KFD | OSF_FDF_KFDSHUT)) != OSF_FDF_KFD ||
		    (!any && (e->flags & OSF_FDF_CLOEXEC)))
			continue;
		__atomic_or_fetch(&e->flags, OSF_FDF_SHARED | OSF_FDF_EXECSHARED | OSF_FDF_KFDSHUT,
				  __ATOMIC_RELAXED);
		kfd_shut(fd, e);
	}
}

/* kfd_reset ends accepted connection nfd with a reset (SO_LINGER {1, 0}):
 * its SYN was marked, so its client writes into a slot's ring, and this
 * process has no hello for it (another process of the listener's read it,
 * it was dropped, or its install failed). Its client's next read or write
 * fails as on a TCP connection its peer reset (ECONNRESET; its waits end:
 * osf_side_wait_room_or), never a stall on bytes nobody reads. */
static void kfd_reset(int nfd)
{
	struct linger lg = {1, 0};

	(void)REAL(setsockopt)(nfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	REAL(close)(nfd);
}

/* kfd_local_known reports whether listener e's address (e->local) is a
 * connection's it accepts: one not a wildcard. */
static int kfd_local_known(const struct osf_fdt_entry *e)
{
	struct sockaddr_in a4;
	struct sockaddr_in6 a6;
	sa_family_t fam;

	memcpy(&fam, e->local, sizeof(fam));
	if (fam == AF_INET) {
		memcpy(&a4, e->local, sizeof(a4));
		return a4.sin_addr.s_addr != 0 && a4.sin_port != 0;
	}
	if (fam != AF_INET6)
		return 0;
	memcpy(&a6, e->local, sizeof(a6));
	return !IN6_IS_ADDR_UNSPECIFIED(&a6.sin6_addr) && a6.sin6_port != 0;
}

/* accept_kfd makes kernel connection nfd, just accepted from listener lfd
 * (OSF_SHM_KFD; peer: its peer's address, pl bytes, as accept4 gave
 * it), an offloaded one when its client's hello is found: 1, or 0 (errno
 * kept) for a kernel TCP connection (its client has not the switch, or
 * its SYN could not be read back), or -1 when nfd was reset
 * (kfd_reset). */
static int accept_kfd(int lfd, struct osf_fdt_entry *e, int nfd, int flags,
		      const struct sockaddr_storage *peer, socklen_t pl)
{
	struct osf_core_accept_in in;
	struct osf_core_conn cc;
	struct sockaddr_storage local;
	socklen_t ll = sizeof(local);
	uint8_t p28[28], l28[28];
	struct carried opts;
	int saved = errno, marked = -2, r;

	memset(p28, 0, sizeof(p28));
	memcpy(p28, peer, pl < sizeof(p28) ? pl : sizeof(p28));
	/* The connection's own address is the listener's, unless that is
	 * a wildcard. */
	if (kfd_local_known(e)) {
		memcpy(l28, e->local, sizeof(l28));
	} else {
		if (REAL(getsockname)(nfd, (struct sockaddr *)&local, &ll) < 0)
			return 0;
		memset(l28, 0, sizeof(l28));
		memcpy(l28, &local, ll < sizeof(l28) ? ll : sizeof(l28));
	}
	kfd_in(e, &in);
	memset(&cc, 0, sizeof(cc));
	cc.wake_fd = cc.seg_fd = cc.wake_tx_fd = -1;
	r = osf_setup_kfd_take(lfd, e->aux_fd, &in, p28, l28, &marked, nfd, &cc);
	if (r != 0) {
		errno = saved;
		if (r != 2 && (marked != 1 || r == 1)) /* 1: its client's is kernel TCP */
			return 0;
		kfd_reset(nfd);
		return -1;
	}
	memcpy(cc.peer, p28, sizeof(cc.peer));
	memcpy(cc.local, l28, sizeof(cc.local));
	cc.rule = e->rule;
	sock_carry_read(lfd, &opts);
	if (osf_kfd_accepted(nfd, &cc, flags) < 0) {
		kfd_reset(nfd);
		errno = saved;
		return -1;
	}
	sock_carry_apply(nfd, &opts);
	if (opts.rcvlowat > 1) /* inherited from the listener */
		osf_kfd_lowat(nfd);
	errno = saved;
	return 1;
}

/* KFD_ACCEPT_FDS: the numbers an offloaded accept may take at once, the
 * connection's, a new link's and its hello's two (setup_kfd.c); with
 * room above the program's limit all but the first land there. */
#define KFD_ACCEPT_FDS 4

static int listener_mode(int fd, const struct osf_fdt_entry *e, int *fl, int *timeout);
static int no_fd_left(int fd);

/* kfd_fds_short answers an accept on OSF_SHM_KFD listener fd when fewer
 * than KFD_ACCEPT_FDS numbers are free: the kernel's accept would take
 * the connection and its hello could not be read (the connection reset).
 * TCP's accept would take it with the one number left; this one answers
 * EMFILE once a connection is queued and leaves it there, as TCP's does
 * with none (issue 24 item 4): -1 with errno, 0 when the numbers are
 * there (after a wait, they may be: looked at again). */
static int kfd_fds_short(int fd, const struct osf_fdt_entry *e)
{
	int fl = -1, timeout = 0, n;

	while (!osf_fdt_fds_free(KFD_ACCEPT_FDS)) {
		struct pollfd p = {fd, POLLIN, 0};
		if (fl < 0 && listener_mode(fd, e, &fl, &timeout) < 0)
			return -1;
		if (no_fd_left(fd)) /* TCP's answer, before it looks */
			return OSF_FAIL(EMFILE);
		n = REAL(poll)(&p, 1, timeout);
		if (n < 0 && errno == EINTR && timeout < 0 && osf_intr_restart())
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return OSF_FAIL(EAGAIN);
		if (p.revents & POLLNVAL)
			return OSF_FAIL(EBADF);
		if (!(p.revents & POLLIN))
			return 0; /* shut down: the kernel's accept answers */
		if (!osf_fdt_fds_free(KFD_ACCEPT_FDS))
			return OSF_FAIL(EMFILE);
	}
	return 0;
}

/* kfd_spin spins on blocking OSF_SHM_KFD listener fd before the kernel's
 * accept sleeps, as accept_offload does: a churn of short connections
 * finds the next one without a sleep and a wake-up of the server's CPU.
 * The first look is the one accept_offload makes too; the listener's
 * mode is read only when it found nothing. -1 with EINTR when a handler
 * without SA_RESTART ran meanwhile (as the kernel's accept), else 0. */
static int kfd_spin(int fd, const struct osf_fdt_entry *e)
{
	struct pollfd p = {fd, POLLIN, 0};
	int fl = -1, timeout = 0, saved = errno;

	if (REAL(poll)(&p, 1, 0) != 0 || listener_mode(fd, e, &fl, &timeout) < 0 ||
	    timeout == 0) {
		errno = saved; /* ready, non-blocking, or for the accept to answer */
		return 0;
	}
	for (;;) {
		osf_intr_begin();
		if (osf_spin_poll(&p, 1, timeout) >= 0 || errno != EINTR)
			break;
		if (timeout >= 0 || !osf_intr_restart())
			return -1;
	}
	errno = saved;
	return 0;
}

/* accept_kfd_next is the kernel's accept4 on OSF_SHM_KFD listener fd: a
 * connection reset for want of its hello (accept_kfd) is passed over, as
 * if it had never come (bounded by the kernel's queue). */
static int accept_kfd_next(int fd, struct osf_fdt_entry *e, struct sockaddr *sa,
			   socklen_t *len, int flags)
{
	struct sockaddr_storage peer;
	socklen_t pl;
	int nfd, r;

	do {
		if (kfd_fds_short(fd, e) < 0 || kfd_spin(fd, e) < 0)
			return -1;
		pl = sizeof(peer);
		nfd = REAL(accept4)(fd, (struct sockaddr *)&peer, &pl, flags);
		if (nfd < 0)
			return nfd;
	} while ((r = accept_kfd(fd, e, nfd, flags, &peer, pl)) < 0);
	if (r == 0)
		accepted(fd, nfd, flags, (struct sockaddr *)&peer, &pl);
	if (peer_out(sa, len, &peer, pl) < 0) {
		drop(nfd);
		return -1;
	}
	return nfd;
}

/* listener_timeout returns the poll timeout of a blocking accept: the
 * listener's SO_RCVTIMEO, or -1. */
static int listener_timeout(int fd, const struct osf_fdt_entry *e)
{
	struct timeval tv = {0, 0};
	socklen_t l = sizeof(tv);

	uint32_t set = __atomic_load_n(&e->opts_set, __ATOMIC_RELAXED);

	if (!(__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_OPTSET))
		return -1; /* no option was ever set: none */
	if (!(set & OSF_OPTS_ALL) && !(set & sock_carried_bit(SOL_SOCKET, SO_RCVTIMEO)))
		return -1; /* others were, through this fd alone (no dup): none */
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

/* found_ready: the last accept's first look found a connection ready. */
static int found_ready;

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
	if (e->flags & OSF_FDF_KFD) { /* the kernel's accept, all of it */
		if ((e->flags & (OSF_FDF_SHARED | OSF_FDF_KFDSHUT)) == OSF_FDF_SHARED &&
		    ((e->flags & OSF_FDF_EXECSHARED) || !osf_setup_kfd_family(e->aux_fd))) {
			/* Another process may accept a connection whose hello
			 * this one read, and no hello store reaches it (none
			 * could be made, or it was passed over a socket:
			 * LIMITS.md): the hellos queued are kept here, and
			 * new clients find no companion and stay on kernel
			 * TCP. */
			__atomic_or_fetch(&e->flags, OSF_FDF_KFDSHUT, __ATOMIC_RELAXED);
			kfd_shut(fd, e);
		}
		return accept_kfd_next(fd, e, sa, len, flags);
	}
	/* On the companion's turns the look at both queues (a poll that
	 * costs as much as an accept) is skipped while accepts find a
	 * connection ready (an event loop accepts what its wait reported;
	 * a blocking accept that waits for the next would pay an accept4
	 * in vain): the companion's accept4 never waits, and finding
	 * nothing there leads to the look. A listener shut down meanwhile
	 * shut its companion down in every process (osf_fd_unlisten):
	 * EINVAL from there as from the look. */
	if ((__atomic_load_n(&turn, __ATOMIC_RELAXED) & 1) &&
	    __atomic_load_n(&found_ready, __ATOMIC_RELAXED)) {
		int nfd = accept_companion(fd, e, sa, len, flags, &wait_ms);
		if (nfd != -2) {
			__atomic_fetch_add(&turn, 1, __ATOMIC_RELAXED); /* the kernel's next */
			return nfd;
		}
		__atomic_store_n(&found_ready, 0, __ATOMIC_RELAXED);
	}
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
			if (looked && timeout != 0 && osf_intr_pending(0)) { /* static_sig.c */
				errno = EINTR;
				n = -1;
			} else {
				n = REAL(poll)(p, (nfds_t)(2 + np), looked ? timeout : 0);
			}
		}
		if (!looked)
			__atomic_store_n(&found_ready, n > 0, __ATOMIC_RELAXED);
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
