//go:build osf_make

/* acceptspin: a blocking accept spins before it sleeps, as a poll on the
 * listener does (preload/sockets.c, osf_spin_poll in preload/spin.c), and
 * a signal that comes while it spins ends or restarts it as the kernel's.
 * Run with OSF_POLL_SPIN_US=1000000 (every wait below is shorter).
 *
 *   acceptspin PORT
 *
 * The parent listens on 127.0.0.1:PORT and forks a client that makes
 * two connections, each when the parent tells it, 50 ms later:
 * connect, 64 bytes out, the 64-byte answer back and checked, close.
 * 1. The parent notes its voluntary context switches, tells the client
 *    and accepts: "accept-sleeps N" (the switches the accept added),
 *    "mapped N" (segments it maps, /proc/self/maps memfd:osf-seg, with
 *    the connection open), then the exchange.
 * 2. A SIGALRM handler without SA_RESTART, an alarm in 20 ms, no client:
 *    "eintr 1" when accept failed with EINTR.
 * 3. The handler with SA_RESTART, an alarm in 20 ms, the client told:
 *    "restarted 1" when accept returned its connection (the handler ran).
 * Exit 0, or 2 on an error. */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "segmaps.h"

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static long voluntary(void)
{
	FILE *f = fopen("/proc/thread-self/status", "r");
	char line[256];
	long n = -1;

	if (!f)
		die("status");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

static void exchange(int c, int server)
{
	char buf[64], want[64];
	size_t got = 0;

	memset(want, server ? 'q' : 'a', sizeof(want));
	if (!server) {
		memset(buf, 'q', sizeof(buf));
		if (write(c, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			die("write");
	}
	while (got < sizeof(buf)) {
		ssize_t n = read(c, buf + got, sizeof(buf) - got);
		if (n <= 0)
			die("read");
		got += (size_t)n;
	}
	if (memcmp(buf, want, sizeof(buf)) != 0) {
		fprintf(stderr, "acceptspin: wrong bytes\n");
		exit(2);
	}
	if (server) {
		memset(buf, 'a', sizeof(buf));
		if (write(c, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			die("write");
	}
}

static void client(struct sockaddr_in *a, int go)
{
	char b;

	for (int k = 0; k < 2; k++) {
		int c;
		if (read(go, &b, 1) != 1)
			die("pipe");
		usleep(50000);
		c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || connect(c, (struct sockaddr *)a, sizeof(*a)) < 0)
			die("connect");
		exchange(c, 0);
		close(c);
	}
	exit(0);
}

static void alarm_in(int ms, int flags)
{
	struct sigaction sa;
	struct itimerval it = {{0, 0}, {0, ms * 1000}};

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = flags;
	if (sigaction(SIGALRM, &sa, NULL) < 0 || setitimer(ITIMER_REAL, &it, NULL) < 0)
		die("alarm");
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1, l, c, go[2], st;
	long v0, v1;
	pid_t pid;

	if (argc != 2)
		return 2;
	a.sin_port = htons((uint16_t)atoi(argv[1]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 8) < 0)
		die("listen");
	if (pipe(go) < 0)
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(go[1]);
		client(&a, go[0]);
	}
	close(go[0]);

	v0 = voluntary();
	if (write(go[1], "1", 1) != 1)
		die("pipe");
	c = accept(l, NULL, NULL);
	v1 = voluntary();
	if (c < 0)
		die("accept");
	printf("accept-sleeps %ld\nmapped %d\n", v1 - v0, seg_mappings());
	exchange(c, 1);
	close(c);

	alarm_in(20, 0);
	c = accept(l, NULL, NULL);
	printf("eintr %d\n", c < 0 && errno == EINTR && alarms == 1);

	alarm_in(20, SA_RESTART);
	if (write(go[1], "2", 1) != 1)
		die("pipe");
	c = accept(l, NULL, NULL);
	printf("restarted %d\n", c >= 0 && alarms == 2);
	if (c < 0)
		die("accept");
	exchange(c, 1);
	close(c);
	fflush(stdout);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 2;
	return 0;
}
