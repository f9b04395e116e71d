//go:build osf_make

/* costop: a connection shared by two processes, one of which is stopped
 * (SIGSTOP, a debugger) while it copies out of the ring (issue 10, item 8).
 *
 *   costop SECONDS      (under osf, best with OSF_RING_SIZE=64M) make a
 *                       connection to itself (a, b), fork: the child reads
 *                       b in 64 MiB gulps, the parent's thread writes a.
 *                       Prints "child PID". Every 50 ms the parent tries a
 *                       non-blocking read of b: EAGAIN while bytes wait
 *                       (FIONREAD) means that a stopped child holds the
 *                       consumers' lock ("parent: held by a stopped
 *                       holder", once). ECONNRESET, anywhere, fails,
 *                       and so does a non-blocking read that blocks (1 s):
 *                       "FAIL ...". After SECONDS (or at SIGUSR1): "PASS".
 *
 * The test stops and continues the child; a stopped holder is not a dead
 * one, so nobody may see a reset, as with TCP. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pair.h"

static int a;
static volatile sig_atomic_t done;

static void finish(int sig) { (void)sig; done = 1; }

static void *writer(void *arg)
{
	static char buf[1 << 20];

	(void)arg;
	memset(buf, 'w', sizeof(buf));
	for (;;)
		if (send(a, buf, sizeof(buf), MSG_NOSIGNAL) < 0 && errno != EINTR) {
			printf("FAIL writer: %s\n", strerror(errno));
			exit(1);
		}
	return NULL;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double until = now() + (argc > 1 ? atof(argv[1]) : 20);
	int l, b, said = 0, st;
	pthread_t t;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (loopback_pair(&l, &b, &a) < 0)
		return 1;
	pid = fork();
	if (pid == 0) {
		size_t cap = 64 << 20;
		char *buf = malloc(cap);
		close(a);
		for (;;) {
			ssize_t n = recv(b, buf, cap, 0);
			if (n <= 0) {
				printf("FAIL child: recv %s\n", n == 0 ? "EOF" : strerror(errno));
				_exit(1);
			}
		}
	}
	signal(SIGUSR1, finish);
	printf("child %d\n", (int)pid);
	pthread_create(&t, NULL, writer, NULL);
	while (now() < until && !done) {
		char c;
		int avail = 0;
		double t0 = now();
		ssize_t n = recv(b, &c, 1, MSG_DONTWAIT);
		if (now() - t0 > 1.0) {
			printf("FAIL parent: a non-blocking recv took %.0f ms\n", (now() - t0) * 1e3);
			kill(pid, SIGKILL);
			return 1;
		}
		if (n < 0 && errno == ECONNRESET) {
			printf("FAIL parent: recv ECONNRESET\n");
			kill(pid, SIGKILL);
			return 1;
		}
		if (n < 0 && errno == EAGAIN && ioctl(b, FIONREAD, &avail) == 0 && avail > 0 && !said) {
			printf("parent: held by a stopped holder\n");
			said = 1;
		}
		if (waitpid(pid, &st, WNOHANG) == pid) {
			printf("FAIL the child ended\n");
			return 1;
		}
		usleep(50000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	printf("PASS\n");
	return 0;
}
