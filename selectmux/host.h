/* host.h: what selectmux needs from the library that embeds it, besides
 * the connections' readiness (ready.h): the real libc functions, the spin
 * policy, and the signal bookkeeping. selectmux owns this interface and
 * does not know who implements it: in libosf.so, preload/ does
 * (preload/sys.c, spin.c, signals.c). */
#ifndef OSF_SELECTMUX_HOST_H
#define OSF_SELECTMUX_HOST_H

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/types.h>
#include <time.h>

/* The libc functions selectmux calls: X(return type, name, parameters,
 * arguments). The embedder defines osf_mux_sys_<name> for each as the
 * real libc function, never its own hook (libosf.so: preload/sys.c, from
 * this list); selectmux calls them as REAL(name). */
#define OSF_MUX_SYS_FUNCS(X)                                                   \
	X(int, poll, (struct pollfd * a, nfds_t b, int c), (a, b, c))         \
	X(int, __poll_chk, (struct pollfd * a, nfds_t b, int c, size_t d),     \
	  (a, b, c, d))                                                        \
	X(int, ppoll,                                                          \
	  (struct pollfd * a, nfds_t b, const struct timespec *c,              \
	   const sigset_t *d),                                                 \
	  (a, b, c, d))                                                        \
	X(int, select,                                                         \
	  (int a, fd_set *b, fd_set *c, fd_set *d, struct timeval *e),         \
	  (a, b, c, d, e))                                                     \
	X(int, pselect,                                                        \
	  (int a, fd_set *b, fd_set *c, fd_set *d, const struct timespec *e,   \
	   const sigset_t *f),                                                 \
	  (a, b, c, d, e, f))                                                  \
	X(int, epoll_create, (int a), (a))                                    \
	X(int, epoll_create1, (int a), (a))                                   \
	X(int, epoll_ctl, (int a, int b, int c, struct epoll_event *d),        \
	  (a, b, c, d))                                                        \
	X(int, epoll_wait, (int a, struct epoll_event *b, int c, int d),       \
	  (a, b, c, d))                                                        \
	X(int, epoll_pwait,                                                    \
	  (int a, struct epoll_event *b, int c, int d, const sigset_t *e),     \
	  (a, b, c, d, e))                                                     \
	X(int, epoll_pwait2,                                                   \
	  (int a, struct epoll_event *b, int c, const struct timespec *d,      \
	   const sigset_t *e),                                                 \
	  (a, b, c, d, e))                                                     \
	X(int, fcntl, (int a, int b, void *c), (a, b, c))                     \
	X(int, close, (int a), (a))                                           \
	X(ssize_t, read, (int a, void *b, size_t c), (a, b, c))               \
	X(ssize_t, write, (int a, const void *b, size_t c), (a, b, c))

#define OSF_MUX_SYS_DECL(ret, name, params, args) ret osf_mux_sys_##name params;
OSF_MUX_SYS_FUNCS(OSF_MUX_SYS_DECL)
#undef OSF_MUX_SYS_DECL

/* The spin before a wait sleeps in the kernel (libosf.so: preload/spin.c).
 * osf_spin_until returns when a poll-like wait that begins at now
 * (osf_spin_clock) with timeout_ms (-1: none) may stop spinning, in
 * microseconds of CLOCK_MONOTONIC: OSF_POLL_SPIN_US under the adaptive
 * policy, at most the timeout; 0: no spin. osf_spinning reports whether a
 * spin ending at end is still on; osf_spinning_at too, keeping the clock
 * it read in *now (none when end is 0), so that the wait's timeout
 * reuses it: where CLOCK_MONOTONIC has no vDSO path (an HPET
 * clocksource, as in the emulated RDMA guests) every read is a system
 * call. osf_spin_paid tells how a spin of a nonzero budget ended:
 * paid when the awaited event came while spinning, else the wait went to
 * sleep. */
long osf_spin_until(long now, long timeout_ms);
int osf_spinning(long end);
int osf_spinning_at(long end, long *now);
void osf_spin_paid(int paid);
/* osf_spin_clock is CLOCK_MONOTONIC in microseconds (divided by 1000,
 * mono_ms's milliseconds). osf_spin_woke tells
 * that a poll-like wait which began at begun (osf_spin_clock) slept in the
 * kernel and then had events: the thread's next waits spin about as long
 * as that took when it was short (up to OSF_SPIN_GROW times
 * OSF_POLL_SPIN_US), and OSF_POLL_SPIN_US again when it was longer. */
long osf_spin_clock(void);
void osf_spin_woke(long begun);

/* A server's links (libosf.so: preload/setup_kfd.c, OSF_SHM_KFD): the
 * companion connections of its client processes, which it closes when
 * they end (the client process exited), with what only they hold.
 * osf_links_copy puts up to max of this process's links' fds in fds (how
 * many; OSF_LINKS_MAX at most); a wait on an OSF_SHM_KFD listener
 * watches them for their end (mux.h osf_mux_link_added tells of new
 * ones), and osf_links_ended, called with no mux lock held, closes the
 * links that ended. */
#define OSF_LINKS_MAX 256
int osf_links_copy(int *fds, int max);
void osf_links_ended(void);

/* Signals (libosf.so: preload/signals.c). osf_intr_count is the number of
 * handlers that have run on this thread through osf's trampoline: a wait
 * that sleeps in the kernel more than once (poll, epoll_wait) ends with
 * EINTR when it changed between two sleeps, as the kernel's one sleep
 * would have.
 *
 * A handler for an asynchronous signal that arrives while its thread is
 * inside selectmux with a lock held or awaited (osf_mux_busy, mux.h) runs
 * when the thread lets go of its last mux lock, as the kernel runs it
 * after a system call: the trampoline keeps the signal blocked and its
 * siginfo (osf_intr_deferred), and osf_intr_redeliver queues it to the
 * thread again and unblocks it. So the handler may close, connect or
 * epoll_ctl offloaded sockets. */
extern __thread unsigned osf_intr_n __attribute__((tls_model("initial-exec")));
extern __thread unsigned osf_intr_deferred __attribute__((tls_model("initial-exec")));
void osf_intr_redeliver(void);
static inline unsigned osf_intr_count(void)
{
	unsigned n = __atomic_load_n(&osf_intr_n, __ATOMIC_RELAXED);

	__atomic_signal_fence(__ATOMIC_SEQ_CST); /* read where it is written */
	return n;
}

/* The program's buffers (preload/fault.c): osf_fault_arm installs the
 * handler that turns a faulting probe into -1 (idempotent); osf_probe_rd
 * reads each page of [p, p+n), osf_probe_wr reads and writes back a byte
 * of each, 0 or -1. selectmux probes the arrays it reads or writes before
 * the kernel would (a poll array, fd_sets, an epoll event, the events of
 * a wait), so that a bad one is the kernel's EFAULT, never a crash. */
void osf_fault_arm(void);
int osf_probe_rd(const void *p, size_t n);
int osf_probe_wr(void *p, size_t n);

#endif
