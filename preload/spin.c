//go:build osf_make

/* spin.c: adaptive spinning (spin.h).
 *
 * Two rules, both free on the data path (a thread-local counter, and a
 * look at /proc/loadavg at most every BUSY_CHECK_US):
 * - back off when spins do not pay, as adaptive mutexes do: after n
 *   spins in a row ended in sleep, the next 2^n - 1 waits (at most 63)
 *   sleep at once; one spin that pays restores spinning. A spin cannot
 *   pay when the peer needs the very CPU the spinner holds, or is not
 *   running at all: such waits soon stop spinning;
 * - while the host has more runnable threads than online CPUs, a recv or
 *   send wait spins a quarter of its budget: a spinner then holds a CPU
 *   that a runnable thread needs, and only a peer that answers
 *   at once (running on another CPU) is worth it. Measured on a loaded
 *   2-CPU host, a ping-pong whose ends run on two CPUs still answers in
 *   0.2 µs this way, where no spin at all costs the kernel's 12-20 µs
 *   wake-up; with a CPU hog per CPU and both ends unpinned, p99 11 µs
 *   against 60 µs with the whole budget. A poll or epoll wait keeps its
 *   whole budget (busy_div 1): each of its rounds also asks the kernel
 *   about the kernel fds, and a quarter left too few rounds (nonblocking
 *   ping-pong p50 11.4 µs against 0.75 µs).
 */
#include "spin.h"

#include "base.h"
#include "../sdp/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUSY_CHECK_US 5000 /* how stale the host's load may be */
#define MISSES_MAX 6       /* back-off: at most 2^6 - 1 waits skip */
#define OSF_SPIN_GROW 10   /* a thread's poll spin grows to 10x OSF_POLL_SPIN_US */

static long busy_at_us;   /* when busy was last computed */
static int busy;          /* runnable threads exceed the CPUs */
static int ncpu;          /* the host's online CPUs (not the affinity's:
			   /proc/loadavg counts the whole host, and a
			   pinned end would count its peer on another
			   CPU as contention) */
static __thread unsigned tls_misses, tls_skip;
static __thread unsigned tls_poll_us; /* this thread's poll spin, when grown */
/* osf_spin_woke: waits in a row (up to WOKE_LONG) that took longer than
 * the spin may grow to, and wakes since the last look at the clock. */
#define WOKE_LONG 8
#define WOKE_EVERY 16
static __thread unsigned tls_long, tls_unread;

/* runnable reads the number of runnable threads on the host (the fourth
 * field of /proc/loadavg, "R/T"), -1 when unknown. */
static int runnable(void)
{
	char buf[128], *p;

	if (osf_read_file("/proc/loadavg", buf, sizeof(buf)) <= 0)
		return -1;
	p = strchr(buf, '/');
	while (p && p > buf && p[-1] != ' ')
		p--;
	return p ? atoi(p) : -1;
}

/* host_busy_at is host_busy with the clock the caller read (now, µs):
 * where CLOCK_MONOTONIC has no vDSO path (an HPET clocksource, as in the
 * emulated RDMA guests) each read is a system call. */
static int host_busy_at(long now)
{
	long at = __atomic_load_n(&busy_at_us, __ATOMIC_RELAXED);
	int r;

	if (now - at < BUSY_CHECK_US && at)
		return __atomic_load_n(&busy, __ATOMIC_RELAXED);
	if (!__atomic_compare_exchange_n(&busy_at_us, &at, now, 0,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return __atomic_load_n(&busy, __ATOMIC_RELAXED); /* another
								  * thread looks */
	if (__atomic_load_n(&osf.sandboxed, __ATOMIC_RELAXED))
		return 0; /* a filter may forbid open: keep the last answer */
	if (!ncpu) {
		ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
		if (ncpu < 1)
			ncpu = 1;
	}
	r = runnable();
	__atomic_store_n(&busy, r > ncpu, __ATOMIC_RELAXED);
	return r > ncpu;
}

static int host_busy(void)
{
	return host_busy_at(osf_mono_us());
}

/* spin_budget_at is osf_spin_budget with the caller's clock (now, µs;
 * 0: read it if needed). */
static unsigned spin_budget_at(unsigned max_us, unsigned busy_div, long now)
{
	if (!max_us)
		return 0;
	if (tls_skip) {
		tls_skip--;
		return 0;
	}
	if (now ? host_busy_at(now) : host_busy())
		return max_us / busy_div ? max_us / busy_div : 1;
	return max_us;
}

unsigned osf_spin_budget(unsigned max_us, unsigned busy_div)
{
	return spin_budget_at(max_us, busy_div, 0);
}

void osf_spin_paid(int paid)
{
	if (paid) {
		tls_misses = 0;
		return;
	}
	if (tls_misses < MISSES_MAX)
		tls_misses++;
	tls_skip = (1u << tls_misses) - 1;
}

/* poll_spin_us is the calling thread's poll spin: OSF_POLL_SPIN_US, or
 * more while its waits end soon after they sleep (osf_spin_woke). */
static unsigned poll_spin_us(void)
{
	unsigned base = osf.poll_spin_us;

	return tls_poll_us > base ? tls_poll_us : base;
}

long osf_spin_clock(void)
{
	return osf_mono_us();
}

/* osf_spin_woke grows the poll spin as KVM's halt polling grows
 * halt_poll_ns: a wait that slept and then had its events within
 * OSF_SPIN_GROW times the base would have been cheaper spun (a sleep and
 * its wake-up are two context switches: a Go program's netpoller, a
 * gRPC call's reply 100-200 µs after the request), so the next spin
 * covers it (twice the last spin, or a quarter more than the wait took,
 * whichever is more); a later wait or a busy host (spinning there takes
 * a CPU a runnable thread needs) returns it to the base. */
void osf_spin_woke(long begun)
{
	unsigned base = osf.poll_spin_us, cap = base * OSF_SPIN_GROW, b = poll_spin_us(), nb;
	long now, took;

	if (!base)
		return;
	/* A thread whose waits are long looks at the clock after one wake
	 * in WOKE_EVERY: the read sits between the wake and what the
	 * program does with it, and where CLOCK_MONOTONIC has no vDSO path
	 * (the emulated RDMA guests' HPET) it is a system call of a few µs;
	 * its spin stays at the base meanwhile. */
	if (tls_long >= WOKE_LONG && ++tls_unread % WOKE_EVERY)
		return;
	now = osf_mono_us();
	took = now - begun;
	if (took < 0)
		return;
	if (took > (long)cap) {
		tls_poll_us = 0;
		if (tls_long < WOKE_LONG)
			tls_long++;
		return;
	}
	tls_long = tls_unread = 0;
	if (host_busy_at(now)) {
		tls_poll_us = 0;
		return;
	}
	if ((unsigned)took <= b)
		return; /* the spin was long enough: it ended early for another reason */
	nb = b * 2;
	if (nb < (unsigned)took + (unsigned)took / 4)
		nb = (unsigned)took + (unsigned)took / 4;
	tls_poll_us = nb < cap ? nb : cap;
}

long osf_spin_until(long now, long timeout_ms)
{
	long us;

	if (timeout_ms == 0)
		return 0;
	us = spin_budget_at(poll_spin_us(), 1, now);
	if (!us)
		return 0;
	if (timeout_ms > 0 && timeout_ms * 1000 < us)
		us = timeout_ms * 1000;
	return now + us;
}

int osf_spinning(long end)
{
	return end && osf_mono_us() < end;
}

int osf_spinning_at(long end, long *now)
{
	if (!end)
		return 0;
	*now = osf_mono_us();
	return *now < end;
}

int osf_spin_poll(struct pollfd *p, unsigned long n, int timeout_ms)
{
	long end = timeout_ms ? osf_spin_until(osf_mono_us(), timeout_ms) : 0;
	unsigned intr = osf_intr_count();
	int r;

	if (!end)
		return 0;
	for (;;) {
		r = REAL(poll)(p, (nfds_t)n, 0);
		if (r != 0)
			break;
		if (osf_intr_count() != intr) { /* as a sleeping poll's EINTR */
			r = -1;
			errno = EINTR;
			break;
		}
		if (!osf_spinning(end))
			break;
	}
	osf_spin_paid(r > 0);
	return r;
}
