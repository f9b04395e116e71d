//go:build osf_make

/* fd.c: hooks that create, copy and destroy descriptors, keeping the fd
 * table exact at every moment (posix_spawn and vfork+exec run none of
 * our code in between, docs/DESIGN.md D3), and protecting osf's own fds from
 * programs that close everything they do not know. */
#include "conn.h"
#include "setup.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sockios.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* aux_shared reports whether another fd (a dup) still uses the hidden fd
 * of fd's entry e. */
static int aux_shared(int fd, const struct osf_fdt_entry *e)
{
	struct osf_fdt_entry *c;
	int cfd;

	OSF_FDT_FOREACH(cfd, c)
		if (c->kind == e->kind && c->aux_fd == e->aux_fd && cfd != fd)
			return 1;
	return 0;
}

void osf_fd_closed(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	const struct osf_fd_ops *ops;
	int saved = errno;

	if (!e || e->kind == OSF_FD_NONE || e->kind == OSF_FD_HIDDEN)
		return;
	ops = osf_ops_of(e);
	if (ops || e->kind == OSF_FD_INET ||
	    (e->kind == OSF_FD_KERNEL && (e->flags & OSF_FDF_MUXITEMS)))
		osf_mux_forget(fd);
	if (ops && ops->close)
		ops->close(fd, e);
	else if (e->kind == OSF_FD_EPOLL || e->kind == OSF_FD_LISTEN) {
		struct osf_fdt_entry copy = *e;
		int shared = aux_shared(fd, e);
		/* Forget fd before its hidden fd's number is free again: a
		 * listener another thread makes meanwhile may get that number
		 * for its companion, and would then take this entry for a dup
		 * sharing it and never close it (its name stays bound: a later
		 * listener on the port has no companion, and its clients
		 * reach the stale one). */
		osf_fdt_clear(fd);
		if (copy.kind == OSF_FD_LISTEN && !shared)
			osf_setup_forget_companion(copy.aux_fd);
		if (osf_fdt_has_aux2(&copy) && !shared && copy.aux2_fd >= 0)
			osf_fdt_close_hidden(copy.aux2_fd); /* the gateway stops */
		osf_mux_closed(fd, &copy, shared);
	}
	else if (e->kind == OSF_FD_KERNEL && e->transport == OSF_TP_GATEWAY &&
		 e->aux_fd >= 0 && !aux_shared(fd, e))
		osf_fdt_close_hidden(e->aux_fd); /* a gateway listener's control */
	osf_fdt_clear(fd);
	errno = saved;
}

/* unlisten_entry makes listener entry c (fd cfd) an undecided TCP
 * socket's again. */
static void unlisten_entry(int cfd, struct osf_fdt_entry *c)
{
	struct osf_fdt_entry ent;

	osf_mux_closed(cfd, c, 1);
	ent = *c;
	ent.kind = OSF_FD_INET;
	ent.transport = 0;
	ent.role = 0;
	ent.aux_fd = -1;
	(void)osf_fdt_set(cfd, &ent);
}

/* group_unlisten is osf_fd_unlisten for a SO_REUSEPORT group's member
 * (entry e): the socket left the group, whose companion and store stay
 * the other members' (preload/setup_group.c); this process lets go of
 * them with its last member. */
static void group_unlisten(const struct osf_fdt_entry *e)
{
	struct osf_fdt_entry *c;
	uint64_t ino = e->ino;
	int aux = e->aux_fd, cfd, kept = 0;

	OSF_FDT_FOREACH(cfd, c) {
		if (c->kind != OSF_FD_LISTEN || c->aux_fd != aux)
			continue;
		if (c->ino == ino)
			unlisten_entry(cfd, c);
		else
			kept = 1;
	}
	if (kept)
		return;
	osf_setup_forget_companion(aux);
	osf_fdt_close_hidden(aux);
}

void osf_fd_unlisten(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd), *c;
	int aux, cfd, saved = errno;

	if (!e || e->kind != OSF_FD_LISTEN)
		return;
	aux = e->aux_fd;
	if (e->flags & OSF_FDF_GROUP) {
		group_unlisten(e);
		errno = saved;
		return;
	}
	if (osf_fdt_has_aux2(e) && e->aux2_fd >= 0)
		osf_fdt_close_hidden(e->aux2_fd); /* the gateway stops too */
	osf_setup_reset_companion(aux);
	OSF_FDT_FOREACH(cfd, c) {
		if (c->kind != OSF_FD_LISTEN || c->aux_fd != aux)
			continue;
		unlisten_entry(cfd, c);
	}
	osf_fdt_close_hidden(aux);
	errno = saved;
}

void osf_fd_dup(int oldfd, int newfd, int cloexec)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(oldfd), copy;
	int saved = errno;

	if (!e || e->kind == OSF_FD_NONE || e->kind == OSF_FD_HIDDEN ||
	    e->kind == OSF_FD_RESERVED)
		return;
	if (e->kind == OSF_FD_INET || e->kind == OSF_FD_LISTEN) {
		__atomic_or_fetch(&e->opts_set, OSF_OPTS_ALL, __ATOMIC_RELAXED);
		__atomic_or_fetch(&e->flags, OSF_FDF_OPTSET | OSF_FDF_BOUND |
					     OSF_FDF_REUSESET | OSF_FDF_NOKEEP | OSF_FDF_FLSET,
				  __ATOMIC_RELAXED);
	}
	/* The new entry's reference, before the copy: an entry inherited
	 * across exec and not used in this image yet gets its connection
	 * here (osf_conn_rebuild), which the copy must share, not map again
	 * (a slot of a region cannot be: held already). */
	if (osf_kind_is_conn(e->kind))
		osf_conn_dup(e);
	copy = *e;
	copy.flags = cloexec ? (copy.flags | OSF_FDF_CLOEXEC)
			     : (copy.flags & ~OSF_FDF_CLOEXEC);
	(void)osf_fdt_set(newfd, &copy);
	errno = saved;
}

/* close_refused reports an fd of osf's own, which the program may not
 * close (it never had it: EBADF). */
static int close_refused(int fd, const struct osf_fdt_entry *e)
{
	return (e->kind == OSF_FD_HIDDEN && osf_fdt_is_hidden(fd)) ||
	       e->kind == OSF_FD_RESERVED;
}

/* listener_close closes listener fd (entry e) through close, or
 * syscall(SYS_close) when raw, keeping its port for the connections
 * accepted from it (osf_listener_port_keep). */
static int listener_close(int fd, struct osf_fdt_entry *e, int raw)
{
	struct osf_listener_port lp;
	int r, err;

	osf_listener_port_read(fd, e, !aux_shared(fd, e), &lp);
	osf_fd_closed(fd);
	r = raw ? (int)REAL(syscall)(SYS_close, fd, 0, 0, 0, 0, 0) : REAL(close)(fd);
	err = errno;
	if (r == 0)
		osf_listener_port_keep(&lp);
	errno = err;
	return r;
}

OSF_EXPORT int close(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind == OSF_FD_NONE))
		return REAL(close)(fd);
	if (close_refused(fd, e))
		return OSF_FAIL(EBADF);
	if (unlikely(e->kind == OSF_FD_LISTEN))
		return listener_close(fd, e, 0);
	osf_fd_closed(fd);
	return REAL(close)(fd);
}

/* syscall is glibc's generic system call function, through which some
 * programs close: libuv (node) closes every fd with syscall(SYS_close)
 * and its spawned children with SYS_close_range. Those two are closes
 * like close's and close_range's (a close osf never saw would keep the
 * connection's hidden fds and ring, and its state for osfstat, until
 * the process ends, and a close_range would take osf's hidden fds);
 * every other number is a lookup and a tail jump. Declared with the
 * number and six arguments, as glibc's reads them (base.h). */
long osf_syscall_hook(long n, long a, long b, long c, long d, long e, long f)
	__asm__("syscall");

OSF_EXPORT long osf_syscall_hook(long n, long a, long b, long c, long d, long e, long f)
{
	struct osf_fdt_entry *t;

	if (likely(n != SYS_close && n != SYS_close_range)) {
		if (unlikely(n == SYS_execve || n == SYS_execveat))
			osf_exec_settle(); /* as the exec hooks do (process.c) */
		return REAL(syscall)(n, a, b, c, d, e, f);
	}
	if (n == SYS_close_range)
		return close_range((unsigned)a, (unsigned)b, (int)c);
	t = osf_fdt_lookup((int)a);
	if (likely(!t || t->kind == OSF_FD_NONE))
		return REAL(syscall)(n, a, b, c, d, e, f);
	if (close_refused((int)a, t))
		return OSF_FAIL(EBADF);
	if (unlikely(t->kind == OSF_FD_LISTEN))
		return listener_close((int)a, t, 1);
	osf_fd_closed((int)a);
	return REAL(syscall)(n, a, b, c, d, e, f);
}

OSF_EXPORT int dup(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int nfd;

	if (likely(!e || e->kind == OSF_FD_NONE))
		return REAL(dup)(fd);
	if (osf_fdt_is_hidden(fd))
		return OSF_FAIL(EBADF);
	nfd = REAL(dup)(fd);
	if (nfd >= 0)
		osf_fd_dup(fd, nfd, 0);
	return nfd;
}

/* hidden_moved updates what caches the number of a hidden fd that
 * osf_fdt_relocate_hidden copied from old to nfd, before the program's
 * dup2 takes old: wake tokens and epoll registrations must follow it. */
static void hidden_moved(int old, int nfd)
{
	osf_conn_hidden_moved(old, nfd);
	osf_mux_hidden_moved(old, nfd);
	osf_setup_hidden_moved(old, nfd);
	osf_log_hidden_moved(old, nfd);
}

/* dup_onto implements dup2 and dup3 once: newfd's old tenant is released
 * only after the kernel has replaced it. */
static int dup_onto(int oldfd, int newfd, int flags, int is_dup3)
{
	struct osf_fdt_entry *o = osf_fdt_lookup(oldfd);
	struct osf_fdt_entry *n = osf_fdt_lookup(newfd);
	struct osf_listener_port lp;
	int r, moved = 0;

	if ((!o || o->kind == OSF_FD_NONE) && (!n || n->kind == OSF_FD_NONE))
		return is_dup3 ? REAL(dup3)(oldfd, newfd, flags)
			       : REAL(dup2)(oldfd, newfd);
	if (o && osf_fdt_is_hidden(oldfd))
		return OSF_FAIL(EBADF);
	if (oldfd == newfd)
		return is_dup3 ? OSF_FAIL(EINVAL) : REAL(dup2)(oldfd, newfd);
	if (n && n->kind == OSF_FD_RESERVED) /* the program claims it */
		__atomic_compare_exchange_n(&n->kind, &(uint8_t){OSF_FD_RESERVED},
					    OSF_FD_NONE, 0, __ATOMIC_ACQ_REL,
					    __ATOMIC_RELAXED);
	if (n && n->kind == OSF_FD_HIDDEN && osf_fdt_is_hidden(newfd)) {
		moved = osf_fdt_relocate_hidden(newfd);
		if (moved < 0)
			return -1;
		if (moved > 0)
			hidden_moved(newfd, moved);
	}
	lp.keep = 0;
	if (n && n->kind == OSF_FD_LISTEN)
		osf_listener_port_read(newfd, n, !aux_shared(newfd, n), &lp);
	r = is_dup3 ? REAL(dup3)(oldfd, newfd, flags)
		    : REAL(dup2)(oldfd, newfd);
	if (r < 0) {
		if (moved > 0) { /* the old number is free, as the program saw it */
			int err = errno;
			REAL(close)(newfd);
			errno = err;
		}
		return r;
	}
	osf_fd_closed(newfd);
	osf_listener_port_keep(&lp);
	osf_fd_dup(oldfd, newfd, (flags & O_CLOEXEC) != 0);
	if (newfd <= 2 && osf_fdt_kind(newfd) >= OSF_FD_SHM)
		osf_stdio_take(newfd);
	return r;
}

OSF_EXPORT int dup2(int oldfd, int newfd)
{
	return dup_onto(oldfd, newfd, 0, 0);
}

OSF_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	return dup_onto(oldfd, newfd, flags, 1);
}

/* fcntl_tracked handles the commands that change what the table knows. */
static __attribute__((noinline)) int fcntl_tracked(int (*real)(int, int, void *), int fd,
			 struct osf_fdt_entry *e, int cmd, void *arg)
{
	int r;

	if (osf_fdt_is_hidden(fd))
		return OSF_FAIL(EBADF);
	r = real(fd, cmd, arg);
	if (r < 0)
		return r;
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		osf_fd_dup(fd, r, cmd == F_DUPFD_CLOEXEC);
		break;
	case F_SETFL:
	case F_SETOWN:
	case F_SETOWN_EX:
	case F_SETSIG:
		if (cmd == F_SETFL && osf_kind_is_conn(e->kind))
			osf_conn_setfl(e, (long)arg);
		else if (cmd == F_SETFL && e->kind == OSF_FD_INET)
			__atomic_or_fetch(&e->flags, OSF_FDF_FLSET, __ATOMIC_RELAXED);
		else if (e->kind == OSF_FD_LISTEN)
			osf_listen_async(fd, e->aux_fd, 0);
		break;
	case F_SETFD:
		osf_fdt_set_cloexec(fd, ((long)arg & FD_CLOEXEC) != 0);
		break;
	}
	return r;
}

/* fcntl, fcntl64 and ioctl are variadic in C, but every command takes no
 * argument, an int or a pointer, and on x86-64 a variadic call passes it in
 * the same register as a plain third argument. Defining the hooks with
 * three arguments (under the libc names, through asm labels) spares the
 * variadic prologue, so the pass-through stays a check and a tail jump. */
int osf_fcntl_hook(int fd, int cmd, void *arg) __asm__("fcntl");
int osf_fcntl64_hook(int fd, int cmd, void *arg) __asm__("fcntl64");
int osf_ioctl_hook(int fd, unsigned long req, void *arg) __asm__("ioctl");

OSF_EXPORT int osf_fcntl_hook(int fd, int cmd, void *arg)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind == OSF_FD_NONE))
		return REAL(fcntl)(fd, cmd, arg);
	return fcntl_tracked(REAL(fcntl), fd, e, cmd, arg);
}

OSF_EXPORT int osf_fcntl64_hook(int fd, int cmd, void *arg)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	if (likely(!e || e->kind == OSF_FD_NONE))
		return REAL(fcntl64)(fd, cmd, arg);
	return fcntl_tracked(REAL(fcntl64), fd, e, cmd, arg);
}

OSF_EXPORT int osf_ioctl_hook(int fd, unsigned long req, void *arg)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	int r;

	if (unlikely(e && e->kind >= OSF_FD_INET && (req == FIOCLEX || req == FIONCLEX))) {
		r = REAL(ioctl)(fd, req, arg); /* as F_SETFD: the entry keeps it */
		if (r == 0)
			osf_fdt_set_cloexec(fd, req == FIOCLEX);
		return r;
	}
	if (unlikely(e && e->kind == OSF_FD_INET && (req == FIONBIO || req == FIOASYNC)))
		__atomic_or_fetch(&e->flags, OSF_FDF_FLSET, __ATOMIC_RELAXED);
	if (likely(!e || !osf_kind_is_conn(e->kind))) {
		if (likely(!e || e->kind != OSF_FD_LISTEN ||
			   (req != FIOASYNC && req != FIOSETOWN && req != SIOCSPGRP)))
			return REAL(ioctl)(fd, req, arg);
		r = REAL(ioctl)(fd, req, arg); /* O_ASYNC or the owner */
		if (r == 0)
			osf_listen_async(fd, e->aux_fd, 0);
		return r;
	}
	return osf_conn_ioctl(fd, e, req, arg);
}

/* close_span applies close_range to [first, last] in pieces that step
 * around osf's hidden fds. */
static int close_span(unsigned first, unsigned last, int flags)
{
	while (first <= last) {
		int h = osf_fdt_next_hidden((int)first);
		unsigned end = last;
		if (h >= 0 && (unsigned)h <= last) {
			if (!osf_fdt_is_hidden(h)) /* stale: not ours now */
				continue;
			if ((unsigned)h == first) {
				if (first == last)
					break;
				first++;
				continue;
			}
			end = (unsigned)h - 1;
		}
		if (REAL(close_range)(first, end, flags) < 0)
			return -1;
		if (end == last)
			break;
		first = end + 1;
	}
	return 0;
}

/* forget_span releases osf's state for the fds close_range closes. */
static void forget_span(unsigned first, unsigned last)
{
	struct osf_fdt_entry *c;
	int fd;

	for (fd = (int)first; (c = osf_fdt_next(&fd)) && (unsigned)fd <= last;
	     fd++) {
		int k = c->kind;
		if (k != OSF_FD_NONE && k != OSF_FD_HIDDEN && k != OSF_FD_RESERVED)
			osf_fd_closed(fd);
	}
}

/* cloexec_span mirrors CLOSE_RANGE_CLOEXEC into the table. */
static void cloexec_span(unsigned first, unsigned last)
{
	struct osf_fdt_entry *e;
	int fd;

	for (fd = (int)first; (e = osf_fdt_next(&fd)) && (unsigned)fd <= last;
	     fd++)
		if (e->kind != OSF_FD_NONE && e->kind != OSF_FD_HIDDEN &&
		    e->kind != OSF_FD_RESERVED)
			osf_fdt_set_cloexec(fd, 1);
}

OSF_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	if (likely(osf_fdt_table_fd() < 0) || first > last)
		return REAL(close_range)(first, last, flags);
	if (flags & CLOSE_RANGE_CLOEXEC) {
		if (close_span(first, last, flags) < 0)
			return -1;
		cloexec_span(first, last);
		return 0;
	}
	forget_span(first, last);
	return close_span(first, last, flags);
}

OSF_EXPORT void closefrom(int lowfd)
{
	if (likely(osf_fdt_table_fd() < 0) || lowfd < 0) {
		REAL(closefrom)(lowfd);
		return;
	}
	forget_span((unsigned)lowfd, ~0U);
	if (close_span((unsigned)lowfd, ~0U, 0) < 0) {
		/* close_range is missing: close what is open, one by one */
		int fd;
		for (fd = lowfd; fd < 65536; fd++)
			if (!osf_fdt_is_hidden(fd))
				REAL(close)(fd);
	}
}

/* ---- RLIMIT_NOFILE -------------------------------------------------------
 * osf places its own fds above the program's soft limit in short windows
 * that raise it (fdtable/fdwindow.c); reads and changes of the limit wait for a
 * window to end, so the program only ever sees, and changes, its own
 * value. glibc's functions are this one system call. */

/* raw_prlimit is prlimit64 without libc: ASan's start-up (the sanitized
 * build of libosf.so) calls getrlimit before its shadow memory exists,
 * when even loading a real-function pointer (the syscall hook's) faults. */
static int raw_prlimit(pid_t pid, int res, const void *nw, void *old)
{
	long r = osf_rawsys(SYS_prlimit64, pid, res, (long)nw, (long)old, 0, 0);

	if (r < 0 && r > -4096)
		return OSF_FAIL((int)-r);
	return (int)r;
}

static int prlimit_sys(pid_t pid, int res, const void *nw, void *old)
{
	int r;

	if (res != RLIMIT_NOFILE || (pid != 0 && pid != osf_pid()))
		return raw_prlimit(pid, res, nw, old);
	osf_fdt_limit_lock();
	r = raw_prlimit(0, res, nw, old);
	if (nw)
		osf_fdt_limit_changed();
	osf_fdt_limit_unlock();
	return r;
}

OSF_EXPORT int prlimit(pid_t pid, __rlimit_resource_t res, const struct rlimit *nw,
		       struct rlimit *old)
{
	return prlimit_sys(pid, res, nw, old);
}

OSF_EXPORT int prlimit64(pid_t pid, __rlimit_resource_t res, const struct rlimit64 *nw,
			 struct rlimit64 *old)
{
	return prlimit_sys(pid, res, nw, old);
}

OSF_EXPORT int getrlimit(__rlimit_resource_t res, struct rlimit *rl)
{
	return prlimit_sys(0, res, NULL, rl);
}

OSF_EXPORT int getrlimit64(__rlimit_resource_t res, struct rlimit64 *rl)
{
	return prlimit_sys(0, res, NULL, rl);
}

OSF_EXPORT int setrlimit(__rlimit_resource_t res, const struct rlimit *rl)
{
	return prlimit_sys(0, res, rl, NULL);
}

OSF_EXPORT int setrlimit64(__rlimit_resource_t res, const struct rlimit64 *rl)
{
	return prlimit_sys(0, res, rl, NULL);
}
