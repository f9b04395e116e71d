//go:build osf_make

/* mux.c: select, poll and epoll over any mix of kernel and offloaded fds.
 *
 * Readiness of an offloaded connection is the state of its rings
 * (osf_conn_poll), never the wake socket's: the kernel object is only used
 * to sleep. Before sleeping, each offloaded fd is armed (its peer will send
 * a wake token when the awaited event may have happened), and the wake
 * socket stands in for it in the kernel wait. An offloaded listener is
 * watched together with its companion listener.
 *
 * epoll: the offloaded fds registered in an application epoll E1 live in a
 * hidden inner epoll E2 (edge-triggered on their wake sockets), and E2 is
 * registered in E1 under a marker that no application value can equal (the
 * address of osf's own state). So E1 itself becomes readable when an
 * offloaded fd may be ready — programs that poll their epoll fd, or nest
 * it, keep working. epoll_wait reports from a list of items that may be
 * ready (new registrations, woken ones, level-triggered ones still ready).
 * An item found not ready (or an edge-triggered one just reported) moves
 * to a bounded idle list, which the spin phase checks in the rings; only a
 * wait about to sleep in the kernel arms the idle items, so a busy peer
 * sends no wake tokens. Edge-triggered items report an edge when their
 * ring positions moved (osf_conn_stamp), as TCP reports one per arrival.
 * A wait costs O(ready + idle), not O(registered).
 *
 * As in the kernel, a registration belongs to the open file (and the fd
 * number it was made with): the inner
 * epoll is shared with fork children, so a close in one process never
 * deletes what another process may still use, and inner events carry no
 * pointer but the item's identity (fd number and socket inode), looked up
 * and checked before use; an item whose fd now holds another file (closed
 * behind osf's back, by a system call made without libc) is dropped,
 * never reported. An item whose fd is closed while a dup of it stays open
 * lives on through the dup (an orphan) until the file's last fd closes.
 * EPOLL_CTL_ADD/MOD of an offloaded fd that is ready already kicks the
 * waits asleep in the kernel (an eventfd in the inner epoll).
 */
#include "mux.h"

#include "../preload/base.h"
#include "../preload/ready.h"
#include "../preload/spin.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* glibc declares poll's array write-only (__attr_access); a poll hook
 * must read it, which gcc would report as a read of uninitialized data. */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

extern int __poll_chk(struct pollfd *, nfds_t, int, size_t);
extern void __chk_fail(void) __attribute__((noreturn));

/* involved reports an fd whose readiness osf must compute. */
static inline int involved(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int k = e ? __atomic_load_n(&e->kind, __ATOMIC_ACQUIRE) : OSF_FD_NONE;

	return osf_kind_is_offloaded(k) || k == OSF_FD_EPOLL ||
	       unlikely(k == OSF_FD_KERNEL && osf_gw_pending(e));
}

static long ts_ms(const struct timespec *ts)
{
	if (!ts)
		return -1;
	if (ts->tv_sec > INT_MAX / 1000)
		return INT_MAX;
	return ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000;
}

static long mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* remaining returns what is left of a timeout begun at start (-1: none). */
static int remaining(long timeout, long start)
{
	long left;

	if (timeout < 0)
		return -1;
	left = timeout - (mono_ms() - start);
	return left < 0 ? 0 : (int)left;
}

/* ---- a small futex mutex ------------------------------------------------
 *
 * mu_depth counts the mux locks this thread holds or waits for. A signal
 * handler can call into the mux on a thread that holds one (a handler's
 * shutdown or setsockopt re-checks epoll items, osf_mux_changed, while its
 * thread's epoll_wait collects them): it must not wait for the lock its
 * own thread holds. Such a re-check is noted in this thread's deferred
 * slots instead and made when the thread lets go of its last mux lock
 * (mu_unlock, run_deferred), before it sleeps in the kernel. */

static __thread int mu_depth __attribute__((tls_model("initial-exec")));

#define DEFER_SLOTS 8
enum { SLOT_FREE, SLOT_CLAIMED, SLOT_FULL };
enum { DEFER_CHANGED, DEFER_FORGET };
struct deferred {
	int state; /* SLOT_*: claimed by compare-and-swap, a nested handler
		      takes another */
	int op;    /* DEFER_* */
	int fd, dups;
	uint32_t events;
	uint64_t ino; /* DEFER_FORGET: the closed file's identity */
	void *hold;   /* DEFER_FORGET: its connection, held (osf_conn_hold) */
};
static __thread struct deferred mu_deferred[DEFER_SLOTS]
	__attribute__((tls_model("initial-exec")));
static __thread int mu_overflow __attribute__((tls_model("initial-exec")));
static __thread int mu_pending __attribute__((tls_model("initial-exec")));

static void changed(int fd, int dups, uint32_t events);
static void forget(int fd, uint64_t ino, void *hold);

/* defer_op notes d for this thread's last mux unlock; 0 when the slots are
 * full (then every item is re-checked, and closed ones dropped). */
static int defer_op(const struct deferred *d)
{
	int i;

	for (i = 0; i < DEFER_SLOTS; i++) {
		int fr = SLOT_FREE;
		if (!__atomic_compare_exchange_n(&mu_deferred[i].state, &fr, SLOT_CLAIMED, 0,
						 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			continue;
		mu_deferred[i].op = d->op;
		mu_deferred[i].fd = d->fd;
		mu_deferred[i].dups = d->dups;
		mu_deferred[i].events = d->events;
		mu_deferred[i].ino = d->ino;
		mu_deferred[i].hold = d->hold;
		__atomic_store_n(&mu_deferred[i].state, SLOT_FULL, __ATOMIC_RELEASE);
		__atomic_add_fetch(&mu_pending, 1, __ATOMIC_RELEASE);
		return 1;
	}
	__atomic_store_n(&mu_overflow, 1, __ATOMIC_RELEASE);
	__atomic_add_fetch(&mu_pending, 1, __ATOMIC_RELEASE);
	return 0;
}

/* deferred_hold returns the connection a close deferred on this thread
 * holds for the item of fd with identity ino, or NULL. */
static void *deferred_hold(int fd, uint64_t ino)
{
	int i;

	for (i = 0; i < DEFER_SLOTS; i++)
		if (__atomic_load_n(&mu_deferred[i].state, __ATOMIC_ACQUIRE) == SLOT_FULL &&
		    mu_deferred[i].op == DEFER_FORGET && mu_deferred[i].fd == fd &&
		    mu_deferred[i].ino == ino)
			return mu_deferred[i].hold;
	return NULL;
}

/* run_deferred makes the re-checks and drops that handlers deferred (no
 * mux lock held), in the order they were noted per slot. */
static void run_deferred(void)
{
	int i;

	while (__atomic_exchange_n(&mu_pending, 0, __ATOMIC_ACQUIRE)) {
		for (i = 0; i < DEFER_SLOTS; i++) {
			struct deferred d;
			if (__atomic_load_n(&mu_deferred[i].state, __ATOMIC_ACQUIRE) != SLOT_FULL)
				continue;
			d = mu_deferred[i];
			if (d.op == DEFER_FORGET)
				forget(d.fd, d.ino, d.hold); /* slot still names the hold */
			__atomic_store_n(&mu_deferred[i].state, SLOT_FREE, __ATOMIC_RELEASE);
			if (d.op == DEFER_FORGET)
				osf_conn_unhold(d.hold);
			else
				changed(d.fd, d.dups, d.events);
		}
		if (__atomic_exchange_n(&mu_overflow, 0, __ATOMIC_ACQUIRE))
			changed(-1, 1, OSF_MUX_ALL); /* drops closed items too */
	}
}

static void mu_lock(int *m)
{
	int c = 0;

	mu_depth++; /* first: a handler from now on defers */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__atomic_compare_exchange_n(m, &c, 1, 0, __ATOMIC_ACQUIRE,
					__ATOMIC_RELAXED))
		return;
	if (c != 2)
		c = __atomic_exchange_n(m, 2, __ATOMIC_ACQUIRE);
	while (c != 0) {
		syscall(SYS_futex, m, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
		c = __atomic_exchange_n(m, 2, __ATOMIC_ACQUIRE);
	}
}

static void mu_unlock(int *m)
{
	if (__atomic_exchange_n(m, 0, __ATOMIC_RELEASE) == 2)
		syscall(SYS_futex, m, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (--mu_depth == 0) {
		if (__builtin_expect(__atomic_load_n(&mu_pending, __ATOMIC_RELAXED), 0))
			run_deferred();
		if (__builtin_expect(osf_intr_deferred, 0))
			osf_intr_redeliver(); /* the handlers run now */
	}
}

int osf_mux_busy(void) { return mu_depth; }

/* ---- poll ------------------------------------------------------------------ */

/* Per pollfd slot, how the kernel array kfds stands in for it. */
enum { SLOT_KERNEL, SLOT_CONN, SLOT_LISTEN };

/* conn_events filters a connection's readiness as poll reports it. */
static short conn_events(short ready, short events)
{
	return ready & (events | POLLERR | POLLHUP | POLLNVAL);
}

/* wake_slot makes kernel slot ks stand for connection fd: its wake socket
 * with the events osf_conn_wake_events asks (a socket this side shut for
 * reading polls readable for ever), or nothing. */
static void wake_slot(struct pollfd *ks, int fd, struct osf_fdt_entry *e)
{
	short ev = e && osf_kind_is_conn(e->kind) ? osf_conn_wake_events(fd, e)
						  : POLLIN | POLLRDHUP;

	ks->fd = ev < 0 ? -1 : fd;
	ks->events = ev < 0 ? 0 : ev;
}

/* disarm_all ends the waits mux_poll armed; woken tells, per slot, whether
 * its sockets were found readable (only after a sleep: a wait that did not
 * sleep takes no token, it would be someone else's). */
static void disarm_all(struct pollfd *fds, nfds_t n, const struct pollfd *k,
		       const int *wx, unsigned char *arm, int slept)
{
	nfds_t i;

	for (i = 0; i < n; i++) {
		int woken = 0;
		if (!arm[i])
			continue;
		if (slept) {
			if (k[i].revents & (POLLIN | POLLHUP | POLLERR))
				woken |= OSF_ARM_RX;
			if (wx[i] >= 0 && k[wx[i]].revents)
				woken |= OSF_ARM_TX;
		}
		osf_conn_disarm(fds[i].fd, osf_fdt_lookup(fds[i].fd), arm[i],
				woken);
		arm[i] = 0;
	}
}

/* mux_poll implements poll and ppoll when offloaded fds are involved. An
 * offloaded connection's fd stands for itself in the kernel's array (its
 * readers' tokens and the end arrive there); one waiting for POLLOUT adds
 * its writers' wake socket, an offloaded listener its companion.
 *
 * It is one long function on purpose: its phases (build the kernel array,
 * spin on the rings, arm, sleep in the kernel, disarm and translate) share
 * the per-fd arrays it allocates, and every exit must disarm exactly what
 * was armed; split up, that bookkeeping would be passed around instead of
 * being visible in one place. */
static int mux_poll(struct pollfd *fds, nfds_t n, long timeout,
		    const sigset_t *mask, unsigned intr)
{
	struct pollfd stack_k[64];
	unsigned char stack_kind[64], stack_arm[64];
	int stack_wx[64];
	struct pollfd *k = stack_k;
	unsigned char *kind = stack_kind, *arm = stack_arm;
	int *wx = stack_wx;
	nfds_t i, m = n, extra = 0;
	long start = mono_ms(), spin_end = osf_spin_until(timeout);
	int result = -1, spun = 0;

	for (i = 0; i < n; i++) {
		int kd = osf_fdt_kind(fds[i].fd);
		if (kd == OSF_FD_LISTEN ||
		    (kd >= OSF_FD_SHM && (fds[i].events & (POLLOUT | POLLWRNORM))))
			extra++;
	}
	if (n + extra > 64) {
		k = malloc((n + extra) * sizeof(*k) +
			   n * (sizeof(*wx) + 2 * sizeof(*kind)));
		if (!k)
			return OSF_FAIL(ENOMEM);
		wx = (int *)(k + n + extra);
		kind = (unsigned char *)(wx + n);
		arm = kind + n;
	}
	for (i = 0; i < n; i++) {
		struct osf_fdt_entry *e = osf_fdt_lookup(fds[i].fd);
		int kd = e ? e->kind : OSF_FD_NONE;
		k[i] = fds[i];
		k[i].revents = 0;
		kind[i] = SLOT_KERNEL;
		arm[i] = 0;
		wx[i] = -1;
		if (kd >= OSF_FD_SHM ||
		    unlikely(kd == OSF_FD_KERNEL && osf_gw_pending(e))) {
			kind[i] = SLOT_CONN;
			wake_slot(&k[i], fds[i].fd, e); /* tokens and the end */
			if (!(fds[i].events & (POLLOUT | POLLWRNORM)) ||
			    kd == OSF_FD_KERNEL) /* a gateway's reply: data */
				continue;
			k[m].fd = osf_conn_wake_tx_fd(e);
		} else if (kd == OSF_FD_LISTEN) {
			kind[i] = SLOT_LISTEN;
			k[m].fd = e->aux_fd;
		} else {
			continue;
		}
		k[m].events = POLLIN;
		k[m].revents = 0;
		wx[i] = (int)m++;
	}
	for (;;) {
		int ready = 0, armed = 0, due = 0, r, to, err;
		/* What the rings say now. */
		for (i = 0; i < n; i++) {
			fds[i].revents = 0;
			if (kind[i] != SLOT_CONN || fds[i].fd < 0)
				continue;
			fds[i].revents = conn_events(
				osf_conn_poll(fds[i].fd, osf_fdt_lookup(fds[i].fd)),
				fds[i].events);
			if (fds[i].revents)
				ready++;
		}
		/* Spin first (rings and a zero-timeout look at the kernel),
		 * then arm the connections and sleep. */
		if (!ready && timeout != 0 && !osf_spinning(spin_end)) {
			if (spin_end)
				osf_spin_paid(0); /* it spun in vain */
			spin_end = 0;
			for (i = 0; i < n; i++) {
				if (kind[i] != SLOT_CONN || fds[i].fd < 0)
					continue;
				arm[i] = (unsigned char)osf_conn_arm_kinds_fd(
					fds[i].fd, osf_fdt_lookup(fds[i].fd),
					fds[i].events);
				fds[i].revents = conn_events(
					osf_conn_arm(fds[i].fd,
						     osf_fdt_lookup(fds[i].fd),
						     arm[i], 0, &due),
					fds[i].events);
				if (fds[i].revents)
					ready++;
			}
			armed = 1;
			if (ready) { /* raced to ready: no sleep, no tokens */
				disarm_all(fds, n, k, wx, arm, 0);
				armed = 0;
			}
		}
		to = (ready || spin_end) ? 0 : remaining(timeout, start);
		/* Connections with ring pages to give back: first sleep
		 * OSF_TRIM_IDLE_MS; if nothing came, they are idle. */
		due = armed && due && (to < 0 || to > OSF_TRIM_IDLE_MS);
		if (due)
			to = OSF_TRIM_IDLE_MS;
		if (to && osf_intr_count() != intr) {
			/* A handler ran in osf's part of the call: the kernel's
			 * poll would not sleep past it. */
			if (armed)
				disarm_all(fds, n, k, wx, arm, 0);
			result = OSF_FAIL(EINTR);
			goto out;
		}
		r = mask ? REAL(ppoll)(k, m,
				       to < 0 ? NULL
					      : &(struct timespec){to / 1000,
								   (to % 1000) *
									   1000000L},
				       mask)
			 : REAL(poll)(k, m, to);
		err = errno;
		/* Before disarm_all, which clears arm[]. */
		for (i = 0; due && r == 0 && i < n; i++)
			if ((arm[i] & OSF_ARM_RX) && kind[i] == SLOT_CONN && fds[i].fd >= 0)
				osf_conn_trim(fds[i].fd, osf_fdt_lookup(fds[i].fd));
		if (armed)
			disarm_all(fds, n, k, wx, arm, r > 0);
		if (r < 0) { /* EINTR even after a spin pass counted 0 */
			errno = err;
			result = -1;
			goto out;
		}
		/* Merge what the kernel said. */
		for (i = 0; i < n; i++) {
			if (kind[i] == SLOT_CONN) {
				if (k[i].revents & POLLNVAL)
					fds[i].revents = POLLNVAL;
				else if ((k[i].revents ||
					  (wx[i] >= 0 && k[wx[i]].revents)) &&
					 !fds[i].revents && fds[i].fd >= 0) {
					struct osf_fdt_entry *e =
						osf_fdt_lookup(fds[i].fd);
					if (!armed) /* the end, if it came */
						osf_conn_disarm(fds[i].fd, e, 0,
								k[i].revents ? OSF_ARM_RX
									     : OSF_ARM_TX);
					fds[i].revents = conn_events(
						osf_conn_poll(fds[i].fd, e),
						fds[i].events);
					wake_slot(&k[i], fds[i].fd, e);
				}
			} else {
				fds[i].revents = k[i].revents;
				/* A pending connection on the companion
				 * is one on the listener: POLLIN and
				 * POLLRDNORM, as inet_csk_listen_poll. */
				if (kind[i] == SLOT_LISTEN &&
				    (k[wx[i]].revents & POLLIN))
					fds[i].revents |= fds[i].events &
							  (POLLIN | POLLRDNORM);
			}
		}
		for (i = 0; i < m; i++)
			k[i].revents = 0;
		result = 0;
		for (i = 0; i < n; i++)
			if (fds[i].revents)
				result++;
		if (result > 0 && spin_end && spun)
			osf_spin_paid(1);
		/* A handler ran during the call (it may have closed a polled
		 * fd: never POLLNVAL for it): EINTR, as the kernel's poll
		 * interrupted before it found anything. */
		if (osf_intr_count() != intr) {
			result = OSF_FAIL(EINTR);
			goto out;
		}
		if (result > 0 || remaining(timeout, start) == 0)
			goto out;
		spun = spin_end != 0;
	}
out:
	if (k != stack_k)
		free(k);
	return result;
}

static int needs_mux(const struct pollfd *fds, nfds_t n)
{
	nfds_t i;

	if (likely(osf_fdt_table_fd() < 0))
		return 0;
	for (i = 0; i < n; i++)
		if (involved(fds[i].fd))
			return 1;
	return 0;
}

/* The hooks below note osf_intr_count first: a handler that runs in
 * osf's part of the call, before or after the kernel's wait, ran during
 * the call (EINTR, mux_poll), as it would run after the kernel's. */
OSF_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	unsigned intr = osf_intr_count();

	osf_reap_kick(); /* may sleep: the reaper may have work */
	if (likely(!needs_mux(fds, n)))
		return REAL(poll)(fds, n, timeout);
	return mux_poll(fds, n, timeout < 0 ? -1 : timeout, NULL, intr);
}

OSF_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout,
			  size_t fdslen)
{
	unsigned intr = osf_intr_count();

	osf_reap_kick(); /* may sleep: the reaper may have work */
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	if (likely(!needs_mux(fds, n)))
		return REAL(__poll_chk)(fds, n, timeout, fdslen);
	return mux_poll(fds, n, timeout < 0 ? -1 : timeout, NULL, intr);
}

OSF_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		     const sigset_t *mask)
{
	unsigned intr = osf_intr_count();

	osf_reap_kick(); /* may sleep: the reaper may have work */
	if (likely(!needs_mux(fds, n)))
		return REAL(ppoll)(fds, n, ts, mask);
	if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
		return OSF_FAIL(EINVAL);
	return mux_poll(fds, n, ts_ms(ts), mask, intr);
}

OSF_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n,
			   const struct timespec *ts, const sigset_t *mask,
			   size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return ppoll(fds, n, ts, mask);
}

/* ---- select ------------------------------------------------------------------ */

#define BITS (8 * sizeof(unsigned long))

static int fd_isset(const fd_set *s, int fd)
{
	return s && ((const unsigned long *)s)[fd / BITS] & (1UL << (fd % BITS));
}

static int select_needs_mux(int n, fd_set *r, fd_set *w, fd_set *x)
{
	int fd;

	if (likely(osf_fdt_table_fd() < 0) || n <= 0)
		return 0;
	for (fd = 0; fd < n; fd++) {
		unsigned long word = 0;
		if (fd % BITS == 0) {
			size_t i = fd / BITS;
			word = (r ? ((unsigned long *)r)[i] : 0) |
			       (w ? ((unsigned long *)w)[i] : 0) |
			       (x ? ((unsigned long *)x)[i] : 0);
			if (!word) {
				fd += BITS - 1;
				continue;
			}
		}
		if ((fd_isset(r, fd) || fd_isset(w, fd) || fd_isset(x, fd)) &&
		    involved(fd))
			return 1;
	}
	return 0;
}

/* mux_select implements select and pselect through mux_poll. */
static int mux_select(int n, fd_set *r, fd_set *w, fd_set *x, long timeout,
		      const sigset_t *mask, unsigned intr)
{
	struct pollfd *p;
	int fd, cnt = 0, ret, i;

	if (n > FD_SETSIZE * 64)
		return OSF_FAIL(EINVAL);
	p = malloc(sizeof(*p) * (size_t)n);
	if (!p)
		return OSF_FAIL(ENOMEM);
	for (fd = 0; fd < n; fd++) {
		short ev = 0;
		if (fd_isset(r, fd))
			ev |= POLLIN;
		if (fd_isset(w, fd))
			ev |= POLLOUT;
		if (fd_isset(x, fd))
			ev |= POLLPRI;
		if (ev)
			p[cnt++] = (struct pollfd){fd, ev, 0};
	}
	ret = mux_poll(p, (nfds_t)cnt, timeout, mask, intr);
	if (ret < 0) {
		free(p);
		return -1;
	}
	for (i = 0; i < cnt; i++)
		if (p[i].revents & POLLNVAL) {
			free(p);
			return OSF_FAIL(EBADF);
		}
	if (r)
		memset(r, 0, (size_t)(n + BITS - 1) / BITS * sizeof(long));
	if (w)
		memset(w, 0, (size_t)(n + BITS - 1) / BITS * sizeof(long));
	if (x)
		memset(x, 0, (size_t)(n + BITS - 1) / BITS * sizeof(long));
	ret = 0;
	for (i = 0; i < cnt; i++) {
		short re = p[i].revents;
		if (r && (p[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(p[i].fd, r);
			ret++;
		}
		if (w && (p[i].events & POLLOUT) && (re & (POLLOUT | POLLERR))) {
			FD_SET(p[i].fd, w);
			ret++;
		}
		if (x && (p[i].events & POLLPRI) && (re & POLLPRI)) {
			FD_SET(p[i].fd, x);
			ret++;
		}
	}
	free(p);
	return ret;
}

OSF_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *x,
		      struct timeval *tv)
{
	long timeout, start;
	unsigned intr = osf_intr_count();
	int ret;

	osf_reap_kick(); /* may sleep: the reaper may have work */
	if (likely(!select_needs_mux(n, r, w, x)))
		return REAL(select)(n, r, w, x, tv);
	if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0))
		return OSF_FAIL(EINVAL);
	timeout = tv ? tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000 : -1;
	start = mono_ms();
	ret = mux_select(n, r, w, x, timeout, NULL, intr);
	if (tv) { /* Linux reports the time not slept */
		long left = remaining(timeout, start);
		tv->tv_sec = left / 1000;
		tv->tv_usec = (left % 1000) * 1000;
	}
	return ret;
}

OSF_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *x,
		       const struct timespec *ts, const sigset_t *mask)
{
	unsigned intr = osf_intr_count();

	osf_reap_kick(); /* may sleep: the reaper may have work */
	if (likely(!select_needs_mux(n, r, w, x)))
		return REAL(pselect)(n, r, w, x, ts, mask);
	if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
		return OSF_FAIL(EINVAL);
	return mux_select(n, r, w, x, ts_ms(ts), mask, intr);
}

/* ---- epoll ---------------------------------------------------------------------- */

enum { ON_NONE, ON_READY, ON_IDLE };

struct epi {
	int fd;
	uint32_t events;
	epoll_data_t data;
	int disabled;  /* EPOLLONESHOT fired: off until EPOLL_CTL_MOD */
	int listed;    /* ON_*: which list it is on */
	unsigned seen; /* the wait that last reported it */
	uint64_t stamp; /* osf_conn_stamp when it went idle (edge detection) */
	int armed;      /* OSF_ARM_* kinds it is counted as waiting for */
	int woken;      /* OSF_ARM_* kinds whose socket fired (absorb) */
	int wsock;      /* the writers' wake socket registered for it, or -1
			 * (registered at the first wait for EPOLLOUT) */
	int wown;       /* wsock is a dup osf made for this item */
	int parked;     /* EPOLL_CTL_DEL'd: invisible, but its inner
			 * registrations stay until the fd is closed, so
			 * that DEL/ADD churn costs no system call */
	uint64_t ino;   /* the socket's inode when registered: identity */
	int at;         /* the fd its open file is reached through: fd, or a
			 * dup of it once fd was closed (an orphan) */
	int orphan;     /* fd was closed while a dup stayed open: the
			 * registration lives on with the file, as the
			 * kernel's (keyed by file and fd number) does until
			 * the file's last fd closes; on ep->orphans, not in
			 * byfd, reported through at */
	struct epi *onext; /* the next orphan */
	struct epi *prev, *next;
};

/* The inner epoll's data: the item's identity, never a pointer (a fork
 * child's or a closed item's registration may fire): the socket inode's
 * low 32 bits, the fd number, and the low bit set for the writers' wake
 * socket. KICK_KEY is the kick eventfd's. */
#define WSOCK_TAG 1u
#define KICK_KEY UINT64_MAX

#define IDLE_MAX 256 /* idle items checked while spinning; more are armed */

struct ep {
	int epfd;
	int inner;      /* hidden epoll of wake sockets; -1 until needed */
	int lock;
	int turn;
	unsigned wait; /* counts waits, so an item is reported once per wait */
	struct epi **byfd;
	int cap;
	struct epi *orphans; /* items whose fd was closed, a dup open */
	struct epi head; /* the may-be-ready list */
	struct epi idle; /* not ready (or reported edge-triggered), not armed */
	int nidle;
	int *listeners;  /* listener fds whose companions are in epfd */
	int nlisteners, caplisteners;
	struct epoll_event *pend; /* registrations of undecided TCP sockets */
	int *pendfd;
	int npend, cappend;
	int kick;     /* eventfd in the inner epoll waking sleepers, or -1 */
	int sleepers; /* waits asleep (or about to be) in the kernel */
	int young;    /* the inner epoll is new: a wait that began before it
		       * may be asleep in the kernel uncounted */
	int shared;   /* a fork shared the inner epoll with another process:
		       * never delete from it on close (the kernel does) */
	struct ep *next_ep;
	int trim_due;     /* an armed item has ring pages to give back once idle */
	int blind;        /* an idle item no token can wake (blind_item): the
			     wait sleeps at most OSF_BLIND_MS */
	long quiet_since; /* with trim_due: waits have reported nothing since
			     (mono_ms), 0: not counting */
	uint64_t mark;    /* the inner epoll's data in the application's */
	struct eprec *rec; /* the registrations, for an exec'd image, or NULL */
	int rec_fd;       /* its hidden memfd, or -1 */
};

/* The record of an epoll's offloaded registrations (fd, events, data,
 * identity, EPOLLONESHOT fired), kept current at every epoll_ctl in a
 * hidden memfd while the epoll fd may cross exec (not close-on-exec): the
 * exec'd image finds it through the fd table (the epoll's entry, aux2_fd;
 * aux_fd is the inner epoll, which crosses too) and registers them again
 * under the same marker (ep_adopt), as the kernel keeps an epoll's
 * registrations across exec. Slot i is fd i; fds from EPREC_SLOTS on are
 * not recorded. */
#define EPREC_MAGIC 0x31434550464f5351ULL /* "QSOFPEC1" */
#define EPREC_SLOTS 65536u
enum { REC_NONE, REC_ON, REC_OFF };
struct eprec_slot {
	uint32_t state; /* REC_* */
	uint32_t events;
	uint64_t data;
	uint64_t ino;
	uint64_t pad;
};
struct eprec {
	uint64_t magic;
	uint64_t mark; /* the marker the inner epoll is registered under */
	uint32_t slots, hi; /* hi: slots from hi on are unused */
	uint8_t pad[40];
	struct eprec_slot slot[];
};
#define EPREC_BYTES (sizeof(struct eprec) + EPREC_SLOTS * sizeof(struct eprec_slot))

static struct ep *all_eps;
static int all_lock;

static uint64_t marker(struct ep *ep) { return ep->mark; }

static void list_del(struct ep *ep, struct epi *it)
{
	if (!it->listed)
		return;
	if (it->listed == ON_IDLE)
		ep->nidle--;
	it->listed = ON_NONE;
	it->prev->next = it->next;
	it->next->prev = it->prev;
}

static void list_put(struct ep *ep, struct epi *it, int which)
{
	struct epi *head = which == ON_IDLE ? &ep->idle : &ep->head;

	if (it->listed == which)
		return;
	list_del(ep, it);
	it->listed = which;
	it->prev = head->prev;
	it->next = head;
	head->prev->next = it;
	head->prev = it;
	if (which == ON_IDLE)
		ep->nidle++;
}

static void list_add(struct ep *ep, struct epi *it) { list_put(ep, it, ON_READY); }

static struct ep *ep_find(int epfd);

/* ep_of returns the state of epoll fd epfd in this image, or NULL. */
static struct ep *ep_of(struct osf_fdt_entry *e)
{
	if (!e || e->kind != OSF_FD_EPOLL ||
	    __atomic_load_n(&e->image, __ATOMIC_ACQUIRE) != osf.image)
		return NULL;
	return (struct ep *)(uintptr_t)e->priv;
}

static struct ep *ep_create(int epfd)
{
	struct osf_fdt_entry ent, *e = osf_fdt_lookup(epfd);
	struct ep *ep;
	int fdfl;

	if (e && ep_of(e))
		return ep_of(e);
	fdfl = REAL(fcntl)(epfd, F_GETFD, NULL);
	if (fdfl < 0)
		return NULL;
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return NULL;
	ep->epfd = epfd;
	ep->inner = -1;
	ep->kick = -1;
	ep->rec_fd = -1;
	ep->mark = (uint64_t)(uintptr_t)ep + 1;
	ep->head.prev = ep->head.next = &ep->head;
	ep->idle.prev = ep->idle.next = &ep->idle;
	memset(&ent, 0, sizeof(ent));
	ent.kind = OSF_FD_EPOLL;
	ent.aux_fd = -1;
	ent.aux2_fd = -1;
	ent.rule = -1;
	ent.flags = (fdfl & FD_CLOEXEC) ? OSF_FDF_CLOEXEC : 0;
	ent.image = osf.image;
	ent.priv = (uint64_t)(uintptr_t)ep;
	if (osf_fdt_set(epfd, &ent) < 0) {
		free(ep);
		return NULL;
	}
	mu_lock(&all_lock);
	ep->next_ep = all_eps;
	all_eps = ep;
	mu_unlock(&all_lock);
	return ep;
}

/* ep_entry_sync writes ep's hidden fds into its fd table entry, which
 * makes them cross exec with the epoll fd (fdtable accounts for them). */
static void ep_entry_sync(struct ep *ep)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(ep->epfd), ent;

	if (!e || ep_of(e) != ep)
		return;
	ent = *e;
	ent.aux_fd = ep->inner;
	ent.aux2_fd = ep->rec_fd;
	(void)osf_fdt_set(ep->epfd, &ent);
}

/* ep_inner creates the inner epoll and nests it in the application's. */
static int ep_inner(struct ep *ep)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(ep->epfd);
	struct epoll_event ev;
	int in, hin;

	if (ep->inner >= 0)
		return 0;
	osf_fdt_high_begin(); /* needs none of the program's fds */
	in = REAL(epoll_create1)(EPOLL_CLOEXEC);
	hin = in < 0 ? -1 : osf_fdt_hide(in, ep->epfd);
	osf_fdt_high_end();
	if (in < 0)
		return -1;
	if (hin < 0)
		hin = in;
	ev.events = EPOLLIN;
	ev.data.u64 = marker(ep);
	if (REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, hin, &ev) < 0) {
		int err = errno;
		osf_fdt_close_hidden(hin);
		return OSF_FAIL(err);
	}
	ep->young = 1;
	__atomic_store_n(&ep->inner, hin, __ATOMIC_RELEASE);
	if (e && ep->rec)
		ep_entry_sync(ep);
	else if (e)
		e->aux_fd = hin;
	return 0;
}

static int ep_grow(struct ep *ep, int fd)
{
	struct epi **n;
	int cap;

	if (fd < ep->cap)
		return 0;
	cap = ep->cap ? ep->cap : 64;
	while (cap <= fd)
		cap *= 2;
	n = realloc(ep->byfd, (size_t)cap * sizeof(*n));
	if (!n)
		return OSF_FAIL(ENOMEM);
	memset(n + ep->cap, 0, (size_t)(cap - ep->cap) * sizeof(*n));
	ep->byfd = n;
	ep->cap = cap;
	return 0;
}

static uint32_t poll_to_epoll(short r)
{
	return (uint32_t)(unsigned short)r &
	       (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLRDHUP |
		EPOLLRDNORM | EPOLLWRNORM | EPOLLPRI);
}

static short poll_events(uint32_t events)
{
	return (events & EPOLLIN ? POLLIN : 0) | (events & EPOLLOUT ? POLLOUT : 0) |
	       (events & EPOLLRDHUP ? POLLRDHUP : 0);
}

/* item_key returns the inner epoll's data for it (tag: WSOCK_TAG or 0). */
static uint64_t item_key(const struct epi *it, unsigned tag)
{
	return (uint64_t)(uint32_t)it->ino << 32 |
	       (uint64_t)(uint32_t)it->fd << 1 | tag;
}

/* item_of returns the item an inner event's data names, or NULL when no
 * item of this process has that identity (any more). */
static struct epi *item_of(struct ep *ep, uint64_t key)
{
	int fd = (int)((key >> 1) & 0x7fffffff);
	struct epi *it = fd < ep->cap ? ep->byfd[fd] : NULL;

	if (it && (uint32_t)it->ino == (uint32_t)(key >> 32))
		return it;
	for (it = ep->orphans; it; it = it->onext)
		if (it->fd == fd && (uint32_t)it->ino == (uint32_t)(key >> 32))
			return it;
	return NULL;
}

/* inner_add registers fd in the inner epoll with key; a registration of
 * the same open file and fd number left by a closed item (the kernel keeps
 * it while any process holds the file) is taken over. */
static int inner_add(struct ep *ep, int fd, uint64_t key)
{
	struct epoll_event iev;

	iev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
	iev.data.u64 = key;
	if (REAL(epoll_ctl)(ep->inner, EPOLL_CTL_ADD, fd, &iev) == 0)
		return 0;
	if (errno != EEXIST)
		return -1;
	return REAL(epoll_ctl)(ep->inner, EPOLL_CTL_MOD, fd, &iev);
}

/* reg_wsock registers the writers' wake socket of connection entry e for
 * item it. Two fds of one connection (dups) share that socket: the second
 * item gets a hidden dup of it, as an epoll holds each fd once. */
static int reg_wsock(struct ep *ep, struct epi *it, struct osf_fdt_entry *e)
{
	struct epoll_event iev;
	int w = e ? osf_conn_wake_tx_fd(e) : -1, d;

	if (it->wsock >= 0)
		return 0;
	iev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
	iev.data.u64 = item_key(it, WSOCK_TAG);
	if (REAL(epoll_ctl)(ep->inner, EPOLL_CTL_ADD, w, &iev) == 0) {
		it->wsock = w;
		it->wown = 0;
		return 0;
	}
	if (errno != EEXIST)
		return -1;
	d = osf_fdt_dup_high(w, 1); /* none of the program's fds */
	if (d < 0)
		return -1;
	w = osf_fdt_hide(d, ep->epfd);
	if (w < 0) {
		int err = errno;
		REAL(close)(d);
		return OSF_FAIL(err);
	}
	if (REAL(epoll_ctl)(ep->inner, EPOLL_CTL_ADD, w, &iev) < 0) {
		int err = errno;
		osf_fdt_close_hidden(w);
		return OSF_FAIL(err);
	}
	it->wsock = w;
	it->wown = 1;
	return 0;
}

/* disarm_item ends the wait it was counted in, taking the tokens it is
 * owed from the sockets that fired (woken). */
static void disarm_item(struct epi *it, struct osf_fdt_entry *e, int woken)
{
	if (!it->armed && !woken)
		return;
	osf_conn_disarm(it->at, e, it->armed, woken);
	it->armed = 0;
}

/* arm_item counts it as a waiter and asks its peer for tokens; 1 (and it
 * is not counted) when it turned out ready meanwhile, or when it could not
 * be armed (then the caller looks at it again rather than sleep past it). */
static int arm_item(struct ep *ep, struct epi *it, struct osf_fdt_entry *e)
{
	uint32_t want = it->events | EPOLLERR | EPOLLHUP;
	int kinds = osf_conn_arm_kinds_fd(it->at, e, poll_events(it->events));
	short r;

	if ((kinds & OSF_ARM_TX) && reg_wsock(ep, it, e) < 0)
		return 1;
	r = osf_conn_arm(it->at, e, kinds, it->armed, &ep->trim_due);

	it->armed |= kinds;
	if ((poll_to_epoll(r) & want) &&
	    (!(it->events & EPOLLET) || osf_conn_stamp(it->at, e) != it->stamp)) {
		disarm_item(it, e, 0);
		return 1;
	}
	return 0;
}

/* rec_note records it as it stands now (ep->rec, if any). */
static void rec_note(struct ep *ep, const struct epi *it)
{
	struct eprec_slot *sl;

	if (!ep->rec || it->orphan || (unsigned)it->fd >= EPREC_SLOTS)
		return; /* an orphan's number is not its own any more */
	sl = &ep->rec->slot[it->fd];
	sl->events = it->events;
	sl->data = it->data.u64;
	sl->ino = it->ino;
	sl->state = it->parked ? REC_NONE : it->disabled ? REC_OFF : REC_ON;
	if ((unsigned)it->fd >= ep->rec->hi)
		ep->rec->hi = (unsigned)it->fd + 1;
}

/* rec_create starts ep's record when its epoll fd may cross exec. */
static void rec_create(struct ep *ep)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(ep->epfd);
	struct eprec *rec;
	int fd, hfd, i;

	if (ep->rec || !e || (e->flags & OSF_FDF_CLOEXEC))
		return;
	osf_fdt_high_begin(); /* needs none of the program's fds */
	fd = memfd_create("osf-epoll", MFD_CLOEXEC);
	hfd = fd < 0 ? -1 : osf_fdt_hide(fd, ep->epfd);
	osf_fdt_high_end();
	if (hfd < 0) {
		if (fd >= 0)
			REAL(close)(fd);
		return;
	}
	rec = ftruncate(hfd, (off_t)EPREC_BYTES) < 0
		      ? MAP_FAILED
		      : mmap(NULL, EPREC_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, hfd, 0);
	if (rec == MAP_FAILED) {
		osf_fdt_close_hidden(hfd);
		return;
	}
	rec->magic = EPREC_MAGIC;
	rec->mark = ep->mark;
	rec->slots = EPREC_SLOTS;
	ep->rec = rec;
	ep->rec_fd = hfd;
	ep_entry_sync(ep);
	for (i = 0; i < ep->cap; i++)
		if (ep->byfd[i])
			rec_note(ep, ep->byfd[i]);
}

/* orphan_unlink takes it off ep's orphans. */
static void orphan_unlink(struct ep *ep, struct epi *it)
{
	struct epi **pp;

	for (pp = &ep->orphans; *pp; pp = &(*pp)->onext)
		if (*pp == it) {
			*pp = it->onext;
			break;
		}
	it->orphan = 0;
}

/* orphan keeps it, whose fd is being closed while dup still holds its
 * open file: the kernel's registration is keyed by file and fd number and
 * ends only when the file's last fd closes, so waits go on reporting it
 * (its events, its data) through dup, and its inner registration, of the
 * same file, stays; no epoll_ctl can name it unless its number holds the
 * file again (orphan_take). */
static void orphan(struct ep *ep, struct epi *it, int dup)
{
	if (!it->orphan) {
		if (ep->rec && (unsigned)it->fd < EPREC_SLOTS && !ep->shared)
			ep->rec->slot[it->fd].state = REC_NONE;
		ep->byfd[it->fd] = NULL;
		it->orphan = 1;
		it->onext = ep->orphans;
		ep->orphans = it;
	}
	it->at = dup;
}

/* free_item forgets it; its inner registrations stay to the kernel,
 * which ends them with the open file (events they still bring name an
 * identity no item has, and are ignored). */
static void free_item(struct ep *ep, struct epi *it)
{
	/* A close in a process sharing the epoll (fork) leaves the
	 * registration to the others, as the kernel does. */
	if (ep->rec && !it->orphan && (unsigned)it->fd < EPREC_SLOTS && !ep->shared)
		ep->rec->slot[it->fd].state = REC_NONE;
	if (it->wown)
		osf_fdt_close_hidden(it->wsock);
	list_del(ep, it);
	if (it->orphan)
		orphan_unlink(ep, it);
	else
		ep->byfd[it->fd] = NULL;
	free(it);
}

/* drop_item removes it from ep for good: its fd is being closed. Only a
 * process alone with the inner epoll deletes the registrations (another
 * one may hold the same open file, and it keeps them, as in the kernel). */
static void drop_item(struct ep *ep, struct epi *it)
{
	disarm_item(it, osf_fdt_lookup(it->at), 0); /* nothing if parked */
	if (!ep->shared) {
		if (!it->orphan) /* an orphan's number is not its file's */
			REAL(epoll_ctl)(ep->inner, EPOLL_CTL_DEL, it->fd, NULL);
		if (it->wsock >= 0)
			REAL(epoll_ctl)(ep->inner, EPOLL_CTL_DEL, it->wsock, NULL);
	}
	free_item(ep, it);
}

/* drop_closed removes it, whose fd a signal handler closed while this
 * thread held a mux lock (hold: its connection, still referenced, or
 * NULL): its wait ends on the connection, and the writers' wake socket,
 * still open, leaves the inner epoll; the fd's own registration ended
 * with its open file (or stays with a dup's, naming an identity no item
 * has). */
static void drop_closed(struct ep *ep, struct epi *it, void *hold)
{
	osf_conn_hold_disarm(hold, it->armed);
	it->armed = 0;
	if (hold && !ep->shared && it->wsock >= 0)
		REAL(epoll_ctl)(ep->inner, EPOLL_CTL_DEL, it->wsock, NULL);
	free_item(ep, it);
}

/* stale_item forgets it, whose fd no longer holds its file: closed by a
 * handler on this thread (its close is deferred here) or behind osf's
 * back. */
static void stale_item(struct ep *ep, struct epi *it)
{
	drop_closed(ep, it, mu_depth ? deferred_hold(it->at, it->ino) : NULL);
}

static void note_pending(struct ep *ep, int op, int fd, struct epoll_event *ev);

/* same_file reports whether it still describes the file at its fd: the
 * fd was not closed and reused behind osf's back (syscall(SYS_close)). */
static int same_file(const struct epi *it, const struct osf_fdt_entry *e)
{
	return e && (osf_kind_is_conn(e->kind) || e->kind == OSF_FD_KERNEL) &&
	       e->ino == it->ino;
}

/* gw_settled reports an item of a kernel socket whose connect through a
 * gateway has settled: the kernel reports it from now on. */
static int gw_settled(const struct osf_fdt_entry *e)
{
	return unlikely(e->kind == OSF_FD_KERNEL) && !osf_gw_pending(e);
}

/* gw_convert hands it, such an item, to the kernel: registered in the
 * application's epoll with its events and data (unless the application
 * deleted it), and out of the inner one. */
static void gw_convert(struct ep *ep, struct epi *it)
{
	struct epoll_event ev;

	ev.events = it->events;
	ev.data = it->data;
	if (it->disabled) /* a one-shot that fired: stays off until MOD */
		ev.events = EPOLLONESHOT | EPOLLET;
	REAL(epoll_ctl)(ep->inner, EPOLL_CTL_DEL, it->fd, NULL);
	if (!it->parked && REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, it->fd, &ev) == 0)
		note_pending(ep, EPOLL_CTL_ADD, it->fd, &ev);
	free_item(ep, it);
}

/* kick wakes the waits asleep in the kernel on ep (the lock is held). */
static void kick(struct ep *ep)
{
	uint64_t one = 1;
	struct epoll_event iev;
	int k;

	if (!ep->sleepers && !ep->young)
		return;
	if (ep->kick < 0) {
		osf_fdt_high_begin(); /* none of the program's fds */
		k = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (k >= 0)
			k = osf_fdt_hide(k, ep->epfd);
		osf_fdt_high_end();
		if (k < 0)
			return;
		iev.events = EPOLLIN | EPOLLET;
		iev.data.u64 = KICK_KEY;
		if (REAL(epoll_ctl)(ep->inner, EPOLL_CTL_ADD, k, &iev) < 0) {
			osf_fdt_close_hidden(k);
			return;
		}
		ep->kick = k;
	}
	(void)!REAL(write)(ep->kick, &one, sizeof(one));
}

/* orphan_take gives back to fd the orphan registered under fd when fd
 * holds its file again (a dup2 onto fd of a dup): the kernel's
 * registration, keyed by file and fd number, is fd's again. */
static struct epi *orphan_take(struct ep *ep, int fd, struct osf_fdt_entry *e)
{
	struct epi *it;

	for (it = ep->orphans; it; it = it->onext)
		if (it->fd == fd && same_file(it, e))
			break;
	if (!it || ep_grow(ep, fd) < 0)
		return NULL;
	orphan_unlink(ep, it);
	it->at = fd;
	ep->byfd[fd] = it;
	rec_note(ep, it);
	return it;
}

/* The events EPOLLEXCLUSIVE may come with (the kernel's
 * EPOLLEXCLUSIVE_OK_BITS). */
#define EXCLUSIVE_OK (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | \
		      EPOLLET | EPOLLEXCLUSIVE)

/* ctl_conn registers, changes or removes an offloaded connection. */
static int ctl_conn(struct ep *ep, int op, int fd, struct epoll_event *ev)
{
	struct epi *it = fd < ep->cap ? ep->byfd[fd] : NULL;
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);

	/* As do_epoll_ctl, before it looks the item up: EPOLLEXCLUSIVE only
	 * on ADD, and only with EXCLUSIVE_OK. */
	if (op != EPOLL_CTL_DEL && (ev->events & EPOLLEXCLUSIVE) &&
	    (op == EPOLL_CTL_MOD || (ev->events & ~(uint32_t)EXCLUSIVE_OK)))
		return OSF_FAIL(EINVAL);

	if (it && !same_file(it, e)) {
		/* fd was closed behind osf's back (or by a handler): the
		 * kernel ended that registration with the file. */
		stale_item(ep, it);
		it = NULL;
	}
	if (!it && ep->orphans)
		it = orphan_take(ep, fd, e);
	switch (op) {
	case EPOLL_CTL_ADD:
		if (it && !it->parked)
			return OSF_FAIL(EEXIST);
		if (it) {
			/* Registered before and not closed since: the same
			 * connection, still in the inner epoll. */
			it->parked = 0;
			it->woken = 0;
		} else {
			if (ep_inner(ep) < 0 || ep_grow(ep, fd) < 0)
				return -1;
			it = calloc(1, sizeof(*it));
			if (!it)
				return OSF_FAIL(ENOMEM);
			it->fd = it->at = fd;
			it->ino = e ? e->ino : 0;
			it->wsock = -1;
			if (inner_add(ep, fd, item_key(it, 0)) < 0) {
				int err = errno;
				free(it);
				return OSF_FAIL(err);
			}
			ep->byfd[fd] = it;
		}
		/* fallthrough */
	case EPOLL_CTL_MOD:
		if (!it || it->parked)
			return OSF_FAIL(ENOENT);
		if (op == EPOLL_CTL_MOD && (it->events & EPOLLEXCLUSIVE))
			return OSF_FAIL(EINVAL); /* an exclusive wait stays so */
		disarm_item(it, e, 0);
		it->events = ev->events;
		it->data = ev->data;
		it->disabled = 0;
		if (unlikely(!ep->rec))
			rec_create(ep);
		rec_note(ep, it);
		list_add(ep, it);
		/* The kernel wakes a wait already asleep when the fd it adds
		 * (or modifies) is ready, or becomes so: kick it now, or arm
		 * the item so that the peer's token wakes it. */
		if (poll_to_epoll(osf_conn_poll(fd, e)) &
		    (it->events | EPOLLERR | EPOLLHUP)) {
			kick(ep);
		} else if (ep->sleepers || ep->young) {
			list_del(ep, it);
			if (arm_item(ep, it, e)) { /* raced to ready */
				list_add(ep, it);
				kick(ep);
			}
		}
		return 0;
	case EPOLL_CTL_DEL:
		if (!it || it->parked)
			return OSF_FAIL(ENOENT);
		disarm_item(it, e, 0);
		list_del(ep, it);
		it->parked = 1;
		rec_note(ep, it);
		return 0;
	}
	return OSF_FAIL(EINVAL);
}

static void note_listener(struct ep *ep, int fd, int add)
{
	int i;

	for (i = 0; i < ep->nlisteners; i++)
		if (ep->listeners[i] == fd) {
			if (!add)
				ep->listeners[i] = ep->listeners[--ep->nlisteners];
			return;
		}
	if (!add)
		return;
	if (ep->nlisteners == ep->caplisteners) {
		int cap = ep->caplisteners ? 2 * ep->caplisteners : 8;
		int *n = realloc(ep->listeners, (size_t)cap * sizeof(int));
		if (!n)
			return;
		ep->listeners = n;
		ep->caplisteners = cap;
	}
	ep->listeners[ep->nlisteners++] = fd;
}

/* note_pending remembers (or forgets) how an undecided TCP socket is
 * registered: if it becomes offloaded, its wake socket replaces it and
 * the kernel silently drops the registration, which osf then redoes. */
static void note_pending(struct ep *ep, int op, int fd, struct epoll_event *ev)
{
	int i;

	for (i = 0; i < ep->npend; i++)
		if (ep->pendfd[i] == fd)
			break;
	if (op == EPOLL_CTL_DEL || !ev) {
		if (i < ep->npend) {
			ep->npend--;
			ep->pendfd[i] = ep->pendfd[ep->npend];
			ep->pend[i] = ep->pend[ep->npend];
		}
		return;
	}
	if (i == ep->npend) {
		if (ep->npend == ep->cappend) {
			int cap = ep->cappend ? 2 * ep->cappend : 8;
			struct epoll_event *p = realloc(ep->pend, (size_t)cap * sizeof(*p));
			int *f;
			if (!p)
				return;
			ep->pend = p;
			f = realloc(ep->pendfd, (size_t)cap * sizeof(int));
			if (!f)
				return;
			ep->pendfd = f;
			ep->cappend = cap;
		}
		ep->npend++;
	}
	ep->pendfd[i] = fd;
	ep->pend[i] = *ev;
}

void osf_mux_offloaded(int fd)
{
	struct osf_fdt_entry *t = osf_fdt_lookup(fd);
	struct ep *ep;
	int i;

	if (!all_eps || !t)
		return;
	mu_lock(&all_lock);
	for (ep = all_eps; ep; ep = ep->next_ep) {
		mu_lock(&ep->lock);
		for (i = 0; i < ep->npend; i++) {
			struct epoll_event ev;
			if (ep->pendfd[i] != fd)
				continue;
			ev = ep->pend[i];
			if (osf_kind_is_conn(t->kind)) {
				ctl_conn(ep, EPOLL_CTL_ADD, fd, &ev);
			} else if (osf_gw_pending(t)) {
				/* Same file: the kernel's registration would
				 * say writable before the gateway answers. */
				REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_DEL, fd, NULL);
				if (ctl_conn(ep, EPOLL_CTL_ADD, fd, &ev) == 0)
					__atomic_or_fetch(&t->flags, OSF_FDF_GWITEMS,
							  __ATOMIC_RELEASE);
			} else if (t->kind == OSF_FD_LISTEN) {
				REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, t->aux_fd, &ev);
				note_listener(ep, fd, 1);
			}
			note_pending(ep, EPOLL_CTL_DEL, fd, NULL);
			break;
		}
		mu_unlock(&ep->lock);
	}
	mu_unlock(&all_lock);
}

/* recheck puts it back on the may-be-ready list when it waits for any of
 * events on the connection priv (all: any connection; then an item whose
 * fd no longer holds its file goes); 1 when it did. */
static int recheck(struct ep *ep, struct epi *it, int all, uint64_t priv, uint32_t events)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(it->at);

	if (all && !same_file(it, e)) {
		stale_item(ep, it); /* a close deferred unnoted */
		return 0;
	}
	if (it->parked || it->disabled || !same_file(it, e) ||
	    (!all && e->priv != priv) ||
	    (events != OSF_MUX_ALL && !(it->events & events)))
		return 0;
	disarm_item(it, e, 0);
	list_add(ep, it);
	return 1;
}

/* changed is osf_mux_changed with no mux lock held by this thread; fd -1
 * re-checks every item (deferred re-checks overflowed). */
static void changed(int fd, int dups, uint32_t events)
{
	struct osf_fdt_entry *t = fd >= 0 ? osf_fdt_lookup(fd) : NULL;
	uint64_t priv = t ? __atomic_load_n(&t->priv, __ATOMIC_ACQUIRE) : 0;
	int all = fd < 0;
	struct ep *ep;
	int i;

	if (!all_eps || (!priv && !all))
		return;
	if (all)
		dups = 1, events = OSF_MUX_ALL;
	mu_lock(&all_lock);
	for (ep = all_eps; ep; ep = ep->next_ep) {
		struct epi *it, *next;
		int found = 0;
		mu_lock(&ep->lock);
		for (i = dups ? 0 : fd; i < ep->cap && (dups || i == fd); i++)
			if (ep->byfd[i])
				found |= recheck(ep, ep->byfd[i], all, priv, events);
		for (it = ep->orphans; it; it = next) {
			next = it->onext;
			if (dups || it->at == fd)
				found |= recheck(ep, it, all, priv, events);
		}
		if (found)
			kick(ep);
		mu_unlock(&ep->lock);
	}
	mu_unlock(&all_lock);
}

void osf_mux_changed(int fd, int dups, uint32_t events)
{
	if (!all_eps)
		return;
	if (mu_depth) { /* a handler on a thread inside the mux */
		struct deferred d = {.op = DEFER_CHANGED, .fd = fd, .dups = dups,
				     .events = events};
		defer_op(&d);
	} else
		changed(fd, dups, events);
}

/* rekey moves the registration of hidden fd old in epoll epfd, if any,
 * to nfd, with the same events and data (read from the kernel's fdinfo):
 * the kernel keys a registration by fd number and file, so the one made
 * under the old number would outlive every later EPOLL_CTL_DEL. Both
 * numbers hold the same file meanwhile. */
static void rekey(int epfd, int old, int nfd)
{
	char path[64], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		struct epoll_event ev;
		unsigned long long data;
		unsigned events;
		int tfd;
		if (sscanf(line, "tfd: %d events: %x data: %llx", &tfd, &events,
			   &data) != 3 ||
		    tfd != old)
			continue;
		ev.events = events;
		ev.data.u64 = data;
		if (REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, nfd, &ev) == 0)
			(void)REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, old, NULL);
		break;
	}
	fclose(f);
}

void osf_mux_hidden_moved(int old, int nfd)
{
	struct ep *ep;
	struct epi *it;
	int i;

	if (!all_eps)
		return;
	mu_lock(&all_lock);
	for (ep = all_eps; ep; ep = ep->next_ep) {
		struct osf_fdt_entry *e = osf_fdt_lookup(ep->epfd);
		mu_lock(&ep->lock);
		if (e && ep_of(e) == ep) {
			rekey(ep->epfd, old, nfd); /* inner, companions */
			if (ep->inner >= 0)
				rekey(ep->inner, old, nfd); /* wake sockets, kick */
		}
		if (ep->inner == old)
			__atomic_store_n(&ep->inner, nfd, __ATOMIC_RELEASE);
		if (ep->kick == old)
			ep->kick = nfd;
		if (ep->rec_fd == old)
			ep->rec_fd = nfd;
		for (i = 0; i < ep->cap; i++)
			if (ep->byfd[i] && ep->byfd[i]->wsock == old)
				ep->byfd[i]->wsock = nfd;
		for (it = ep->orphans; it; it = it->onext)
			if (it->wsock == old)
				it->wsock = nfd;
		mu_unlock(&ep->lock);
	}
	mu_unlock(&all_lock);
}

/* ctl_item is epoll_ctl of an fd whose registrations are items of osf's
 * (an offloaded connection, or a socket connecting through a gateway). */
static int ctl_item(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct ep *ep;
	int r;

	if (epfd == fd)
		return OSF_FAIL(EINVAL);
	if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && !ev)
		return OSF_FAIL(EFAULT);
	ep = ep_find(epfd);
	if (!ep) {
		/* Is epfd an epoll fd at all? Let the kernel say. */
		struct epoll_event probe = {0, {0}};
		if (REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, fd, &probe) < 0 &&
		    errno != ENOENT)
			return -1;
		ep = ep_create(epfd);
		if (!ep)
			return -1;
	}
	mu_lock(&ep->lock);
	r = ctl_conn(ep, op, fd, ev);
	mu_unlock(&ep->lock);
	return r;
}

/* ctl_gw is epoll_ctl for a kernel socket connecting through a gateway:
 * an item of osf's while it waits (or failed, SO_ERROR unread), the
 * kernel's registration once settled. */
static int ctl_gw(int epfd, int op, int fd, struct epoll_event *ev,
		  struct osf_fdt_entry *t)
{
	struct ep *ep = ep_find(epfd);
	struct epi *it;
	int r;

	if (osf_gw_pending(t)) {
		r = ctl_item(epfd, op, fd, ev);
		if (r == 0 && op == EPOLL_CTL_ADD)
			__atomic_or_fetch(&t->flags, OSF_FDF_GWITEMS, __ATOMIC_RELEASE);
		return r;
	}
	if (ep) { /* settled: hand a waiting item over first */
		mu_lock(&ep->lock);
		it = fd < ep->cap ? ep->byfd[fd] : NULL;
		if (it && same_file(it, t))
			gw_convert(ep, it);
		note_pending(ep, op, fd, ev);
		mu_unlock(&ep->lock);
	}
	return REAL(epoll_ctl)(epfd, op, fd, ev);
}

void osf_mux_gw_settled(int fd)
{
	struct osf_fdt_entry *t = osf_fdt_lookup(fd);
	struct ep *ep;

	if (!all_eps || !t)
		return;
	mu_lock(&all_lock);
	for (ep = all_eps; ep; ep = ep->next_ep) {
		struct epi *it;
		mu_lock(&ep->lock);
		it = fd < ep->cap ? ep->byfd[fd] : NULL;
		if (it && same_file(it, t)) {
			gw_convert(ep, it);
			kick(ep); /* a wait asleep picks the kernel's up */
		}
		mu_unlock(&ep->lock);
	}
	mu_unlock(&all_lock);
}

OSF_EXPORT int epoll_create(int size) { return REAL(epoll_create)(size); }

OSF_EXPORT int epoll_create1(int flags) { return REAL(epoll_create1)(flags); }

OSF_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct osf_fdt_entry *t = osf_fdt_lookup(fd);
	struct ep *ep;
	int r;

	if (likely(!t || !osf_kind_may_offload(t->kind))) {
		if (likely(!t || t->kind != OSF_FD_KERNEL ||
			   !(__atomic_load_n(&t->flags, __ATOMIC_ACQUIRE) &
			     (OSF_FDF_GWWAIT | OSF_FDF_GWERR | OSF_FDF_GWITEMS))))
			return REAL(epoll_ctl)(epfd, op, fd, ev);
		return ctl_gw(epfd, op, fd, ev, t);
	}
	if (t->kind == OSF_FD_INET) {
		/* The registration is the kernel socket's: connect must not
		 * keep it alive behind the wake socket (OSF_FDF_NOKEEP). */
		__atomic_or_fetch(&t->flags, OSF_FDF_NOKEEP, __ATOMIC_RELAXED);
		r = REAL(epoll_ctl)(epfd, op, fd, ev);
		if (r == 0 && (ep = ep_create(epfd)) != NULL) {
			mu_lock(&ep->lock);
			note_pending(ep, op, fd, ev);
			mu_unlock(&ep->lock);
		}
		return r;
	}
	if (t->kind == OSF_FD_LISTEN) {
		/* The companion joins with the application's own data. */
		r = REAL(epoll_ctl)(epfd, op, fd, ev);
		if (r < 0)
			return r;
		(void)REAL(epoll_ctl)(epfd, op, t->aux_fd, ev);
		ep = ep_create(epfd);
		if (ep) {
			mu_lock(&ep->lock);
			note_listener(ep, fd, op != EPOLL_CTL_DEL);
			mu_unlock(&ep->lock);
		}
		return r;
	}
	return ctl_item(epfd, op, fd, ev);
}

/* blind_item: an edge-triggered item waiting for input on a connection
 * whose wake socket this side shut for reading (osf_conn_rx_blind): after
 * SHUT_RD TCP still reports every arrival as an edge, but no token comes,
 * so it stays idle, unarmed, and the wait looks at its rings every
 * OSF_BLIND_MS (a level-triggered one is ready for ever after SHUT_RD). */
static int blind_item(const struct epi *it, struct osf_fdt_entry *e)
{
	return (it->events & EPOLLET) && (it->events & (EPOLLIN | EPOLLRDNORM)) &&
	       osf_conn_rx_blind(it->at, e);
}

/* go_idle parks an item that needs a new edge (or readiness) on the idle
 * list, unarmed; past IDLE_MAX it is armed at once instead (a blind one
 * never: it stays idle). */
static void go_idle(struct ep *ep, struct epi *it, struct osf_fdt_entry *e)
{
	it->stamp = osf_conn_stamp(it->at, e);
	if (ep->nidle < IDLE_MAX || blind_item(it, e)) {
		list_put(ep, it, ON_IDLE);
		return;
	}
	list_del(ep, it);
	if (arm_item(ep, it, e))
		list_add(ep, it); /* it raced to ready */
}

/* collect reports the items of the may-be-ready list into out, each at
 * most once per wait. */
static int collect(struct ep *ep, struct epoll_event *out, int max)
{
	struct epi *it = ep->head.next, *next;
	int n = 0;

	for (; it != &ep->head && n < max; it = next) {
		struct osf_fdt_entry *e = osf_fdt_lookup(it->at);
		uint32_t want = it->events | EPOLLERR | EPOLLHUP, ev;
		next = it->next;
		if (!same_file(it, e)) {
			stale_item(ep, it); /* closed */
			continue;
		}
		if (gw_settled(e)) {
			gw_convert(ep, it);
			continue;
		}
		if (it->disabled) {
			list_del(ep, it);
			continue;
		}
		if (it->seen == ep->wait)
			continue;
		ev = poll_to_epoll(osf_conn_poll(it->at, e)) & want;
		if (gw_settled(e)) { /* it just did: the kernel reports it */
			gw_convert(ep, it);
			continue;
		}
		if (!ev) {
			go_idle(ep, it, e);
			continue;
		}
		out[n].events = ev;
		out[n].data = it->data;
		it->seen = ep->wait;
		n++;
		if (it->events & EPOLLONESHOT) {
			it->disabled = 1;
			rec_note(ep, it);
			list_del(ep, it);
		} else if (it->events & EPOLLET) {
			go_idle(ep, it, e); /* the next edge: positions move */
		}
	}
	return n;
}

/* idle_check moves idle items that became ready (edge-triggered: that saw
 * a new edge) to the ready list; 1 when any did. */
static int idle_check(struct ep *ep)
{
	struct epi *it = ep->idle.next, *next;
	int moved = 0;

	for (; it != &ep->idle; it = next) {
		struct osf_fdt_entry *e = osf_fdt_lookup(it->at);
		uint32_t want = it->events | EPOLLERR | EPOLLHUP;
		next = it->next;
		if (!same_file(it, e)) {
			stale_item(ep, it);
			continue;
		}
		if (gw_settled(e)) {
			gw_convert(ep, it);
			moved = 1; /* the kernel may report it now */
			continue;
		}
		if ((it->events & EPOLLET) && osf_conn_stamp(it->at, e) == it->stamp)
			continue;
		if (poll_to_epoll(osf_conn_poll(it->at, e)) & want) {
			list_add(ep, it);
			moved = 1;
		}
	}
	return moved;
}

/* arm_idle arms every idle item before the wait sleeps in the kernel; 1
 * when one turned out ready meanwhile (then the wait must not sleep). */
static int arm_idle(struct ep *ep)
{
	struct epi *it = ep->idle.next, *next;
	int ready = 0;

	for (; it != &ep->idle; it = next) {
		struct osf_fdt_entry *e = osf_fdt_lookup(it->at);
		next = it->next;
		if (!same_file(it, e)) {
			stale_item(ep, it);
			continue;
		}
		if (gw_settled(e)) {
			gw_convert(ep, it);
			ready = 1; /* the kernel may report it now */
			continue;
		}
		if (blind_item(it, e)) {
			ep->blind = 1;
			continue;
		}
		list_del(ep, it);
		if (arm_item(ep, it, e)) {
			list_add(ep, it);
			ready = 1;
		}
	}
	return ready;
}

/* trim_idle gives back the ring pages of the armed items, idle for
 * OSF_TRIM_IDLE_MS (ep locked). */
static void trim_idle(struct ep *ep)
{
	struct epi *it;
	int fd;

	for (fd = 0; fd < ep->cap; fd++) {
		it = ep->byfd[fd];
		if (it && (it->armed & OSF_ARM_RX) && !it->parked)
			osf_conn_trim(fd, osf_fdt_lookup(fd));
	}
	for (it = ep->orphans; it; it = it->onext)
		if (it->armed & OSF_ARM_RX)
			osf_conn_trim(it->at, osf_fdt_lookup(it->at));
	ep->trim_due = 0;
	ep->quiet_since = 0;
}

/* absorb takes the inner epoll's events: woken items join the list.
 * Events that name no item of this process (a kick, a registration of a
 * closed fd or of another process's item) only wake. */
static void absorb(struct ep *ep)
{
	struct epoll_event tmp[64];
	int n, i;

	if (ep->inner < 0)
		return;
	do {
		n = REAL(epoll_wait)(ep->inner, tmp, 64, 0);
		for (i = 0; i < n; i++) {
			uint64_t u = tmp[i].data.u64;
			struct epi *it;
			if (u == KICK_KEY) {
				uint64_t v;
				(void)!REAL(read)(ep->kick, &v, sizeof(v));
				continue;
			}
			it = item_of(ep, u);
			if (it)
				it->woken |= (u & WSOCK_TAG) ? OSF_ARM_TX : OSF_ARM_RX;
		}
		/* Then each woken item once: its tokens, the other side's end
		 * (a deleted item's too: the edge will not come again when it
		 * is added back), and the list. */
		for (i = 0; i < n; i++) {
			struct epi *it = tmp[i].data.u64 == KICK_KEY
						 ? NULL
						 : item_of(ep, tmp[i].data.u64);
			struct osf_fdt_entry *e;
			if (!it || !it->woken)
				continue;
			e = osf_fdt_lookup(it->at);
			disarm_item(it, e, it->woken);
			it->woken = 0;
			if (it->disabled || it->parked)
				continue;
			/* A token an edge-triggered item's own wait did not ask
			 * for (another waiter's, or one an exec'd image's wait
			 * left armed) is no edge unless the rings moved since
			 * its last report. */
			if ((it->events & EPOLLET) && osf_conn_stamp(it->at, e) == it->stamp)
				go_idle(ep, it, e);
			else
				list_add(ep, it);
		}
	} while (n == 64);
}

/* ep_adopt gives an epoll fd that crossed exec with a record of its
 * registrations (struct eprec) the state of this image: the inner epoll
 * and its marker, and an item for every recorded registration whose fd
 * is still the same connection. NULL when there is nothing to adopt. */
static struct ep *ep_adopt(int epfd, struct osf_fdt_entry *e)
{
	static int adopt_lock;
	struct osf_fdt_entry old;
	struct osf_fdt_entry *h;
	struct eprec *rec;
	struct ep *ep;
	unsigned fd;

	mu_lock(&adopt_lock);
	old = *e;
	if ((ep = ep_of(e)) != NULL || old.kind != OSF_FD_EPOLL || old.aux2_fd < 0) {
		mu_unlock(&adopt_lock);
		return ep;
	}
	rec = mmap(NULL, EPREC_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, old.aux2_fd, 0);
	if (rec != MAP_FAILED && (rec->magic != EPREC_MAGIC || rec->slots != EPREC_SLOTS)) {
		munmap(rec, EPREC_BYTES);
		rec = MAP_FAILED;
	}
	ep = rec == MAP_FAILED ? NULL : ep_create(epfd);
	if (!ep) {
		if (rec != MAP_FAILED)
			munmap(rec, EPREC_BYTES);
		mu_unlock(&adopt_lock);
		return NULL;
	}
	ep->mark = rec->mark;
	ep->rec = rec;
	ep->rec_fd = old.aux2_fd;
	h = old.aux_fd >= 0 ? osf_fdt_lookup(old.aux_fd) : NULL;
	if (h && h->kind == OSF_FD_HIDDEN)
		ep->inner = old.aux_fd; /* still nested under rec->mark */
	ep_entry_sync(ep);
	mu_lock(&ep->lock);
	for (fd = 0; fd < rec->hi && fd < EPREC_SLOTS; fd++) {
		struct eprec_slot sl = rec->slot[fd];
		struct osf_fdt_entry *c = osf_fdt_lookup((int)fd);
		struct epoll_event ev;
		if (sl.state == REC_NONE)
			continue;
		rec->slot[fd].state = REC_NONE;
		if (!c || !osf_kind_is_conn(c->kind) || c->ino != sl.ino)
			continue; /* closed, or another file now */
		ev.events = sl.events;
		ev.data.u64 = sl.data;
		if (ctl_conn(ep, EPOLL_CTL_ADD, (int)fd, &ev) == 0 && sl.state == REC_OFF) {
			struct epi *it = ep->byfd[fd];
			it->disabled = 1;
			list_del(ep, it);
			rec_note(ep, it);
		}
	}
	mu_unlock(&ep->lock);
	mu_unlock(&adopt_lock);
	return ep;
}

/* ep_find returns epfd's state in this image, adopting what an epoll fd
 * brought across exec, or NULL. */
static struct ep *ep_find(int epfd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(epfd);
	struct ep *ep = ep_of(e);

	if (likely(ep || !e || e->kind != OSF_FD_EPOLL))
		return ep;
	return ep_adopt(epfd, e);
}

/* strip removes osf's marker from kernel results; 1 when it was there. */
static int strip(struct ep *ep, struct epoll_event *ev, int *n)
{
	int i, found = 0;

	for (i = 0; i < *n; i++)
		if (ev[i].data.u64 == marker(ep)) {
			ev[i] = ev[--*n];
			found = 1;
			i--;
		}
	return found;
}

/* mux_epoll is epoll_wait over an epoll with offloaded members: collect
 * ready items, spin, arm the idle ones, sleep in the kernel, strip osf's
 * own events, collect again. One loop (about 90 lines) because the spin
 * budget, the sleeper count and errno must be settled on every exit. */
static int mux_epoll(struct ep *ep, struct epoll_event *ev, int max,
		     long timeout, const sigset_t *mask)
{
	long start = mono_ms(), spin_end = osf_spin_until(timeout);
	int spun = 0;
	int saved = errno; /* a successful wait leaves errno alone */
	unsigned intr = osf_intr_count();

	if (max <= 0 || max > INT_MAX / (int)sizeof(*ev))
		return OSF_FAIL(EINVAL);
	for (;;) {
		int n = 0, k = 0, to, sleep_ok = 0, trim;
		mu_lock(&ep->lock);
		ep->young = 0; /* waits from now on are counted */
		ep->wait++;
		idle_check(ep);
		/* Offloaded readiness first on every other wait, kernel events
		 * first on the others (fairness when both keep coming). */
		if (!(ep->turn++ & 1))
			n = collect(ep, ev, max);
		if (spin_end && !osf_spinning(spin_end)) {
			osf_spin_paid(0); /* it spun in vain */
			spin_end = 0;
		}
		if (!n && !spin_end) {
			/* May sleep only with nothing ready on the list and every
			 * idle item armed, so that the peers wake us (blind ones
			 * stay idle: then for OSF_BLIND_MS at most). */
			n = collect(ep, ev, max);
			ep->blind = 0;
			if (!n && arm_idle(ep))
				n = collect(ep, ev, max);
			sleep_ok = !n;
		}
		if (n == max) { /* every slot filled: no room for the kernel's */
			mu_unlock(&ep->lock);
			if (spin_end && spun)
				osf_spin_paid(1);
			errno = saved;
			return n;
		}
		to = sleep_ok ? remaining(timeout, start) : 0;
		if (sleep_ok && ep->blind && (to < 0 || to > OSF_BLIND_MS))
			to = OSF_BLIND_MS;
		/* Armed connections with ring pages to give back: they are idle
		 * once the waits on ep have reported nothing for
		 * OSF_TRIM_IDLE_MS in all (an event loop's timer may cut each
		 * wait shorter); sleep no longer than that, then trim. */
		trim = 0;
		if (sleep_ok && ep->trim_due) {
			long now = mono_ms(), left;
			if (!ep->quiet_since)
				ep->quiet_since = now;
			left = ep->quiet_since + OSF_TRIM_IDLE_MS - now;
			if (left < 0)
				left = 0;
			if (to < 0 || to >= left) {
				to = (int)left;
				trim = 1;
			}
		}
		if (to && osf_intr_count() != intr) {
			/* A handler ran in osf's part of the call (n is 0):
			 * the kernel's wait would not sleep past it. */
			mu_unlock(&ep->lock);
			return OSF_FAIL(EINTR);
		}
		if (to)
			ep->sleepers++;
		mu_unlock(&ep->lock);
		k = REAL(epoll_pwait)(ep->epfd, ev + n, max - n, to, mask);
		mu_lock(&ep->lock);
		if (to)
			ep->sleepers--;
		if (k < 0) {
			int err = errno;
			mu_unlock(&ep->lock);
			if (n > 0) {
				errno = saved;
				return n;
			}
			return OSF_FAIL(err);
		}
		if (trim && k == 0)
			trim_idle(ep);
		if (strip(ep, ev + n, &k))
			absorb(ep);
		n += k;
		if (n < max)
			n += collect(ep, ev + n, max - n);
		if (n > 0)
			ep->quiet_since = 0;
		mu_unlock(&ep->lock);
		if (n > 0 && spin_end && spun)
			osf_spin_paid(1);
		if (n > 0 || remaining(timeout, start) == 0) {
			errno = saved;
			return n;
		}
		if (osf_intr_count() != intr) /* a handler ran between sleeps */
			return OSF_FAIL(EINTR);
		spun = spin_end != 0;
	}
}

/* passed checks what a wait that went straight to the kernel got: when
 * epfd gained an inner epoll meanwhile (another thread registered an
 * offloaded fd), osf's marker may be among the events, and it is never
 * the application's. The wait then goes on as osf's own. */
static int passed(int epfd, struct epoll_event *ev, int max, int r,
		  long timeout, const sigset_t *mask)
{
	struct ep *ep;

	if (likely(r <= 0))
		return r;
	ep = ep_find(epfd);
	if (likely(!ep || __atomic_load_n(&ep->inner, __ATOMIC_ACQUIRE) < 0))
		return r;
	mu_lock(&ep->lock);
	ep->wait++;
	if (strip(ep, ev, &r))
		absorb(ep);
	if (r < max)
		r += collect(ep, ev + r, max - r);
	mu_unlock(&ep->lock);
	if (r > 0)
		return r;
	return mux_epoll(ep, ev, max, timeout, mask);
}

OSF_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max,
			  int timeout)
{
	struct ep *ep = ep_find(epfd);

	osf_reap_kick(); /* may sleep: the reaper may have work */
	if (likely(!ep || ep->inner < 0))
		return passed(epfd, ev, max, REAL(epoll_wait)(epfd, ev, max, timeout),
			      timeout < 0 ? -1 : timeout, NULL);
	return mux_epoll(ep, ev, max, timeout < 0 ? -1 : timeout, NULL);
}

OSF_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max,
			   int timeout, const sigset_t *mask)
{
	struct ep *ep = ep_find(epfd);

	osf_reap_kick(); /* may sleep: the reaper may have work */
	if (likely(!ep || ep->inner < 0))
		return passed(epfd, ev, max,
			      REAL(epoll_pwait)(epfd, ev, max, timeout, mask),
			      timeout < 0 ? -1 : timeout, mask);
	return mux_epoll(ep, ev, max, timeout < 0 ? -1 : timeout, mask);
}

OSF_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			    const struct timespec *ts, const sigset_t *mask)
{
	struct ep *ep = ep_find(epfd);

	osf_reap_kick(); /* may sleep: the reaper may have work */
	if (likely(!ep || ep->inner < 0))
		return passed(epfd, ev, max,
			      REAL(epoll_pwait2)(epfd, ev, max, ts, mask),
			      ts_ms(ts), mask);
	if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
		return OSF_FAIL(EINVAL);
	return mux_epoll(ep, ev, max, ts_ms(ts), mask);
}

/* ---- closing ------------------------------------------------------------------- */

/* DUP_UNKNOWN: whether a dup of a closing fd's file stays open has not
 * been looked up yet (close_dup). */
#define DUP_UNKNOWN (-2)

/* close_dup returns *dup, looking it up first (osf_conn_dup_fd) if need
 * be: only a close that leaves a registered item pays for it. */
static int close_dup(int *dup, int fd, struct osf_fdt_entry *e, uint64_t ino)
{
	if (*dup == DUP_UNKNOWN)
		*dup = osf_conn_dup_fd(fd, e, ino);
	return *dup;
}

/* forget is a close that a signal handler deferred to its thread's last
 * mux unlock: fd's items that still have the closed file's identity ino
 * go (the number may hold a new file by now), or live on through a dup
 * of the file (orphan), and so does fd's pending registration, unless fd
 * is an undecided socket again. */
static void forget(int fd, uint64_t ino, void *hold)
{
	struct ep *ep;
	int reused = osf_fdt_kind(fd) == OSF_FD_INET, dup = DUP_UNKNOWN;

	mu_lock(&all_lock);
	for (ep = all_eps; ep; ep = ep->next_ep) {
		struct epi *it, *next;
		mu_lock(&ep->lock);
		it = fd < ep->cap ? ep->byfd[fd] : NULL;
		if (it && it->ino == ino) {
			if (!it->parked && close_dup(&dup, fd, NULL, ino) >= 0)
				orphan(ep, it, dup);
			else
				drop_closed(ep, it, hold);
		}
		for (it = ep->orphans; it; it = next) {
			next = it->onext;
			if (it->at != fd || it->ino != ino)
				continue;
			if (close_dup(&dup, fd, NULL, ino) >= 0)
				it->at = dup;
			else
				drop_closed(ep, it, hold);
		}
		if (!reused)
			note_pending(ep, EPOLL_CTL_DEL, fd, NULL);
		mu_unlock(&ep->lock);
	}
	mu_unlock(&all_lock);
}

/* osf_mux_forget drops fd from every epoll of this process: the program
 * is closing it. An item whose file stays open through a dup lives on
 * (orphan), as its registration does in the kernel. A signal handler on a thread that holds a mux lock (its
 * close interrupted an epoll_wait collecting items, an epoll_ctl) must
 * not wait for it: the drop is deferred to the thread's last mux unlock
 * (forget), holding the connection so that its items' waits can end
 * there; the close itself goes on at once. */
void osf_mux_forget(int fd)
{
	struct osf_fdt_entry *e;
	struct ep *ep;
	int dup = DUP_UNKNOWN;

	if (!all_eps)
		return;
	e = osf_fdt_lookup(fd);
	if (mu_depth) {
		struct deferred d = {.op = DEFER_FORGET, .fd = fd};
		if (!e)
			return;
		d.ino = e->ino;
		d.hold = osf_kind_is_conn(e->kind) ? osf_conn_hold(fd, e) : NULL;
		if (!defer_op(&d))
			osf_conn_unhold(d.hold); /* never the last reference: fd's */
		return;
	}
	mu_lock(&all_lock);
	for (ep = all_eps; ep; ep = ep->next_ep) {
		struct epi *it, *next;
		mu_lock(&ep->lock);
		it = fd < ep->cap ? ep->byfd[fd] : NULL;
		if (it) {
			if (!it->parked && same_file(it, e) &&
			    close_dup(&dup, fd, e, 0) >= 0)
				orphan(ep, it, dup);
			else
				drop_item(ep, it);
		}
		for (it = ep->orphans; it; it = next) {
			next = it->onext;
			if (it->at != fd)
				continue;
			if (!same_file(it, e))
				stale_item(ep, it);
			else if (close_dup(&dup, fd, e, 0) >= 0)
				it->at = dup;
			else
				drop_item(ep, it);
		}
		note_pending(ep, EPOLL_CTL_DEL, fd, NULL);
		mu_unlock(&ep->lock);
	}
	mu_unlock(&all_lock);
}

void osf_mux_closed(int fd, struct osf_fdt_entry *e, int shared)
{
	struct ep *ep, **pp;
	int i;

	if (e->kind == OSF_FD_LISTEN) {
		/* Forget where the companion was added; the registrations
		 * themselves end with the companion's open file, as the
		 * listener's do (a fork child closing its copies must not
		 * take them from its parent). */
		mu_lock(&all_lock);
		for (ep = all_eps; ep; ep = ep->next_ep) {
			mu_lock(&ep->lock);
			note_listener(ep, fd, 0);
			mu_unlock(&ep->lock);
		}
		mu_unlock(&all_lock);
		if (!shared)
			osf_fdt_close_hidden(e->aux_fd);
		return;
	}
	ep = ep_of(e);
	if (!ep && !shared && e->kind == OSF_FD_EPOLL) {
		/* Brought across exec and never used here. */
		if (e->aux_fd >= 0)
			osf_fdt_close_hidden(e->aux_fd);
		if (e->aux2_fd >= 0)
			osf_fdt_close_hidden(e->aux2_fd);
		return;
	}
	if (!ep || shared)
		return;
	mu_lock(&all_lock);
	for (pp = &all_eps; *pp; pp = &(*pp)->next_ep)
		if (*pp == ep) {
			*pp = ep->next_ep;
			break;
		}
	mu_unlock(&all_lock);
	for (i = 0; i < ep->cap; i++)
		free(ep->byfd[i]);
	while (ep->orphans) {
		struct epi *it = ep->orphans;
		ep->orphans = it->onext;
		free(it);
	}
	free(ep->byfd);
	free(ep->listeners);
	free(ep->pend);
	free(ep->pendfd);
	if (ep->kick >= 0)
		osf_fdt_close_hidden(ep->kick);
	if (ep->inner >= 0)
		osf_fdt_close_hidden(ep->inner);
	if (ep->rec) {
		munmap(ep->rec, EPREC_BYTES);
		osf_fdt_close_hidden(ep->rec_fd);
	}
	free(ep);
}

OSF_FORK_TEXT void osf_mux_child_after_fork(void)
{
	struct ep *ep;

	OSF_RESET(all_lock, 0);
	for (ep = all_eps; ep; ep = ep->next_ep) {
		OSF_RESET(ep->lock, 0);
		OSF_RESET(ep->sleepers, 0);
		OSF_RESET(ep->shared, 1);
	}
}

OSF_FORK_TEXT void osf_mux_parent_after_fork(void)
{
	struct ep *ep;

	if (!__atomic_load_n(&all_eps, __ATOMIC_ACQUIRE))
		return; /* none: an epoll made from now on is not the child's */
	mu_lock(&all_lock);
	for (ep = all_eps; ep; ep = ep->next_ep)
		if (!__atomic_load_n(&ep->shared, __ATOMIC_RELAXED))
			__atomic_store_n(&ep->shared, 1, __ATOMIC_RELAXED);
	mu_unlock(&all_lock);
}
