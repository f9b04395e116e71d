//go:build osf_make

/* reuseport: how connections spread over a SO_REUSEPORT group of listener
 * processes (nginx "listen ... reuseport", haproxy, envoy).
 *
 *   reuseport N CONNS
 *
 * forks N server processes, each listening with SO_REUSEPORT on the same
 * 127.0.0.1 port; each answers every connection with its index. The parent
 * makes CONNS connections one after the other (sends 4 bytes, reads the
 * index back, checks the bytes), then kills server 0 and makes CONNS more.
 * It prints, per round, one line per server, "roundR server I: COUNT",
 * and "roundR offloaded K" (connections whose socket the kernel lists in
 * /proc/net/unix, i.e. offloaded by osf), then "done". Exit status 0 when
 * every connection worked, 1 otherwise, 2 for a failed set-up step. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NMAX 32

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static int rp_socket(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
		die("bind");
	return fd;
}

static void serve(int l, int idx)
{
	for (;;) {
		int c = accept(l, NULL, NULL);
		unsigned char b[4];
		if (c < 0)
			continue;
		if (recv(c, b, 4, MSG_WAITALL) == 4) {
			b[0] = (unsigned char)idx;
			(void)!write(c, b, 4);
		}
		close(c);
	}
}

/* offloaded reports whether fd's socket is in /proc/net/unix. */
static int offloaded(int fd)
{
	char p[64], l[64], line[512];
	unsigned long ino = 0, i;
	ssize_t n;
	FILE *f;
	int found = 0;

	snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
	n = readlink(p, l, sizeof l - 1);
	if (n <= 0)
		return 0;
	l[n] = 0;
	if (sscanf(l, "socket:[%lu]", &ino) != 1 || !(f = fopen("/proc/net/unix", "r")))
		return 0;
	while (!found && fgets(line, sizeof line, f))
		found = sscanf(line, "%*s %*s %*s %*s %*s %*s %lu", &i) == 1 && i == ino;
	fclose(f);
	return found;
}

static int round_of(int r, int port, int n, int conns)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int count[NMAX] = {0}, off = 0, bad = 0, i;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (i = 0; i < conns; i++) {
		unsigned char b[4] = {0, 0xa5, (unsigned char)i, (unsigned char)(i >> 8)};
		int c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0 ||
		    write(c, b, 4) != 4 || recv(c, b, 4, MSG_WAITALL) != 4 || b[0] >= n ||
		    b[1] != 0xa5 || b[2] != (unsigned char)i || b[3] != (unsigned char)(i >> 8)) {
			bad++;
		} else {
			count[b[0]]++;
			off += offloaded(c);
		}
		close(c);
	}
	for (i = 0; i < n; i++)
		printf("round%d server %d: %d\n", r, i, count[i]);
	printf("round%d offloaded %d\n", r, off);
	if (bad)
		printf("round%d failed %d\n", r, bad);
	fflush(stdout);
	return bad;
}

int main(int argc, char **argv)
{
	int n, conns, port, i, bad, ready[2];
	pid_t pid[NMAX];
	struct sockaddr_in a;
	socklen_t al = sizeof a;
	int first;
	char ch;

	if (argc != 3 || (n = atoi(argv[1])) < 2 || n > NMAX || (conns = atoi(argv[2])) < 1) {
		fprintf(stderr, "usage: reuseport N(2-%d) CONNS\n", NMAX);
		return 2;
	}
	first = rp_socket(0); /* bound, never listening: picks the port */
	if (getsockname(first, (struct sockaddr *)&a, &al) < 0 || pipe(ready) < 0)
		die("getsockname");
	port = ntohs(a.sin_port);
	for (i = 0; i < n; i++) {
		pid[i] = fork();
		if (pid[i] < 0)
			die("fork");
		if (pid[i] == 0) {
			int l = rp_socket(port);
			if (listen(l, 64) < 0)
				die("listen");
			(void)!write(ready[1], "x", 1);
			serve(l, i);
		}
	}
	for (i = 0; i < n; i++)
		if (read(ready[0], &ch, 1) != 1)
			die("ready");
	close(first);
	bad = round_of(1, port, n, conns);
	kill(pid[0], SIGKILL);
	waitpid(pid[0], NULL, 0);
	bad += round_of(2, port, n, conns);
	for (i = 1; i < n; i++) {
		kill(pid[i], SIGKILL);
		waitpid(pid[i], NULL, 0);
	}
	printf("done\n");
	return bad ? 1 : 0;
}
