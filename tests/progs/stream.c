//go:build osf_make

/* stream: a TCP stream exerciser for the transport conformance suite
 * (tests/conformance_test.go) and the two-host test (tests/twohost_test.go).
 * It runs the same on every transport: kernel TCP, shm, RDMA.
 *
 *   stream server HOST PORT        listen (PORT 0: any), print "port N",
 *                                  then serve connections one at a time
 *   stream client HOST PORT TEST [N [SEED]]
 *
 * Each connection starts with a request line from the client naming the
 * test; the server does its part. Payloads are a pattern (byte at stream
 * position p with seed s: ((p + s) * 0x9e3779b97f4a7c15) >> 56) checked byte
 * by byte, and every side prints "fnv=HEX bytes=N" with the FNV-1a 64 of
 * what it received, for the tests to compare with their own checksum.
 *
 * Tests (client side; N is a byte or iteration count):
 *   pingpong N   N messages of 1..4096 bytes echoed back, then half-close
 *   sink N       N bytes to the server, half-close; the server checks them
 *                and answers "ok"
 *   source N     N bytes from the server, then end of file
 *   duplex N     N bytes each way at once (non-blocking, poll), half-close
 *   halfclose    half-close, the server still answers, then end of file
 *   reset        the server closes with SO_LINGER 0: ECONNRESET
 *   unread       the server closes with bytes unread: ECONNRESET
 *   epipe        the server closes; writes then fail with EPIPE/ECONNRESET
 *   nonblock     write until EAGAIN to a server that does not read; poll
 *                for POLLOUT times out
 *   names        getsockname/getpeername agree with the server's view
 *   hold         print "connected", wait for a line on stdin, close
 *   quit         the server exits
 *
 * The client prints "PASS TEST ..." and exits 0, or "FAIL TEST: why" and
 * exits 1. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *test = "?";

static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL %s: ", test);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static uint8_t pattern(uint64_t seed, uint64_t pos)
{
	return (uint8_t)(((pos + seed) * 0x9e3779b97f4a7c15ULL) >> 56);
}

struct fnv {
	uint64_t h, n;
};

static void fnv_init(struct fnv *f)
{
	f->h = 0xcbf29ce484222325ULL;
	f->n = 0;
}

static void fnv_add(struct fnv *f, const uint8_t *b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		f->h ^= b[i];
		f->h *= 0x100000001b3ULL;
	}
	f->n += n;
}

static void fill(uint8_t *b, size_t n, uint64_t seed, uint64_t pos)
{
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = pattern(seed, pos + i);
}

/* check verifies n received bytes at stream position pos. */
static int check(const uint8_t *b, size_t n, uint64_t seed, uint64_t pos)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != pattern(seed, pos + i)) {
			fprintf(stderr, "stream: byte %llu is %#x, want %#x\n",
				(unsigned long long)(pos + i), b[i],
				pattern(seed, pos + i));
			return -1;
		}
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* read_full reads exactly n bytes; 0 on success, 1 at end of file, -1. */
static int read_full(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n > 0) {
		ssize_t k = recv(fd, b, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0)
			return 1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

static int read_line(int fd, char *buf, size_t n)
{
	size_t i = 0;

	while (i + 1 < n) {
		ssize_t k = recv(fd, buf + i, 1, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		if (buf[i] == '\n')
			break;
		i++;
	}
	buf[i] = 0;
	return 0;
}

static void sockaddr_text(const struct sockaddr_storage *ss, char *out, size_t n)
{
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ss;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		port = ntohs(in->sin_port);
		snprintf(out, n, "%s:%d", host, port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		port = ntohs(in6->sin6_port);
		snprintf(out, n, "[%s]:%d", host, port);
	} else {
		snprintf(out, n, "family %d", ss->ss_family);
	}
}

static void names(int fd, char *local, char *peer, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof ss;

	memset(&ss, 0, sizeof ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &l) < 0)
		snprintf(local, n, "error %d", errno);
	else
		sockaddr_text(&ss, local, n);
	l = sizeof ss;
	memset(&ss, 0, sizeof ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &l) < 0)
		snprintf(peer, n, "error %d", errno);
	else
		sockaddr_text(&ss, peer, n);
}

static int resolve(const char *host, const char *port, struct sockaddr_storage *ss,
		   socklen_t *len)
{
	struct addrinfo hints, *res;

	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
	if (getaddrinfo(host, port, &hints, &res) != 0)
		return -1;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* duplex moves n bytes each way at once on a non-blocking socket: sends
 * pattern seed_out, receives and checks pattern seed_in, half-closes after
 * sending, and reads to end of file. */
static int duplex(int fd, uint64_t n, uint64_t seed_out, uint64_t seed_in,
		  struct fnv *f)
{
	static uint8_t out[65536], in[65536];
	uint64_t sent = 0, got = 0;
	int fin = 0, eof = 0;

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	while (!fin || !eof) {
		struct pollfd p = {fd, 0, 0};
		if (!fin && sent == n) {
			if (shutdown(fd, SHUT_WR) < 0)
				return -1;
			fin = 1;
		}
		if (!fin) {
			size_t k = n - sent < sizeof out ? (size_t)(n - sent) : sizeof out;
			ssize_t w;
			fill(out, k, seed_out, sent);
			w = send(fd, out, k, MSG_NOSIGNAL);
			if (w > 0)
				sent += (uint64_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EINTR)
				return -1;
		}
		if (!eof) {
			ssize_t r = recv(fd, in, sizeof in, 0);
			if (r > 0) {
				if (check(in, (size_t)r, seed_in, got) < 0)
					return -1;
				fnv_add(f, in, (size_t)r);
				got += (uint64_t)r;
				continue;
			}
			if (r == 0) {
				if (got != n) {
					fprintf(stderr, "stream: end of file after %llu of %llu bytes\n",
						(unsigned long long)got, (unsigned long long)n);
					return -1;
				}
				eof = 1;
				continue;
			}
			if (errno != EAGAIN && errno != EINTR)
				return -1;
		}
		if (!fin)
			p.events |= POLLOUT;
		if (!eof)
			p.events |= POLLIN;
		if (p.events && poll(&p, 1, 10000) == 0) {
			fprintf(stderr, "stream: duplex stalled: sent %llu, got %llu of %llu\n",
				(unsigned long long)sent, (unsigned long long)got,
				(unsigned long long)n);
			return -1;
		}
	}
	return 0;
}

static void report(const struct fnv *f)
{
	printf("fnv=%016llx bytes=%llu\n", (unsigned long long)f->h,
	       (unsigned long long)f->n);
}

/* ---- server ------------------------------------------------------------ */

static void serve_one(int c)
{
	static uint8_t buf[65536];
	char line[256], arg[64] = "", local[96], peer[96];
	unsigned long long n = 0, seed = 0;
	struct fnv f;
	ssize_t r;

	fnv_init(&f);
	if (read_line(c, line, sizeof line) < 0) {
		fprintf(stderr, "stream server: no request\n");
		return;
	}
	sscanf(line, "%63s %llu %llu", arg, &n, &seed);
	if (strcmp(arg, "echo") == 0) {
		while ((r = recv(c, buf, sizeof buf, 0)) > 0) {
			fnv_add(&f, buf, (size_t)r);
			if (write_all(c, buf, (size_t)r) < 0)
				break;
		}
	} else if (strcmp(arg, "sink") == 0) {
		uint64_t got = 0;
		int bad = 0;
		while ((r = recv(c, buf, sizeof buf, 0)) > 0) {
			if (!bad && check(buf, (size_t)r, seed, got) < 0)
				bad = 1;
			fnv_add(&f, buf, (size_t)r);
			got += (uint64_t)r;
		}
		if (r < 0)
			snprintf(line, sizeof line, "bad: recv: %s\n", strerror(errno));
		else if (bad || got != n)
			snprintf(line, sizeof line, "bad: %llu bytes%s\n",
				 (unsigned long long)got, bad ? ", corrupt" : "");
		else
			snprintf(line, sizeof line, "ok fnv=%016llx\n",
				 (unsigned long long)f.h);
		write_all(c, line, strlen(line));
	} else if (strcmp(arg, "source") == 0) {
		uint64_t sent = 0;
		while (sent < n) {
			size_t k = n - sent < sizeof buf ? (size_t)(n - sent) : sizeof buf;
			fill(buf, k, seed, sent);
			if (write_all(c, buf, k) < 0)
				break;
			sent += k;
		}
	} else if (strcmp(arg, "duplex") == 0) {
		if (duplex(c, n, seed + 1, seed, &f) < 0)
			fprintf(stderr, "stream server: duplex failed: %s\n", strerror(errno));
	} else if (strcmp(arg, "reset") == 0) {
		struct linger l = {1, 0};
		recv(c, buf, 1, 0);
		setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
	} else if (strcmp(arg, "unread") == 0) {
		int avail = 0, i;
		for (i = 0; i < 500 && avail == 0; i++) {
			ioctl(c, FIONREAD, &avail);
			if (avail == 0)
				usleep(2000);
		}
	} else if (strcmp(arg, "stall") == 0) {
		struct pollfd p = {c, POLLRDHUP, 0};
		poll(&p, 1, 10000); /* until the client is gone; read nothing */
	} else if (strcmp(arg, "names") == 0) {
		names(c, local, peer, sizeof local);
		snprintf(line, sizeof line, "%s %s\n", local, peer);
		write_all(c, line, strlen(line));
		recv(c, buf, 1, 0);
	} else if (strcmp(arg, "hold") == 0) {
		while (recv(c, buf, sizeof buf, 0) > 0)
			;
	} else if (strcmp(arg, "quit") == 0) {
		close(c);
		exit(0);
	} else {
		fprintf(stderr, "stream server: unknown request %s\n", arg);
	}
	printf("served %s ", arg);
	report(&f);
	fflush(stdout);
}

static __attribute__((noreturn)) void server(const char *host, const char *port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int l, one = 1;

	if (resolve(host, port, &ss, &len) < 0)
		fail("bad address %s %s", host, port);
	l = socket(ss.ss_family, SOCK_STREAM, 0);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(l, (struct sockaddr *)&ss, len) < 0 || listen(l, 64) < 0)
		fail("listen on %s %s: %s", host, port, strerror(errno));
	len = sizeof ss;
	getsockname(l, (struct sockaddr *)&ss, &len);
	printf("port %d\n",
	       ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					      : ((struct sockaddr_in6 *)&ss)->sin6_port));
	fflush(stdout);
	for (;;) {
		int c = accept(l, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR)
				continue;
			fail("accept: %s", strerror(errno));
		}
		serve_one(c);
		close(c);
	}
}

/* ---- client ------------------------------------------------------------ */

static int dial(const char *host, const char *port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd;

	if (resolve(host, port, &ss, &len) < 0)
		fail("bad address %s %s", host, port);
	fd = socket(ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) < 0)
		fail("connect to %s %s: %s", host, port, strerror(errno));
	return fd;
}

static void request(int fd, const char *fmt, ...)
{
	char line[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (write_all(fd, line, strlen(line)) < 0)
		fail("send request: %s", strerror(errno));
}

static void expect_eof(int fd)
{
	char b;
	ssize_t r = recv(fd, &b, 1, 0);

	if (r != 0)
		fail("expected end of file, got %zd (%s)", r, r < 0 ? strerror(errno) : "data");
}

static void expect_reset(int fd)
{
	char b[16];
	ssize_t r;

	while ((r = recv(fd, b, sizeof b, 0)) > 0)
		;
	if (r == 0)
		fail("expected ECONNRESET, got end of file");
	if (errno != ECONNRESET)
		fail("expected ECONNRESET, got %s", strerror(errno));
}

static int client(const char *host, const char *port, unsigned long long n,
		  uint64_t seed)
{
	static uint8_t buf[65536], back[65536];
	char line[256], local[96], peer[96];
	struct fnv f;
	int fd = dial(host, port);

	fnv_init(&f);
	if (strcmp(test, "pingpong") == 0) {
		uint64_t pos = 0, i;
		request(fd, "echo\n");
		for (i = 0; i < n; i++) {
			size_t k = 1 + (size_t)((i * 2654435761u) % 4096);
			fill(buf, k, seed, pos);
			if (write_all(fd, buf, k) < 0)
				fail("send: %s", strerror(errno));
			if (read_full(fd, back, k) != 0)
				fail("echo %llu: %s", (unsigned long long)i, strerror(errno));
			if (memcmp(buf, back, k) != 0)
				fail("echo %llu corrupt", (unsigned long long)i);
			fnv_add(&f, back, k);
			pos += k;
		}
		shutdown(fd, SHUT_WR);
		expect_eof(fd);
	} else if (strcmp(test, "sink") == 0) {
		uint64_t sent = 0;
		request(fd, "sink %llu %llu\n", n, (unsigned long long)seed);
		while (sent < n) {
			size_t k = n - sent < sizeof buf ? (size_t)(n - sent) : sizeof buf;
			fill(buf, k, seed, sent);
			if (write_all(fd, buf, k) < 0)
				fail("send at %llu: %s", (unsigned long long)sent, strerror(errno));
			fnv_add(&f, buf, k); /* what was sent, for the server's answer */
			sent += k;
		}
		shutdown(fd, SHUT_WR);
		if (read_line(fd, line, sizeof line) < 0)
			fail("no answer: %s", strerror(errno));
		if (strncmp(line, "ok ", 3) != 0)
			fail("server: %s", line);
		printf("sent ");
		report(&f);
		printf("server %s\n", line + 3);
		expect_eof(fd);
		fnv_init(&f);
	} else if (strcmp(test, "source") == 0) {
		uint64_t got = 0;
		ssize_t r;
		request(fd, "source %llu %llu\n", n, (unsigned long long)seed);
		while ((r = recv(fd, buf, sizeof buf, 0)) > 0) {
			if (check(buf, (size_t)r, seed, got) < 0)
				fail("corrupt at %llu", (unsigned long long)got);
			fnv_add(&f, buf, (size_t)r);
			got += (uint64_t)r;
		}
		if (r < 0)
			fail("recv at %llu: %s", (unsigned long long)got, strerror(errno));
		if (got != n)
			fail("got %llu bytes, want %llu", (unsigned long long)got, n);
	} else if (strcmp(test, "duplex") == 0) {
		request(fd, "duplex %llu %llu\n", n, (unsigned long long)seed);
		if (duplex(fd, n, seed, seed + 1, &f) < 0)
			fail("duplex: %s", strerror(errno));
	} else if (strcmp(test, "halfclose") == 0) {
		request(fd, "echo\nhello");
		shutdown(fd, SHUT_WR);
		if (read_full(fd, buf, 5) != 0 || memcmp(buf, "hello", 5) != 0)
			fail("no echo after half-close");
		expect_eof(fd);
	} else if (strcmp(test, "reset") == 0) {
		request(fd, "reset\nx");
		expect_reset(fd);
	} else if (strcmp(test, "unread") == 0) {
		request(fd, "unread\nnever read");
		expect_reset(fd);
	} else if (strcmp(test, "epipe") == 0) {
		int i;
		ssize_t w = 0;
		request(fd, "source 0 0\n");
		expect_eof(fd);
		for (i = 0; i < 200; i++) {
			w = send(fd, "x", 1, MSG_NOSIGNAL);
			if (w < 0)
				break;
			usleep(5000);
		}
		if (w >= 0)
			fail("writes after the peer closed kept succeeding");
		if (errno != EPIPE && errno != ECONNRESET)
			fail("write after the peer closed: %s, want EPIPE", strerror(errno));
		printf("write error %s after %d writes\n", strerror(errno), i);
	} else if (strcmp(test, "nonblock") == 0) {
		/* Fill the socket to a server that reads nothing: EAGAIN, and
		 * then no POLLOUT. Kernel TCP may still move bytes into the
		 * peer's growing receive buffer for a while: fill again
		 * whenever POLLOUT comes back, until it stays away. */
		uint64_t sent = 0;
		int rounds;
		ssize_t w;
		request(fd, "stall\n");
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		memset(buf, 'n', sizeof buf);
		for (rounds = 0; rounds < 200; rounds++) {
			struct pollfd p = {fd, POLLOUT, 0};
			while ((w = send(fd, buf, sizeof buf, MSG_NOSIGNAL)) > 0)
				sent += (uint64_t)w;
			if (errno != EAGAIN)
				fail("send: %s, want EAGAIN", strerror(errno));
			if (sent == 0)
				fail("nothing sent before EAGAIN");
			if (poll(&p, 1, 200) == 0)
				break;
		}
		if (rounds == 200)
			fail("POLLOUT keeps coming back on a socket whose peer does not read (%llu bytes sent)",
			     (unsigned long long)sent);
		printf("EAGAIN after %llu bytes, %d rounds\n", (unsigned long long)sent, rounds + 1);
		{
			/* A FIN would wait behind the unsent bytes: reset. */
			struct linger l = {1, 0};
			setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
		}
	} else if (strcmp(test, "names") == 0) {
		char sl[96], sp[96];
		request(fd, "names\n");
		if (read_line(fd, line, sizeof line) < 0 ||
		    sscanf(line, "%95s %95s", sl, sp) != 2)
			fail("no names from the server");
		names(fd, local, peer, sizeof local);
		if (strcmp(sp, local) != 0 || strcmp(sl, peer) != 0)
			fail("client %s -> %s, server %s <- %s", local, peer, sl, sp);
		printf("names %s %s\n", local, peer);
	} else if (strcmp(test, "quit") == 0) {
		request(fd, "quit\n");
		expect_eof(fd);
	} else if (strcmp(test, "hold") == 0) {
		request(fd, "hold\n");
		names(fd, local, peer, sizeof local);
		printf("connected %s %s\n", local, peer);
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			line[0] = 0;
	} else {
		fail("unknown test");
	}
	close(fd);
	printf("PASS %s ", test);
	report(&f);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 4 && strcmp(argv[1], "server") == 0)
		server(argv[2], argv[3]);
	if (argc >= 5 && strcmp(argv[1], "client") == 0) {
		test = argv[4];
		return client(argv[2], argv[3], argc > 5 ? strtoull(argv[5], NULL, 0) : 0,
			      argc > 6 ? strtoull(argv[6], NULL, 0) : 1);
	}
	fprintf(stderr, "usage: stream server HOST PORT | stream client HOST PORT TEST [N [SEED]]\n");
	return 2;
}
