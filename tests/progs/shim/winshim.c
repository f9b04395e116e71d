/* winshim.c: libwinshim.so, preloaded after libosf.so
 * (LD_PRELOAD=libosf.so:libwinshim.so), sees the calls libosf.so makes
 * inside a connect's fd window, each thread's first (the companion's
 * connect, an abstract "osf1/" name: preload/setup_connect.c dial; or
 * the port holder's bind to port 0: reserve_port), and holds the first
 * thread's until a second thread's connect has made its own, for at
 * most 5 s: where one connect's window kept the others' out, the second
 * never comes. It writes "winshim: overlapped" or "winshim: waited alone"
 * on stderr (tests/fdbudget_test.go, TestConnectWindowsShared). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
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

/* in_window is each thread's first call inside a window: the first
 * thread's waits for the second's. */
static void in_window(void)
{
	static __thread int counted;
	struct timespec dl;
	int me;

	if (counted)
		return;
	counted = 1;
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

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);

	if (!real)
		real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
	if (port_zero(sa))
		in_window();
	return real(fd, sa, len);
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);
	const struct sockaddr_un *un = (const struct sockaddr_un *)sa;

	if (!real)
		real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
	if (sa && sa->sa_family == AF_UNIX && len > offsetof(struct sockaddr_un, sun_path) + 5 &&
	    un->sun_path[0] == 0 && memcmp(un->sun_path + 1, "osf1/", 5) == 0)
		in_window();
	return real(fd, sa, len);
}
