/* sigmux PORT SECONDS: a SIGALRM handler, run every 100 µs by an interval
 * timer, calls setsockopt(SO_RCVLOWAT), setsockopt(SO_SNDBUF) and
 * shutdown(SHUT_WR) on connected sockets while the main thread waits on
 * them in epoll_wait and poll, over and over. Under osf those calls
 * re-check the process's epoll items (selectmux/notify.c osf_mux_changed),
 * which takes the locks a wait holds while it collects and arms items: a
 * handler landing there waited for its own thread for ever. Prints "waits
 * N handlers M"; exits 1 when no handler ran during a wait. The caller
 * bounds the run (a hang is a failure). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define PAIRS 3

static int cli[PAIRS], srv[PAIRS];
static volatile long handlers;

static void on_alarm(int sig)
{
	int saved = errno, one = 1, buf = 65536;

	(void)sig;
	setsockopt(srv[0], SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
	setsockopt(srv[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
	shutdown(cli[2], SHUT_WR);
	handlers++;
	errno = saved;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct epoll_event ev, out[8];
	struct pollfd pf[PAIRS];
	struct itimerval it = {{0, 100}, {0, 100}};
	struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
	int l, ep, i, one = 1;
	long waits = 0;
	time_t end;

	if (argc != 3)
		return 2;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(atoi(argv[1]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 8)) {
		perror("sigmux: listen");
		return 1;
	}
	ep = epoll_create1(0);
	for (i = 0; i < PAIRS; i++) {
		cli[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(cli[i], (struct sockaddr *)&a, sizeof a) ||
		    (srv[i] = accept(l, NULL, NULL)) < 0) {
			perror("sigmux: connect");
			return 1;
		}
		ev.events = EPOLLIN | EPOLLOUT;
		ev.data.fd = srv[i];
		epoll_ctl(ep, EPOLL_CTL_ADD, srv[i], &ev);
		ev.events = EPOLLIN;
		ev.data.fd = cli[i];
		epoll_ctl(ep, EPOLL_CTL_ADD, cli[i], &ev);
		pf[i].fd = cli[i];
		pf[i].events = POLLIN;
	}
	if (write(cli[0], "x", 1) != 1) /* srv[0] stays readable */
		return 1;
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	end = time(NULL) + atoi(argv[2]);
	while (time(NULL) < end) {
		epoll_wait(ep, out, 8, 1);
		poll(pf, PAIRS, 1);
		waits += 2;
	}
	it.it_value.tv_usec = it.it_interval.tv_usec = 0;
	setitimer(ITIMER_REAL, &it, NULL);
	printf("waits %ld handlers %ld\n", waits, handlers);
	return handlers > 0 ? 0 : 1;
}
