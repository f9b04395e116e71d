//go:build osf_make

/* notify.c: what libosf.so's other hooks tell selectmux (mux.h): a socket
 * offloaded, a connection's own state changed, a hidden fd moved, a
 * kernel socket's readiness the kernel's again, an fd closed, a fork. */
#include "epoll.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

void osf_mux_offloaded(int fd)
{
	struct osf_fdt_entry *t = osf_fdt_lookup(fd);
	struct ep *ep;
	int i, watch[8], nw = 0;

	if (!ep_all || !t)
		return;
	mu_lock(&ep_all_lock);
	for (ep = ep_all; ep; ep = ep->next_ep) {
		mu_lock(&ep->lock);
		for (i = 0; i < ep->npend; i++) {
			struct epoll_event ev;
			if (ep->pendfd[i] != fd)
				continue;
			ev = ep->pend[i];
			if (osf_ready_of(t) && t->kind != OSF_FD_KERNEL) {
				/* The same file when the connection is the
				 * kernel socket itself (OSF_SHM_KFD): its
				 * registration would report tokens. */
				REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_DEL, fd, NULL);
				ep_ctl_conn(ep, EPOLL_CTL_ADD, fd, &ev);
			} else if (osf_ready_of(t)) {
				/* Same file: the kernel's registration would
				 * report the kernel's readiness, not osf's
				 * (writable before a gateway answers). */
				REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_DEL, fd, NULL);
				if (ep_ctl_conn(ep, EPOLL_CTL_ADD, fd, &ev) == 0)
					__atomic_or_fetch(&t->flags, OSF_FDF_MUXITEMS,
							  __ATOMIC_RELEASE);
			} else if (t->kind == OSF_FD_LISTEN && !(t->flags & OSF_FDF_KFD)) {
				ep_listener_ctl(ep, EPOLL_CTL_ADD, fd, t->aux_fd, &ev);
			} else if (t->kind == OSF_FD_LISTEN && nw < 8) {
				watch[nw++] = ep->epfd; /* registered before its listen */
			}
			ep_note_pending(ep, EPOLL_CTL_DEL, fd, NULL);
			break;
		}
		mu_unlock(&ep->lock);
	}
	mu_unlock(&ep_all_lock);
	for (i = 0; i < nw; i++) /* no mux lock held (ep_links_watch) */
		ep_links_watch(watch[i], 0);
}

/* recheck puts it back on the may-be-ready list when it waits for any of
 * events on the connection priv (all: any connection; then an item whose
 * fd no longer holds its file goes); 1 when it did. */
static int recheck(struct ep *ep, struct epi *it, int all, uint64_t priv, uint32_t events)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(it->at);

	if (all && !same_file(it, e)) {
		ep_stale_item(ep, it); /* a close deferred unnoted */
		return 0;
	}
	if (it->parked || it->disabled || !same_file(it, e) ||
	    (!all && e->priv != priv) ||
	    (events != OSF_MUX_ALL && !(it->events & events)))
		return 0;
	ep_disarm_item(it, e, 0);
	list_add(ep, it);
	return 1;
}

/* mux_changed is osf_mux_changed with no mux lock held by this thread; fd -1
 * re-checks every item (deferred re-checks overflowed). */
void mux_changed(int fd, int dups, uint32_t events)
{
	struct osf_fdt_entry *t = fd >= 0 ? osf_fdt_lookup(fd) : NULL;
	uint64_t priv = t ? __atomic_load_n(&t->priv, __ATOMIC_ACQUIRE) : 0;
	int all = fd < 0;
	struct ep *ep;
	int i;

	if (!ep_all || (!priv && !all))
		return;
	if (all)
		dups = 1, events = OSF_MUX_ALL;
	mu_lock(&ep_all_lock);
	for (ep = ep_all; ep; ep = ep->next_ep) {
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
			ep_kick(ep);
		mu_unlock(&ep->lock);
	}
	mu_unlock(&ep_all_lock);
}

void osf_mux_changed(int fd, int dups, uint32_t events)
{
	if (!ep_all)
		return;
	if (mu_depth) { /* a handler on a thread inside the mux */
		struct deferred d = {.op = DEFER_CHANGED, .fd = fd, .dups = dups,
				     .events = events};
		mu_defer(&d);
	} else
		mux_changed(fd, dups, events);
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

	if (!ep_all)
		return;
	mu_lock(&ep_all_lock);
	for (ep = ep_all; ep; ep = ep->next_ep) {
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
	mu_unlock(&ep_all_lock);
}

void osf_mux_kernel_ready(int fd)
{
	struct osf_fdt_entry *t = osf_fdt_lookup(fd);
	struct ep *ep;

	if (!ep_all || !t)
		return;
	mu_lock(&ep_all_lock);
	for (ep = ep_all; ep; ep = ep->next_ep) {
		struct epi *it;
		mu_lock(&ep->lock);
		it = fd < ep->cap ? ep->byfd[fd] : NULL;
		if (it && same_file(it, t)) {
			ep_to_kernel(ep, it);
			ep_kick(ep); /* a wait asleep picks the kernel's up */
		}
		mu_unlock(&ep->lock);
	}
	mu_unlock(&ep_all_lock);
}

/* ---- closing ------------------------------------------------------------------- */

/* DUP_UNKNOWN: whether a dup of a closing fd's file stays open has not
 * been looked up yet (close_dup). */
#define DUP_UNKNOWN (-2)

/* close_dup returns *dup, looking it up first (osf_ready_dup_fd) if need
 * be: only a close that leaves a registered item pays for it. */
static int close_dup(int *dup, int fd, struct osf_fdt_entry *e, uint64_t ino)
{
	if (*dup == DUP_UNKNOWN)
		*dup = osf_ready_dup_fd(fd, e, ino);
	return *dup;
}

/* mux_forget is a close that a signal handler deferred to its thread's last
 * mux unlock: fd's items that still have the closed file's identity ino
 * go (the number may hold a new file by now), or live on through a dup
 * of the file (ep_orphan), and so does fd's pending registration, unless fd
 * is an undecided socket again. */
void mux_forget(int fd, uint64_t ino, void *hold)
{
	struct ep *ep;
	int reused = osf_fdt_kind(fd) == OSF_FD_INET, dup = DUP_UNKNOWN;

	mu_lock(&ep_all_lock);
	for (ep = ep_all; ep; ep = ep->next_ep) {
		struct epi *it, *next;
		mu_lock(&ep->lock);
		it = fd < ep->cap ? ep->byfd[fd] : NULL;
		if (it && it->ino == ino) {
			if (!it->parked && close_dup(&dup, fd, NULL, ino) >= 0)
				ep_orphan(ep, it, dup);
			else
				ep_drop_closed(ep, it, hold);
		}
		for (it = ep->orphans; it; it = next) {
			next = it->onext;
			if (it->at != fd || it->ino != ino)
				continue;
			if (close_dup(&dup, fd, NULL, ino) >= 0)
				it->at = dup;
			else
				ep_drop_closed(ep, it, hold);
		}
		if (!reused)
			ep_note_pending(ep, EPOLL_CTL_DEL, fd, NULL);
		mu_unlock(&ep->lock);
	}
	mu_unlock(&ep_all_lock);
}

/* osf_mux_forget drops fd from every epoll of this process: the program
 * is closing it. An item whose file stays open through a dup lives on
 * (ep_orphan), as its registration does in the kernel. A signal handler on a thread that holds a mux lock (its
 * close interrupted an epoll_wait collecting items, an epoll_ctl) must
 * not wait for it: the drop is deferred to the thread's last mux unlock
 * (mux_forget), holding the connection so that its items' waits can end
 * there; the close itself goes on at once. */
void osf_mux_forget(int fd)
{
	struct osf_fdt_entry *e;
	struct ep *ep;
	int dup = DUP_UNKNOWN;

	if (!ep_all)
		return;
	e = osf_fdt_lookup(fd);
	if (mu_depth) {
		struct deferred d = {.op = DEFER_FORGET, .fd = fd};
		if (!e)
			return;
		d.ino = e->ino;
		d.hold = rd_hold(fd, e);
		if (!mu_defer(&d))
			osf_ready_unhold(d.hold); /* never the last reference: fd's */
		return;
	}
	mu_lock(&ep_all_lock);
	for (ep = ep_all; ep; ep = ep->next_ep) {
		struct epi *it, *next;
		mu_lock(&ep->lock);
		it = fd < ep->cap ? ep->byfd[fd] : NULL;
		if (it) {
			if (!it->parked && same_file(it, e) &&
			    close_dup(&dup, fd, e, 0) >= 0)
				ep_orphan(ep, it, dup);
			else
				ep_drop_item(ep, it);
		}
		for (it = ep->orphans; it; it = next) {
			next = it->onext;
			if (it->at != fd)
				continue;
			if (!same_file(it, e))
				ep_stale_item(ep, it);
			else if (close_dup(&dup, fd, e, 0) >= 0)
				it->at = dup;
			else
				ep_drop_item(ep, it);
		}
		ep_note_pending(ep, EPOLL_CTL_DEL, fd, NULL);
		mu_unlock(&ep->lock);
	}
	mu_unlock(&ep_all_lock);
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
		mu_lock(&ep_all_lock);
		for (ep = ep_all; ep; ep = ep->next_ep) {
			mu_lock(&ep->lock);
			ep_listener_closed(ep, fd);
			mu_unlock(&ep->lock);
		}
		mu_unlock(&ep_all_lock);
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
	mu_lock(&ep_all_lock);
	for (pp = &ep_all; *pp; pp = &(*pp)->next_ep)
		if (*pp == ep) {
			*pp = ep->next_ep;
			break;
		}
	mu_unlock(&ep_all_lock);
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

/* child_after_fork resets selectmux's locks in a fork child. */
OSF_FORK_TEXT static void child_after_fork(void)
{
	struct ep *ep;

	OSF_RESET(ep_all_lock, 0);
	for (ep = ep_all; ep; ep = ep->next_ep) {
		OSF_RESET(ep->lock, 0);
		OSF_RESET(ep->sleepers, 0);
		OSF_RESET(ep->shared, 1);
	}
}
OSF_AFTER_FORK(child_after_fork, OSF_FORK_RESET);

/* parent_after_fork notes in the parent that a fork shared the epolls'
 * hidden state with a child: a close then leaves the inner registrations
 * to the kernel, which ends them with the open file. */
OSF_FORK_TEXT static void parent_after_fork(void)
{
	struct ep *ep;

	if (!__atomic_load_n(&ep_all, __ATOMIC_ACQUIRE))
		return; /* none: an epoll made from now on is not the child's */
	mu_lock(&ep_all_lock);
	for (ep = ep_all; ep; ep = ep->next_ep)
		if (!__atomic_load_n(&ep->shared, __ATOMIC_RELAXED))
			__atomic_store_n(&ep->shared, 1, __ATOMIC_RELAXED);
	mu_unlock(&ep_all_lock);
}
OSF_AFTER_FORK(parent_after_fork, OSF_FORK_PARENT);
