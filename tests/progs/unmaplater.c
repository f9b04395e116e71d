//go:build osf_make

/* unmaplater: a connection's end that closes first keeps its segment
 * mapped until its peer lets go (preload/conn.c, "unmapped later"), with
 * nothing else of the connection left: the peer reads the end at once.
 *
 *   unmaplater PORT
 *
 * The parent listens on 127.0.0.1:PORT and forks the client. Client:
 * connect, 64 bytes out. Server: accept, read them, 64 bytes back, close;
 * it prints "server-closed N" (the segments it still maps), forks a child
 * that prints "child N" (its own), and tells the client. Client: reads
 * the 64 bytes, then the end (a blocking read that returns 0), prints
 * "client-eof N" (its mappings, the connection still open), closes and
 * tells the server. Server: an accept with a 100 ms SO_RCVTIMEO (EAGAIN:
 * it waited), then "server-idle N". N counts the mappings of memfds
 * named osf-seg in /proc/self/maps. Exit 0, or 2 on an error. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "segmaps.h"

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static void say(const char *what, int n)
{
	printf("%s %d\n", what, n);
	fflush(stdout);
}

static void step(int fd, char how)
{
	if (how ? write(fd, &how, 1) != 1 : read(fd, &how, 1) != 1)
		die("pipe");
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {0, 100000};
	int one = 1, l, c, toc[2], tos[2];
	char buf[64];
	size_t got = 0;
	pid_t pid, k;

	if (argc != 2)
		return 2;
	a.sin_port = htons((uint16_t)atoi(argv[1]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 8) < 0)
		die("listen");
	if (pipe(toc) < 0 || pipe(tos) < 0)
		die("pipe");
	memset(buf, 'q', sizeof(buf));
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) { /* the client */
		close(l);
		c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
		if (write(c, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			die("write");
		step(toc[0], 0);
		while (got < sizeof(buf)) {
			ssize_t n = read(c, buf + got, sizeof(buf) - got);
			if (n <= 0)
				die("read");
			got += (size_t)n;
		}
		if (read(c, buf, sizeof(buf)) != 0)
			die("read: want the end");
		say("client-eof", seg_mappings());
		close(c);
		step(tos[1], 'c');
		_exit(0);
	}
	c = accept(l, NULL, NULL);
	if (c < 0)
		die("accept");
	while (got < sizeof(buf)) {
		ssize_t n = read(c, buf + got, sizeof(buf) - got);
		if (n <= 0)
			die("read");
		got += (size_t)n;
	}
	if (write(c, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
		die("write");
	close(c);
	say("server-closed", seg_mappings());
	k = fork();
	if (k < 0)
		die("fork");
	if (k == 0) {
		say("child", seg_mappings());
		_exit(0);
	}
	if (waitpid(k, NULL, 0) != k)
		die("waitpid");
	step(toc[1], 's');
	step(tos[0], 0);
	if (setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		die("SO_RCVTIMEO");
	if (accept(l, NULL, NULL) >= 0 || errno != EAGAIN)
		die("accept: want EAGAIN");
	say("server-idle", seg_mappings());
	if (waitpid(pid, NULL, 0) != pid)
		die("waitpid");
	return 0;
}
