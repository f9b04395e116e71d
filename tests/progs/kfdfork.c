/* kfdfork: the links of an OSF_SHM_KFD client across fork
 * (TestKfdLinkFork; preload/setup_link.c).
 *
 * kfdfork PORT: against an echo server on 127.0.0.1:PORT (churn sink),
 * the parent makes a connection, forks, the child makes one, and the
 * parent another after the child ended; each makes a round trip of 64
 * bytes. Each process prints its links before and after its connection:
 * the companion connections it holds (sockets whose peer is an abstract
 * name "osf1/..."; counted with the raw system calls, osf's hidden fds
 * too), and the transport of its connection ("kfd", else "tcp").
 * Expected under the switch: the parent holds one link throughout; the
 * child its copy of the parent's (closed at its first use of the links,
 * not at the fork: preload/setup_link.c own_locked), then one of its own
 * only: "mine" counts the links after the connection that are not the
 * parent's (inode numbers).
 *
 * kfdfork relink PORT: a connection, then, at each line read on standard
 * input (at most 4), another, printing as above: the test restarts the
 * server in between, so the link of the first is broken and the second
 * must dial a new one (the process keeps one link). */
#include "progs.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

/* The inodes of the links the last links() counted (parent: before the
 * fork, the child's copy). */
#define MAX_SEEN 16
static unsigned long seen[MAX_SEEN];
static int nseen;

/* links counts this process's sockets connected to a companion, noting
 * their inodes in seen. */
static int links(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	nseen = 0;
	while ((de = readdir(d)) != NULL) {
		struct sockaddr_un sun;
		socklen_t sl = sizeof(sun);
		int fd = atoi(de->d_name);
		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		memset(&sun, 0, sizeof(sun));
		if (syscall(SYS_getpeername, fd, (struct sockaddr *)&sun, &sl) == 0 &&
		    sun.sun_family == AF_UNIX && sl > sizeof(sa_family_t) + 5 &&
		    sun.sun_path[0] == 0 && memcmp(sun.sun_path + 1, "osf1/", 5) == 0) {
			struct stat st;
			if (nseen < MAX_SEEN && fstat(fd, &st) == 0)
				seen[nseen++] = (unsigned long)st.st_ino;
			n++;
		}
	}
	closedir(d);
	return n;
}

/* trip connects, sends 64 bytes, reads them back and prints who did. */
static void trip(const char *who, const struct sockaddr_in *a)
{
	char out[64], in[64];
	int c, before = links(), got = 0, r, mine = 0, i, j;
	unsigned long prev[MAX_SEEN];
	int nprev = nseen;

	memset(out, who[0], sizeof(out));
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof(*a)) < 0 ||
	    write(c, out, sizeof(out)) != (ssize_t)sizeof(out)) {
		perror("connect");
		exit(1);
	}
	while (got < (int)sizeof(in) && (r = (int)read(c, in + got, sizeof(in) - (size_t)got)) > 0)
		got += r;
	if (got != (int)sizeof(in) || memcmp(in, out, sizeof(in)) != 0) {
		fprintf(stderr, "%s: echo: %d bytes\n", who, got);
		exit(1);
	}
	memcpy(prev, seen, sizeof(prev));
	r = links();
	for (i = 0; i < nseen; i++) {
		for (j = 0; j < nprev && prev[j] != seen[i]; j++)
			;
		mine += j == nprev;
	}
	printf("%s: links %d %d, transport %s%s\n", who, before, r,
	       osf_offloaded(c) ? "kfd" : "tcp",
	       strcmp(who, "child") ? "" : mine == r ? ", its own" : ", not its own");
	close(c);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int st;
	pid_t pid;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 3 && strcmp(argv[1], "relink") == 0) {
		char line[64];
		int n;
		a.sin_port = htons((uint16_t)atoi(argv[2]));
		trip("first", &a);
		for (n = 0; n < 4 && fgets(line, sizeof line, stdin); n++)
			trip("again", &a);
		return 0;
	}
	if (argc != 2)
		return 2;
	a.sin_port = htons((uint16_t)atoi(argv[1]));
	trip("parent", &a);
	pid = fork();
	if (pid == 0) {
		trip("child", &a);
		exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 1;
	trip("parent", &a);
	return 0;
}
