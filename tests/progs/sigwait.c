//go:build osf_make

/* sigwait: waits for signals it blocks, the way programs that handle
 * signals synchronously do, so a test can check that a signal is never
 * lost or stolen (by the Go core's threads, for one).
 *
 *   sigwait sigwait|signalfd ROUNDS [--core]
 *       blocks SIGUSR1 and SIGTERM; in each round prints "ready N" and
 *       waits (sigtimedwait, or read from a signalfd; at most 5 s) for
 *       one of them, sent by the test, then prints "got N SIGUSR1".
 *   sigwait chld-sigwait|chld-signalfd ROUNDS [--core]
 *       blocks SIGCHLD; in each round forks a child that exits at once,
 *       sleeps 20 ms (so that SIGCHLD arrives while nobody waits for it)
 *       and then waits for SIGCHLD (at most 2 s); prints "got N/ROUNDS
 *       SIGCHLD".
 *
 * --core first makes a TCP connection on loopback, which under osf loads
 * the core. Exits 0 if every signal arrived, 1 otherwise; stderr reports
 * "maps: libosf=N libosfcore=N". */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include "progs.h"

/* wait_one waits at most ms for a signal of set, with sigtimedwait or a
 * signalfd (sfd >= 0); it returns the signal or -1. */
static int wait_one(const sigset_t *set, int sfd, int ms)
{
	if (sfd < 0) {
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
		int sig;
		do
			sig = sigtimedwait(set, NULL, &ts);
		while (sig < 0 && errno == EINTR);
		return sig;
	} else {
		struct pollfd p = {.fd = sfd, .events = POLLIN};
		struct signalfd_siginfo si;
		if (poll(&p, 1, ms) != 1 ||
		    read(sfd, &si, sizeof si) != (ssize_t)sizeof si)
			return -1;
		return (int)si.ssi_signo;
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 ? argv[1] : "";
	int rounds = argc > 2 ? atoi(argv[2]) : 0;
	int chld = strncmp(mode, "chld-", 5) == 0;
	const char *how = chld ? mode + 5 : mode;
	int use_fd = strcmp(how, "signalfd") == 0, sfd = -1, i, got = 0;
	sigset_t set;

	if ((!use_fd && strcmp(how, "sigwait") != 0) || rounds <= 0) {
		fprintf(stderr, "usage: sigwait [chld-]sigwait|[chld-]signalfd ROUNDS [--core]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	sigemptyset(&set);
	if (chld) {
		sigaddset(&set, SIGCHLD);
	} else {
		sigaddset(&set, SIGUSR1);
		sigaddset(&set, SIGTERM);
	}
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0) {
		perror("sigprocmask");
		return 2;
	}
	if (use_fd && (sfd = signalfd(-1, &set, SFD_CLOEXEC)) < 0) {
		perror("signalfd");
		return 2;
	}
	if (argc > 3 && strcmp(argv[3], "--core") == 0 && tcp_loopback() < 0) {
		perror("sigwait: tcp connection on loopback");
		return 2;
	}
	maps_report();

	for (i = 1; i <= rounds; i++) {
		int sig;
		if (!chld) {
			printf("ready %d\n", i);
			sig = wait_one(&set, sfd, 5000);
			if (sig < 0) {
				printf("timeout %d\n", i);
				return 1;
			}
			printf("got %d %s\n", i, sigabbrev_np(sig));
			continue;
		}
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 2;
		}
		if (pid == 0)
			_exit(0);
		usleep(20000);
		sig = wait_one(&set, sfd, 2000);
		if (sig == SIGCHLD)
			got++;
		waitpid(pid, NULL, 0);
	}
	if (chld) {
		printf("got %d/%d SIGCHLD\n", got, rounds);
		return got == rounds ? 0 : 1;
	}
	return 0;
}
