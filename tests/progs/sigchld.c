//go:build osf_make

/* sigchld: reaps forked children from a SIGCHLD handler.
 *
 *   sigchld [--core]
 *
 * Installs a SIGCHLD handler (SA_RESTART|SA_NOCLDSTOP) that reaps with
 * waitpid(WNOHANG) and sums the exit statuses, forks 20 children that exit
 * with status 1..7 after 0..19 ms, and waits (polling, at most 5 s) until
 * all are reaped. Prints "reaped 20 sum 77" and exits 0, or exits 1.
 * --core first makes a TCP connection on loopback (loads osf's core). */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "progs.h"

#define CHILDREN 20

static volatile sig_atomic_t reaped, sum;

static void on_sigchld(int sig)
{
	int saved = errno, st;
	pid_t p;

	(void)sig;
	while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
		reaped++;
		if (WIFEXITED(st))
			sum += WEXITSTATUS(st);
	}
	errno = saved;
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	int i, ms;

	setvbuf(stdout, NULL, _IONBF, 0);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	if (sigaction(SIGCHLD, &sa, NULL) < 0) {
		perror("sigaction");
		return 2;
	}
	if (argc > 1 && strcmp(argv[1], "--core") == 0 && tcp_loopback() < 0) {
		perror("sigchld: tcp connection on loopback");
		return 2;
	}
	maps_report();
	for (i = 0; i < CHILDREN; i++) {
		pid_t p = fork();
		if (p < 0) {
			perror("fork");
			return 2;
		}
		if (p == 0) {
			usleep((useconds_t)i * 1000);
			_exit(i % 7 + 1);
		}
	}
	for (ms = 0; reaped < CHILDREN && ms < 5000; ms++) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	printf("reaped %d sum %d\n", (int)reaped, (int)sum);
	return reaped == CHILDREN ? 0 : 1;
}
