//go:build osf_make

/* forkcost CONNS FORKS [faults]: the cost of fork in a process that holds
 * CONNS connections over loopback (both ends, made before the timing;
 * CONNS 0: none, and no socket at all). Times FORKS rounds of fork,
 * _exit(0) in the child, waitpid in the parent, and prints
 * "us_per_fork=N" (with "faults": also the minor page faults per fork of
 * the parent and of the children, getrusage). Then checks that every
 * connection still carries a byte both ways (exit 1 if not). Run under
 * osf with OSF_STRICT=1, so the connections are surely offloaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pair.h"

#define MAX_CONNS 1024

static int cli[MAX_CONNS], srv[MAX_CONNS];

int main(int argc, char **argv)
{
	int n, forks, i, l = -1;
	struct timespec a, b;
	struct rusage s0, s1, c0, c1;

	if (argc != 3 && (argc != 4 || strcmp(argv[3], "faults") != 0))
		return 2;
	n = atoi(argv[1]);
	forks = atoi(argv[2]);
	if (n < 0 || n > MAX_CONNS || forks <= 0)
		return 2;
	alarm(120);
	for (i = 0; i < n; i++) {
		int l1;
		if (loopback_pair(&l1, &cli[i], &srv[i]) < 0)
			return 1;
		if (l >= 0)
			close(l1);
		else
			l = l1;
	}
	getrusage(RUSAGE_SELF, &s0);
	getrusage(RUSAGE_CHILDREN, &c0);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < forks; i++) {
		pid_t p = fork();
		if (p < 0)
			return perror("fork"), 1;
		if (p == 0)
			_exit(0);
		if (waitpid(p, NULL, 0) != p)
			return perror("waitpid"), 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	getrusage(RUSAGE_SELF, &s1);
	getrusage(RUSAGE_CHILDREN, &c1);
	for (i = 0; i < n; i++) {
		char c = 0;
		if (write(cli[i], "c", 1) != 1 || read(srv[i], &c, 1) != 1 || c != 'c' ||
		    write(srv[i], "s", 1) != 1 || read(cli[i], &c, 1) != 1 || c != 's')
			return fprintf(stderr, "forkcost: connection %d broken\n", i), 1;
	}
	printf("us_per_fork=%.1f",
	       ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / forks);
	if (argc == 4)
		printf(" parent_faults=%.2f child_faults=%.2f",
		       (double)(s1.ru_minflt - s0.ru_minflt) / forks,
		       (double)(c1.ru_minflt - c0.ru_minflt) / forks);
	printf("\n");
	return 0;
}
