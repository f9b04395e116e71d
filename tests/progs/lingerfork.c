//go:build osf_make

/* lingerfork: SO_LINGER {1, 0} on a connection that a fork child goes on
 * serving after the parent closes its copy, as a fork-per-connection
 * server with abortive close does.
 *
 * The process listens on 127.0.0.1 and forks a client, which connects and
 * reads (blocking) until end of file or an error. The server accepts, sets
 * SO_LINGER {1, 0}, forks a worker and closes its own copy at once. The
 * worker waits 0.3 s, writes "hi", waits 0.3 s and closes: as the last
 * holder of the socket, with linger 0 it resets the connection. The
 * client prints
 *
 *   client got 2 bytes
 *   client end ECONNRESET cpu_ms N
 *
 * (the errno of the read that ended it, or EOF; N is the CPU time the
 * client used, all of it waiting) and the process exits 0. A client that
 * has not seen the end 3 s after connecting prints "client stuck cpu_ms N"
 * and the process exits 1.
 */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static long cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

static void stuck(int sig)
{
	char buf[64];
	int n = snprintf(buf, sizeof buf, "client stuck cpu_ms %ld\n", cpu_ms());

	(void)sig;
	if (write(1, buf, (size_t)n) < 0)
		_exit(3);
	_exit(1);
}

int main(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	struct linger lg = {1, 0};
	int l, s, st;
	pid_t client, worker;

	setvbuf(stdout, NULL, _IONBF, 0);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listen");
	client = fork();
	if (client < 0)
		die("fork");
	if (client == 0) {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		char b[64];
		ssize_t r;
		signal(SIGALRM, stuck);
		alarm(3);
		if (c < 0 || connect(c, (struct sockaddr *)&a, al) < 0)
			die("connect");
		while ((r = read(c, b, sizeof b)) > 0)
			printf("client got %zd bytes\n", r);
		printf("client end %s cpu_ms %ld\n", r == 0 ? "EOF" : strerrorname_np(errno),
		       cpu_ms());
		_exit(0);
	}
	s = accept(l, NULL, NULL);
	if (s < 0 || setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0)
		die("accept");
	worker = fork();
	if (worker < 0)
		die("fork");
	if (worker == 0) {
		usleep(300000);
		if (write(s, "hi", 2) != 2)
			die("write");
		usleep(300000);
		close(s);
		_exit(0);
	}
	close(s); /* the worker serves it */
	waitpid(worker, &st, 0);
	waitpid(client, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
