//go:build osf_make

/* victim: well-behaved TCP programs that a hostile peer must not crash or
 * hang; each prints "survived" and its outcomes by errno, and exits 0 in
 * bounded time.
 *
 *   victim PORT SECONDS          a client that keeps connecting to
 *       127.0.0.1:PORT and exchanging data through every kind of call
 *       (blocking and non-blocking reads and writes with timeouts, poll,
 *       epoll);
 *   victim server PORT SECONDS   a single-process epoll echo server on
 *       127.0.0.1:PORT that serves everyone for SECONDS or until SIGTERM
 *       (a crash would end it, and the good client after the attack would
 *       fail). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long counts[256];
static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void note(ssize_t r)
{
	counts[r < 0 ? (errno & 0xff) : 0]++;
}

static int echo_server(int port, double secs)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), ep, one = 1;
	struct epoll_event ev = {.events = EPOLLIN}, out[64];
	double end = now() + secs;
	long served = 0;
	static char buf[1 << 16];

	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(l, 64) < 0) {
		perror("victim: listen");
		return 1;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.data.fd = l;
	epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
	signal(SIGTERM, on_term);
	printf("listening\n");
	fflush(stdout);
	while (now() < end && !stop) {
		int n = epoll_wait(ep, out, 64, 50);
		note(n);
		for (int i = 0; i < n; i++) {
			int fd = out[i].data.fd;
			ssize_t r;
			if (fd == l) {
				int c = accept4(l, NULL, NULL, SOCK_NONBLOCK);
				note(c);
				if (c >= 0) {
					struct epoll_event ce = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = c};
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
				}
				continue;
			}
			r = read(fd, buf, sizeof(buf));
			note(r);
			if (r > 0) {
				note(send(fd, buf, (size_t)r, MSG_DONTWAIT | MSG_NOSIGNAL));
				served += r;
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
			}
		}
	}
	printf("survived: served %ld bytes;", served);
	for (int e = 0; e < 256; e++)
		if (counts[e])
			printf(" %s=%ld", e ? strerrorname_np(e) : "ok", counts[e]);
	printf("\n");
	return 0;
}

int main(int argc, char **argv)
{
	int port, conns = 0;
	double end;
	static char buf[1 << 16];
	struct timeval tv = {0, 50000};

	if (argc == 4 && strcmp(argv[1], "server") == 0)
		return echo_server(atoi(argv[2]), atof(argv[3]));
	if (argc != 3) {
		fprintf(stderr, "usage: victim PORT SECONDS\n");
		return 2;
	}
	port = atoi(argv[1]);
	end = now() + atof(argv[2]);
	signal(SIGPIPE, SIG_IGN);
	while (now() < end) {
		struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int fd = socket(AF_INET, SOCK_STREAM, 0), ep, i, v;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET}, out[4];

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
			note(-1);
			close(fd);
			usleep(10000);
			continue;
		}
		conns++;
		ep = epoll_create1(EPOLL_CLOEXEC);
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		for (i = 0; i < 200 && now() < end; i++) {
			struct pollfd p = {fd, POLLIN | POLLOUT, 0};
			switch (i % 8) {
			case 0:
				note(write(fd, buf, 1 + rand() % sizeof(buf)));
				break;
			case 1:
				note(read(fd, buf, sizeof(buf)));
				break;
			case 2:
				note(send(fd, buf, 1 + rand() % 4096, MSG_DONTWAIT));
				break;
			case 3:
				note(recv(fd, buf, sizeof(buf), MSG_DONTWAIT | (i & 16 ? MSG_PEEK : 0)));
				break;
			case 4:
				note(poll(&p, 1, 20));
				break;
			case 5:
				note(epoll_wait(ep, out, 4, 20));
				break;
			case 6:
				note(ioctl(fd, FIONREAD, &v));
				break;
			default:
				note(recv(fd, buf, sizeof(buf), MSG_WAITALL));
				break;
			}
		}
		close(ep);
		close(fd);
	}
	printf("survived: %d connections;", conns);
	for (int e = 0; e < 256; e++)
		if (counts[e])
			printf(" %s=%ld", e ? strerrorname_np(e) : "ok", counts[e]);
	printf("\n");
	return 0;
}
