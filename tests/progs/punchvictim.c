//go:build osf_make

/* punchvictim: a server with a shared mapping of its own that no peer may
 * reach (issue 24, item 1: a client steered the server's hole punch into
 * PostgreSQL's shared buffers).
 *
 *   punchvictim poll|epoll PORT SECONDS   map 1 MiB of shared anonymous
 *       memory filled with 0xa5 and print "region ADDR LEN"; listen on
 *       127.0.0.1:PORT, print "listening", accept one connection and read
 *       it, waiting with poll or epoll_wait (timeouts of 300 ms: an idle
 *       poller trims the ring it reads), until the end or SECONDS; print
 *       "segments resident N" (the bytes of osf's segment mappings in
 *       memory: /proc/self/smaps), then "region intact", or "region
 *       punched: N bytes" and exit 1.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REGION (1u << 20)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* seg_resident returns the bytes of osf's segment mappings in memory. */
static long seg_resident(void)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	long kb, sum = 0;
	int in = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *dash = strchr(line, '-'), *sp = strchr(line, ' ');
		if (dash && sp && dash < sp) /* a mapping's first line */
			in = strstr(line, "memfd:osf-seg") != NULL;
		else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1)
			sum += kb * 1024;
	}
	fclose(f);
	return sum;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	unsigned char *region, buf[65536];
	double until;
	size_t bad = 0, got = 0;
	int l, c, one = 1, ep = -1;

	if (argc < 4) {
		fprintf(stderr, "usage: punchvictim poll|epoll PORT SECONDS\n");
		return 2;
	}
	until = now() + atof(argv[3]);
	region = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED)
		return perror("mmap"), 1;
	memset(region, 0xa5, REGION);
	printf("region %p %u\n", (void *)region, REGION);
	a.sin_port = htons((unsigned short)atoi(argv[2]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4) < 0)
		return perror("listen"), 1;
	printf("listening\n");
	fflush(stdout);
	c = accept(l, NULL, NULL);
	if (c < 0)
		return perror("accept"), 1;
	if (strcmp(argv[1], "epoll") == 0) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = c};
		ep = epoll_create1(0);
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) < 0)
			return perror("epoll"), 1;
	}
	while (now() < until) {
		struct pollfd p = {c, POLLIN, 0};
		struct epoll_event ev;
		ssize_t n;
		if ((ep < 0 ? poll(&p, 1, 300) : epoll_wait(ep, &ev, 1, 300)) <= 0)
			continue;
		n = recv(c, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (n > 0)
			got += (size_t)n;
	}
	for (size_t i = 0; i < REGION; i++)
		bad += region[i] != 0xa5;
	printf("read %zu bytes\nsegments resident %ld\n", got, seg_resident());
	if (bad) {
		printf("region punched: %zu bytes\n", bad);
		return 1;
	}
	printf("region intact\n");
	close(c);
	close(l);
	return 0;
}
