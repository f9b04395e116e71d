//go:build osf_make

/* poll.c: poll, ppoll, select and pselect over any mix of kernel and
 * offloaded fds.
 *
 * Readiness of an offloaded connection is the state of its rings (its
 * readiness table's poll, ready.h), never the wake socket's: the kernel
 * object is only used to sleep. Before sleeping, each offloaded fd is armed (its peer will send
 * a wake token when the awaited event may have happened), and the wake
 * socket stands in for it in the kernel wait. An offloaded listener is
 * watched together with its companion listener. select and pselect are
 * poll underneath (mux_select).
 */
#include "priv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

extern int __poll_chk(struct pollfd *, nfds_t, int, size_t);
extern void __chk_fail(void) __attribute__((noreturn));

/* involved reports an fd whose readiness osf must compute. */
static inline int involved(int fd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int k = e ? __atomic_load_n(&e->kind, __ATOMIC_ACQUIRE) : OSF_FD_NONE;

	return osf_kind_is_offloaded(k) || k == OSF_FD_EPOLL ||
	       unlikely(e && osf_ready_of(e));
}

/* Per pollfd slot, how the kernel array kfds stands in for it. */
enum { SLOT_KERNEL, SLOT_CONN, SLOT_LISTEN };

/* conn_events filters a connection's readiness as poll reports it. */
static short conn_events(short ready, short events)
{
	return ready & (events | POLLERR | POLLHUP | POLLNVAL);
}

/* wake_slot makes kernel slot ks stand for connection fd: its wake socket
 * with the events its table's wake_events asks (a socket this side shut
 * for reading polls readable for ever), or nothing. A wait for POLLPRI
 * asks it too: the sender's out-of-band byte (send_urgent) may come after
 * the token this wait already took, and on a TCP wake socket (kfd) a lone
 * urgent byte is not POLLIN. */
static void wake_slot(struct pollfd *ks, int fd, struct osf_fdt_entry *e,
		      short want)
{
	short ev = rd_wake_events(fd, e);

	ks->fd = ev < 0 ? -1 : fd;
	ks->events = ev < 0 ? 0 : (short)(ev | (want & POLLPRI));
}

/* struct chans: the connections' channels a mux_poll sleeps on too
 * (ready.h chan), per pollfd slot: the sleep, its kernel slot (cx, -1:
 * none), whether it fired in the last sleep (fired) and how many times in
 * a row it fired with nothing to take (idle: past CHAN_IDLE_MAX the slot
 * sleeps without it for the rest of the call, as a blocking reader does:
 * the stand-in's socket stays readable while what it holds waits for a
 * receive to be posted). */
struct chans {
	struct rd_chan *c;
	int *cx;
	unsigned char *fired, *idle;
};
#define CHAN_IDLE_MAX 2

/* disarm_all ends the waits mux_poll armed; woken tells, per slot, whether
 * its sockets were found readable (only after a sleep: a wait that did not
 * sleep takes no token, it would be someone else's). A channel that fired
 * is taken from first: a token the take sent this thread waits on the
 * slot's socket then, and is taken as woken; when the tokens' count says
 * none was sent (the take lowered the readers' flag first, conn_rdma.c),
 * the socket is left alone: a recv and a poll of it per message found
 * nothing. */
static void disarm_all(struct pollfd *fds, nfds_t n, const struct pollfd *k,
		       const int *wx, unsigned char *arm, int slept,
		       struct chans *ch)
{
	nfds_t i;

	for (i = 0; i < n; i++) {
		int woken = 0, left = ch->cx[i] >= 0;
		ch->fired[i] = 0;
		if (left && slept && k[ch->cx[i]].revents) {
			ch->fired[i] = 1;
			int took = rd_chan_fired(&ch->c[i]);
			if (took > 0) {
				if (took > 1) /* a token its take sent */
					woken |= OSF_ARM_RX;
				ch->idle[i] = 0;
			} else if (ch->idle[i] <= CHAN_IDLE_MAX) {
				ch->idle[i]++;
			}
		}
		if (arm[i]) {
			if (slept) {
				if (k[i].revents & (POLLIN | POLLHUP | POLLERR))
					woken |= OSF_ARM_RX;
				if (wx[i] >= 0 && k[wx[i]].revents)
					woken |= OSF_ARM_TX;
			}
			rd_disarm(fds[i].fd, osf_fdt_lookup(fds[i].fd), arm[i],
					woken);
			arm[i] = 0;
		}
		/* Left uncounted: the last to leave may lend the channel
		 * only while no waiter is counted (rx.h). */
		if (left) {
			rd_chan_leave(&ch->c[i]);
			ch->cx[i] = -1;
		}
	}
}

/* efd_stand_in returns the epoll of this call (*wep, made at its first
 * use) that stands in the kernel's array for region eventfd efd (a slot's
 * writers wake there, OSF_FDF_REGIONEFD), or -1 (then the wait looks
 * again every EFD_LATE_MS). The eventfd itself cannot: its counter is
 * never read (sdp/side.h osf_side_use_efd), so it polls readable for
 * ever; in an epoll of this call, edge-triggered, each write after it was
 * added is one event, which efd_drain takes after each sleep. */
#define EFD_LATE_MS 20
static int efd_stand_in(int *wep, int efd)
{
	struct epoll_event ev = {EPOLLIN | EPOLLET, {.u64 = 0}};

	if (*wep < 0 && (*wep = REAL(epoll_create1)(EPOLL_CLOEXEC)) < 0)
		return -1;
	if (REAL(epoll_ctl)(*wep, EPOLL_CTL_ADD, efd, &ev) < 0 && errno != EEXIST)
		return -1;
	return *wep;
}

/* efd_drain takes the events waiting in wep (-1: none), so that it polls
 * readable again only for the next wake-up. */
static void efd_drain(int wep)
{
	struct epoll_event ev[16];
	int saved = errno;

	while (wep >= 0 && REAL(epoll_wait)(wep, ev, 16, 0) == 16)
		;
	errno = saved;
}

/* spin_on reports whether the spin ending at end (0: none) is still on,
 * keeping the clock it read in *now (then *fresh). */
static int spin_on(long end, long *now, int *fresh)
{
	if (!end)
		return 0;
	*fresh = 1;
	return osf_spinning_at(end, now);
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
	unsigned char stack_kind[64], stack_arm[64], stack_fired[64], stack_idle[64];
	int stack_wx[64], stack_cx[64];
	struct rd_chan stack_c[64];
	struct pollfd *k = stack_k;
	unsigned char *kind = stack_kind, *arm = stack_arm;
	int *wx = stack_wx;
	struct chans ch = {stack_c, stack_cx, stack_fired, stack_idle};
	nfds_t i, m = n, m0, extra = 0;
	/* One clock read for the timeout (ms), the spin and its growth (µs);
	 * now is the latest, fresh while no sleep came after it. */
	long begun = osf_spin_clock(), start = begun / 1000, now = begun,
	     spin_end = osf_spin_until(begun, timeout);
	int result = -1, spun = 0, wep = -1, efd_late = 0, slept = 0, fresh = 1, kern = 0;
	/* The server's links (host.h osf_links_copy) when an OSF_SHM_KFD
	 * listener is polled, for their end only (POLLRDHUP): one that ends
	 * (its client process exited) wakes the wait, which closes it and
	 * sleeps on (nl of them, from slot lx). */
	int lfds[OSF_LINKS_MAX], nl = -1, lx = -1;

	for (i = 0; i < n; i++) {
		struct osf_fdt_entry *e = osf_fdt_lookup(fds[i].fd);
		if (e && ((e->kind == OSF_FD_LISTEN && !(e->flags & OSF_FDF_KFD)) ||
			  ((fds[i].events & (POLLOUT | POLLWRNORM)) && osf_ready_of(e))))
			extra++;
		if (e && rd_has_chan(e))
			extra++;
		if (e && e->kind == OSF_FD_LISTEN && (e->flags & OSF_FDF_KFD) && nl < 0)
			extra += (nl = osf_links_copy(lfds, OSF_LINKS_MAX));
	}
	if (n + extra > 64) {
		k = malloc((n + extra) * sizeof(*k) +
			   n * (sizeof(*ch.c) + 2 * sizeof(*wx) + 4 * sizeof(*kind)));
		if (!k)
			return OSF_FAIL(ENOMEM);
		ch.c = (struct rd_chan *)(k + n + extra);
		wx = (int *)(ch.c + n);
		ch.cx = wx + n;
		kind = (unsigned char *)(ch.cx + n);
		arm = kind + n;
		ch.fired = arm + n;
		ch.idle = ch.fired + n;
	}
	for (i = 0; i < n; i++) {
		struct osf_fdt_entry *e = osf_fdt_lookup(fds[i].fd);
		int kd = e ? e->kind : OSF_FD_NONE, w;
		k[i] = fds[i];
		k[i].revents = 0;
		kind[i] = SLOT_KERNEL;
		arm[i] = 0;
		wx[i] = -1;
		ch.cx[i] = -1;
		ch.c[i].h = NULL;
		ch.fired[i] = ch.idle[i] = 0;
		if (e && osf_ready_of(e)) {
			kind[i] = SLOT_CONN;
			wake_slot(&k[i], fds[i].fd, e, fds[i].events); /* tokens, the end */
			if (!(fds[i].events & (POLLOUT | POLLWRNORM)) ||
			    (w = rd_wake_tx_fd(e)) < 0) /* none: woken on fd */
				continue;
			if ((e->flags & OSF_FDF_REGIONEFD) && (w = efd_stand_in(&wep, w)) < 0) {
				efd_late = 1;
				continue;
			}
			k[m].fd = w;
		} else if (kd == OSF_FD_LISTEN && !(e->flags & OSF_FDF_KFD)) {
			kind[i] = SLOT_LISTEN;
			k[m].fd = e->aux_fd;
		} else {
			continue;
		}
		k[m].events = POLLIN;
		k[m].revents = 0;
		wx[i] = (int)m++;
	}
	for (i = 0, lx = (int)m; nl > 0 && i < (nfds_t)nl; i++)
		k[m++] = (struct pollfd){lfds[i], POLLRDHUP, 0};
	efd_drain(wep); /* what came before: every later write is an edge */
	m0 = m; /* then the channels of the connections armed */
	/* Only with fds besides RDMA connections has a spin round anything
	 * to ask the kernel. An RDMA connection's rings say what its sockets
	 * would (tokens follow data or room there, and the engine bumps
	 * close_seq, which rd_poll reads, before it closes its end); shm's
	 * end (a peer's death) and a kernel TCP fd's events (OSF_SHM_KFD)
	 * show on the socket only. */
	for (i = 0; i < n; i++)
		kern |= fds[i].fd >= 0 &&
			(kind[i] != SLOT_CONN || !rd_has_chan(osf_fdt_lookup(fds[i].fd)));
	for (;;) {
		int ready = 0, armed = 0, due = 0, r, to, err, ended;
		m = m0;
		/* What the rings say now. */
		for (i = 0; i < n; i++) {
			fds[i].revents = 0;
			if (kind[i] != SLOT_CONN || fds[i].fd < 0)
				continue;
			fds[i].revents = conn_events(
				rd_poll(fds[i].fd, osf_fdt_lookup(fds[i].fd)),
				fds[i].events);
			if (fds[i].revents)
				ready++;
		}
		/* Spin first (rings and a zero-timeout look at the kernel),
		 * then arm the connections and sleep. */
		if (!ready && timeout != 0 && !spin_on(spin_end, &now, &fresh)) {
			if (spin_end)
				osf_spin_paid(0); /* it spun in vain */
			spin_end = 0;
			for (i = 0; i < n; i++) {
				if (kind[i] != SLOT_CONN || fds[i].fd < 0)
					continue;
				arm[i] = (unsigned char)rd_arm_kinds(
					fds[i].fd, osf_fdt_lookup(fds[i].fd),
					fds[i].events);
				/* Its channel first: what it takes, arm sees. */
				if (ch.idle[i] <= CHAN_IDLE_MAX &&
				    rd_chan_enter(fds[i].fd, osf_fdt_lookup(fds[i].fd),
						  &ch.c[i], -1, 0, arm[i]) >= 0) {
					k[m] = (struct pollfd){ch.c[i].w.fd, POLLIN, 0};
					ch.cx[i] = (int)m++;
				}
				fds[i].revents = conn_events(
					rd_arm(fds[i].fd,
						     osf_fdt_lookup(fds[i].fd),
						     arm[i], 0, &due),
					fds[i].events);
				if (fds[i].revents)
					ready++;
			}
			armed = 1;
			if (ready) { /* raced to ready: no sleep, no tokens */
				disarm_all(fds, n, k, wx, arm, 0, &ch);
				armed = 0;
			}
		}
		to = (ready || spin_end) ? 0
		     : fresh	       ? remaining_at(timeout, start, now / 1000)
				       : remaining(timeout, start);
		/* Connections with ring pages to give back: first sleep
		 * OSF_TRIM_IDLE_MS; if nothing came, they are idle. */
		due = armed && due && (to < 0 || to > OSF_TRIM_IDLE_MS);
		if (due)
			to = OSF_TRIM_IDLE_MS;
		if (armed && efd_late && (to < 0 || to > EFD_LATE_MS))
			to = EFD_LATE_MS;
		if (to && osf_intr_count() != intr) {
			/* A handler ran in osf's part of the call: the kernel's
			 * poll would not sleep past it. */
			if (armed)
				disarm_all(fds, n, k, wx, arm, 0, &ch);
			result = OSF_FAIL(EINTR);
			goto out;
		}
		slept |= to != 0;
		if (to)
			fresh = 0;
		/* A spin round over RDMA connections alone asks the kernel
		 * nothing (a poll system call per round was most of the
		 * spin's cost), but the last before the timeout does. */
		if (!to && !ready && spin_end && !kern && !mask &&
		    remaining_at(timeout, start, now / 1000) != 0)
			r = 0;
		else
			r = mask ? REAL(ppoll)(k, m,
				       to < 0 ? NULL
					      : &(struct timespec){to / 1000,
								   (to % 1000) *
									   1000000L},
				       mask)
			 : REAL(poll)(k, m, to);
		err = errno;
		if (r > 0)
			efd_drain(wep);
		for (i = 0, ended = 0; r > 0 && nl > 0 && i < (nfds_t)nl; i++)
			if (k[lx + (int)i].revents) {
				/* Off for the rest of this call: one it could
				 * not close (no fds for its hellos) wakes it
				 * once. */
				k[lx + (int)i].fd = -1;
				ended++;
			}
		if (ended) {
			osf_links_ended();
			r -= ended;
		}
		/* Before disarm_all, which clears arm[]. */
		for (i = 0; due && r == 0 && i < n; i++)
			if ((arm[i] & OSF_ARM_RX) && kind[i] == SLOT_CONN && fds[i].fd >= 0)
				rd_trim(fds[i].fd, osf_fdt_lookup(fds[i].fd));
		if (armed)
			disarm_all(fds, n, k, wx, arm, r > 0, &ch);
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
				else if ((k[i].revents || ch.fired[i] ||
					  (wx[i] >= 0 && k[wx[i]].revents)) &&
					 !fds[i].revents && fds[i].fd >= 0) {
					struct osf_fdt_entry *e =
						osf_fdt_lookup(fds[i].fd);
					if (!armed) /* the end, if it came */
						rd_disarm(fds[i].fd, e, 0,
								k[i].revents ? OSF_ARM_RX
									     : OSF_ARM_TX);
					fds[i].revents = conn_events(
						rd_poll(fds[i].fd, e),
						fds[i].events);
					wake_slot(&k[i], fds[i].fd, e,
						  fds[i].events);
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
		if (result > 0 && slept)
			osf_spin_woke(begun);
		/* A handler ran during the call (it may have closed a polled
		 * fd: never POLLNVAL for it): EINTR, as the kernel's poll
		 * interrupted before it found anything. */
		if (osf_intr_count() != intr) {
			result = OSF_FAIL(EINTR);
			goto out;
		}
		if (result > 0 ||
		    (fresh ? remaining_at(timeout, start, now / 1000) : remaining(timeout, start)) == 0)
			goto out;
		spun = spin_end != 0;
	}
out:
	if (wep >= 0) {
		int saved = errno;
		REAL(close)(wep);
		errno = saved;
	}
	if (k != stack_k)
		free(k);
	return result;
}

static int needs_mux(const struct pollfd *fds, nfds_t n)
{
	nfds_t i;

	if (likely(osf_fdt_table_fd() < 0))
		return 0;
	/* An array the kernel could not read is its EFAULT (an n beyond the
	 * limit its EINVAL), never a crash here. */
	osf_fault_arm();
	if (n > (nfds_t)INT_MAX / sizeof(*fds) || osf_probe_rd(fds, n * sizeof(*fds)) < 0)
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

/* set_bytes is what the kernel copies of an fd_set for n fds (whole
 * longs, FDS_BYTES). */
static size_t set_bytes(int n)
{
	return ((size_t)n + BITS - 1) / BITS * sizeof(unsigned long);
}

static int select_needs_mux(int n, fd_set *r, fd_set *w, fd_set *x)
{
	int fd;

	if (likely(osf_fdt_table_fd() < 0) || n <= 0)
		return 0;
	/* Sets the kernel could not read are its EFAULT, never a crash. */
	osf_fault_arm();
	if (n > FD_SETSIZE * 64 || (r && osf_probe_rd(r, set_bytes(n)) < 0) ||
	    (w && osf_probe_rd(w, set_bytes(n)) < 0) || (x && osf_probe_rd(x, set_bytes(n)) < 0))
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
