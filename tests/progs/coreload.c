//go:build osf_make

/* coreload: measures what the first core-loading call costs a process.
 *
 * The listener is set up with raw system calls (not through the hooks), so
 * under osf the first connect() of a TCP socket is the first call that
 * needs the Go core: its time includes loading it. A second connect() shows
 * the steady cost. A fork child then does the same: the inherited core is
 * stale there, so its first connect() loads a fresh copy from a memfd.
 * Prints one line, times in milliseconds:
 *
 *   first_ms=3.512 second_ms=0.061 child_first_ms=4.020 child_second_ms=0.058
 *
 * and, on stderr, "maps: libosf=N libosfcore=N" for the parent. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "progs.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int lfd;
static struct sockaddr_in addr;

/* timed_connect connects a new TCP socket to the listener, accepts it and
 * returns how long connect() took, in ms. */
static double timed_connect(void)
{
	int c = socket(AF_INET, SOCK_STREAM, 0), s;
	double t0, t1;

	if (c < 0) {
		perror("socket");
		exit(2);
	}
	t0 = now_ms();
	if (connect(c, (struct sockaddr *)&addr, sizeof addr) < 0) {
		perror("connect");
		exit(2);
	}
	t1 = now_ms();
	s = (int)syscall(SYS_accept4, lfd, NULL, NULL, 0);
	if (s >= 0)
		syscall(SYS_close, s);
	close(c);
	return t1 - t0;
}

int main(void)
{
	socklen_t al = sizeof addr;
	double first, second, child[2];
	int p[2];
	pid_t pid;

	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || syscall(SYS_bind, lfd, &addr, sizeof addr) < 0 ||
	    syscall(SYS_listen, lfd, 16) < 0 ||
	    syscall(SYS_getsockname, lfd, &addr, &al) < 0) {
		perror("listener");
		return 2;
	}
	first = timed_connect();
	second = timed_connect();
	maps_report();
	if (pipe(p) < 0) {
		perror("pipe");
		return 2;
	}
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		child[0] = timed_connect();
		child[1] = timed_connect();
		if (write(p[1], child, sizeof child) != (ssize_t)sizeof child)
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	if (read(p[0], child, sizeof child) != (ssize_t)sizeof child) {
		fprintf(stderr, "coreload: the child failed\n");
		return 1;
	}
	waitpid(pid, NULL, 0);
	printf("first_ms=%.3f second_ms=%.3f child_first_ms=%.3f child_second_ms=%.3f\n",
	       first, second, child[0], child[1]);
	return 0;
}
