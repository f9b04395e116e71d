/* base.h: what every C file of preload/ needs: the real libc functions
 * (REAL), the library's C conventions (fdtable/cdefs.h: the errno macro,
 * OSF_RESET), and the process state the constructor captured. selectmux/
 * includes nothing of preload/: what it needs from here it declares itself
 * (selectmux/host.h, ready.h), and preload/ implements it. */
#ifndef OSF_PRELOAD_BASE_H
#define OSF_PRELOAD_BASE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "../fdtable/cdefs.h"
#include "../fdtable/fdt.h"
#include "../selectmux/host.h" /* osf_intr_count, the spin */

/* osf_now_ns is CLOCK_MONOTONIC in ns. */
static inline long long osf_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The real libc functions: X(return type, name, version, parameters,
 * arguments). Each pointer starts at a stub that resolves the function
 * once, with dlsym(RTLD_NEXT) or dlvsym where glibc has several versions,
 * and forwards the call; so REAL(f) is a plain load, and a hook's
 * pass-through is a table lookup and a tail jump. fcntl, fcntl64 and ioctl
 * are declared with three arguments: every command passes none, an int or
 * a pointer, in the register a variadic call uses too (x86-64); syscall
 * with its number and six arguments, which glibc's reads whatever the
 * caller passed. */
#define OSF_REAL_FUNCS(X)                                                      \
	X(int, socket, 0, (int a, int b, int c), (a, b, c))                   \
	X(int, socketpair, 0, (int a, int b, int c, int d[2]), (a, b, c, d))  \
	X(int, bind, 0, (int a, const struct sockaddr *b, socklen_t c),        \
	  (a, b, c))                                                           \
	X(int, listen, 0, (int a, int b), (a, b))                             \
	X(int, accept, 0, (int a, struct sockaddr *b, socklen_t *c), (a, b, c)) \
	X(int, accept4, 0, (int a, struct sockaddr *b, socklen_t *c, int d),   \
	  (a, b, c, d))                                                        \
	X(int, connect, 0, (int a, const struct sockaddr *b, socklen_t c),     \
	  (a, b, c))                                                           \
	X(ssize_t, read, 0, (int a, void *b, size_t c), (a, b, c))            \
	X(ssize_t, readv, 0, (int a, const struct iovec *b, int c), (a, b, c)) \
	X(ssize_t, write, 0, (int a, const void *b, size_t c), (a, b, c))     \
	X(ssize_t, writev, 0, (int a, const struct iovec *b, int c), (a, b, c)) \
	X(ssize_t, send, 0, (int a, const void *b, size_t c, int d),           \
	  (a, b, c, d))                                                        \
	X(ssize_t, sendto, 0,                                                  \
	  (int a, const void *b, size_t c, int d, const struct sockaddr *e,    \
	   socklen_t f),                                                       \
	  (a, b, c, d, e, f))                                                  \
	X(ssize_t, sendmsg, 0, (int a, const struct msghdr *b, int c),         \
	  (a, b, c))                                                           \
	X(int, sendmmsg, 0, (int a, struct mmsghdr *b, unsigned int c, int d), \
	  (a, b, c, d))                                                        \
	X(ssize_t, recv, 0, (int a, void *b, size_t c, int d), (a, b, c, d))  \
	X(ssize_t, recvfrom, 0,                                                \
	  (int a, void *b, size_t c, int d, struct sockaddr *e, socklen_t *f), \
	  (a, b, c, d, e, f))                                                  \
	X(ssize_t, recvmsg, 0, (int a, struct msghdr *b, int c), (a, b, c))   \
	X(int, recvmmsg, 0,                                                    \
	  (int a, struct mmsghdr *b, unsigned int c, int d, struct timespec *e), \
	  (a, b, c, d, e))                                                     \
	X(ssize_t, sendfile, 0, (int a, int b, off_t *c, size_t d), (a, b, c, d)) \
	X(ssize_t, sendfile64, 0, (int a, int b, off64_t *c, size_t d),        \
	  (a, b, c, d))                                                        \
	X(ssize_t, splice, 0,                                                  \
	  (int a, loff_t *b, int c, loff_t *d, size_t e, unsigned int f),      \
	  (a, b, c, d, e, f))                                                  \
	X(int, close, 0, (int a), (a))                                        \
	X(long, syscall, 0,                                                    \
	  (long a, long b, long c, long d, long e, long f, long g),            \
	  (a, b, c, d, e, f, g))                                               \
	X(int, close_range, 0, (unsigned int a, unsigned int b, int c),        \
	  (a, b, c))                                                           \
	X(int, shutdown, 0, (int a, int b), (a, b))                           \
	X(int, dup, 0, (int a), (a))                                          \
	X(int, dup2, 0, (int a, int b), (a, b))                               \
	X(int, dup3, 0, (int a, int b, int c), (a, b, c))                     \
	X(int, fcntl, 0, (int a, int b, void *c), (a, b, c))                  \
	X(int, fcntl64, 0, (int a, int b, void *c), (a, b, c))                \
	X(int, ioctl, 0, (int a, unsigned long b, void *c), (a, b, c))        \
	X(int, getsockopt, 0, (int a, int b, int c, void *d, socklen_t *e),    \
	  (a, b, c, d, e))                                                     \
	X(int, setsockopt, 0,                                                  \
	  (int a, int b, int c, const void *d, socklen_t e), (a, b, c, d, e))  \
	X(int, getsockname, 0, (int a, struct sockaddr *b, socklen_t *c),      \
	  (a, b, c))                                                           \
	X(int, getpeername, 0, (int a, struct sockaddr *b, socklen_t *c),      \
	  (a, b, c))                                                           \
	X(int, poll, 0, (struct pollfd *a, nfds_t b, int c), (a, b, c))       \
	X(int, ppoll, 0,                                                       \
	  (struct pollfd *a, nfds_t b, const struct timespec *c,               \
	   const sigset_t *d),                                                 \
	  (a, b, c, d))                                                        \
	X(int, select, 0,                                                      \
	  (int a, fd_set *b, fd_set *c, fd_set *d, struct timeval *e),         \
	  (a, b, c, d, e))                                                     \
	X(int, pselect, 0,                                                     \
	  (int a, fd_set *b, fd_set *c, fd_set *d, const struct timespec *e,   \
	   const sigset_t *f),                                                 \
	  (a, b, c, d, e, f))                                                  \
	X(int, epoll_create, 0, (int a), (a))                                 \
	X(int, epoll_create1, 0, (int a), (a))                                \
	X(int, epoll_ctl, 0, (int a, int b, int c, struct epoll_event *d),     \
	  (a, b, c, d))                                                        \
	X(int, epoll_wait, 0, (int a, struct epoll_event *b, int c, int d),    \
	  (a, b, c, d))                                                        \
	X(int, epoll_pwait, 0,                                                 \
	  (int a, struct epoll_event *b, int c, int d, const sigset_t *e),     \
	  (a, b, c, d, e))                                                     \
	X(int, epoll_pwait2, 0,                                                \
	  (int a, struct epoll_event *b, int c, const struct timespec *d,      \
	   const sigset_t *e),                                                 \
	  (a, b, c, d, e))                                                     \
	X(pid_t, fork, 0, (void), ())                                         \
	X(int, system, 0, (const char *a), (a))                                \
	X(FILE *, popen, 0, (const char *a, const char *b), (a, b))            \
	X(int, execve, 0, (const char *a, char *const b[], char *const c[]),   \
	  (a, b, c))                                                           \
	X(int, execvpe, 0, (const char *a, char *const b[], char *const c[]),  \
	  (a, b, c))                                                           \
	X(int, fexecve, 0, (int a, char *const b[], char *const c[]), (a, b, c)) \
	X(int, execveat, 0,                                                    \
	  (int a, const char *b, char *const c[], char *const d[], int e),     \
	  (a, b, c, d, e))                                                     \
	X(int, posix_spawn, "GLIBC_2.15",                                      \
	  (pid_t * a, const char *b, const posix_spawn_file_actions_t *c,      \
	   const posix_spawnattr_t *d, char *const e[], char *const f[]),      \
	  (a, b, c, d, e, f))                                                  \
	X(int, posix_spawnp, "GLIBC_2.15",                                     \
	  (pid_t * a, const char *b, const posix_spawn_file_actions_t *c,      \
	   const posix_spawnattr_t *d, char *const e[], char *const f[]),      \
	  (a, b, c, d, e, f))                                                  \
	X(int, sigaction, 0,                                                   \
	  (int a, const struct sigaction *b, struct sigaction *c), (a, b, c))  \
	X(ssize_t, __read_chk, 0, (int a, void *b, size_t c, size_t d),        \
	  (a, b, c, d))                                                        \
	X(ssize_t, __recv_chk, 0, (int a, void *b, size_t c, size_t d, int e), \
	  (a, b, c, d, e))                                                     \
	X(ssize_t, __recvfrom_chk, 0,                                          \
	  (int a, void *b, size_t c, size_t d, int e, struct sockaddr *f,      \
	   socklen_t *g),                                                      \
	  (a, b, c, d, e, f, g))                                               \
	X(int, __poll_chk, 0, (struct pollfd *a, nfds_t b, int c, size_t d),   \
	  (a, b, c, d))

#define OSF_REAL_FIELD(ret, name, ver, params, args) ret(*name) params;
struct osf_real {
	OSF_REAL_FUNCS(OSF_REAL_FIELD)
	void (*closefrom)(int);
};
#undef OSF_REAL_FIELD

extern struct osf_real osf_real;

/* osf_resolve returns the next definition of name after libosf.so (the
 * default version, or `version` when given); it aborts with a message if
 * libc lacks it, since no sensible fallback exists. */
void *osf_resolve(const char *name, const char *version)
	__attribute__((cold, noinline));

/* REAL(read) is libc's read. */
#define REAL(f) (osf_real.f)

/* Process-wide state captured by the constructor before main. */
#define OSF_ENV_MAX 16384
struct osf_state {
	int ready;         /* constructor done: hooks may track fds */
	int disabled;      /* malformed configuration: pass-through */
	uint64_t image;    /* random id of this process image */
	unsigned spin_us;  /* OSF_SPIN_US */
	unsigned poll_spin_us;
	int debug_load_core;
	int debug_core_at_setup; /* OSF_DEBUG_CORE_AT_SETUP=1 (setup.c) */
	int shm_pool; /* OSF_SHM_POOL (not 0): shm rings from regions (pool.c) */
	int shm_defer; /* OSF_SHM_DEFER (not 0): a connection to a listener
			  that defers sends its hello with its first byte
			  (setup_connect.c) */
	int shm_kfd;  /* OSF_SHM_KFD=1: the application's fd stays the kernel
			 TCP socket, data in a slot's rings (kfd.c) */
	int shm_efd;  /* OSF_SHM_EFD (not 0): a slot's writers wake on its region's
			 eventfd, not a socket pair per connection (pool.c) */
	int rdma_rx_caller; /* OSF_RDMA_RX is caller, or lend, the default (docs/DESIGN.md D4) */
	int rdma_lend;      /* OSF_RDMA_RX is lend: the last waiter to leave a channel lends it */
	int sandboxed; /* a seccomp filter is on (preload/sandbox.c) */
	int fl_shared; /* forked or spawned: another process may have set an
			  undecided socket's file status flags (OSF_FDF_FLSET) */
	char lib_path[4096];
	char prog[256];
	uint32_t env_len;
	uint32_t env_user_len; /* the environment's part of env; the file's follows */
	char env[OSF_ENV_MAX]; /* "OSF_X=v\0..." snapshot */
	char fdtable_env[32];  /* OSF_FDTABLE as found at start-up */
};

extern struct osf_state osf;

/* osf_go_init recognises a Go program and, with OSF_GO=1, makes its
 * system calls reach the hooks (preload/gosys.c); called once by the
 * constructor before any of the program's code runs. What it found goes
 * into the fd table's header (osf_fdt_set_go) for osfstat; osf_go_table
 * says the constructor is to make the table once it has adopted an
 * inherited one or found none (a table made before would hide the
 * inherited one from osfstat and be a second table). */
void osf_go_init(void);
/* osf_go_hook calls the hook of system call n (one of those osf_go_mark
 * sets in a table of OSF_GO_NSYS numbers) with a[0..5] and returns what
 * the hook returns (-1 with errno on failure). Statically linked programs (static.c) share them. */
#define OSF_GO_NSYS 512
void osf_go_mark(unsigned char t[OSF_GO_NSYS]);
long osf_go_hook(long n, const long *a);
extern int osf_go_table;
/* osf_go_note says whether the notes at p carry Go's build id;
 * osf_go_static_syms returns the address of Go 1.26's Syscall6 in the
 * statically linked Go executable open at fd and mapped at bias (0 when
 * its symbol table has no such symbol or its code is not Go 1.26's), and
 * sets stubs to the runtime's futex, usleep and osyield stubs (0 when
 * absent; their code is not checked). static_go.c patches them. */
#define OSF_GO_STUBS 3
/* osf_go_jump writes `movabs $to, %r11; jmp *%r11` (OSF_GO_JUMP_LEN bytes:
 * R11 is scratch in both Go ABIs, and SYSCALL clobbers it anyway) over the
 * code at addr (gosys.c): 0, or -1 when its page could not be written. */
#define OSF_GO_JUMP_LEN 13
int osf_go_jump(uintptr_t addr, const void *to);
int osf_go_note(const unsigned char *p, size_t len);
uintptr_t osf_go_static_syms(int fd, uintptr_t bias, uintptr_t stubs[OSF_GO_STUBS]);

/* Where osf waits in poll in place of a call the kernel restarts after a
 * handler with SA_RESTART (a blocking accept), osf_intr_begin is called
 * before the wait and, when poll fails with EINTR, osf_intr_restart says
 * whether every handler that ran had SA_RESTART (signals.c; osf_intr_count
 * and the handlers deferred while selectmux holds a lock:
 * selectmux/host.h). */
void osf_intr_begin(void);
int osf_intr_restart(void);
/* A statically linked program's (preload/static_sig.c): its handlers run
 * only outside the hooks. osf_intr_static_init turns that mode on (and
 * leaves SIGSEGV and SIGBUS to static_sig.c); osf_intr_defer notes a
 * handler deferred until the hook returns (a wait ends with EINTR, as
 * after a handler; kernel_restart: a wait the kernel was restarting,
 * made to fail with EINTR instead); osf_intr_take_restart says whether
 * the hook's wait would have restarted after it (every deferred handler
 * with SA_RESTART): the call is then made again once the handlers ran. */
void osf_intr_static_init(void);
void osf_intr_defer(int restart, int kernel_restart);
int osf_intr_take_restart(void);
/* osf_intr_pending says whether a handler was deferred during this hook
 * call: a sleep the hook is about to start (its signal blocked until the
 * hook returns) must end with EINTR at once instead; restartable, one the
 * kernel restarts after an SA_RESTART handler (a blocking recv). Always 0
 * for a dynamically linked program. */
int osf_intr_pending(int restartable);

/* osf_read_file reads what fits of the file at path (a small /proc file)
 * into buf of size bytes and ends it with a NUL: the bytes read, or <= 0
 * (buf unset) when the file could not be opened or read (sys.c; libc's
 * functions, never osf's hooks). */
ssize_t osf_read_file(const char *path, char *buf, size_t size);

#endif
