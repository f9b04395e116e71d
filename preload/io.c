//go:build osf_make

/* io.c: the read and write hooks. For an fd osf does not own, each is a
 * table lookup and a tail call into libc; an fd with an operations table
 * (ops.h: an offloaded connection's ring data path, conn_io.c; a socket
 * waiting for a gateway, gateway.c) goes to its table's recv or send. */
#include "conn.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>

#ifndef UIO_MAXIOV
#define UIO_MAXIOV 1024 /* linux/uio.h: the most messages recvmmsg takes */
#endif

extern void __chk_fail(void) __attribute__((noreturn));

/* conn_entry returns fd's entry when it is an offloaded connection. */
static inline struct osf_fdt_entry *conn_entry(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	return (e && osf_kind_is_conn(e->kind)) ? e : NULL;
}

/* io_entry returns fd's entry when it has an operations table (ops.h):
 * the read and write calls go through the table's recv and send. */
static inline struct osf_fdt_entry *io_entry(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	return likely(!e || !__atomic_load_n(&e->ops, __ATOMIC_RELAXED)) ? NULL : e;
}

/* io_kernel is recv (send) on fd as the kernel's, for a call whose fd's
 * table went away after io_entry looked (a gateway's connect settled on
 * another thread, or a close raced with the call). */
static __attribute__((noinline, cold)) ssize_t
io_kernel(int fd, const struct iovec *iov, int iovcnt, int flags, int send)
{
	struct msghdr m;

	memset(&m, 0, sizeof(m));
	m.msg_iov = (struct iovec *)iov;
	m.msg_iovlen = (size_t)iovcnt;
	return send ? REAL(sendmsg)(fd, &m, flags) : REAL(recvmsg)(fd, &m, flags);
}

/* io_recv and io_send call the recv and send of e's table. */
static inline ssize_t io_recv(int fd, struct osf_fdt_entry *e,
			      const struct iovec *iov, int iovcnt, int flags)
{
	const struct osf_fd_ops *o = osf_ops_of(e);

	return likely(o) ? o->recv(fd, e, iov, iovcnt, flags)
			 : io_kernel(fd, iov, iovcnt, flags, 0);
}

static inline ssize_t io_send(int fd, struct osf_fdt_entry *e,
			      const struct iovec *iov, int iovcnt, int flags)
{
	const struct osf_fd_ops *o = osf_ops_of(e);

	return likely(o) ? o->send(fd, e, iov, iovcnt, flags)
			 : io_kernel(fd, iov, iovcnt, flags, 1);
}

/* iov_bytes is the length of an iovec array (no overflow check: only
 * compared with what a successful send took). */
static size_t iov_bytes(const struct iovec *iov, size_t cnt)
{
	size_t n = 0;

	while (cnt-- > 0)
		n += iov[cnt].iov_len;
	return n;
}

/* The offloaded paths live out of line, so that each hook's pass-through
 * is a check and a tail jump into libc, with no stack frame. */
#define OSF_SLOW __attribute__((noinline))

static OSF_SLOW ssize_t recv1(int fd, struct osf_fdt_entry *e, void *buf,
			       size_t n, int flags)
{
	struct iovec v = {buf, n};

	return io_recv(fd, e, &v, 1, flags);
}

static OSF_SLOW ssize_t send1(int fd, struct osf_fdt_entry *e, const void *buf,
			       size_t n, int flags)
{
	struct iovec v = {(void *)buf, n};

	return io_send(fd, e, &v, 1, flags);
}

/* iov_array_bad answers an iovec array the kernel could not copy in
 * (import_iovec): EFAULT, never a crash (fault.c); a count out of range is
 * left to the call's own check. -1 with errno, else 0. */
static OSF_SLOW int iov_array_bad(const struct iovec *iov, long cnt)
{
	osf_fault_arm();
	if (cnt > 0 && cnt <= UIO_MAXIOV && osf_probe_rd(iov, (size_t)cnt * sizeof(*iov)) < 0)
		return OSF_FAIL(EFAULT);
	return 0;
}

/* read1 and readv1: read(2) of 0 bytes returns 0 at once, where
 * recv(2) of 0 bytes waits for data. */
static OSF_SLOW ssize_t read1(int fd, struct osf_fdt_entry *e, void *buf,
			       size_t n)
{
	return n ? recv1(fd, e, buf, n, 0) : 0;
}

static OSF_SLOW ssize_t readv1(int fd, struct osf_fdt_entry *e,
				const struct iovec *iov, int iovcnt)
{
	int i;

	if (iov_array_bad(iov, iovcnt))
		return -1;
	for (i = 0; i < iovcnt && iov && !iov[i].iov_len; i++)
		;
	if (iovcnt >= 0 && iovcnt <= IOV_MAX && i == iovcnt)
		return 0;
	return io_recv(fd, e, iov, iovcnt, 0);
}

static OSF_SLOW ssize_t recv1_chk(int fd, struct osf_fdt_entry *e, void *buf,
				   size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		__chk_fail();
	return flags < 0 ? read1(fd, e, buf, n) : recv1(fd, e, buf, n, flags);
}

OSF_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(read)(fd, buf, n);
	return read1(fd, e, buf, n);
}

OSF_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(__read_chk)(fd, buf, n, buflen);
	return recv1_chk(fd, e, buf, n, buflen, -1); /* -1: read */
}

OSF_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(readv)(fd, iov, iovcnt);
	return readv1(fd, e, iov, iovcnt);
}

OSF_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(recv)(fd, buf, n, flags);
	return recv1(fd, e, buf, n, flags);
}

OSF_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen,
			      int flags)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(__recv_chk)(fd, buf, n, buflen, flags);
	return recv1_chk(fd, e, buf, n, buflen, flags);
}

/* TCP reports no source address: an address buffer gets length 0, as
 * the kernel's move_addr_to_user writes it after the data was taken (a
 * bad length pointer is EFAULT then, a negative length EINVAL); without
 * an address buffer the length is not touched. */
static OSF_SLOW ssize_t recvfrom_conn(int fd, struct osf_fdt_entry *e,
				       void *buf, size_t n, int flags,
				       struct sockaddr *sa, socklen_t *alen)
{
	ssize_t r = recv1(fd, e, buf, n, flags);

	if (r < 0 || !sa)
		return r;
	return osf_addr_out(sa, alen, NULL, 0) ?: r;
}

OSF_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags,
			    struct sockaddr *sa, socklen_t *alen)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(recvfrom)(fd, buf, n, flags, sa, alen);
	return recvfrom_conn(fd, e, buf, n, flags, sa, alen);
}

OSF_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen,
				  int flags, struct sockaddr *sa,
				  socklen_t *alen)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(__recvfrom_chk)(fd, buf, n, buflen, flags, sa,
					    alen);
	if (n > buflen)
		__chk_fail();
	return recvfrom_conn(fd, e, buf, n, flags, sa, alen);
}

/* msg_iovlen_bad: a message with more than UIO_MAXIOV iovecs is EMSGSIZE
 * for sendmsg and recvmsg (the kernel's copy_msghdr_from_user), where
 * readv and writev say EINVAL; msg_iovlen is a size_t, never cut to int. */
static int msg_iovlen_bad(const struct msghdr *msg)
{
	return msg->msg_iovlen > UIO_MAXIOV ? OSF_FAIL(EMSGSIZE) : 0;
}

/* msg_bad answers a message the kernel could not copy in before it moves
 * a byte (copy_msghdr_from_user; a send's address, move_addr_to_kernel,
 * and control): the header (a receive writes it back), then its iovec
 * array, a send's name (longer than a sockaddr_storage is cut to it, as
 * the kernel does) and control. EFAULT, never a crash: -1 with errno,
 * else 0 (then msg_iovlen_bad). */
static OSF_SLOW int msg_bad(const struct msghdr *msg, int send)
{
	size_t nl;

	osf_fault_arm();
	if ((send ? osf_probe_rd(msg, sizeof(*msg)) : osf_probe_wr((void *)msg, sizeof(*msg))) < 0)
		return OSF_FAIL(EFAULT);
	if (msg_iovlen_bad(msg) || iov_array_bad(msg->msg_iov, (long)msg->msg_iovlen))
		return -1;
	if (!send)
		return 0;
	if ((int)msg->msg_namelen < 0)
		return OSF_FAIL(EINVAL);
	nl = msg->msg_namelen < sizeof(struct sockaddr_storage) ? msg->msg_namelen
								 : sizeof(struct sockaddr_storage);
	if (msg->msg_name && nl && osf_probe_rd(msg->msg_name, nl) < 0)
		return OSF_FAIL(EFAULT);
	if (msg->msg_controllen > INT_MAX)
		return OSF_FAIL(ENOBUFS);
	if (msg->msg_controllen && osf_probe_rd(msg->msg_control, msg->msg_controllen) < 0)
		return OSF_FAIL(EFAULT);
	return 0;
}

static OSF_SLOW ssize_t recvmsg_conn(int fd, struct osf_fdt_entry *e,
			    struct msghdr *msg, int flags)
{
	ssize_t r;

	if (msg_bad(msg, 0))
		return -1;
	if (unlikely(flags & MSG_ERRQUEUE) && osf_kind_is_conn(e->kind))
		return osf_conn_errqueue(fd, e, msg, flags);
	r = io_recv(fd, e, msg->msg_iov, (int)msg->msg_iovlen, flags);

	if (r >= 0 && osf_kind_is_conn(e->kind)) {
		msg->msg_namelen = 0;
		msg->msg_flags = 0;
		osf_conn_cmsgs(fd, e, msg, r);
	}
	return r;
}

OSF_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e)) {
		if (unlikely(msg && msg->msg_control &&
			     msg->msg_controllen >= CMSG_SPACE(sizeof(int)) &&
			     osf.ready && !osf.disabled))
			return osf_handoff_recvmsg(fd, msg, flags);
		return REAL(recvmsg)(fd, msg, flags);
	}
	return recvmsg_conn(fd, e, msg, flags);
}

/* recvmmsg_conn is the kernel's do_recvmmsg for a stream: it fills up to
 * vlen messages, each recvmsg blocking as the socket does (only
 * MSG_WAITFORONE makes the later ones nonblocking), checks the timeout
 * between messages only, and writes the time left back. */
static OSF_SLOW int recvmmsg_conn(int fd, struct osf_fdt_entry *e,
				  struct mmsghdr *vec, unsigned int vlen,
				  int flags, struct timespec *timeout)
{
	struct timespec end, now;
	unsigned int i;
	int err = 0;

	if (timeout) {
		if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 ||
		    timeout->tv_nsec >= 1000000000L)
			return OSF_FAIL(EINVAL);
		clock_gettime(CLOCK_MONOTONIC, &now);
		end.tv_sec = now.tv_sec + timeout->tv_sec;
		end.tv_nsec = now.tv_nsec + timeout->tv_nsec;
		if (end.tv_nsec >= 1000000000L) {
			end.tv_sec++;
			end.tv_nsec -= 1000000000L;
		}
	}
	if (vlen > UIO_MAXIOV)
		vlen = UIO_MAXIOV;
	for (i = 0; i < vlen;) {
		ssize_t r = recvmsg_conn(fd, e, &vec[i].msg_hdr,
					 flags & ~MSG_WAITFORONE);
		if (r < 0) {
			err = errno;
			break;
		}
		vec[i++].msg_len = (unsigned int)r;
		if (flags & MSG_WAITFORONE)
			flags |= MSG_DONTWAIT;
		if (timeout) {
			long ns;
			clock_gettime(CLOCK_MONOTONIC, &now);
			ns = (end.tv_sec - now.tv_sec) * 1000000000L +
			     (end.tv_nsec - now.tv_nsec);
			if (ns <= 0) {
				timeout->tv_sec = timeout->tv_nsec = 0;
				break;
			}
			timeout->tv_sec = ns / 1000000000L;
			timeout->tv_nsec = ns % 1000000000L;
		}
	}
	if (i == 0 && err)
		return OSF_FAIL(err);
	return (int)i;
}

OSF_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen,
			int flags, struct timespec *timeout)
{
	struct osf_fdt_entry *e = conn_entry(fd);

	if (likely(!e))
		return REAL(recvmmsg)(fd, vec, vlen, flags, timeout);
	return recvmmsg_conn(fd, e, vec, vlen, flags, timeout);
}

OSF_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(write)(fd, buf, n);
	return send1(fd, e, buf, n, 0);
}

OSF_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(writev)(fd, iov, iovcnt);
	return iov_array_bad(iov, iovcnt) ?: io_send(fd, e, iov, iovcnt, 0);
}

OSF_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(send)(fd, buf, n, flags);
	return send1(fd, e, buf, n, flags);
}

/* sendto_addr_bad checks a sendto's address as the kernel's
 * move_addr_to_kernel does before TCP ignores it on a connected socket:
 * a length beyond a sockaddr_storage or negative is EINVAL, an address
 * that cannot be read EFAULT (1, errno set), else 0. */
static OSF_SLOW int sendto_addr_bad(const struct sockaddr *sa, socklen_t alen)
{
	if ((int)alen < 0 || alen > sizeof(struct sockaddr_storage)) {
		errno = EINVAL;
		return 1;
	}
	osf_fault_arm();
	if (alen && osf_probe_rd(sa, alen) < 0) {
		errno = EFAULT;
		return 1;
	}
	return 0;
}

OSF_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
			  const struct sockaddr *sa, socklen_t alen)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e))
		return REAL(sendto)(fd, buf, n, flags, sa, alen);
	if (unlikely(sa != NULL) && sendto_addr_bad(sa, alen))
		return -1;
	return send1(fd, e, buf, n, flags);
}

static OSF_SLOW ssize_t sendmsg_conn(int fd, struct osf_fdt_entry *e,
				     const struct msghdr *msg, int flags)
{
	return msg_bad(msg, 1) ?: io_send(fd, e, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

OSF_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct osf_fdt_entry *e = io_entry(fd);

	if (likely(!e)) {
		/* osf_fdt_offloaded first: the fault handler is armed then,
		 * and a bad msg is the kernel's EFAULT, never a crash. */
		if (unlikely(osf_fdt_offloaded() && osf_probe_rd(msg, sizeof(*msg)) == 0 &&
			     msg->msg_control && msg->msg_controllen))
			return osf_handoff_sendmsg(fd, msg, flags);
		return REAL(sendmsg)(fd, msg, flags);
	}
	return sendmsg_conn(fd, e, msg, flags);
}

OSF_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen,
			int flags)
{
	struct osf_fdt_entry *e = conn_entry(fd);
	unsigned int i;

	if (likely(!e))
		return REAL(sendmmsg)(fd, vec, vlen, flags);
	if (vlen > UIO_MAXIOV) /* as __sys_sendmmsg */
		vlen = UIO_MAXIOV;
	for (i = 0; i < vlen; i++) {
		struct msghdr *m = &vec[i].msg_hdr;
		ssize_t r = sendmsg_conn(fd, e, m, flags);
		if (r < 0) {
			if (i)
				break;
			return -1;
		}
		vec[i].msg_len = (unsigned int)r;
		/* A message sent in part ends the batch, as in the kernel. */
		if ((size_t)r < iov_bytes(m->msg_iov, m->msg_iovlen)) {
			i++;
			break;
		}
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

/* splice: the kernel cannot move bytes into or out of the rings, so a
 * splice with an offloaded connection on one side goes through osf
 * (osf_conn_splice); the argument checks are the kernel's, in its order. */
static OSF_SLOW ssize_t splice_conn(int in, loff_t *off_in, int out,
				    loff_t *off_out, size_t len,
				    unsigned int flags, int in_is_conn)
{
	int conn = in_is_conn ? in : out, pfd = in_is_conn ? out : in;
	struct stat st;

	if (flags & ~(unsigned)(SPLICE_F_MOVE | SPLICE_F_NONBLOCK |
				SPLICE_F_MORE | SPLICE_F_GIFT))
		return OSF_FAIL(EINVAL);
	if (fstat(pfd, &st) < 0)
		return -1;
	if (!S_ISFIFO(st.st_mode))
		return OSF_FAIL(EINVAL); /* neither end is a pipe */
	if (in_is_conn ? off_out : off_in)
		return OSF_FAIL(ESPIPE); /* an offset on the pipe */
	if (in_is_conn ? off_in : off_out)
		return OSF_FAIL(EINVAL); /* a socket has no position */
	if (len == 0)
		return 0;
	return osf_conn_splice(conn, osf_fdt_lookup(conn), pfd, in_is_conn, len,
			       flags);
}

OSF_EXPORT ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out,
			  size_t len, unsigned int flags)
{
	struct osf_fdt_entry *ei = conn_entry(in), *eo = conn_entry(out);

	if (likely(!ei && !eo))
		return REAL(splice)(in, off_in, out, off_out, len, flags);
	if (ei && eo)
		return OSF_FAIL(EINVAL);
	return splice_conn(in, off_in, out, off_out, len, flags, ei != NULL);
}

OSF_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset,
			      size_t count)
{
	struct osf_fdt_entry *e = conn_entry(out_fd);

	if (likely(!e))
		return REAL(sendfile64)(out_fd, in_fd, offset, count);
	return osf_conn_sendfile(out_fd, e, in_fd, (off_t *)offset, count);
}
