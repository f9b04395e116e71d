//go:build osf_make

/* tokens: wake tokens must never pile up, and a wake-up must never be lost
 * (issue 10, item 1). One process, one connection to itself (a: client,
 * b: server end, non-blocking, in an epoll).
 *
 *   tokens N
 *
 * N times, as an event loop would: epoll_wait(timeout 0) finds b not
 * ready (osf asks the peer for a wake-up), EPOLL_CTL_MOD updates b's
 * interest (that wait is over), a sends one byte (a wake-up may go out),
 * epoll_wait reports b, b reads the byte. Then a thread sleeps
 * in epoll_wait for b while a sends one more byte: it must wake. Under
 * osf the wake tokens queued on b's wake socket (the fd itself, asked
 * with a raw FIONREAD that osf does not see) must stay bounded.
 *
 * Prints "transport offloaded" (or "tcp" without osf), then
 * "PASS queued=Q woken=1" or "FAIL ..." and exits 1. */
#include "progs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define QUEUED_MAX 64 /* tokens: a few wake-ups' worth, never more */

static int ep;
static int woke = -1;

static void *sleeper(void *arg)
{
	struct epoll_event e;

	(void)arg;
	woke = epoll_wait(ep, &e, 1, 5000);
	return NULL;
}

static int queued(int fd)
{
	int n = -1;

	if (syscall(SYS_ioctl, fd, FIONREAD, &n) < 0)
		return -1;
	return n;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	struct epoll_event e = {EPOLLIN, {.fd = 0}};
	int l, a, b, n = argc > 1 ? atoi(argv[1]) : 1000, q, maxq = 0;
	pthread_t t;
	char c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &sl) < 0) {
		printf("FAIL listen: %s\n", strerror(errno));
		return 1;
	}
	a = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(a, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (b = accept4(l, NULL, NULL, SOCK_NONBLOCK)) < 0) {
		printf("FAIL connect/accept: %s\n", strerror(errno));
		return 1;
	}
	{ /* what the fd really is: AF_UNIX when osf offloaded it, or a TCP
	   * socket osf offloads (OSF_SHM_KFD=1: qsock says so) */
		int dom = 0;
		socklen_t dl = sizeof(dom);
		syscall(SYS_getsockopt, b, SOL_SOCKET, SO_DOMAIN, &dom, &dl);
		printf("transport %s\n", dom == AF_UNIX || osf_offloaded(b) ? "offloaded" : "tcp");
	}
	ep = epoll_create1(0);
	e.data.fd = b;
	epoll_ctl(ep, EPOLL_CTL_ADD, b, &e);
	for (int i = 0; i < n; i++) {
		struct epoll_event got[8]; /* as event loops ask for several */
		if (epoll_wait(ep, got, 8, 0) != 0) {
			printf("FAIL round %d: b ready before anything was sent\n", i);
			return 1;
		}
		e.events = (i & 1) ? EPOLLIN : EPOLLIN | EPOLLRDHUP;
		epoll_ctl(ep, EPOLL_CTL_MOD, b, &e);
		if (send(a, "x", 1, 0) != 1) {
			printf("FAIL round %d: send: %s\n", i, strerror(errno));
			return 1;
		}
		if (epoll_wait(ep, got, 8, 5000) != 1) {
			printf("FAIL round %d: b not ready after a sent\n", i);
			return 1;
		}
		if (recv(b, &c, 1, 0) != 1 || c != 'x') {
			printf("FAIL round %d: recv: %s\n", i, strerror(errno));
			return 1;
		}
		q = queued(b);
		if (q > maxq)
			maxq = q;
	}
	pthread_create(&t, NULL, sleeper, NULL);
	usleep(100000); /* the thread sleeps in epoll_wait by now */
	if (send(a, "y", 1, 0) != 1) {
		printf("FAIL send: %s\n", strerror(errno));
		return 1;
	}
	pthread_join(t, NULL);
	if (woke != 1) {
		printf("FAIL lost wake-up: epoll_wait returned %d after 5 s with a byte "
		       "waiting (queued=%d after %d rounds)\n", woke, maxq, n);
		return 1;
	}
	if (maxq > QUEUED_MAX) {
		printf("FAIL wake tokens pile up: %d queued after %d rounds\n", maxq, n);
		return 1;
	}
	printf("PASS queued=%d woken=1\n", maxq);
	return 0;
}
