/* probe: kernel facts the proposal's readiness and close rules rest on
 * (docs/D2-PROPOSAL.md "Hard parts"). Loopback TCP, one process.
 *   1. epoll EPOLLET on a TCP socket: does a second token byte, sent while the
 *      first is still unread, give a new edge?
 *   2. close() with an unread token byte in the receive queue: does the peer
 *      see a reset (and does the closer skip TIME_WAIT)?
 *   3. close() after draining: FIN, TIME_WAIT kept?
 *   4. what a 1-byte recv(MSG_DONTWAIT) that finds nothing costs (the drain). */
#include "spike.h"
#include <sys/epoll.h>

static void pair(int l, struct sockaddr_in *a, int out[2])
{
	out[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(out[0], (struct sockaddr *)a, sizeof(*a)) < 0)
		die("connect");
	out[1] = accept(l, NULL, NULL);
}

static int tw_count(void)
{
	FILE *f = fopen("/proc/net/sockstat", "r");
	char line[256];
	int tw = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "TCP: inuse %*d orphan %*d tw %d", &tw) == 1)
			break;
	if (f)
		fclose(f);
	return tw;
}

int main(void)
{
	struct sockaddr_in a = lo_addr(0);
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), p[2];
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 8) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listen");
	/* 1 */
	pair(l, &a, p);
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = p[1]}, out;
	epoll_ctl(ep, EPOLL_CTL_ADD, p[1], &ev);
	send(p[0], "t", 1, 0);
	int e1 = epoll_wait(ep, &out, 1, 100);
	int e2 = epoll_wait(ep, &out, 1, 0);
	send(p[0], "t", 1, 0);
	int e3 = epoll_wait(ep, &out, 1, 100);
	printf("1. ET: first token %d event(s), again without a new byte %d, a second byte (first unread) %d\n",
	       e1, e2, e3);
	/* 2 */
	int tw0 = tw_count();
	close(p[1]); /* two unread token bytes */
	char c;
	usleep(20000);
	ssize_t k = recv(p[0], &c, 1, 0);
	printf("2. close with 2 unread token bytes: peer recv=%zd errno=%s; TIME_WAIT sockets %d -> %d\n",
	       k, k < 0 ? strerror(errno) : "-", tw0, tw_count());
	close(p[0]);
	/* 3 */
	pair(l, &a, p);
	send(p[0], "t", 1, 0);
	usleep(1000);
	recv(p[1], &c, 1, 0);
	tw0 = tw_count();
	close(p[1]);
	usleep(20000);
	k = recv(p[0], &c, 1, 0);
	close(p[0]);
	usleep(20000);
	printf("3. close after draining: peer recv=%zd (0 = FIN); TIME_WAIT sockets %d -> %d\n", k,
	       tw0, tw_count());
	/* 4 */
	pair(l, &a, p);
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	uint64_t t = now_ns();
	for (int i = 0; i < 100000; i++)
		recv(p[1], &c, 1, MSG_DONTWAIT);
	printf("4. recv(MSG_DONTWAIT) of an empty TCP socket: %.2f us\n",
	       (double)(now_ns() - t) / 100000 / 1e3);
	return 0;
}
