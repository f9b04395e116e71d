//go:build osf_make

/* epoll.c: an application epoll's state in osf (epoll.h): its inner epoll,
 * its items and their lists, orphans, and epoll_ctl (with epoll_create and
 * epoll_create1, which pass through). */
#include "epoll.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

struct ep *ep_all;
int ep_all_lock;

/* Held from ep_create's look-up to its entry's store: two threads that
 * register their first offloaded fds in one epoll at once (Go's dialing
 * goroutines, all on the netpoller's) must share one state, or the
 * loser's inner epoll joins the epoll under a marker that no wait strips
 * (the program gets it as its own data: Go's netpoller took it for a
 * pointer). */
static int create_lock;

static struct ep *ep_create_locked(int epfd)
{
	struct osf_fdt_entry ent;
	struct ep *ep;
	int fdfl;

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
	ent.image = osf_fdt_cur_image;
	ent.priv = (uint64_t)(uintptr_t)ep;
	if (osf_fdt_set(epfd, &ent) < 0) {
		free(ep);
		return NULL;
	}
	mu_lock(&ep_all_lock);
	ep->next_ep = ep_all;
	ep_all = ep;
	mu_unlock(&ep_all_lock);
	return ep;
}

struct ep *ep_create(int epfd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(epfd);
	struct ep *ep;

	if (e && ep_of(e))
		return ep_of(e);
	mu_lock(&create_lock);
	e = osf_fdt_lookup(epfd); /* another thread's, made meanwhile */
	ep = e && ep_of(e) ? ep_of(e) : ep_create_locked(epfd);
	mu_unlock(&create_lock);
	return ep;
}

/* ep_entry_sync writes ep's hidden fds into its fd table entry, which
 * makes them cross exec with the epoll fd (fdtable accounts for them). */
void ep_entry_sync(struct ep *ep)
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

/* item_key returns the inner epoll's data for it (tag: WSOCK_TAG or 0). */
static uint64_t item_key(const struct epi *it, unsigned tag)
{
	return (uint64_t)(uint32_t)it->ino << 32 |
	       (uint64_t)(uint32_t)it->fd << 1 | tag;
}

/* ep_item_of returns the item an inner event's data names, or NULL when no
 * item of this process has that identity (any more). */
struct epi *ep_item_of(struct ep *ep, uint64_t key)
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
 * it while any process holds the file) is taken over. EPOLLPRI: the
 * sender's out-of-band byte (send_urgent) may come after the token a wait
 * took, and on a TCP wake socket (kfd) a lone urgent byte is not EPOLLIN. */
static int inner_add(struct ep *ep, int fd, uint64_t key)
{
	struct epoll_event iev;

	iev.events = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET;
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
	int w = e ? rd_wake_tx_fd(e) : -1, d;

	if (it->wsock >= 0)
		return 0;
	iev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
	if (e && (e->flags & OSF_FDF_REGIONEFD)) {
		/* One registration for all: an epoll holds a file once per
		 * fd, and a dup per item would cost an fd per connection. */
		iev.data.u64 = EFD_KEY(w);
		if (REAL(epoll_ctl)(ep->inner, EPOLL_CTL_ADD, w, &iev) < 0 && errno != EEXIST)
			return -1;
		it->wsock = w;
		it->wown = 0;
		it->wefd = 1;
		return 0;
	}
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

/* ep_disarm_item ends the wait it was counted in, taking the tokens it is
 * owed from the sockets that fired (woken). Its channel, when it slept on
 * one, is taken from first (what it announced: woken for input shares
 * the item's key) and left: the token that take sent this thread is
 * then on the socket, and taken as owed. When the tokens' count says
 * none waits there (ready.h: FIRED is 1), the socket is left alone: its
 * recv and the look for its end found nothing once per message. An end
 * that came meanwhile is seen all the same: the engine bumps close_seq
 * before it closes its end (sdp/rdma stream.go endLocal), which the
 * woken item's next look checks (osf_side_peer_closing). */
void ep_disarm_item(struct epi *it, struct osf_fdt_entry *e, int woken)
{
	int took;

	if (it->ch.h && (woken & OSF_ARM_RX) && (took = rd_chan_fired(&it->ch)) > 0) {
		woken |= (it->armed & OSF_ARM_RX);
		if (took == 1)
			woken &= ~OSF_ARM_RX;
	}
	if (it->armed || woken) {
		rd_disarm(it->at, e, it->armed, woken);
		it->armed = 0;
	}
	/* Left uncounted: the last to leave may lend the channel only
	 * while no waiter is counted (rx.h). */
	rd_chan_leave(&it->ch);
}

/* ep_arm_item counts it as a waiter and asks its peer for tokens; 1 (and it
 * is not counted) when it turned out ready meanwhile, or when it could not
 * be armed (then the caller looks at it again rather than sleep past it). */
int ep_arm_item(struct ep *ep, struct epi *it, struct osf_fdt_entry *e)
{
	uint32_t want = it->events | EPOLLERR | EPOLLHUP;
	int kinds = rd_arm_kinds(it->at, e, poll_events(it->events));
	short r;

	if ((kinds & OSF_ARM_TX) && reg_wsock(ep, it, e) < 0)
		return 1;
	/* Its channel first (what that takes, arm sees); not in a process
	 * that shares the inner epoll (its waits would take this one's
	 * events). */
	if (!it->ch.h && !ep->shared)
		(void)rd_chan_enter(it->at, e, &it->ch, ep->inner, item_key(it, 0), kinds);
	r = rd_arm(it->at, e, kinds, it->armed, &ep->trim_due);

	it->armed |= kinds;
	if ((poll_to_epoll(r) & want) &&
	    (!(it->events & EPOLLET) || rd_stamp(it->at, e) != it->stamp)) {
		ep_disarm_item(it, e, 0);
		return 1;
	}
	return 0;
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

/* ep_orphan keeps it, whose fd is being closed while dup still holds its
 * open file: the kernel's registration is keyed by file and fd number and
 * ends only when the file's last fd closes, so waits go on reporting it
 * (its events, its data) through dup, and its inner registration, of the
 * same file, stays; no epoll_ctl can name it unless its number holds the
 * file again (orphan_take). */
void ep_orphan(struct ep *ep, struct epi *it, int dup)
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
	rd_chan_leave(&it->ch); /* left already on every path: a safety net */
	if (it->wown)
		osf_fdt_close_hidden(it->wsock);
	list_del(ep, it);
	if (it->orphan)
		orphan_unlink(ep, it);
	else
		ep->byfd[it->fd] = NULL;
	free(it);
}

/* ep_drop_item removes it from ep for good: its fd is being closed. Only a
 * process alone with the inner epoll deletes the registrations (another
 * one may hold the same open file, and it keeps them, as in the kernel). */
void ep_drop_item(struct ep *ep, struct epi *it)
{
	ep_disarm_item(it, osf_fdt_lookup(it->at), 0); /* nothing if parked */
	if (!ep->shared) {
		if (!it->orphan) /* an orphan's number is not its file's */
			REAL(epoll_ctl)(ep->inner, EPOLL_CTL_DEL, it->fd, NULL);
		if (it->wsock >= 0 && !it->wefd) /* a region's stays for its others */
			REAL(epoll_ctl)(ep->inner, EPOLL_CTL_DEL, it->wsock, NULL);
	}
	free_item(ep, it);
}

/* ep_drop_closed removes it, whose fd a signal handler closed while this
 * thread held a mux lock (hold: its connection, still referenced, or
 * NULL): its wait ends on the connection, and the writers' wake socket,
 * still open, leaves the inner epoll; the fd's own registration ended
 * with its open file (or stays with a dup's, naming an identity no item
 * has). */
void ep_drop_closed(struct ep *ep, struct epi *it, void *hold)
{
	rd_chan_leave(&it->ch);
	osf_ready_hold_disarm(hold, it->armed);
	it->armed = 0;
	if (hold && !ep->shared && it->wsock >= 0 && !it->wefd)
		REAL(epoll_ctl)(ep->inner, EPOLL_CTL_DEL, it->wsock, NULL);
	free_item(ep, it);
}

/* ep_stale_item forgets it, whose fd no longer holds its file: closed by a
 * handler on this thread (its close is deferred here) or behind osf's
 * back. */
void ep_stale_item(struct ep *ep, struct epi *it)
{
	ep_drop_closed(ep, it, mu_depth ? mu_deferred_hold(it->at, it->ino) : NULL);
}

/* ep_to_kernel hands it, an item of a kernel socket whose readiness the
 * kernel reports again (kernel_ready), to the kernel: registered in the
 * application's epoll with its events and data (unless the application
 * deleted it), and out of the inner one. */
void ep_to_kernel(struct ep *ep, struct epi *it)
{
	struct epoll_event ev;

	ev.events = it->events;
	ev.data = it->data;
	if (it->disabled) /* a one-shot that fired: stays off until MOD */
		ev.events = EPOLLONESHOT | EPOLLET;
	REAL(epoll_ctl)(ep->inner, EPOLL_CTL_DEL, it->fd, NULL);
	if (!it->parked && REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, it->fd, &ev) == 0)
		ep_note_pending(ep, EPOLL_CTL_ADD, it->fd, &ev);
	free_item(ep, it);
}

/* ep_kick wakes the waits asleep in the kernel on ep (the lock is held). */
void ep_kick(struct ep *ep)
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
	ep_rec_note(ep, it);
	return it;
}

/* The events EPOLLEXCLUSIVE may come with (the kernel's
 * EPOLLEXCLUSIVE_OK_BITS). */
#define EXCLUSIVE_OK (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | \
		      EPOLLET | EPOLLEXCLUSIVE)

/* ep_ctl_conn registers, changes or removes an offloaded connection. */
int ep_ctl_conn(struct ep *ep, int op, int fd, struct epoll_event *ev)
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
		ep_stale_item(ep, it);
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
		ep_disarm_item(it, e, 0);
		it->events = ev->events;
		it->data = ev->data;
		it->disabled = 0;
		if (unlikely(!ep->rec))
			ep_rec_create(ep);
		ep_rec_note(ep, it);
		list_add(ep, it);
		/* The kernel wakes a wait already asleep when the fd it adds
		 * (or modifies) is ready, or becomes so: kick it now, or arm
		 * the item so that the peer's token wakes it. */
		if (poll_to_epoll(rd_poll(fd, e)) &
		    (it->events | EPOLLERR | EPOLLHUP)) {
			ep_kick(ep);
		} else if (ep->sleepers || ep->young) {
			list_del(ep, it);
			if (ep_arm_item(ep, it, e)) { /* raced to ready */
				list_add(ep, it);
				ep_kick(ep);
			}
		}
		return 0;
	case EPOLL_CTL_DEL:
		if (!it || it->parked)
			return OSF_FAIL(ENOENT);
		ep_disarm_item(it, e, 0);
		list_del(ep, it);
		it->parked = 1;
		ep_rec_note(ep, it);
		return 0;
	}
	return OSF_FAIL(EINVAL);
}

/* lsn_put registers the companion aux in ep's epoll with ev, whether or
 * not a registration of it is there already (EPOLLEXCLUSIVE's cannot be
 * modified: it is made again). */
static void lsn_put(struct ep *ep, int aux, const struct epoll_event *ev)
{
	struct epoll_event e = *ev; /* epoll_ctl reads it, never writes */

	if (REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, aux, &e) == 0 || errno != EEXIST)
		return;
	if (REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_MOD, aux, &e) == 0)
		return;
	REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_DEL, aux, NULL);
	REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, aux, &e);
}

/* lsn_forget drops fd's note, if there is one. */
static void lsn_forget(struct ep *ep, int fd)
{
	int i;

	for (i = 0; i < ep->nlisteners; i++)
		if (ep->listeners[i].fd == fd) {
			ep->listeners[i] = ep->listeners[--ep->nlisteners];
			return;
		}
}

/* ep_listener_ctl follows the kernel's successful epoll_ctl op of the
 * listener fd with companion aux. The kernel keys registrations by file and
 * fd number, so two dups of a listener are two registrations, each with
 * its own data and each removed by its own EPOLL_CTL_DEL; the companion is
 * one hidden fd for all dups, so its one registration stands for all of
 * them: it carries the events and data of the newest ADD or MOD and goes
 * with the last DEL. (Go's net.FileListener registers the dup, deletes the
 * original, then the file's own registration: the dup must go on getting
 * the companion's connections.) */
void ep_listener_ctl(struct ep *ep, int op, int fd, int aux, const struct epoll_event *ev)
{
	int i;

	if (op == EPOLL_CTL_DEL) {
		lsn_forget(ep, fd);
		for (i = ep->nlisteners - 1; i >= 0; i--)
			if (ep->listeners[i].aux == aux) {
				lsn_put(ep, aux, &ep->listeners[i].ev);
				return;
			}
		REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_DEL, aux, NULL);
		return;
	}
	lsn_put(ep, aux, ev);
	lsn_forget(ep, fd);
	if (ep->nlisteners == ep->caplisteners) {
		int cap = ep->caplisteners ? 2 * ep->caplisteners : 8;
		struct ep_lsn *n = realloc(ep->listeners, (size_t)cap * sizeof(*n));
		if (!n)
			return;
		ep->listeners = n;
		ep->caplisteners = cap;
	}
	ep->listeners[ep->nlisteners++] = (struct ep_lsn){fd, aux, *ev};
}

/* ep_listener_closed forgets the note of a listener fd closed in this
 * process (osf_mux_closed says why the registrations stay). */
void ep_listener_closed(struct ep *ep, int fd) { lsn_forget(ep, fd); }

/* link_reg registers link fd in ep's inner epoll (ep locked). */
static void link_reg(struct ep *ep, int fd)
{
	struct epoll_event iev;

	iev.events = EPOLLRDHUP | EPOLLET; /* its end only: hellos are an accept's */
	iev.data.u64 = LINKS_KEY;
	(void)REAL(epoll_ctl)(ep->inner, EPOLL_CTL_ADD, fd, &iev);
}

/* ep_links_watch makes epoll epfd (its state made when make), where an
 * OSF_SHM_KFD listener was just registered, watch the server's links
 * (host.h osf_links_copy):
 * each in its inner epoll, edge-triggered (a link its end left unread,
 * with no fds for its hellos, wakes a wait once, never makes it spin),
 * and each new one as it comes (osf_mux_link_added); its waits then
 * close the links of client processes that ended (absorb). No mux lock
 * is held: the links are copied under the set-up's lock, which is taken
 * before a mux lock, never under one. */
void ep_links_watch(int epfd, int make)
{
	int fds[OSF_LINKS_MAX], i, n, saved = errno;
	struct ep *ep = make ? ep_create(epfd) : ep_find(epfd);

	if (!ep)
		return;
	mu_lock(&ep->lock);
	if (ep->links || ep_inner(ep) < 0) {
		mu_unlock(&ep->lock);
		errno = saved;
		return;
	}
	ep->links = 1; /* from now on osf_mux_link_added registers new ones */
	mu_unlock(&ep->lock);
	n = osf_links_copy(fds, OSF_LINKS_MAX);
	mu_lock(&ep->lock);
	for (i = 0; i < n; i++) /* one closed meanwhile: EBADF, or another's file, which wakes once */
		link_reg(ep, fds[i]);
	mu_unlock(&ep->lock);
	errno = saved;
}

void osf_mux_link_added(int fd)
{
	struct ep *ep;

	if (!ep_all)
		return;
	mu_lock(&ep_all_lock);
	for (ep = ep_all; ep; ep = ep->next_ep) {
		mu_lock(&ep->lock);
		if (ep->links && ep->inner >= 0)
			link_reg(ep, fd);
		mu_unlock(&ep->lock);
	}
	mu_unlock(&ep_all_lock);
}

/* ep_note_pending remembers (or forgets) how an undecided TCP socket is
 * registered: if it becomes offloaded, its wake socket replaces it and
 * the kernel silently drops the registration, which osf then redoes. */
void ep_note_pending(struct ep *ep, int op, int fd, struct epoll_event *ev)
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

/* ctl_item is epoll_ctl of an fd whose registrations are items of osf's
 * (an fd whose readiness osf computes: its entry has a readiness table). */
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
	r = ep_ctl_conn(ep, op, fd, ev);
	mu_unlock(&ep->lock);
	return r;
}

/* ctl_kernel is epoll_ctl for a kernel socket whose readiness osf computes
 * for a while (its entry has a readiness table: a connect through a
 * gateway waiting for the reply, or failed with SO_ERROR unread): an item
 * of osf's while it does, the kernel's registration once the table is
 * gone (kernel_ready). */
static int ctl_kernel(int epfd, int op, int fd, struct epoll_event *ev,
		      struct osf_fdt_entry *t)
{
	struct ep *ep = ep_find(epfd);
	struct epi *it;
	int r;

	if (osf_ready_of(t)) {
		r = ctl_item(epfd, op, fd, ev);
		if (r == 0 && op == EPOLL_CTL_ADD)
			__atomic_or_fetch(&t->flags, OSF_FDF_MUXITEMS, __ATOMIC_RELEASE);
		return r;
	}
	if (ep) { /* the kernel's now: hand a waiting item over first */
		mu_lock(&ep->lock);
		it = fd < ep->cap ? ep->byfd[fd] : NULL;
		if (it && same_file(it, t))
			ep_to_kernel(ep, it);
		ep_note_pending(ep, op, fd, ev);
		mu_unlock(&ep->lock);
	}
	return REAL(epoll_ctl)(epfd, op, fd, ev);
}

OSF_EXPORT int epoll_create(int size) { return REAL(epoll_create)(size); }

OSF_EXPORT int epoll_create1(int flags) { return REAL(epoll_create1)(flags); }

OSF_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct osf_fdt_entry *t = osf_fdt_lookup(fd);
	struct ep *ep;
	int r;

	if (likely(!t || !osf_kind_may_offload(t->kind))) {
		if (likely(!t || (!__atomic_load_n(&t->ops, __ATOMIC_ACQUIRE) &&
				  !(__atomic_load_n(&t->flags, __ATOMIC_ACQUIRE) &
				    OSF_FDF_MUXITEMS))))
			return REAL(epoll_ctl)(epfd, op, fd, ev);
	}
	/* An event the kernel could not read is its EFAULT, before
	 * anything else (ep_op_has_event), never a crash here. */
	osf_fault_arm();
	if (op != EPOLL_CTL_DEL && osf_probe_rd(ev, sizeof(*ev)) < 0)
		return OSF_FAIL(EFAULT);
	if (!osf_kind_may_offload(t->kind))
		return ctl_kernel(epfd, op, fd, ev, t);
	if (t->kind == OSF_FD_INET) {
		/* The registration is the kernel socket's: connect must not
		 * keep it alive behind the wake socket (OSF_FDF_NOKEEP). */
		__atomic_or_fetch(&t->flags, OSF_FDF_NOKEEP, __ATOMIC_RELAXED);
		r = REAL(epoll_ctl)(epfd, op, fd, ev);
		if (r == 0 && (ep = ep_create(epfd)) != NULL) {
			mu_lock(&ep->lock);
			ep_note_pending(ep, op, fd, ev);
			mu_unlock(&ep->lock);
		}
		return r;
	}
	if (t->kind == OSF_FD_LISTEN && (t->flags & OSF_FDF_KFD)) {
		r = REAL(epoll_ctl)(epfd, op, fd, ev); /* the kernel's */
		if (r == 0 && op == EPOLL_CTL_ADD)
			ep_links_watch(epfd, 1);
		return r;
	}
	if (t->kind == OSF_FD_LISTEN) {
		/* The companion joins with the application's own data. */
		r = REAL(epoll_ctl)(epfd, op, fd, ev);
		if (r < 0)
			return r;
		ep = ep_create(epfd);
		if (ep) {
			mu_lock(&ep->lock);
			ep_listener_ctl(ep, op, fd, t->aux_fd, ev);
			mu_unlock(&ep->lock);
		} else {
			(void)REAL(epoll_ctl)(epfd, op, t->aux_fd, ev);
		}
		return r;
	}
	return ctl_item(epfd, op, fd, ev);
}
