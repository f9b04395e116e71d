//go:build osf_make

/* epfirst: several threads register their first connections in one
 * fresh epoll at the same moment (Go's dialing goroutines do so on the
 * netpoller's epoll); every event a wait reports carries one of the data
 * values the threads registered, and each connection is reported. Rounds
 * of NTHR threads, each connecting to a loopback listener, meeting at a
 * barrier, then adding its connection for EPOLLOUT with data BASE + its
 * index. It prints
 *
 *   result ok (R rounds)
 *   result stray DATA in round R
 *   result missing in round R: K of NTHR reported
 *
 * and exits 0 only for ok. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NTHR 8
#define ROUNDS 100
#define BASE 0x5100ULL
#define WAIT_MS 3000

static struct sockaddr_in addr;
static pthread_barrier_t meet;
static int ep, cli[NTHR];

static void die(const char *w)
{
	perror(w);
	exit(2);
}

static void *dial(void *arg)
{
	int i = (int)(long)arg;
	struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = BASE + (uint64_t)i};

	cli[i] = socket(AF_INET, SOCK_STREAM, 0);
	if (cli[i] < 0 || connect(cli[i], (struct sockaddr *)&addr, sizeof(addr)) < 0)
		die("connect");
	pthread_barrier_wait(&meet);
	if (epoll_ctl(ep, EPOLL_CTL_ADD, cli[i], &ev) < 0)
		die("epoll_ctl");
	return NULL;
}

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000;
}

int main(void)
{
	socklen_t sl = sizeof(addr);
	int l, r, i;

	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(l, 64) < 0 || getsockname(l, (struct sockaddr *)&addr, &sl) < 0)
		die("listen");
	for (r = 0; r < ROUNDS; r++) {
		pthread_t th[NTHR];
		int srv[NTHR], seen = 0, n;
		long end;

		ep = epoll_create1(EPOLL_CLOEXEC);
		if (ep < 0)
			die("epoll_create1");
		pthread_barrier_init(&meet, NULL, NTHR);
		for (i = 0; i < NTHR; i++)
			if (pthread_create(&th[i], NULL, dial, (void *)(long)i))
				die("pthread_create");
		for (i = 0; i < NTHR; i++)
			if ((srv[i] = accept(l, NULL, NULL)) < 0)
				die("accept");
		for (i = 0; i < NTHR; i++)
			pthread_join(th[i], NULL);
		end = now_ms() + WAIT_MS;
		while (seen != (1 << NTHR) - 1 && now_ms() < end) {
			struct epoll_event ev[2 * NTHR];
			n = epoll_wait(ep, ev, 2 * NTHR, 100);
			if (n < 0 && errno != EINTR)
				die("epoll_wait");
			for (i = 0; i < n; i++) {
				uint64_t d = ev[i].data.u64;
				if (d < BASE || d >= BASE + NTHR) {
					printf("result stray 0x%llx in round %d\n",
					       (unsigned long long)d, r);
					return 1;
				}
				seen |= 1 << (d - BASE);
			}
		}
		if (seen != (1 << NTHR) - 1) {
			printf("result missing in round %d: %d of %d reported\n", r,
			       __builtin_popcount((unsigned)seen), NTHR);
			return 1;
		}
		for (i = 0; i < NTHR; i++) {
			close(cli[i]);
			close(srv[i]);
		}
		close(ep);
		pthread_barrier_destroy(&meet);
	}
	printf("result ok (%d rounds)\n", ROUNDS);
	return 0;
}
