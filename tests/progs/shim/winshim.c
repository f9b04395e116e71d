/* winshim.c: libwinshim.so, preloaded after libosf.so
 * (LD_PRELOAD=libosf.so:libwinshim.so), sees the binds libosf.so makes
 * inside a connect's fd window (the port holder's, to port 0:
 * preload/setup_connect.c reserve_port) and holds the first one until a
 * second thread's connect has made its own, for at most 5 s: where one
 * connect's window kept the others' out, the second never comes. It
 * writes "winshim: overlapped" or "winshim: waited alone" on stderr
 * (tests/fdbudget_test.go, TestConnectWindowsShared). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int seen;

static int port_zero(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_port == 0;
	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port == 0;
	return 0;
}

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);
	struct timespec dl;
	int me;

	if (!real)
		real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
	if (port_zero(sa)) {
		pthread_mutex_lock(&mu);
		me = ++seen;
		if (me == 1) {
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_sec += 5;
			while (seen < 2)
				if (pthread_cond_timedwait(&cv, &mu, &dl) == ETIMEDOUT)
					break;
			fprintf(stderr, seen >= 2 ? "winshim: overlapped\n" : "winshim: waited alone\n");
		} else if (me == 2) {
			pthread_cond_broadcast(&cv);
		}
		pthread_mutex_unlock(&mu);
	}
	return real(fd, sa, len);
}
