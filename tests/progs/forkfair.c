/* forkfair FORKS: a second thread reads RLIMIT_NOFILE in a loop (under
 * osf each read takes the fd-window lock, fdtable/fdwindow.c) while the main thread
 * forks FORKS children. Each child reports how many reads the other thread
 * finished between its parent's call to fork and the fork itself (the
 * child's copy of the count is frozen at the fork), that is, how often
 * that thread took the lock while fork waited for it. Prints
 * "forks N median M max X". A lock that lets a thread take it again right
 * after letting go of it made fork wait for thousands of reads; a fair one
 * for a few. alarm() turns a hang into a failure. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long reads;
static volatile int stop;

static void *reader(void *x)
{
	struct rlimit rl;

	(void)x;
	while (!stop) {
		getrlimit(RLIMIT_NOFILE, &rl);
		__atomic_add_fetch(&reads, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	pthread_t t[2];
	long *seen, *d;
	int n, i, done = 0, over = 0;

	if (argc != 2 || (n = atoi(argv[1])) <= 0)
		return 2;
	alarm(120);
	seen = mmap(NULL, sizeof(long), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	d = calloc((size_t)n, sizeof(long));
	if (seen == MAP_FAILED || !d)
		return 1;
	pthread_create(&t[0], NULL, reader, NULL);
	pthread_create(&t[1], NULL, reader, NULL);
	while (reads < 1000)
		usleep(1000);
	for (i = 0; i < n; i++) {
		long before = reads;
		pid_t p = fork();
		if (p == 0) {
			*seen = reads;
			_exit(0);
		}
		if (p < 0 || waitpid(p, NULL, 0) != p)
			continue;
		d[done++] = *seen - before;
	}
	stop = 1;
	pthread_join(t[0], NULL);
	pthread_join(t[1], NULL);
	if (!done)
		return 1;
	qsort(d, (size_t)done, sizeof(long), cmp);
	for (i = 0; i < done; i++)
		over += d[i] > 1000;
	printf("forks %d median %ld max %ld over1000 %d\n", done, d[done / 2], d[done - 1], over);
	return 0;
}
