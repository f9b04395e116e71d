//go:build osf_make

/* server.c: osfperf server: accept connections and run the test each
 * client's header asks for. */
#include "osfperf.h"

/* ---- server ----------------------------------------------------------- */

static void serve_pingpong(int fd, const struct hdr *h)
{
	uint8_t *buf = xmalloc(h->size);

	for (;;) {
		ssize_t n = read_full(fd, buf, h->size);

		if (n < 0)
			err(1, "pingpong: read");
		if (n == 0)
			break;
		if ((size_t)n < h->size)
			errx(1, "pingpong: client closed the connection inside a message");
		if (write_full(fd, buf, h->size) < 0)
			err(1, "pingpong: write");
	}
	free(buf);
}

static void serve_stream(int fd, const struct hdr *h)
{
	uint8_t *buf = xmalloc(h->size), reply[REPLY_SIZE];
	uint64_t sum = 0;
	int64_t n = read_hashed(fd, buf, h->size, h->total, (h->flags & FLAG_NOVERIFY) ? NULL : &sum);

	if (n < 0)
		err(1, "stream: read");
	if ((uint64_t)n < h->total)
		errx(1, "stream: client closed the connection after %" PRId64 " of %" PRIu64 " bytes",
		     n, h->total);
	put_be(reply, (uint64_t)n, 8);
	put_be(reply + 8, sum, 8);
	if (write_full(fd, reply, sizeof reply) < 0)
		err(1, "stream: send reply");
	free(buf);
}

static void serve_rstream(int fd, const struct hdr *h)
{
	uint8_t *pat = pattern_new(h->size);

	if (write_pattern(fd, pat, h->total, h->size) < 0)
		err(1, "rstream: write");
	free(pat);
}

/* serve_conn runs one client's test; any error ends the process with status 1. */
static void serve_conn(int fd)
{
	struct hdr h;

	if (set_nodelay(fd) < 0)
		err(1, "server: set TCP_NODELAY");
	if (!recv_hdr(fd, &h))
		return;
	if ((h.flags & FLAG_BLOCKING) && set_blocking(fd) < 0)
		err(1, "server: make socket blocking");
	switch (h.test) {
	case TEST_PINGPONG:
		serve_pingpong(fd, &h);
		break;
	case TEST_STREAM:
		serve_stream(fd, &h);
		break;
	case TEST_RSTREAM:
		serve_rstream(fd, &h);
		break;
	}
	close(fd);
}

/* accept_conn waits for the next connection; it returns a nonblocking
 * socket. accept and fcntl rather than accept4: rsocket's preload library
 * (librspreload, compared with osf in make bench-rdma) has no accept4. */
static int accept_conn(int lfd)
{
	for (;;) {
		int fd = accept(lfd, NULL, NULL);

		if (fd >= 0) {
			int fl = fcntl(fd, F_GETFL);

			if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
				err(1, "fcntl");
			return fd;
		}
		if (errno != EINTR && errno != ECONNABORTED)
			err(1, "accept");
	}
}

int server_main(const struct opts *o)
{
	int lfd = listen_on(o->addr, o->port);

	print_listening(lfd);
	if (o->once) {
		int fd = accept_conn(lfd);

		close(lfd);
		serve_conn(fd);
		return 0;
	}
	/* Fork per connection; children are reaped by the kernel. */
	if (sigaction(SIGCHLD, &(struct sigaction){ .sa_handler = SIG_IGN }, NULL) < 0)
		err(1, "sigaction SIGCHLD");
	for (;;) {
		int fd = accept_conn(lfd);
		pid_t pid = fork();

		if (pid == 0) {
			close(lfd);
			serve_conn(fd);
			exit(0);
		}
		if (pid < 0)
			warn("fork");
		close(fd);
	}
}
