//go:build osf_make

/* reuseport_join: a member joins a SO_REUSEPORT group while a client
 * churns connections to it (a server instance started beside a running
 * one of the same user: separately started servers, a rolling restart).
 *
 *   reuseport_join CONNS [nodump]
 *
 * forks server 0 listening with SO_REUSEPORT on a 127.0.0.1 port, then a
 * client process that makes connections one after the other (4 bytes each
 * way, checked, then close; a reply waits at most 10 s), and, once the
 * client made CONNS/4 of them, server 1, which makes its own socket in the
 * group and listens while the client goes on, until it has made CONNS/2
 * more after server 1 listened (at most 50 * CONNS in all). Each server answers with its
 * index. With nodump server 0 makes itself not dumpable first, so that no
 * process of its user but root may take its fds (pidfd_getfd, /proc/PID/fd):
 * under osf with OSF_SHM_KFD=1, server 1 cannot share the group's hello
 * store then, and the group's connections go to kernel TCP.
 *
 * The client prints "before N offloaded K" (connections begun before server
 * 1 was started), "during N offloaded K" (while it started),
 * "after N offloaded K server1 M" (those begun after it listened; M of them
 * served by it), "failed F", then "done"; offloaded
 * counts connections osf carries (progs.h osf_offloaded). Exit status 0
 * when every connection worked, 1 otherwise, 2 for a failed set-up step. */
#include "progs.h"
#include "reuseport.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>

/* server listens on port and answers each connection's 4 bytes with them,
 * its index in the first; it writes a byte on ready once listening. */
static void server(int port, int idx, int ready, int nodump)
{
	int l;

	if (nodump && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		rp_die("prctl");
	l = rp_socket(port);
	if (listen(l, 128) < 0)
		rp_die("listen");
	if (write(ready, "x", 1) != 1)
		rp_die("ready");
	rp_serve(l, idx);
}

/* client makes connections to port; after conns/4 ("before") it writes a
 * byte on quarter, and connections begun after a byte came on joined count
 * as "after", of which it makes conns/2 (those between: "during"). */
static int client(int port, int conns, int quarter, int joined)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {10, 0};
	int n[3] = {0, 0, 0}, off[3] = {0, 0, 0}, by1 = 0, bad = 0, phase = 0, i;
	char ch;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (i = 0; n[2] + (phase == 2 ? bad : 0) < conns / 2 && i < 50 * conns; i++) {
		unsigned char b[4] = {0, 0xa5, (unsigned char)i, (unsigned char)(i >> 8)};
		int c;
		if (i == conns / 4) {
			if (write(quarter, "q", 1) != 1)
				rp_die("quarter");
			phase = 1;
		}
		if (phase == 1 && read(joined, &ch, 1) == 1)
			phase = 2;
		c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
		    connect(c, (struct sockaddr *)&a, sizeof a) < 0 || write(c, b, 4) != 4 ||
		    recv(c, b, 4, MSG_WAITALL) != 4 || b[0] > 1 || b[1] != 0xa5 ||
		    b[2] != (unsigned char)i || b[3] != (unsigned char)(i >> 8)) {
			if (bad++ < 5)
				fprintf(stderr, "connection %d failed: %s\n", i, strerror(errno));
		} else {
			n[phase]++;
			off[phase] += osf_offloaded(c);
			by1 += phase == 2 && b[0] == 1;
		}
		if (c >= 0)
			close(c);
	}
	printf("before %d offloaded %d\n", n[0], off[0]);
	printf("during %d offloaded %d\n", n[1], off[1]);
	printf("after %d offloaded %d server1 %d\n", n[2], off[2], by1);
	printf("failed %d\n", bad);
	printf("done\n");
	fflush(stdout);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	int conns, port, nodump, ready[2], quarter[2], joined[2], st = 2, first;
	pid_t s0, s1, cl;
	struct sockaddr_in a;
	socklen_t al = sizeof a;
	char ch;

	if (argc < 2 || (conns = atoi(argv[1])) < 8) {
		fprintf(stderr, "usage: reuseport_join CONNS(>=8) [nodump]\n");
		return 2;
	}
	nodump = argc > 2 && !strcmp(argv[2], "nodump");
	first = rp_socket(0); /* bound, never listening: picks the port */
	if (getsockname(first, (struct sockaddr *)&a, &al) < 0 || pipe(ready) < 0 ||
	    pipe(quarter) < 0 || pipe2(joined, O_NONBLOCK) < 0)
		rp_die("set-up");
	port = ntohs(a.sin_port);
	if ((s0 = fork()) < 0)
		rp_die("fork");
	if (s0 == 0)
		server(port, 0, ready[1], nodump);
	if (read(ready[0], &ch, 1) != 1)
		rp_die("ready 0");
	close(first);
	if ((cl = fork()) < 0)
		rp_die("fork");
	if (cl == 0)
		exit(client(port, conns, quarter[1], joined[0]));
	if (read(quarter[0], &ch, 1) != 1)
		rp_die("quarter");
	if ((s1 = fork()) < 0)
		rp_die("fork");
	if (s1 == 0)
		server(port, 1, ready[1], 0);
	if (read(ready[0], &ch, 1) != 1)
		rp_die("ready 1");
	if (write(joined[1], "j", 1) != 1)
		rp_die("joined");
	if (waitpid(cl, &st, 0) == cl && WIFEXITED(st))
		st = WEXITSTATUS(st);
	else
		st = 2;
	kill(s0, SIGKILL);
	kill(s1, SIGKILL);
	waitpid(s0, NULL, 0);
	waitpid(s1, NULL, 0);
	return st;
}
