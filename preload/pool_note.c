//go:build osf_make

/* pool_note.c: the server's note in a client's region (pool_priv.h): the
 * listener's TCP_DEFER_ACCEPT as its server wrote it in the slot header
 * (srv_defer), read by the client for its next connections (setup.h,
 * "A connection whose companion connection waits for its first byte"). */
#include "pool_priv.h"
#include "osf.h"

#include <string.h>

int osf_pool_defer_seen;

void pool_note_last(struct region *r)
{
	struct osf_seg_hdr *h;
	uint32_t d;

	if (!r->last1)
		return;
	h = pool_slot_hdr(r, r->last1 - 1);
	if (__atomic_load_n(&h->server_pid, __ATOMIC_ACQUIRE) == 0)
		return;
	d = __atomic_load_n(&h->srv_defer, __ATOMIC_RELAXED);
	r->defer = (uint16_t)(d > 65535 ? 65535 : d);
	if (d && !__atomic_load_n(&osf_pool_defer_seen, __ATOMIC_RELAXED))
		__atomic_store_n(&osf_pool_defer_seen, 1, __ATOMIC_RELAXED);
}

uint32_t osf_pool_deferring(uint32_t ring, const char *name, struct ucred *owner)
{
	pid_t me = osf_pid();
	uint32_t found = 0;
	int i;

	pool_lock();
	for (i = 0; i < osf_pool_nregions && !found; i++) {
		struct region *r = &osf_pool_regions[i];
		if (!r->base || r->owner != me || r->ring != ring || r->peer_gone ||
		    strncmp(r->kname, name, sizeof(r->kname)) != 0)
			continue;
		pool_note_last(r);
		if (r->defer) {
			owner->pid = r->kpid;
			owner->uid = r->kuid;
			owner->gid = 0;
			found = r->defer;
		}
	}
	pool_unlock();
	return found;
}

