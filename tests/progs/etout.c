//go:build osf_make

/* etout: edge-triggered epoll items that hold EPOLLOUT, as Go's netpoller
 * registers every connection (EPOLLIN | EPOLLOUT | EPOLLET), on both ends
 * of a connection between two processes.
 *
 *   etout N
 *
 * The parent sends N messages of 64 bytes, each answered by the child
 * with the same bytes, each end waiting in epoll_wait for EPOLLIN. Then
 * the parent writes until EAGAIN and waits for EPOLLOUT while the child
 * reads everything: room after a full buffer is an edge (TCP's
 * write_space after SOCK_NOSPACE). Room that a read makes while the
 * writer never lacked it is none, so under osf the ping-pong makes no
 * wake-up for writers (the test counts the region eventfd's writes).
 *
 * Prints "transport offloaded" (or "tcp"), then "PASS" or "FAIL ...". */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pair.h"
#include "progs.h"

#define MSG 64

/* wait_for waits (5 s at most) until epoll ep reports events on its one
 * fd; 0, or -1. */
static int wait_for(int ep, uint32_t events)
{
	struct epoll_event e;
	int i, n;

	for (i = 0; i < 100; i++) {
		n = epoll_wait(ep, &e, 1, 50);
		if (n < 0 && errno != EINTR)
			return -1;
		if (n == 1 && (e.events & events))
			return 0;
	}
	return -1;
}

/* recv_all reads len bytes of nonblocking fd, waiting on ep. */
static int recv_all(int ep, int fd, char *b, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = recv(fd, b + got, len - got, 0);
		if (r > 0)
			got += (size_t)r;
		else if (r == 0 || errno != EAGAIN || wait_for(ep, EPOLLIN) < 0)
			return -1;
	}
	return 0;
}

static int et_epoll(int fd)
{
	struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.fd = fd};
	int ep = epoll_create1(0);

	if (ep < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) < 0 ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0)
		return -1;
	return ep;
}

static int child(int fd, int n)
{
	char b[1 << 16];
	int ep = et_epoll(fd), i;
	ssize_t r;

	if (ep < 0)
		return 1;
	/* The pause before each read lets the parent's epoll_wait arm its
	 * item and sleep first, so that the read finds it waiting. */
	for (i = 0; i < n; i++)
		if (wait_for(ep, EPOLLIN) < 0 || usleep(200) < 0 ||
		    recv_all(ep, fd, b, MSG) < 0 || send(fd, b, MSG, 0) != MSG)
			return 2;
	/* Then read everything the parent sends until its end. */
	for (;;) {
		r = recv(fd, b, sizeof b, 0);
		if (r == 0)
			return 0;
		if (r < 0 && (errno != EAGAIN || wait_for(ep, EPOLLIN) < 0))
			return 3;
	}
}

int main(int argc, char **argv)
{
	char out[MSG], in[MSG], fill[1 << 16];
	int l, cli, srv, n, ep, i, status, edge;
	long queued = 0;
	pid_t p;

	if (argc != 2 || (n = atoi(argv[1])) <= 0)
		return 2;
	alarm(60);
	if (loopback_pair(&l, &cli, &srv) < 0)
		return 1;
	printf("transport %s\n", osf_offloaded(cli) ? "offloaded" : "tcp");
	fflush(stdout);
	p = fork();
	if (p < 0)
		return perror("fork"), 1;
	if (p == 0) {
		close(cli);
		_exit(child(srv, n));
	}
	close(srv);
	ep = et_epoll(cli);
	if (ep < 0)
		return perror("epoll"), 1;
	for (i = 0; i < n; i++) {
		memset(out, 'a' + i % 26, sizeof out);
		out[0] = (char)i;
		if (send(cli, out, MSG, 0) != MSG || recv_all(ep, cli, in, MSG) < 0 ||
		    memcmp(in, out, MSG) != 0) {
			printf("FAIL message %d\n", i);
			return 1;
		}
	}
	/* Fill until EAGAIN (the child reads meanwhile: bounded), then the
	 * room the child's reads make must come as an EPOLLOUT edge. */
	memset(fill, 'f', sizeof fill);
	for (edge = -1, i = 0; i < 100000 && edge < 0; i++) {
		ssize_t r = send(cli, fill, sizeof fill, 0);
		if (r > 0) {
			queued += r;
			continue;
		}
		if (errno != EAGAIN) {
			printf("FAIL fill: %s\n", strerror(errno));
			return 1;
		}
		edge = wait_for(ep, EPOLLOUT);
	}
	if (edge < 0) {
		printf("FAIL no EPOLLOUT after a full buffer (%ld bytes queued)\n", queued);
		return 1;
	}
	shutdown(cli, SHUT_WR);
	if (waitpid(p, &status, 0) != p || !WIFEXITED(status) || WEXITSTATUS(status)) {
		printf("FAIL child status %d\n", status);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
