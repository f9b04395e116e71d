/* forkconn PORT SECONDS: two threads connect to an accepting thread's
 * listener on 127.0.0.1:PORT and close, over and over, while the main
 * thread forks children that exit at once. A fork that takes osf's locks
 * in the other order than a connect's fd window deadlocks here within a
 * second (preload/process.c fork). Prints "connects N forks M"; exits 1
 * when nothing connected. alarm() turns a hang into a failure. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in addr;
static volatile int stop;
static long connects;

static void *connector(void *x)
{
	(void)x;
	while (!stop) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0)
			continue;
		if (connect(s, (struct sockaddr *)&addr, sizeof addr) == 0 &&
		    write(s, "x", 1) == 1)
			__atomic_add_fetch(&connects, 1, __ATOMIC_RELAXED);
		close(s);
	}
	return NULL;
}

static void *acceptor(void *x)
{
	int l = *(int *)x;

	while (!stop) {
		int c = accept(l, NULL, NULL);
		if (c >= 0)
			close(c);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[3];
	int l, one = 1, forks = 0;
	long longest = 0;
	time_t end;

	if (argc != 3)
		return 2;
	alarm(atoi(argv[2]) + 20);
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons(atoi(argv[1]));
	if (bind(l, (struct sockaddr *)&addr, sizeof addr) || listen(l, 512)) {
		perror("forkconn: listen");
		return 1;
	}
	pthread_create(&t[0], NULL, acceptor, &l);
	pthread_create(&t[1], NULL, connector, NULL);
	pthread_create(&t[2], NULL, connector, NULL);
	end = time(NULL) + atoi(argv[2]);
	while (time(NULL) < end) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		pid_t p = fork();
		if (p == 0)
			_exit(0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
		if (ms > longest)
			longest = ms;
		if (p > 0 && waitpid(p, NULL, 0) == p)
			forks++;
	}
	stop = 1;
	printf("connects %ld forks %d longest_fork_ms %ld\n", connects, forks, longest);
	fflush(stdout);
	_exit(connects > 0 && forks > 0 ? 0 : 1);
}
