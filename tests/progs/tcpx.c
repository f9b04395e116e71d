//go:build osf_make

/* tcpx: TCP exercisers for the integration tests, a server and a client
 * per mode, each checking every byte it receives.
 *
 *   tcpx server [-w] [-n N] MODE ADDR PORT [SIZE]
 *   tcpx client [-w] [-d] [-m poll|select|epoll] [-c CONNS] [-k MSGS]
 *               [-M MAXSIZE] [-S SEED] [-t SECONDS] MODE ADDR PORT [SIZE]
 *
 * ADDR is an IPv4 or IPv6 address; "::" listens dual-stack (IPV6_V6ONLY
 * 0), and a client given "::ffff:a.b.c.d" is an AF_INET6 socket. PORT 0
 * makes the server pick one. The server prints "listening PORT" once it
 * listens, and serves N connections (default 1; 0: until killed) one after
 * the other, except in echo mode, which serves them all at once.
 *
 * Every connected socket is reported as "transport unix|tcp|none": unix
 * when its inode is in /proc/net/unix (offloaded by osf), tcp when it is in
 * /proc/net/tcp or tcp6 (kernel TCP). With -w a side prints "ready" after
 * it is connected (client) or has accepted (server) and waits for a line
 * on standard input before going on, so that a test can look at it.
 *
 * Streams are a pattern of period 65521 (prime) from a seed, so a lost,
 * repeated or reordered block of any power-of-two size is detected; the
 * client sends pattern 1, the server pattern 2. "hash" is a 64-bit hash of
 * a whole stream, printed by sender and receiver.
 *
 * Modes:
 *   bidir SIZE  both send SIZE bytes and receive SIZE bytes at the same
 *               time (a thread sends), then shut down writing; each checks
 *               the stream it receives and the end of file after it.
 *               Prints "sent N hash H", "received N hash H pattern ok",
 *               "eof yes".
 *   echo        server: an edge-triggered epoll echo server (nonblocking,
 *               accept loop, output buffer per connection), closing a
 *               connection after echoing everything its client sent before
 *               its end of file. client: CONNS connections at once, each
 *               sending MSGS messages of random sizes 1..MAXSIZE (from
 *               SEED; one message of 1 byte and one of MAXSIZE included)
 *               and reading each echo back before the next message, driven
 *               by poll, select or epoll (-m); then it shuts down writing and
 *               waits for the end of file, all within SECONDS (-t, default
 *               60). Prints "transports unix=U tcp=T" once connected and
 *               "echoed M messages B bytes pattern ok". The server listens
 *               with a backlog of 1024: osf serves a connection that finds
 *               the companion's backlog full over kernel TCP.
 *   halfclose SIZE  client: sends SIZE bytes, shuts down writing, reads the
 *               server's answer to EOF. server: reads to EOF, answers
 *               "received N hash H pattern ok|BAD\n" and SIZE bytes of its
 *               pattern, closes.
 *   reset       client: sends "unread" (the server never reads it), reads
 *               the server's "hello", then reads on: ECONNRESET, then 0; a
 *               write then fails with EPIPE (and SIGPIPE). server: sends
 *               "hello", waits until the client's bytes are there, closes.
 *   epipe       client: waits for the end of file from a server that closed
 *               at once (server mode "close"), writes (accepted), writes
 *               again (EPIPE, SIGPIPE counted by a handler; -d: default
 *               disposition, so SIGPIPE kills the client), then with
 *               MSG_NOSIGNAL (EPIPE, no signal).
 *   nbpartial SIZE  client: nonblocking connect (EINPROGRESS or 0, then
 *               POLLOUT, SO_ERROR 0), then SIZE bytes in nonblocking writes
 *               of 100003 bytes, waiting with poll after each EAGAIN; it
 *               reports whether it saw a partial write and EAGAIN. server
 *               mode "sink": reads slowly to EOF, checks, answers
 *               "received N pattern ok".
 *
 * Exit status 0 when every check passed, 1 when one failed (the line says
 * which), 2 for usage or set-up errors.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "progs.h"

static int failed;

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void die(const char *what)
{
	out("SETUP %s: %s", what, strerrorname_np(errno) ? strerrorname_np(errno) : "?");
	exit(2);
}

static void check(int ok, const char *what)
{
	if (!ok) {
		out("FAIL %s", what);
		failed = 1;
	}
}

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- patterns and hashes ----------------------------------------------------- */

#define PERIOD 65521
static unsigned char pat[3][2 * PERIOD]; /* [seed]: the period, twice */

static void pat_init(void)
{
	int s, i;

	for (s = 1; s <= 2; s++) {
		uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)s;
		for (i = 0; i < PERIOD; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			pat[s][i] = pat[s][i + PERIOD] = (unsigned char)(x >> 29);
		}
	}
}

/* pat_at returns the pattern of seed s from stream offset off: at least
 * min(n, PERIOD) contiguous bytes. */
static const unsigned char *pat_at(int s, uint64_t off)
{
	return pat[s] + off % PERIOD;
}

static int pat_ok(int s, const unsigned char *b, size_t n, uint64_t off)
{
	while (n > 0) {
		size_t k = n < PERIOD ? n : PERIOD;
		if (memcmp(b, pat_at(s, off), k) != 0)
			return 0;
		b += k;
		off += k;
		n -= k;
	}
	return 1;
}

/* A hash of a stream that does not depend on how it was cut. */
struct hash {
	uint64_t h, n;
	unsigned char tail[8];
	unsigned nt;
};

static inline uint64_t mix(uint64_t h, uint64_t w)
{
	h ^= w;
	h *= 0x9fb21c651e98df25ULL;
	return h ^ (h >> 29);
}

static void hash_init(struct hash *x)
{
	memset(x, 0, sizeof *x);
	x->h = 0xcbf29ce484222325ULL;
}

static void hash_add(struct hash *x, const unsigned char *b, size_t n)
{
	x->n += n;
	while (x->nt && n) {
		x->tail[x->nt++] = *b++;
		n--;
		if (x->nt == 8) {
			uint64_t w;
			memcpy(&w, x->tail, 8);
			x->h = mix(x->h, w);
			x->nt = 0;
		}
	}
	if (x->nt)
		return; /* b ended inside the word: the tail keeps it */
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, b, 8);
		x->h = mix(x->h, w);
		b += 8;
		n -= 8;
	}
	memcpy(x->tail, b, n);
	x->nt = (unsigned)n;
}

static uint64_t hash_sum(const struct hash *x)
{
	uint64_t w = 0;

	memcpy(&w, x->tail, x->nt);
	return mix(mix(x->h, w), x->n);
}

/* ---- sockets ------------------------------------------------------------------ */

static int parse_addr(const char *s, int port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET, s, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		((struct sockaddr_in *)ss)->sin_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		*len = sizeof(struct sockaddr_in);
		return AF_INET;
	}
	if (inet_pton(AF_INET6, s, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
		*len = sizeof(struct sockaddr_in6);
		return AF_INET6;
	}
	errno = EINVAL;
	die("address");
	return -1;
}

static int in_table(const char *path, int field, unsigned long ino)
{
	char line[512];
	int found = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	if (fgets(line, sizeof line, f))
		while (!found && fgets(line, sizeof line, f)) {
			char *save = NULL, *tok = strtok_r(line, " \t\n", &save);
			for (int i = 0; tok && i < field; i++)
				tok = strtok_r(NULL, " \t\n", &save);
			found = tok && strtoul(tok, NULL, 10) == ino;
		}
	fclose(f);
	return found;
}

static const char *transport(int fd)
{
	char p[64], l[64];
	unsigned long ino = 0;
	ssize_t n;

	snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
	n = readlink(p, l, sizeof l - 1);
	if (n <= 0)
		return "none";
	l[n] = 0;
	if (sscanf(l, "socket:[%lu]", &ino) != 1)
		return "none";
	if (in_table("/proc/net/unix", 6, ino))
		return "unix";
	if (in_table("/proc/net/tcp", 9, ino) || in_table("/proc/net/tcp6", 9, ino))
		return osf_offloaded(fd) ? "kfd" : "tcp";
	return "none";
}

/* shm_word names the offloaded connections counted in a "transports"
 * line: "kfd" when any was (OSF_SHM_KFD=1), else "unix". */
static int kfd_seen;

static const char *shm_word(void) { return kfd_seen ? "kfd" : "unix"; }

/* is_shm counts fd's transport: 1 when offloaded. */
static int is_shm(int fd)
{
	const char *t = transport(fd);

	kfd_seen |= strcmp(t, "kfd") == 0;
	return strcmp(t, "unix") == 0 || strcmp(t, "kfd") == 0;
}

static int wait_line;

static void maybe_wait(void)
{
	char line[64];

	if (!wait_line)
		return;
	out("ready");
	if (!fgets(line, sizeof line, stdin))
		die("stdin");
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl");
}

static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = {fd, ev, 0};
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r;
}

/* send_all sends n bytes of pattern s from stream offset off. */
static int send_all(int fd, int s, uint64_t off, uint64_t n, struct hash *h)
{
	while (n > 0) {
		size_t k = n < PERIOD ? (size_t)n : PERIOD;
		ssize_t r = send(fd, pat_at(s, off), k, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				wait_fd(fd, POLLOUT, 1000);
				continue;
			}
			return -1;
		}
		if (h)
			hash_add(h, pat_at(s, off), (size_t)r);
		off += (uint64_t)r;
		n -= (uint64_t)r;
	}
	return 0;
}

/* recv_stream reads until EOF (or max bytes, when max is not 0), checking
 * pattern s; *got is what it read. */
static int recv_stream(int fd, int s, uint64_t max, uint64_t *got, struct hash *h)
{
	static unsigned char buf[1 << 18];
	int ok = 1;

	*got = 0;
	for (;;) {
		size_t want = sizeof buf;
		ssize_t r;
		if (max && max - *got < want)
			want = (size_t)(max - *got);
		if (max && want == 0)
			break;
		r = recv(fd, buf, want, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				wait_fd(fd, POLLIN, 1000);
				continue;
			}
			out("recv: %s after %llu bytes", strerrorname_np(errno), (unsigned long long)*got);
			return -1;
		}
		if (r == 0)
			break;
		if (ok && !pat_ok(s, buf, (size_t)r, *got))
			ok = 0;
		if (h)
			hash_add(h, buf, (size_t)r);
		*got += (uint64_t)r;
	}
	return ok;
}

/* ---- bidir -------------------------------------------------------------------- */

struct sender {
	int fd, seed, rc;
	uint64_t n;
	struct hash h;
	pthread_t th;
};

static void *sender_run(void *p)
{
	struct sender *s = p;

	hash_init(&s->h);
	s->rc = send_all(s->fd, s->seed, 0, s->n, &s->h);
	if (s->rc == 0)
		shutdown(s->fd, SHUT_WR);
	return NULL;
}

static void bidir(int fd, int mine, int theirs, uint64_t size)
{
	struct sender s = {.fd = fd, .seed = mine, .n = size};
	struct hash h;
	uint64_t got = 0;
	char c;
	long t0 = now_ms(), el;
	int ok;

	if (pthread_create(&s.th, NULL, sender_run, &s) != 0)
		die("pthread_create");
	hash_init(&h);
	ok = recv_stream(fd, theirs, size, &got, &h);
	pthread_join(s.th, NULL);
	el = now_ms() - t0;
	out("sent %llu hash %016llx%s", (unsigned long long)size,
	    (unsigned long long)hash_sum(&s.h), s.rc ? " (send failed)" : "");
	out("received %llu hash %016llx pattern %s", (unsigned long long)got,
	    (unsigned long long)hash_sum(&h), ok > 0 ? "ok" : "BAD");
	check(s.rc == 0 && got == size && ok > 0, "bidir stream");
	{
		ssize_t r;
		do
			r = recv(fd, &c, 1, 0);
		while (r < 0 && (errno == EINTR || errno == EAGAIN) && wait_fd(fd, POLLIN, 5000) >= 0);
		out("eof %s", r == 0 ? "yes" : "no");
		check(r == 0, "eof after the stream");
	}
	out("elapsed_ms %ld MBps %.0f", el, el > 0 ? 2.0 * (double)size / 1e3 / (double)el : 0.0);
}

/* ---- echo server (edge-triggered epoll) ------------------------------------------ */

struct econn {
	int fd;
	unsigned char *buf;
	size_t len, off; /* pending output: buf[off..len) */
	int eof;
	uint64_t bytes;
};

#define EBUF (256 * 1024)

/* pump moves bytes of c until it would block; 1 when c is finished. */
static int pump(struct econn *c)
{
	for (;;) {
		while (c->off < c->len) {
			ssize_t r = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN)
					return 0; /* EPOLLOUT edge will come */
				out("echo send: %s", strerrorname_np(errno));
				failed = 1;
				return 1;
			}
			c->off += (size_t)r;
		}
		c->off = c->len = 0;
		if (c->eof)
			return 1;
		{
			ssize_t r = recv(c->fd, c->buf, EBUF, 0);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN)
					return 0; /* EPOLLIN edge will come */
				out("echo recv: %s", strerrorname_np(errno));
				failed = 1;
				return 1;
			}
			if (r == 0) {
				c->eof = 1;
				continue;
			}
			c->len = (size_t)r;
			c->bytes += (uint64_t)r;
		}
	}
}

struct estats {
	int served, unix_n, tcp_n;
	uint64_t bytes;
};

static void echo_finish(int ep, struct econn *c, struct estats *st)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	st->bytes += c->bytes;
	close(c->fd);
	free(c->buf);
	free(c);
	st->served++;
}

/* echo_accept accepts until EAGAIN (the listener is edge-triggered). */
static void echo_accept(int ep, int l, struct estats *st)
{
	for (;;) {
		struct epoll_event ev;
		struct econn *c;
		int fd = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN)
				die("accept4");
			return;
		}
		if (is_shm(fd))
			st->unix_n++;
		else
			st->tcp_n++;
		c = calloc(1, sizeof *c);
		if (!c || !(c->buf = malloc(EBUF)))
			die("malloc");
		c->fd = fd;
		ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		ev.data.ptr = c;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			die("epoll_ctl");
		if (pump(c)) /* it may have said everything before we looked */
			echo_finish(ep, c, st);
	}
}

static void echo_server(int l, int max_conns)
{
	struct epoll_event ev, evs[64];
	struct estats st = {0, 0, 0, 0};
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		die("epoll_create1");
	set_nonblock(l);
	ev.events = EPOLLIN | EPOLLET;
	ev.data.ptr = NULL;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) < 0)
		die("epoll_ctl listener");
	while (max_conns == 0 || st.served < max_conns) {
		int n = epoll_wait(ep, evs, 64, -1), i;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (i = 0; i < n; i++) {
			struct econn *c = evs[i].data.ptr;
			if (!c)
				echo_accept(ep, l, &st);
			else if (pump(c))
				echo_finish(ep, c, &st);
		}
	}
	out("served %d connections, echoed %llu bytes, transports %s=%d tcp=%d", st.served,
	    (unsigned long long)st.bytes, shm_word(), st.unix_n, st.tcp_n);
	close(ep);
}

/* ---- echo client (poll, select or epoll) ------------------------------------------ */

struct cconn {
	int fd, k, done, eof;
	uint64_t off;            /* stream offset of the current message */
	uint64_t size, sent, got; /* of the current message */
	uint64_t pat_off;        /* where this connection's pattern starts */
};

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* msg_size returns a size in 1..max spread over every order of magnitude;
 * the first two messages overall are 1 and max. */
static uint64_t msg_size(uint64_t max)
{
	static int first = 0;
	int bits = 0, e;
	uint64_t m = max, v;

	if (first < 2)
		return first++ == 0 ? 1 : max;
	while (m >>= 1)
		bits++;
	e = (int)(rnd() % (uint64_t)(bits + 1));
	v = 1 + rnd() % ((uint64_t)1 << e);
	return v > max ? max : v;
}

static int cconn_step(struct cconn *c, short rev, int msgs, uint64_t max, uint64_t *bytes)
{
	static unsigned char buf[1 << 18];

	if (rev & POLLOUT && c->sent < c->size) {
		uint64_t pos = c->pat_off + c->off + c->sent, left = c->size - c->sent;
		size_t k = left < PERIOD ? (size_t)left : PERIOD;
		ssize_t r = send(c->fd, pat_at(1, pos), k, MSG_NOSIGNAL);
		if (r < 0 && errno != EAGAIN && errno != EINTR) {
			out("client send: %s", strerrorname_np(errno));
			return -1;
		}
		if (r > 0)
			c->sent += (uint64_t)r;
	}
	if (rev & (POLLIN | POLLHUP | POLLERR)) {
		uint64_t left = c->k >= msgs ? sizeof buf /* only the EOF is left */
					      : c->size - c->got;
		ssize_t r;
		r = recv(c->fd, buf, left < sizeof buf ? (size_t)left : sizeof buf, 0);
		if (r < 0 && errno != EAGAIN && errno != EINTR) {
			out("client recv: %s", strerrorname_np(errno));
			return -1;
		}
		if (r == 0) {
			if (c->k < msgs) {
				out("client: early EOF in message %d", c->k);
				return -1;
			}
			c->done = 1;
			return 0;
		}
		if (r > 0) {
			if (c->k >= msgs) {
				out("client: data after the last echo");
				return -1;
			}
			if (!pat_ok(1, buf, (size_t)r, c->pat_off + c->off + c->got)) {
				out("client: echo does not match in message %d", c->k);
				return -1;
			}
			c->got += (uint64_t)r;
			*bytes += (uint64_t)r;
		}
	}
	if (c->k < msgs && c->got == c->size) {
		c->off += c->size;
		c->k++;
		c->sent = c->got = 0;
		if (c->k < msgs) {
			c->size = msg_size(max);
		} else {
			c->size = 0;
			shutdown(c->fd, SHUT_WR);
		}
	}
	return 0;
}

static short cconn_want(const struct cconn *c)
{
	return (short)(POLLIN | (c->sent < c->size ? POLLOUT : 0));
}

static void echo_client(int fam, struct sockaddr_storage *ss, socklen_t sl, const char *mode,
			int conns, int msgs, uint64_t max, int timeout_s)
{
	struct cconn *cs = calloc((size_t)conns, sizeof *cs);
	struct pollfd *p = calloc((size_t)conns, sizeof *p);
	struct epoll_event *evs = calloc((size_t)conns, sizeof *evs);
	int i, left = conns, unix_n = 0, tcp_n = 0, ep = -1, m = mode[0];
	uint64_t bytes = 0, total_msgs = (uint64_t)conns * (uint64_t)msgs;
	long end = now_ms() + timeout_s * 1000L;

	if (!cs || !p || !evs)
		die("calloc");
	for (i = 0; i < conns; i++) {
		int fd = socket(fam, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)ss, sl) < 0)
			die("connect");
		if (is_shm(fd))
			unix_n++;
		else
			tcp_n++;
		set_nonblock(fd);
		cs[i].fd = fd;
		cs[i].pat_off = rnd() % PERIOD;
		cs[i].size = msg_size(max);
	}
	out("transports %s=%d tcp=%d", shm_word(), unix_n, tcp_n);
	maybe_wait();
	if (m == 'e') {
		ep = epoll_create1(0);
		for (i = 0; i < conns; i++) {
			struct epoll_event ev = {EPOLLIN | EPOLLOUT, {.u32 = (uint32_t)i}};
			if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev) < 0)
				die("epoll_ctl");
		}
	}
	while (left > 0) {
		int n = 0;
		if (now_ms() > end) {
			out("FAIL timeout: %d connections unfinished", left);
			exit(1);
		}
		if (m == 'p') {
			int np = 0;
			for (i = 0; i < conns; i++)
				if (!cs[i].done)
					p[np++] = (struct pollfd){cs[i].fd, cconn_want(&cs[i]), 0};
			n = poll(p, (nfds_t)np, 1000);
			if (n < 0 && errno != EINTR)
				die("poll");
			np = 0;
			for (i = 0; i < conns && n > 0; i++) {
				if (cs[i].done)
					continue;
				if (p[np].revents && cconn_step(&cs[i], p[np].revents, msgs, max, &bytes) < 0)
					exit(1);
				np++;
				if (cs[i].done) {
					close(cs[i].fd);
					left--;
				}
			}
		} else if (m == 's') {
			fd_set rd, wr;
			int mx = -1;
			struct timeval tv = {1, 0};
			FD_ZERO(&rd);
			FD_ZERO(&wr);
			for (i = 0; i < conns; i++) {
				if (cs[i].done)
					continue;
				FD_SET(cs[i].fd, &rd);
				if (cconn_want(&cs[i]) & POLLOUT)
					FD_SET(cs[i].fd, &wr);
				if (cs[i].fd > mx)
					mx = cs[i].fd;
			}
			n = select(mx + 1, &rd, &wr, NULL, &tv);
			if (n < 0 && errno != EINTR)
				die("select");
			for (i = 0; i < conns && n > 0; i++) {
				short rev = 0;
				if (cs[i].done)
					continue;
				if (FD_ISSET(cs[i].fd, &rd))
					rev |= POLLIN;
				if (FD_ISSET(cs[i].fd, &wr))
					rev |= POLLOUT;
				if (rev && cconn_step(&cs[i], rev, msgs, max, &bytes) < 0)
					exit(1);
				if (cs[i].done) {
					close(cs[i].fd);
					left--;
				}
			}
		} else {
			n = epoll_wait(ep, evs, conns, 1000);
			if (n < 0 && errno != EINTR)
				die("epoll_wait");
			for (i = 0; i < n; i++) {
				struct cconn *c = &cs[evs[i].data.u32];
				short rev = (short)(evs[i].events & (EPOLLIN | EPOLLOUT | EPOLLHUP | EPOLLERR));
				if (c->done)
					continue;
				if (cconn_step(c, rev, msgs, max, &bytes) < 0)
					exit(1);
				if (c->done) {
					epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
					close(c->fd);
					left--;
				}
			}
		}
	}
	out("echoed %llu messages %llu bytes pattern ok", (unsigned long long)total_msgs,
	    (unsigned long long)bytes);
}

/* ---- the other modes ----------------------------------------------------------- */

static void halfclose_client(int fd, uint64_t size)
{
	struct hash h;
	char line[128];
	size_t ll = 0;
	uint64_t got = 0;
	unsigned long long n = 0, hv = 0;
	int ok;

	hash_init(&h);
	check(send_all(fd, 1, 0, size, &h) == 0, "send");
	check(shutdown(fd, SHUT_WR) == 0, "shutdown");
	out("sent %llu hash %016llx, shut down writing", (unsigned long long)size,
	    (unsigned long long)hash_sum(&h));
	while (ll < sizeof line - 1) { /* the answer's first line, byte by byte */
		ssize_t r = recv(fd, line + ll, 1, 0);
		if (r <= 0)
			break;
		if (line[ll++] == '\n')
			break;
	}
	line[ll] = 0;
	out("answer: %.*s", (int)(ll ? ll - 1 : 0), line);
	check(sscanf(line, "received %llu hash %llx pattern ok", &n, &hv) == 2 && n == size &&
		      hv == hash_sum(&h),
	      "the server's count and hash");
	ok = recv_stream(fd, 2, 0, &got, NULL);
	out("then %llu bytes pattern %s and eof", (unsigned long long)got, ok > 0 ? "ok" : "BAD");
	check(ok > 0 && got == size, "the answer stream");
}

static void halfclose_server(int fd, uint64_t size)
{
	struct hash h;
	uint64_t got = 0;
	char line[128];
	int ok, n;

	hash_init(&h);
	ok = recv_stream(fd, 1, 0, &got, &h);
	n = snprintf(line, sizeof line, "received %llu hash %llx pattern %s\n",
		     (unsigned long long)got, (unsigned long long)hash_sum(&h), ok > 0 ? "ok" : "BAD");
	out("%.*s", n - 1, line);
	check(send(fd, line, (size_t)n, MSG_NOSIGNAL) == n, "answer");
	check(send_all(fd, 2, 0, size, NULL) == 0, "answer stream");
}

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int s)
{
	(void)s;
	sigpipes++;
}

static const char *res(ssize_t r, int e)
{
	static char b[4][64];
	static int i;
	char *p = b[i++ & 3];

	if (r < 0)
		snprintf(p, 64, "-1 %s", strerrorname_np(e));
	else
		snprintf(p, 64, "%zd", r);
	return p;
}

static void reset_client(int fd)
{
	char buf[16];
	ssize_t r;
	int e, p0;

	check(send(fd, "unread", 6, 0) == 6, "send");
	wait_fd(fd, POLLRDHUP, 5000);
	r = recv(fd, buf, sizeof buf, 0);
	e = errno;
	out("recv %s data %s", res(r, e), r == 5 && !memcmp(buf, "hello", 5) ? "hello" : "?");
	check(r == 5, "hello");
	r = recv(fd, buf, sizeof buf, 0);
	e = errno;
	out("recv %s", res(r, e));
	check(r < 0 && e == ECONNRESET, "ECONNRESET");
	r = recv(fd, buf, sizeof buf, 0);
	e = errno;
	out("recv %s", res(r, e));
	check(r == 0, "then 0");
	p0 = sigpipes;
	r = send(fd, "x", 1, 0);
	e = errno;
	out("send %s sigpipe %d", res(r, e), sigpipes - p0);
	check(r < 0 && e == EPIPE && sigpipes - p0 == 1, "EPIPE and SIGPIPE");
}

static void reset_server(int fd)
{
	int n = 0;
	long end = now_ms() + 5000;

	check(send(fd, "hello", 5, 0) == 5, "send");
	while (n < 6 && now_ms() < end) {
		ioctl(fd, FIONREAD, &n);
		if (n < 6)
			usleep(1000);
	}
	check(n == 6, "the client's bytes arrived");
	out("closing with %d unread bytes", n);
}

static void epipe_client(int fd)
{
	char c;
	ssize_t r;
	int e, p0;

	r = recv(fd, &c, 1, 0);
	e = errno;
	out("recv %s", res(r, e));
	check(r == 0, "EOF");
	p0 = sigpipes;
	r = write(fd, "abc", 3);
	e = errno;
	out("first write %s sigpipe %d", res(r, e), sigpipes - p0);
	check(r == 3 && sigpipes == p0, "first write accepted");
	usleep(20000);
	p0 = sigpipes;
	r = write(fd, "abc", 3);
	e = errno;
	out("second write %s sigpipe %d", res(r, e), sigpipes - p0);
	check(r < 0 && e == EPIPE && sigpipes - p0 == 1, "EPIPE with SIGPIPE");
	p0 = sigpipes;
	r = send(fd, "abc", 3, MSG_NOSIGNAL);
	e = errno;
	out("MSG_NOSIGNAL %s sigpipe %d", res(r, e), sigpipes - p0);
	check(r < 0 && e == EPIPE && sigpipes == p0, "EPIPE without SIGPIPE");
}

static void sink_server(int fd)
{
	static unsigned char buf[65536];
	uint64_t got = 0;
	int ok = 1;
	char line[96];
	int n;

	for (;;) {
		ssize_t r = recv(fd, buf, sizeof buf, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (!pat_ok(1, buf, (size_t)r, got))
			ok = 0;
		got += (uint64_t)r;
		usleep(500); /* a slow reader */
	}
	n = snprintf(line, sizeof line, "received %llu pattern %s\n", (unsigned long long)got,
		     ok ? "ok" : "BAD");
	out("%.*s", n - 1, line);
	check(send(fd, line, (size_t)n, MSG_NOSIGNAL) == n, "answer");
}

static void nbpartial_client(int fam, struct sockaddr_storage *ss, socklen_t sl, uint64_t size)
{
	int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK, 0), err = -1, partial = 0, eagain = 0;
	socklen_t el = sizeof err;
	uint64_t sent = 0;
	char line[128];
	size_t ll = 0;
	ssize_t r;

	if (fd < 0)
		die("socket");
	r = connect(fd, (struct sockaddr *)ss, sl);
	out("connect EINPROGRESS-or-0 %s", r == 0 || errno == EINPROGRESS ? "yes" : strerrorname_np(errno));
	check(r == 0 || errno == EINPROGRESS, "connect");
	check(wait_fd(fd, POLLOUT, 5000) == 1, "POLLOUT");
	check(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "SO_ERROR 0");
	out("writable, SO_ERROR %d, transport %s", err, transport(fd));
	maybe_wait();
	while (sent < size) {
		uint64_t left = size - sent;
		size_t k = left < 100003 ? (size_t)left : 100003;
		static unsigned char buf[100003];
		memcpy(buf, pat_at(1, sent), k < PERIOD ? k : PERIOD);
		if (k > PERIOD)
			memcpy(buf + PERIOD, pat_at(1, sent + PERIOD), k - PERIOD);
		r = send(fd, buf, k, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EAGAIN) {
				eagain++;
				wait_fd(fd, POLLOUT, 5000);
				continue;
			}
			if (errno == EINTR)
				continue;
			die("send");
		}
		if ((size_t)r < k)
			partial++;
		sent += (uint64_t)r;
	}
	shutdown(fd, SHUT_WR);
	out("sent %llu, partial writes seen %s, EAGAIN seen %s", (unsigned long long)sent,
	    partial ? "yes" : "no", eagain ? "yes" : "no");
	check(partial > 0 && eagain > 0, "partial writes and EAGAIN");
	wait_fd(fd, POLLIN, 30000);
	for (;;) {
		r = recv(fd, line + ll, sizeof line - 1 - ll, 0);
		if (r > 0) {
			ll += (size_t)r;
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EINTR) && wait_fd(fd, POLLIN, 30000) == 1)
			continue;
		break;
	}
	line[ll] = 0;
	out("answer: %s", strtok(line, "\n") ? line : "");
	{
		unsigned long long n = 0;
		check(sscanf(line, "received %llu pattern ok", &n) == 1 && n == size, "the server got it all");
	}
	close(fd);
}

/* ---- main ---------------------------------------------------------------------- */

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	switch (*end) {
	case 'K': case 'k': v <<= 10; break;
	case 'M': case 'm': v <<= 20; break;
	case 'G': case 'g': v <<= 30; break;
	}
	return v;
}

static void usage(void)
{
	fprintf(stderr, "usage: tcpx server [-w] [-n N] MODE ADDR PORT [SIZE]\n"
			"       tcpx client [-w] [-d] [-m poll|select|epoll] [-c CONNS] [-k MSGS]\n"
			"                   [-M MAXSIZE] [-S SEED] [-t SECONDS] MODE ADDR PORT [SIZE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *mode, *addr, *poller = "poll";
	int server, opt, conns = 1, msgs = 3, n = 1, dfl = 0, timeout_s = 60, fam, port;
	uint64_t size = 0, max = 1 << 20;
	struct sockaddr_storage ss;
	socklen_t sl;
	struct sigaction sa;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		usage();
	server = strcmp(argv[1], "server") == 0;
	if (!server && strcmp(argv[1], "client") != 0)
		usage();
	rng_state = 0x1234567;
	optind = 2;
	while ((opt = getopt(argc, argv, "wdn:m:c:k:M:S:t:")) != -1) {
		switch (opt) {
		case 'w': wait_line = 1; break;
		case 'd': dfl = 1; break;
		case 'n': n = atoi(optarg); break;
		case 'm': poller = optarg; break;
		case 'c': conns = atoi(optarg); break;
		case 'k': msgs = atoi(optarg); break;
		case 'M': max = parse_size(optarg); break;
		case 'S': rng_state = strtoull(optarg, NULL, 10) | 1; break;
		case 't': timeout_s = atoi(optarg); break;
		default: usage();
		}
	}
	if (argc - optind < 3)
		usage();
	mode = argv[optind];
	addr = argv[optind + 1];
	port = atoi(argv[optind + 2]);
	if (argc - optind > 3)
		size = parse_size(argv[optind + 3]);
	pat_init();
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = dfl ? SIG_DFL : on_sigpipe;
	sigaction(SIGPIPE, &sa, NULL);
	fam = parse_addr(addr, port, &ss, &sl);

	if (server) {
		int l = socket(fam, SOCK_STREAM, 0), one = 1, zero = 0, served = 0;
		if (l < 0)
			die("socket");
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (fam == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr))
			setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
		if (bind(l, (struct sockaddr *)&ss, sl) < 0 || listen(l, 1024) < 0)
			die("listen");
		sl = sizeof ss;
		getsockname(l, (struct sockaddr *)&ss, &sl);
		out("listening %d", fam == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
						   : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
		if (strcmp(mode, "echo") == 0) {
			echo_server(l, n);
			return failed;
		}
		while (n == 0 || served < n) {
			int fd = accept(l, NULL, NULL);
			if (fd < 0) {
				if (errno == EINTR)
					continue;
				die("accept");
			}
			out("accepted, transport %s", transport(fd));
			maybe_wait();
			if (strcmp(mode, "bidir") == 0)
				bidir(fd, 2, 1, size);
			else if (strcmp(mode, "halfclose") == 0)
				halfclose_server(fd, size);
			else if (strcmp(mode, "reset") == 0)
				reset_server(fd);
			else if (strcmp(mode, "close") == 0)
				;
			else if (strcmp(mode, "sink") == 0)
				sink_server(fd);
			else
				usage();
			close(fd);
			served++;
		}
		return failed;
	}

	if (strcmp(mode, "echo") == 0) {
		echo_client(fam, &ss, sl, poller, conns, msgs, max, timeout_s);
		return failed;
	}
	if (strcmp(mode, "nbpartial") == 0) {
		nbpartial_client(fam, &ss, sl, size);
		return failed;
	}
	{
		int fd = socket(fam, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&ss, sl) < 0)
			die("connect");
		out("connected, transport %s", transport(fd));
		maybe_wait();
		if (strcmp(mode, "bidir") == 0)
			bidir(fd, 1, 2, size);
		else if (strcmp(mode, "halfclose") == 0)
			halfclose_client(fd, size);
		else if (strcmp(mode, "reset") == 0)
			reset_client(fd);
		else if (strcmp(mode, "epipe") == 0)
			epipe_client(fd);
		else
			usage();
		close(fd);
	}
	return failed;
}
