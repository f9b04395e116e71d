//go:build osf_make

/* fdbudget: how many TCP connections a process holds before the kernel
 * (or osf) answers EMFILE, at a given RLIMIT_NOFILE.
 *
 *   fdbudget server PORT SOFT HARD [MAX]  listen on 127.0.0.1:PORT, print
 *                                    "listening", accept until accept fails
 *                                    (or MAX accepted: errno "none")
 *   fdbudget client PORT SOFT HARD   connect until socket or connect fails
 *   fdbudget procs PORT SOFT HARD N  fork N processes that connect once
 *                                    each; print "procs N ok K" (K
 *                                    connected and sent their bytes)
 *   fdbudget seq PORT SOFT HARD N    the same one process after another,
 *                                    each waiting for its server's close
 *   fdbudget burst PORT SOFT HARD N  all at once, each waiting for its
 *                                    server's close, all ended before the
 *                                    report
 *   fdbudget closer PORT SOFT HARD N accept N, each read, checked and
 *                                    closed; print "server N none",
 *                                    "bytes ok", "offloaded K" (K of
 *                                    them osf's: progs.h osf_offloaded)
 *                                    and "transports T" (a 1 for each
 *                                    osf's, 0 for the kernel's, in turn)
 *
 * Each first sets its soft and hard RLIMIT_NOFILE (before any socket),
 * then prints "server N ERRNO" / "client N ERRNO" (connections held, the
 * failing call's errno name) and "lowest L" (the fd a new /dev/null open
 * gets after one connection is closed: the program's lowest free fd), and
 * holds its connections until its standard input reaches end of file.
 * Each connection carries MSG bytes from its client, made from its
 * number; the server reads and checks them and prints "bytes ok" (or
 * "bytes bad B", B connections whose bytes were not their number's). */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "progs.h"

#define MSG 64

/* fill makes connection n's bytes. */
static void fill(unsigned char *b, uint32_t n)
{
	int i;

	memcpy(b, &n, sizeof(n));
	for (i = sizeof(n); i < MSG; i++)
		b[i] = (unsigned char)(n * 7 + (uint32_t)i);
}

/* full_io reads (rd) or writes MSG bytes on fd: 0, or -1. */
static int full_io(int fd, unsigned char *b, int rd)
{
	int got = 0, r;

	while (got < MSG) {
		r = rd ? (int)read(fd, b + got, MSG - got) : (int)write(fd, b + got, MSG - got);
		if (r <= 0)
			return -1;
		got += r;
	}
	return 0;
}

/* check reads connection fd's bytes: 1 when they are some number's. */
static int check(int fd)
{
	unsigned char b[MSG], w[MSG];
	uint32_t n;

	if (full_io(fd, b, 1) < 0)
		return 0;
	memcpy(&n, b, sizeof(n));
	fill(w, n);
	return memcmp(b, w, MSG) == 0;
}

/* dial connects to a and sends number n's bytes: the fd, or -1 with
 * errno. */
static int dial(const struct sockaddr_in *a, uint32_t n)
{
	unsigned char b[MSG];
	int fd = socket(AF_INET, SOCK_STREAM, 0), e;

	if (fd < 0)
		return -1;
	fill(b, n);
	if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0 || full_io(fd, b, 0) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* procs forks n processes that connect once each (and hold their
 * connection until standard input ends; seq: one after another, each
 * until its server closes the connection; burst: all at once, each until
 * its server's close, all ended before it returns): how many did. */
static int procs(const struct sockaddr_in *a, int n, int seq, int burst)
{
	int p[2], i, ok = 0;
	char c;

	if (pipe(p) < 0)
		return -1;
	for (i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			int fd = dial(a, (uint32_t)i);
			char b[64];
			close(p[0]);
			c = fd >= 0 ? 'y' : 'n';
			if (write(p[1], &c, 1) != 1)
				_exit(1);
			close(p[1]);
			while (read(seq || burst ? fd : 0, b, sizeof(b)) > 0)
				;
			_exit(0);
		}
		if (pid < 0)
			break;
		if (seq)
			(void)waitpid(pid, NULL, 0);
	}
	close(p[1]);
	while (read(p[0], &c, 1) == 1)
		ok += c == 'y';
	close(p[0]);
	while (burst && wait(NULL) > 0)
		;
	return ok;
}

static const char *ename(int e)
{
	switch (e) {
	case EMFILE: return "EMFILE";
	case ENFILE: return "ENFILE";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EAGAIN: return "EAGAIN";
	default: return strerror(e);
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rlimit rl;
	int server, closer, n = 0, err = 0, fd, last = -1, max = -1, bad = 0, offl = 0;
	char tp[257] = "";
	char b[64];

	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: fdbudget server|client|procs PORT SOFT HARD [N]\n");
		return 2;
	}
	if (argc == 6)
		max = atoi(argv[5]);
	closer = strcmp(argv[1], "closer") == 0;
	server = strcmp(argv[1], "server") == 0 || closer;
	a.sin_port = htons((unsigned short)atoi(argv[2]));
	rl.rlim_cur = strtoul(argv[3], NULL, 10);
	rl.rlim_max = strtoul(argv[4], NULL, 10);
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		perror("fdbudget: setrlimit");
		return 2;
	}
	if (strcmp(argv[1], "procs") == 0 || strcmp(argv[1], "seq") == 0 ||
	    strcmp(argv[1], "burst") == 0) {
		n = procs(&a, max, argv[1][0] == 's', argv[1][0] == 'b');
		printf("procs %d ok %d\n", max, n);
		fflush(stdout);
		while (read(0, b, sizeof(b)) > 0)
			;
		while (wait(NULL) > 0)
			;
		return 0;
	}
	if (server) {
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    listen(l, 4096) < 0) {
			perror("fdbudget: listen");
			return 2;
		}
		printf("listening\n");
		fflush(stdout);
		while (n != max) {
			fd = accept(l, NULL, NULL);
			if (fd < 0) {
				err = errno;
				break;
			}
			bad += !check(fd);
			last = fd;
			n++;
			if (closer) {
				int o = osf_offloaded(fd);
				if (n <= (int)sizeof(tp) - 1)
					tp[n - 1] = o ? '1' : '0';
				offl += o;
				close(fd);
				last = -1;
			}
		}
	} else {
		for (;;) {
			fd = dial(&a, (uint32_t)n);
			if (fd < 0) {
				err = errno;
				break;
			}
			last = fd;
			n++;
		}
	}
	printf("%s %d %s\n", server ? "server" : "client", n, n == max ? "none" : ename(err));
	if (server && bad)
		printf("bytes bad %d\n", bad);
	else if (server)
		printf("bytes ok\n");
	if (closer)
		printf("offloaded %d\ntransports %s\n", offl, tp);
	if (last >= 0) {
		close(last);
		fd = open("/dev/null", O_RDONLY);
		printf("lowest %d (closed %d)\n", fd, last);
		fd = open("/dev/null", O_RDONLY);
		printf("then %d %s\n", fd, fd < 0 ? ename(errno) : "");
	}
	fflush(stdout);
	while (read(0, b, sizeof(b)) > 0)
		;
	return 0;
}
