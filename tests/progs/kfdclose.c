/* kfdclose: short connections whose reader closes while its peer is waking
 * it, under OSF_SHM_KFD=1 (preload/kfd.c osf_kfd_close; TestKfdCloseRace).
 *
 * kfdclose PORT N: the server (the parent) accepts N connections on
 * 127.0.0.1:PORT; to each it writes one byte and its shutdown(SHUT_WR),
 * then reads to the end. The client process makes the N connections one
 * after the other and reads each without blocking until the end (each
 * EAGAIN raises its want flag, which it leaves up when the next look finds
 * the byte or the end), then closes it at once. With the server's wake-ups
 * slowed between taking the client's want flag and sending its token
 * (OSF_DEBUG_KFD_WAKE_US), the client's close comes in between: a token
 * that reached its closed kernel socket would make it answer with a
 * reset to the server's live connection, which TCP never sends here
 * (counted: the program runs in a network namespace of its own, and
 * reads its Tcp OutRsts). The client is forked before the listener is
 * made (no fork family shares it). Prints "client ok X kfd K" (X: the
 * byte, then end-of-file) and "server ok X resets Y other Z kfd K";
 * every wait is bounded (10 s).
 *
 * kfdclose PORT N first: the server closes first (TestKfdShutdownClose):
 * 1 ms after each accept, when the client sleeps in poll for it, it
 * writes the byte, shuts down writing and closes at once; the client
 * polls before each read and counts the polls that said POLLERR ("client
 * ok X pollerr P kfd K"). With the server's last close slowed between
 * letting go of its holder count and bumping close_seq
 * (OSF_DEBUG_CLOSE_US), the client's wake-up, which finds the FIN on its
 * kernel socket, comes in between: a side whose FIN came was held, so
 * the end is TCP's orderly one, never the reset of a connection nobody
 * accepted (sdp/side.c osf_side_mark_gone). */
#include "progs.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

static struct sockaddr_in addr = {.sin_family = AF_INET};

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void timeouts(int fd)
{
	struct timeval tv = {10, 0};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* out_rsts returns the resets TCP sent in this network namespace
 * (/proc/net/snmp, Tcp OutRsts), or -1000000 when unknown. */
static long out_rsts(void)
{
	char names[1024], vals[1024], *np, *vp, *n, *v;
	long r = -1000000;
	FILE *f = fopen("/proc/net/snmp", "r");

	while (f && fgets(names, sizeof names, f))
		if (strncmp(names, "Tcp:", 4) == 0 && fgets(vals, sizeof vals, f)) {
			for (n = strtok_r(names, " \n", &np), v = strtok_r(vals, " \n", &vp); n && v;
			     n = strtok_r(NULL, " \n", &np), v = strtok_r(NULL, " \n", &vp))
				if (strcmp(n, "OutRsts") == 0)
					r = atol(v);
			break;
		}
	if (f)
		fclose(f);
	return r;
}

/* own_net moves this process into a network namespace of its own with
 * loopback up, so that the resets counted are this program's. */
static int own_net(void)
{
	struct ifreq ifr;
	int s;

	if (unshare(CLONE_NEWNET) < 0 || (s = socket(AF_INET, SOCK_DGRAM, 0)) < 0)
		return -1;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -1;
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return -1;
	close(s);
	return 0;
}

/* reader reads c without blocking until the end: 1 when it got the one
 * byte and then end-of-file. */
static int reader(int c)
{
	long end = now_ms() + 10000;
	char b[64];
	ssize_t r;
	int got = 0;

	fcntl(c, F_SETFL, O_NONBLOCK);
	while ((r = recv(c, b, sizeof b, 0)) != 0 && now_ms() < end) {
		if (r > 0)
			got += (int)r;
		else if (errno != EAGAIN)
			break;
	}
	return r == 0 && got == 1;
}

/* poll_reader is reader for mode first: it sleeps in poll before each
 * read and counts in *perr the polls that said POLLERR. */
static int poll_reader(int c, int *perr)
{
	long end = now_ms() + 10000;
	struct pollfd p = {c, POLLIN | POLLRDHUP, 0};
	char b[64];
	ssize_t r = -1;
	int got = 0;

	fcntl(c, F_SETFL, O_NONBLOCK);
	while (now_ms() < end) {
		if (poll(&p, 1, 10000) <= 0)
			break;
		if (p.revents & POLLERR)
			(*perr)++;
		r = recv(c, b, sizeof b, 0);
		if (r > 0)
			got += (int)r;
		else if (r == 0 || errno != EAGAIN)
			break;
	}
	return r == 0 && got == 1;
}

static void client(int n, int first)
{
	int i, ok = 0, kfd = 0, perr = 0;

	for (i = 0; i < n; i++) {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof addr) < 0) {
			perror("connect");
			_exit(1);
		}
		kfd += osf_offloaded(c);
		ok += first ? poll_reader(c, &perr) : reader(c);
		close(c);
	}
	if (first)
		printf("client ok %d pollerr %d kfd %d\n", ok, perr, kfd);
	else
		printf("client ok %d kfd %d\n", ok, kfd);
	_exit(0);
}

/* server sends each connection one byte and its shutdown(SHUT_WR), reads
 * to the end and looks at its kernel socket's own end. */
static void server(int l, int n, int first, char *line, size_t len)
{
	int i, ok = 0, reset, other = 0, kfd = 0;
	struct timespec ms = {0, 1000000};
	long rsts0 = out_rsts();

	for (i = 0; i < n; i++) {
		int a = accept(l, NULL, NULL);
		char b[64];
		ssize_t r;
		if (a < 0) {
			if (errno == EINTR || errno == ECONNABORTED) {
				i--;
				continue;
			}
			perror("accept");
			break;
		}
		timeouts(a);
		kfd += osf_offloaded(a);
		if (first)
			nanosleep(&ms, NULL); /* the client asleep in poll */
		if (write(a, "a", 1) != 1 || shutdown(a, SHUT_WR) < 0) {
			other++;
			close(a);
			continue;
		}
		if (first) { /* close at once: the client reads the end */
			ok++;
			close(a);
			continue;
		}
		while ((r = read(a, b, sizeof b)) > 0)
			;
		if (r == 0)
			ok++;
		else
			other++;
		close(a);
	}
	/* A token that reached a closed socket made its kernel answer
	 * with a reset (osf reads the end from the ring and may take the
	 * socket's error): counted in this namespace's own. */
	reset = (int)(out_rsts() - rsts0);
	snprintf(line, len, "server ok %d resets %d other %d kfd %d\n", ok, reset, other, kfd);
}

int main(int argc, char **argv)
{
	int l, one = 1, n, go[2], st, first;
	char b, line[128];
	pid_t pid;

	setvbuf(stdout, NULL, _IONBF, 0);
	first = argc == 4 && strcmp(argv[3], "first") == 0;
	if ((argc != 3 && !first) || pipe(go) < 0)
		return 2;
	if (own_net() < 0) {
		perror("network namespace");
		return 1;
	}
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons((uint16_t)atoi(argv[1]));
	n = atoi(argv[2]);
	if (n < 1)
		return 2;
	/* The client first, so that the listener is no fork family's. */
	pid = fork();
	if (pid == 0) {
		close(go[1]);
		if (read(go[0], &b, 1) != 1)
			_exit(1);
		client(n, first);
	}
	close(go[0]);
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (l < 0 || bind(l, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(l, 64) < 0) {
		perror("listen");
		kill(pid, SIGKILL);
		return 1;
	}
	if (write(go[1], "g", 1) != 1)
		return 1;
	server(l, n, first, line, sizeof line);
	waitpid(pid, &st, 0);
	printf("%s", line); /* after the client's line */
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
