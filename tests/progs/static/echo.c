/* staticecho: a TCP echo server and client, built statically linked
 * (gcc -static) by tests/static_test.go, for osfrun --static
 * (preload/static.c). Only the C library: no osf header.
 *
 *   staticecho serve ADDR          listen on ADDR:0, print "listening PORT",
 *                                  echo one connection until EOF, exit 0
 *   staticecho client ADDR PORT N  connect, print "connected", wait for a
 *                                  line on stdin, then send N pattern bytes
 *                                  in chunks of 1..65536 bytes, each read
 *                                  back (poll, then read) and checked;
 *                                  print "ok N"
 *   staticecho tserve ADDR K       as serve, K connections, each echoed by a
 *                                  thread of its own
 *   staticecho tclient ADDR PORT K N  K threads each connect; print
 *                                  "connected" when all are, wait for a line
 *                                  on stdin, then each does client's
 *                                  exchange; print "ok K*N"
 *   staticecho pingpong ADDR PORT N  N round trips of 64 bytes; print
 *                                  "rtt_ns X" (mean)
 *   staticecho fork                fork a child that exits 7; print
 *                                  "child 7"
 *   staticecho sigaccept ADDR MODE   SIGTERM's action per MODE (dfl: the
 *                                  default; intr: a handler; restart: a
 *                                  handler with SA_RESTART; the handler
 *                                  writes "handler"), listen as serve, then
 *                                  block in accept: print "accept EINTR
 *                                  handled H" or "accepted handled H"
 *   staticecho sigrecv ADDR PORT MODE  connect, SIGTERM's action as
 *                                  sigaccept's, print "connected", block
 *                                  in recv of one byte: print "recv EINTR
 *                                  handled H" or "recv 1 C handled H"
 *   staticecho sigpeer ADDR        listen as serve, accept one connection,
 *                                  send "x" once a line comes on stdin (none
 *                                  at EOF), read until EOF
 *   staticecho exec PROG ARGS...   execv PROG with ARGS */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "staticecho: %s: %s\n", what, strerror(errno));
	exit(1);
}

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 131 + (i >> 9));
}

static void full(int fd, unsigned char *b, size_t n, int wr)
{
	while (n) {
		ssize_t r = wr ? write(fd, b, n) : read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die(wr ? "write" : "read");
		b += r, n -= (size_t)r;
	}
}

static int listener(const char *addr)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || inet_pton(AF_INET, addr, &a.sin_addr) != 1)
		die("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 8) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listen");
	printf("listening %d\n", ntohs(a.sin_port));
	fflush(stdout);
	return l;
}

/* echo echoes connection c until EOF and closes it. */
static void *echo(void *arg)
{
	unsigned char buf[65536];
	int c = (int)(long)arg, one = 1;
	ssize_t r;

	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	while ((r = read(c, buf, sizeof(buf))) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("read");
		full(c, buf, (size_t)r, 1);
	}
	close(c);
	return NULL;
}

static int serve(const char *addr, int k)
{
	pthread_t t[64];
	int l = listener(addr);

	for (int i = 0; i < k; i++) {
		int c = accept(l, NULL, NULL);
		if (c < 0)
			die("accept");
		if (k == 1)
			echo((void *)(long)c);
		else if ((errno = pthread_create(&t[i], NULL, echo, (void *)(long)c)) != 0)
			die("pthread_create");
	}
	for (int i = 0; k > 1 && i < k; i++)
		pthread_join(t[i], NULL);
	close(l);
	return 0;
}

static int dial(const char *addr, const char *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(port))};
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);

	if (s < 0 || inet_pton(AF_INET, addr, &a.sin_addr) != 1)
		die("socket");
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return s;
}

/* exchange sends n pattern bytes on s in chunks of 1..65536, each read
 * back (poll, then read) and checked, then waits for the echo's EOF. */
static int exchange(int s, size_t n)
{
	unsigned char out[65536], in[65536];
	size_t off = 0, chunk = 1;

	while (off < n) {
		size_t k = chunk < n - off ? chunk : n - off;
		struct pollfd p = {.fd = s, .events = POLLIN};
		for (size_t i = 0; i < k; i++)
			out[i] = pat(off + i);
		full(s, out, k, 1);
		if (poll(&p, 1, 10000) != 1 || !(p.revents & POLLIN))
			die("poll");
		full(s, in, k, 0);
		if (memcmp(in, out, k) != 0) {
			fprintf(stderr, "staticecho: bytes differ at %zu..%zu\n", off, off + k);
			return 1;
		}
		off += k;
		chunk = chunk * 3 % 65536 + 1;
	}
	shutdown(s, SHUT_WR);
	if (read(s, in, 1) != 0)
		die("eof");
	close(s);
	return 0;
}

struct tclient {
	pthread_t t;
	int s, bad;
	size_t n;
	pthread_barrier_t *go;
};

static void *tclient_run(void *arg)
{
	struct tclient *c = arg;

	pthread_barrier_wait(c->go);
	c->bad = exchange(c->s, c->n);
	return NULL;
}

static int client(const char *addr, const char *port, int k, size_t n)
{
	struct tclient c[64];
	pthread_barrier_t go;
	char line[16];
	int bad = 0;

	pthread_barrier_init(&go, NULL, (unsigned)k + 1);
	for (int i = 0; i < k; i++) {
		c[i] = (struct tclient){.s = dial(addr, port), .n = n, .go = &go};
		if (k > 1 && (errno = pthread_create(&c[i].t, NULL, tclient_run, &c[i])) != 0)
			die("pthread_create");
	}
	printf("connected\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	if (k == 1)
		bad = exchange(c[0].s, n);
	else
		pthread_barrier_wait(&go);
	for (int i = 0; k > 1 && i < k; i++) {
		pthread_join(c[i].t, NULL);
		bad |= c[i].bad;
	}
	if (bad)
		return 1;
	printf("ok %zu\n", (size_t)k * n);
	return 0;
}

static int pingpong(const char *addr, const char *port, long n)
{
	unsigned char b[64] = {0};
	struct timespec t0, t1;
	int s = dial(addr, port);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++) {
		full(s, b, sizeof(b), 1);
		full(s, b, sizeof(b), 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("rtt_ns %.0f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n);
	close(s);
	return 0;
}

static int forks(void)
{
	int st = 0;
	pid_t p = fork();

	if (p == 0)
		_exit(7);
	if (p < 0 || waitpid(p, &st, 0) != p)
		die("fork");
	printf("child %d\n", WEXITSTATUS(st));
	return 0;
}

static volatile sig_atomic_t handled;

static void on_term(int sig)
{
	(void)sig;
	handled++;
	if (write(1, "handler\n", 8) < 0)
		_exit(3);
}

/* on_sigterm sets SIGTERM's action per mode (dfl, intr, restart). */
static void on_sigterm(const char *mode)
{
	struct sigaction sa = {.sa_handler = on_term};

	if (strcmp(mode, "dfl") == 0)
		return;
	sa.sa_flags = strcmp(mode, "restart") == 0 ? SA_RESTART : 0;
	if (sigaction(SIGTERM, &sa, NULL) < 0)
		die("sigaction");
}

static int sigaccept(const char *addr, const char *mode)
{
	int l, c;

	on_sigterm(mode);
	l = listener(addr);
	c = accept(l, NULL, NULL);
	if (c < 0 && errno == EINTR)
		printf("accept EINTR handled %d\n", (int)handled);
	else if (c >= 0)
		printf("accepted handled %d\n", (int)handled);
	else
		die("accept");
	return 0;
}

static int sigrecv(const char *addr, const char *port, const char *mode)
{
	int s = dial(addr, port);
	char c;
	ssize_t r;

	on_sigterm(mode);
	printf("connected\n");
	fflush(stdout);
	r = recv(s, &c, 1, 0);
	if (r < 0 && errno == EINTR)
		printf("recv EINTR handled %d\n", (int)handled);
	else if (r == 1)
		printf("recv 1 %c handled %d\n", c, (int)handled);
	else
		die("recv");
	return 0;
}

static int sigpeer(const char *addr)
{
	int l = listener(addr), c = accept(l, NULL, NULL);
	char line[16], b[64];

	if (c < 0)
		die("accept");
	if (fgets(line, sizeof(line), stdin) && write(c, "x", 1) != 1)
		die("write");
	while (read(c, b, sizeof(b)) > 0)
		;
	return 0;
}

/* altstack prints what sigaltstack answers for stacks below the kernel's
 * smallest size (2048) and for Go's 32 KiB signal stacks. (One of 2048
 * would be taken, but under dispatch every system call's SIGSYS frame
 * then goes on it, and a frame with AVX-512 state does not fit.) */
static int altstack(void)
{
	static char mem[65536];
	const size_t sizes[] = {1024, 2047, 32768};

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		stack_t ss = {.ss_sp = mem, .ss_size = sizes[i]}, old;
		int r = sigaltstack(&ss, NULL);
		printf("%zu %d %d", sizes[i], r, r < 0 ? errno : 0);
		if (sigaltstack(NULL, &old) < 0)
			die("sigaltstack");
		printf(" %zu\n", old.ss_size);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "serve") == 0)
		return serve(argv[2], 1);
	if (argc == 4 && strcmp(argv[1], "tserve") == 0 && atoi(argv[3]) >= 1 && atoi(argv[3]) <= 64)
		return serve(argv[2], atoi(argv[3]));
	if (argc == 5 && strcmp(argv[1], "client") == 0)
		return client(argv[2], argv[3], 1, (size_t)atol(argv[4]));
	if (argc == 6 && strcmp(argv[1], "tclient") == 0 && atoi(argv[4]) >= 1 && atoi(argv[4]) <= 64)
		return client(argv[2], argv[3], atoi(argv[4]), (size_t)atol(argv[5]));
	if (argc == 5 && strcmp(argv[1], "pingpong") == 0)
		return pingpong(argv[2], argv[3], atol(argv[4]));
	if (argc == 2 && strcmp(argv[1], "fork") == 0)
		return forks();
	if (argc == 4 && strcmp(argv[1], "sigaccept") == 0)
		return sigaccept(argv[2], argv[3]);
	if (argc == 5 && strcmp(argv[1], "sigrecv") == 0)
		return sigrecv(argv[2], argv[3], argv[4]);
	if (argc == 3 && strcmp(argv[1], "sigpeer") == 0)
		return sigpeer(argv[2]);
	if (argc == 2 && strcmp(argv[1], "altstack") == 0)
		return altstack();
	if (argc >= 3 && strcmp(argv[1], "exec") == 0) {
		execv(argv[2], argv + 2);
		die("exec");
	}
	fprintf(stderr, "usage: staticecho serve ADDR | tserve ADDR K | client ADDR PORT N | "
			"tclient ADDR PORT K N | pingpong ADDR PORT N | fork | sigaccept ADDR MODE | "
			"sigrecv ADDR PORT MODE | sigpeer ADDR | altstack | exec PROG ARGS...\n");
	return 2;
}
