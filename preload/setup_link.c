//go:build osf_make

/* setup_link.c: OSF_SHM_KFD clients' links, one companion connection per
 * (client process, listener) that carries the hellos of all the process's
 * connections to it (setup.h; ARCHITECTURE.md "The kernel TCP socket as
 * the connection's fd"). The first connection to a destination dials the
 * companion (trusted as any: sdp/setup.c osf_dial_companion) and keeps
 * the socket; later ones send their hello on it, one sendmsg each. A link
 * that breaks (its server closed or shut it: EPIPE, ECONNRESET) is
 * forgotten and the connection dials a new one; links whose server closed
 * its end are dropped whenever a new one is made. A fork child closes its
 * copies (at its first use of them) and dials its own: hellos from two
 * processes never share a link,
 * and the server's SO_PEERCRED of a link is its one writer. */
#include "setup_priv.h"
#include "pool.h"

#include <poll.h>
#include <stdlib.h>

#define LINKS 16

/* The table is on the heap, made at the first link: a process without
 * the switch keeps none, and its fork children touch no page of it. */
static struct {
	pthread_mutex_t mu;
	unsigned gen;
	pid_t pid; /* the process they are of (a fork child's copies: own_locked) */
	struct link {
		int fd;       /* hidden; gen 0: free */
		unsigned gen; /* which link this is (setup_link_lock) */
		struct ip dst; /* the destination dialed, unmapped */
		struct ucred owner;
		char name[108];
		long long used;
		uint32_t wide; /* the server's note (setup_link_wide) */
		uint32_t note; /* SETUP_LINK_NOTED | the note's flags, once it came */
	} *l; /* LINKS of them, or NULL */
} links = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* own_locked closes a fork child's copies of its parent's links, at its
 * first use of the table (writes of two processes never share one) and
 * makes the table the caller's: at the fork itself the closes would cost
 * every child two page faults, the table's page and its entries'
 * (TestForkPageFaults). */
static void own_locked(void)
{
	int i;

	if (!links.l || links.pid == osf_pid())
		return;
	for (i = 0; i < LINKS; i++)
		if (links.l[i].gen) {
			osf_fdt_close_hidden(links.l[i].fd);
			links.l[i].gen = 0;
			links.l[i].fd = -1;
		}
	links.pid = osf_pid();
}

/* find_locked returns the link to dst, or NULL. */
static struct link *find_locked(const struct ip *dst)
{
	int i;

	for (i = 0; links.l && i < LINKS; i++) {
		struct link *k = &links.l[i];
		if (k->gen && k->dst.v4 == dst->v4 && k->dst.port == dst->port &&
		    !memcmp(k->dst.a, dst->a, 16))
			return k;
	}
	return NULL;
}

/* drop_locked closes link k: its server reads the hellos queued on it,
 * then the end. gone: its server closed it (its listener or process
 * ended), so this process's regions for it go once idle
 * (osf_pool_owner_gone). */
static void drop_locked(struct link *k, int gone)
{
	osf_fdt_close_hidden(k->fd);
	if (gone)
		osf_pool_owner_gone(&k->owner, k->name);
	memset(k, 0, sizeof(*k));
	k->fd = -1;
}

unsigned setup_link_get(const struct ip *dst, struct ucred *owner, char name[108])
{
	struct link *k;
	unsigned gen = 0;

	pthread_mutex_lock(&links.mu);
	own_locked();
	k = find_locked(dst);
	if (k) {
		*owner = k->owner;
		memcpy(name, k->name, 108);
		gen = k->gen;
	}
	pthread_mutex_unlock(&links.mu);
	return gen;
}

int setup_link_lock(const struct ip *dst, unsigned gen)
{
	struct link *k;

	pthread_mutex_lock(&links.mu);
	own_locked();
	k = find_locked(dst);
	if (k && k->gen == gen)
		return k->fd;
	pthread_mutex_unlock(&links.mu);
	return -1;
}

void setup_link_unlock(const struct ip *dst, int err)
{
	struct link *k = find_locked(dst);

	if (k) {
		k->used = osf_now_ns();
		if (err && err != EAGAIN) /* broken: the next connection dials anew */
			drop_locked(k, 1);
	}
	pthread_mutex_unlock(&links.mu);
}

/* prune_locked drops the links whose server closed its end (its listener
 * closed): they would only fail the next hello to their destination. */
static void prune_locked(void)
{
	struct pollfd p[LINKS];
	int i, n = 0;

	for (i = 0; links.l && i < LINKS; i++)
		if (links.l[i].gen) {
			p[n].fd = links.l[i].fd;
			p[n].events = POLLRDHUP; /* not POLLIN: its note (setup_link_wide) */
			p[n++].revents = 0;
		}
	if (n == 0 || REAL(poll)(p, (nfds_t)n, 0) <= 0)
		return;
	for (i = 0, n = 0; i < LINKS; i++)
		if (links.l[i].gen && p[n++].revents)
			drop_locked(&links.l[i], 1);
}

void setup_link_keep(const struct ip *dst, int s, const struct ucred *owner,
		     const char name[108])
{
	struct link *k;
	int i, h = -1, old = 0;

	pthread_mutex_lock(&links.mu);
	own_locked();
	if (!links.l) {
		links.l = calloc(LINKS, sizeof(*links.l));
		links.pid = osf_pid();
	}
	prune_locked();
	if (!links.l || find_locked(dst) || (h = osf_fdt_hide(s, 0)) < 0) {
		/* Another thread keeps one: this socket's hello stays queued
		 * for its server, which reads it, then the end. */
		pthread_mutex_unlock(&links.mu);
		REAL(close)(s);
		return;
	}
	for (i = 0; i < LINKS && links.l[i].gen; i++)
		if (links.l[i].used < links.l[old].used)
			old = i;
	k = &links.l[i < LINKS ? i : old];
	if (k->gen)
		drop_locked(k, 0); /* the least recently used */
	k->fd = h;
	k->gen = ++links.gen ? links.gen : ++links.gen;
	k->dst = *dst;
	k->owner = *owner;
	memcpy(k->name, name, 108);
	k->name[107] = 0;
	k->used = osf_now_ns();
	pthread_mutex_unlock(&links.mu);
}

void setup_link_prune(void)
{
	pthread_mutex_lock(&links.mu);
	own_locked();
	prune_locked();
	pthread_mutex_unlock(&links.mu);
}

/* notes_locked reads link k's notes (setup_link_note), never waiting. */
static void notes_locked(struct link *k)
{
	struct setup_link_note m;
	int i;

	for (i = 0; i < 4; i++) {
		if (REAL(recv)(k->fd, &m, sizeof(m), MSG_DONTWAIT) != (ssize_t)sizeof(m))
			break;
		if (m.magic != SETUP_LINK_NOTE_MAGIC)
			continue;
		if (m.slots)
			k->wide = m.slots < OSF_REGION_SLOTS_MAX ? m.slots : OSF_REGION_SLOTS_MAX;
		k->note = SETUP_LINK_NOTED | (m.flags & (SETUP_LINK_NOTE_DEFER | SETUP_LINK_NOTE_SYN));
	}
}

/* link_notes reads the notes of dst's link of generation gen (again:
 * even once one came) and returns its note word, and its wide when
 * asked (0 without a link). */
static unsigned link_notes(const struct ip *dst, unsigned gen, int again, uint32_t *wide)
{
	struct link *k;
	unsigned note = 0;
	int saved = errno;

	pthread_mutex_lock(&links.mu);
	own_locked();
	k = find_locked(dst);
	if (k && k->gen == gen) {
		if (again || !k->note)
			notes_locked(k);
		if (wide)
			*wide = k->wide;
		note = k->note;
	}
	pthread_mutex_unlock(&links.mu);
	errno = saved;
	return note;
}

uint32_t setup_link_wide(const struct ip *dst, unsigned gen)
{
	uint32_t w = 0;

	(void)link_notes(dst, gen, 1, &w);
	return w;
}

unsigned setup_link_note_flags(const struct ip *dst, unsigned gen)
{
	return link_notes(dst, gen, 0, NULL);
}

void setup_link_moved(int old, int nfd)
{
	int i;

	pthread_mutex_lock(&links.mu);
	own_locked();
	for (i = 0; links.l && i < LINKS; i++)
		if (links.l[i].gen && links.l[i].fd == old)
			links.l[i].fd = nfd;
	pthread_mutex_unlock(&links.mu);
}

/* links_after_fork: a fork child's lock is free (another thread may have
 * held it at the fork); its copies of its parent's links are closed at
 * its first use of them (own_locked), when it dials its own. */
OSF_FORK_TEXT static void links_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	OSF_RESET_MEM(&links.mu, fresh);
}
OSF_AFTER_FORK(links_after_fork, OSF_FORK_RELEASE);
