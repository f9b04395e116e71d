/* kfdlost: a connection accepted by another process than the one that
 * read its client's hello (OSF_SHM_KFD=1) is served as on TCP, never a
 * stall (TestKfdLostHello).
 *
 * kfdlost PORT: the parent listens on 127.0.0.1:PORT and forks a child
 * that shares the listener. The parent connects c1 and c2 and writes
 * "ping" on each, then accepts once: under the switch that accept reads
 * the hellos on the parent's link to its companion up to c1's, and the
 * child, accepting next (the listener made non-blocking), gets c2's
 * kernel connection, whose hello it finds in the fork family's store
 * (preload/setup_fam.c). It prints what it saw ("child: got ping" then a
 * reset of its own, SO_LINGER 0, as a TCP peer that resets; "child:
 * accept EAGAIN": osf reset a connection it could not serve; "child:
 * stall" when nothing came in 5 s). The parent checks c1 (a round trip
 * with the connection it accepted), has a thread write 8 MiB on c2 (it
 * waits for room until the reset), and prints how c2 ended: that write's
 * result, the errno of a read after its end arrived, and of a write after
 * it (report_reset). */
#include "progs.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>

static int dial(const struct sockaddr_in *a)
{
	int c = socket(AF_INET, SOCK_STREAM, 0);

	if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof(*a)) < 0) {
		perror("connect");
		exit(1);
	}
	if (write(c, "ping", 4) != 4) {
		perror("write");
		exit(1);
	}
	return c;
}

/* big writes 8 MiB on c2 (more than its ring and the kernel's buffers
 * hold) while nobody reads it: it must end when the reset comes. */
static void *big(void *arg)
{
	static char buf[8 << 20];
	int fd = *(int *)arg;
	ssize_t r = send(fd, buf, sizeof buf, MSG_NOSIGNAL);

	printf("c2: big write %s\n", r > 0 && r < (ssize_t)sizeof buf ? "partial"
				     : r < 0 ? err_name(errno) : "whole");
	return NULL;
}

static void child(int l, int go)
{
	struct pollfd p;
	struct linger lg = {1, 0};
	char b[8], x;
	int a;

	if (read(go, &x, 1) != 1)
		exit(1);
	/* The parent accepted already: the listener's open file may turn
	 * non-blocking. */
	if (fcntl(l, F_SETFL, O_NONBLOCK) < 0)
		exit(1);
	a = accept(l, NULL, NULL);
	if (a < 0) {
		printf("child: accept %s\n", err_name(errno));
		exit(0);
	}
	p.fd = a;
	p.events = POLLIN;
	if (poll(&p, 1, 5000) != 1 || read(a, b, 4) != 4 || memcmp(b, "ping", 4) != 0) {
		printf("child: stall\n");
		exit(0);
	}
	printf("child: got ping\n");
	setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(a);
	exit(0);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int l, c1, c2, a1, go[2], one = 1, st;
	char b[8];
	pid_t pid;
	pthread_t t;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc != 2)
		return 2;
	a.sin_port = htons((uint16_t)atoi(argv[1]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 16) < 0 ||
	    pipe(go) < 0) {
		perror("listen");
		return 1;
	}
	pid = fork();
	if (pid == 0)
		child(l, go[0]);
	c1 = dial(&a);
	c2 = dial(&a);
	a1 = accept(l, NULL, NULL);
	if (a1 < 0 || read(a1, b, sizeof b) != 4 || write(a1, "pong", 4) != 4 ||
	    read(c1, b, sizeof b) != 4 || memcmp(b, "pong", 4) != 0) {
		perror("c1");
		return 1;
	}
	printf("c1: round trip, transport %s\n", osf_offloaded(c1) ? "kfd" : "tcp");
	if (pthread_create(&t, NULL, big, &c2) != 0)
		return 1;
	usleep(200000); /* the write fills what it can and waits */
	if (write(go[1], "g", 1) != 1 || waitpid(pid, &st, 0) != pid ||
	    pthread_join(t, NULL) != 0) {
		perror("child");
		return 1;
	}
	report_reset("c2", c2);
	return 0;
}
