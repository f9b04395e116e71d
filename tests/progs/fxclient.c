//go:build osf_make

/* fxclient: a one-thread TCP client that sends a file and saves what comes
 * back, for tests that hand connections to other programs.
 *
 *   fxclient PORT INFILE OUTFILE [pause]
 *
 * It connects to 127.0.0.1:PORT, prints "connected PID FD", then sends
 * INFILE while it saves everything it receives to OUTFILE, in one thread
 * with poll() over the socket (so only one thread ever waits on the
 * connection). After the whole file it shuts down its sending side and
 * reads until end of file. With "pause" it stops sending at the middle of
 * the file, prints "half", and goes on only after a line arrives on its
 * standard input (it keeps receiving meanwhile), so that a test can look
 * at the processes involved while the connection is open. At the end it
 * prints "done sent N received M" and exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "fxclient: %s: %s\n", what, strerror(errno));
	exit(2);
}

static char *slurp(const char *path, size_t *n)
{
	struct stat st;
	char *b;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st) < 0)
		die(path);
	b = malloc((size_t)st.st_size + 1);
	if (!b)
		die("malloc");
	for (size_t off = 0; off < (size_t)st.st_size;) {
		ssize_t r = read(fd, b + off, (size_t)st.st_size - off);
		if (r <= 0)
			die(path);
		off += (size_t)r;
	}
	close(fd);
	*n = (size_t)st.st_size;
	return b;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	size_t n, sent = 0, got = 0, stop;
	static char buf[65536];
	int s, out, paused, wr_open = 1;
	char *data;

	if (argc < 4) {
		fprintf(stderr, "usage: fxclient PORT INFILE OUTFILE [pause]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	a.sin_port = htons((unsigned short)atoi(argv[1]));
	data = slurp(argv[2], &n);
	out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out < 0)
		die(argv[3]);
	paused = argc > 4 && strcmp(argv[4], "pause") == 0;
	stop = paused ? n / 2 : n;

	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
		die("connect");
	if (fcntl(s, F_SETFL, O_NONBLOCK) < 0)
		die("fcntl");
	printf("connected %d %d\n", (int)getpid(), s);

	for (;;) {
		struct pollfd p[2] = {{s, POLLIN, 0}, {0, POLLIN, 0}};
		int np = 1;

		if (wr_open && sent < stop)
			p[0].events |= POLLOUT;
		if (wr_open && sent == stop && stop < n) {
			if (paused == 1) {
				printf("half\n");
				paused = 2;
			}
			np = 2; /* wait for the go-ahead */
		}
		if (wr_open && sent == n) {
			if (shutdown(s, SHUT_WR) < 0)
				die("shutdown");
			wr_open = 0;
		}
		if (poll(p, (nfds_t)np, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		if (np == 2 && (p[1].revents & (POLLIN | POLLHUP))) {
			char line[64];
			if (read(0, line, sizeof line) < 0)
				die("read stdin");
			stop = n;
		}
		if (p[0].revents & POLLOUT) {
			ssize_t w = send(s, data + sent, stop - sent, MSG_NOSIGNAL);
			if (w < 0 && errno != EAGAIN && errno != EINTR)
				die("send");
			if (w > 0)
				sent += (size_t)w;
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t r = recv(s, buf, sizeof buf, 0);
			if (r < 0 && errno != EAGAIN && errno != EINTR)
				die("recv");
			if (r == 0) {
				if (wr_open) {
					fprintf(stderr, "fxclient: end of file after %zu of %zu bytes sent\n",
						sent, n);
					return 1;
				}
				break;
			}
			if (r > 0) {
				if (write(out, buf, (size_t)r) != r)
					die(argv[3]);
				got += (size_t)r;
			}
		}
	}
	if (close(out) < 0)
		die(argv[3]);
	close(s);
	printf("done sent %zu received %zu\n", sent, got);
	return 0;
}
