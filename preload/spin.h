/* spin.h: how long a wait spins in user space before it sleeps in the
 * kernel (preload/spin.c). A spin pays when the peer answers within it;
 * on a host whose CPUs are all taken it only burns the time slice the
 * peer needs, so the budget adapts. */
#ifndef OSF_PRELOAD_SPIN_H
#define OSF_PRELOAD_SPIN_H

#include "../selectmux/host.h" /* osf_spin_until, osf_spinning, osf_spin_paid */

/* osf_spin_budget returns the µs the calling thread's wait may spin: max_us
 * (OSF_SPIN_US or OSF_POLL_SPIN_US), max_us / busy_div while the host has
 * more runnable threads than CPUs, or 0 while the thread backs off after
 * spins that did not pay. */
unsigned osf_spin_budget(unsigned max_us, unsigned busy_div);

struct pollfd;

/* osf_spin_poll is the spin of a wait on kernel fds only (a blocking
 * accept, a hello that is late): zero-timeout polls of p, for at most
 * OSF_POLL_SPIN_US under the adaptive policy and at most timeout_ms (-1:
 * no limit), until one reports something. It returns poll's answer (> 0,
 * or -1 with errno), 0 when the spin ended with nothing ready, or -1 with
 * EINTR when a signal handler ran on this thread meanwhile; it never
 * sleeps. */
int osf_spin_poll(struct pollfd *p, unsigned long n, int timeout_ms);

#endif
