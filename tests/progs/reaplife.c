//go:build osf_make

/* reaplife: the reaper's list of idle connections (preload/reaper.c)
 * across closes and a fork (issue 28).
 *
 *   reaplife close ROUNDS N  each round: N connections to itself, 256 KiB
 *                            each way on each (written, read, every byte
 *                            checked: their readers list them), then idle
 *                            for 0 to 250 ms, spread over the connections,
 *                            so that the reaper is looking at or trimming
 *                            some when this thread closes them all. A close
 *                            that unmapped a segment under the reaper would
 *                            crash the process. Prints "PASS".
 *   reaplife fork            a connection to itself (a, b): 64 KiB from a
 *                            read on b (its reader lists it), then fork.
 *                            The parent closes b, writes 64 KiB more on a
 *                            (two halves 300 ms apart) and sleeps; the
 *                            child closes a, reads those 64 KiB on b
 *                            (waiting for the second half: its reaper
 *                            starts there), prints "child PID" and sleeps
 *                            (nanosleep: it waits on no connection), so
 *                            that only its reaper, started after the fork,
 *                            can give the ring's pages back. Both sleep
 *                            until killed (the child dies with its parent).
 *
 * Exit status: 0 ok, 1 wrong data, 2 system error. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "pair.h"

#define KIB 1024

static unsigned char pattern(unsigned long long i) { return (unsigned char)(i * 7 + i / 4093); }

static void die(const char *what)
{
	perror(what);
	exit(2);
}

/* put writes n bytes of the stream from position *pos on fd. */
static void put(int fd, size_t n, unsigned long long *pos)
{
	unsigned char buf[16 * KIB];

	while (n > 0) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf), i;
		ssize_t r;
		for (i = 0; i < k; i++)
			buf[i] = pattern(*pos + i);
		r = send(fd, buf, k, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("send");
		*pos += (unsigned long long)r;
		n -= (size_t)r;
	}
}

/* get reads n bytes of the stream from position *pos on fd, checking them. */
static void get(int fd, size_t n, unsigned long long *pos)
{
	unsigned char buf[16 * KIB];

	while (n > 0) {
		ssize_t r = recv(fd, buf, n < sizeof(buf) ? n : sizeof(buf), 0), i;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("recv");
		for (i = 0; i < r; i++)
			if (buf[i] != pattern(*pos + (unsigned long long)i)) {
				printf("FAIL: byte %llu is %d, want %d\n",
				       *pos + (unsigned long long)i, buf[i],
				       pattern(*pos + (unsigned long long)i));
				exit(1);
			}
		*pos += (unsigned long long)r;
		n -= (size_t)r;
	}
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int closes(int rounds, int n)
{
	int (*fds)[3] = calloc((size_t)n, sizeof(*fds)), r, i;

	if (!fds)
		die("calloc");
	for (r = 0; r < rounds; r++) {
		for (i = 0; i < n; i++) {
			unsigned long long w = 0, g = 0;
			if (loopback_pair(&fds[i][0], &fds[i][1], &fds[i][2]) < 0)
				exit(2);
			put(fds[i][1], 256 * KIB, &w);
			get(fds[i][2], 256 * KIB, &g);
			w = g = 0;
			put(fds[i][2], 256 * KIB, &w);
			get(fds[i][1], 256 * KIB, &g);
		}
		/* Listed now; the reaper trims them 100 to 150 ms from here. */
		for (i = 0; i < n; i++) {
			sleep_ms(250 / n);
			close(fds[i][1]);
			close(fds[i][2]);
			close(fds[i][0]);
		}
	}
	free(fds);
	printf("PASS\n");
	return 0;
}

static int forked(void)
{
	unsigned long long w = 0, g = 0;
	int l, a, b;
	pid_t pid;

	if (loopback_pair(&l, &a, &b) < 0)
		return 2;
	put(a, 64 * KIB, &w);
	get(b, 64 * KIB, &g);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a);
		close(l);
		get(b, 64 * KIB, &g);
		printf("child %d\n", (int)getpid());
		fflush(stdout);
		for (;;)
			sleep_ms(1000);
	}
	close(b);
	/* In two halves, the child waiting for the second: a wait through
	 * osf after a read is where a process starts its reaper. */
	put(a, 32 * KIB, &w);
	sleep_ms(300);
	put(a, 32 * KIB, &w);
	for (;;)
		sleep_ms(1000);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && strcmp(argv[1], "close") == 0)
		return closes(atoi(argv[2]), atoi(argv[3]));
	if (argc == 2 && strcmp(argv[1], "fork") == 0)
		return forked();
	fprintf(stderr, "usage: reaplife close ROUNDS N | reaplife fork\n");
	return 2;
}
