/* kfdprefork: a pre-fork server whose workers all accept on one listener,
 * under OSF_SHM_KFD=1 with the fork family's hello store (preload/
 * setup_fam.c; TestKfdPrefork).
 *
 * kfdprefork PORT WORKERS PROCS PER SEED stall|none: the parent listens
 * on 127.0.0.1:PORT and forks WORKERS workers that accept and echo each
 * connection to its end, reporting on a pipe whether osf offloaded it
 * ('k') or not ('t').
 *
 * stall (under osf): the workers inherit OSF_DEBUG_KFD_STALL=FILE, so the
 * first worker to take the store's mutex stops itself (SIGSTOP) holding
 * it. The parent makes a connection for that, waits for FILE to go, then
 * makes another, which a live worker accepts without reaching the store:
 * it must be reset within the mutex's bound, never stall, as a TCP peer's
 * reset ("stalled holder: ..." lines: an 8 MiB write waiting for room
 * ends partial, poll says IN ERR HUP, a read fails with ECONNRESET and a
 * write after it with EPIPE). Then the stopped worker is killed ("killed
 * holder"): the mutex is the next taker's (EOWNERDEAD).
 *
 * exec (under osf): the hello store crosses exec. Of the workers, one in
 * three is a fork child, one a fork child that execs this program again
 * ("kfdprefork worker LFD REPFD") and one a posix_spawn'd image of it; the
 * parent closes its listener once they run (a graceful restart's order),
 * and every worker must go on accepting offloaded connections. After the
 * clients the fork children are killed and one more client process
 * ("client PROCS ...") makes PER connections, which only the exec'd and
 * spawned workers can accept.
 *
 * foreign PROG (under osf): worker 0 is a fork child that execs PROG, a
 * set-user-ID copy of this program, which runs without osf; the other
 * workers are killed and the parent closes its listener before the
 * clients start (after that exec), so that worker accepts every
 * connection: osf shut the
 * companion before that exec (no image without osf reads a hello), and
 * every connection must be kernel TCP and echo its bytes.
 *
 * t2's hello stays in the store, unread, after its connection's reset:
 * the first client connection binds t2's port again, so the kernel's new
 * connection has the 4-tuple that hello names (as a port the kernel hands
 * out again), and must still be served with its own hello.
 *
 * Then PROCS client processes make PER connections each, one after the
 * other: 1..65,536 bytes (from SEED) written, half-closed, the echo read
 * back and compared. Each prints "client K ok N kfd M" (M: connections
 * osf offloaded); the parent then "server kfd X tcp Y" (the workers'
 * reports of the clients' connections). Every wait is bounded (10 s). */
#include "progs.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define MAXW 16

static struct sockaddr_in addr = {.sin_family = AF_INET};

static void timeouts(int fd)
{
	struct timeval tv = {10, 0};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* The client port of the stalled phase's reset connection, which the
 * first client connection binds again (stall). */
static int reuse_port;

/* dial connects to the server, from 127.0.0.1:port when port is not 0. */
static int dial(int port)
{
	struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int c = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (c >= 0 && port) {
		setsockopt(c, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(c, (struct sockaddr *)&from, sizeof from) < 0) {
			perror("bind");
			exit(1);
		}
	}
	if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof addr) < 0) {
		perror("connect");
		exit(1);
	}
	timeouts(c);
	return c;
}

static void worker(int l, int report)
{
	static char buf[65536];

	for (;;) {
		int a = accept(l, NULL, NULL);
		char k;
		ssize_t n;
		if (a < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			perror("accept");
			_exit(1);
		}
		k = osf_offloaded(a) ? 'k' : 't';
		timeouts(a);
		while ((n = read(a, buf, sizeof buf)) > 0)
			if (write(a, buf, (size_t)n) != n)
				break;
		close(a);
		if (write(report, &k, 1) != 1)
			_exit(1);
	}
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void client(int k, int per, uint64_t seed)
{
	static unsigned char out[65536], in[65536];
	uint64_t s = seed * 1000 + (uint64_t)k + 1;
	int ok = 0, kfd = 0, i;

	for (i = 0; i < per; i++) {
		size_t len = 1 + rnd(&s) % sizeof out, got = 0, j;
		int c = dial(k == 0 && i == 0 ? reuse_port : 0);
		ssize_t n;
		for (j = 0; j < len; j++)
			out[j] = (unsigned char)rnd(&s);
		kfd += osf_offloaded(c);
		if (write(c, out, len) != (ssize_t)len || shutdown(c, SHUT_WR) < 0) {
			printf("client %d conn %d: write: %s\n", k, i, strerror(errno));
			close(c);
			continue;
		}
		while (got < sizeof in && (n = read(c, in + got, sizeof in - got)) > 0)
			got += (size_t)n;
		if (n < 0)
			printf("client %d conn %d: read: %s\n", k, i, strerror(errno));
		else if (got != len || memcmp(in, out, len) != 0)
			printf("client %d conn %d: %zu bytes came back for %zu\n", k, i, got, len);
		else
			ok++;
		close(c);
	}
	printf("client %d ok %d kfd %d\n", k, ok, kfd);
	_exit(0);
}

static char state(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	p = fgets(buf, sizeof buf, f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	return p && p[1] == ' ' ? p[2] : '?';
}

/* stall runs the stalled and killed holder's part; workers[] loses the
 * killed one. */
static void stall(const char *file, pid_t *workers, int *nw)
{
	static char big[8 << 20];
	int t1, t2, i, w = -1, tries;
	ssize_t r;

	t1 = dial(0);
	if (write(t1, "ping", 4) != 4)
		exit(1);
	for (tries = 0; tries < 1000 && access(file, F_OK) == 0; tries++)
		usleep(10000);
	for (tries = 0; tries < 500 && w < 0; tries++) {
		for (i = 0; i < *nw && w < 0; i++)
			if (state(workers[i]) == 'T')
				w = i;
		if (w < 0)
			usleep(10000);
	}
	if (w < 0) {
		printf("no stalled holder\n");
		return;
	}
	/* More than its ring and the kernel's buffers hold, while nobody
	 * reads: the write waits for room until the reset. */
	t2 = dial(0);
	{
		struct sockaddr_in me;
		socklen_t ml = sizeof me;
		if (getsockname(t2, (struct sockaddr *)&me, &ml) == 0)
			reuse_port = ntohs(me.sin_port);
	}
	r = send(t2, big, sizeof big, MSG_NOSIGNAL);
	printf("stalled holder: big write %s\n", r > 0 && r < (ssize_t)sizeof big ? "partial"
					     : r < 0 ? err_name(errno) : "whole");
	report_reset("stalled holder", t2);
	close(t2);
	kill(workers[w], SIGKILL);
	waitpid(workers[w], NULL, 0);
	workers[w] = workers[--*nw];
	close(t1);
	printf("killed holder\n");
}

extern char **environ;

/* reports reads up to want of the workers' reports on fd (they report
 * after their close: a bounded wait for each) into counts[offloaded]:
 * how many came. */
static int reports(int fd, int want, int counts[2])
{
	int n = 0;

	while (n < want) {
		struct pollfd p = {fd, POLLIN, 0};
		char c;
		if (poll(&p, 1, 10000) != 1 || read(fd, &c, 1) != 1)
			break;
		n++;
		counts[c == 'k']++;
	}
	return n;
}

/* start_worker starts worker i on listener l, reporting on rep[1]: a fork
 * child, or (exec) one in three a fork child that execs this program
 * again and one a posix_spawn'd image of it. */
static pid_t start_worker(int i, int l, const int rep[2], int exec, const char *foreign)
{
	char lfd[16], rfd[16];
	char *args[] = {"kfdprefork", "worker", lfd, rfd, NULL};
	pid_t pid;

	if (foreign && i == 0) {
		int ex[2];
		char c;
		snprintf(lfd, sizeof lfd, "%d", l);
		snprintf(rfd, sizeof rfd, "%d", rep[1]);
		if (pipe2(ex, O_CLOEXEC) < 0)
			return -1;
		pid = fork();
		if (pid == 0) {
			close(rep[0]);
			execv(foreign, args);
			_exit(1);
		}
		/* Returns once the child has exec'd (its copy of ex[1] gone):
		 * the clients' connections come after that exec. */
		close(ex[1]);
		while (read(ex[0], &c, 1) < 0 && errno == EINTR)
			;
		close(ex[0]);
		return pid;
	}

	snprintf(lfd, sizeof lfd, "%d", l);
	snprintf(rfd, sizeof rfd, "%d", rep[1]);
	if (exec && i % 3 == 2)
		return posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) == 0 ? pid : -1;
	pid = fork();
	if (pid == 0) {
		close(rep[0]);
		if (exec && i % 3 == 1) {
			execve("/proc/self/exe", args, environ);
			_exit(1);
		}
		worker(l, rep[1]);
	}
	return pid;
}

int main(int argc, char **argv)
{
	pid_t workers[MAXW], kids[64];
	int l, one = 1, nw, procs, per, i, rep[2], n = 0, counts[2] = {0, 0}, exec;
	char file[64];
	uint64_t seed;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 4 && strcmp(argv[1], "worker") == 0)
		worker(atoi(argv[2]), atoi(argv[3]));
	if (argc != 7 && !(argc == 8 && strcmp(argv[6], "foreign") == 0))
		return 2;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons((uint16_t)atoi(argv[1]));
	nw = atoi(argv[2]);
	procs = atoi(argv[3]);
	per = atoi(argv[4]);
	seed = strtoull(argv[5], NULL, 10);
	if (nw < 2 || nw > MAXW || procs < 1 || procs > 64 || per < 1)
		return 2;
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (l < 0 || bind(l, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(l, 512) < 0 ||
	    pipe(rep) < 0) {
		perror("listen");
		return 1;
	}
	snprintf(file, sizeof file, "/tmp/kfdprefork.%d", (int)getpid());
	if (strcmp(argv[6], "stall") == 0) {
		int f = open(file, O_CREAT | O_WRONLY | O_TRUNC, 0600);
		if (f < 0)
			return 1;
		close(f);
		setenv("OSF_DEBUG_KFD_STALL", file, 1);
	}
	exec = strcmp(argv[6], "exec") == 0;
	for (i = 0; i < nw; i++) {
		workers[i] = start_worker(i, l, rep, exec, argc == 8 ? argv[7] : NULL);
		if (workers[i] < 0) {
			perror("worker");
			return 1;
		}
	}
	close(rep[1]);
	if (exec)
		close(l);
	if (argc == 8) { /* the foreign worker alone accepts */
		for (i = 1; i < nw; i++) {
			kill(workers[i], SIGKILL);
			waitpid(workers[i], NULL, 0);
		}
		nw = 1;
		close(l);
	}
	unsetenv("OSF_DEBUG_KFD_STALL");
	if (strcmp(argv[6], "stall") == 0)
		stall(file, workers, &nw);
	unlink(file);
	for (i = 0; i < procs; i++) {
		kids[i] = fork();
		if (kids[i] == 0)
			client(i, per, seed);
	}
	for (i = 0; i < procs; i++)
		waitpid(kids[i], NULL, 0);
	n = reports(rep[0], procs * per, counts);
	if (exec) {
		/* Only the exec'd and spawned workers are left to accept. */
		for (i = 0; i < nw;) {
			if (i % 3 == 0 && workers[i] > 0) {
				kill(workers[i], SIGKILL);
				waitpid(workers[i], NULL, 0);
				workers[i] = 0;
			}
			i++;
		}
		kids[0] = fork();
		if (kids[0] == 0)
			client(procs, per, seed);
		waitpid(kids[0], NULL, 0);
		n += reports(rep[0], per, counts);
	}
	(void)n;
	printf("server kfd %d tcp %d\n", counts[1], counts[0]);
	for (i = 0; i < nw; i++) {
		if (workers[i] <= 0)
			continue;
		kill(workers[i], SIGKILL);
		waitpid(workers[i], NULL, 0);
	}
	return 0;
}
