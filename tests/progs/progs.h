/* progs.h: helpers the test programs share (pair.h: a connection over
 * loopback; segmaps.h: the osf segments a program maps or holds). */
#ifndef OSF_TESTS_PROGS_H
#define OSF_TESTS_PROGS_H

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
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

/* maps_report writes the line the tests read (tests/main_test.go
 * mapsReport): whether libosf.so and the Go core (from its file or a memfd
 * copy) are mapped in this process. */
static inline void maps_report(void)
{
	fprintf(stderr, "maps: libosf=%d libosfcore=%d\n", maps_has("/libosf.so"),
		maps_has("/libosfcore.so") || maps_has("/memfd:osfcore"));
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

/* err_name names the errnos the reset tests print. */
static inline const char *err_name(int e)
{
	return e == ECONNRESET ? "ECONNRESET" : e == EPIPE ? "EPIPE" : e == EAGAIN ? "EAGAIN"
	       : e == 0 ? "0" : strerror(e);
}

/* report_reset prints how connection fd ends after its peer's reset (up
 * to 10 s): "WHO: poll R revents ...", "WHO: read R ERRNO", and "WHO:
 * write R ERRNO" of a write after it. */
static inline void report_reset(const char *who, int fd)
{
	struct pollfd p = {fd, POLLIN, 0};
	char b[8];
	int r;

	r = poll(&p, 1, 10000);
	printf("%s: poll %d revents%s%s%s\n", who, r, (p.revents & POLLIN) ? " IN" : "",
	       (p.revents & POLLERR) ? " ERR" : "", (p.revents & POLLHUP) ? " HUP" : "");
	errno = 0;
	r = (int)read(fd, b, sizeof b);
	printf("%s: read %d %s\n", who, r, err_name(r < 0 ? errno : 0));
	errno = 0;
	r = (int)send(fd, "x", 1, MSG_NOSIGNAL);
	printf("%s: write %d %s\n", who, r, err_name(r < 0 ? errno : 0));
}

#endif
