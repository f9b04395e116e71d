/* progs.h: helpers the test programs share (pair.h: a connection over
 * loopback; segmaps.h: the osf segments a program maps or holds). */
#ifndef OSF_TESTS_PROGS_H
#define OSF_TESTS_PROGS_H

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* osf_offloaded reports whether osf (when preloaded) carries fd's data
 * itself: qsock_readable leaves its cookie NULL on an fd it does not
 * offload. A kernel TCP socket osf offloads (OSF_SHM_KFD=1) is reported
 * as transport "kfd". */
static inline int osf_offloaded(int fd)
{
	int (*rd)(int, void **) = (int (*)(int, void **))dlsym(RTLD_DEFAULT, "qsock_readable");
	void *cookie = NULL;
	int saved = errno;

	if (rd)
		(void)rd(fd, &cookie);
	errno = saved;
	return cookie != NULL;
}

/* maps_has reports whether a line of /proc/self/maps contains s (whether
 * libosfcore.so is loaded, say). */
static inline int maps_has(const char *s)
{
	char line[4096];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, s) != NULL;
	fclose(f);
	return found;
}

/* tcp_loopback connects a TCP socket to a listener on 127.0.0.1 and closes
 * both: under osf, listen and connect ask the core for a route. 0, or -1
 * with errno. */
static inline int tcp_loopback(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0), c = -1, rc = -1;

	if (l >= 0 && bind(l, (struct sockaddr *)&a, al) == 0 &&
	    listen(l, 4) == 0 && getsockname(l, (struct sockaddr *)&a, &al) == 0 &&
	    (c = socket(AF_INET, SOCK_STREAM, 0)) >= 0 &&
	    connect(c, (struct sockaddr *)&a, al) == 0)
		rc = 0;
	if (c >= 0)
		close(c);
	if (l >= 0)
		close(l);
	return rc;
}

#endif
