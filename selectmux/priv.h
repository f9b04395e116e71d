/* priv.h: what selectmux's files share (not for preload/, which uses
 * mux.h): the libc calls, time arithmetic, and the mux lock with the
 * deferral of what a signal handler asks while its own thread holds one
 * (lock.c). */
#ifndef OSF_SELECTMUX_PRIV_H
#define OSF_SELECTMUX_PRIV_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../fdtable/cdefs.h"
#include "../fdtable/fdt.h"
#include "host.h"
#include "mux.h"
#include "ready.h"

/* glibc declares poll's array write-only (__attr_access); a poll hook
 * must read it, which gcc would report as a read of uninitialized data. */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

/* REAL(f) is libc's f, never osf's hook (host.h). */
#define REAL(f) osf_mux_sys_##f

static inline long ts_ms(const struct timespec *ts)
{
	if (!ts)
		return -1;
	if (ts->tv_sec > INT_MAX / 1000)
		return INT_MAX;
	return ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000;
}

static inline long mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* remaining_at returns what is left of a timeout begun at start (ms; -1:
 * none) at now_ms, a clock the caller read (the spin's last look,
 * osf_spinning_at: an older clock only makes the wait longer, never
 * shorter); remaining at the clock read now. */
static inline int remaining_at(long timeout, long start, long now_ms)
{
	long left;

	if (timeout < 0)
		return -1;
	left = timeout - (now_ms - start);
	return left < 0 ? 0 : (int)left;
}

static inline int remaining(long timeout, long start)
{
	return timeout < 0 ? -1 : remaining_at(timeout, start, mono_ms());
}

/* ---- readiness through an fd's table (ready.h) ----------------------------
 *
 * rd_* call fd's (entry e's) readiness table. An fd whose readiness is the
 * kernel's (no entry, or its ops none: a gateway's connect settled while
 * it was waited on) reports what the kernel's socket reports, arms and
 * holds nothing, and its stamp stays 0. */

static inline const struct osf_ready *rd_of(const struct osf_fdt_entry *e)
{
	return e ? osf_ready_of(e) : NULL;
}

static inline short rd_kernel_poll(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP | POLLPRI};

	return REAL(poll)(&p, 1, 0) < 0 ? POLLNVAL : p.revents;
}

static inline short rd_poll(int fd, struct osf_fdt_entry *e)
{
	const struct osf_ready *r = rd_of(e);

	return r ? r->poll(fd, e) : rd_kernel_poll(fd);
}

static inline int rd_arm_kinds(int fd, struct osf_fdt_entry *e, short events)
{
	const struct osf_ready *r = rd_of(e);

	return r ? r->arm_kinds(fd, e, events) : OSF_ARM_RX;
}

static inline short rd_arm(int fd, struct osf_fdt_entry *e, int kinds,
			   int already, int *trim_due)
{
	const struct osf_ready *r = rd_of(e);

	return r ? r->arm(fd, e, kinds, already, trim_due) : rd_kernel_poll(fd);
}

static inline void rd_disarm(int fd, struct osf_fdt_entry *e, int kinds, int woken)
{
	const struct osf_ready *r = rd_of(e);

	if (r)
		r->disarm(fd, e, kinds, woken);
}

static inline uint64_t rd_stamp(int fd, struct osf_fdt_entry *e)
{
	const struct osf_ready *r = rd_of(e);

	return r ? r->stamp(fd, e) : 0;
}

static inline void rd_trim(int fd, struct osf_fdt_entry *e)
{
	const struct osf_ready *r = rd_of(e);

	if (r)
		r->trim(fd, e);
}

static inline int rd_rx_blind(int fd, struct osf_fdt_entry *e)
{
	const struct osf_ready *r = rd_of(e);

	return r ? r->rx_blind(fd, e) : 0;
}

static inline short rd_wake_events(int fd, struct osf_fdt_entry *e)
{
	const struct osf_ready *r = rd_of(e);

	return r ? r->wake_events(fd, e) : POLLIN | POLLRDHUP;
}

static inline int rd_wake_tx_fd(const struct osf_fdt_entry *e)
{
	const struct osf_ready *r = rd_of(e);

	return r ? r->wake_tx_fd(e) : -1;
}

static inline void *rd_hold(int fd, struct osf_fdt_entry *e)
{
	const struct osf_ready *r = rd_of(e);

	return r ? r->hold(fd, e) : NULL;
}

/* rd_has_chan: fd's kind may offer a channel to sleep on (ready.h chan). */
static inline int rd_has_chan(const struct osf_fdt_entry *e)
{
	const struct osf_ready *r = rd_of(e);

	return r && r->chan;
}

/* struct rd_chan: a poller's sleep on a channel (ready.h chan): the
 * state held (NULL: none), its table's chan (e's table may move on
 * meanwhile), the wait. */
struct rd_chan {
	void *h;
	int (*chan)(void *h, int how, struct osf_chan_wait *w);
	struct osf_chan_wait w;
};

/* rd_chan_enter holds fd's state and enters its channel, registering it
 * in epoll ep (-1: none) with key, for a wait armed for kinds (OSF_ARM_*):
 * the channel's fd (in c, for rd_chan_fired and rd_chan_leave), or -1
 * (nothing held). */
static inline int rd_chan_enter(int fd, struct osf_fdt_entry *e, struct rd_chan *c,
				int ep, uint64_t key, int kinds)
{
	const struct osf_ready *r = rd_of(e);

	c->h = NULL;
	c->w = (struct osf_chan_wait){-1, ep, key, (kinds & OSF_ARM_RX) != 0};
	if (!r || !r->chan || !(c->h = r->hold(fd, e)))
		return -1;
	c->chan = r->chan;
	if (c->chan(c->h, OSF_CHAN_ENTER, &c->w) < 0 || c->w.fd < 0) {
		osf_ready_unhold(c->h);
		c->h = NULL;
		c->w.fd = -1;
	}
	return c->w.fd;
}

/* rd_chan_fired takes what c's channel announced (> 0: took any; 2: a
 * token may wait on the fd, ready.h). */
static inline int rd_chan_fired(struct rd_chan *c)
{
	return c->h ? c->chan(c->h, OSF_CHAN_FIRED, &c->w) : 0;
}

/* rd_chan_leave ends rd_chan_enter's sleep, if any, and drops its hold. */
static inline void rd_chan_leave(struct rd_chan *c)
{
	if (!c->h)
		return;
	c->chan(c->h, OSF_CHAN_LEAVE, &c->w);
	osf_ready_unhold(c->h);
	c->h = NULL;
	c->w.fd = -1;
}

/* ---- a small futex mutex (lock.c) -----------------------------------------
 *
 * mu_depth counts the mux locks this thread holds or waits for. A signal
 * handler can call into the mux on a thread that holds one (a handler's
 * shutdown or setsockopt re-checks epoll items, osf_mux_changed, while its
 * thread's epoll_wait collects them): it must not wait for the lock its
 * own thread holds. Such a re-check is noted in this thread's deferred
 * slots instead (mu_defer) and made when the thread lets go of its last
 * mux lock (mu_unlock, run_deferred), before it sleeps in the kernel. */

extern __thread int mu_depth __attribute__((tls_model("initial-exec")));
extern __thread int mu_pending __attribute__((tls_model("initial-exec")));

enum { DEFER_CHANGED, DEFER_FORGET };
struct deferred {
	int state; /* SLOT_*: claimed by compare-and-swap, a nested handler
		      takes another */
	int op;    /* DEFER_* */
	int fd, dups;
	uint32_t events;
	uint64_t ino; /* DEFER_FORGET: the closed file's identity */
	void *hold;   /* DEFER_FORGET: its state, held (rd_hold) */
};

/* mu_defer notes d for this thread's last mux unlock; 0 when the slots are
 * full (then every item is re-checked, and closed ones dropped). */
int mu_defer(const struct deferred *d);

/* mu_deferred_hold returns the connection a close deferred on this thread
 * holds for the item of fd with identity ino, or NULL. */
void *mu_deferred_hold(int fd, uint64_t ino);

/* run_deferred makes the re-checks and drops that handlers deferred (no
 * mux lock held): mux_changed and mux_forget (notify.c). */
void run_deferred(void);
void mux_changed(int fd, int dups, uint32_t events);
void mux_forget(int fd, uint64_t ino, void *hold);

static inline void mu_lock(int *m)
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

static inline void mu_unlock(int *m)
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

#endif
