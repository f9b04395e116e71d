//go:build osf_make

/* forktable: a fork child's fd table is its parent's at the fork, whatever
 * either does afterwards (fdtable/fdfork.c: the fork snapshot copies only the
 * pages of the table in use).
 *
 * The process holds connections over loopback (both ends) whose fds lie
 * in different pages of the table (32 entries a page): from 3, near 100,
 * 300 and 700 (while filler fds hold the numbers below; the fillers are
 * closed before the fork), and one made just before the fork. It forks:
 *
 * - the parent at once closes every connection and makes new ones (the
 *   same numbers, the lowest free), checks them and waits for the child;
 * - the child waits 50 ms (the parent's changes are made by then), checks
 *   that every connection it inherited carries a byte each way, makes one
 *   near 500 (a page its copy of the table never had), and forks a
 *   grandchild that checks them all again after its parent closed them.
 *
 * Under osf each check also reads the process's own table (the memfd
 * named osf-fdtable, layout fdtable/fdtable.h): it must belong to this
 * process and say that both fds are offloaded connections. A connection
 * whose entry a wrong copy lost would still carry bytes, as kernel TCP.
 *
 * With the argument "lowlimit" the process lowers its soft RLIMIT_NOFILE
 * to 64 just before the fork (below osf's own fds: the child takes its
 * table through the fd window) and both put it back after it.
 *
 * Prints "ok N connections" and exits 0; a connection that does not carry
 * its bytes or is not in the table: a message and exit 1. alarm() turns a
 * hang into a failure. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../fdtable/fdtable.h"
#include "pair.h"
#include "segmaps.h"

#define MAX 16

struct conn {
	int cli, srv;
};

static struct conn c[MAX];
static int n;
static int fillers[1024], nfill;

/* at makes a connection whose first fd is near target (filler fds take
 * the numbers below; close_fillers lets them go). */
static int at(int target, struct conn *k)
{
	int l;

	while (nfill < 1024) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd < 0)
			return perror("open"), -1;
		if (fd >= target - 1) {
			close(fd);
			break;
		}
		fillers[nfill++] = fd;
	}
	if (loopback_pair(&l, &k->cli, &k->srv) < 0)
		return -1;
	close(l);
	return 0;
}

static void close_fillers(void)
{
	while (nfill > 0)
		close(fillers[--nfill]);
}

/* table_fd returns this process's osf fd table, -1 when there is none
 * (bare). */
static int table_fd(void) { return memfd_fd(OSF_FDT_NAME); }

/* offloaded reports whether the table says fd is an offloaded connection
 * of this process: 1 yes, 0 no, -1 no table (bare). */
static int offloaded(int fd)
{
	int t = table_fd();
	struct osf_fdt_header h;
	struct osf_fdt_entry e;
	off_t at = OSF_FDT_HDR_BYTES + (off_t)(fd >> OSF_FDT_CHUNK_SHIFT) * OSF_FDT_CHUNK_BYTES +
		   (off_t)(fd & (OSF_FDT_CHUNK_ENTRIES - 1)) * OSF_FDT_ENTRY_BYTES;

	if (t < 0)
		return -1;
	if (pread(t, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.pid != getpid()) {
		fprintf(stderr, "forktable: the table (fd %d) is not this process's (pid %d)\n", t,
			h.pid);
		return 0;
	}
	return pread(t, &e, sizeof(e), at) == (ssize_t)sizeof(e) && e.kind == OSF_FD_SHM;
}

/* check sends a byte each way over k, and checks k's table entries. */
static int check(const char *who, int i, const struct conn *k)
{
	char b = 0;

	if (offloaded(k->cli) == 0 || offloaded(k->srv) == 0) {
		fprintf(stderr, "forktable: %s: connection %d (fds %d, %d) not in the table\n", who,
			i, k->cli, k->srv);
		return -1;
	}
	if (write(k->cli, "c", 1) != 1 || read(k->srv, &b, 1) != 1 || b != 'c' ||
	    write(k->srv, "s", 1) != 1 || read(k->cli, &b, 1) != 1 || b != 's') {
		fprintf(stderr, "forktable: %s: connection %d (fds %d, %d) broken: %s\n", who, i,
			k->cli, k->srv, strerror(errno));
		return -1;
	}
	return 0;
}

static int check_all(const char *who)
{
	int i;

	for (i = 0; i < n; i++)
		if (check(who, i, &c[i]) < 0)
			return -1;
	return 0;
}

/* close_all closes both ends of every connection. */
static void close_all(void)
{
	int i;

	for (i = 0; i < n; i++) {
		close(c[i].cli);
		close(c[i].srv);
	}
}

/* fork_checked forks, exiting 1 when it cannot. */
static pid_t fork_checked(void)
{
	pid_t p = fork();

	if (p < 0) {
		perror("fork");
		exit(1);
	}
	return p;
}

static int wait_ok(pid_t p, const char *who)
{
	int st;

	if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "forktable: %s failed (status %#x)\n", who, st);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const int targets[] = {3, 100, 300, 700};
	struct rlimit rl, low;
	pid_t child;
	unsigned t;
	int i, lowlimit = argc > 1 && strcmp(argv[1], "lowlimit") == 0;

	alarm(30);
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return perror("getrlimit"), 2;
	for (t = 0; t < sizeof(targets) / sizeof(targets[0]); t++)
		if ((rlim_t)targets[t] + 16 < rl.rlim_cur && at(targets[t], &c[n++]) < 0)
			return 1;
	close_fillers();
	if (check_all("before fork") < 0)
		return 1;
	if (loopback_pair(&i, &c[n].cli, &c[n].srv) < 0) /* just before the fork */
		return 1;
	close(i);
	n++;
	low = rl;
	low.rlim_cur = 64;
	if (lowlimit && setrlimit(RLIMIT_NOFILE, &low) < 0)
		return perror("setrlimit"), 2;
	child = fork_checked();
	if (child > 0) {
		if (lowlimit && setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return perror("setrlimit"), 2;
		/* The parent changes its table at once. */
		close_all();
		for (i = 0; i < n; i++) {
			int l;
			if (loopback_pair(&l, &c[i].cli, &c[i].srv) < 0)
				return 1;
			close(l);
		}
		if (check_all("parent after fork") < 0 || wait_ok(child, "child") < 0)
			return 1;
		printf("ok %d connections\n", n);
		return 0;
	}
	usleep(50000);
	if (check_all("child") < 0)
		return 1;
	if (lowlimit && setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return perror("setrlimit"), 2;
	if (at(500, &c[n]) < 0) /* a page the copy never had */
		return 1;
	close_fillers();
	n++;
	child = fork_checked();
	if (child > 0) {
		close_all();
		return wait_ok(child, "grandchild") < 0 ? 1 : 0;
	}
	usleep(50000);
	return check_all("grandchild") < 0 ? 1 : 0;
}
