//go:build osf_make

/* process.c: fork, vfork, daemon, the exec family and posix_spawn.
 *
 * fork: the child takes a private copy of the fd table and forgets the
 * parent's Go core (docs/DESIGN.md D1). vfork runs as fork, since a vfork child
 * would otherwise edit the parent's table. daemon is reimplemented on top
 * of our fork because glibc's calls its internal fork.
 * exec: when the process holds offloaded fds the new image inherits, the
 * environment handed to exec gets LD_PRELOAD and osf's state back (nginx
 * workers, for one, run with an empty environment). A program that will
 * run without osf (set-user-ID and the like) gets reset sockets in their
 * place instead of connections it cannot use (osf_conn_exec_unfollowable).
 */
#include "conn.h"
#include "kfd.h"
#include "setup.h"

#include <fcntl.h>
#include <paths.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

extern char **environ;

int osf_thread_start(void *(*fn)(void *), const char *name)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, fn, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		pthread_setname_np(t, name);
	return rc;
}

/* glibc's file action (spawn_int.h, the same since 2.2): a tag, then
 * the action's operands; close's is an int, dup2's two. */
struct glibc_spawn_action {
	int tag; /* 0: close, 1: dup2 */
	union {
		struct {
			int fd;
		} close;
		struct {
			int fd, newfd;
		} dup2;
		struct {
			int fd;
			char *path;
			int oflag;
			mode_t mode;
		} open;
	} u;
};

/* spawn_actions puts fa's actions in *a and their count in *n: 0, or -1
 * when fa cannot be read as glibc's (fa not NULL). */
static int spawn_actions(const posix_spawn_file_actions_t *fa,
			 const struct glibc_spawn_action **a, int *n)
{
	*a = (const struct glibc_spawn_action *)(const void *)fa->__actions;
	if (fa->__used < 0 || fa->__used > fa->__allocated || (fa->__used && !*a))
		return -1;
	*n = fa->__used;
	return 0;
}

/* spawn_closes reports whether file actions fa close fd in the spawned
 * image and copy it nowhere first: that image never holds it. */
static int spawn_closes(const posix_spawn_file_actions_t *fa, int fd)
{
	const struct glibc_spawn_action *a;
	int n = 0, i;

	if (!fa || spawn_actions(fa, &a, &n) < 0)
		return 0;
	for (i = 0; i < n; i++) {
		if (a[i].tag == 1 && a[i].u.dup2.fd == fd)
			return 0;
		if (a[i].tag == 0 && a[i].u.close.fd == fd)
			return 1;
	}
	return 0;
}

/* share_listeners marks the listeners a fork child will hold too: all of
 * them. TCP_DEFER_ACCEPT then parks nothing in this process's park, which
 * only it could take from. */
OSF_FORK_TEXT static void share_listeners(void)
{
	struct osf_fdt_entry *e;
	int fd;

	OSF_FDT_FOREACH(fd, e) {
		if (e->kind == OSF_FD_LISTEN)
			__atomic_or_fetch(&e->flags, OSF_FDF_SHARED, __ATOMIC_RELAXED);
	}
}

/* share_listeners_exec is share_listeners for an exec'd image: spawn, the
 * inheritable listeners that file actions fa do not close; else all. An
 * OSF_SHM_KFD listener another image shares gets a hello store that
 * crosses the exec (setup_fam.c, as at fork); one that has none is marked
 * OSF_FDF_EXECSHARED (its first accept shuts its companion). */
static void share_listeners_exec(int spawn, const posix_spawn_file_actions_t *fa)
{
	struct osf_fdt_entry *e;
	int fd;

	OSF_FDT_FOREACH(fd, e) {
		if (e->kind != OSF_FD_LISTEN || (spawn && (e->flags & OSF_FDF_CLOEXEC)) ||
		    (spawn && spawn_closes(fa, fd)))
			continue;
		__atomic_or_fetch(&e->flags,
				  OSF_FDF_SHARED | (osf_setup_kfd_store(fd) ? 0 : OSF_FDF_EXECSHARED),
				  __ATOMIC_RELAXED);
	}
}

/* The after-fork entries every file registers (OSF_AFTER_FORK, fdt.h),
 * gathered by the linker. */
extern const struct osf_after_fork __start_osf_after_fork[]
	__attribute__((visibility("hidden")));
extern const struct osf_after_fork __stop_osf_after_fork[]
	__attribute__((visibility("hidden")));

/* after_fork runs the entries of stage (OSF_FORK_*). */
OSF_FORK_TEXT static void after_fork(long stage)
{
	const struct osf_after_fork *h;

	for (h = __start_osf_after_fork; h < __stop_osf_after_fork; h++)
		if (h->stage == stage)
			h->fn();
}

OSF_FORK_TEXT OSF_EXPORT pid_t fork(void)
{
	pid_t pid;
	int snap, saved, used;

	if (!__atomic_load_n(&osf.ready, __ATOMIC_ACQUIRE))
		return REAL(fork)();
	/* Limit lock first, as a connect's or accept's fd window takes it
	 * before the table lock (osf_fdt_high_begin, then osf_fdt_hide):
	 * the other order deadlocks a fork against a connect in another
	 * thread. */
	osf_conn_hello_flush(); /* a child may write them: their servers first */
	osf_setup_kfd_fork_prepare(); /* before the locks: it takes the table's */
	osf_fdt_limit_lock(); /* no child inherits a raised RLIMIT_NOFILE */
	osf_fdt_lock(); /* the snapshot is the table at fork */
	/* Every socket osf takes part in has an entry, so a process without
	 * a table (created under this lock) has no connection, listener,
	 * epoll, park, spare or set-up state to clean up in the child; nor
	 * a core, unless it loaded one for something else (a log line). The
	 * child then skips those clean-ups: each reads state on pages of its
	 * own, and a fork child's first touch of a page is a page fault. */
	used = osf_fdt_table_fd() >= 0 || osf_core_touched();
	if (!osf.fl_shared) /* before: the child has it without a write, and */
		osf.fl_shared = 1; /* once: a write per fork is a page fault after it */
	share_listeners();
	snap = osf_fdt_fork_prepare();
	osf_conn_fork_holders(1);
	pid = REAL(fork)();
	if (pid == 0) {
		osf_fdt_child_after_fork(snap);
		if (used) {
			after_fork(OSF_FORK_RESET);
			after_fork(OSF_FORK_RELEASE);
		}
		return 0;
	}
	saved = errno;
	if (pid < 0)
		osf_conn_fork_holders(-1);
	else
		after_fork(OSF_FORK_PARENT);
	osf_fdt_fork_parent(snap);
	osf_fdt_unlock();
	osf_fdt_limit_unlock();
	/* Nothing else the parent runs after the fork writes errno's page
	 * (the thread's TLS, shared with the child until written): putting
	 * back the value it still holds would be a page fault. */
	if (errno != saved)
		errno = saved;
	return pid;
}

OSF_EXPORT pid_t vfork(void) { return fork(); }

/* daemon follows glibc's implementation, with our fork and dup2. */
OSF_EXPORT int daemon(int nochdir, int noclose)
{
	struct stat st;
	int fd;

	switch (fork()) {
	case -1:
		return -1;
	case 0:
		break;
	default:
		_exit(0);
	}
	if (setsid() == -1)
		return -1;
	if (!nochdir)
		(void)!chdir("/");
	if (noclose)
		return 0;
	fd = open(_PATH_DEVNULL, O_RDWR, 0);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		REAL(close)(fd);
		return OSF_FAIL(e);
	}
	if (!S_ISCHR(st.st_mode) || st.st_rdev != makedev(1, 3)) {
		REAL(close)(fd);
		return OSF_FAIL(ENODEV);
	}
	(void)dup2(fd, STDIN_FILENO);
	(void)dup2(fd, STDOUT_FILENO);
	(void)dup2(fd, STDERR_FILENO);
	if (fd > 2)
		REAL(close)(fd);
	return 0;
}

static int is_var(const char *s, const char *name)
{
	size_t n = strlen(name);

	return strncmp(s, name, n) == 0 && s[n] == '=';
}

/* with_lib returns the LD_PRELOAD value to use: old with osf's library
 * added in front unless it is already there. */
static void with_lib(char *buf, size_t n, const char *old)
{
	if (old && strstr(old, osf.lib_path))
		snprintf(buf, n, "LD_PRELOAD=%s", old);
	else if (old && *old)
		snprintf(buf, n, "LD_PRELOAD=%s %s", osf.lib_path, old);
	else
		snprintf(buf, n, "LD_PRELOAD=%s", osf.lib_path);
}

/* exec_env is osf_exec_env; force injects even when no offloaded fd is
 * inheritable as the table says (posix_spawn file actions); table is the
 * table fd to name, -1 for this process's own. */
static char **exec_env(char *const envp[], int force, int table)
{
	size_t count = 0, i, k = 0, bytes;
	const char *old_preload = NULL;
	char **out, *p, *region;
	const char *s;
	int tfd;

	if (!force && !osf_fdt_inheritable())
		return (char **)envp;
	tfd = table >= 0 ? table : osf_fdt_table_fd();
	for (i = 0; envp && envp[i]; i++) {
		count++;
		if (is_var(envp[i], "LD_PRELOAD"))
			old_preload = envp[i] + 11;
	}
	bytes = (count + 4 + osf.env_len / 2) * sizeof(char *) + osf.env_len +
		sizeof(osf.lib_path) + (old_preload ? strlen(old_preload) : 0) +
		128;
	bytes += 16; /* the size, for osf_exec_env_free */
	region = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED)
		return (char **)envp;
	*(size_t *)region = bytes;
	out = (char **)(region + 16);
	p = (char *)(out + count + 4 + osf.env_len / 2);
	for (i = 0; envp && envp[i]; i++)
		if (!is_var(envp[i], "LD_PRELOAD") &&
		    strncmp(envp[i], "OSF_", 4) != 0)
			out[k++] = envp[i];
	for (s = osf.env; s < osf.env + osf.env_user_len; s += strlen(s) + 1)
		out[k++] = (char *)s;
	out[k++] = p;
	with_lib(p, sizeof(osf.lib_path) + 128 +
			    (old_preload ? strlen(old_preload) : 0),
		 old_preload);
	p += strlen(p) + 1;
	out[k++] = p;
	sprintf(p, "OSF_FDTABLE=%d", tfd);
	out[k] = NULL;
	return out;
}

char **osf_exec_env(char *const envp[]) { return exec_env(envp, 0, -1); }

#define SPAWN_DUP2_MAX 64

/* spawn_holders counts (delta 1) or uncounts (-1, the spawn failed) a
 * posix_spawn child as a holder of the connections it may get
 * (osf_conn_spawn_holders): without close-on-exec, or the source of one
 * of fa's dup2 actions (which clears it in the child); all of them when
 * fa cannot be read as glibc's. */
static void spawn_holders(const posix_spawn_file_actions_t *fa, int delta)
{
	int fds[SPAWN_DUP2_MAX], n = 0, i, used = 0;
	const struct glibc_spawn_action *a;

	if (!fa) {
		osf_conn_spawn_holders(NULL, 0, 0, delta);
		return;
	}
	if (spawn_actions(fa, &a, &used) < 0) {
		osf_conn_spawn_holders(NULL, 0, 1, delta);
		return;
	}
	for (i = 0; i < used; i++) {
		if (a[i].tag != 1)
			continue;
		if (n == SPAWN_DUP2_MAX) {
			osf_conn_spawn_holders(NULL, 0, 1, delta);
			return;
		}
		fds[n++] = a[i].u.dup2.fd;
	}
	osf_conn_spawn_holders(fds, n, 0, delta);
}

/* spawn_env prepares a posix_spawn in a process that holds offloaded fds:
 * the spawned image gets a snapshot of the table (this process goes on
 * changing its own right after the spawn returns) and, with file actions
 * that may move fds where no hook sees it, every hidden fd; the child is
 * counted a holder of what it may inherit (*counted: for spawn_done to
 * undo when the spawn fails). *snap is the snapshot's fd, for spawn_done. */
static char **spawn_env(const posix_spawn_file_actions_t *fa,
			char *const envp[], int *snap, int *counted)
{
	int force = fa != NULL && osf_fdt_offloaded();

	*snap = -1;
	*counted = 0;
	if (!force && !osf_fdt_inheritable())
		return (char **)envp;
	share_listeners_exec(1, fa);
	spawn_holders(fa, 1);
	*counted = 1;
	*snap = osf_fdt_spawn_snapshot();
	if (*snap < 0)
		return exec_env(envp, force, -1);
	osf_fdt_spawn_inherit(1);
	return exec_env(envp, 1, *snap);
}

/* child_image_begins is the start of every way a new image shares this
 * process's files (a spawn, system, popen): what was left inheritable for
 * no entry is made close-on-exec first (osf_fdt_settle), and the sockets'
 * file status flags may be changed by that other process from now on
 * (osf.fl_shared: connect asks the kernel for them). */
static void child_image_begins(void)
{
	osf_exec_settle();
	osf.fl_shared = 1;
}

void osf_exec_settle(void)
{
	osf_conn_hello_flush(); /* the new image may write them: their servers first */
	osf_fdt_settle();
}

int osf_spawn_begin(void)
{
	int snap;

	child_image_begins();
	if (!osf_fdt_offloaded())
		return -1;
	share_listeners_exec(0, NULL);
	/* os/exec's child dup2s what it passes in raw system calls: any */
	osf_conn_spawn_holders(NULL, 0, 1, 1);
	snap = osf_fdt_spawn_snapshot();
	if (snap >= 0)
		osf_fdt_spawn_inherit(1);
	return snap;
}

void osf_spawn_end(int snap)
{
	if (snap < 0)
		return;
	osf_fdt_spawn_inherit(0);
	REAL(close)(snap);
}

static void spawn_done(char **env, char *const envp[], int snap,
		       const posix_spawn_file_actions_t *fa, int failed)
{
	int saved = errno;

	if (failed)
		spawn_holders(fa, -1);

	if (snap >= 0) {
		osf_fdt_spawn_inherit(0);
		REAL(close)(snap);
	}
	osf_exec_env_free(env, envp);
	errno = saved;
}

void osf_exec_env_free(char **env, char *const envp[])
{
	int saved = errno;
	char *region = (char *)env - 16;

	if (env == (char **)envp)
		return;
	munmap(region, *(size_t *)region);
	errno = saved;
}

/* unfollowable reports whether exec of the file at dirfd/path (flags as
 * execveat's) starts a program that runs without osf: set-user-ID or
 * set-group-ID that changes the effective id, or with file capabilities
 * (the loader then ignores LD_PRELOAD with a path). */
static int unfollowable(int dirfd, const char *path, int flags)
{
	struct stat st;
	int fd, caps;

	if (fstatat(dirfd, path, &st, flags & (AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) < 0 ||
	    !S_ISREG(st.st_mode))
		return 0; /* the exec fails, or it is not ours to judge */
	if (((st.st_mode & S_ISUID) && st.st_uid != geteuid()) ||
	    ((st.st_mode & S_ISGID) && st.st_gid != getegid()))
		return 1;
	fd = (flags & AT_EMPTY_PATH) && !*path ? REAL(fcntl)(dirfd, F_DUPFD_CLOEXEC, (void *)0)
						 : openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	caps = fgetxattr(fd, "security.capability", NULL, 0) > 0;
	REAL(close)(fd);
	return caps;
}

/* unfollowable_file is unfollowable for execvp's PATH search. */
static int unfollowable_file(const char *file)
{
	const char *p = getenv("PATH"), *q;
	char buf[4096];

	if (strchr(file, '/'))
		return unfollowable(AT_FDCWD, file, 0);
	for (p = p ? p : "/bin:/usr/bin"; *p; p = *q ? q + 1 : q) {
		size_t n;
		q = strchrnul(p, ':');
		n = (size_t)(q - p);
		if (snprintf(buf, sizeof(buf), "%.*s%s%s", (int)n, p, n ? "/" : "", file) >=
		    (int)sizeof(buf))
			continue;
		if (access(buf, X_OK) == 0)
			return unfollowable(AT_FDCWD, buf, 0);
	}
	return 0;
}

/* guard prepares an exec that osf cannot follow (judge: 1) while this
 * process holds inheritable offloaded connections: see
 * osf_conn_exec_unfollowable. */
static void guard(int judge, struct osf_exec_undo *u)
{
	u->n = 0;
	if (judge) {
		osf_conn_exec_unfollowable(u);
		osf_kfd_shut_foreign(0);
	}
}

/* unguard undoes guard after an exec that failed. */
static void unguard(struct osf_exec_undo *u)
{
	if (u->n)
		osf_conn_exec_failed(u);
}

#define HOLDS_CONNS() (osf_fdt_inheritable() && osf_fdt_offloaded())

/* HELD runs an exec or spawn with the RLIMIT_NOFILE lock held, so that the
 * new image never inherits the limit raised for another thread's window
 * (fdtable/fdwindow.c). Each exec and spawn first makes close-on-exec
 * what was left inheritable for no entry (osf_fdt_settle; not under the
 * lock, which the table's lock is never taken under; a spawn before
 * spawn_env makes every hidden fd inheritable for it). */
#define HELD(call)                                                             \
	({                                                                     \
		osf_fdt_limit_lock();                                          \
		int held_r_ = (call);                                          \
		osf_fdt_limit_unlock();                                        \
		held_r_;                                                       \
	})

/* unfollowable_path is unfollowable for execve's path. */
static int unfollowable_path(const char *path)
{
	return unfollowable(AT_FDCWD, path, 0);
}

/* exec_held runs real (libc's execve or execvpe) on path with osf's
 * environment added to envp, guarded when this process holds connections
 * and unfollow says the new image will not run osf. */
static int exec_held(int (*real)(const char *, char *const[], char *const[]),
		     int (*unfollow)(const char *), const char *path,
		     char *const argv[], char *const envp[])
{
	struct osf_exec_undo u;
	char **env;
	int r;

	osf_exec_settle();
	env = osf_exec_env(envp);
	guard(HOLDS_CONNS() && unfollow(path), &u);
	osf_setup_kfd_exec_inherit(1);
	r = HELD(real(path, argv, env));
	osf_setup_kfd_exec_inherit(0);
	unguard(&u);
	osf_exec_env_free(env, envp);
	return r;
}

OSF_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	return exec_held(REAL(execve), unfollowable_path, path, argv, envp);
}

OSF_EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

OSF_EXPORT int execvpe(const char *file, char *const argv[],
		       char *const envp[])
{
	return exec_held(REAL(execvpe), unfollowable_file, file, argv, envp);
}

OSF_EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

OSF_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	struct osf_exec_undo u;
	char **env;
	int r;

	osf_exec_settle();
	env = osf_exec_env(envp);
	guard(HOLDS_CONNS() && unfollowable(fd, "", AT_EMPTY_PATH), &u);
	osf_setup_kfd_exec_inherit(1);
	r = HELD(REAL(fexecve)(fd, argv, env));
	osf_setup_kfd_exec_inherit(0);
	unguard(&u);
	osf_exec_env_free(env, envp);
	return r;
}

OSF_EXPORT int execveat(int dirfd, const char *path, char *const argv[],
			char *const envp[], int flags)
{
	struct osf_exec_undo u;
	char **env;
	int r;

	osf_exec_settle();
	env = osf_exec_env(envp);
	guard(HOLDS_CONNS() && unfollowable(dirfd, path, flags), &u);
	osf_setup_kfd_exec_inherit(1);
	r = HELD(REAL(execveat)(dirfd, path, argv, env, flags));
	osf_setup_kfd_exec_inherit(0);
	unguard(&u);
	osf_exec_env_free(env, envp);
	return r;
}

/* VARARGS collects execl-style arguments into a NULL-terminated array on
 * the stack, as glibc does; envp (execle) follows the NULL. */
#define VARARGS(arg0, argv, envp_out)                                          \
	do {                                                                   \
		va_list ap;                                                    \
		size_t n = 1, i;                                               \
		va_start(ap, arg0);                                            \
		while (va_arg(ap, const char *))                               \
			n++;                                                   \
		va_end(ap);                                                    \
		argv = __builtin_alloca((n + 1) * sizeof(char *));             \
		argv[0] = (char *)arg0;                                        \
		va_start(ap, arg0);                                            \
		for (i = 1; i <= n; i++)                                       \
			argv[i] = va_arg(ap, char *);                          \
		envp_out = va_arg(ap, char **);                                \
		va_end(ap);                                                    \
	} while (0)

OSF_EXPORT int execl(const char *path, const char *arg0, ...)
{
	char **argv, **unused;

	VARARGS(arg0, argv, unused);
	(void)unused;
	return execve(path, argv, environ);
}

OSF_EXPORT int execle(const char *path, const char *arg0, ...)
{
	char **argv, **envp;

	VARARGS(arg0, argv, envp);
	return execve(path, argv, envp);
}

OSF_EXPORT int execlp(const char *file, const char *arg0, ...)
{
	char **argv, **unused;

	VARARGS(arg0, argv, unused);
	(void)unused;
	return execvpe(file, argv, environ);
}

/* A spawned program osf cannot follow gets, by file actions, a reset
 * socket on each inheritable connection fd (osf_conn_spawn_unfollowable);
 * this process keeps its connections. Only when the caller passed no file
 * actions of its own (they cannot be copied): see README, Known limits. */
struct spawn_guard {
	posix_spawn_file_actions_t fa;
	int on, dead[OSF_EXEC_UNDO_MAX], n;
};

static const posix_spawn_file_actions_t *
spawn_guard(int judge, const posix_spawn_file_actions_t *fa, struct spawn_guard *g)
{
	g->on = 0;
	g->n = 0;
	if (fa || !judge || posix_spawn_file_actions_init(&g->fa) != 0)
		return fa;
	g->on = 1;
	g->n = osf_conn_spawn_unfollowable(&g->fa, g->dead, OSF_EXEC_UNDO_MAX);
	return &g->fa;
}

static void spawn_unguard(struct spawn_guard *g)
{
	int i, saved = errno;

	for (i = 0; i < g->n; i++)
		REAL(close)(g->dead[i]);
	if (g->on)
		posix_spawn_file_actions_destroy(&g->fa);
	errno = saved;
}

/* spawn_held runs real (libc's posix_spawn or posix_spawnp) on path with
 * osf's environment, guarded as exec_held's exec is. */
static int spawn_held(int (*real)(pid_t *, const char *,
				  const posix_spawn_file_actions_t *,
				  const posix_spawnattr_t *, char *const[],
				  char *const[]),
		      int (*unfollow)(const char *), pid_t *pid,
		      const char *path, const posix_spawn_file_actions_t *fa,
		      const posix_spawnattr_t *attr, char *const argv[],
		      char *const envp[])
{
	struct spawn_guard g;
	int snap, counted, r, foreign;
	char **env;

	child_image_begins();
	foreign = HOLDS_CONNS() && unfollow(path);
	if (foreign)
		osf_kfd_shut_foreign(fa != NULL);
	fa = spawn_guard(foreign, fa, &g);
	env = spawn_env(fa, envp, &snap, &counted);
	r = HELD(real(pid, path, fa, attr, argv, env));
	spawn_done(env, envp, snap, fa, counted && r != 0);
	spawn_unguard(&g);
	return r;
}

/* system and popen exec inside glibc (its own posix_spawn, which no hook
 * sees); what must cross is inheritable already (fdtable/fdtable.c,
 * account). */
OSF_EXPORT int system(const char *cmd)
{
	child_image_begins();
	return REAL(system)(cmd);
}

OSF_EXPORT FILE *popen(const char *cmd, const char *type)
{
	child_image_begins();
	return REAL(popen)(cmd, type);
}

OSF_EXPORT int posix_spawn(pid_t *pid, const char *path,
			   const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const argv[],
			   char *const envp[])
{
	return spawn_held(REAL(posix_spawn), unfollowable_path, pid, path, fa,
			  attr, argv, envp);
}

OSF_EXPORT int posix_spawnp(pid_t *pid, const char *file,
			    const posix_spawn_file_actions_t *fa,
			    const posix_spawnattr_t *attr, char *const argv[],
			    char *const envp[])
{
	return spawn_held(REAL(posix_spawnp), unfollowable_file, pid, file, fa,
			  attr, argv, envp);
}
