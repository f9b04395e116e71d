//go:build osf_make

/* fdnumbers: shows which fd numbers a program gets after a TCP connection
 * on loopback (which, under osf, loads the core), and which fds it has
 * open that it did not open itself, so a test can check that osf leaves
 * the program's fd numbering alone.
 *
 * Prints "open: 3 4 5 6 7" (the fds five opens of /dev/null return after
 * every socket is closed again) and "others: N" (open fds below 256
 * besides 0, 1, 2 and those five; osf's own hidden fds live at half the
 * soft RLIMIT_NOFILE or higher), then one "fd N -> TARGET" line per such
 * fd. */
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	int l, c, s, fds[5], i, fd, others = 0;
	char path[64], target[256], lines[4096] = "";

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0 ||
	    (c = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    connect(c, (struct sockaddr *)&a, al) < 0 ||
	    (s = accept(l, NULL, NULL)) < 0) {
		perror("fdnumbers: tcp connection on loopback");
		return 2;
	}
	close(s);
	close(c);
	close(l);
	for (i = 0; i < 5; i++)
		fds[i] = open("/dev/null", O_RDONLY);
	printf("open:");
	for (i = 0; i < 5; i++)
		printf(" %d", fds[i]);
	printf("\n");
	for (fd = 3; fd < 256; fd++) {
		ssize_t n;
		int mine = 0;
		for (i = 0; i < 5; i++)
			mine |= fds[i] == fd;
		if (mine || fcntl(fd, F_GETFD) < 0)
			continue;
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		n = readlink(path, target, sizeof target - 1);
		target[n < 0 ? 0 : n] = 0;
		others++;
		snprintf(lines + strlen(lines), sizeof lines - strlen(lines),
			 "fd %d -> %s\n", fd, target);
	}
	printf("others: %d\n%s", others, lines);
	return 0;
}
