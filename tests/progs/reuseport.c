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
 * and "roundR offloaded K" (connections osf carries: progs.h
 * osf_offloaded), then "done". Exit status 0 when
 * every connection worked, 1 otherwise, 2 for a failed set-up step. */
#include "progs.h"
#include "reuseport.h"

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
			off += osf_offloaded(c);
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
		rp_die("getsockname");
	port = ntohs(a.sin_port);
	for (i = 0; i < n; i++) {
		pid[i] = fork();
		if (pid[i] < 0)
			rp_die("fork");
		if (pid[i] == 0) {
			int l = rp_socket(port);
			if (listen(l, 64) < 0)
				rp_die("listen");
			(void)!write(ready[1], "x", 1);
			rp_serve(l, i);
		}
	}
	for (i = 0; i < n; i++)
		if (read(ready[0], &ch, 1) != 1)
			rp_die("ready");
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
