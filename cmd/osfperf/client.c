//go:build osf_make

/* client.c: osfperf client: the ping-pong and stream tests, timed, and
 * their reports. */
#include "osfperf.h"

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

int client_main(const struct opts *o)
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
