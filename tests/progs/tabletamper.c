//go:build osf_make

/* tabletamper: a set-user-ID program must never use an fd table its
 * caller can write (issue 24, item 2: with libosf.so in /etc/ld.so.preload
 * a setuid-root program mapped its caller's table, and a pointer the
 * caller wrote there crashed it).
 *
 *   tabletamper attack SUIDPROG SECONDS   (as an unprivileged user, under
 *       osf) make a connection to itself over 127.0.0.1 and print its
 *       transport ("transport shm" when offloaded); fork a child that keeps
 *       a writable mapping of its fd table (a raw dup, which osf does not
 *       see, survives its own fork) in a grandchild and then starts
 *       SUIDPROG with a raw execve (no osf exec hook), handing it the
 *       connection and the table. For SECONDS the grandchild writes into
 *       the table's entry for the connection what a hostile caller would:
 *       kind shm, the image the program's osf wrote in the header, and the
 *       connection pointer 0x4141414141414141. Prints "victim exit N" or
 *       "victim killed by signal N".
 *   tabletamper victim FD                 (SUIDPROG) use FD for about a
 *       second (recv, send, poll, getsockopt), then print "victim:
 *       survived euid N" and exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../fdtable/fdtable.h"
#include "segmaps.h"

extern char **environ;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* table_fd returns this process's fd table memfd, -1 when there is none. */
static int table_fd(void) { return memfd_fd(OSF_FDT_NAME); }

static struct osf_fdt_entry *entry_of(uint8_t *t, int fd)
{
	return (struct osf_fdt_entry *)(t + OSF_FDT_HDR_BYTES +
					(size_t)fd * OSF_FDT_ENTRY_BYTES);
}

/* tamper writes a hostile entry for fd into the table mapped at t, as
 * long as secs last. */
static void tamper(uint8_t *t, int fd, double secs)
{
	struct osf_fdt_header *h = (struct osf_fdt_header *)t;
	struct osf_fdt_entry *e = entry_of(t, fd);
	double until = now() + secs;

	while (now() < until) {
		uint64_t image = __atomic_load_n(&h->image, __ATOMIC_RELAXED);
		__atomic_store_n(&e->kind, (uint8_t)OSF_FD_SHM, __ATOMIC_RELAXED);
		__atomic_store_n(&e->image, image, __ATOMIC_RELAXED);
		__atomic_store_n(&e->priv, 0x4141414141414141ull, __ATOMIC_RELEASE);
	}
}

static int attack(const char *prog, double secs)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c, s, t, st;
	pid_t k, g;
	struct stat sb;
	uint8_t *map;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		return perror("listen"), 1;
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		return perror("connect"), 1;
	s = accept(l, NULL, NULL);
	if (s < 0)
		return perror("accept"), 1;
	t = table_fd();
	map = MAP_FAILED;
	if (t >= 0 && fstat(t, &sb) == 0)
		map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, t, 0);
	printf("transport %s\n", map != MAP_FAILED && entry_of(map, c)->kind == OSF_FD_SHM ? "shm" : "other");
	fflush(stdout);
	k = fork();
	if (k < 0)
		return perror("fork"), 1;
	if (k == 0) {
		char fdarg[16], *argv[] = {(char *)prog, "victim", fdarg, NULL};
		int keep;
		t = table_fd(); /* the child's own copy, which the program inherits */
		keep = t < 0 ? -1 : (int)syscall(SYS_fcntl, t, F_DUPFD_CLOEXEC, 900);
		if (keep < 0 || fstat(keep, &sb) < 0)
			_exit(3);
		g = fork();
		if (g == 0) {
			uint8_t *w = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE,
					  MAP_SHARED, keep, 0);
			if (w == MAP_FAILED)
				_exit(4);
			usleep(20 * 1000); /* the program starts */
			tamper(w, c, secs);
			_exit(0);
		}
		snprintf(fdarg, sizeof(fdarg), "%d", c);
		syscall(SYS_execve, prog, argv, environ);
		_exit(5);
	}
	if (waitpid(k, &st, 0) < 0)
		return perror("waitpid"), 1;
	if (WIFSIGNALED(st))
		printf("victim killed by signal %d\n", WTERMSIG(st));
	else
		printf("victim exit %d\n", WEXITSTATUS(st));
	while (wait(NULL) > 0) /* the grandchild, once its time is up */
		;
	return 0;
}

static int victim(int fd)
{
	double until = now() + 1.0;
	char b[16];
	int v, n = 0;
	socklen_t l = sizeof(v);

	while (now() < until && n < 100000) {
		struct pollfd p = {fd, POLLIN | POLLOUT, 0};
		(void)recv(fd, b, sizeof(b), MSG_DONTWAIT);
		(void)send(fd, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		(void)poll(&p, 1, 0);
		(void)getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &l);
		n++;
		usleep(1000);
	}
	printf("victim: survived euid %d\n", (int)geteuid());
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "attack") == 0)
		return attack(argv[2], atof(argv[3]));
	if (argc >= 3 && strcmp(argv[1], "victim") == 0)
		return victim(atoi(argv[2]));
	fprintf(stderr, "usage: tabletamper attack SUIDPROG SECONDS | tabletamper victim FD\n");
	return 2;
}
