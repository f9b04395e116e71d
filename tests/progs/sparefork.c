//go:build osf_make

/* sparefork: a client that keeps connecting gets its next segment made
 * while it waits for a reply (preload/setup_spare.c), and a fork child
 * never gets that segment.
 *
 *   sparefork PORT    against "churn server PORT 5" (one 64-byte answer per
 *                     connection)
 *
 * Connections (connect, 64 bytes out, the 64-byte answer read with a
 * blocking read, close; the request is sent by a second thread 20 ms into
 * the read, so that the read waits) until the process holds a segment
 * made ahead, at most 8; then it prints the inodes of the memfds named
 * osf-seg it holds ("made INO..."), and forks. The child prints those it
 * holds at once ("child-forked INO..."), then makes a connection and
 * prints them while it is open ("child-conn INO..."). Then the parent
 * makes one and prints them while it is open, before reading
 * ("parent-conn INO..."). Exit 0, or 2 on an error. */
#include "segmaps.h"

#include <pthread.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static void print_ino(const struct stat *st, void *arg)
{
	(void)arg;
	printf(" %lu", (unsigned long)st->st_ino);
}

/* segs prints what (when not NULL), then the inode of every memfd
 * osf-seg this process holds; it returns how many. */
static int segs(const char *what)
{
	int n_segs;

	if (what)
		printf("%s", what);
	n_segs = seg_fds(what ? print_ino : NULL, NULL);
	if (n_segs < 0)
		die("opendir");
	if (what) {
		printf("\n");
		fflush(stdout);
	}
	return n_segs;
}

static int late_fd;

static void *late_request(void *arg)
{
	char req[64];

	(void)arg;
	memset(req, 'q', sizeof(req));
	usleep(20000);
	if (write(late_fd, req, sizeof(req)) != (ssize_t)sizeof(req))
		die("write");
	return NULL;
}

/* conn connects to port, sends 64 bytes (late: from a thread 20 ms into
 * the read), prints what (when not NULL) and reads the 64-byte answer,
 * then closes. */
static void conn(int port, const char *what, int late)
{
	pthread_t t;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	char req[64], buf[64];
	size_t got = 0;
	int c = socket(AF_INET, SOCK_STREAM, 0);

	memset(req, 'q', sizeof(req));
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	if (what)
		segs(what);
	late_fd = c;
	if (late ? pthread_create(&t, NULL, late_request, NULL) != 0
		 : write(c, req, sizeof(req)) != (ssize_t)sizeof(req))
		die("write");
	while (got < sizeof(buf)) {
		ssize_t n = read(c, buf + got, sizeof(buf) - got);
		if (n <= 0)
			die("read");
		got += (size_t)n;
	}
	if (late)
		pthread_join(t, NULL);
	close(c);
}

int main(int argc, char **argv)
{
	int port, st, i;
	pid_t pid;

	if (argc != 2)
		return 2;
	port = atoi(argv[1]);
	for (i = 0; i < 8 && (i < 2 || segs(NULL) == 0); i++)
		conn(port, NULL, 1);
	segs("made");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		segs("child-forked");
		conn(port, "child-conn", 0);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 2;
	conn(port, "parent-conn", 0);
	return 0;
}
