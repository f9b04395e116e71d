//go:build osf_make

/* wire.c: what osfperf's client and server share: XXH64, the data
 * pattern, I/O with a progress timeout, sockets and the test header. */
#include "osfperf.h"

const char *const test_names[] = {
	[TEST_PINGPONG] = "pingpong",
	[TEST_STREAM] = "stream",
	[TEST_RSTREAM] = "rstream",
};

/* ---- small helpers ---------------------------------------------------- */

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void *xmalloc(size_t n)
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

void put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

uint64_t get_be(const uint8_t *p, int n)
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
uint8_t *pattern_new(size_t w)
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
uint64_t pattern_hash(const uint8_t *pat, uint64_t total)
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

/* retry_wait follows a recv or send that failed: 0 when it may be tried
 * again (EINTR, or fd became ready for events), -1 on an error. */
static int retry_wait(int fd, short events)
{
	if (errno == EINTR)
		return 0;
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return -1;
	return wait_fd(fd, events) < 0 ? -1 : 0;
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
		if (retry_wait(fd, POLLIN) < 0)
			return -1;
	}
}

/* read_full reads len bytes; it returns fewer only at EOF. */
ssize_t read_full(int fd, void *buf, size_t len)
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
int write_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(fd, (const uint8_t *)buf + done, len - done, MSG_NOSIGNAL);

		if (n >= 0) {
			done += (size_t)n;
			continue;
		}
		if (retry_wait(fd, POLLOUT) < 0)
			return -1;
	}
	return 0;
}

/* write_pattern sends the first total bytes of the stream, w bytes per send. */
int write_pattern(int fd, const uint8_t *pat, uint64_t total, size_t w)
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
int64_t read_hashed(int fd, uint8_t *buf, size_t len, uint64_t limit, uint64_t *sum)
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

int set_nodelay(int fd)
{
	int one = 1;

	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* set_blocking makes fd blocking, with send and receive timeouts. */
int set_blocking(int fd)
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

/* open_first returns a socket listening on (passive) or connected to the
 * first address of addr and port that takes it; it exits when none does. */
static int open_first(const char *addr, const char *port, int passive)
{
	struct addrinfo *res = resolve(addr, port, passive ? AI_PASSIVE : 0), *ai;
	int fd = -1;

	for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
		fd = passive ? listen_one(ai) : connect_one(ai);
	if (fd < 0)
		err(1, "%s %s port %s", passive ? "listen on" : "connect to", addr, port);
	freeaddrinfo(res);
	return fd;
}

int listen_on(const char *addr, const char *port) { return open_first(addr, port, 1); }

int connect_to(const char *addr, const char *port) { return open_first(addr, port, 0); }

/* print_listening prints "listening ADDR PORT" for the bound socket and flushes. */
void print_listening(int fd)
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

void send_hdr(int fd, const struct hdr *h)
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
bool recv_hdr(int fd, struct hdr *h)
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
