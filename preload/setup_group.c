//go:build osf_make

/* setup_group.c: a SO_REUSEPORT group's one companion and hello store under
 * OSF_SHM_KFD (docs/ARCHITECTURE.md "SO_REUSEPORT groups under the
 * switch"). The kernel spreads a group's SYNs over its members by a hash
 * the client cannot predict, while the client sends its hello ahead of its
 * SYN to a companion: every member must reach every hello. So a group has
 * one companion (its name's slot 0) and one store (setup_fam.c), made with
 * its first member's listen. A member made by a process that holds a
 * member already shares that member's companion, as a dup would
 * (sock_listen.c reuseport_member); a member made by another process finds the
 * name bound and, before its kernel listen (no SYN reaches it before it
 * can read every hello), takes copies of the companion and the store from
 * the process that made the companion (its SO_PEERCRED pid; when that one
 * is gone, any process of this uid that holds them) with pidfd_getfd: the
 * store's page names the inodes of the companion and of the pair's ends,
 * which that process's /proc/PID/fd lists. The kernel puts only sockets of
 * one effective uid in a group, so the holder is of this process's uid
 * (checked), the trust domain of the store. A member that cannot take them
 * (pidfd_getfd refused: Yama ptrace_scope, a seccomp filter, a holder not
 * dumpable) would reset the connections whose hello it cannot read, so it
 * has the group's companion and links shut before it listens (shut_group;
 * setup_fam.c group_shut): new clients use kernel TCP (LIMITS.md). */
#include "setup_priv.h"
#include "kfd.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/syscall.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define JOIN_FDS 65536 /* the holder's fds looked at, at most */
#define JOIN_PAGES 16  /* its stores' pages */
#define JOIN_WAIT_NS 1000000000LL /* the holder's fds move while it hides them */
#define JOIN_WAIT_MS 20 /* a companion bound, not listening yet */

/* A holder's fd: its number and, for a socket, its inode (0: a page). */
struct hfd {
	int n;
	uint64_t ino;
};

/* holder_fds lists the sockets and store pages of process pid (its
 * /proc/PID/fd) into *out (malloc'd): how many, or -1. */
static int holder_fds(pid_t pid, struct hfd **out)
{
	char dir[48], p[320], l[128];
	struct dirent *d;
	struct hfd *v = NULL, *nv;
	unsigned long long ino;
	int n = 0, cap = 0, seen = 0;
	ssize_t k;
	DIR *dd;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	if (!(dd = opendir(dir)))
		return -1;
	while (seen++ < JOIN_FDS && (d = readdir(dd)) != NULL) {
		if (d->d_name[0] < '0' || d->d_name[0] > '9')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, d->d_name);
		k = readlink(p, l, sizeof(l) - 1);
		if (k <= 0)
			continue;
		l[k] = 0;
		if (sscanf(l, "socket:[%llu]", &ino) == 1)
			;
		else if (!strncmp(l, "/memfd:osf-kfd-store", 20))
			ino = 0;
		else
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			if (!(nv = realloc(v, (size_t)cap * sizeof(*v))))
				break;
			v = nv;
		}
		v[n].n = atoi(d->d_name);
		v[n++].ino = (uint64_t)ino;
	}
	closedir(dd);
	*out = v;
	return n;
}

/* copy_fd copies fd n of the process behind pidfd pfd when it is a socket
 * of inode ino (ino 0: a regular file): the copy (close-on-exec), or -1. */
static int copy_fd(int pfd, int n, uint64_t ino, struct stat *st)
{
	int c = (int)syscall(SYS_pidfd_getfd, pfd, n, 0);

	if (c < 0)
		return -1;
	if (fstat(c, st) < 0 || (ino ? !S_ISSOCK(st->st_mode) || (uint64_t)st->st_ino != ino
				     : !S_ISREG(st->st_mode))) {
		REAL(close)(c);
		return -1;
	}
	return c;
}

/* copy_sock copies the holder's socket of inode ino (fds v, nv of them). */
static int copy_sock(int pfd, const struct hfd *v, int nv, uint64_t ino)
{
	struct stat st;
	int i, c;

	for (i = 0; ino && i < nv; i++)
		if (v[i].ino == ino && (c = copy_fd(pfd, v[i].n, ino, &st)) >= 0)
			return c;
	return -1;
}

/* listens_at reports whether s is a listening SOCK_SEQPACKET socket bound
 * to abstract name name: the group's companion, not a look-alike. */
static int listens_at(int s, const char *name)
{
	struct sockaddr_un sun, want;
	socklen_t sl = sizeof(sun), wl = setup_abstract(&want, name), il = sizeof(int);
	int type = 0, acc = 0;

	if (REAL(getsockname)(s, (struct sockaddr *)&sun, &sl) < 0 || sl != wl ||
	    memcmp(&sun, &want, wl) != 0)
		return 0;
	if (REAL(getsockopt)(s, SOL_SOCKET, SO_TYPE, &type, &il) < 0 || type != SOCK_SEQPACKET)
		return 0;
	il = sizeof(int);
	return REAL(getsockopt)(s, SOL_SOCKET, SO_ACCEPTCONN, &acc, &il) == 0 && acc;
}

/* take_from copies, from process pid, the companion listening at name
 * (*comp) and its store (st: read and write ends, page): 0, -1 when pid's
 * fds cannot be had (not dumpable, pidfd_getfd refused), -2 when they
 * were but no store was found (its fds moving: look again), -3 when pid
 * is gone. */
static int take_from(pid_t pid, const char *name, int st[3], int *comp)
{
	struct setup_fam_head h;
	struct stat sb;
	struct hfd *v = NULL;
	int pfd, nv, i, pages = 0, pg, s[3], r = -2;

	pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pfd < 0)
		return errno == ESRCH ? -3 : -1;
	nv = holder_fds(pid, &v);
	if (nv < 0)
		r = -1;
	for (i = 0; i < nv && r == -2 && pages < JOIN_PAGES; i++) {
		if (v[i].ino)
			continue;
		if ((pg = copy_fd(pfd, v[i].n, 0, &sb)) < 0) {
			if (errno == EPERM || errno == ENOSYS)
				r = -1; /* refused: the others would be too */
			continue;
		}
		pages++;
		/* The holder's page: its uid's, which the group's is. */
		if (sb.st_size < SETUP_FAM_PAGE || sb.st_uid != geteuid() ||
		    pread(pg, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.magic != SETUP_FAM_MAGIC) {
			REAL(close)(pg);
			continue;
		}
		s[0] = copy_sock(pfd, v, nv, h.ino[0]);
		s[1] = s[0] >= 0 && listens_at(s[0], name) ? copy_sock(pfd, v, nv, h.ino[1]) : -1;
		s[2] = s[1] >= 0 ? copy_sock(pfd, v, nv, h.ino[2]) : -1;
		if (s[2] >= 0) {
			*comp = s[0];
			st[0] = s[1];
			st[1] = s[2];
			st[2] = pg;
			r = 0;
			break;
		}
		if (s[0] >= 0)
			REAL(close)(s[0]);
		if (s[1] >= 0)
			REAL(close)(s[1]);
		REAL(close)(pg);
	}
	free(v);
	REAL(close)(pfd);
	return r;
}

/* take_any is take_from for the processes of this uid (at most
 * JOIN_PROCS of them): the companion's maker is gone, its fork children
 * or members that took copies hold it. */
#define JOIN_PROCS 4096
static int take_any(const char *name, int st[3], int *comp)
{
	char p[64];
	struct dirent *d;
	struct stat sb;
	pid_t pid;
	int n = 0, r = -1;
	DIR *dd = opendir("/proc");

	if (!dd)
		return -1;
	while (r != 0 && n < JOIN_PROCS && (d = readdir(dd)) != NULL) {
		if (d->d_name[0] < '1' || d->d_name[0] > '9')
			continue;
		pid = (pid_t)atoi(d->d_name);
		snprintf(p, sizeof(p), "/proc/%d", (int)pid);
		if (pid == osf_pid() || stat(p, &sb) < 0 || sb.st_uid != geteuid())
			continue;
		n++;
		r = take_from(pid, name, st, comp);
	}
	closedir(dd);
	return r == 0 ? 0 : -1;
}

/* poke makes a process of the group accept: a marked connection
 * (kfd.c) to the group's address (in; loopback for a wildcard), which the
 * kernel gives to a member (this one does not listen yet), and whose
 * hello is nowhere, so that its accept reads every link of the store
 * (setup_fam.c scan), this member's request among them, and resets it
 * unseen. The socket, or -1. */
static int poke(const struct osf_core_listen_in *in)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	int v6 = in->family == AF_INET6, s, old[2];

	memset(&ss, 0, sizeof(ss));
	if (v6) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(in->port);
		memcpy(&s6->sin6_addr, in->addr, 16);
		if (IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr))
			s6->sin6_addr = in6addr_loopback;
	} else {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(in->port);
		memcpy(&s4->sin_addr, in->addr, 4);
		if (s4->sin_addr.s_addr == htonl(INADDR_ANY))
			s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	s = REAL(socket)(in->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s >= 0 && osf_kfd_connect(s, (struct sockaddr *)&ss,
				      v6 ? sizeof(*s6) : sizeof(*s4), v6, old) < 0 &&
	    errno != EINPROGRESS) {
		REAL(close)(s);
		s = -1;
	}
	return s;
}

/* shut_group asks the holders of the group's companion (link s) to shut
 * it and its links (setup_fam.c group_shut) and waits, at most the
 * handshake bound, for their answer: then no client sends a hello any
 * more, and this member may listen. A holder that does not accept within
 * the bound (its program busy, stopped) leaves the clients that connect
 * meanwhile to the reset of a lost hello, if the kernel gives their SYN
 * to this member (LIMITS.md). */
static void shut_group(int s, const struct osf_core_listen_in *in)
{
	struct setup_group_shut m = {SETUP_GROUP_SHUT_MAGIC, 0};
	struct pollfd p = {s, POLLIN, 0};
	long long end;
	int k, left;

	if (REAL(send)(s, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(m))
		return;
	k = poke(in);
	/* Not in the caller's fd window: its limit lock would hold up the
	 * process's other set-ups meanwhile. */
	osf_fdt_high_end();
	end = osf_now_ns() + (long long)HELLO_WAIT_MS * 1000000LL;
	while ((left = (int)((end - osf_now_ns()) / 1000000LL)) > 0 &&
	       REAL(poll)(&p, 1, left) < 0 && errno == EINTR)
		;
	osf_fdt_high_begin();
	if (p.revents & POLLIN)
		(void)REAL(recv)(s, &m, sizeof(m), MSG_DONTWAIT);
	if (k >= 0)
		REAL(close)(k);
}

/* join takes copies of the companion listening at name and of its store
 * from the process that made it: the companion (st filled), or -1 (the
 * group's holders were asked to shut it: shut_group). */
static int join(const char *name, const struct osf_core_listen_in *in, int st[3])
{
	struct sockaddr_un sun;
	struct ucred cr;
	socklen_t sl = setup_abstract(&sun, name), cl = sizeof(cr);
	int s, i, r, comp = -1;
	long long end;

	s = REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -1;
	/* Refused: bound, not listening yet (a member starting beside this
	 * one), or shut for good. */
	for (i = 0; (r = REAL(connect)(s, (struct sockaddr *)&sun, sl)) < 0 &&
		    errno == ECONNREFUSED && i < JOIN_WAIT_MS;
	     i++)
		usleep(1000);
	if (r < 0 || REAL(getsockopt)(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
	    cr.uid != geteuid()) {
		/* Shut, full, or not the group's (another user's name: its
		 * clients do not trust it). */
		REAL(close)(s);
		return -1;
	}
	/* A holder that is hiding its fds (listen_offload) moves them: looked
	 * for again, backing off, for at most a second (a loaded host may
	 * stop it half-way). */
	end = osf_now_ns() + JOIN_WAIT_NS;
	for (i = 1, r = take_from(cr.pid, name, st, &comp); r == -2 && osf_now_ns() < end;
	     i = i < 32 ? 2 * i : i) {
		usleep((useconds_t)i * 1000);
		r = take_from(cr.pid, name, st, &comp);
	}
	if (r == -3)
		r = take_any(name, st, &comp);
	if (r < 0)
		shut_group(s, in);
	REAL(close)(s); /* its holder reads the end */
	return r < 0 ? -1 : comp;
}

int setup_group_bind(int *fd, const char *name, const struct osf_core_listen_in *in,
		     int listening, int st[3])
{
	struct sockaddr_un sun;
	socklen_t sl = setup_abstract(&sun, name);
	int comp, saved, listened;

	/* Listeners on the port before the group's first companion: members
	 * osf does not serve (without osf, or without the switch), whose
	 * SYNs no hello would follow (a look before the bind: a member that
	 * joins later finds the companion). Not when this one listens
	 * already (a port the kernel chose: a new group). */
	listened = !listening && osf_setup_port_listened((uint16_t)in->port);
	if (setup_fam_new(*fd, st) < 0)
		return -1;
	if (REAL(bind)(*fd, (struct sockaddr *)&sun, sl) == 0) {
		if (listened) {
			osf_setup_group_drop(st);
			return 3;
		}
		if (REAL(listen)(*fd, in->backlog) == 0)
			return 0;
	}
	saved = errno;
	osf_setup_group_drop(st);
	if (saved != EADDRINUSE) {
		errno = saved;
		return -1;
	}
	comp = join(name, in, st);
	if (comp < 0)
		return 2;
	REAL(close)(*fd);
	*fd = comp;
	return 1;
}

void osf_setup_group_drop(int st[3])
{
	int i, saved = errno;

	for (i = 0; i < 3; i++)
		if (st[i] >= 0)
			REAL(close)(st[i]), st[i] = -1;
	errno = saved;
}

int osf_setup_group_store(int lfd, int aux_fd, const int st[3])
{
	if (st[0] >= 0 && setup_fam_adopt(lfd, aux_fd, st) == 0)
		return 1;
	/* No store: no member could read a hello another took. */
	(void)REAL(shutdown)(aux_fd, SHUT_RDWR);
	return 0;
}
