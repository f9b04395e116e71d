//go:build osf_make

/* epoll_exec.c: an epoll's offloaded registrations across exec: the record
 * kept current in a hidden memfd (struct eprec, epoll.h), and the exec'd
 * image's adoption of it at its first use of the epoll fd. */
#include "epoll.h"

#include <fcntl.h>
#include <sys/mman.h>

/* ep_rec_note records it as it stands now (ep->rec, if any). */
void ep_rec_note(struct ep *ep, const struct epi *it)
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

/* ep_rec_create starts ep's record when its epoll fd may cross exec. */
void ep_rec_create(struct ep *ep)
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
			ep_rec_note(ep, ep->byfd[i]);
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
		if (ep_ctl_conn(ep, EPOLL_CTL_ADD, (int)fd, &ev) == 0 && sl.state == REC_OFF) {
			struct epi *it = ep->byfd[fd];
			it->disabled = 1;
			list_del(ep, it);
			ep_rec_note(ep, it);
		}
	}
	mu_unlock(&ep->lock);
	mu_unlock(&adopt_lock);
	return ep;
}

/* ep_find returns epfd's state in this image, adopting what an epoll fd
 * brought across exec, or NULL. */
struct ep *ep_find(int epfd)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(epfd);
	struct ep *ep = ep_of(e);

	if (likely(ep || !e || e->kind != OSF_FD_EPOLL))
		return ep;
	return ep_adopt(epfd, e);
}
