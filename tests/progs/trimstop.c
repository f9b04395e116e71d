//go:build osf_make

/* trimstop: a producer never waits for a consumer stopped while it trims
 * the producer's ring (issue 12).
 *
 *   trimstop     (under osf with OSF_DEBUG_TRIM_STOP=1) make a connection
 *                to itself (a, b) and fork: the child keeps b and reads it
 *                with blocking recv, checking every byte (byte i of the
 *                stream is pattern(i)); the parent keeps a and writes.
 *                Prints "child PID", then waits for SIGUSR1 (the test
 *                looks at the transport meanwhile).
 *
 * The parent writes 8 KiB before the fork; the child reads them and
 * sleeps in recv with pages to give back (a new ring has none before its
 * reader consumed a page); its reaper trims the ring (all of it, nothing
 * being unread) and, before its first punch, stops the child
 * (OSF_DEBUG_TRIM_STOP) holding the parent's producer lock. The parent
 * sees the stop (waitpid WUNTRACED) and writes 64 KiB with MSG_DONTWAIT
 * and 512 KiB blocking, from the ring's head, where the stopped trimmer
 * was about to punch: the ring (1 MiB) has room for them,
 * and TCP would take them at once, so must osf ("FAIL ..." on EAGAIN, or
 * after 10 s). Then it continues the child, writes 1 MiB more and shuts
 * down; the child checks every byte (a punch made after the parent wrote
 * would read as zeros) and exits 0. "PASS" when all of that held. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pair.h"

static unsigned char pattern(unsigned long long i) { return (unsigned char)(i * 7 + i / 4093); }

static unsigned long long sent;

/* put writes n bytes of the stream with flags: 0, or -1 (errno). */
static int put(int fd, size_t n, int flags)
{
	static unsigned char buf[1 << 18];

	while (n > 0) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf), i;
		ssize_t r;
		for (i = 0; i < k; i++)
			buf[i] = pattern(sent + i);
		r = send(fd, buf, k, flags | MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		sent += (unsigned long long)r;
		n -= (size_t)r;
	}
	return 0;
}

static void child(int b)
{
	static unsigned char buf[1 << 16];
	unsigned long long got = 0;

	for (;;) {
		ssize_t r = recv(b, buf, sizeof(buf), 0), i;
		if (r == 0)
			break;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			printf("FAIL child: recv: %s\n", strerror(errno));
			_exit(1);
		}
		for (i = 0; i < r; i++)
			if (buf[i] != pattern(got + (unsigned long long)i)) {
				printf("FAIL child: byte %llu is %d, want %d\n",
				       got + (unsigned long long)i, buf[i],
				       pattern(got + (unsigned long long)i));
				_exit(1);
			}
		got += (unsigned long long)r;
	}
	printf("child: %llu bytes, all right\n", got);
	_exit(0);
}

static void timeout(int sig)
{
	static const char m[] = "FAIL parent: a write waited 10 s for the stopped trimmer\n";

	(void)sig;
	(void)!write(1, m, sizeof(m) - 1);
	_exit(1);
}

int main(void)
{
	int l, a, b, st, sig;
	sigset_t usr1;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (loopback_pair(&l, &b, &a) < 0)
		return 1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, NULL);
	if (put(a, 8 << 10, 0) < 0)
		return printf("FAIL parent: send: %s\n", strerror(errno)), 1;
	pid = fork();
	if (pid == 0) {
		close(a);
		child(b);
	}
	close(b);
	printf("child %d\n", (int)pid);
	sigwait(&usr1, &sig);
	signal(SIGALRM, timeout);
	alarm(20); /* the child stops within 20 s */
	if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st))
		return printf("FAIL parent: the child did not stop in a trim\n"), 1;
	printf("parent: the child stopped in a trim\n");
	alarm(10);
	if (put(a, 64 << 10, MSG_DONTWAIT) < 0)
		return printf("FAIL parent: a non-blocking send with room: %s\n", strerror(errno)), 1;
	if (put(a, 512 << 10, 0) < 0)
		return printf("FAIL parent: send: %s\n", strerror(errno)), 1;
	alarm(0);
	printf("parent: wrote while the trimmer was stopped\n");
	kill(pid, SIGCONT);
	if (put(a, 1 << 20, 0) < 0)
		return printf("FAIL parent: send: %s\n", strerror(errno)), 1;
	shutdown(a, SHUT_WR);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return printf("FAIL parent: the child failed\n"), 1;
	printf("PASS\n");
	return 0;
}
