//go:build osf_make

/* duplex: two threads of one process (or two processes) wait on the same
 * TCP connection for different things, as a full-duplex program with a
 * reader thread and a writer thread does.
 *
 *   duplex block|poll|fork [BYTES]
 *
 * The process listens on 127.0.0.1, forks a child that connects and reads
 * everything until end of file (as fast as it can, sending nothing back),
 * and accepts the connection. A second thread then waits for data that
 * never comes: in block mode in a blocking read(), in poll mode in
 * poll(POLLIN) on the socket made nonblocking; in fork mode a fork child
 * of the process waits in a blocking read() instead. Meanwhile the main
 * thread writes BYTES (default 64 MiB) in 64 KiB writes: blocking writes,
 * or in poll mode nonblocking writes with poll(POLLOUT, -1) whenever a
 * write would block. A watchdog thread ends the run when the writer made
 * no progress for 2 s: since the child drains the connection
 * continuously, room always comes back within milliseconds; then the
 * reader must see the end of file and exit 0 within 30 s. It prints
 *
 *   result ok
 *   result stalled after N bytes
 *   result the reader did not see the end in 30 s
 *   result the reader failed
 *
 * and exits 0 only for ok.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int s, use_poll, use_fork;
static volatile long sent;

static void die(const char *what)
{
	perror(what);
	exit(2);
}

/* waiter waits for data that never comes while the main thread writes. */
static void *waiter(void *arg)
{
	char b[16];

	(void)arg;
	for (;;) {
		if (use_poll) {
			struct pollfd p = {s, POLLIN, 0};
			int r = poll(&p, 1, -1);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0 || (p.revents & (POLLIN | POLLHUP | POLLERR)))
				return NULL;
		} else {
			ssize_t r = read(s, b, sizeof b);
			if (r < 0 && errno == EINTR)
				continue;
			return NULL;
		}
	}
}

/* watchdog ends a writer without progress for 2 s, and, once all is
 * written (written set), a reader that does not see the end within 30 s
 * (the rest of the connection to drain on a busy host first). */
static volatile int written;

static void *watchdog(void *arg)
{
	long last = -1;
	int i;

	(void)arg;
	while (!written) {
		long now = sent;
		if (now == last && !written) {
			printf("result stalled after %ld bytes\n", now);
			exit(1);
		}
		last = now;
		sleep(2);
	}
	for (i = 0; i < 30; i++)
		sleep(1);
	printf("result the reader did not see the end in 30 s\n");
	exit(1);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	long total = argc > 2 ? atol(argv[2]) : 64L << 20;
	static char buf[65536];
	pthread_t th;
	int l, st;
	pid_t pid;

	if (argc < 2 || (strcmp(argv[1], "block") && strcmp(argv[1], "poll") &&
			 strcmp(argv[1], "fork"))) {
		fprintf(stderr, "usage: duplex block|poll|fork [BYTES]\n");
		return 2;
	}
	use_poll = argv[1][0] == 'p';
	use_fork = argv[1][0] == 'f';
	setvbuf(stdout, NULL, _IONBF, 0);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listen");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		ssize_t r;
		if (c < 0 || connect(c, (struct sockaddr *)&a, al) < 0)
			die("connect");
		while ((r = read(c, buf, sizeof buf)) > 0)
			;
		_exit(r < 0 ? 1 : 0);
	}
	s = accept(l, NULL, NULL);
	if (s < 0)
		die("accept");
	close(l);
	if (use_poll && fcntl(s, F_SETFL, O_NONBLOCK) < 0)
		die("fcntl");
	if (use_fork) {
		pid_t w = fork();
		if (w < 0)
			die("fork");
		if (w == 0) {
			waiter(NULL);
			_exit(0);
		}
	} else if (pthread_create(&th, NULL, waiter, NULL) != 0) {
		die("pthread_create");
	}
	if (pthread_create(&th, NULL, watchdog, NULL) != 0)
		die("pthread_create");
	memset(buf, 'x', sizeof buf);
	while (sent < total) {
		size_t n = sizeof buf < (size_t)(total - sent) ? sizeof buf
							       : (size_t)(total - sent);
		ssize_t w = write(s, buf, n);
		if (w > 0) {
			sent += w;
			continue;
		}
		if (w < 0 && errno == EAGAIN && use_poll) {
			struct pollfd p = {s, POLLOUT, 0};
			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				die("poll");
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		die("write");
	}
	written = 1;
	/* End of file for the child; not close(s): the waiter's read or
	 * poll holds the socket open. The waiter ends with the process. */
	shutdown(s, SHUT_WR);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		printf("result the reader failed\n");
		return 1;
	}
	printf("result ok\n");
	return 0;
}
