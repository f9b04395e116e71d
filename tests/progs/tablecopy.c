//go:build osf_make

/* tablecopy: an exec'd image maps a table of its own, never the one it
 * inherited (issue 24, item 2).
 *
 *   tablecopy             (under osf) make an offloaded connection that
 *                         crosses exec, find the inode of this process's fd
 *                         table (its mapping "osf-fdtable"), and exec
 *                         itself (syscall(SYS_execve): the same pid, and a
 *                         table another process may still hold open) as
 *                         "tablecopy after INODE".
 *   tablecopy after INODE  say whether this image maps the table INODE
 *                         ("after: inherited table mapped") or another
 *                         ("after: own table"), and whether its inherited
 *                         connection still works ("after: connection
 *                         works"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pair.h"

extern char **environ;

/* table_inode returns the inode of the osf-fdtable file this process
 * maps, 0 when it maps none. */
static unsigned long table_inode(void)
{
	char line[512];
	unsigned long ino = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return 0;
	while (!ino && fgets(line, sizeof(line), f)) {
		unsigned long i;
		if (strstr(line, "osf-fdtable") &&
		    sscanf(line, "%*s %*s %*s %*s %lu", &i) == 1)
			ino = i;
	}
	fclose(f);
	return ino;
}

int main(int argc, char **argv)
{
	char buf[16], ino[32];
	int l, a, b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "after")) {
		unsigned long now = table_inode();
		printf("after: %s\n", !now ? "no table" :
		       now == strtoul(argv[2], NULL, 10) ? "inherited table mapped" : "own table");
		/* fd 3: the server end, fd 4: the client end */
		if (write(4, "ping", 4) == 4 && read(3, buf, sizeof(buf)) == 4 &&
		    !memcmp(buf, "ping", 4))
			printf("after: connection works\n");
		return 0;
	}
	if (loopback_pair(&l, &b, &a) < 0)
		return 1;
	close(l);
	if (dup2(a, 3) < 0 || dup2(b, 4) < 0)
		return perror("dup2"), 1;
	snprintf(ino, sizeof(ino), "%lu", table_inode());
	if (!strcmp(ino, "0"))
		return fprintf(stderr, "tablecopy: no fd table mapped\n"), 1;
	char *args[] = {argv[0], "after", ino, NULL};
	syscall(SYS_execve, "/proc/self/exe", args, environ);
	perror("execve");
	return 1;
}
