/* pair.h: a connection over loopback, for the test programs. */
#ifndef OSF_TESTS_PAIR_H
#define OSF_TESTS_PAIR_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>

/* loopback_pair listens on 127.0.0.1 at a port the kernel picks (*l, left
 * open) and connects to it: *client and *server are the connection's two
 * ends. 0, or -1 after perror. */
static int loopback_pair(int *l, int *client, int *server)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*l = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(*l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(*l, 1) < 0 ||
	    getsockname(*l, (struct sockaddr *)&sa, &sl) < 0)
		return perror("listen"), -1;
	*client = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(*client, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (*server = accept(*l, NULL, NULL)) < 0)
		return perror("connect/accept"), -1;
	return 0;
}

#endif
