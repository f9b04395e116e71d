//go:build osf_make

/* sys.c: the system calls of the stream protocol's C side (sdp/sys.h), as
 * the real libc functions: osf never re-enters its own hooks. */
#include "base.h"

#include "../sdp/sys.h"

ssize_t osf_sys_send(int fd, const void *buf, size_t n, int flags)
{
	return REAL(send)(fd, buf, n, flags);
}

ssize_t osf_sys_recv(int fd, void *buf, size_t n, int flags)
{
	return REAL(recv)(fd, buf, n, flags);
}

ssize_t osf_sys_read(int fd, void *buf, size_t n) { return REAL(read)(fd, buf, n); }

int osf_sys_close(int fd) { return REAL(close)(fd); }

int osf_sys_poll(struct pollfd *p, nfds_t n, int timeout)
{
	return REAL(poll)(p, n, timeout);
}

int osf_sys_ioctl(int fd, unsigned long req, void *arg)
{
	return REAL(ioctl)(fd, req, arg);
}
