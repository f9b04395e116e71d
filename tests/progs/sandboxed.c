//go:build osf_make

/* sandboxed: a connection used under a seccomp filter that allows exactly
 * the system calls its kernel TCP run needs (sshd's pre-auth sandbox
 * allows little more): it connects a client to a listener on 127.0.0.1,
 * accepts it and execs itself with both (as sshd re-execs itself for each
 * connection); the new image starts a writer thread and installs the
 * filter; under it the writer writes 8 MiB of a pattern with write(2) and
 * shuts its side down, and the main thread reads it with poll(2) and
 * read(2) until the end, then prints
 *
 *   transport CLIENT SERVER     ("unix": offloaded by osf, "kfd": a TCP socket
 *                               osf offloads (OSF_SHM_KFD=1), "tcp": kernel)
 *   received N bytes pattern ok|BAD
 *
 * Any other system call kills the process (SIGSYS), as such filters do.
 * Exit status 0 when everything arrived intact.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "progs.h"

#define TOTAL (8u << 20)

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + i / 4093); }

/* transport says where fd's socket inode is listed. */
static const char *transport(int fd)
{
	static const char *const tabs[][2] = {{"/proc/net/unix", "unix"},
					      {"/proc/net/tcp", "tcp"}};
	char line[512], ino[32];
	struct stat st;
	size_t t;

	if (fstat(fd, &st) < 0)
		return "none";
	snprintf(ino, sizeof ino, " %lu", (unsigned long)st.st_ino);
	for (t = 0; t < 2; t++) {
		FILE *f = fopen(tabs[t][0], "r");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f)) {
			char *p = strstr(line, ino);
			if (p && (p[strlen(ino)] == ' ' || p[strlen(ino)] == '\n')) {
				fclose(f);
				return t == 1 && osf_offloaded(fd) ? "kfd" : tabs[t][1];
			}
		}
		fclose(f);
	}
	return "none";
}

#define ALLOW(nr)                                                              \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1),                       \
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* The system calls the kernel TCP run makes once the filter is on. */
static struct sock_filter insns[] = {
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	ALLOW(__NR_read),
	ALLOW(__NR_write),
	ALLOW(__NR_poll),
	ALLOW(__NR_shutdown),
	ALLOW(__NR_close),
	ALLOW(__NR_futex),
	ALLOW(__NR_madvise),
	ALLOW(__NR_munmap),
	ALLOW(__NR_mmap),
	ALLOW(__NR_brk),
	ALLOW(__NR_rt_sigprocmask),
	ALLOW(__NR_exit),
	ALLOW(__NR_exit_group),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
};

static int go_pipe[2];

static void *writer(void *p)
{
	static unsigned char buf[65536];
	int fd = *(int *)p;
	size_t off = 0;
	char go;

	if (read(go_pipe[0], &go, 1) != 1) /* the filter is on */
		return NULL;
	while (off < TOTAL) {
		size_t i, n = TOTAL - off < sizeof buf ? TOTAL - off : sizeof buf;
		ssize_t w;
		for (i = 0; i < n; i++)
			buf[i] = pattern(off + i);
		w = write(fd, buf, n);
		if (w <= 0)
			return NULL;
		off += (size_t)w;
	}
	shutdown(fd, SHUT_WR);
	return NULL;
}

/* sandboxed_run is the exec'd image: client fd c, server fd s. */
static int sandboxed_run(int c, int s)
{
	struct sock_fprog prog = {sizeof insns / sizeof insns[0], insns};
	static unsigned char buf[65536];
	size_t got = 0;
	pthread_t th;
	int ok = 1;

	printf("transport %s %s\n", transport(c), transport(s));
	fflush(stdout);
	if (pipe(go_pipe) < 0 || pthread_create(&th, NULL, writer, &c) != 0)
		return perror("thread"), 2;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return perror("seccomp"), 2;
	if (write(go_pipe[1], "g", 1) != 1)
		return 2;
	for (;;) {
		struct pollfd p = {s, POLLIN, 0};
		ssize_t r, i;
		if (poll(&p, 1, -1) < 0)
			return 2;
		r = read(s, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		for (i = 0; i < r; i++)
			if (buf[i] != pattern(got + (size_t)i))
				ok = 0;
		got += (size_t)r;
	}
	pthread_join(th, NULL);
	printf("received %zu bytes pattern %s\n", got, ok ? "ok" : "BAD");
	fflush(stdout);
	return ok && got == TOTAL ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof a;
	char cs[16], ss[16];
	int l, c, s;

	if (argc == 3)
		return sandboxed_run(atoi(argv[1]), atoi(argv[2]));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		return perror("listen"), 2;
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0)
		return perror("connect"), 2;
	s = accept(l, NULL, NULL);
	if (s < 0)
		return perror("accept"), 2;
	close(l);
	snprintf(cs, sizeof cs, "%d", c);
	snprintf(ss, sizeof ss, "%d", s);
	execl("/proc/self/exe", argv[0], cs, ss, (char *)NULL);
	perror("exec");
	return 2;
}
