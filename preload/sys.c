//go:build osf_make

/* sys.c: the system calls of the stream protocol's C side (sdp/sys.h), as
 * the real libc functions: osf never re-enters its own hooks; and
 * osf_read_file (base.h), the reader of small /proc files. */
#include "base.h"

#include "../sdp/lock.h" /* osf_sock_timeout_ms */
#include "../sdp/sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

/* Under a seccomp filter (osf.sandboxed, preload/sandbox.c) the wake
 * protocol uses what the program's own socket calls would: poll, read and
 * write, never sendto, recvfrom or ioctl. poll stands in for MSG_DONTWAIT
 * (a token is a few bytes: a writable socket takes it whole), and a
 * hung-up or failed socket is EPIPE before any write could raise SIGPIPE,
 * as MSG_NOSIGNAL would have it. */
static int sandboxed(void)
{
	return __atomic_load_n(&osf.sandboxed, __ATOMIC_RELAXED);
}

/* sandbox_ready polls fd for events without blocking: 1 when one came, 0
 * with errno EAGAIN when not, -1 with errno set (EPIPE: hung up). */
static int sandbox_ready(int fd, short events)
{
	struct pollfd p = {fd, events, 0};
	int r = REAL(poll)(&p, 1, 0);

	if (r < 0)
		return -1;
	if (events == POLLOUT && (p.revents & (POLLHUP | POLLERR)))
		return OSF_FAIL(EPIPE);
	if (!(p.revents & (events | POLLHUP | POLLERR))) {
		errno = EAGAIN;
		return 0;
	}
	return 1;
}

ssize_t osf_sys_send(int fd, const void *buf, size_t n, int flags)
{
	if (unlikely(sandboxed())) {
		int r = sandbox_ready(fd, POLLOUT);
		return r <= 0 ? -1 : REAL(write)(fd, buf, n);
	}
	return REAL(send)(fd, buf, n, flags);
}

/* The sleeps below (a blocking recv, a poll or epoll_wait with a timeout)
 * fail with EINTR at once when a statically linked program's handler was
 * deferred during this hook (osf_intr_pending): the signal is blocked
 * until the hook returns, so the kernel's sleep would not end for it. A
 * recv without a timeout is one the kernel restarts after an SA_RESTART
 * handler. */
ssize_t osf_sys_recv(int fd, void *buf, size_t n, int flags)
{
	if (unlikely(!(flags & MSG_DONTWAIT) && osf_intr_pending(0))) {
		if (osf_sock_timeout_ms(fd, 0) < 0) /* a timeout: EINTR, as TCP */
			osf_intr_pending(1);
		errno = EINTR;
		return -1;
	}
	if (unlikely(sandboxed())) {
		if ((flags & MSG_DONTWAIT) && sandbox_ready(fd, POLLIN) <= 0)
			return -1;
		return REAL(read)(fd, buf, n);
	}
	return REAL(recv)(fd, buf, n, flags);
}

ssize_t osf_sys_read(int fd, void *buf, size_t n) { return REAL(read)(fd, buf, n); }

int osf_sys_close(int fd) { return REAL(close)(fd); }

ssize_t osf_sys_write(int fd, const void *buf, size_t n) { return REAL(write)(fd, buf, n); }

int osf_sys_epoll_create1(int flags) { return REAL(epoll_create1)(flags); }

int osf_sys_epoll_ctl(int ep, int op, int fd, struct epoll_event *ev)
{
	return REAL(epoll_ctl)(ep, op, fd, ev);
}

int osf_sys_epoll_wait(int ep, struct epoll_event *ev, int n, int timeout)
{
	if (unlikely(timeout != 0 && osf_intr_pending(0))) {
		errno = EINTR;
		return -1;
	}
	return REAL(epoll_wait)(ep, ev, n, timeout);
}

void osf_sys_intr_begin(void) { osf_intr_begin(); }

int osf_sys_intr_restart(void) { return osf_intr_restart(); }

int osf_sys_shutdown(int fd, int how) { return REAL(shutdown)(fd, how); }

int osf_sys_poll(struct pollfd *p, nfds_t n, int timeout)
{
	if (unlikely(timeout != 0 && osf_intr_pending(0))) {
		errno = EINTR;
		return -1;
	}
	return REAL(poll)(p, n, timeout);
}

int osf_sys_ioctl(int fd, unsigned long req, void *arg)
{
	if (unlikely(sandboxed()))
		return OSF_FAIL(ENOTTY); /* FIONREAD: tokens are left queued */
	return REAL(ioctl)(fd, req, arg);
}

/* Under a filter the thread id comes from glibc's own copy: the CPU-time
 * clock id of a thread encodes its tid (~tid << 3 | CPUCLOCK_PERTHREAD |
 * CPUCLOCK_SCHED, the kernel's ABI), and glibc builds it without a
 * system call. */
pid_t osf_sys_gettid(void)
{
	clockid_t id;

	if (unlikely(sandboxed()) &&
	    pthread_getcpuclockid(pthread_self(), &id) == 0)
		return (pid_t) ~((int)id >> 3);
	return (pid_t)syscall(SYS_gettid);
}

int osf_sys_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	return REAL(getsockopt)(fd, level, name, val, len);
}

/* The shm set-up's (sdp/setup.c). */
int osf_sys_socket(int domain, int type, int protocol)
{
	return REAL(socket)(domain, type, protocol);
}

int osf_sys_socketpair(int domain, int type, int protocol, int sv[2])
{
	return REAL(socketpair)(domain, type, protocol, sv);
}

int osf_sys_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	return REAL(connect)(fd, sa, len);
}

ssize_t osf_sys_sendto(int fd, const void *buf, size_t n, int flags,
		       const struct sockaddr *sa, socklen_t len)
{
	return REAL(sendto)(fd, buf, n, flags, sa, len);
}

ssize_t osf_sys_sendmsg(int fd, const struct msghdr *m, int flags)
{
	return REAL(sendmsg)(fd, m, flags);
}

ssize_t osf_sys_recvmsg(int fd, struct msghdr *m, int flags)
{
	return REAL(recvmsg)(fd, m, flags);
}

int osf_sys_fcntl(int fd, int cmd, long arg)
{
	return REAL(fcntl)(fd, cmd, (void *)arg);
}


/* selectmux's libc calls (selectmux/host.h), as the real functions. */
#define OSF_MUX_SYS_DEF(ret, name, params, args)                               \
	ret osf_mux_sys_##name params { return REAL(name) args; }
OSF_MUX_SYS_FUNCS(OSF_MUX_SYS_DEF)
#undef OSF_MUX_SYS_DEF

ssize_t osf_read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = REAL(read)(fd, buf, size - 1);
	REAL(close)(fd);
	if (n > 0)
		buf[n] = 0;
	return n;
}
