//go:build osf_make

/* suidexec: an offloaded connection handed to a program that runs without
 * osf (issue 10, item 9).
 *
 *   suidexec parent PROG [spawn|raw]
 *                         (under osf) make a connection to itself (a: the
 *                         server end, b: the client end), write 1000 bytes
 *                         on a, fork, and exec PROG reader with b as fd 3
 *                         (PROG is a set-user-ID copy of this program, which
 *                         the loader starts without osf); close b, wait
 *                         300 ms, and say what a non-blocking recv on a gets
 *                         ("parent: recv EAGAIN|ECONNRESET|..."); close a
 *                         and wait for the child. With "spawn": start
 *                         PROG reader with posix_spawn (no file actions),
 *                         wait for it, and say whether this process still
 *                         reads its connection ("parent: still reads
 *                         data").
 *                         With "raw": exec with syscall(SYS_execve),
 *                         which no hook sees (the table crosses it).
 *   suidexec reader        read fd 3 until it fails or ends: "reader: N
 *                         bytes, then EOF|ECONNRESET|...", and its euid;
 *                         then whether it maps an osf fd table ("reader:
 *                         fd table mapped|not mapped").
 *
 * A program without osf cannot use an offloaded connection: it must fail
 * loudly (ECONNRESET) and the peer must see a reset, never a silent end
 * of file with the 1000 bytes lost. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pair.h"

extern char **environ;

static const char *ename(int e)
{
	switch (e) {
	case EAGAIN:
		return "EAGAIN";
	case ECONNRESET:
		return "ECONNRESET";
	case EPIPE:
		return "EPIPE";
	case EBADF:
		return "EBADF";
	}
	return strerror(e);
}

/* maps_table reports whether this process maps an osf fd table (its
 * memfd, "osf-fdtable"). */
static int maps_table(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int found = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "osf-fdtable"))
			found = 1;
	fclose(f);
	return found;
}

static int reader(void)
{
	char buf[4096];
	long total = 0;
	ssize_t n;

	alarm(10); /* a reader that blocks forever is a failure too */
	while ((n = read(3, buf, sizeof(buf))) > 0)
		total += n;
	printf("reader: %ld bytes, then %s (euid %d)\n", total,
	       n == 0 ? "EOF" : ename(errno), (int)geteuid());
	printf("reader: fd table %s\n", maps_table() ? "mapped" : "not mapped");
	return 0;
}

int main(int argc, char **argv)
{
	char buf[1000];
	int l, a, b, st;
	pid_t pid;
	ssize_t n;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "reader"))
		return reader();
	if (argc < 3 || strcmp(argv[1], "parent")) {
		fprintf(stderr, "usage: suidexec parent PROG | suidexec reader\n");
		return 2;
	}
	if (loopback_pair(&l, &b, &a) < 0)
		return 1;
	close(l);
	memset(buf, 'x', sizeof(buf));
	if (write(a, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
		return perror("write"), 1;
	if (argc > 3 && !strcmp(argv[3], "spawn")) {
		/* posix_spawn, no file actions: this process keeps b. */
		char *args[] = {argv[2], "reader", NULL};
		if (dup2(b, 3) < 0 || posix_spawn(&pid, argv[2], NULL, NULL, args, environ) != 0)
			return perror("posix_spawn"), 1;
		waitpid(pid, &st, 0);
		printf("parent: child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		n = recv(b, buf, sizeof(buf), MSG_DONTWAIT);
		printf("parent: still reads %s\n", n > 0 ? "data" : n == 0 ? "EOF" : ename(errno));
		return 0;
	}
	pid = fork();
	if (pid == 0) {
		if (dup2(b, 3) < 0)
			_exit(3);
		if (argc > 3 && !strcmp(argv[3], "raw")) {
			/* An exec osf's hooks never see (the reader gets
			 * b as a plain socket: a must not stay open in
			 * it, or it never reads an end). */
			char *args[] = {argv[2], "reader", NULL};
			close(a);
			syscall(SYS_execve, argv[2], args, environ);
		} else {
			execl(argv[2], argv[2], "reader", (char *)NULL);
		}
		perror("exec");
		_exit(4);
	}
	close(b);
	usleep(300000);
	n = recv(a, buf, sizeof(buf), MSG_DONTWAIT);
	printf("parent: recv %s\n", n >= 0 ? "data" : ename(errno));
	close(a);
	waitpid(pid, &st, 0);
	printf("parent: child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return 0;
}
