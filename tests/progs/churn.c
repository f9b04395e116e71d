//go:build osf_make

/* churn: what a connection's life costs (tests/bench/run.sh).
 *
 *   churn server PORT [N]       accept connections on 127.0.0.1:PORT (N of
 *                               them, default forever); for each, read one
 *                               request (up to 4 KiB) and answer with a
 *                               64-byte HTTP/1.0 response, then close.
 *                               Prints "listening".
 *   churn loop PORT N           N times: connect, send 64 bytes, read the
 *                               64-byte answer, close; prints
 *                               "conns=N secs=S conn_per_s=R".
 *   churn once PORT             one such connection (a short client: run
 *                               it as a new process to measure start-up).
 *   churn pair PORT             two such connections at once, from two
 *                               threads; prints "pair done".
 *   churn hold PORT N MIB       N connections open at once, each moving MIB
 *                               MiB each way (16 KiB messages) against a
 *                               "churn sink" server, then idle; prints
 *                               "held N" and waits for stdin to close.
 *   churn sink PORT             echo server for hold (poll, non-blocking).
 *   churn execafter PORT N      N such connections (inheritable, one at a
 *                               time), then, without LD_PRELOAD, a shell by
 *                               system() and one by execve, each printing
 *                               how many memfds it inherited ("system
 *                               memfds=K", "exec memfds=K").
 *
 * CHURN_CLIENT_CLOSES=1 (server): after its answer the server waits for
 * its client's close before its own, so that the client's end goes to
 * TIME_WAIT. CHURN_RETRY=1 (loop, once): a connect that finds no free
 * local port (EADDRNOTAVAIL: every port of the range in TIME_WAIT for
 * less than the second the kernel's reuse needs) is tried again on a
 * fresh socket every 10 ms, at most 1,000 times; loop prints
 * "retries=K" too.
 *
 * Runs bare or under osf alike; both ends of a measurement must be. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char answer[64] =
	"HTTP/1.0 200 OK\r\nContent-Length: 21\r\n\r\nchurn: 64-byte reply\n";

static struct sockaddr_in addr(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	return a;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static int listener(int port)
{
	struct sockaddr_in a = addr(port);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1024) < 0)
		die("listen");
	/* CHURN_KEEPALIVE=1: an option the accepted sockets inherit, as
	 * apache sets (TestChurnSystemCalls counts its reads). */
	if (getenv("CHURN_KEEPALIVE") &&
	    setsockopt(l, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) < 0)
		die("keepalive");
	printf("listening\n");
	fflush(stdout);
	return l;
}

static void serve(int port, long max)
{
	int l = listener(port), client_closes = getenv("CHURN_CLIENT_CLOSES") != NULL;
	char buf[4096];

	signal(SIGPIPE, SIG_IGN);
	for (long k = 0; max <= 0 || k < max; k++) {
		int c = accept(l, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept");
		}
		if (read(c, buf, sizeof(buf)) > 0 && write(c, answer, sizeof(answer)) > 0 &&
		    client_closes)
			while (read(c, buf, sizeof(buf)) > 0)
				;
		close(c);
	}
}

static long retries; /* CHURN_RETRY's */

/* one makes one connection: connect, 64 bytes out, 64 back, close. */
static void one(int port)
{
	struct sockaddr_in a = addr(port);
	char req[64], buf[64];
	size_t got = 0;
	int c = socket(AF_INET, SOCK_STREAM, 0), tries = 0;

	memset(req, 'q', sizeof(req));
	memcpy(req, "GET / HTTP/1.0\r\n\r\n", 18);
	while (c >= 0 && connect(c, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (errno != EADDRNOTAVAIL || !getenv("CHURN_RETRY") || ++tries > 1000)
			die("connect");
		close(c);
		retries++;
		usleep(10000);
		c = socket(AF_INET, SOCK_STREAM, 0);
	}
	if (c < 0)
		die("socket");
	if (write(c, req, sizeof(req)) != (ssize_t)sizeof(req))
		die("write");
	while (got < sizeof(buf)) {
		ssize_t n = read(c, buf + got, sizeof(buf) - got);
		if (n <= 0)
			die("read");
		got += (size_t)n;
	}
	if (memcmp(buf, answer, sizeof(buf)) != 0) {
		fprintf(stderr, "churn: wrong answer\n");
		exit(2);
	}
	close(c);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

__attribute__((noreturn)) static void sink(int port)
{
	int l, n = 1, i;
	struct pollfd *p = calloc(65536, sizeof(*p));
	char buf[16384];

	raise_nofile();
	l = listener(port);
	signal(SIGPIPE, SIG_IGN);
	p[0].fd = l;
	p[0].events = POLLIN;
	for (;;) {
		if (poll(p, (nfds_t)n, -1) < 0 && errno != EINTR)
			die("poll");
		if (p[0].revents & POLLIN) {
			int c = accept(l, NULL, NULL);
			if (c >= 0 && n < 65536) {
				p[n].fd = c;
				p[n].events = POLLIN;
				n++;
			}
		}
		for (i = 1; i < n; i++) {
			ssize_t r;
			if (!p[i].revents)
				continue;
			r = read(p[i].fd, buf, sizeof(buf));
			if (r <= 0) {
				close(p[i].fd);
				p[i--] = p[--n];
				continue;
			}
			for (ssize_t off = 0; off < r;) {
				ssize_t w = write(p[i].fd, buf + off, (size_t)(r - off));
				if (w <= 0)
					break;
				off += w;
			}
		}
	}
}

static int hold(int port, int conns, int mib)
{
	struct sockaddr_in a = addr(port);
	int *fd = calloc((size_t)conns, sizeof(int));
	char buf[16384];

	raise_nofile();
	memset(buf, 'm', sizeof(buf));
	for (int i = 0; i < conns; i++) {
		fd[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (fd[i] < 0 || connect(fd[i], (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
		for (long left = (long)mib << 20; left > 0; left -= (long)sizeof(buf)) {
			size_t got = 0;
			if (write(fd[i], buf, sizeof(buf)) != (ssize_t)sizeof(buf))
				die("write");
			while (got < sizeof(buf)) {
				ssize_t n = read(fd[i], buf + got, sizeof(buf) - got);
				if (n <= 0)
					die("read");
				got += (size_t)n;
			}
		}
	}
	printf("held %d\n", conns);
	fflush(stdout);
	while (read(0, buf, sizeof(buf)) > 0)
		;
	return 0;
}

/* COUNT_MEMFDS prints, from a shell, how many memfds the shell holds. */
#define COUNT_MEMFDS(what) \
	"echo " what " memfds=$(ls -l /proc/$$/fd 2>/dev/null | grep -c memfd:)"

/* exec_after makes n connections, then runs a shell without osf by system()
 * and by execve: an inheritable connection that is closed leaves nothing
 * of osf's (the fd table, a region) to a program run after it. */
static int exec_after(int port, int n)
{
	char *argv[] = {"sh", "-c", COUNT_MEMFDS("exec"), NULL};
	extern char **environ;

	for (int i = 0; i < n; i++)
		one(port);
	unsetenv("LD_PRELOAD");
	fflush(stdout);
	if (system(COUNT_MEMFDS("system")) != 0)
		die("system");
	fflush(stdout);
	execve("/bin/sh", argv, environ);
	die("execve");
	return 2;
}

static void *one_thread(void *port)
{
	one((int)(long)port);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "server") == 0) {
		serve(atoi(argv[2]), argc > 3 ? atol(argv[3]) : 0);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "sink") == 0)
		sink(atoi(argv[2]));
	if (argc >= 3 && strcmp(argv[1], "once") == 0) {
		one(atoi(argv[2]));
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "pair") == 0) {
		pthread_t th[2];
		for (int i = 0; i < 2; i++)
			if (pthread_create(&th[i], NULL, one_thread, (void *)(long)atoi(argv[2])) != 0)
				die("pthread_create");
		for (int i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
		printf("pair done\n");
		return 0;
	}
	if (argc >= 4 && strcmp(argv[1], "loop") == 0) {
		int port = atoi(argv[2]), n = atoi(argv[3]);
		double t0 = now(), t;
		for (int i = 0; i < n; i++)
			one(port);
		t = now() - t0;
		printf("conns=%d secs=%.4f conn_per_s=%.0f\n", n, t, n / t);
		if (getenv("CHURN_RETRY"))
			printf("retries=%ld\n", retries);
		return 0;
	}
	if (argc >= 4 && strcmp(argv[1], "execafter") == 0)
		return exec_after(atoi(argv[2]), atoi(argv[3]));
	if (argc >= 5 && strcmp(argv[1], "hold") == 0)
		return hold(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	fprintf(stderr, "usage: churn server|sink PORT | loop|execafter PORT N | once|pair PORT | hold PORT N MIB\n");
	return 2;
}
