//go:build osf_make

/*
 * osfperf measures latency and bandwidth of TCP streams, with or without osf:
 *
 *     osfperf server [-a ADDR] [-p PORT] [-1]
 *     osfperf client [-a ADDR] [-p PORT] [-t pingpong|stream|rstream] ...
 *     LD_PRELOAD=libosf.so osfperf client ...
 *     osfperf syscall-loop [-n N] [-f fcntl|devnull]
 *
 * It is plain C on purpose: it must reach the network only through libc
 * (socket, setsockopt, bind, listen, accept, connect, send, recv, poll, close,
 * getaddrinfo) so that libosf.so, preloaded, sees every call. See doc.go for
 * the full usage and the output format.
 *
 * Wire format. All integers are big-endian.
 *
 * Client -> server, once, right after connect: the 24-byte test header.
 *
 *     offset size field
 *          0    4 magic    0x4f534650 ("OSFP")
 *          4    2 version  1
 *          6    2 test     1 = pingpong, 2 = stream, 3 = rstream
 *          8    4 flags    bit 0: blocking I/O; the server's socket follows
 *                          the client's choice. bit 1: stream: do not hash,
 *                          reply with xxh64 0. Other bits must be 0.
 *         12    4 size     pingpong: message size; stream and rstream: size of
 *                          each write and of the reader's buffer (1..64 MiB)
 *         16    8 total    stream and rstream: bytes to transfer; pingpong: 0
 *
 * Then, by test:
 *
 *   pingpong  The client sends `size` bytes, the server echoes them; repeat.
 *             The client closes the connection at a message boundary to end.
 *   stream    The client sends `total` bytes of the pattern. The server then
 *             replies with 16 bytes, count u64 (bytes received) and xxh64 u64
 *             (XXH64, seed 0, of those bytes), and closes.
 *   rstream   The server sends `total` bytes of the pattern and closes; the
 *             client reads to EOF.
 *
 * With --no-verify only the byte count is checked and nobody hashes: XXH64
 * runs at about 9 GB/s on a 2020s core, so a transport faster than a few GB/s
 * would otherwise be measured hashing.
 *
 * The pattern: byte i of a stream is pat[i % PATTERN_PERIOD], pat being filled
 * by splitmix64 from a fixed seed. The period is an odd prime, so a lost or
 * repeated block of 2^k bytes (a ring, a buffer) always shifts the pattern and
 * changes the checksum. The verifier computes the expected checksum before
 * the clock starts; the sender does not hash, the receiver hashes as it reads.
 */

#include <ctype.h>
#include <endian.h>
#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define HDR_MAGIC 0x4f534650u /* "OSFP" */
#define HDR_VERSION 1
#define HDR_SIZE 24
#define REPLY_SIZE 16
#define FLAG_BLOCKING 0x1u
#define FLAG_NOVERIFY 0x2u
#define MAX_IO_SIZE (64u << 20)

#define PATTERN_PERIOD 1048573u /* prime, just under 1 MiB */
#define PATTERN_SEED 0x6f736670657266ull

#define IO_TIMEOUT_MS 30000 /* no progress for this long (twice, if blocking) is an error */
#define DEFAULT_PORT "11111"

/* FAIL sets errno and returns -1: the one way a helper reports an error. */
#define FAIL(e)                                                                                    \
	do {                                                                                       \
		errno = (e);                                                                       \
		return -1;                                                                         \
	} while (0)

enum test { TEST_PINGPONG = 1, TEST_STREAM = 2, TEST_RSTREAM = 3 };

static const char *const test_names[] = {
	[TEST_PINGPONG] = "pingpong",
	[TEST_STREAM] = "stream",
	[TEST_RSTREAM] = "rstream",
};

/* opts holds the command line of every mode; each mode reads its own fields. */
struct opts {
	const char *addr;
	const char *port;
	bool once;          /* server: exit after one client */
	enum test test;     /* client */
	size_t size;        /* client pingpong: message size */
	uint64_t iters;     /* client pingpong; syscall-loop */
	bool iters_set;
	double secs;        /* client pingpong: time limit, 0 = none */
	uint64_t total;     /* client stream, rstream */
	size_t wsize;       /* client stream, rstream */
	uint64_t warmup;    /* client pingpong */
	bool blocking;      /* client: blocking sockets on both sides */
	bool noverify;      /* client stream, rstream: count bytes, do not hash */
	bool json;
	const char *call;   /* syscall-loop: "fcntl" or "devnull" */
};

/* hdr is the decoded test header. */
struct hdr {
	enum test test;
	uint32_t flags;
	uint32_t size;
	uint64_t total;
};

/* ---- small helpers ---------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (p == NULL)
		err(1, "malloc %zu bytes", n);
	return p;
}

/* close_fail closes fd and returns -1 with the errno it found. */
static int close_fail(int fd)
{
	int e = errno;

	close(fd);
	FAIL(e);
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* ---- XXH64, streaming ------------------------------------------------- */

#define P64_1 0x9E3779B185EBCA87ull
#define P64_2 0xC2B2AE3D27D4EB4Full
#define P64_3 0x165667B19E3779F9ull
#define P64_4 0x85EBCA77C2B2AE63ull
#define P64_5 0x27D4EB2F165667C5ull

struct xxh64 {
	uint64_t v[4];
	uint64_t len;
	uint8_t buf[32];
	size_t nbuf;
};

static uint64_t rotl64(uint64_t x, int r)
{
	return x << r | x >> (64 - r);
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof v);
	return le64toh(v);
}

static uint32_t le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof v);
	return le32toh(v);
}

static uint64_t xxh64_round(uint64_t acc, uint64_t in)
{
	return rotl64(acc + in * P64_2, 31) * P64_1;
}

static uint64_t xxh64_merge(uint64_t h, uint64_t v)
{
	return (h ^ xxh64_round(0, v)) * P64_1 + P64_4;
}

static void xxh64_init(struct xxh64 *x)
{
	*x = (struct xxh64){ .v = { P64_1 + P64_2, P64_2, 0, -P64_1 } };
}

static void xxh64_stripe(struct xxh64 *x, const uint8_t *p)
{
	for (int i = 0; i < 4; i++)
		x->v[i] = xxh64_round(x->v[i], le64(p + 8 * i));
}

static void xxh64_update(struct xxh64 *x, const uint8_t *p, size_t n)
{
	x->len += n;
	if (x->nbuf > 0) {
		size_t k = n < 32 - x->nbuf ? n : 32 - x->nbuf;

		memcpy(x->buf + x->nbuf, p, k);
		x->nbuf += k, p += k, n -= k;
		if (x->nbuf < 32)
			return;
		xxh64_stripe(x, x->buf);
		x->nbuf = 0;
	}
	for (; n >= 32; p += 32, n -= 32)
		xxh64_stripe(x, p);
	memcpy(x->buf, p, n);
	x->nbuf = n;
}

static uint64_t xxh64_digest(const struct xxh64 *x)
{
	const uint8_t *p = x->buf, *end = x->buf + x->nbuf;
	uint64_t h;

	if (x->len >= 32) {
		h = rotl64(x->v[0], 1) + rotl64(x->v[1], 7) + rotl64(x->v[2], 12) + rotl64(x->v[3], 18);
		for (int i = 0; i < 4; i++)
			h = xxh64_merge(h, x->v[i]);
	} else {
		h = P64_5;
	}
	h += x->len;
	for (; end - p >= 8; p += 8)
		h = rotl64(h ^ xxh64_round(0, le64(p)), 27) * P64_1 + P64_4;
	if (end - p >= 4) {
		h = rotl64(h ^ le32(p) * P64_1, 23) * P64_2 + P64_3;
		p += 4;
	}
	for (; p < end; p++)
		h = rotl64(h ^ *p * P64_5, 11) * P64_1;
	h ^= h >> 33, h *= P64_2;
	h ^= h >> 29, h *= P64_3;
	return h ^ h >> 32;
}

/* ---- the data pattern ------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ z >> 27) * 0x94D049BB133111EBull;
	return z ^ z >> 31;
}

/*
 * pattern_new returns PATTERN_PERIOD + w bytes of the pattern, so that any
 * w bytes of the stream starting at offset o are at pat + o % PATTERN_PERIOD.
 */
static uint8_t *pattern_new(size_t w)
{
	size_t n = PATTERN_PERIOD + w;
	uint8_t *pat = xmalloc(n);
	uint64_t s = PATTERN_SEED, r = 0;

	for (size_t i = 0; i < PATTERN_PERIOD; i++, r >>= 8) {
		if (i % 8 == 0)
			r = splitmix64(&s);
		pat[i] = (uint8_t)r;
	}
	for (size_t i = PATTERN_PERIOD; i < n; i++)
		pat[i] = pat[i - PATTERN_PERIOD];
	return pat;
}

/* pattern_hash returns the XXH64 of the first total bytes of the stream. */
static uint64_t pattern_hash(const uint8_t *pat, uint64_t total)
{
	struct xxh64 x;

	xxh64_init(&x);
	for (; total >= PATTERN_PERIOD; total -= PATTERN_PERIOD)
		xxh64_update(&x, pat, PATTERN_PERIOD);
	xxh64_update(&x, pat, total);
	return xxh64_digest(&x);
}

/* ---- I/O with a progress timeout -------------------------------------- */

/* wait_fd waits for events on fd; it fails with ETIMEDOUT after IO_TIMEOUT_MS. */
static int wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	for (;;) {
		int n = poll(&p, 1, IO_TIMEOUT_MS);

		if (n > 0)
			return 0;
		if (n == 0)
			FAIL(ETIMEDOUT);
		if (errno != EINTR)
			return -1;
	}
}

/*
 * read_some reads up to len bytes; it returns 0 at EOF. On a nonblocking
 * socket it tries first and polls only on EAGAIN; on a blocking one the
 * SO_RCVTIMEO set by set_blocking makes a stuck recv return EAGAIN too.
 */
static ssize_t read_some(int fd, void *buf, size_t len)
{
	for (;;) {
		ssize_t n = recv(fd, buf, len, 0);

		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (wait_fd(fd, POLLIN) < 0)
			return -1;
	}
}

/* read_full reads len bytes; it returns fewer only at EOF. */
static ssize_t read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read_some(fd, (uint8_t *)buf + got, len - got);

		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* write_full writes len bytes (no SIGPIPE: a dead peer is EPIPE). */
static int write_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(fd, (const uint8_t *)buf + done, len - done, MSG_NOSIGNAL);

		if (n >= 0) {
			done += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (wait_fd(fd, POLLOUT) < 0)
			return -1;
	}
	return 0;
}

/* write_pattern sends the first total bytes of the stream, w bytes per send. */
static int write_pattern(int fd, const uint8_t *pat, uint64_t total, size_t w)
{
	size_t off = 0;

	while (total > 0) {
		size_t n = total < w ? (size_t)total : w;

		if (write_full(fd, pat + off, n) < 0)
			return -1;
		off = (off + n) % PATTERN_PERIOD;
		total -= n;
	}
	return 0;
}

/*
 * read_hashed reads until EOF or limit bytes into buf (len bytes), hashing
 * them into *sum unless sum is NULL; it returns the byte count, or -1.
 */
static int64_t read_hashed(int fd, uint8_t *buf, size_t len, uint64_t limit, uint64_t *sum)
{
	struct xxh64 x;
	uint64_t got = 0;

	xxh64_init(&x);
	while (got < limit) {
		size_t want = limit - got < len ? (size_t)(limit - got) : len;
		ssize_t n = read_some(fd, buf, want);

		if (n < 0)
			return -1;
		if (n == 0)
			break;
		if (sum != NULL)
			xxh64_update(&x, buf, (size_t)n);
		got += (uint64_t)n;
	}
	if (sum != NULL)
		*sum = xxh64_digest(&x);
	return (int64_t)got;
}

/* ---- sockets ---------------------------------------------------------- */

static int set_nodelay(int fd)
{
	int one = 1;

	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* set_blocking makes fd blocking, with send and receive timeouts. */
static int set_blocking(int fd)
{
	struct timeval tv = { .tv_sec = IO_TIMEOUT_MS / 1000 };
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
		return -1;
	return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static struct addrinfo *resolve(const char *addr, const char *port, int flags)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = flags | AI_NUMERICSERV,
	};
	struct addrinfo *res;
	int rc = getaddrinfo(addr, port, &hints, &res);

	if (rc == EAI_SYSTEM)
		err(1, "resolve %s port %s", addr, port);
	if (rc != 0)
		errx(1, "resolve %s port %s: %s", addr, port, gai_strerror(rc));
	return res;
}

static int listen_one(const struct addrinfo *ai)
{
	int one = 1;
	int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);

	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0)
		return close_fail(fd);
	return fd;
}

/* connect_one connects a nonblocking TCP_NODELAY socket, waiting at most
 * IO_TIMEOUT_MS. socket and fcntl rather than SOCK_NONBLOCK: rsocket (its
 * preload library, compared with osf in make bench-rdma) refuses a type with
 * flags, and its preload then quietly makes a kernel TCP socket. */
static int connect_one(const struct addrinfo *ai)
{
	int soerr = 0;
	socklen_t len = sizeof soerr;
	int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
	int fl;

	if (fd < 0)
		return -1;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || set_nodelay(fd) < 0)
		return close_fail(fd);
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return fd;
	if (errno != EINPROGRESS || wait_fd(fd, POLLOUT) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
		return close_fail(fd);
	if (soerr != 0) {
		errno = soerr;
		return close_fail(fd);
	}
	return fd;
}

static int listen_on(const char *addr, const char *port)
{
	struct addrinfo *res = resolve(addr, port, AI_PASSIVE), *ai;
	int fd = -1;

	for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
		fd = listen_one(ai);
	if (fd < 0)
		err(1, "listen on %s port %s", addr, port);
	freeaddrinfo(res);
	return fd;
}

static int connect_to(const char *addr, const char *port)
{
	struct addrinfo *res = resolve(addr, port, 0), *ai;
	int fd = -1;

	for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
		fd = connect_one(ai);
	if (fd < 0)
		err(1, "connect to %s port %s", addr, port);
	freeaddrinfo(res);
	return fd;
}

/* print_listening prints "listening ADDR PORT" for the bound socket and flushes. */
static void print_listening(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	char host[NI_MAXHOST], serv[NI_MAXSERV];
	int rc;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		err(1, "getsockname");
	rc = getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, serv, sizeof serv,
			 NI_NUMERICHOST | NI_NUMERICSERV);
	if (rc != 0)
		errx(1, "getnameinfo: %s", gai_strerror(rc));
	printf("listening %s %s\n", host, serv);
	fflush(stdout);
}

/* ---- the test header -------------------------------------------------- */

static void send_hdr(int fd, const struct hdr *h)
{
	uint8_t b[HDR_SIZE];

	put_be(b, HDR_MAGIC, 4);
	put_be(b + 4, HDR_VERSION, 2);
	put_be(b + 6, h->test, 2);
	put_be(b + 8, h->flags, 4);
	put_be(b + 12, h->size, 4);
	put_be(b + 16, h->total, 8);
	if (write_full(fd, b, sizeof b) < 0)
		err(1, "%s: send test header", test_names[h->test]);
}

/* recv_hdr reads and checks the test header; false means the client left before sending one. */
static bool recv_hdr(int fd, struct hdr *h)
{
	uint8_t b[HDR_SIZE];
	ssize_t n = read_full(fd, b, sizeof b);
	uint64_t magic, version;

	if (n < 0)
		err(1, "server: read test header");
	if (n == 0)
		return false;
	if (n < HDR_SIZE)
		errx(1, "server: client closed the connection inside the test header");
	magic = get_be(b, 4), version = get_be(b + 4, 2);
	h->test = (enum test)get_be(b + 6, 2);
	h->flags = (uint32_t)get_be(b + 8, 4);
	h->size = (uint32_t)get_be(b + 12, 4);
	h->total = get_be(b + 16, 8);
	if (magic != HDR_MAGIC || version != HDR_VERSION)
		errx(1, "server: not an osfperf v%d client (magic %#" PRIx64 ", version %" PRIu64 ")",
		     HDR_VERSION, magic, version);
	if (h->test < TEST_PINGPONG || h->test > TEST_RSTREAM || (h->flags & ~(FLAG_BLOCKING | FLAG_NOVERIFY)) != 0 ||
	    h->size == 0 || h->size > MAX_IO_SIZE)
		errx(1, "server: bad test header (test %d, flags %#x, size %" PRIu32 ")", (int)h->test,
		     (unsigned)h->flags, h->size);
	return true;
}

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

static int server_main(const struct opts *o)
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

/* ---- client ----------------------------------------------------------- */

/* samples is a growable array of round-trip times in nanoseconds. */
struct samples {
	uint64_t *v;
	size_t n, cap;
};

static void samples_add(struct samples *s, uint64_t ns)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 1 << 16;
		s->v = realloc(s->v, s->cap * sizeof *s->v);
		if (s->v == NULL)
			err(1, "realloc %zu samples", s->cap);
	}
	s->v[s->n++] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* half_us returns the permille-th percentile (nearest rank) of sorted RTTs as half RTT in µs. */
static double half_us(const struct samples *s, unsigned permille)
{
	size_t rank = (s->n * permille + 999) / 1000;

	return s->v[rank ? rank - 1 : 0] / 2000.0;
}

static void report_pingpong(const struct opts *o, struct samples *s)
{
	double sum = 0, p50, p90, p99, p999, min, max, mean;

	qsort(s->v, s->n, sizeof *s->v, cmp_u64);
	for (size_t i = 0; i < s->n; i++)
		sum += (double)s->v[i];
	p50 = half_us(s, 500), p90 = half_us(s, 900), p99 = half_us(s, 990), p999 = half_us(s, 999);
	min = s->v[0] / 2000.0, max = s->v[s->n - 1] / 2000.0, mean = sum / (double)s->n / 2000.0;
	if (o->json)
		printf("{\"test\":\"pingpong\",\"size\":%zu,\"n\":%zu,\"p50\":%.3f,\"p90\":%.3f,"
		       "\"p99\":%.3f,\"p999\":%.3f,\"min\":%.3f,\"max\":%.3f,\"mean\":%.3f}\n",
		       o->size, s->n, p50, p90, p99, p999, min, max, mean);
	else
		printf("pingpong size=%zu n=%zu p50=%.3fus p90=%.3fus p99=%.3fus p999=%.3fus "
		       "min=%.3fus max=%.3fus mean=%.3fus\n",
		       o->size, s->n, p50, p90, p99, p999, min, max, mean);
}

/* stamp writes the iteration number into the message, so a stale echo is caught. */
static void stamp(uint8_t *msg, size_t size, uint64_t i)
{
	for (size_t k = 0; k < size && k < 8; k++, i >>= 8)
		msg[k] = (uint8_t)i;
}

static void client_pingpong(int fd, const struct opts *o, const struct hdr *h)
{
	uint8_t *msg = pattern_new(o->size), *echo = xmalloc(o->size);
	uint64_t end = o->iters > UINT64_MAX - o->warmup ? UINT64_MAX : o->warmup + o->iters;
	uint64_t deadline = UINT64_MAX;
	struct samples s = { 0 };

	send_hdr(fd, h);
	for (uint64_t i = 0; i < end; i++) {
		uint64_t t0, t1;
		ssize_t n;

		stamp(msg, o->size, i);
		t0 = now_ns();
		if (write_full(fd, msg, o->size) < 0)
			err(1, "pingpong: write");
		n = read_full(fd, echo, o->size);
		t1 = now_ns();
		if (n < 0)
			err(1, "pingpong: read");
		if ((size_t)n < o->size)
			errx(1, "pingpong: server closed the connection");
		if (memcmp(msg, echo, o->size) != 0)
			errx(1, "pingpong: echo %" PRIu64 " differs from the message sent", i);
		if (i < o->warmup)
			continue;
		if (i == o->warmup && o->secs > 0)
			deadline = t0 + (uint64_t)(o->secs * 1e9);
		samples_add(&s, t1 - t0);
		if (t1 >= deadline)
			break;
	}
	report_pingpong(o, &s);
	free(s.v);
	free(echo);
	free(msg);
}

static void report_stream(const struct opts *o, uint64_t ns)
{
	double secs = ns > 0 ? ns / 1e9 : 1e-9;
	double mbs = (double)o->total / secs / 1e6, gbits = (double)o->total * 8 / secs / 1e9;
	const char *name = test_names[o->test], *check = o->noverify ? "skipped" : "ok";

	if (o->json)
		printf("{\"test\":\"%s\",\"bytes\":%" PRIu64 ",\"write\":%zu,\"secs\":%.6f,"
		       "\"MB_per_s\":%.1f,\"Gbit_per_s\":%.3f,\"checksum\":\"%s\"}\n",
		       name, o->total, o->wsize, secs, mbs, gbits, check);
	else
		printf("%s bytes=%" PRIu64 " write=%zu secs=%.3f MB/s=%.1f Gbit/s=%.2f checksum=%s\n",
		       name, o->total, o->wsize, secs, mbs, gbits, check);
}

/* check_transfer compares what the receiver saw with what was sent (counts only with --no-verify). */
static void check_transfer(const struct opts *o, uint64_t got_n, uint64_t got_sum, uint64_t want_sum)
{
	const char *name = test_names[o->test];
	uint64_t want_n = o->total;

	if (got_n != want_n)
		errx(1, "%s: received %" PRIu64 " bytes, sent %" PRIu64, name, got_n, want_n);
	if (!o->noverify && got_sum != want_sum)
		errx(1,
		     "%s: checksum mismatch: received %" PRIu64 " bytes with xxh64 %016" PRIx64
		     ", sent %" PRIu64 " bytes with xxh64 %016" PRIx64,
		     name, got_n, got_sum, want_n, want_sum);
}

/* client_stream times from the header to the server's reply, which proves delivery. */
static void client_stream(int fd, const struct opts *o, const struct hdr *h)
{
	uint8_t *pat = pattern_new(o->wsize), reply[REPLY_SIZE];
	uint64_t want = o->noverify ? 0 : pattern_hash(pat, o->total), t0 = now_ns(), t1;
	ssize_t n;

	send_hdr(fd, h);
	if (write_pattern(fd, pat, o->total, o->wsize) < 0)
		err(1, "stream: write");
	n = read_full(fd, reply, sizeof reply);
	t1 = now_ns();
	if (n < 0)
		err(1, "stream: read reply");
	if (n < REPLY_SIZE)
		errx(1, "stream: server closed the connection without a reply");
	check_transfer(o, get_be(reply, 8), get_be(reply + 8, 8), want);
	report_stream(o, t1 - t0);
	free(pat);
}

/* client_rstream times from the header to the server's EOF. */
static void client_rstream(int fd, const struct opts *o, const struct hdr *h)
{
	uint8_t *pat = pattern_new(0), *buf = xmalloc(o->wsize);
	uint64_t want = o->noverify ? 0 : pattern_hash(pat, o->total), sum = 0, t0 = now_ns(), t1;
	int64_t n;

	free(pat);
	send_hdr(fd, h);
	n = read_hashed(fd, buf, o->wsize, UINT64_MAX, o->noverify ? NULL : &sum);
	t1 = now_ns();
	if (n < 0)
		err(1, "rstream: read");
	check_transfer(o, (uint64_t)n, sum, want);
	report_stream(o, t1 - t0);
	free(buf);
}

static int client_main(const struct opts *o)
{
	int fd = connect_to(o->addr, o->port);
	struct hdr h = {
		.test = o->test,
		.flags = (o->blocking ? FLAG_BLOCKING : 0) | (o->noverify ? FLAG_NOVERIFY : 0),
		.size = (uint32_t)(o->test == TEST_PINGPONG ? o->size : o->wsize),
		.total = o->test == TEST_PINGPONG ? 0 : o->total,
	};

	if (o->blocking && set_blocking(fd) < 0)
		err(1, "make socket blocking");
	switch (o->test) {
	case TEST_PINGPONG:
		client_pingpong(fd, o, &h);
		break;
	case TEST_STREAM:
		client_stream(fd, o, &h);
		break;
	case TEST_RSTREAM:
		client_rstream(fd, o, &h);
		break;
	}
	close(fd);
	return 0;
}

/* ---- syscall-loop ----------------------------------------------------- */

/*
 * The loops call libc through its normal entry points; the results are
 * checked, and libc calls are opaque to the compiler, so none is elided.
 */
static int loop_fcntl(int fd, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (fcntl(fd, F_GETFL) < 0)
			return -1;
	return 0;
}

static int loop_devnull(int fd, uint64_t n)
{
	static const char byte = 'x';

	for (uint64_t i = 0; i < n; i++)
		if (write(fd, &byte, 1) != 1)
			return -1;
	return 0;
}

static int syscall_main(const struct opts *o)
{
	bool devnull = strcmp(o->call, "devnull") == 0;
	int (*loop)(int, uint64_t) = devnull ? loop_devnull : loop_fcntl;
	int fd, pfd[2];
	uint64_t t0, t1;

	if (devnull)
		fd = open("/dev/null", O_WRONLY);
	else
		fd = pipe(pfd) < 0 ? -1 : pfd[0];
	if (fd < 0)
		err(1, "syscall-loop: open %s", devnull ? "/dev/null" : "pipe");
	if (loop(fd, 1000) < 0) /* warm up: lazy binding, caches */
		err(1, "syscall-loop: %s", o->call);
	t0 = now_ns();
	if (loop(fd, o->iters) < 0)
		err(1, "syscall-loop: %s", o->call);
	t1 = now_ns();
	if (o->json)
		printf("{\"test\":\"syscall-loop\",\"call\":\"%s\",\"n\":%" PRIu64
		       ",\"ns_per_call\":%.1f}\n",
		       o->call, o->iters, (double)(t1 - t0) / (double)o->iters);
	else
		printf("syscall-loop call=%s n=%" PRIu64 " ns_per_call=%.1f\n", o->call, o->iters,
		       (double)(t1 - t0) / (double)o->iters);
	return 0;
}

/* ---- command line ----------------------------------------------------- */

static const char usage_text[] =
	"usage:\n"
	"  osfperf server [-a ADDR] [-p PORT] [-1]\n"
	"  osfperf client [-a ADDR] [-p PORT] [-t pingpong|stream|rstream] [-s MSGSIZE]\n"
	"                 [-n ITERATIONS] [-d SECONDS] [-b TOTALBYTES] [-w WRITESIZE]\n"
	"                 [--warmup N] [--blocking] [--no-verify] [--json]\n"
	"  osfperf syscall-loop [-n N] [-f fcntl|devnull] [--json]\n"
	"defaults: server -a 0.0.0.0, client -a 127.0.0.1, -p " DEFAULT_PORT ", -t pingpong,\n"
	"  -s 64, -n 100000 (unlimited with -d), --warmup 1000, -b 1G, -w 64K;\n"
	"  syscall-loop -n 1000000 -f fcntl. Sizes take K, M, G suffixes (x1024).\n";

static _Noreturn void usage(int status)
{
	fputs(usage_text, status == 0 ? stdout : stderr);
	exit(status);
}

/* parse_num parses a non-negative integer with an optional K, M or G suffix. */
static uint64_t parse_num(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	char *end;
	unsigned long long v;
	int shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	switch (toupper((unsigned char)*end)) {
	case 'K': shift = 10, end++; break;
	case 'M': shift = 20, end++; break;
	case 'G': shift = 30, end++; break;
	}
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v > (max >> shift) ||
	    v << shift < min)
		errx(2, "bad %s %s: want %" PRIu64 "..%" PRIu64, opt, s, min, max);
	return v << shift;
}

static double parse_secs(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end != '\0' || !(v > 0 && v < 1e9))
		errx(2, "bad -d %s: want seconds > 0", s);
	return v;
}

static enum test parse_test(const char *s)
{
	for (int t = TEST_PINGPONG; t <= TEST_RSTREAM; t++)
		if (strcmp(s, test_names[t]) == 0)
			return (enum test)t;
	errx(2, "bad -t %s: want pingpong, stream or rstream", s);
}

enum { OPT_JSON = 256, OPT_WARMUP, OPT_BLOCKING, OPT_NOVERIFY };

static const struct option long_opts[] = {
	{ "json", no_argument, NULL, OPT_JSON },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "blocking", no_argument, NULL, OPT_BLOCKING },
	{ "no-verify", no_argument, NULL, OPT_NOVERIFY },
	{ "help", no_argument, NULL, 'h' },
	{ 0 },
};

/* parse_opts parses argv (argv[0] being the mode) with the mode's short options. */
static void parse_opts(int argc, char **argv, const char *shortopts, struct opts *o)
{
	int c;

	opterr = 0; /* getopt would name the mode, not the program */
	while ((c = getopt_long(argc, argv, shortopts, long_opts, NULL)) != -1) {
		switch (c) {
		case 'a': o->addr = optarg; break;
		case 'p': o->port = optarg; break;
		case '1': o->once = true; break;
		case 't': o->test = parse_test(optarg); break;
		case 's': o->size = parse_num("-s", optarg, 1, MAX_IO_SIZE); break;
		case 'n': o->iters = parse_num("-n", optarg, 1, UINT64_MAX), o->iters_set = true; break;
		case 'd': o->secs = parse_secs(optarg); break;
		case 'b': o->total = parse_num("-b", optarg, 1, UINT64_MAX); break;
		case 'w': o->wsize = parse_num("-w", optarg, 1, MAX_IO_SIZE); break;
		case 'f': o->call = optarg; break;
		case OPT_JSON: o->json = true; break;
		case OPT_WARMUP: o->warmup = parse_num("--warmup", optarg, 0, UINT64_MAX); break;
		case OPT_BLOCKING: o->blocking = true; break;
		case OPT_NOVERIFY: o->noverify = true; break;
		case 'h': usage(0);
		default: errx(2, "bad option or missing value in %s (try --help)", argv[optind - 1]);
		}
	}
	if (optind != argc)
		errx(2, "unexpected argument %s (try --help)", argv[optind]);
	if (o->secs > 0 && !o->iters_set)
		o->iters = UINT64_MAX;
	if (strcmp(o->call, "fcntl") != 0 && strcmp(o->call, "devnull") != 0)
		errx(2, "bad -f %s: want fcntl or devnull", o->call);
}

int main(int argc, char **argv)
{
	struct opts o = {
		.port = DEFAULT_PORT,
		.test = TEST_PINGPONG,
		.size = 64,
		.iters = 100000,
		.total = 1ull << 30,
		.wsize = 65536,
		.warmup = 1000,
		.call = "fcntl",
	};
	const char *mode = argc > 1 ? argv[1] : "";

	if (strcmp(mode, "server") == 0) {
		o.addr = "0.0.0.0";
		parse_opts(argc - 1, argv + 1, "a:p:1h", &o);
		return server_main(&o);
	}
	if (strcmp(mode, "client") == 0) {
		o.addr = "127.0.0.1";
		parse_opts(argc - 1, argv + 1, "a:p:t:s:n:d:b:w:h", &o);
		return client_main(&o);
	}
	if (strcmp(mode, "syscall-loop") == 0) {
		o.iters = 1000000;
		parse_opts(argc - 1, argv + 1, "n:f:h", &o);
		return syscall_main(&o);
	}
	if (strcmp(mode, "-h") == 0 || strcmp(mode, "--help") == 0)
		usage(0);
	usage(2);
}
