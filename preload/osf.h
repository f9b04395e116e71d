/* osf.h: internals of libosf.so, the LD_PRELOAD library (C, see
 * docs/DESIGN.md D1). Not installed; the public API is include/osf/qsock.h. */
#ifndef OSF_PRELOAD_OSF_H
#define OSF_PRELOAD_OSF_H

#include "base.h"
#include "core/core_api.h"
#include "../selectmux/mux.h"

/* osf_report prints "osf: <msg>" on stderr with one write; it is for
 * errors the user must see (log lines go through osf_log). */
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

/* osf_core_listen and osf_core_connect run the core's connection
 * management (core_api.h); 0 or an errno when the core is unavailable. */
int osf_core_listen(const struct osf_core_listen_in *in,
		    struct osf_core_listen_out *out);
int osf_core_connect(const struct osf_core_connect_in *in,
		     struct osf_core_conn *out);

/* osf_core_rdma_find finds the sending state of this process's RDMA
 * connection whose segment memfd is (dev, ino), without the core thread
 * (core_api.h rdma_find): NULL when the core is not loaded in this
 * process (a fork child, an exec'd image) or has no such connection. */
struct osf_rdma_tx *osf_core_rdma_find(uint64_t dev, uint64_t ino, uint32_t *gen);

/* osf_log writes one log line of level (OSF_LOGL_*, internal/routec/
 * route.h) as the core's logger would, to OSF_LOG_FILE or standard error,
 * without the core (preload/log.c); errno is kept. The caller checks the
 * level against OSF_LOG_LEVEL. osf_log_hidden_moved follows the log
 * file's hidden fd when the program takes its number (fd.c). */
void osf_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void osf_log_hidden_moved(int old, int nfd);

/* osf_core_touched reports whether this image ever started loading the
 * core (fork: a child of one that never did has nothing to forget). */
int osf_core_touched(void);

/* osf_core_owns reports whether addr lies in the loaded Go core (a
 * handler it installed, or the return address of a call it made). */
int osf_core_owns(const void *addr);

/* osf_core_note_prior records the disposition the Go runtime is about to
 * replace for sig, so that the load puts back exactly that one. */
void osf_core_note_prior(int sig);

/* osf_core_program_view replaces an action read from the kernel that is
 * the Go runtime's handler (a synchronous signal it keeps, such as
 * SIGSEGV) by the action the runtime replaced: the program reads back
 * what it set, or what it inherited (SIG_DFL), never the runtime's. */
void osf_core_program_view(int sig, struct sigaction *old);


/* A program's buffers, preload/fault.c: osf_probe_rd and osf_probe_wr
 * touch each page of [p, p+n) as a copy from (to) it would, and return
 * -1 instead of faulting when one is not mapped so (the caller fails with
 * EFAULT, as the kernel does); osf_probe_iov probes n bytes of iov from
 * iov[i] + off. osf_fault_fixup is the SIGSEGV/SIGBUS handler's part: 1
 * when the fault was a probe's, which then returns -1. osf_fault_arm
 * (signals.c) makes sure that handler is installed; idempotent, called
 * when a connection is offloaded. */
int osf_probe_rd(const void *p, size_t n);
int osf_probe_wr(void *p, size_t n);
int osf_probe_iov(const struct iovec *iov, int cnt, int i, size_t off,
		  size_t n, int write);
int osf_fault_fixup(void *uc);
void osf_fault_arm(void);
/* osf_addr_out writes address p (pl bytes) to the program's sa and len as
 * the kernel's move_addr_to_user does (accept, getpeername, getsockname,
 * recvfrom): the length read, the address truncated to it, then the
 * length set to pl; a bad pointer is EFAULT and a negative length EINVAL,
 * never a crash: 0, or -1 with errno. */
int osf_addr_out(void *sa, socklen_t *len, const void *p, socklen_t pl);

/* Socket options as kernel TCP has them, preload/kopt.c. A connection
 * records the options set on it (struct osf_kopt, as the program passed
 * them). osf_kopt_set has a fresh kernel TCP socket of family fam take
 * the option: -1 with the kernel's errno when it refuses, else 0 and the
 * option is recorded in tab (n entries). osf_kopt_get answers getsockopt
 * as such a socket does after taking the recorded options. Both return 1
 * when they cannot ask (no fd to spare, an option too long to record). */
struct osf_kopt {
	int level, name;
	socklen_t len; /* 0: a free entry */
	unsigned char val[40]; /* IP_OPTIONS takes 40 */
};
int osf_kopt_set(int fam, struct osf_kopt *tab, int n, int level, int name,
		 const void *val, socklen_t len);
int osf_kopt_get(int fam, const struct osf_kopt *tab, int n, int level,
		 int name, void *val, socklen_t *len);
/* osf_kopt_record records an option in tab without asking the kernel
 * (a value a kernel socket already took); 0. */
int osf_kopt_record(struct osf_kopt *tab, int n, int level, int name,
		    const void *val, socklen_t len);
/* osf_kopt_carry reads from kernel TCP socket fd (of family fam) the
 * options connections made from it inherit into tab (n entries); it
 * returns how many. Those of set (bit i: osf_kopt_bit's i) are read,
 * as they are; with set OSF_OPTS_ALL every one, kept where it differs
 * from a fresh socket's. */
int osf_kopt_carry(int fd, int fam, uint32_t set, struct osf_kopt *tab, int n);
/* osf_kopt_bit is the opts_set bit of an option osf_kopt_carry reads,
 * else 0. */
uint32_t osf_kopt_bit(int level, int name);

/* Socket tracking, preload/sockets.c. */

/* osf_track_inet records a new AF_INET/AF_INET6 stream socket. */
void osf_track_inet(int fd, int domain, int type);

/* osf_fd_closed forgets fd and releases what osf held for it. */
void osf_fd_closed(int fd);

/* A closed listener's port (preload/sockets.c): TCP connections accepted
 * from a listener go on holding its port once it is closed, so offloaded
 * ones that stand for them hold it too. osf_listener_port_read notes,
 * before listener fd (entry e) closes, whether its port must be kept:
 * alone says no other fd of this process refers to its socket.
 * osf_listener_port_keep, once the socket is closed, binds the port for
 * the connections accepted on it that live in this process. */
struct osf_bound_port { /* a bound port and its SO_REUSEADDR, SO_REUSEPORT */
	struct sockaddr_storage ss;
	socklen_t len;
	int reuse[2];
};
struct osf_listener_port {
	struct osf_bound_port bp;
	int keep;
};
void osf_listener_port_read(int fd, const struct osf_fdt_entry *e, int alone,
			    struct osf_listener_port *lp);
void osf_listener_port_keep(const struct osf_listener_port *lp);
/* osf_port_pass_on: self, a connection keeping a closed listener's port
 * with hidden fd pfd (osf_conn_keep_port), is gone; another accepted on
 * the same address takes pfd over, else it is closed. */
struct osf_conn;
void osf_port_pass_on(int pfd, const struct osf_conn *self);

/* osf_fd_unlisten undoes the offload of listener fd (and of its dups)
 * when it stops listening (shutdown SHUT_RD): the connections waiting in
 * its companion are reset, the companion is closed, and the entries go
 * back to undecided TCP sockets, so that a later listen() offloads again. */
void osf_fd_unlisten(int fd);

/* osf_listen_async gives listener fd's companion cfd fd's O_ASYNC, owner
 * and F_SETSIG signal, so that a connection offloaded to it raises the
 * SIGIO a TCP listener raises for one (always: 0; only when fd has
 * O_ASYNC: 1, the listen() that made cfd). */
void osf_listen_async(int fd, int cfd, int only_async);

/* osf_fd_dup mirrors a successful dup of oldfd onto newfd. */
void osf_fd_dup(int oldfd, int newfd, int cloexec);

/* Passing offloaded sockets with SCM_RIGHTS, preload/handoff.c:
 * osf_handoff_sendmsg is sendmsg on a socket osf does not own whose
 * message carries control data, in a process that holds offloaded fds;
 * osf_handoff_recvmsg is recvmsg on such a socket with room for control
 * data. Both return what sendmsg/recvmsg would. */
ssize_t osf_handoff_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t osf_handoff_recvmsg(int fd, struct msghdr *msg, int flags);

/* osf_stdio_take replaces the standard stream of fd (0, 1 or 2) with one
 * that reads and writes through osf's hooks, when it is still glibc's own
 * (preload/stdio.c). Called when an offloaded connection is or becomes
 * that fd. */
void osf_stdio_take(int fd);

/* osf_sandbox_detect turns sandbox mode on (osf.sandboxed) when a seccomp
 * filter is on already (preload/sandbox.c). */
void osf_sandbox_detect(void);

/* osf_sandbox_check runs osf_sandbox_detect once per image, when osf first
 * needs to know: before it sets up a connection or a listener, adopts an
 * inherited fd table, or takes an offloaded fd handed over (reading
 * /proc/self/status costs a process that never offloads ~15 µs). */
void osf_sandbox_check(void);

/* osf_thread_start starts a detached thread of osf's own, named name,
 * running fn(NULL) with every signal blocked (the program's signals are
 * the program's threads' business): 0, or pthread_create's error. In
 * preload/process.c. */
int osf_thread_start(void *(*fn)(void *), const char *name);

/* osf_exec_settle is what every exec and spawn osf sees does first
 * (process.c; fd.c's syscall(SYS_execve)): connections that wait for
 * their first byte reach their servers (conn.h osf_conn_hello_flush),
 * then the fd table settles (fdtable osf_fdt_settle). */
void osf_exec_settle(void);

/* Exec environment, preload/process.c. */

/* osf_exec_env returns the environment to exec with: envp itself, or a
 * copy with LD_PRELOAD and osf's state re-injected when this process
 * holds offloaded fds that the new image inherits. A returned copy lives
 * in memory from mmap and is released by osf_exec_env_free. */
char **osf_exec_env(char *const envp[]);
void osf_exec_env_free(char **env, char *const envp[]);

/* osf_spawn_begin prepares a child that execs after moving fds where no
 * hook sees it (a Go program's os/exec child, gosys.c), as a posix_spawn
 * with file actions: listeners marked shared, every hidden fd inheritable,
 * and a snapshot of the table for the new image (its fd, or -1 when the
 * process holds no offloaded fd). osf_spawn_end(snap) undoes it. */
int osf_spawn_begin(void);
void osf_spawn_end(int snap);

#endif
