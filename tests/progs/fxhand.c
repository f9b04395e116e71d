//go:build osf_make

/* fxhand: an inetd-style server that hands each accepted TCP connection to
 * another program, in one of the ways real servers do it.
 *
 *   fxhand MODE PORT N [PROG [ARG...]]
 *
 * It listens on 127.0.0.1:PORT (SO_REUSEADDR), or with PORT "fd:K" takes
 * the listener it inherited at fd K, prints "listening", then accepts N
 * connections one after the other. For each it prints
 * "conn I fd FD" and hands the connection over as MODE says:
 *
 *   fork          fork; the child dup2s the connection onto 0 and 1, closes
 *                 the original and the listener, and execvp's PROG
 *   vfork         the same with a real vfork and execve (PATH searched here)
 *   spawn         posix_spawnp with file actions: dup2 onto 0 and 1, close
 *                 the original and the listener; the parent closes its copy
 *                 as soon as posix_spawnp returns
 *   closerange    fork; the child dup2s onto 0 and 1, then
 *                 close_range(3, ~0U, 0) and execvp
 *   closerange-cloexec  the same with close_range(3, ~0U, CLOSE_RANGE_CLOEXEC)
 *   closefrom     the same with closefrom(3)
 *   envi          fork, dup2 onto 0 and 1, then exec
 *                 `env -i [LD_PRELOAD=$LD_PRELOAD] PROG ARG...`
 *   rawexec       fork, dup2 onto 0 and 1, then the execve system call itself
 *                 (no libc wrapper, so no hook sees it) with an environment
 *                 of only LD_PRELOAD=$LD_PRELOAD (empty bare); PROG must be
 *                 an absolute path
 *   daemon        daemon(1, 1) with the connection open; the daemon writes
 *                 its pid to the file PROG and echoes the connection
 *                 (read, write back) until end of file, then accepts the
 *                 other N-1 connections and echoes each the same way (so a
 *                 daemon child accepts for itself too)
 *   hold          fork; the child execs PROG ARG... with the connection
 *                 left where it is (not on 0 or 1, not close-on-exec): the
 *                 program holds it without knowing
 *   hold-cloexec  the same with the connection made close-on-exec first:
 *                 the program must not hold it
 *   system        (soft RLIMIT_NOFILE 1024 first, below the hard limit)
 *                 fork; the child runs system("exec PROG ARG... <&C >&C
 *                 C<&-"): glibc's own spawn of sh, which osf's hooks do
 *                 not see, then sh's exec
 *   activate      accept nothing: put the listener on fd 3 and exec
 *                 PROG ARG... (socket activation: the program accepts on
 *                 the listener it inherited); N must be 0
 *
 * After handing over a connection the parent prints "child I PID" and
 * closes its copy. When all N are handed over it waits for the children,
 * prints "reaped PID status S" for each (S: the exit status, or 128+signal)
 * and exits 0 if every child exited 0. In daemon mode the original process
 * exits inside daemon() and the daemon exits 0 after the last connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void die(const char *what)
{
	fprintf(stderr, "fxhand: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* child_die reports a failure in a child before exec and exits without
 * running the parent's atexit handlers or flushing its stdio. */
static void child_die(const char *what)
{
	char buf[256];
	int n = snprintf(buf, sizeof buf, "fxhand child: %s: %s\n", what,
			 strerror(errno));

	if (write(2, buf, (size_t)n) < 0)
		_exit(126);
	_exit(127);
}

/* find_path resolves file through PATH, as execvp would, into buf. */
static const char *find_path(const char *file, char *buf, size_t n)
{
	const char *path = getenv("PATH"), *p;

	if (strchr(file, '/'))
		return file;
	if (!path)
		path = "/usr/bin:/bin";
	for (p = path; *p;) {
		const char *end = strchrnul(p, ':');
		snprintf(buf, n, "%.*s/%s", (int)(end - p), p, file);
		if (access(buf, X_OK) == 0)
			return buf;
		p = *end ? end + 1 : end;
	}
	return file;
}

/* onto01 puts the connection on fds 0 and 1 and closes the original. */
static void onto01(int c)
{
	if (dup2(c, 0) < 0 || dup2(c, 1) < 0)
		child_die("dup2");
	if (c > 1 && close(c) < 0)
		child_die("close");
}

/* vfork_exec runs path in a vfork child with c on 0 and 1; the child
 * touches nothing but its fds before execve. */
static __attribute__((noinline)) pid_t vfork_exec(const char *path,
						    char **pargv, int c, int l)
{
	pid_t pid = vfork();

	if (pid == 0) {
		if (dup2(c, 0) < 0 || dup2(c, 1) < 0)
			_exit(127);
		close(c);
		close(l);
		execve(path, pargv, environ);
		_exit(127);
	}
	return pid;
}

static void echo(int c)
{
	char buf[65536];
	ssize_t r;

	for (;;) {
		r = read(c, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("daemon read");
		if (r == 0)
			return;
		for (ssize_t off = 0; off < r;) {
			ssize_t w = write(c, buf + off, (size_t)(r - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				die("daemon write");
			off += w;
		}
	}
}

static void run_daemon(int l, int c, int n, const char *pidfile)
{
	FILE *f;

	if (daemon(1, 1) < 0)
		die("daemon");
	/* The daemon: a new session, its parent gone. */
	f = fopen(pidfile, "w");
	if (!f)
		die(pidfile);
	fprintf(f, "%d\n", (int)getpid());
	if (fclose(f) != 0)
		die(pidfile);
	echo(c);
	close(c);
	for (int i = 1; i < n; i++) {
		c = accept(l, NULL, NULL);
		if (c < 0)
			die("daemon accept");
		echo(c);
		close(c);
	}
	exit(0);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	const char *mode, *prog, *lp = getenv("LD_PRELOAD");
	char **pargv, pathbuf[4096], lpvar[4096];
	pid_t *kids;
	int l, n, one = 1, failed = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: fxhand MODE PORT N [PROG [ARG...]]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	mode = argv[1];
	a.sin_port = htons((unsigned short)atoi(argv[2]));
	n = atoi(argv[3]);
	prog = argc > 4 ? argv[4] : "cat";
	pargv = argc > 4 ? &argv[4] : (char *[]){"cat", NULL};
	kids = calloc((size_t)n, sizeof(*kids));
	snprintf(lpvar, sizeof lpvar, "LD_PRELOAD=%s", lp ? lp : "");

	if (strcmp(mode, "system") == 0) {
		/* As a program that keeps select() usable does: a soft limit
		 * of 1024 below a higher hard one, so that osf's hidden fds
		 * (the fd table's among them) lie at and above 1024. */
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
			die("getrlimit");
		if (rl.rlim_max > 1024) {
			rl.rlim_cur = 1024;
			if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
				die("setrlimit");
		}
	}
	if (strncmp(argv[2], "fd:", 3) == 0) {
		l = atoi(argv[2] + 3);
	} else {
		l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 ||
		    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
		    bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 64) < 0)
			die("listen");
	}
	if (strcmp(mode, "activate") == 0) {
		if (l != 3 && (dup2(l, 3) < 0 || close(l) < 0))
			die("dup2");
		execvp(prog, pargv);
		die("exec");
	}
	printf("listening\n");

	for (int i = 0; i < n; i++) {
		pid_t pid = -1;
		int c = accept(l, NULL, NULL);

		if (c < 0)
			die("accept");
		printf("conn %d fd %d\n", i, c);
		if (strcmp(mode, "daemon") == 0) {
			run_daemon(l, c, n, prog); /* does not return */
		} else if (strcmp(mode, "spawn") == 0) {
			posix_spawn_file_actions_t fa;
			int e;
			posix_spawn_file_actions_init(&fa);
			posix_spawn_file_actions_adddup2(&fa, c, 0);
			posix_spawn_file_actions_adddup2(&fa, c, 1);
			posix_spawn_file_actions_addclose(&fa, c);
			posix_spawn_file_actions_addclose(&fa, l);
			e = posix_spawnp(&pid, prog, &fa, NULL, pargv, environ);
			close(c); /* at once: the child may not have run yet */
			posix_spawn_file_actions_destroy(&fa);
			if (e != 0) {
				errno = e;
				die("posix_spawnp");
			}
		} else if (strcmp(mode, "system") == 0) {
			char cmd[8192];
			size_t k = (size_t)snprintf(cmd, sizeof cmd, "exec");
			for (int j = 4; j < argc && k < sizeof cmd; j++)
				k += (size_t)snprintf(cmd + k, sizeof cmd - k, " %s", argv[j]);
			if (k < sizeof cmd)
				k += (size_t)snprintf(cmd + k, sizeof cmd - k, " <&%d >&%d %d<&-", c, c, c);
			if (k >= sizeof cmd)
				die("command too long");
			pid = fork();
			if (pid < 0)
				die("fork");
			if (pid == 0) {
				int st;
				close(l);
				st = system(cmd);
				_exit(st == 0 ? 0 : 1);
			}
			close(c);
		} else if (strcmp(mode, "vfork") == 0) {
			pid = vfork_exec(find_path(prog, pathbuf, sizeof pathbuf),
					 pargv, c, l);
			if (pid < 0)
				die("vfork");
			close(c);
		} else {
			if (strcmp(mode, "hold-cloexec") == 0 &&
			    fcntl(c, F_SETFD, FD_CLOEXEC) < 0)
				die("fcntl");
			pid = fork();
			if (pid < 0)
				die("fork");
			if (pid == 0) {
				if (strncmp(mode, "hold", 4) != 0)
					onto01(c);
				if (strcmp(mode, "fork") == 0) {
					close(l);
					execvp(prog, pargv);
				} else if (strcmp(mode, "hold") == 0 ||
					   strcmp(mode, "hold-cloexec") == 0) {
					close(l);
					execvp(prog, pargv);
				} else if (strcmp(mode, "closerange") == 0) {
					if (close_range(3, ~0U, 0) < 0)
						child_die("close_range");
					execvp(prog, pargv);
				} else if (strcmp(mode, "closerange-cloexec") == 0) {
					if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
						child_die("close_range");
					execvp(prog, pargv);
				} else if (strcmp(mode, "closefrom") == 0) {
					closefrom(3);
					execvp(prog, pargv);
				} else if (strcmp(mode, "envi") == 0) {
					char *ev[argc + 4];
					int k = 0;
					close(l);
					ev[k++] = "env";
					ev[k++] = "-i";
					if (lp)
						ev[k++] = lpvar;
					for (int j = 4; j < argc; j++)
						ev[k++] = argv[j];
					ev[k] = NULL;
					execv("/usr/bin/env", ev);
				} else if (strcmp(mode, "rawexec") == 0) {
					char *envp[] = {lpvar, NULL};
					close(l);
					syscall(SYS_execve, prog, pargv,
						lp ? envp : &envp[1]);
				} else {
					errno = EINVAL;
					child_die(mode);
				}
				child_die("exec");
			}
			close(c);
		}
		kids[i] = pid;
		printf("child %d %d\n", i, (int)pid);
	}
	close(l);
	for (int i = 0; i < n; i++) {
		int st, code;
		while (waitpid(kids[i], &st, 0) < 0)
			if (errno != EINTR)
				die("waitpid");
		code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		printf("reaped %d status %d\n", (int)kids[i], code);
		failed |= code != 0;
	}
	return failed;
}
