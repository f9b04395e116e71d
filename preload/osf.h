/* osf.h: internals of libosf.so, the LD_PRELOAD library (C, see
 * DESIGN.md D1). Not installed; the public API is include/osf/qsock.h. */
#ifndef OSF_PRELOAD_OSF_H
#define OSF_PRELOAD_OSF_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "../fdtable/fdt.h"
#include "core_api.h"

#define OSF_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* OSF_FAIL sets errno and evaluates to -1: `return OSF_FAIL(EBADF);`. */
#define OSF_FAIL(e) (errno = (e), -1)

/* The real libc functions, resolved lazily (once each) with
 * dlsym(RTLD_NEXT) or dlvsym where glibc has several versions. */
struct osf_real {
	int (*socket)(int, int, int);
	int (*socketpair)(int, int, int, int[2]);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int,
			  const struct sockaddr *, socklen_t);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned int, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *,
			    socklen_t *);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned int, int,
			struct timespec *);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*sendfile64)(int, int, off64_t *, size_t);
	int (*close)(int);
	int (*close_range)(unsigned int, unsigned int, int);
	void (*closefrom)(int);
	int (*shutdown)(int, int);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	int (*fcntl64)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *,
		     const sigset_t *);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *,
		       const struct timespec *, const sigset_t *);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int,
			   const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int,
			    const struct timespec *, const sigset_t *);
	pid_t (*fork)(void);
	int (*execve)(const char *, char *const[], char *const[]);
	int (*execvpe)(const char *, char *const[], char *const[]);
	int (*fexecve)(int, char *const[], char *const[]);
	int (*execveat)(int, const char *, char *const[], char *const[], int);
	int (*posix_spawn)(pid_t *, const char *,
			   const posix_spawn_file_actions_t *,
			   const posix_spawnattr_t *, char *const[],
			   char *const[]);
	int (*posix_spawnp)(pid_t *, const char *,
			    const posix_spawn_file_actions_t *,
			    const posix_spawnattr_t *, char *const[],
			    char *const[]);
	int (*sigaction)(int, const struct sigaction *, struct sigaction *);
	sighandler_t (*signal)(int, sighandler_t);
	ssize_t (*__read_chk)(int, void *, size_t, size_t);
	ssize_t (*__recv_chk)(int, void *, size_t, size_t, int);
	ssize_t (*__recvfrom_chk)(int, void *, size_t, size_t, int,
				  struct sockaddr *, socklen_t *);
	int (*__poll_chk)(struct pollfd *, nfds_t, int, size_t);
	int (*__ppoll_chk)(struct pollfd *, nfds_t, const struct timespec *,
			   const sigset_t *, size_t);
};

extern struct osf_real osf_real;

/* osf_resolve returns the next definition of name after libosf.so (the
 * default version, or `version` when given); it aborts with a message if
 * libc lacks it, since no sensible fallback exists. */
void *osf_resolve(const char *name, const char *version);

#define OSF_REAL_V(f, ver)                                                     \
	({                                                                     \
		__typeof__(osf_real.f) f_ = osf_real.f;                        \
		if (unlikely(f_ == NULL))                                      \
			f_ = osf_real.f =                                      \
				(__typeof__(osf_real.f))osf_resolve(#f, ver);  \
		f_;                                                            \
	})
/* REAL(read) is libc's read. */
#define REAL(f) OSF_REAL_V(f, NULL)

/* Process-wide state captured by the constructor before main. */
#define OSF_ENV_MAX 16384
struct osf_state {
	int ready;         /* constructor done: hooks may track fds */
	int disabled;      /* malformed configuration: pass-through */
	pid_t pid;         /* getpid() of this process (updated in fork) */
	uint64_t image;    /* random id of this process image */
	unsigned spin_us;  /* OSF_SPIN_US */
	unsigned poll_spin_us;
	int debug_load_core;
	char lib_path[4096];
	char prog[256];
	uint32_t env_len;
	char env[OSF_ENV_MAX]; /* "OSF_X=v\0..." snapshot */
	char fdtable_env[32];  /* OSF_FDTABLE as found at start-up */
};

extern struct osf_state osf;

/* osf_report prints "osf: <msg>" on stderr with one write; it is for
 * errors the user must see (the Go core logs everything else). */
void osf_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* osf_env returns the snapshot value of an OSF_* variable, or NULL. */
const char *osf_env(const char *name);

/* osf_parse_uint parses a data-path tunable exactly as the Go core's
 * policy package does: decimal digits only, no sign or space, within
 * [lo, hi]; 0 or -1. */
int osf_parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out);

/* Core (Go) access, preload/core.c. */

/* osf_core_ready reports whether this process has a usable core now,
 * loading it (a fresh copy in a fork child) on first use. It returns 0
 * when the core cannot be had: osf then acts as pass-through. */
int osf_core_ready(void);

/* osf_core_route asks the core for a route decision; 0 or an errno. */
int osf_core_route(const struct osf_core_route_in *in,
		   struct osf_core_route_out *out);

/* osf_core_listen, osf_core_connect and osf_core_accept run the core's
 * connection management (core_api.h); 0 or an errno when the core is
 * unavailable. */
int osf_core_listen(const struct osf_core_listen_in *in,
		    struct osf_core_listen_out *out);
int osf_core_connect(const struct osf_core_connect_in *in,
		     struct osf_core_conn *out);
int osf_core_accept(const struct osf_core_accept_in *in,
		    struct osf_core_conn *out);

/* osf_restartable reports whether every signal handler installed has
 * SA_RESTART: then a poll osf uses in place of a restartable call (accept)
 * is restarted after a signal, as the kernel would restart that call. */
int osf_restartable(void);

/* osf_core_child_after_fork forgets the parent's core in a fork child:
 * it is never called again here (DESIGN.md D1), and the signal handlers
 * it installed are put back to what they were before it loaded. */
void osf_core_child_after_fork(void);

/* osf_core_owns reports whether addr lies in the loaded Go core (a
 * handler it installed, or the return address of a call it made). */
int osf_core_owns(const void *addr);

/* osf_core_note_prior records the disposition the Go runtime is about to
 * replace for sig, so that the load puts back exactly that one. */
void osf_core_note_prior(int sig);

/* osf_core_config returns the configuration the core reported. */
const struct osf_core_init_out *osf_core_config(void);

/* Socket tracking, preload/sockets.c. */

/* osf_track_inet records a new AF_INET/AF_INET6 stream socket. */
void osf_track_inet(int fd, int domain, int type);

/* osf_fd_closed forgets fd and releases what osf held for it. */
void osf_fd_closed(int fd);

/* osf_fd_dup mirrors a successful dup of oldfd onto newfd. */
void osf_fd_dup(int oldfd, int newfd, int cloexec);

/* osf_mux_closed (selectmux/) releases what osf keeps for a listener or
 * an epoll instance being closed; shared says another fd (a dup) still
 * uses its hidden fd. */
void osf_mux_closed(int fd, struct osf_fdt_entry *e, int shared);

/* osf_mux_forget drops a connection or undecided socket being closed from
 * this process's epolls; osf_mux_offloaded redoes the epoll registrations
 * of a socket that just became offloaded (or an offloaded listener). */
void osf_mux_forget(int fd);
void osf_mux_offloaded(int fd);
void osf_mux_child_after_fork(void);

/* osf_stdio_take replaces the standard stream of fd (0, 1 or 2) with one
 * that reads and writes through osf's hooks, when it is still glibc's own
 * (preload/stdio.c). Called when an offloaded connection is or becomes
 * that fd. */
void osf_stdio_take(int fd);

/* Exec environment, preload/process.c. */

/* osf_exec_env returns the environment to exec with: envp itself, or a
 * copy with LD_PRELOAD and osf's state re-injected when this process
 * holds offloaded fds that the new image inherits. A returned copy lives
 * in memory from mmap and is released by osf_exec_env_free. */
char **osf_exec_env(char *const envp[]);
void osf_exec_env_free(char **env, char *const envp[]);

#endif
