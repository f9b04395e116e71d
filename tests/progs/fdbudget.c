//go:build osf_make

/* fdbudget: how many TCP connections a process holds before the kernel
 * (or osf) answers EMFILE, at a given RLIMIT_NOFILE.
 *
 *   fdbudget server PORT SOFT HARD   listen on 127.0.0.1:PORT, print
 *                                    "listening", accept until accept fails
 *   fdbudget client PORT SOFT HARD   connect until socket or connect fails
 *
 * Each first sets its soft and hard RLIMIT_NOFILE (before any socket),
 * then prints "server N ERRNO" / "client N ERRNO" (connections held, the
 * failing call's errno name) and "lowest L" (the fd a new /dev/null open
 * gets after one connection is closed: the program's lowest free fd), and
 * holds its connections until its standard input reaches end of file. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

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
	int server, n = 0, err = 0, fd, last = -1;
	char b[64];

	if (argc != 5) {
		fprintf(stderr, "usage: fdbudget server|client PORT SOFT HARD\n");
		return 2;
	}
	server = strcmp(argv[1], "server") == 0;
	a.sin_port = htons((unsigned short)atoi(argv[2]));
	rl.rlim_cur = strtoul(argv[3], NULL, 10);
	rl.rlim_max = strtoul(argv[4], NULL, 10);
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		perror("fdbudget: setrlimit");
		return 2;
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
		for (;;) {
			fd = accept(l, NULL, NULL);
			if (fd < 0) {
				err = errno;
				break;
			}
			last = fd;
			n++;
		}
	} else {
		for (;;) {
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (fd < 0) {
				err = errno;
				break;
			}
			if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
				err = errno;
				close(fd);
				break;
			}
			last = fd;
			n++;
		}
	}
	printf("%s %d %s\n", server ? "server" : "client", n, ename(err));
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
