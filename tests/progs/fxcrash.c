//go:build osf_make

/* fxcrash: one end of a large TCP transfer whose other end a test kills,
 * reporting exactly how the end of the connection showed here.
 *
 *   fxcrash listen|connect PORT ROLE OP
 *
 * listen: listens on 127.0.0.1:PORT, prints "listening", accepts one
 * connection and closes the listener; connect: connects to it. Then
 * "connected PID FD", and ROLE:
 *
 *   send       write a 1 GiB pattern (64 KiB writes)
 *   sendpause  write the first 16 MiB of it, print "paused", then sleep
 *              until killed (the middle of a transfer, with nothing moving)
 *   recv       read until end of file or error, checking every byte
 *              against the pattern; "flowing" after the first 16 MiB
 *   sink       never read; sleep until killed
 *
 * OP is how the program waits: rw (blocking read/write), poll (nonblocking
 * socket, poll() before retrying) or epoll (nonblocking, level-triggered
 * epoll_wait). SIGPIPE is ignored, so a write to a dead connection shows
 * as EPIPE. When the connection ends it prints one line and exits 0:
 *
 *   outcome EOF bytes N verified at T                 (recv)
 *   outcome ECONNRESET bytes N verified at T          (recv, an error)
 *   outcome ECONNRESET then EPIPE bytes N at T        (send: the first
 *       failing write's errno, then what the next write of 64 KiB
 *       returned: an errno name, or "ok")
 *
 * N counts the bytes moved (for recv, all of them matched the pattern; a
 * mismatch prints "outcome CORRUPT at offset N" and exits 1), T is
 * CLOCK_MONOTONIC in nanoseconds when the end was seen. For poll and
 * epoll it first prints "revents 0xR" with what the last wait reported.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TOTAL (1ULL << 30)
#define PAUSE_AT (16ULL << 20)
#define CHUNK 65536

static int s, ep = -1, op_poll, op_epoll;
static unsigned last_revents;

static void die(const char *what)
{
	fprintf(stderr, "fxcrash: %s: %s\n", what, strerror(errno));
	exit(2);
}

static unsigned long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}

static inline uint8_t pat(uint64_t off)
{
	return (uint8_t)(off * 131 + (off >> 9) + (off >> 17));
}

/* await waits until the socket may be ready for events (POLLIN or
 * POLLOUT), in the way OP says. */
static void await(short events)
{
	if (op_poll) {
		struct pollfd p = {s, events, 0};
		while (poll(&p, 1, -1) < 0)
			if (errno != EINTR)
				die("poll");
		last_revents = (unsigned)p.revents;
	} else if (op_epoll) {
		struct epoll_event ev = {
			.events = (events & POLLIN ? EPOLLIN | EPOLLRDHUP : 0) |
				  (events & POLLOUT ? EPOLLOUT : 0)};
		int r;
		if (epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev) < 0)
			die("epoll_ctl");
		while ((r = epoll_wait(ep, &ev, 1, -1)) <= 0)
			if (r < 0 && errno != EINTR)
				die("epoll_wait");
		last_revents = ev.events;
	}
}

static void report_revents(void)
{
	if (op_poll || op_epoll)
		printf("revents 0x%x\n", last_revents);
}

static const char *name(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "unknown";
}

static void do_send(int pause_at)
{
	static uint8_t buf[CHUNK];
	uint64_t off = 0;
	ssize_t w;

	for (;;) {
		for (size_t i = 0; i < CHUNK; i++)
			buf[i] = pat(off + i);
		for (size_t done = 0; done < CHUNK;) {
			w = write(s, buf + done, CHUNK - done);
			if (w > 0) {
				done += (size_t)w;
				continue;
			}
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno == EAGAIN && (op_poll || op_epoll)) {
				await(POLLOUT);
				continue;
			}
			{
				int first = w < 0 ? errno : 0;
				unsigned long long t = now_ns();
				ssize_t w2 = write(s, buf, CHUNK);
				int second = errno;
				report_revents();
				printf("outcome %s then %s bytes %llu at %llu\n",
				       w == 0 ? "zero-write" : name(first),
				       w2 >= 0 ? "ok" : name(second),
				       (unsigned long long)(off + done), t);
				exit(0);
			}
		}
		off += CHUNK;
		if (pause_at && off == PAUSE_AT) {
			printf("paused\n");
			for (;;)
				pause();
		}
		if (off == TOTAL) {
			printf("outcome all-sent bytes %llu at %llu\n",
			       (unsigned long long)off, now_ns());
			exit(0);
		}
	}
}

static void do_recv(void)
{
	static uint8_t buf[CHUNK];
	uint64_t off = 0;
	int flowing = 0;

	for (;;) {
		ssize_t r = read(s, buf, sizeof buf);
		if (r > 0) {
			for (ssize_t i = 0; i < r; i++)
				if (buf[i] != pat(off + (uint64_t)i)) {
					printf("outcome CORRUPT at offset %llu\n",
					       (unsigned long long)off + (unsigned long long)i);
					exit(1);
				}
			off += (uint64_t)r;
			if (!flowing && off >= PAUSE_AT) {
				printf("flowing\n");
				flowing = 1;
			}
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN && (op_poll || op_epoll)) {
			await(POLLIN);
			continue;
		}
		{
			unsigned long long t = now_ns();
			report_revents();
			printf("outcome %s bytes %llu verified at %llu\n",
			       r == 0 ? "EOF" : name(errno), (unsigned long long)off, t);
			exit(0);
		}
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	const char *role, *op;
	int one = 1;

	if (argc < 5) {
		fprintf(stderr, "usage: fxcrash listen|connect PORT send|sendpause|recv|sink rw|poll|epoll\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	a.sin_port = htons((unsigned short)atoi(argv[2]));
	role = argv[3];
	op = argv[4];
	op_poll = strcmp(op, "poll") == 0;
	op_epoll = strcmp(op, "epoll") == 0;

	if (strcmp(argv[1], "listen") == 0) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
		    bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0)
			die("listen");
		printf("listening\n");
		s = accept(l, NULL, NULL);
		if (s < 0)
			die("accept");
		close(l);
	} else {
		s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
			die("connect");
	}
	if (op_poll || op_epoll) {
		if (fcntl(s, F_SETFL, O_NONBLOCK) < 0)
			die("fcntl");
	}
	if (op_epoll) {
		struct epoll_event ev = {.events = EPOLLIN};
		ep = epoll_create1(EPOLL_CLOEXEC);
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) < 0)
			die("epoll");
	}
	printf("connected %d %d\n", (int)getpid(), s);

	if (strcmp(role, "send") == 0)
		do_send(0);
	else if (strcmp(role, "sendpause") == 0)
		do_send(1);
	else if (strcmp(role, "recv") == 0)
		do_recv();
	else if (strcmp(role, "sink") == 0)
		for (;;)
			pause();
	fprintf(stderr, "fxcrash: unknown role %s\n", role);
	return 2;
}
