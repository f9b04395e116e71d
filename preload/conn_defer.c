//go:build osf_make

/* conn_defer.c: connections whose companion connection waits for their
 * first byte (their listener defers: setup.h osf_setup_hello_take,
 * docs/ARCHITECTURE.md "Connections that wait for their first byte"):
 * the list of them, what connects them (conn_hello, the flush before a
 * fork, exec, spawn or hand-off, and the osf-defer thread for those whose
 * defer time is over). */
#include "conn_priv.h"
#include "setup.h"

#include <sched.h>
#include <time.h>

/* The connections of this process whose companion connection waits
 * (c->hello, setup.h), with when their defer time is over, for the
 * flush before fork, exec, spawn or a hand-off (a connection another
 * process may write must reach its server) and for the thread that
 * connects those whose time is over (osf-defer). More than HELLO_PEND at
 * once: the next connects at once. */
#define HELLO_PEND 64
static struct {
	struct osf_conn *c;
	long long due;
} hello_pend[HELLO_PEND];
int osf_hello_n, osf_hello_lk, osf_hello_thread;

static void hello_lock(void)
{
	while (__atomic_exchange_n(&osf_hello_lk, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void hello_unlock(void) { __atomic_store_n(&osf_hello_lk, 0, __ATOMIC_RELEASE); }

/* hello_out takes entry i out of the list with its wait, which every
 * entry has (a wait taken leaves the list under the same lock). held: a
 * reference on the connection for the caller, unless it is being
 * destroyed (NULL: the entry stays, for its destroy to drop). The lock is
 * held. */
static struct osf_hello_wait *hello_out(int i, int held)
{
	struct osf_conn *c = hello_pend[i].c;
	uint32_t r = __atomic_load_n(&c->refs, __ATOMIC_RELAXED);

	while (held) {
		if (r == 0)
			return NULL;
		if (__atomic_compare_exchange_n(&c->refs, &r, r + 1, 1, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			break;
	}
	hello_pend[i] = hello_pend[--osf_hello_n];
	return __atomic_exchange_n(&c->hello, NULL, __ATOMIC_ACQ_REL);
}

/* hello_take takes c's wait out: the caller's to send or drop; NULL when
 * another thread took it. */
static struct osf_hello_wait *hello_take(struct osf_conn *c)
{
	struct osf_hello_wait *w = NULL;
	int i;

	hello_lock();
	for (i = 0; i < osf_hello_n; i++)
		if (hello_pend[i].c == c) {
			w = hello_out(i, 0);
			break;
		}
	hello_unlock();
	return w;
}

/* hello_send connects c and sends w. */
static void hello_send(struct osf_conn *c, struct osf_hello_wait *w)
{
	int r = osf_setup_hello_go(w, c->base);

	__atomic_store_n(&c->s.unborn, 0, __ATOMIC_RELEASE);
	/* Not sent: its server, never holding its side, is gone (a reset,
	 * as TCP's for a connection its listener dropped). */
	if (r < 0)
		osf_side_mark_gone(&c->s);
}

/* hello_due connects the waiting connections whose defer time is over,
 * sleeping until the next one's (at most 200 ms, so that one made
 * meanwhile with a shorter time is not late by more), while any waits. */
static void *hello_due(void *arg)
{
	struct timespec ts;
	long long now, next;
	int i;

	(void)arg;
	for (;;) {
		struct osf_hello_wait *w = NULL;
		struct osf_conn *c = NULL;
		now = osf_now_ns();
		next = now + 200000000LL;
		hello_lock();
		for (i = 0; i < osf_hello_n && !w; i++) {
			if (hello_pend[i].due <= now) {
				c = hello_pend[i].c;
				w = hello_out(i, 1);
			} else if (hello_pend[i].due < next) {
				next = hello_pend[i].due;
			}
		}
		if (!w && osf_hello_n == 0) {
			osf_hello_thread = 0;
			hello_unlock();
			return NULL;
		}
		hello_unlock();
		if (w) {
			hello_send(c, w);
			conn_put(c);
			continue;
		}
		if (next <= now) /* one being destroyed: its destroy drops it */
			next = now + 1000000LL;
		ts.tv_sec = (next - now) / 1000000000LL;
		ts.tv_nsec = (next - now) % 1000000000LL;
		nanosleep(&ts, NULL);
	}
}

void osf_conn_hello_attach(int fd, struct osf_fdt_entry *e)
{
	long long due = 0;
	struct osf_hello_wait *w = osf_setup_hello_take(fd, &due);
	struct osf_conn *c;
	int start = 0;

	if (!w)
		return;
	c = e ? conn_get(fd, e) : NULL;
	if (!c) {
		osf_setup_hello_drop(w, NULL);
		return;
	}
	hello_lock();
	if (osf_hello_n < HELLO_PEND) {
		hello_pend[osf_hello_n].c = c;
		hello_pend[osf_hello_n++].due = due;
		__atomic_store_n(&c->s.unborn, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&c->hello, w, __ATOMIC_RELEASE);
		w = NULL;
		start = !osf_hello_thread;
		osf_hello_thread = 1;
	}
	hello_unlock();
	if (start && osf_thread_start(hello_due, "osf-defer") != 0) {
		hello_lock(); /* none: each waits for its first byte alone */
		osf_hello_thread = 0;
		hello_unlock();
	}
	if (w) /* too many waiting: now */
		hello_send(c, w);
	conn_put(c);
}

void osf_conn_hello_go(struct osf_conn *c)
{
	struct osf_hello_wait *w = hello_take(c);

	if (w)
		hello_send(c, w);
}

void osf_conn_hello_drop(struct osf_conn *c)
{
	struct osf_hello_wait *w = hello_take(c);

	if (w)
		osf_setup_hello_drop(w, c->base);
}

void osf_conn_hello_flush(void)
{
	struct osf_hello_wait *w;
	struct osf_conn *c;
	int i = 0;

	while (__atomic_load_n(&osf_hello_n, __ATOMIC_ACQUIRE) > i) {
		hello_lock();
		c = osf_hello_n > i ? hello_pend[i].c : NULL;
		w = c ? hello_out(i, 1) : NULL;
		hello_unlock();
		if (w) {
			hello_send(c, w);
			conn_put(c);
		} else if (c) {
			i++; /* being destroyed */
		}
	}
}

void osf_conn_hello_after_fork(void)
{
	int i;

	for (i = 0; i < osf_hello_n; i++) {
		struct osf_hello_wait *w = hello_pend[i].c->hello;
		hello_pend[i].c->hello = NULL;
		if (w)
			osf_setup_hello_forget(w);
	}
	osf_hello_n = 0;
}

