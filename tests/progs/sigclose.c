/* sigclose PORT SECONDS: a SIGALRM handler, run every 50 µs by an
 * interval timer, closes a connected socket while the main thread waits
 * on it in epoll_wait, poll or select, round after round for SECONDS. Under
 * osf a close drops the fd from the process's epolls (selectmux/mux.c),
 * which takes the locks a wait holds while it collects and arms items: a
 * handler landing there waited for its own thread for ever.
 *
 * Each round makes a connection, checks its bytes, registers both ends in
 * an epoll (data: round and fd), and waits until the handler closed the
 * accepted end. Then, as with kernel TCP: the interrupted wait returned
 * events or -1 with EINTR, never POLLNVAL or EBADF for the closed fd (the
 * handler ran during the call, as after it); the fd number is free (the
 * next socket gets it); the peer reads EOF; the epoll never reports the
 * closed fd again. Prints "rounds N epoll E poll P select S"; exits 1 on
 * any difference. The caller bounds the run (a hang is a failure). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t victim = -1, closed_fd = -1;

static void on_alarm(int sig)
{
	int saved = errno, fd = victim;

	(void)sig;
	if (fd >= 0) {
		victim = -1;
		if (close(fd) == 0)
			closed_fd = fd;
	}
	errno = saved;
}

static int fail(const char *what, long round)
{
	fprintf(stderr, "sigclose: round %ld: %s (errno %d %s)\n", round, what,
		errno, strerror(errno));
	return 1;
}

static void timer(long us)
{
	struct itimerval it = {{0, us}, {0, us}};

	setitimer(ITIMER_REAL, &it, NULL);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
	long round = 0, by[3] = {0, 0, 0};
	int l, ep, one = 1;
	time_t end;

	if (argc != 3)
		return 2;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(atoi(argv[1]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 8))
		return fail("listen", 0);
	ep = epoll_create1(0);
	sigaction(SIGALRM, &sa, NULL);
	end = time(NULL) + atoi(argv[2]);
	for (round = 0; time(NULL) < end; round++) {
		struct epoll_event ev, out[8];
		uint64_t tag;
		char buf[16];
		int cli, srv, mode = (int)(round % 3), i, n, fd, spins;

		cli = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(cli, (struct sockaddr *)&a, sizeof a) ||
		    (srv = accept(l, NULL, NULL)) < 0)
			return fail("connect", round);
		if (write(cli, "ping", 4) != 4 || read(srv, buf, sizeof buf) != 4 ||
		    memcmp(buf, "ping", 4))
			return fail("bytes", round);
		tag = (uint64_t)round << 32 | (uint32_t)srv;
		ev.events = EPOLLIN;
		ev.data.u64 = tag;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, srv, &ev))
			return fail("epoll_ctl srv", round);
		ev.data.u64 = (uint64_t)round << 32 | (uint32_t)cli;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cli, &ev))
			return fail("epoll_ctl cli", round);
		closed_fd = -1;
		victim = srv;
		timer(50);
		for (spins = 0; closed_fd < 0; spins++) {
			if (spins > 100000)
				return fail("the handler never closed", round);
			if (mode == 0) {
				n = epoll_wait(ep, out, 8, 1);
				for (i = 0; i < n; i++)
					if (out[i].data.u64 == tag)
						return fail("epoll reported the idle srv", round);
			} else if (mode == 1) {
				struct pollfd pf[2] = {{cli, POLLIN, 0}, {srv, POLLIN, 0}};
				n = poll(pf, 2, 1);
				if (n > 0)
					return fail(pf[1].revents & POLLNVAL
							    ? "poll said POLLNVAL for the fd its handler closed"
							    : "poll reported an idle fd",
						    round);
			} else {
				fd_set r;
				struct timeval tv = {0, 1000};
				FD_ZERO(&r);
				FD_SET(cli, &r);
				FD_SET(srv, &r);
				n = select(srv + 1, &r, NULL, NULL, &tv);
				if (n < 0 && errno == EBADF)
					return fail("select said EBADF for the fd its handler closed", round);
				if (n > 0)
					return fail("select reported an idle fd", round);
			}
			if (n < 0 && errno != EINTR)
				return fail("wait", round);
		}
		timer(0);
		by[mode]++;
		/* The number is free: the lowest, as srv was the highest. */
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd != srv)
			return fail("the closed fd's number is not free", round);
		close(fd);
		if (read(cli, buf, sizeof buf) != 0)
			return fail("the peer did not read EOF", round);
		n = epoll_wait(ep, out, 8, 0);
		for (i = 0; i < n; i++)
			if (out[i].data.u64 == tag)
				return fail("epoll reported the closed fd", round);
		if (epoll_ctl(ep, EPOLL_CTL_DEL, srv, NULL) == 0 || errno != EBADF)
			return fail("EPOLL_CTL_DEL of the closed fd: not EBADF", round);
		if (epoll_ctl(ep, EPOLL_CTL_DEL, cli, NULL))
			return fail("EPOLL_CTL_DEL cli", round);
		close(cli);
	}
	printf("rounds %ld epoll %ld poll %ld select %ld\n", round, by[0], by[1], by[2]);
	return 0;
}
