//go:build osf_make

/* epoll_wait.c: epoll_wait, epoll_pwait and epoll_pwait2 over an epoll with
 * offloaded members (epoll.h): collect the may-be-ready items, spin on the
 * idle ones, arm them, sleep in the kernel, take the inner epoll's events. */
#include "epoll.h"

#include <sys/mman.h>

/* blind_item: an edge-triggered item waiting for input on a connection
 * whose wake socket this side shut for reading (rd_rx_blind): after
 * SHUT_RD TCP still reports every arrival as an edge, but no token comes,
 * so it stays idle, unarmed, and the wait looks at its rings every
 * OSF_BLIND_MS (a level-triggered one is ready for ever after SHUT_RD). */
static int blind_item(const struct epi *it, struct osf_fdt_entry *e)
{
	return (it->events & EPOLLET) && (it->events & (EPOLLIN | EPOLLRDNORM)) &&
	       rd_rx_blind(it->at, e);
}

/* go_idle parks an item that needs a new edge (or readiness) on the idle
 * list, unarmed; past IDLE_MAX it is armed at once instead (a blind one
 * never: it stays idle). stamp is rd_stamp taken before the
 * readiness the caller acted on was computed: whatever changes after that
 * look is a new edge (a stamp taken after it would swallow an arrival
 * that came between the two, and its token would then be no edge). */
static void go_idle(struct ep *ep, struct epi *it, struct osf_fdt_entry *e,
		    uint64_t stamp)
{
	it->stamp = stamp;
	if (ep->nidle < IDLE_MAX || blind_item(it, e)) {
		list_put(ep, it, ON_IDLE);
		return;
	}
	list_del(ep, it);
	if (ep_arm_item(ep, it, e))
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
		uint64_t stamp;
		next = it->next;
		if (!same_file(it, e)) {
			ep_stale_item(ep, it); /* closed */
			continue;
		}
		if (kernel_ready(e)) {
			ep_to_kernel(ep, it);
			continue;
		}
		if (it->disabled) {
			list_del(ep, it);
			continue;
		}
		if (it->seen == ep->wait)
			continue;
		stamp = rd_stamp(it->at, e); /* first: go_idle */
		ev = poll_to_epoll(rd_poll(it->at, e)) & want;
		if (kernel_ready(e)) { /* it just did: the kernel reports it */
			ep_to_kernel(ep, it);
			continue;
		}
		if (!ev) {
			go_idle(ep, it, e, stamp);
			continue;
		}
		out[n].events = ev;
		out[n].data = it->data;
		it->seen = ep->wait;
		n++;
		if (it->events & EPOLLONESHOT) {
			it->disabled = 1;
			ep_rec_note(ep, it);
			list_del(ep, it);
		} else if (it->events & EPOLLET) {
			go_idle(ep, it, e, stamp); /* the next edge: positions move */
		}
	}
	return n;
}

/* idle_gone takes idle item it off ep when its fd no longer holds its
 * file (dropped) or the kernel reports its readiness now (handed to the
 * kernel's set: *kernel is set); 1 when it did. */
static int idle_gone(struct ep *ep, struct epi *it, struct osf_fdt_entry *e, int *kernel)
{
	if (!same_file(it, e)) {
		ep_stale_item(ep, it);
		return 1;
	}
	if (kernel_ready(e)) {
		ep_to_kernel(ep, it);
		*kernel = 1;
		return 1;
	}
	return 0;
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
		if (idle_gone(ep, it, e, &moved))
			continue;
		if ((it->events & EPOLLET) && rd_stamp(it->at, e) == it->stamp)
			continue;
		if (poll_to_epoll(rd_poll(it->at, e)) & want) {
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
		if (idle_gone(ep, it, e, &ready))
			continue;
		if (blind_item(it, e)) {
			ep->blind = 1;
			continue;
		}
		list_del(ep, it);
		if (ep_arm_item(ep, it, e)) {
			list_add(ep, it);
			ready = 1;
		}
	}
	return ready;
}

/* passing counts, per epoll fd number, the waits that may be in the
 * kernel's wait uncounted by ep->sleepers: each hook counts itself before
 * it looks for the epoll's inner epoll and until its pass-through wait
 * returns. While any is, ep->young stays set (a wait that went straight
 * to the kernel before the inner epoll existed sleeps on, and nothing
 * would arm items or kick for it). One page, made at the first wait and
 * marked MADV_WIPEONFORK: a fork child, whose only thread is in no wait,
 * starts with every count 0 and no page fault (a count left from the
 * parent's waits would keep young set, and waits arming for nobody, for
 * ever). Numbers from PASS_SLOTS - 1 on share the last slot; without a
 * page of its own every number shares one count. */
#define PASS_SLOTS 1024
#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif
static uint32_t *passing;   /* the page, NULL until the first wait */
static uint32_t pass_one;   /* the one count when no page could be made */
static int passing_wiped;   /* the page is MADV_WIPEONFORK */

static uint32_t *pass_page(void)
{
	uint32_t *p = mmap(NULL, PASS_SLOTS * sizeof(uint32_t), PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *none = NULL;
	int wiped = 0;

	if (p == MAP_FAILED)
		p = &pass_one;
	else if (madvise(p, PASS_SLOTS * sizeof(uint32_t), MADV_WIPEONFORK) == 0)
		wiped = 1;
	if (!__atomic_compare_exchange_n(&passing, &none, p, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		if (p != &pass_one) /* another thread's came first */
			munmap(p, PASS_SLOTS * sizeof(uint32_t));
		return none;
	}
	if (wiped)
		__atomic_store_n(&passing_wiped, 1, __ATOMIC_RELEASE);
	return p;
}

static inline uint32_t *pass_slot(int epfd)
{
	uint32_t *p = __atomic_load_n(&passing, __ATOMIC_ACQUIRE);

	if (unlikely(!p))
		p = pass_page();
	if (p == &pass_one)
		return p;
	return &p[(unsigned)epfd < PASS_SLOTS - 1 ? (unsigned)epfd : PASS_SLOTS - 1];
}

/* pass_forked empties the counts in a fork child when fork did not. */
OSF_FORK_TEXT static void pass_forked(void)
{
	uint32_t *p = passing;
	unsigned i;

	if (!p || passing_wiped)
		return;
	if (p == &pass_one) {
		OSF_RESET(pass_one, 0);
		return;
	}
	for (i = 0; i < PASS_SLOTS; i++)
		OSF_RESET(p[i], 0);
}
OSF_AFTER_FORK(pass_forked, OSF_FORK_RESET);

/* pass_begin counts a wait on epfd and returns its state, or NULL when the
 * wait goes straight to the kernel (then pass_end follows its return). */
static struct ep *pass_begin(int epfd, uint32_t **slot)
{
	struct ep *ep;

	*slot = pass_slot(epfd);
	__atomic_add_fetch(*slot, 1, __ATOMIC_SEQ_CST);
	ep = ep_find(epfd);
	if (likely(!ep || __atomic_load_n(&ep->inner, __ATOMIC_SEQ_CST) < 0))
		return NULL;
	__atomic_sub_fetch(*slot, 1, __ATOMIC_RELEASE);
	return ep;
}

static inline int pass_end(uint32_t *slot, int r)
{
	int saved = errno;

	__atomic_sub_fetch(slot, 1, __ATOMIC_RELEASE);
	errno = saved;
	return r;
}

/* leave keeps, as a wait returns (ep locked), what the waits asleep in
 * the kernel on ep sleep on: with several threads in one epoll (Go's
 * netpoller: one thread blocked, others making non-blocking waits), the
 * one returning may have taken the wake-up a sleeper was woken for
 * (the inner epoll drained, the sleeper back asleep in the kernel). So,
 * while any sleeps: every idle item is armed (what this wait reported
 * edge-triggered, or found not ready, went idle unarmed: its next edge
 * must send a token, as the kernel wakes a sleeper for the next
 * arrival), and a sleeper is kicked when items are left on the
 * may-be-ready list (maxevents filled; level-triggered ones still
 * ready: the kernel wakes another waiter when its ready list is not
 * empty after a wait), when an idle item turned out ready while armed,
 * or when an item no token can wake went idle (the sleeper then bounds
 * its sleep, OSF_BLIND_MS). */
static void leave(struct ep *ep)
{
	int blind = ep->blind;

	if (!ep->sleepers && !ep->young)
		return;
	if (arm_idle(ep) || ep->head.next != &ep->head || (ep->blind && !blind))
		ep_kick(ep);
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
			rd_trim(fd, osf_fdt_lookup(fd));
	}
	for (it = ep->orphans; it; it = it->onext)
		if (it->armed & OSF_ARM_RX)
			rd_trim(it->at, osf_fdt_lookup(it->at));
	ep->trim_due = 0;
	ep->quiet_since = 0;
}

/* take_woken ends the wait of woken item it: its tokens, the other side's
 * end (a deleted item's too: the edge will not come again when it is
 * added back), and the list. */
static void take_woken(struct ep *ep, struct epi *it)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(it->at);

	ep_disarm_item(it, e, it->woken);
	it->woken = 0;
	if (it->disabled || it->parked)
		return;
	/* A token an edge-triggered item's own wait did not ask for
	 * (another waiter's, or one an exec'd image's wait left armed) is no
	 * edge unless the rings moved since its last report. */
	if ((it->events & EPOLLET) && rd_stamp(it->at, e) == it->stamp)
		go_idle(ep, it, e, it->stamp);
	else
		list_add(ep, it);
}

/* efd_woken wakes every item that waits for room on a region's writers'
 * eventfd (epi.wefd): one of them fired, whose events name no item. */
static void efd_woken(struct ep *ep)
{
	struct epi *it, *next;
	int i;

	for (i = 0; i < ep->cap; i++)
		if ((it = ep->byfd[i]) && it->wefd && (it->armed & OSF_ARM_TX)) {
			it->woken |= OSF_ARM_TX;
			take_woken(ep, it);
		}
	for (it = ep->orphans; it; it = next) {
		next = it->onext;
		if (it->wefd && (it->armed & OSF_ARM_TX)) {
			it->woken |= OSF_ARM_TX;
			take_woken(ep, it);
		}
	}
}

/* absorb takes the inner epoll's events: woken items join the list.
 * Events that name no item of this process (a kick, a registration of a
 * closed fd or of another process's item) only wake. Returns 1 when the
 * server's links' epoll fired (LINKS_KEY): the caller, its lock let go,
 * closes the links that ended (host.h osf_links_ended). */
static int absorb(struct ep *ep)
{
	struct epoll_event tmp[64];
	int n, i, efd = 0, links = 0;

	if (ep->inner < 0)
		return 0;
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
			if (u == LINKS_KEY) {
				links = 1;
				continue;
			}
			/* An item first: its key's high word is its inode's
			 * low 32 bits, which may be anything, the mark too. */
			it = ep_item_of(ep, u);
			if (!it && (u & EFD_KEY_MASK) == EFD_KEY_MARK) {
				efd = 1;
				continue;
			}
			if (it)
				it->woken |= (u & WSOCK_TAG) ? OSF_ARM_TX : OSF_ARM_RX;
		}
		/* Then each woken item once. */
		for (i = 0; i < n; i++) {
			uint64_t u = tmp[i].data.u64;
			struct epi *it = u == KICK_KEY || u == LINKS_KEY ? NULL : ep_item_of(ep, u);
			if (it && it->woken)
				take_woken(ep, it);
		}
	} while (n == 64);
	if (efd)
		efd_woken(ep);
	return links;
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
	/* One clock read for the timeout (ms), the spin and its growth (µs);
	 * now is the latest, fresh while no sleep came after it (as
	 * mux_poll's: where CLOCK_MONOTONIC has no vDSO path, the emulated
	 * RDMA guests' HPET, each read is a system call). */
	long begun = osf_spin_clock(), start = begun / 1000, now = begun,
	     spin_end = osf_spin_until(begun, timeout);
	int spun = 0, slept = 0, fresh = 1, links;
	int saved = errno; /* a successful wait leaves errno alone */
	unsigned intr = osf_intr_count();

	if (max <= 0 || max > INT_MAX / (int)sizeof(*ev))
		return OSF_FAIL(EINVAL);
	for (;;) {
		int n = 0, k = 0, to, sleep_ok = 0, trim;
		mu_lock(&ep->lock);
		if (ep->young && !__atomic_load_n(pass_slot(ep->epfd), __ATOMIC_SEQ_CST))
			ep->young = 0; /* waits from now on are counted */
		ep->wait++;
		idle_check(ep);
		/* Offloaded readiness first on every other wait, kernel events
		 * first on the others (fairness when both keep coming). */
		if (!(ep->turn++ & 1))
			n = collect(ep, ev, max);
		if (spin_end && !osf_spinning_at(spin_end, &now)) {
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
			leave(ep);
			mu_unlock(&ep->lock);
			if (spin_end && spun)
				osf_spin_paid(1);
			errno = saved;
			return n;
		}
		to = !sleep_ok ? 0
		     : fresh   ? remaining_at(timeout, start, now / 1000)
			       : remaining(timeout, start);
		if (sleep_ok && ep->blind && (to < 0 || to > OSF_BLIND_MS))
			to = OSF_BLIND_MS;
		/* Armed connections with ring pages to give back: they are idle
		 * once the waits on ep have reported nothing for
		 * OSF_TRIM_IDLE_MS in all (an event loop's timer may cut each
		 * wait shorter); sleep no longer than that, then trim. */
		trim = 0;
		if (sleep_ok && ep->trim_due) {
			long ms = fresh ? now / 1000 : mono_ms(), left;
			if (!ep->quiet_since)
				ep->quiet_since = ms;
			left = ep->quiet_since + OSF_TRIM_IDLE_MS - ms;
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
			leave(ep);
			mu_unlock(&ep->lock);
			return OSF_FAIL(EINTR);
		}
		if (to)
			ep->sleepers++;
		slept |= to != 0;
		if (to)
			fresh = 0;
		mu_unlock(&ep->lock);
		k = REAL(epoll_pwait)(ep->epfd, ev + n, max - n, to, mask);
		mu_lock(&ep->lock);
		if (to)
			ep->sleepers--;
		if (k < 0) {
			int err = errno;
			leave(ep);
			mu_unlock(&ep->lock);
			if (n > 0) {
				errno = saved;
				return n;
			}
			return OSF_FAIL(err);
		}
		if (trim && k == 0)
			trim_idle(ep);
		links = strip(ep, ev + n, &k) && absorb(ep);
		n += k;
		if (n < max)
			n += collect(ep, ev + n, max - n);
		if (n > 0)
			ep->quiet_since = 0;
		leave(ep);
		mu_unlock(&ep->lock);
		if (links)
			osf_links_ended();
		if (n > 0 && spin_end && spun)
			osf_spin_paid(1);
		if (n > 0 && slept)
			osf_spin_woke(begun);
		if (n > 0 ||
		    (fresh ? remaining_at(timeout, start, now / 1000) : remaining(timeout, start)) == 0) {
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
	int links;

	if (likely(r <= 0))
		return r;
	ep = ep_find(epfd);
	if (likely(!ep || __atomic_load_n(&ep->inner, __ATOMIC_ACQUIRE) < 0))
		return r;
	mu_lock(&ep->lock);
	ep->wait++;
	links = strip(ep, ev, &r) && absorb(ep);
	if (r < max)
		r += collect(ep, ev + r, max - r);
	leave(ep);
	mu_unlock(&ep->lock);
	if (links)
		osf_links_ended();
	if (r > 0)
		return r;
	return mux_epoll(ep, ev, max, timeout, mask);
}

enum { WAIT, PWAIT, PWAIT2 };
#define WAIT_PROBE 64
#define WAIT_MS(call, timeout, ts)                                             \
	((call) == PWAIT2 ? ts_ms(ts) : (timeout) < 0 ? -1 : (long)(timeout))

/* wait_hook is epoll_wait, epoll_pwait and epoll_pwait2 (call: which the
 * application made, and which of the kernel's runs when epfd is none of
 * osf's): timeout in ms for the first two, ts for epoll_pwait2. Inlined
 * with call constant, each hook keeps its one branch to the kernel. */
static inline __attribute__((always_inline)) int
wait_hook(int call, int epfd, struct epoll_event *ev, int max, int timeout,
	  const struct timespec *ts, const sigset_t *mask)
{
	uint32_t *slot;
	struct ep *ep;
	int r;

	osf_reap_kick(); /* may sleep: the reaper may have work */
	ep = pass_begin(epfd, &slot);
	if (likely(!ep)) {
		r = call == WAIT     ? REAL(epoll_wait)(epfd, ev, max, timeout)
		    : call == PWAIT ? REAL(epoll_pwait)(epfd, ev, max, timeout, mask)
				    : REAL(epoll_pwait2)(epfd, ev, max, ts, mask);
		return passed(epfd, ev, max, pass_end(slot, r),
			      WAIT_MS(call, timeout, ts), mask);
	}
	if (call == PWAIT2 && ts &&
	    (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
		return OSF_FAIL(EINVAL);
	/* osf writes events itself: a buffer the kernel could not write is
	 * its EFAULT (here at once, the kernel's at its first event), never
	 * a crash; its first WAIT_PROBE events are probed (a bad pointer,
	 * not a buffer that ends in an unmapped page). */
	osf_fault_arm();
	if (max > 0 && osf_probe_wr(ev, (size_t)(max < WAIT_PROBE ? max : WAIT_PROBE) *
					    sizeof(*ev)) < 0)
		return OSF_FAIL(EFAULT);
	return mux_epoll(ep, ev, max, WAIT_MS(call, timeout, ts), mask);
}

OSF_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max,
			  int timeout)
{
	return wait_hook(WAIT, epfd, ev, max, timeout, NULL, NULL);
}

OSF_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max,
			   int timeout, const sigset_t *mask)
{
	return wait_hook(PWAIT, epfd, ev, max, timeout, NULL, mask);
}

OSF_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			    const struct timespec *ts, const sigset_t *mask)
{
	return wait_hook(PWAIT2, epfd, ev, max, 0, ts, mask);
}
