//go:build osf_make

/* conn_fill.c: sendfile and splice on an offloaded connection: a file or
 * a pipe read straight into the send ring, and the receive ring peeked
 * into a pipe. Errno, signals and waiting as osf_conn_send's (conn_io.c)
 * and the kernel's for the same call.
 */
#include "conn_priv.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* fill_no_room handles a full ring in fill_from: 1 to look again, 0 to
 * stop (*err set when the call fails for want of room). */
static int fill_no_room(struct osf_conn *c, int fd, ssize_t sent, int *err)
{
	if (conn_send_over(c))
		return 0;
	if (c->nonblock) {
		osf_side_drain(&c->s, c->s.wfd, &c->s.me->tx_waiters);
		if (!osf_side_state(&c->s) && osf_side_arm_tx(&c->s))
			return 1;
		if (sent == 0 && !osf_side_state(&c->s))
			*err = EAGAIN;
		return 0;
	}
	*err = -conn_wait_room(c, fd);
	return *err == 0;
}

/* discard_from reads up to count bytes from in_fd (at *offset, which it
 * advances, or the file position) and drops them: what sendfile or splice
 * takes for the write a closed peer answers with a reset. splice: one read
 * that moves anything is enough (pipe_nb: none that would wait). */
static ssize_t discard_from(int in_fd, off_t *offset, size_t count, int splice,
			    int pipe_nb)
{
	char buf[16384];
	size_t got = 0;
	struct pollfd p = {in_fd, POLLIN, 0};

	if (splice && pipe_nb && count && REAL(poll)(&p, 1, 0) == 0)
		return OSF_FAIL(EAGAIN);

	while (got < count) {
		size_t want = count - got < sizeof(buf) ? count - got : sizeof(buf);
		ssize_t n = offset ? pread(in_fd, buf, want, *offset)
				   : REAL(read)(in_fd, buf, want);
		if (n <= 0) {
			if (n < 0 && got == 0)
				return -1;
			break;
		}
		got += (size_t)n;
		if (offset)
			*offset += n;
		if (splice)
			break;
	}
	return (ssize_t)got;
}

/* fill_end is conn_send_end for fill_from: the one write TCP takes after the
 * peer closed takes its bytes for real (they go nowhere), at most a ring's
 * worth, so that the count and the offset say what left the file. */
static ssize_t fill_end(struct osf_conn *c, int in_fd, off_t *offset,
			size_t count, int splice, int pipe_nb)
{
	uint32_t wrote = osf_side_state(&c->s) & OSF_CS_WROTE_GONE;
	ssize_t end = conn_send_end(c, count, 0);

	if (end >= 0 && !wrote &&
	    (osf_side_state(&c->s) & OSF_CS_WROTE_GONE))
		return discard_from(in_fd, offset,
				    count < c->s.size ? count : c->s.size,
				    splice, pipe_nb);
	return end;
}

/* fill_from reads from in_fd straight into the send ring: sendfile (a
 * file, from *offset or the file position, until count bytes are sent) or
 * splice from a pipe (splice: return after the first read that moved
 * anything; pipe_nb: the pipe may not make it wait). As in the kernel, the
 * connection's own O_NONBLOCK alone decides whether it waits for room.
 * One loop (about 85 lines) for the same reason as osf_conn_send: the
 * count sent and the offset advance with every step. */
static ssize_t fill_from(int fd, struct osf_fdt_entry *e, int in_fd,
			 off_t *offset, size_t count, int splice, int pipe_nb)
{
	struct osf_conn *c;
	ssize_t sent = 0, end;
	int err = 0;

	c = conn_get(fd, e);
	if (!c)
		return OSF_FAIL(EBADF);
	osf_side_peer_closing(&c->s, fd);
	end = fill_end(c, in_fd, offset, count, splice, pipe_nb);
	if (end != 1 || count == 0) {
		conn_put(c);
		return end != 1 ? end : 0;
	}
	__atomic_add_fetch(&c->s.me->send_calls, 1, __ATOMIC_RELAXED);
	if (unlikely(__atomic_load_n(&c->s.me->cork, __ATOMIC_RELAXED)))
		osf_conn_cork_flush(c, fd); /* the file follows what is held */
	while ((size_t)sent < count) {
		int64_t room;
		uint64_t head;
		size_t span, want;
		struct iovec iov[2];
		struct osf_ring_view v;
		ssize_t n;
		int lk = osf_side_lock_tx(&c->s, fd, c->nonblock);
		if (lk == OSF_LOCK_AGAIN) {
			if (sent == 0)
				err = EAGAIN;
			break;
		}
		if (lk < 0) {
			osf_side_broken(&c->s);
			break;
		}
		room = osf_side_tx_room(&c->s);
		if (room <= 0) {
			osf_seg_unlock(&c->s.me->tx_lock);
			if (room < 0) {
				osf_side_broken(&c->s);
				break;
			}
			if (!fill_no_room(c, fd, sent, &err))
				break;
			continue;
		}
		head = c->s.tx->head;
		want = (size_t)room < count - (size_t)sent ? (size_t)room
							    : count - (size_t)sent;
		v = osf_side_tx_view(&c->s);
		span = osf_ring_span(v.mask, head + v.bias, want);
		/* One read fills the room across the ring's wrap (a splice
		 * returns after its first read: it takes what the pipe holds,
		 * up to the room, as the kernel's does). */
		iov[0].iov_base = v.d + ((head + v.bias) & v.mask);
		iov[0].iov_len = span;
		iov[1].iov_base = v.d;
		iov[1].iov_len = want - span;
		if (splice && pipe_nb) {
			struct pollfd p = {in_fd, POLLIN, 0};
			if (REAL(poll)(&p, 1, 0) == 0) {
				osf_seg_unlock(&c->s.me->tx_lock);
				if (sent == 0)
					err = EAGAIN;
				break;
			}
		}
		if (offset)
			n = preadv(in_fd, iov, want > span ? 2 : 1, *offset + sent);
		else
			n = REAL(readv)(in_fd, iov, want > span ? 2 : 1);
		if (n <= 0) {
			osf_seg_unlock(&c->s.me->tx_lock);
			if (n < 0)
				err = errno;
			break;
		}
		__atomic_store_n(&c->s.tx->head, head + (uint64_t)n,
				 __ATOMIC_RELEASE);
		osf_seg_unlock(&c->s.me->tx_lock);
		conn_wake_reader(c, fd);
		sent += n;
		if (splice)
			break;
	}
	if (offset)
		*offset += sent;
	if (sent == 0 && conn_send_over(c) && !err) {
		end = fill_end(c, in_fd, offset, count, splice, pipe_nb);
		conn_put(c);
		return end == 1 ? OSF_FAIL(EPIPE) : end;
	}
	conn_put(c);
	if (sent == 0 && err)
		return OSF_FAIL(err);
	return sent;
}

ssize_t osf_conn_sendfile(int fd, struct osf_fdt_entry *e, int in_fd,
			  off_t *offset, size_t count)
{
	struct stat st;

	if (REAL(fcntl)(in_fd, F_GETFL, NULL) < 0)
		return -1; /* EBADF, as the kernel says first */
	if (fstat(in_fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
		return OSF_FAIL(EINVAL);
	return fill_from(fd, e, in_fd, offset, count, 0, 0);
}

/* osf_conn_splice: from a pipe, the bytes are read straight into the ring;
 * to a pipe, they are peeked at, written to the pipe, and only the bytes
 * the pipe took are consumed, so that a full pipe never costs data. As in
 * the kernel, SPLICE_F_NONBLOCK (or the pipe's O_NONBLOCK) concerns the
 * pipe; the connection waits according to its own O_NONBLOCK. Without
 * O_NONBLOCK on the pipe, a SPLICE_F_NONBLOCK call writes at most PIPE_BUF
 * bytes once poll says the pipe has room, which a pipe then takes whole. */
ssize_t osf_conn_splice(int fd, struct osf_fdt_entry *e, int pfd, int to_pipe,
			size_t len, unsigned int flags)
{
	int pfl = REAL(fcntl)(pfd, F_GETFL, NULL);
	int pipe_nb = (flags & SPLICE_F_NONBLOCK) || (pfl >= 0 && (pfl & O_NONBLOCK));
	size_t chunk = len < 65536 ? len : 65536;
	struct iovec iov;
	ssize_t n, w;
	char *buf;

	if (!to_pipe)
		return fill_from(fd, e, pfd, NULL, len, 1, pipe_nb);
	buf = malloc(chunk);
	if (!buf)
		return OSF_FAIL(ENOMEM);
	iov.iov_base = buf;
	iov.iov_len = chunk;
	n = conn_peek_raw(fd, e, &iov, 1);
	if (n > 0) {
		struct pollfd p = {pfd, POLLOUT, 0};
		if (pipe_nb && !(pfl & O_NONBLOCK)) {
			if (n > PIPE_BUF)
				n = PIPE_BUF;
			if (REAL(poll)(&p, 1, 0) == 0) {
				free(buf);
				return OSF_FAIL(EAGAIN);
			}
		}
		w = REAL(write)(pfd, buf, (size_t)n);
		if (w > 0) { /* consume what the pipe took, copying nothing */
			iov.iov_len = (size_t)w;
			(void)osf_conn_recv(fd, e, &iov, 1, MSG_DONTWAIT | MSG_TRUNC);
		}
		n = w;
	}
	free(buf);
	return n;
}
