//go:build osf_make

/* io.c: the read and write hooks. For an fd osf does not own, each is a
 * table lookup and a tail call into libc; offloaded connections go to the
 * ring data path in conn.c. */
#include "conn.h"

#include <sys/sendfile.h>

extern void __chk_fail(void) __attribute__((noreturn));

/* conn_entry returns fd's entry when it is an offloaded connection. */
static inline struct osf_fdt_entry *conn_entry(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	return (e && e->kind >= OSF_FD_SHM) ? e : NULL;
}

/* The offloaded paths live out of line, so that each hook's pass-through
 * is a check and a tail jump into libc, with no stack frame. */
#define OSF_SLOW __attribute__((noinline))

static OSF_SLOW ssize_t recv1(int fd, struct osf_fdt_entry *e, void *buf,
			       size_t n, int flags)
{
	struct iovec v = {buf, n};

	return osf_conn_recv(fd, e, &v, 1, flags);
}

static OSF_SLOW ssize_t send1(int fd, struct osf_fdt_entry *e, const void *buf,
			       size_t n, int flags)
{
	struct iovec v = {(void *)buf, n};

	return osf_conn_send(fd, e, &v, 1, flags);
}

static OSF_SLOW ssize_t recv1_chk(int fd, struct osf_fdt_entry *e, void *buf,
				   size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		__chk_fail();
	return recv1(fd, e, buf, n, flags);
}

OSF_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(read)(fd, buf, n);
	return recv1(fd, e, buf, n, 0);
}

OSF_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(__read_chk)(fd, buf, n, buflen);
	return recv1_chk(fd, e, buf, n, buflen, 0);
}

OSF_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(readv)(fd, iov, iovcnt);
	return osf_conn_recv(fd, e, iov, iovcnt, 0);
}

OSF_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(recv)(fd, buf, n, flags);
	return recv1(fd, e, buf, n, flags);
}

OSF_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen,
			      int flags)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(__recv_chk)(fd, buf, n, buflen, flags);
	return recv1_chk(fd, e, buf, n, buflen, flags);
}

/* TCP reports no source address: an address buffer gets length 0. */
static OSF_SLOW ssize_t recvfrom_conn(int fd, struct osf_fdt_entry *e,
				       void *buf, size_t n, int flags,
				       socklen_t *alen)
{
	ssize_t r = recv1(fd, e, buf, n, flags);

	if (r >= 0 && alen)
		*alen = 0;
	return r;
}

OSF_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags,
			    struct sockaddr *sa, socklen_t *alen)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(recvfrom)(fd, buf, n, flags, sa, alen);
	return recvfrom_conn(fd, e, buf, n, flags, alen);
}

OSF_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen,
				  int flags, struct sockaddr *sa,
				  socklen_t *alen)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(__recvfrom_chk)(fd, buf, n, buflen, flags, sa,
					    alen);
	if (n > buflen)
		__chk_fail();
	return recvfrom_conn(fd, e, buf, n, flags, alen);
}

static OSF_SLOW ssize_t recvmsg_conn(int fd, struct osf_fdt_entry *e,
			    struct msghdr *msg, int flags)
{
	ssize_t r = osf_conn_recv(fd, e, msg->msg_iov, (int)msg->msg_iovlen,
				  flags);

	if (r >= 0) {
		msg->msg_namelen = 0;
		msg->msg_controllen = 0;
		msg->msg_flags = 0;
	}
	return r;
}

OSF_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(recvmsg)(fd, msg, flags);
	return recvmsg_conn(fd, e, msg, flags);
}

OSF_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen,
			int flags, struct timespec *timeout)
{
	struct osf_fdt_entry *e = conn_entry(fd);
	unsigned int i;

	if (likely(!e))
		return REAL(recvmmsg)(fd, vec, vlen, flags, timeout);
	/* As for TCP: the first message may block, later ones do not
	 * (MSG_WAITFORONE semantics are the same for a stream). */
	for (i = 0; i < vlen; i++) {
		ssize_t r = recvmsg_conn(fd, e, &vec[i].msg_hdr,
					 i ? (flags | MSG_DONTWAIT) : flags);
		if (r < 0) {
			if (i)
				break;
			return -1;
		}
		vec[i].msg_len = (unsigned int)r;
		if (r == 0)
			return (int)i + 1;
	}
	return (int)i;
}

OSF_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(write)(fd, buf, n);
	return send1(fd, e, buf, n, 0);
}

OSF_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(writev)(fd, iov, iovcnt);
	return osf_conn_send(fd, e, iov, iovcnt, 0);
}

OSF_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(send)(fd, buf, n, flags);
	return send1(fd, e, buf, n, flags);
}

/* TCP ignores a destination address on a connected socket. */
OSF_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
			  const struct sockaddr *sa, socklen_t alen)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(sendto)(fd, buf, n, flags, sa, alen);
	return send1(fd, e, buf, n, flags);
}

OSF_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(sendmsg)(fd, msg, flags);
	return osf_conn_send(fd, e, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

OSF_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen,
			int flags)
{
	struct osf_fdt_entry *e = conn_entry(fd);
	unsigned int i;

	if (likely(!e))
		return REAL(sendmmsg)(fd, vec, vlen, flags);
	for (i = 0; i < vlen; i++) {
		ssize_t r = osf_conn_send(fd, e, vec[i].msg_hdr.msg_iov,
					  (int)vec[i].msg_hdr.msg_iovlen,
					  flags);
		if (r < 0) {
			if (i)
				break;
			return -1;
		}
		vec[i].msg_len = (unsigned int)r;
	}
	return (int)i;
}

OSF_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	struct osf_fdt_entry *e = conn_entry(out_fd);

	if (likely(!e))
		return REAL(sendfile)(out_fd, in_fd, offset, count);
	return osf_conn_sendfile(out_fd, e, in_fd, offset, count);
}

OSF_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset,
			      size_t count)
{
	struct osf_fdt_entry *e = conn_entry(out_fd);

	if (likely(!e))
		return REAL(sendfile64)(out_fd, in_fd, offset, count);
	return osf_conn_sendfile(out_fd, e, in_fd, (off_t *)offset, count);
}
