//go:build osf_make

/* sigprof: a profiler-style SIGPROF handler with a large stack frame
 * (it touches a 256 KiB local array) runs from setitimer(ITIMER_PROF)
 * while the program makes TCP connections on loopback (under osf: with the
 * core loaded). Prints
 *
 *   connections 300
 *   handler ran yes
 *   handler on other threads 0
 *
 * and exits 0. A handler that ran on a thread the program did not create
 * (a Go runtime thread, whose signal stack is 32 KiB) would crash with
 * this frame, or show up in the last line. */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define CONNECTIONS 300
#define FRAME (256 * 1024)

static volatile sig_atomic_t ran, elsewhere;
static pid_t main_tid;

static void on_sigprof(int sig)
{
	volatile char big[FRAME];

	(void)sig;
	memset((char *)big, sig, sizeof big);
	if (big[FRAME / 2] == SIGPROF && big[FRAME - 1] == SIGPROF)
		ran++;
	if ((pid_t)syscall(SYS_gettid) != main_tid)
		elsewhere++;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	struct itimerval it = {{0, 1000}, {0, 1000}};
	struct sigaction sa;
	double t0 = now();
	int l, i;

	setvbuf(stdout, NULL, _IONBF, 0);
	main_tid = (pid_t)syscall(SYS_gettid);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigprof;
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGPROF, &sa, NULL) < 0 || setitimer(ITIMER_PROF, &it, NULL) < 0)
		die("sigaction/setitimer");

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 ||
	    listen(l, 64) < 0 || getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listener");
	for (i = 0; i < CONNECTIONS; i++) {
		volatile double x = 0;
		int c = socket(AF_INET, SOCK_STREAM, 0), s;
		if (c < 0 || connect(c, (struct sockaddr *)&a, al) < 0)
			die("connect");
		if ((s = accept(l, NULL, NULL)) < 0)
			die("accept");
		close(s);
		close(c);
		/* Burn some CPU so that the profiling timer fires often. */
		for (int j = 0; j < 100000; j++)
			x += j * 0.5;
	}
	/* Keep burning until the handler ran a few times (at most 5 s). */
	while (ran < 20 && now() - t0 < 5) {
		volatile double x = 0;
		for (int j = 0; j < 100000; j++)
			x += j * 0.5;
	}
	it = (struct itimerval){{0, 0}, {0, 0}};
	setitimer(ITIMER_PROF, &it, NULL);
	close(l);
	printf("connections %d\n", i);
	printf("handler ran %s\n", ran > 0 ? "yes" : "no");
	printf("handler on other threads %d\n", (int)elsewhere);
	fprintf(stderr, "handler ran %d times\n", (int)ran);
	return 0;
}
