//go:build osf_make

/* conn.c: the data path of offloaded connections. No transport creates
 * offloaded connections yet, so these are unreachable placeholders that
 * answer as for a closed socket. */
#include "conn.h"

ssize_t osf_conn_recv(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags)
{
	(void)fd, (void)e, (void)iov, (void)iovcnt, (void)flags;
	return OSF_FAIL(EBADF);
}

ssize_t osf_conn_send(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags)
{
	(void)fd, (void)e, (void)iov, (void)iovcnt, (void)flags;
	return OSF_FAIL(EBADF);
}

ssize_t osf_conn_sendfile(int fd, struct osf_fdt_entry *e, int in_fd,
			  off_t *offset, size_t count)
{
	(void)fd, (void)e, (void)in_fd, (void)offset, (void)count;
	return OSF_FAIL(EBADF);
}

int osf_conn_shutdown(int fd, struct osf_fdt_entry *e, int how)
{
	(void)fd, (void)e, (void)how;
	return OSF_FAIL(EBADF);
}

int osf_conn_getsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			void *val, socklen_t *len)
{
	(void)fd, (void)e, (void)level, (void)name, (void)val, (void)len;
	return OSF_FAIL(EBADF);
}

int osf_conn_setsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len)
{
	(void)fd, (void)e, (void)level, (void)name, (void)val, (void)len;
	return OSF_FAIL(EBADF);
}

int osf_conn_getname(int fd, struct osf_fdt_entry *e, int peer,
		     struct sockaddr *sa, socklen_t *len)
{
	(void)fd, (void)e, (void)peer, (void)sa, (void)len;
	return OSF_FAIL(EBADF);
}

int osf_conn_ioctl(int fd, struct osf_fdt_entry *e, unsigned long req,
		   void *arg)
{
	(void)fd, (void)e, (void)req, (void)arg;
	return OSF_FAIL(EBADF);
}

void osf_conn_close(int fd, struct osf_fdt_entry *e) { (void)fd, (void)e; }
