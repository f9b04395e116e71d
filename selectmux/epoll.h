/* epoll.h: what selectmux's epoll files share (epoll.c: the registry and
 * epoll_ctl; epoll_wait.c: the waits; epoll_exec.c: the record that
 * crosses exec; notify.c: what libosf.so's other hooks tell, mux.h).
 *
 * The offloaded fds registered in an application epoll E1 live in a hidden
 * inner epoll E2 (edge-triggered on their wake sockets), and E2 is
 * registered in E1 under a marker that no application value can equal (the
 * address of osf's own state). So E1 itself becomes readable when an
 * offloaded fd may be ready — programs that poll their epoll fd, or nest
 * it, keep working. epoll_wait reports from a list of items that may be
 * ready (new registrations, woken ones, level-triggered ones still ready).
 * An item found not ready (or an edge-triggered one just reported) moves
 * to a bounded idle list, which the spin phase checks in the rings; only a
 * wait about to sleep in the kernel arms the idle items (or one that
 * returns while another sleeps there: epoll_wait.c, leave), so a busy
 * peer sends no wake tokens. Edge-triggered items report an edge when the
 * table's stamp (rd_stamp) moved: data arrived (as TCP reports one per
 * arrival), or room appeared after the side lacked it (TCP's SOCK_NOSPACE).
 * A wait costs O(ready + idle), not O(registered).
 *
 * As in the kernel, a registration belongs to the open file (and the fd
 * number it was made with): the inner
 * epoll is shared with fork children, so a close in one process never
 * deletes what another process may still use, and inner events carry no
 * pointer but the item's identity (fd number and socket inode), looked up
 * and checked before use; an item whose fd now holds another file (closed
 * behind osf's back, by a system call made without libc) is dropped,
 * never reported. An item whose fd is closed while a dup of it stays open
 * lives on through the dup (an orphan) until the file's last fd closes.
 * EPOLL_CTL_ADD/MOD of an offloaded fd that is ready already kicks the
 * waits asleep in the kernel (an eventfd in the inner epoll).
 */
#ifndef OSF_SELECTMUX_EPOLL_H
#define OSF_SELECTMUX_EPOLL_H

#include "priv.h"

enum { ON_NONE, ON_READY, ON_IDLE };

struct epi {
	int fd;
	uint32_t events;
	epoll_data_t data;
	int disabled;  /* EPOLLONESHOT fired: off until EPOLL_CTL_MOD */
	int listed;    /* ON_*: which list it is on */
	unsigned seen; /* the wait that last reported it */
	uint64_t stamp; /* rd_stamp when it went idle (edge detection) */
	int armed;      /* OSF_ARM_* kinds it is counted as waiting for */
	int woken;      /* OSF_ARM_* kinds whose socket fired (absorb) */
	int wsock;      /* the writers' wake socket registered for it, or -1
			 * (registered at the first wait for EPOLLOUT) */
	int wown;       /* wsock is a dup osf made for this item */
	int wefd;       /* wsock is its region's writers' eventfd, registered
			 * once per inner epoll for every item of every
			 * region (EFD_KEY): its events wake every item
			 * armed for OSF_ARM_TX with wefd (absorb) */
	int parked;     /* EPOLL_CTL_DEL'd: invisible, but its inner
			 * registrations stay until the fd is closed, so
			 * that DEL/ADD churn costs no system call */
	uint64_t ino;   /* the socket's inode when registered: identity */
	int at;         /* the fd its open file is reached through: fd, or a
			 * dup of it once fd was closed (an orphan) */
	int orphan;     /* fd was closed while a dup stayed open: the
			 * registration lives on with the file, as the
			 * kernel's (keyed by file and fd number) does until
			 * the file's last fd closes; on ep->orphans, not in
			 * byfd, reported through at */
	struct epi *onext; /* the next orphan */
	struct rd_chan ch; /* the channel it sleeps on too while armed
			    * (ready.h chan), registered in the inner
			    * epoll under the item's own key: it wakes as
			    * its fd's tokens do */
	struct epi *prev, *next;
};

/* The inner epoll's data: the item's identity, never a pointer (a fork
 * child's or a closed item's registration may fire): the socket inode's
 * low 32 bits, the fd number, and the low bit set for the writers' wake
 * socket. KICK_KEY is the kick eventfd's. */
#define WSOCK_TAG 1u
#define KICK_KEY UINT64_MAX
/* A region's writers' eventfd (epi.wefd): no item's identity. */
#define EFD_KEY_MARK (0xefdULL << 52)
#define EFD_KEY_MASK (~0ULL << 32)
#define EFD_KEY(fd) (EFD_KEY_MARK | (uint64_t)(uint32_t)(fd) << 1 | WSOCK_TAG)
/* A server's link (host.h osf_links_copy, ep.links): no item's identity
 * (no fd number is 0x7fffffff). */
#define LINKS_KEY (UINT64_MAX - 1)

#define IDLE_MAX 256 /* idle items checked while spinning; more are armed */

/* A listener's registration in an epoll: its companion (aux) is one
 * hidden fd shared by the listener's dups, registered once for all of them
 * (ep_listener_ctl). */
struct ep_lsn {
	int fd, aux;
	struct epoll_event ev;
};

struct ep {
	int epfd;
	int inner;      /* hidden epoll of wake sockets; -1 until needed */
	int lock;
	int turn;
	unsigned wait; /* counts waits, so an item is reported once per wait */
	struct epi **byfd;
	int cap;
	struct epi *orphans; /* items whose fd was closed, a dup open */
	struct epi head; /* the may-be-ready list */
	struct epi idle; /* not ready (or reported edge-triggered), not armed */
	int nidle;
	struct ep_lsn *listeners; /* listener fds registered in epfd */
	int nlisteners, caplisteners;
	struct epoll_event *pend; /* registrations of undecided TCP sockets */
	int *pendfd;
	int npend, cappend;
	int kick;     /* eventfd in the inner epoll waking sleepers, or -1 */
	int links;    /* an OSF_SHM_KFD listener joined: the server's links
		       * (host.h osf_links_copy) are in the inner epoll
		       * (LINKS_KEY, EPOLLRDHUP, edge-triggered), and its
		       * waits close those of client processes that ended */
	int sleepers; /* waits asleep (or about to be) in the kernel */
	int young;    /* a wait that went straight to the kernel (begun
		       * before the inner epoll existed) may be asleep there
		       * uncounted: set when the inner epoll is made, cleared
		       * by a wait once no such wait is left (epoll_wait.c,
		       * passing) */
	int shared;   /* a fork shared the inner epoll with another process:
		       * never delete from it on close (the kernel does) */
	struct ep *next_ep;
	int trim_due;     /* an armed item has ring pages to give back once idle */
	int blind;        /* an idle item no token can wake (blind_item): the
			     wait sleeps at most OSF_BLIND_MS */
	long quiet_since; /* with trim_due: waits have reported nothing since
			     (mono_ms), 0: not counting */
	uint64_t mark;    /* the inner epoll's data in the application's */
	struct eprec *rec; /* the registrations, for an exec'd image, or NULL */
	int rec_fd;       /* its hidden memfd, or -1 */
};

/* The record of an epoll's offloaded registrations (fd, events, data,
 * identity, EPOLLONESHOT fired), kept current at every epoll_ctl in a
 * hidden memfd while the epoll fd may cross exec (not close-on-exec): the
 * exec'd image finds it through the fd table (the epoll's entry, aux2_fd;
 * aux_fd is the inner epoll, which crosses too) and registers them again
 * under the same marker (ep_adopt), as the kernel keeps an epoll's
 * registrations across exec. Slot i is fd i; fds from EPREC_SLOTS on are
 * not recorded. */
#define EPREC_MAGIC 0x31434550464f5351ULL /* "QSOFPEC1" */
#define EPREC_SLOTS 65536u
enum { REC_NONE, REC_ON, REC_OFF };
struct eprec_slot {
	uint32_t state; /* REC_* */
	uint32_t events;
	uint64_t data;
	uint64_t ino;
	uint64_t pad;
};
struct eprec {
	uint64_t magic;
	uint64_t mark; /* the marker the inner epoll is registered under */
	uint32_t slots, hi; /* hi: slots from hi on are unused */
	uint8_t pad[40];
	struct eprec_slot slot[];
};
#define EPREC_BYTES (sizeof(struct eprec) + EPREC_SLOTS * sizeof(struct eprec_slot))

/* This process's epolls with offloaded members, and the lock of that list
 * (taken before any epoll's own). */
extern struct ep *ep_all;
extern int ep_all_lock;

static inline uint64_t marker(struct ep *ep) { return ep->mark; }

static inline void list_del(struct ep *ep, struct epi *it)
{
	if (!it->listed)
		return;
	if (it->listed == ON_IDLE)
		ep->nidle--;
	it->listed = ON_NONE;
	it->prev->next = it->next;
	it->next->prev = it->prev;
}

static inline void list_put(struct ep *ep, struct epi *it, int which)
{
	struct epi *head = which == ON_IDLE ? &ep->idle : &ep->head;

	if (it->listed == which)
		return;
	list_del(ep, it);
	it->listed = which;
	it->prev = head->prev;
	it->next = head;
	head->prev->next = it;
	head->prev = it;
	if (which == ON_IDLE)
		ep->nidle++;
}

static inline void list_add(struct ep *ep, struct epi *it) { list_put(ep, it, ON_READY); }

/* ep_of returns the state of epoll fd epfd in this image, or NULL. */
static inline struct ep *ep_of(struct osf_fdt_entry *e)
{
	if (!e || e->kind != OSF_FD_EPOLL ||
	    __atomic_load_n(&e->image, __ATOMIC_ACQUIRE) != osf_fdt_cur_image)
		return NULL;
	return (struct ep *)(uintptr_t)e->priv;
}

static inline uint32_t poll_to_epoll(short r)
{
	return (uint32_t)(unsigned short)r &
	       (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLRDHUP |
		EPOLLRDNORM | EPOLLWRNORM | EPOLLPRI);
}

static inline short poll_events(uint32_t events)
{
	return (events & EPOLLIN ? POLLIN : 0) | (events & EPOLLOUT ? POLLOUT : 0) |
	       (events & EPOLLRDHUP ? POLLRDHUP : 0);
}

/* same_file reports whether it still describes the file at its fd: the
 * fd was not closed and reused behind osf's back (syscall(SYS_close)).
 * An item's fd is one whose readiness osf computes, or a kernel socket
 * whose readiness osf computed (kernel_ready). */
static inline int same_file(const struct epi *it, const struct osf_fdt_entry *e)
{
	return e && (osf_ready_of(e) || e->kind == OSF_FD_KERNEL) &&
	       e->ino == it->ino;
}

/* kernel_ready reports an item (of the same file) whose readiness the
 * kernel reports from now on: its entry's ops went back to none (a
 * connect through a gateway settled). */
static inline int kernel_ready(const struct osf_fdt_entry *e)
{
	return unlikely(!osf_ready_of(e));
}

/* epoll.c: an epoll's state and its items (each function is documented
 * where it is defined). */
struct ep *ep_create(int epfd);
void ep_entry_sync(struct ep *ep);
struct epi *ep_item_of(struct ep *ep, uint64_t key);
void ep_disarm_item(struct epi *it, struct osf_fdt_entry *e, int woken);
int ep_arm_item(struct ep *ep, struct epi *it, struct osf_fdt_entry *e);
void ep_orphan(struct ep *ep, struct epi *it, int dup);
void ep_drop_item(struct ep *ep, struct epi *it);
void ep_drop_closed(struct ep *ep, struct epi *it, void *hold);
void ep_stale_item(struct ep *ep, struct epi *it);
void ep_to_kernel(struct ep *ep, struct epi *it);
void ep_kick(struct ep *ep);
int ep_ctl_conn(struct ep *ep, int op, int fd, struct epoll_event *ev);
void ep_listener_ctl(struct ep *ep, int op, int fd, int aux, const struct epoll_event *ev);
void ep_listener_closed(struct ep *ep, int fd);
void ep_note_pending(struct ep *ep, int op, int fd, struct epoll_event *ev);
void ep_links_watch(int epfd, int make);

/* epoll_exec.c: the record for an exec'd image, and finding an epoll's
 * state (adopting what crossed exec). */
void ep_rec_note(struct ep *ep, const struct epi *it);
void ep_rec_create(struct ep *ep);
struct ep *ep_find(int epfd);

#endif
