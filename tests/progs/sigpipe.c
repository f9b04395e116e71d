//go:build osf_make

/* sigpipe: writes to a TCP connection whose peer has closed until the
 * write fails, and reports what happened, so a test can compare a bare run
 * with a run under osf.
 *
 *   sigpipe handler|ignore|default|nosignal
 *
 * The program sets SIGPIPE's disposition first (a counting handler for
 * handler and nosignal, SIG_IGN for ignore, SIG_DFL for default), then
 * opens a listener on 127.0.0.1, connects to it, accepts and closes the
 * accepted socket (under osf, listen and connect load the core), and
 * writes 1 KiB at a time (send with MSG_NOSIGNAL in nosignal mode) until a
 * write fails, at most 5000 writes 1 ms apart. It prints
 *
 *   first-write ok
 *   result errno=EPIPE sigpipe-handled=yes|no
 *
 * and exits 0; in default mode SIGPIPE kills it at the failing write. On
 * stderr it reports "maps: libosf=N libosfcore=N". */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "progs.h"

static volatile sig_atomic_t handled;

static void on_sigpipe(int sig)
{
	(void)sig;
	handled++;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	struct sigaction sa;
	const char *mode = argc > 1 ? argv[1] : "";
	char buf[1024];
	int l, c, s, i, nosig = 0;
	ssize_t r = 0;

	setvbuf(stdout, NULL, _IONBF, 0);
	memset(&sa, 0, sizeof sa);
	if (strcmp(mode, "handler") == 0 || strcmp(mode, "nosignal") == 0) {
		sa.sa_handler = on_sigpipe;
		nosig = mode[0] == 'n';
	} else if (strcmp(mode, "ignore") == 0) {
		sa.sa_handler = SIG_IGN;
	} else if (strcmp(mode, "default") == 0) {
		sa.sa_handler = SIG_DFL;
	} else {
		fprintf(stderr, "usage: sigpipe handler|ignore|default|nosignal\n");
		return 2;
	}
	if (sigaction(SIGPIPE, &sa, NULL) < 0)
		die("sigaction");

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listener");
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, al) < 0)
		die("connect");
	s = accept(l, NULL, NULL);
	if (s < 0)
		die("accept");
	close(s);
	close(l);
	fprintf(stderr, "maps: libosf=%d libosfcore=%d\n", maps_has("/libosf.so"),
		maps_has("/libosfcore.so") || maps_has("/memfd:osfcore"));

	memset(buf, 'x', sizeof buf);
	for (i = 0; i < 5000; i++) {
		r = nosig ? send(c, buf, sizeof buf, MSG_NOSIGNAL)
			  : write(c, buf, sizeof buf);
		if (r < 0)
			break;
		if (i == 0)
			printf("first-write ok\n");
		usleep(1000);
	}
	if (r >= 0) {
		printf("result no error after %d writes\n", i);
		return 1;
	}
	printf("result errno=%s sigpipe-handled=%s\n", strerrorname_np(errno),
	       handled ? "yes" : "no");
	return 0;
}
