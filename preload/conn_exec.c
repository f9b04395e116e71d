//go:build osf_make

/* conn_exec.c: an exec or spawn of a program osf cannot follow (process.c's
 * guard): each offloaded connection the new image would inherit is
 * replaced, for the exec, by a socket that reads as a reset, and put back
 * if the exec fails. Moved from conn.c verbatim.
 */
#include "conn_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

/* reset_socket returns a socket whose first read fails with ECONNRESET
 * (then end of file) and whose writes fail with EPIPE, as a TCP socket
 * that received a reset: one end of a socket pair whose other end was
 * closed with a byte it never read. */
static int reset_socket(int nonblock)
{
	int sp[2];

	if (REAL(socketpair)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC |
					      (nonblock ? SOCK_NONBLOCK : 0),
			     0, sp) < 0)
		return -1;
	if (REAL(send)(sp[0], "", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
		REAL(close)(sp[0]);
		REAL(close)(sp[1]);
		return -1;
	}
	REAL(close)(sp[1]);
	return sp[0];
}

static void set_cloexec(int fd, int on, int *was)
{
	int fl = fd >= 0 ? REAL(fcntl)(fd, F_GETFD, NULL) : -1;

	if (fl < 0)
		return;
	*was = fl & FD_CLOEXEC;
	REAL(fcntl)(fd, F_SETFD, (void *)(intptr_t)(on ? fl | FD_CLOEXEC : fl & ~FD_CLOEXEC));
}

void osf_conn_exec_unfollowable(struct osf_exec_undo *u)
{
	struct osf_fdt_entry *e;
	int fd;

	u->n = 0;
	OSF_FDT_FOREACH(fd, e) {
		int fl, dead;
		struct osf_conn *c;
		if (!osf_kind_is_conn(e->kind) || (e->flags & OSF_FDF_CLOEXEC) ||
		    u->n == OSF_EXEC_UNDO_MAX)
			continue;
		fl = REAL(fcntl)(fd, F_GETFL, NULL);
		dead = fl < 0 ? -1 : reset_socket(fl & O_NONBLOCK);
		if (dead < 0)
			continue;
		c = conn_get(fd, e);
		u->v[u->n].fd = fd;
		u->v[u->n].saved = osf_fdt_dup_high(fd, 1);
		if (u->v[u->n].saved < 0 || REAL(dup2)(dead, fd) < 0) {
			if (u->v[u->n].saved >= 0)
				REAL(close)(u->v[u->n].saved);
			REAL(close)(dead);
			if (c)
				conn_put(c);
			continue;
		}
		REAL(close)(dead);
		u->v[u->n].reset = 0;
		if (c && __atomic_load_n(&c->s.me->holders, __ATOMIC_ACQUIRE) <= 1 &&
		    !(osf_side_my_flags(&c->s) & OSF_SIDE_RESET)) {
			/* The last holder: the peer must see a reset. */
			__atomic_or_fetch(&c->s.me->flags, OSF_SIDE_RESET,
					  __ATOMIC_ACQ_REL);
			u->v[u->n].reset = 1;
		}
		u->v[u->n].c = c;
		set_cloexec(e->aux_fd, 1, &u->v[u->n].aux);
		set_cloexec(e->aux2_fd, 1, &u->v[u->n].aux2);
		u->n++;
	}
}

void osf_conn_exec_failed(struct osf_exec_undo *u)
{
	int i, saved = errno;

	/* Last first: a region's memfd, named by several, gets back what it
	 * had before the first of them changed it. */
	for (i = u->n; i-- > 0;) {
		struct osf_fdt_entry *e = osf_fdt_lookup(u->v[i].fd);
		REAL(dup2)(u->v[i].saved, u->v[i].fd);
		REAL(close)(u->v[i].saved);
		if (e) {
			int unused;
			set_cloexec(e->aux_fd, u->v[i].aux, &unused);
			set_cloexec(e->aux2_fd, u->v[i].aux2, &unused);
		}
		if (u->v[i].c) {
			if (u->v[i].reset)
				__atomic_and_fetch(&u->v[i].c->s.me->flags,
						   ~OSF_SIDE_RESET, __ATOMIC_ACQ_REL);
			conn_put(u->v[i].c);
		}
	}
	u->n = 0;
	errno = saved;
}

int osf_conn_spawn_unfollowable(posix_spawn_file_actions_t *fa, int *dead, int max)
{
	struct osf_fdt_entry *e;
	int fd, n = 0;

	OSF_FDT_FOREACH(fd, e) {
		int fl, d;
		if (!osf_kind_is_conn(e->kind) || (e->flags & OSF_FDF_CLOEXEC) ||
		    n == max)
			continue;
		fl = REAL(fcntl)(fd, F_GETFL, NULL);
		d = fl < 0 ? -1 : reset_socket(fl & O_NONBLOCK);
		if (d < 0)
			continue;
		if (posix_spawn_file_actions_adddup2(fa, d, fd) != 0) {
			REAL(close)(d);
			continue;
		}
		if (e->aux_fd >= 0)
			posix_spawn_file_actions_addclose(fa, e->aux_fd);
		if (e->aux2_fd >= 0)
			posix_spawn_file_actions_addclose(fa, e->aux2_fd);
		dead[n++] = d;
	}
	return n;
}
