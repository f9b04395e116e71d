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

#include "osfperf.h"

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
