//go:build osf_make

/* setup_defer.c: the client's side of a connection whose companion
 * connection waits for its first byte (setup.h; docs/ARCHITECTURE.md
 * "Connections that wait for their first byte"): whether its listener
 * defers (the server's note in the region), and the late connect and
 * hello. setup_connect.c's defer_dial makes such a connection. */
#include "setup_priv.h"

#define OSF_CENSUS_SYS(name) REAL(name)
#include "../sdp/census.h"
#include "../sdp/names.h"
#include "../sdp/setup.h"
#include "pool.h"

#include <signal.h>
#include <stdlib.h>


/* tls_wait: the hello wait dial just made, for the install that follows
 * on this thread (osf_setup_hello_take). */
static __thread struct osf_hello_wait *tls_wait __attribute__((tls_model("initial-exec")));

void setup_hello_leave(struct osf_hello_wait *w) { tls_wait = w; }

/* setup_defer_find (setup_priv.h): osf_pool_deferring of the one census
 * listener's companions (one: a SO_REUSEPORT group spreads its connections
 * over slots), of an owner the census still trusts and that still runs. */
uint32_t setup_defer_find(const struct ip *a, const struct osf_census *c, struct osf_dial *d)
{
	char names[3][OSF_NAME_MAX], slot[sizeof(names) + 16];
	struct ip w = setup_as_family(*a, 1);
	int wild[3], n, i;
	uint32_t secs;

	if (c->n != 1 || !__atomic_load_n(&osf_pool_defer_seen, __ATOMIC_RELAXED))
		return 0;
	n = osf_dial_names(w.a, a->port, setup_is_local(*a), names, wild);
	for (i = 0; i < n; i++) {
		osf_slot_name(names[i], 0, slot, sizeof(slot));
		secs = osf_pool_deferring(setup_cfg.c.ring_size, slot, &d->owner);
		if (!secs)
			continue;
		if (!osf_census_owns(c, d->owner.uid, w.a, wild[i]) ||
		    (kill(d->owner.pid, 0) < 0 && errno != EPERM))
			return 0;
		memcpy(d->name, slot, sizeof(d->name) - 1);
		d->name[sizeof(d->name) - 1] = 0;
		return secs;
	}
	return 0;
}

struct osf_hello_wait *osf_setup_hello_take(int fd, long long *due)
{
	struct osf_hello_wait *w = tls_wait;
	int h;

	if (!w)
		return NULL;
	tls_wait = NULL;
	/* Out of the program's numbers, for fd (the window is open). */
	if (w->wtx_own && (h = osf_fdt_hide(w->wtx, fd)) >= 0)
		w->wtx = h;
	w->sock = osf_fdt_dup_high(fd, 1);
	if (w->sock >= 0 && osf_fdt_keep_hidden(w->sock, fd) < 0)
		w->sock = -1;
	*due = w->due;
	return w;
}

/* hello_free closes w's fd and frees it; unsent: the server's bit of the
 * slot's slot_done is set (the server never saw it). */
static void hello_free(struct osf_hello_wait *w, void *seg, int unsent)
{
	osf_fdt_close_hidden(w->sock);
	if (w->wtx_own)
		osf_fdt_close_hidden(w->wtx);
	if (unsent && seg)
		__atomic_or_fetch(&osf_seg_hdr(seg, w->ring)->slot_done, 1u << OSF_SIDE_SERVER,
				  __ATOMIC_ACQ_REL);
	free(w);
}

void osf_setup_hello_abandon(void *seg)
{
	struct osf_hello_wait *w = tls_wait;

	tls_wait = NULL;
	if (w)
		osf_setup_hello_drop(w, seg);
}

void osf_setup_hello_forget(struct osf_hello_wait *w)
{
	hello_free(w, NULL, 0);
}

void osf_setup_hello_drop(struct osf_hello_wait *w, void *seg)
{
	int saved = errno;

	if (w)
		hello_free(w, seg, 1);
	errno = saved;
}

int osf_setup_hello_go(struct osf_hello_wait *w, void *seg)
{
	struct ucred cr;
	int saved = errno, r = -1, how = 0, fd = w->sock;

	if (fd >= 0 && osf_dial_on(fd, w->name, HELLO_WAIT_MS, &cr) == 0) {
		how = 1;
		if (cr.pid == w->owner.pid && cr.uid == w->owner.uid) {
			osf_seg_hdr(seg, w->ring)->connect_ns = osf_now_ns();
			r = osf_hello_send_pool(fd, w->ring, w->hf, w->client, w->server,
						w->regionfd, w->wtx, &w->hp);
		}
	}
	if (r < 0) {
		/* A reset, as TCP's for a connection its listener dropped:
		 * the socket hangs up (connected, the companion drops a
		 * connection without its hello). */
		(void)REAL(shutdown)(fd, SHUT_RDWR);
		if (setup_logs(OSF_LOGL_DEBUG))
			setup_slog(OSF_LOGL_DEBUG, -1, 0, NULL,
				   "connection to %s at its first byte: %s", w->name,
				   how ? "another owner, or the hello refused" : "no companion");
	}
	hello_free(w, seg, r < 0);
	errno = saved;
	return r;
}

