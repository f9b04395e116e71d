//go:build osf_make

/* rlimitsig: a signal handler that listens on a TCP socket (osf places
 * the listener's companion above the soft RLIMIT_NOFILE, in a window that
 * raises the limit for a moment) interrupts a thread that reads and sets
 * RLIMIT_NOFILE in a loop, about every 200 µs for up to 2 s. The program
 * must see its own limit at every moment and at the end, as without osf.
 *
 *   rlimitsig SOFT HARD
 *
 * prints "handlers N" (N > 0), "raised seen K" (calls that returned a
 * limit other than the one set) and "soft S hard H" at the end. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t handlers;

static void on_alarm(int sig)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int saved = errno, l = socket(AF_INET, SOCK_STREAM, 0);

	(void)sig;
	if (l >= 0) {
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) == 0)
			(void)listen(l, 1);
		close(l);
	}
	handlers++;
	errno = saved;
}

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	struct itimerval it = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
	struct sigaction sa;
	struct rlimit rl, got;
	long end, raised = 0, i;

	if (argc != 3) {
		fprintf(stderr, "usage: rlimitsig SOFT HARD\n");
		return 2;
	}
	rl.rlim_cur = strtoul(argv[1], NULL, 10);
	rl.rlim_max = strtoul(argv[2], NULL, 10);
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		perror("rlimitsig: setrlimit");
		return 2;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	end = now_ms() + 2000;
	for (i = 0; (i & 1023) || (now_ms() < end && raised == 0); i++) {
		if (i & 1) {
			(void)setrlimit(RLIMIT_NOFILE, &rl);
		} else if (getrlimit(RLIMIT_NOFILE, &got) == 0 &&
			   (got.rlim_cur != rl.rlim_cur || got.rlim_max != rl.rlim_max)) {
			raised++;
		}
	}
	setitimer(ITIMER_REAL, &off, NULL);
	getrlimit(RLIMIT_NOFILE, &got);
	printf("handlers %s\n", handlers > 0 ? "yes" : "no");
	printf("raised seen %ld\n", raised);
	printf("soft %lu hard %lu\n", (unsigned long)got.rlim_cur, (unsigned long)got.rlim_max);
	return 0;
}
