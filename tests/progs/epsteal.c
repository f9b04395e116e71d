//go:build osf_make

/* epsteal: one thread blocks in epoll_wait (timeout -1) while another
 * makes non-blocking waits on the same epoll and takes what the blocked
 * one was woken for; the kernel still wakes the blocked wait for what is
 * left or comes next. One case per run:
 *
 *   epsteal edge|maxev|ctladd|ctlmod|poll2|young
 *
 *   edge    an edge-triggered connection reported by the non-blocking
 *           wait, read with a short read (no EAGAIN), then more data
 *           arrives: the blocked wait reports it.
 *   maxev   two connections become ready, the non-blocking wait takes one
 *           (maxevents 1): the blocked wait reports the other.
 *   ctladd  a connection with data waiting is added while the wait is
 *           blocked: it reports it.
 *   ctlmod  a registration for no event is changed to EPOLLIN while data
 *           waits and the wait is blocked: it reports it.
 *   poll2   two threads block in poll(POLLIN) on one connection: one
 *           write wakes both.
 *   young   the wait blocks on an epoll with no connection in it (a
 *           pipe only); a connection is added, a non-blocking wait
 *           made, then a second connection with data waiting is added:
 *           the blocked wait reports it.
 *
 * The blocked thread runs under SCHED_IDLE on the CPU of the main thread,
 * which busy-waits meanwhile, so that the main thread's non-blocking wait
 * comes first. When the blocked wait got the event before the main
 * thread's (it ran anyway), the attempt proves nothing and is made again
 * (at most 20 times). It prints
 *
 *   result ok CASE (N attempts)
 *   result lost CASE: ...
 *
 * and exits 0 only for ok.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "pair.h"

#define NPAIR 3
#define LOST_MS 3000

static const char *what;
static int ep, lst[NPAIR], cli[NPAIR], srv[NPAIR];
static int got[2];          /* per blocked thread: 1 + the fd it reported */
static unsigned got_ev[2];

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000;
}

static void die(const char *w)
{
	perror(w);
	exit(2);
}

static void lost(const char *fmt, const char *detail)
{
	printf("result lost %s: ", what);
	printf(fmt, detail);
	printf("\n");
	fflush(stdout);
	_exit(1);
}

/* pin puts the calling thread on the main thread's CPU, under
 * SCHED_IDLE when idle is set. */
static int cpu;
static void pin(int idle)
{
	cpu_set_t set;
	struct sched_param sp = {0};

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) < 0)
		die("sched_setaffinity");
	if (idle && sched_setscheduler(0, SCHED_IDLE, &sp) < 0)
		die("sched_setscheduler");
}

static void *blocked_epoll(void *arg)
{
	struct epoll_event ev[8];
	int n;

	(void)arg;
	pin(1);
	do
		n = epoll_wait(ep, ev, 8, -1);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		die("blocked epoll_wait");
	got_ev[0] = ev[0].events;
	__atomic_store_n(&got[0], 1 + ev[0].data.fd, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *blocked_poll(void *arg)
{
	long i = (long)arg;
	struct pollfd p = {srv[0], POLLIN, 0};
	int n;

	pin(1);
	do
		n = poll(&p, 1, -1);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		die("blocked poll");
	got_ev[i] = (unsigned)p.revents;
	__atomic_store_n(&got[i], 1 + srv[0], __ATOMIC_SEQ_CST);
	return NULL;
}

static void reg(int op, int fd, uint32_t events)
{
	struct epoll_event e = {.events = events, .data.fd = fd};

	if (epoll_ctl(ep, op, fd, &e) < 0)
		die("epoll_ctl");
}

static void put(int fd, const char *b)
{
	if (write(fd, b, strlen(b)) != (ssize_t)strlen(b))
		die("write");
}

/* nb_take makes non-blocking waits (maxevents max) until one reports
 * something, busy, for at most 2 s or until the blocked thread reported
 * something; the first fd reported, or -1. */
static int nb_take(int max)
{
	struct epoll_event ev[8];
	long end = now_ms() + 2000;

	while (now_ms() < end && !__atomic_load_n(&got[0], __ATOMIC_SEQ_CST)) {
		int n = epoll_wait(ep, ev, max, 0);
		if (n < 0 && errno != EINTR)
			die("epoll_wait 0");
		if (n > 0)
			return ev[0].data.fd;
	}
	return -1;
}

/* await waits (sleeping: the CPU is the blocked thread's) for blocked
 * thread i to report fd; 0 when it did. */
static int await(int i, int fd)
{
	long end = now_ms() + LOST_MS;

	while (now_ms() < end) {
		int g = __atomic_load_n(&got[i], __ATOMIC_SEQ_CST);
		if (g == 1 + fd)
			return 0;
		if (g)
			lost("%s", "the blocked wait reported another fd");
		usleep(1000);
	}
	return -1;
}

/* attempt runs the case once: 1 when it proves nothing (the blocked
 * thread got the event first), 0 when the blocked thread saw what it
 * must. */
static int attempt(void)
{
	pthread_t t[2];
	char b[256];
	int i, nt = 1, fd, raced = 0, pfd[2];

	memset(got, 0, sizeof got);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	for (i = 0; i < NPAIR; i++) {
		if (loopback_pair(&lst[i], &cli[i], &srv[i]) < 0)
			exit(2);
		if (fcntl(srv[i], F_SETFL, O_NONBLOCK) < 0)
			die("fcntl");
	}
	if (!strcmp(what, "young")) {
		if (pipe(pfd) < 0)
			die("pipe");
		reg(EPOLL_CTL_ADD, pfd[0], EPOLLIN);
	} else if (!strcmp(what, "ctlmod"))
		reg(EPOLL_CTL_ADD, srv[0], EPOLLET); /* errors only */
	else if (strcmp(what, "ctladd"))
		reg(EPOLL_CTL_ADD, srv[0], EPOLLIN | EPOLLET);
	if (!strcmp(what, "maxev"))
		reg(EPOLL_CTL_ADD, srv[1], EPOLLIN | EPOLLET);
	if (!strcmp(what, "poll2")) {
		nt = 2;
		for (i = 0; i < 2; i++)
			if (pthread_create(&t[i], NULL, blocked_poll, (void *)(long)i))
				die("pthread_create");
	} else if (pthread_create(&t[0], NULL, blocked_epoll, NULL)) {
		die("pthread_create");
	}
	usleep(100000); /* the blocked thread sleeps in the kernel */
	if (!strcmp(what, "edge")) {
		put(cli[0], "x");
		fd = nb_take(8);
		if (__atomic_load_n(&got[0], __ATOMIC_SEQ_CST)) {
			raced = 1;
		} else {
			if (fd != srv[0])
				lost("the non-blocking wait got %s", fd < 0 ? "nothing" : "another fd");
			if (read(srv[0], b, sizeof b) != 1) /* short: no EAGAIN */
				die("read");
			put(cli[0], "y");
			if (await(0, srv[0]) < 0)
				lost("%s", "data arrived after the non-blocking wait reported an "
					   "edge, and the blocked wait never reported it");
		}
	} else if (!strcmp(what, "maxev")) {
		put(cli[0], "x");
		put(cli[1], "x");
		fd = nb_take(1);
		if (__atomic_load_n(&got[0], __ATOMIC_SEQ_CST)) {
			raced = 1;
		} else {
			if (fd != srv[0] && fd != srv[1])
				lost("the non-blocking wait got %s", fd < 0 ? "nothing" : "another fd");
			if (await(0, fd == srv[0] ? srv[1] : srv[0]) < 0)
				lost("%s", "two connections ready, the non-blocking wait took one "
					   "(maxevents 1), and the blocked wait never reported the other");
		}
	} else if (!strcmp(what, "ctladd") || !strcmp(what, "ctlmod")) {
		put(cli[0], "x");
		usleep(20000);
		reg(strcmp(what, "ctladd") ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, srv[0],
		    EPOLLIN | EPOLLET);
		if (await(0, srv[0]) < 0)
			lost("%s", "epoll_ctl registered a ready connection and the blocked "
				   "wait never reported it");
	} else if (!strcmp(what, "young")) {
		struct epoll_event ev;
		reg(EPOLL_CTL_ADD, srv[0], EPOLLIN | EPOLLET);
		if (epoll_wait(ep, &ev, 1, 0) != 0)
			lost("%s", "the non-blocking wait reported something");
		put(cli[1], "x");
		usleep(20000);
		reg(EPOLL_CTL_ADD, srv[1], EPOLLIN | EPOLLET);
		if (await(0, srv[1]) < 0)
			lost("%s", "a connection with data was added while the wait, begun "
				   "before the epoll had a connection, was blocked, and it "
				   "never reported it");
		close(pfd[0]);
		close(pfd[1]);
	} else if (!strcmp(what, "poll2")) {
		put(cli[0], "x");
		for (i = 0; i < 2; i++)
			if (await(i, srv[0]) < 0)
				lost("%s", "one write woke one of two threads blocked in poll");
	} else {
		fprintf(stderr, "epsteal: unknown case %s\n", what);
		exit(2);
	}
	if (!raced && !(got_ev[0] & (EPOLLIN | POLLIN)))
		lost("%s", "the blocked wait reported no input");
	if (raced) /* end the blocked wait, whatever it waits for */
		for (i = 0; i < NPAIR; i++)
			put(cli[i], "z");
	for (i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < NPAIR; i++) {
		close(cli[i]);
		close(srv[i]);
		close(lst[i]);
	}
	close(ep);
	return raced;
}

int main(int argc, char **argv)
{
	cpu_set_t set;
	int i;

	if (argc != 2) {
		fprintf(stderr, "usage: epsteal edge|maxev|ctladd|ctlmod|poll2|young\n");
		return 2;
	}
	what = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (sched_getaffinity(0, sizeof set, &set) < 0)
		die("sched_getaffinity");
	for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set); cpu++)
		;
	pin(0);
	for (i = 1; i <= 20; i++)
		if (!attempt()) {
			printf("result ok %s (%d attempts)\n", what, i);
			return 0;
		}
	printf("result ok %s (inconclusive: the blocked wait was first in 20 attempts)\n", what);
	return 0;
}
