//go:build osf_make

/* qsock_example: polls a TCP connection in a tight loop with osf's qsock
 * API (include/osf/qsock.h) instead of poll(2).
 *
 *   qsock_example [CALLS] [MESSAGES]
 *
 * The functions are looked up with dlsym, so the same binary runs without
 * osf, where it falls back to poll() with a zero timeout (a system call
 * per question). Under LD_PRELOAD=libosf.so, on an offloaded connection,
 * a question is answered from the rings through the cookie: no system
 * call at all.
 *
 * The program connects to a listener of its own on 127.0.0.1, starts a
 * sender thread, reads one byte (osf notes the thread's id on its first
 * read: one gettid, before the measurement) and then:
 *   1. idle: asks CALLS times (default 20000) whether the server end is
 *      readable (it must not be) and the client end writable (it must be);
 *   2. data: a thread sends MESSAGES (default 200) messages of 100 bytes
 *      while the main thread spins on "readable?" and reads only then.
 * Both phases lie between two getppid() calls, markers that a test running
 * it under strace -f finds in the trace: the main thread must make no
 * system call between them under osf (the reads of an offloaded
 * connection do not enter the kernel either), and at least CALLS bare.
 *
 * Output: "qsock osf|absent", "transport client unix|tcp server
 * unix|tcp", "pid N", "cookie set|unset", "idle: N calls: readable R
 * writable W", "data: M messages B bytes pattern ok|BAD", and on stderr
 * the cost per call. Exit status 0 when every answer was right.
 */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "osf/qsock.h"

typedef int (*qsock_fn)(int fd, void **cookie);

static qsock_fn q_readable, q_writable;

/* poll_now is what a program without osf does: one poll, no waiting. */
static int poll_now(int fd, short ev)
{
	struct pollfd p = {fd, ev, 0};
	int r = poll(&p, 1, 0);

	return r < 0 ? -1 : (p.revents & (ev | POLLERR | POLLHUP)) != 0;
}

static int readable(int fd, void **cookie)
{
	return q_readable ? q_readable(fd, cookie) : poll_now(fd, POLLIN);
}

static int writable(int fd, void **cookie)
{
	return q_writable ? q_writable(fd, cookie) : poll_now(fd, POLLOUT);
}

static const char *transport(int fd)
{
	char p[64], l[64], line[512];
	unsigned long ino = 0;
	const char *res = "none";
	ssize_t n;

	snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
	n = readlink(p, l, sizeof l - 1);
	if (n <= 0)
		return res;
	l[n] = 0;
	if (sscanf(l, "socket:[%lu]", &ino) != 1)
		return res;
	for (int t = 0; t < 3; t++) {
		static const char *files[] = {"/proc/net/unix", "/proc/net/tcp", "/proc/net/tcp6"};
		FILE *f = fopen(files[t], "r");
		int field = t == 0 ? 6 : 9;
		if (!f)
			continue;
		while (fgets(line, sizeof line, f)) {
			char *save = NULL, *tok = strtok_r(line, " \t\n", &save);
			for (int i = 0; tok && i < field; i++)
				tok = strtok_r(NULL, " \t\n", &save);
			if (tok && strtoul(tok, NULL, 10) == ino)
				res = t == 0 ? "unix" : "tcp";
		}
		fclose(f);
	}
	return res;
}

static long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

#define MSG 100

struct sender {
	int fd, count, go;
};

static void *send_messages(void *p)
{
	struct sender *s = p;
	unsigned char m[MSG];

	while (!__atomic_load_n(&s->go, __ATOMIC_ACQUIRE))
		usleep(100);
	for (int i = 0; i < s->count; i++) {
		for (int j = 0; j < MSG; j++)
			m[j] = (unsigned char)(i * 31 + j);
		if (send(s->fd, m, MSG, MSG_NOSIGNAL) != MSG)
			return NULL;
		usleep(100);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	int calls = argc > 1 ? atoi(argv[1]) : 20000, msgs = argc > 2 ? atoi(argv[2]) : 200;
	int l, c, s, rd = 0, wr = 0, ok = 1;
	void *ck_s = NULL, *ck_c = NULL;
	unsigned char buf[4096];
	long got = 0, want = (long)msgs * MSG, t0, t1, spins = 0;
	struct sender snd;
	pthread_t th;

	setvbuf(stdout, NULL, _IOLBF, 0);
	q_readable = (qsock_fn)dlsym(RTLD_DEFAULT, "qsock_readable");
	q_writable = (qsock_fn)dlsym(RTLD_DEFAULT, "qsock_writable");
	printf("qsock %s\n", q_readable && q_writable ? "osf" : "absent");

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		return perror("listen"), 2;
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, al) < 0)
		return perror("connect"), 2;
	s = accept(l, NULL, NULL);
	if (s < 0)
		return perror("accept"), 2;
	printf("transport client %s server %s\n", transport(c), transport(s));
	printf("pid %d\n", getpid());
	snd.fd = c;
	snd.count = msgs;
	snd.go = 0;
	if (pthread_create(&th, NULL, send_messages, &snd) != 0)
		return 2;
	/* One read before the measurement: osf notes the thread's id once,
	 * on its first read (gettid), for the ring's consumer lock. */
	if (send(c, "w", 1, 0) != 1 || recv(s, buf, 1, 0) != 1)
		return perror("warm-up"), 2;

	syscall(SYS_getppid); /* marker: the polling phases begin */
	t0 = now_ns();
	for (int i = 0; i < calls; i++) {
		rd += readable(s, &ck_s) == 1;
		wr += writable(c, &ck_c) == 1;
	}
	t1 = now_ns();
	__atomic_store_n(&snd.go, 1, __ATOMIC_RELEASE);
	for (long end = now_ns() + 10000000000L; got < want && now_ns() < end; spins++) {
		ssize_t n;
		if (readable(s, &ck_s) != 1)
			continue;
		n = read(s, buf, sizeof buf);
		if (n <= 0)
			break;
		for (ssize_t j = 0; j < n; j++)
			if (buf[j] != (unsigned char)(((got + j) / MSG) * 31 + (got + j) % MSG))
				ok = 0;
		got += n;
	}
	syscall(SYS_getppid); /* marker: the polling phases end */

	pthread_join(th, NULL);
	printf("cookie %s\n", ck_s && ck_c ? "set" : "unset");
	printf("idle: %d calls: readable %d writable %d\n", calls, rd, wr);
	printf("data: %d messages %ld bytes pattern %s\n", msgs, got, ok ? "ok" : "BAD");
	fprintf(stderr, "%.1f ns per readable+writable pair; %ld readiness checks for %d messages\n",
		calls ? (double)(t1 - t0) / calls : 0.0, spins, msgs);
	close(c);
	close(s);
	close(l);
	return rd == 0 && wr == calls && got == want && ok ? 0 : 1;
}
