//go:build osf_make

/* idlemem: what idle connections hold after moving data (issue 12's
 * memory row in tests/bench/run.sh, and tests/idlemem_test.go).
 *
 *   idlemem server PORT N [MS]  accept N connections on 127.0.0.1:PORT and
 *                               echo every byte back (epoll, level-
 *                               triggered, waits of MS ms, default -1:
 *                               an event loop's timer; MS -2: a thread per
 *                               connection, asleep in a blocking recv);
 *                               prints "listening", then "accepted N";
 *                               runs until killed.
 *   idlemem client PORT N KIB [UNREAD [IDLE]]
 *                               open N connections and move KIB KiB each
 *                               way on each (64 KiB messages, echoed,
 *                               every byte checked); then on every other
 *                               connection send UNREAD more bytes (default
 *                               0) whose echo stays unread; print
 *                               "idle N", and sleep in epoll_wait
 *                               (edge-triggered) until a line arrives on
 *                               stdin. Then read and check the unread
 *                               echoes, move KIB KiB each way again,
 *                               print "ok", close and exit. UNREAD -1:
 *                               none unread, and idle with a thread per
 *                               connection asleep in a blocking recv (the
 *                               echo of one byte sent after the line).
 *                               IDLE (UNREAD >= 0): how the client idles,
 *                               "epoll" (the default, above), "sleep"
 *                               (nanosleep, stdin looked at every 100 ms
 *                               with a zero-timeout poll: no wait on any
 *                               connection) or "poll" (poll() on stdin
 *                               only, its connections unwatched).
 *
 * The bytes are a function of (connection, position), so a byte lost,
 * reordered or zeroed (a page given back too early) is seen. Runs bare or
 * under osf alike. Exit status: 0 ok, 1 wrong data, 2 system error. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG (64 << 10)

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static struct sockaddr_in addr(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	return a;
}

static void raise_nofile(int n)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < (rlim_t)n * 4 + 64) {
		r.rlim_cur = r.rlim_max < (rlim_t)n * 4 + 64 ? r.rlim_max
							     : (rlim_t)n * 4 + 64;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

/* pattern is the byte at position pos of connection c's stream. */
static uint8_t pattern(int c, uint64_t pos)
{
	uint64_t x = (pos >> 3) * 0x9e3779b97f4a7c15ULL + (uint64_t)c * 0xbf58476d1ce4e5b9ULL;

	return (uint8_t)((x >> 32) ^ (x >> (8 * (pos & 7))) ^ 1); /* never a page of zeros */
}

static void fill(uint8_t *b, int c, uint64_t pos, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pattern(c, pos + i);
}

static int check(const uint8_t *b, int c, uint64_t pos, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != pattern(c, pos + i)) {
			fprintf(stderr, "idlemem: conn %d byte %llu: got %u want %u\n", c,
				(unsigned long long)(pos + i), b[i], pattern(c, pos + i));
			return -1;
		}
	return 0;
}

static void send_all(int fd, const uint8_t *b, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			die("send");
		}
		b += w;
		n -= (size_t)w;
	}
}

static void recv_all(int fd, uint8_t *b, size_t n)
{
	while (n > 0) {
		ssize_t r = recv(fd, b, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr, "idlemem: recv: %s\n", r ? strerror(errno) : "end of stream");
			exit(2);
		}
		b += r;
		n -= (size_t)r;
	}
}

/* echo_thread echoes one connection with blocking calls only. */
static void *echo_thread(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t *buf = malloc(MSG);

	if (!buf)
		die("malloc");
	for (;;) {
		ssize_t r = recv(fd, buf, MSG, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		send_all(fd, buf, (size_t)r);
	}
	close(fd);
	free(buf);
	return NULL;
}

static void spawn(void *(*f)(void *), void *arg, pthread_t *t)
{
	pthread_attr_t a;
	pthread_t local;

	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 128 << 10);
	if (pthread_create(t ? t : &local, &a, f, arg) != 0)
		die("pthread_create");
	if (!t)
		pthread_detach(local);
	pthread_attr_destroy(&a);
}

static __attribute__((noreturn)) void server(int port, int n, int ms)
{
	struct sockaddr_in a = addr(port);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), ep, i;
	struct epoll_event ev, evs[64];
	static uint8_t buf[MSG];

	raise_nofile(n);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4096) < 0)
		die("listen");
	printf("listening\n");
	fflush(stdout);
	ep = epoll_create1(0);
	if (ep < 0)
		die("epoll_create1");
	for (i = 0; i < n; i++) {
		int c = accept(l, NULL, NULL);
		if (c < 0)
			die("accept");
		if (ms == -2) {
			spawn(echo_thread, (void *)(intptr_t)c, NULL);
			continue;
		}
		ev.events = EPOLLIN;
		ev.data.fd = c;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) < 0)
			die("epoll_ctl");
	}
	printf("accepted %d\n", n);
	fflush(stdout);
	while (ms == -2)
		pause();
	for (;;) {
		int k = epoll_wait(ep, evs, 64, ms);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			die("epoll_wait");
		for (i = 0; i < k; i++) {
			int fd = evs[i].data.fd;
			ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (r > 0) {
				send_all(fd, buf, (size_t)r); /* the client reads it */
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
			}
		}
	}
}

/* move sends kib KiB on each connection, reading back and checking the
 * echo of every message; pos[c] is connection c's stream position. */
static int move(const int *fds, uint64_t *pos, int n, long kib)
{
	static uint8_t out[MSG], in[MSG];

	for (int c = 0; c < n; c++)
		for (long done = 0; done < kib * 1024;) {
			size_t m = kib * 1024 - done < MSG ? (size_t)(kib * 1024 - done) : MSG;
			fill(out, c, pos[c], m);
			send_all(fds[c], out, m);
			recv_all(fds[c], in, m);
			if (check(in, c, pos[c], m) < 0)
				return -1;
			pos[c] += m;
			done += (long)m;
		}
	return 0;
}

/* A connection idle in a blocking recv: its stream, position and the
 * byte that ends the wait. */
struct waiter {
	int fd, c, ok;
	uint64_t pos;
};

static void *wait_byte(void *arg)
{
	struct waiter *w = arg;
	uint8_t b;

	recv_all(w->fd, &b, 1);
	w->ok = check(&b, w->c, w->pos, 1) == 0;
	return NULL;
}

/* idle_blocking holds every connection in a blocking recv on its own
 * thread until a line arrives on stdin, then ends each wait with one
 * echoed byte. */
static int idle_blocking(const int *fds, uint64_t *pos, int n)
{
	struct waiter *w = calloc((size_t)n, sizeof(*w));
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	char line[64];
	int c, ok = 1;

	if (!w || !t)
		die("calloc");
	for (c = 0; c < n; c++) {
		w[c] = (struct waiter){fds[c], c, 0, pos[c]};
		spawn(wait_byte, &w[c], &t[c]);
	}
	printf("idle %d\n", n);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		die("stdin");
	for (c = 0; c < n; c++) {
		uint8_t b;
		fill(&b, c, pos[c], 1);
		send_all(fds[c], &b, 1);
	}
	for (c = 0; c < n; c++) {
		pthread_join(t[c], NULL);
		ok &= w[c].ok;
		pos[c]++;
	}
	free(w);
	free(t);
	return ok ? 0 : -1;
}

/* idle_elsewhere waits for a line on stdin without watching any
 * connection: asleep in nanosleep, or in poll() on stdin alone. */
static void idle_elsewhere(int sleeping)
{
	struct pollfd p = {0, POLLIN, 0};
	struct timespec tick = {0, 100 * 1000000L};

	if (!sleeping) {
		while (poll(&p, 1, -1) < 0)
			if (errno != EINTR)
				die("poll");
		return;
	}
	while (poll(&p, 1, 0) <= 0) /* a look, never a wait */
		nanosleep(&tick, NULL);
}

/* idle_polling leaves unread bytes on every other connection and sleeps in
 * epoll_wait until a line arrives on stdin (or idles elsewhere: IDLE), then
 * reads and checks them. */
static int idle_polling(const int *fds, uint64_t *pos, int n, long unread, const char *idle)
{
	uint8_t *b = malloc(unread > 0 ? (size_t)unread : 1);
	struct epoll_event ev, evs[64];
	char line[64];
	int ep, c;

	if (!b)
		die("malloc");
	for (c = 0; c < n && unread > 0; c += 2) {
		fill(b, c, pos[c], (size_t)unread);
		send_all(fds[c], b, (size_t)unread);
	}
	if (strcmp(idle, "epoll") != 0) {
		printf("idle %d\n", n);
		fflush(stdout);
		idle_elsewhere(strcmp(idle, "sleep") == 0);
		goto resume;
	}
	ep = epoll_create1(0);
	if (ep < 0)
		die("epoll_create1");
	ev.events = EPOLLIN;
	ev.data.fd = 0;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev) < 0)
		die("epoll_ctl stdin");
	for (c = 0; c < n; c++) {
		ev.events = EPOLLIN | EPOLLET;
		ev.data.fd = fds[c];
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[c], &ev) < 0)
			die("epoll_ctl");
	}
	printf("idle %d\n", n);
	fflush(stdout);
	for (;;) { /* edge-triggered: the unread echoes wake it once each */
		int k = epoll_wait(ep, evs, 64, -1), i, in = 0;
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			die("epoll_wait");
		for (i = 0; i < k; i++)
			in |= evs[i].data.fd == 0;
		if (in)
			break;
	}
resume:
	if (!fgets(line, sizeof(line), stdin))
		die("stdin");
	for (c = 0; c < n && unread > 0; c += 2) {
		recv_all(fds[c], b, (size_t)unread);
		if (check(b, c, pos[c], (size_t)unread) < 0)
			return -1;
		pos[c] += (uint64_t)unread;
	}
	free(b);
	return 0;
}

static int client(int port, int n, long kib, long unread, const char *idle)
{
	struct sockaddr_in a = addr(port);
	int *fds = calloc((size_t)n, sizeof(int)), c;
	uint64_t *pos = calloc((size_t)n, sizeof(uint64_t));

	if (!fds || !pos)
		die("calloc");
	raise_nofile(n);
	for (c = 0; c < n; c++) {
		fds[c] = socket(AF_INET, SOCK_STREAM, 0);
		if (fds[c] < 0 || connect(fds[c], (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
	}
	if (move(fds, pos, n, kib) < 0)
		return 1;
	if ((unread < 0 ? idle_blocking(fds, pos, n) : idle_polling(fds, pos, n, unread, idle)) < 0 ||
	    move(fds, pos, n, kib) < 0)
		return 1;
	for (c = 0; c < n; c++)
		close(fds[c]);
	printf("ok\n");
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "server") == 0)
		server(atoi(argv[2]), atoi(argv[3]), argc >= 5 ? atoi(argv[4]) : -1);
	if (argc >= 5 && strcmp(argv[1], "client") == 0)
		return client(atoi(argv[2]), atoi(argv[3]), atol(argv[4]),
			      argc >= 6 ? atol(argv[5]) : 0, argc >= 7 ? argv[6] : "epoll");
	fprintf(stderr, "usage: idlemem server PORT N [MS] | client PORT N KIB [UNREAD [IDLE]]\n");
	return 2;
}
