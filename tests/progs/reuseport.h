/* reuseport.h: what the SO_REUSEPORT test programs share (reuseport.c,
 * reuseport_join.c): a 127.0.0.1 socket bound with SO_REUSEPORT, and a
 * server that answers each connection's 4 bytes with its index first. */
#ifndef OSF_TESTS_REUSEPORT_H
#define OSF_TESTS_REUSEPORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static inline void rp_die(const char *what)
{
	perror(what);
	exit(2);
}

/* rp_socket binds a SO_REUSEPORT socket to 127.0.0.1:port (0: the kernel
 * picks), or exits (status 2). */
static inline int rp_socket(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
		rp_die("bind");
	return fd;
}

/* rp_serve accepts on listener l for ever, answering each connection's 4
 * bytes with them, idx in the first, then closing it. */
static inline void rp_serve(int l, int idx)
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

#endif
