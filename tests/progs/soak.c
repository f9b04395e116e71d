//go:build osf_make

/* soak: a long-run exerciser (tests/soak_test.go; make soak).
 *
 *   soak server HOST PORT [OPTS]   a single-threaded epoll server;
 *                                  prints "port N", serves until killed.
 *                                  It is level-triggered and reads each
 *                                  readable connection until EAGAIN;
 *                                  OPTS "et": edge-triggered; "once":
 *                                  one read per event (as redis does).
 *   soak client HOST PORT WAIT TEST SECONDS [SIZE [STALL]]
 *
 * WAIT is how the client waits for its socket: poll, select, epoll
 * (non-blocking socket; epoll waits before it reads, as event loops do,
 * with a look without waiting first) or block (blocking calls;
 * SO_RCVTIMEO and SO_SNDTIMEO bound the waits). TEST:
 *   pingpong  one keep-alive connection, SIZE-byte messages (default
 *             100) echoed back, for SECONDS
 *   stream    rounds of SIZE bytes (default 16 MiB) to the server, which
 *             answers their FNV-1a 64 and count, then SIZE bytes from it,
 *             each on a new connection, for SECONDS
 *   churn     connect, one SIZE-byte (default 100) echo, close, for SECONDS
 *
 * Every byte is a pattern checked at the receiver (byte at stream position
 * p with seed s: ((p + s) * 0x9e3779b97f4a7c15) >> 56). Any wait longer
 * than STALL seconds (default 10) is a stall: the client prints
 * "FAIL WAIT TEST: stall after N messages ..." and exits 1. It also fails
 * when its open fds grew over the run. On success it prints
 * "PASS WAIT TEST msgs=N bytes=B conns=C". */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *wait_kind = "?", *test = "?";
static uint64_t msgs, bytes, conns;

static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL %s %s: ", wait_kind, test);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" (msgs=%llu bytes=%llu conns=%llu)\n", (unsigned long long)msgs,
	       (unsigned long long)bytes, (unsigned long long)conns);
	fflush(stdout);
	exit(1);
}

static inline uint8_t pat(uint64_t p, uint64_t s)
{
	return (uint8_t)(((p + s) * 0x9e3779b97f4a7c15ULL) >> 56);
}

static void fill(uint8_t *b, size_t n, uint64_t pos, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(pos + i, seed);
}

static uint64_t fnv(uint64_t h, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

#define FNV0 0xcbf29ce484222325ULL

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own fd */
}

static void set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* ---- server ---------------------------------------------------------------- */

enum { M_NONE, M_ECHO, M_SINK, M_SOURCE };

struct sconn {
	int fd, mode, et;
	uint8_t hdr[9];
	int hlen;
	uint8_t buf[65536];
	size_t off, len; /* pending output */
	uint64_t h, count, remaining, pos;
	int eof;
};

static int ep, once;

static void watch(struct sconn *c, uint32_t ev)
{
	struct epoll_event e = {ev | (c->et ? EPOLLET : 0), {.ptr = c}};

	if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e) < 0) {
		perror("soak server: epoll_ctl MOD");
		exit(2);
	}
}

static void drop(struct sconn *c)
{
	close(c->fd);
	free(c);
}

/* flush writes pending output (and the source's pattern); 1 done, 0 would
 * block, -1 error. */
static int flush(struct sconn *c)
{
	for (;;) {
		ssize_t n;
		if (c->len == 0 && c->mode == M_SOURCE && c->remaining > 0) {
			size_t k = c->remaining < sizeof(c->buf) ? c->remaining : sizeof(c->buf);
			fill(c->buf, k, c->pos, 7);
			c->pos += k;
			c->remaining -= k;
			c->off = 0;
			c->len = k;
		}
		if (c->len == 0)
			return 1;
		n = send(c->fd, c->buf + c->off, c->len, MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		c->off += (size_t)n;
		c->len -= (size_t)n;
	}
}

static void serve(struct sconn *c, uint32_t ev)
{
	int r;

	if (c->len > 0 || (c->mode == M_SOURCE && c->remaining > 0)) {
		r = flush(c);
		if (r < 0) {
			drop(c);
			return;
		}
		if (r == 0) {
			if (!(ev & EPOLLOUT))
				watch(c, EPOLLOUT);
			return;
		}
		if (c->mode == M_SOURCE || c->eof) {
			drop(c);
			return;
		}
		watch(c, EPOLLIN);
	}
	for (int reads = 0; !once || reads < 1; reads++) { /* until EAGAIN */
		uint8_t in[65536];
		ssize_t n;
		size_t want = sizeof(in);
		if (c->mode == M_NONE)
			want = sizeof(c->hdr) - (size_t)c->hlen;
		n = recv(c->fd, c->mode == M_NONE ? c->hdr + c->hlen : in, want, 0);
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0) {
			drop(c);
			return;
		}
		if (n == 0) {
			if (c->mode == M_SINK) {
				uint64_t ans[2] = {c->h, c->count};
				memcpy(c->buf, ans, sizeof(ans));
				c->off = 0;
				c->len = sizeof(ans);
				c->eof = 1;
				r = flush(c);
				if (r == 0) {
					watch(c, EPOLLOUT);
					return;
				}
			}
			drop(c);
			return;
		}
		if (c->mode == M_NONE) {
			c->hlen += (int)n;
			if (c->hlen < (int)sizeof(c->hdr))
				continue;
			c->mode = c->hdr[0] == 'P' ? M_ECHO : c->hdr[0] == 'S' ? M_SINK : M_SOURCE;
			c->h = FNV0;
			if (c->mode == M_SOURCE) {
				memcpy(&c->remaining, c->hdr + 1, 8);
				r = flush(c);
				if (r != 0) {
					drop(c);
					return;
				}
				watch(c, EPOLLOUT);
				return;
			}
			continue;
		}
		if (c->mode == M_SINK) {
			c->h = fnv(c->h, in, (size_t)n);
			c->count += (uint64_t)n;
			continue;
		}
		memcpy(c->buf, in, (size_t)n);
		c->off = 0;
		c->len = (size_t)n;
		r = flush(c);
		if (r < 0) {
			drop(c);
			return;
		}
		if (r == 0) {
			watch(c, EPOLLOUT);
			return;
		}
	}
}

static int server(const char *host, const char *port, const char *opts)
{
	int et = strstr(opts, "et") != NULL;
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	int lfd, one = 1;
	struct epoll_event ev[64];

	once = strstr(opts, "once") != NULL;
	signal(SIGPIPE, SIG_IGN);
	a.sin_port = htons((uint16_t)atoi(port));
	inet_pton(AF_INET, host, &a.sin_addr);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 512) < 0) {
		perror("soak server: bind/listen");
		return 2;
	}
	getsockname(lfd, (struct sockaddr *)&a, &al);
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev[0].events = EPOLLIN;
	ev[0].data.ptr = NULL;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev[0]);
	printf("port %d\n", ntohs(a.sin_port));
	fflush(stdout);
	for (;;) {
		int n = epoll_wait(ep, ev, 64, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			perror("soak server: epoll_wait");
			return 2;
		}
		for (int i = 0; i < n; i++) {
			struct sconn *c = ev[i].data.ptr;
			if (c) {
				serve(c, ev[i].events);
				continue;
			}
			for (;;) {
				int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				struct epoll_event e;
				if (fd < 0)
					break;
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				c = calloc(1, sizeof(*c));
				c->fd = fd;
				c->et = et;
				e.events = EPOLLIN | (et ? EPOLLET : 0);
				e.data.ptr = c;
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
			}
		}
	}
}

/* ---- client -------------------------------------------------------------------- */

enum { W_POLL, W_SELECT, W_EPOLL, W_BLOCK };

static int wk, stall_s = 10, cep = -1;
static struct sockaddr_in srv;

/* await waits until fd is readable (out 0) or writable (out 1). */
static void await(int fd, int out, const char *what)
{
	int r;

	if (wk == W_POLL) {
		struct pollfd p = {fd, out ? POLLOUT : POLLIN, 0};
		do
			r = poll(&p, 1, stall_s * 1000);
		while (r < 0 && errno == EINTR);
	} else if (wk == W_SELECT) {
		fd_set s;
		struct timeval tv = {stall_s, 0};
		FD_ZERO(&s);
		FD_SET(fd, &s);
		do
			r = select(fd + 1, out ? NULL : &s, out ? &s : NULL, NULL, &tv);
		while (r < 0 && errno == EINTR);
	} else {
		/* As event loops do: a look without waiting, then the interest
		 * updated for what it waits for, then the wait. */
		struct epoll_event ev[8], e = {out ? EPOLLOUT : EPOLLIN, {.fd = fd}};
		r = epoll_wait(cep, ev, 8, 0);
		if (r == 0) {
			if (epoll_ctl(cep, EPOLL_CTL_MOD, fd, &e) < 0)
				fail("epoll_ctl: %s", strerror(errno));
			do
				r = epoll_wait(cep, ev, 8, stall_s * 1000);
			while (r < 0 && errno == EINTR);
		}
	}
	if (r < 0)
		fail("wait: %s", strerror(errno));
	if (r == 0)
		fail("stall: no %s for %d s while %s", out ? "room" : "data", stall_s, what);
}

static int dial(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct timeval tv = {stall_s, 0};

	if (fd < 0)
		fail("socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&srv, sizeof(srv)) < 0)
		fail("connect: %s", strerror(errno));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (wk == W_BLOCK) {
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	} else {
		set_nonblock(fd, 1);
	}
	if (wk == W_EPOLL) {
		struct epoll_event e = {EPOLLIN, {.fd = fd}};
		if (epoll_ctl(cep, EPOLL_CTL_ADD, fd, &e) < 0)
			fail("epoll_ctl ADD: %s", strerror(errno));
	}
	conns++;
	return fd;
}

static void hang_up(int fd)
{
	if (wk == W_EPOLL)
		epoll_ctl(cep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
}

static void put(int fd, const uint8_t *b, size_t n, const char *what)
{
	while (n > 0) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EAGAIN) {
			if (wk == W_BLOCK)
				fail("stall: send timed out after %d s while %s", stall_s, what);
			await(fd, 1, what);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			fail("send while %s: %s", what, r < 0 ? strerror(errno) : "0");
		b += r;
		n -= (size_t)r;
	}
}

/* get reads up to n bytes (exactly n unless eof_ok and the stream ends). */
static size_t get(int fd, uint8_t *b, size_t n, int eof_ok, const char *what)
{
	size_t got = 0;

	if (wk == W_EPOLL)
		await(fd, 0, what);
	while (got < n) {
		ssize_t r = recv(fd, b + got, n - got, 0);
		if (r < 0 && errno == EAGAIN) {
			if (wk == W_BLOCK)
				fail("stall: recv timed out after %d s while %s", stall_s, what);
			await(fd, 0, what);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			fail("recv while %s: %s", what, strerror(errno));
		if (r == 0) {
			if (eof_ok)
				break;
			fail("unexpected end of file while %s", what);
		}
		got += (size_t)r;
	}
	return got;
}

/* late_byte sends one byte on *(int *)arg 20 ms from now (the warm-up's). */
static void *late_byte(void *arg)
{
	uint8_t b = 'P';
	struct timespec d = {0, 20000000};

	nanosleep(&d, NULL);
	put(*(int *)arg, &b, 1, "warming up");
	return NULL;
}

static void header(int fd, char mode, uint64_t n)
{
	uint8_t h[9];

	h[0] = (uint8_t)mode;
	memcpy(h + 1, &n, 8);
	put(fd, h, sizeof(h), "sending the header");
}

static void check(const uint8_t *b, size_t n, uint64_t pos, uint64_t seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != pat(pos + i, seed))
			fail("byte %llu wrong while %s: %02x, want %02x",
			     (unsigned long long)(pos + i), what, b[i], pat(pos + i, seed));
}

static void pingpong(double end, size_t size)
{
	uint8_t *out = malloc(size), *in = malloc(size);
	uint64_t pos = 0, seed = (uint64_t)getpid();
	int fd = dial();

	header(fd, 'P', 0);
	while ((msgs & 1023) || now() < end) {
		fill(out, size, pos, seed);
		put(fd, out, size, "sending a ping");
		get(fd, in, size, 0, "waiting for the pong");
		check(in, size, pos, seed, "checking the pong");
		pos += size;
		msgs++;
		bytes += size;
	}
	hang_up(fd);
	free(out);
	free(in);
}

static void stream(double end, size_t size)
{
	static uint8_t b[65536];
	uint64_t seed = (uint64_t)getpid() * 31;

	while (now() < end) {
		uint64_t h = FNV0, ans[2], pos;
		int fd = dial();
		header(fd, 'S', 0);
		for (pos = 0; pos < size; pos += sizeof(b)) {
			size_t k = size - pos < sizeof(b) ? size - pos : sizeof(b);
			fill(b, k, pos, seed);
			h = fnv(h, b, k);
			put(fd, b, k, "streaming to the server");
		}
		shutdown(fd, SHUT_WR);
		if (get(fd, (uint8_t *)ans, sizeof(ans), 0, "waiting for the checksum") != sizeof(ans))
			fail("short answer");
		if (ans[0] != h || ans[1] != size)
			fail("server received %llu bytes with fnv %016llx, sent %llu with %016llx",
			     (unsigned long long)ans[1], (unsigned long long)ans[0],
			     (unsigned long long)size, (unsigned long long)h);
		hang_up(fd);
		bytes += size;
		msgs++;

		fd = dial();
		header(fd, 'R', size);
		for (pos = 0;;) {
			size_t k = get(fd, b, sizeof(b), 1, "streaming from the server");
			if (k == 0)
				break;
			check(b, k, pos, 7, "checking the stream from the server");
			pos += k;
		}
		if (pos != size)
			fail("received %llu bytes from the server, want %llu",
			     (unsigned long long)pos, (unsigned long long)size);
		hang_up(fd);
		bytes += size;
		msgs++;
	}
}

static void churn(double end, size_t size)
{
	uint8_t *out = malloc(size), *in = malloc(size);
	uint64_t seed = (uint64_t)getpid() * 17;

	while (now() < end) {
		int fd = dial();
		header(fd, 'P', 0);
		fill(out, size, msgs, seed);
		put(fd, out, size, "sending a request");
		get(fd, in, size, 0, "waiting for the answer");
		check(in, size, msgs, seed, "checking the answer");
		hang_up(fd);
		msgs++;
		bytes += size;
	}
	free(out);
	free(in);
}

static int client(char **argv, int argc)
{
	double secs, end;
	size_t size = 0;
	int fds0, fds1;

	signal(SIGPIPE, SIG_IGN);
	wait_kind = argv[2];
	test = argv[3];
	srv.sin_family = AF_INET;
	srv.sin_port = htons((uint16_t)atoi(argv[1]));
	if (inet_pton(AF_INET, argv[0], &srv.sin_addr) != 1)
		fail("bad address %s", argv[0]);
	wk = !strcmp(wait_kind, "poll")     ? W_POLL
	     : !strcmp(wait_kind, "select") ? W_SELECT
	     : !strcmp(wait_kind, "epoll")  ? W_EPOLL
	     : !strcmp(wait_kind, "block")  ? W_BLOCK
					    : -1;
	if (wk < 0)
		fail("unknown wait kind");
	secs = atof(argv[4]);
	if (argc > 5)
		size = (size_t)strtoull(argv[5], NULL, 0);
	if (argc > 6)
		stall_s = atoi(argv[6]);
	if (wk == W_EPOLL)
		cep = epoll_create1(EPOLL_CLOEXEC);
	/* Warm-up: osf's own descriptors exist from here on. A client that
	 * keeps connecting holds one segment made ahead for its next connect
	 * (3 fds, made while a blocking read waits, once per connect): so
	 * each warm-up read surely waits (its byte is sent 20 ms after the
	 * read began; an echo that came before the read looked left the
	 * segment to the run's first wait, 3 fds more than counted here).
	 * Connections until the count stays put, at least 3, at most 8. */
	for (int k = 0, last = -1; k < 8; k++) {
		uint8_t b[9] = {'P'};
		int fd = dial();
		pthread_t t;
		put(fd, b, sizeof(b), "warming up");
		if (pthread_create(&t, NULL, late_byte, &fd) != 0)
			fail("warming up: pthread_create");
		get(fd, b, 1, 0, "warming up");
		pthread_join(t, NULL);
		hang_up(fd);
		fds0 = count_fds();
		if (k >= 2 && fds0 == last)
			break;
		last = fds0;
	}
	conns = 0;
	end = now() + secs;
	if (!strcmp(test, "pingpong"))
		pingpong(end, size ? size : 100);
	else if (!strcmp(test, "stream"))
		stream(end, size ? size : 16 << 20);
	else if (!strcmp(test, "churn"))
		churn(end, size ? size : 100);
	else
		fail("unknown test");
	fds1 = count_fds();
	if (fds1 > fds0)
		fail("open fds grew from %d to %d", fds0, fds1);
	printf("PASS %s %s msgs=%llu bytes=%llu conns=%llu\n", wait_kind, test,
	       (unsigned long long)msgs, (unsigned long long)bytes,
	       (unsigned long long)conns);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 4 && !strcmp(argv[1], "server"))
		return server(argv[2], argv[3], argc > 4 ? argv[4] : "");
	if (argc >= 7 && !strcmp(argv[1], "client"))
		return client(argv + 2, argc - 2);
	fprintf(stderr, "usage: soak server HOST PORT [et] | "
			"soak client HOST PORT poll|select|epoll|block pingpong|stream|churn "
			"SECONDS [SIZE [STALL]]\n");
	return 2;
}
