//go:build osf_make

/* lock.c: the deferral behind selectmux's futex mutex (priv.h): what a
 * signal handler asks of the mux while its own thread holds a mux lock is
 * noted in this thread's slots and made at the thread's last unlock. */
#include "priv.h"

__thread int mu_depth __attribute__((tls_model("initial-exec")));

#define DEFER_SLOTS 8
enum { SLOT_FREE, SLOT_CLAIMED, SLOT_FULL };
static __thread struct deferred mu_deferred[DEFER_SLOTS]
	__attribute__((tls_model("initial-exec")));
static __thread int mu_overflow __attribute__((tls_model("initial-exec")));
__thread int mu_pending __attribute__((tls_model("initial-exec")));

int mu_defer(const struct deferred *d)
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

void *mu_deferred_hold(int fd, uint64_t ino)
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
void run_deferred(void)
{
	int i;

	while (__atomic_exchange_n(&mu_pending, 0, __ATOMIC_ACQUIRE)) {
		for (i = 0; i < DEFER_SLOTS; i++) {
			struct deferred d;
			if (__atomic_load_n(&mu_deferred[i].state, __ATOMIC_ACQUIRE) != SLOT_FULL)
				continue;
			d = mu_deferred[i];
			if (d.op == DEFER_FORGET)
				mux_forget(d.fd, d.ino, d.hold); /* slot still names the hold */
			__atomic_store_n(&mu_deferred[i].state, SLOT_FREE, __ATOMIC_RELEASE);
			if (d.op == DEFER_FORGET)
				osf_ready_unhold(d.hold);
			else
				mux_changed(d.fd, d.dups, d.events);
		}
		if (__atomic_exchange_n(&mu_overflow, 0, __ATOMIC_ACQUIRE))
			mux_changed(-1, 1, OSF_MUX_ALL); /* drops closed items too */
	}
}

int osf_mux_busy(void) { return mu_depth; }
