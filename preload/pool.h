/* pool.h: shm segments as slots of a region (pool.c; the default,
 * OSF_SHM_POOL=0 turns it off).
 *
 * A region is one memfd of OSF_REGION_SLOTS slots (a wide one, up to
 * OSF_REGION_SLOTS_MAX: osf_pool_take), each laid out
 * as a segment (sdp/segment.h) of the connection's ring size. A client
 * process takes slots of a region of its own per (ring size, companion
 * name, companion owner): the trust domain of one listener. The hello
 * carries the region's memfd and (slot, generation); a server maps each
 * region once, known by its inode. No slot is ever unmapped while its
 * region lives; a slot goes back to its owner's pool when both sides let
 * go of it (slot_done), and the owner alone hands slots out, from what it
 * knows itself (its own connections on a slot, the generations it gave),
 * never from a peer's word but the slot_done a peer can only delay or
 * hurry for its own connections. */
#ifndef OSF_PRELOAD_POOL_H
#define OSF_PRELOAD_POOL_H

#include "../sdp/setup.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* osf_pool_take gives a client's new connection a slot of a region for
 * (ring, the companion's owner and name), making a region when none has
 * a free slot: the slot's segment with its header cleared and slot_gen
 * set (the caller writes the rest: osf_seg_init), *fdp the region's memfd
 * (hidden, the region's: the connection's entry names it, nobody closes
 * it but pool.c; osf_pool_is_region_fd), *efdp its writers' eventfd
 * (OSF_SHM_EFD, made with the region; -1 without: the connection makes a
 * writers' socket pair), *hp the hello's pool part. make: whether a
 * region may be made (OSF_POOL_NOMAKE: a free slot of one made already,
 * or NULL; OSF_POOL_CAPPED: only while osf's fds may grow by its two,
 * osf_fdt_budget_ok, the program's RLIMIT_NOFILE being soft = hard);
 * wide: 0, or a region made is a wide one of that many slots (at most
 * OSF_REGION_SLOTS_MAX). The caller's fd window is open. NULL (errno
 * kept) when no slot can be had: the caller makes a segment of its own,
 * or (soft = hard) connects by kernel TCP. */
#define OSF_POOL_NOMAKE 0
#define OSF_POOL_MAKE 1
#define OSF_POOL_CAPPED 2
void *osf_pool_take(uint32_t ring, const struct ucred *owner, const char *name,
		    int make, uint32_t wide, int *fdp, int *efdp, struct osf_hello_pool *hp);

/* osf_pool_deferring returns the TCP_DEFER_ACCEPT (seconds) of the
 * listener this process's region for (ring, companion name) is for, as
 * its server noted it in the slot handed out last once it took its hello,
 * with the companion's owner (pid and uid as the region's dial found
 * them); 0 when none defers. */
uint32_t osf_pool_deferring(uint32_t ring, const char *name, struct ucred *owner);
/* osf_pool_defer_seen is set once a server's defer time was seen in a
 * slot of this process (a take's look at the slot handed out before, a
 * client's release): until then no connect looks for one. */
extern int osf_pool_defer_seen;
/* osf_pool_map is the server's osf_region_map_fn (sdp/setup.h); the
 * region remembers its client process (cr's pid: osf_pool_peer_gone). */
void *osf_pool_map(int fd, const struct stat *st, uint32_t ring,
		   const struct osf_hello_pool *p, int efd, uint64_t *efd_ino,
		   const struct ucred *cr, char *why, size_t wn);

/* osf_pool_peer_gone tells that client process pid ended (its link to
 * this server closed: OSF_SHM_KFD, setup_kfd.c): the regions it brought
 * here let go of their memfd and eventfd and are unmapped once no
 * connection of theirs lives here, at once when none does (a region kept
 * for its client's next connection has none coming). */
void osf_pool_peer_gone(pid_t pid);

/* osf_pool_owner_gone is osf_pool_peer_gone for a client's own regions
 * for the companion name of owner (its server's link ended: the listener
 * or its process is gone). */
void osf_pool_owner_gone(const struct ucred *owner, const char *name);

/* osf_pool_adopt maps the slot of an inherited or passed connection: fd
 * the region's memfd, slot the slot the fd table (or the hand-off record)
 * names, side this process's side, ino its wake socket's inode. The slot's
 * segment, or NULL when the region or slot is not usable or the slot is
 * no longer this connection's (its slot_ino for side is another socket's:
 * recycled), or this process holds that side of it already. keep: fd is
 * the region's one memfd here (OSF_FDF_REGIONFD), which the region keeps
 * (and closes with itself) when it has none yet. */
void *osf_pool_adopt(int fd, uint32_t ring, uint32_t slot, int side, uint64_t ino,
		     int keep);

/* osf_pool_ino returns the inode of seg's region (its memfd's, as the
 * region was made or mapped by), or 0 when seg is not a slot: a hidden
 * copy of the memfd records it without an fstat. */
uint64_t osf_pool_ino(const void *seg, uint32_t ring);

/* osf_pool_slot returns the slot of seg (a segment of rings of ring), or
 * -1 when seg is not a slot of a region. */
int osf_pool_slot(const void *seg, uint32_t ring);

/* osf_seg_release lets go of this process's segment seg of ring (side:
 * the side it held): a slot goes back to its region (no unmap), anything
 * else is unmapped. gone: this process's side let go of the slot for good
 * (its last holder's connection, or one that never counted a holder):
 * slot_done gets the side's bit. */
void osf_seg_release(void *seg, uint32_t ring, int side, int gone);

/* osf_pool_abandon gives back the slot of a hello that was never sent:
 * no peer saw it, so its owner may reuse it at once. */
void osf_pool_abandon(void *seg, uint32_t ring);

/* osf_pool_name_fd gives seg's region, when it has none, fd (a hidden
 * copy of the region's memfd a connection on the slot seg brought: a
 * hello's, a hand-off's), to own from now on: the region's memfd, which
 * the connection's entry is to name (fd when the region took it; else the
 * caller closes fd), or -1 when seg is not a slot (or fd is -1, a look
 * only, and the region has none). */
int osf_pool_name_fd(const void *seg, uint32_t ring, int fd);

/* osf_pool_name_efd is osf_pool_name_fd for the region's writers'
 * eventfd (a hello's, an adopted entry's aux2_fd; OSF_FDF_REGIONEFD). */
int osf_pool_name_efd(const void *seg, uint32_t ring, int fd);

/* osf_pool_is_region_fd reports whether fd is a region's memfd or
 * writers' eventfd, which pool.c owns and connections only name: none
 * closes it. */
int osf_pool_is_region_fd(int fd);

/* osf_pool_moved renames a region's hidden memfd or eventfd old to nfd. */
void osf_pool_moved(int old, int nfd);

#endif
