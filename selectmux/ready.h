/* ready.h: readiness of the fds whose readiness osf computes, the
 * interface selectmux (poll, select, epoll) waits through. selectmux owns
 * it and does not know who implements it: in libosf.so, preload/ops.c
 * lists a table per kind of fd (preload/conn_poll.c for offloaded
 * connections, over the stream protocol's side, sdp/side.h;
 * preload/gateway.c for a socket waiting for a gateway's reply), and
 * preload/reaper.c implements osf_reap_kick. */
#ifndef OSF_SELECTMUX_READY_H
#define OSF_SELECTMUX_READY_H

#include "../fdtable/fdt.h"
#include "../sdp/side.h" /* OSF_ARM_* */

/* osf_reap_kick starts or wakes the reaper thread when a reader listed a
 * connection for it since (preload/reaper.c): called where the process is
 * about to sleep in the kernel anyway (blocking calls, and poll, select
 * and epoll waits that may sleep), never on the data path, which makes no
 * system call while data is there. One load when there is nothing to do. */
extern int osf_reap_kick_due;
void osf_reap_kick_slow(void);
static inline void osf_reap_kick(void)
{
	if (__builtin_expect(__atomic_load_n(&osf_reap_kick_due, __ATOMIC_RELAXED), 0))
		osf_reap_kick_slow();
}

/* struct osf_ready: the readiness of one kind of fd whose readiness osf
 * computes instead of the kernel (an offloaded connection's rings, a
 * socket waiting for a gateway's reply). The embedder chooses a kind's
 * table when it installs an fd (the entry's ops, fdtable.h) and lists it
 * in osf_ready_ops; selectmux calls only through it (osf_ready_of) and
 * knows no kind by name. Every function takes fd and its entry e and
 * must stay safe when the fd's state moved on meanwhile (closed, or its
 * readiness handed back to the kernel: osf_mux_kernel_ready).
 *
 * poll returns the poll(2) events fd would report now (POLLIN, POLLOUT,
 * POLLRDHUP, POLLHUP, POLLERR; POLLNVAL when it is gone).
 *
 * arm_kinds returns the OSF_ARM_* kinds a wait for poll events must arm
 * (OSF_ARM_RX for none: the end and errors come on fd itself).
 *
 * arm counts the caller as a waiter of kinds (OSF_ARM_*) not in already
 * (kinds it armed before and has not disarmed), asks the peer to wake it
 * (a token on fd for OSF_ARM_RX, on wake_tx_fd for OSF_ARM_TX), and
 * returns the events ready after arming: when they include any awaited
 * one the caller must not sleep. A poller sleeps on fd (wake_events) for
 * OSF_ARM_RX and on wake_tx_fd(e) (POLLIN) for OSF_ARM_TX. *trim_due is
 * set when fd has memory to give back once idle (trim).
 *
 * disarm ends the wait of kinds (0: none was armed): it stops counting
 * the caller, takes the token it is owed from each armed socket the
 * kernel reported readable (woken: OSF_ARM_* of the sockets that fired),
 * and notes the other side's end when a socket fired.
 *
 * stamp returns a value that changes whenever data arrives, room appears
 * after the side lacked it, or the other side's state changes: an
 * edge-triggered waiter compares
 * stamps to tell a new edge from an old readiness.
 *
 * trim gives back the memory of fd that holds no unread data: a poller
 * calls it for the fds it armed with trim_due set once its wait has slept
 * OSF_TRIM_IDLE_MS with nothing arriving.
 *
 * rx_blind reports whether no wake token can tell fd's pollers of data
 * arriving any more (a shutdown(SHUT_RD) shut its wake socket to wake
 * sleepers): an edge-triggered wait for it looks every OSF_BLIND_MS.
 *
 * wake_events returns the events a poller asks of fd itself in the
 * kernel's wait: POLLIN | POLLRDHUP, 0 once this side shut it for
 * reading, -1 when it must be left out.
 *
 * wake_tx_fd returns the socket writers wait on (OSF_ARM_TX), or -1.
 *
 * chan (NULL for kinds without one) lets a poller sleep on the channel of
 * the state h (hold's) where its completions are announced, taking them
 * itself instead of leaving them to another thread that would wake it
 * with a token (an RDMA connection's completion channel,
 * docs/ARCHITECTURE.md "Pollers sleep on the channel too"), w the wait:
 * OSF_CHAN_ENTER (before arm) sets w->fd to the channel's fd, which the
 * poller adds to its kernel wait (POLLIN), or to -1 (none: sleep as
 * usual); with w->ep >= 0 it registers the channel there itself
 * (EPOLLIN | EPOLLET, data w->key) while the channel is surely the
 * state's. What arrived before it is taken already. OSF_CHAN_FIRED (the
 * kernel reported w->fd, before disarm) takes what the channel announced:
 * > 0 when it took anything, 2 when a token of the kind may then wait on
 * fd (disarm as woken), 1 when none can (the tokens' count is 0: a disarm
 * as woken would only make a recv and a poll that find nothing).
 * OSF_CHAN_LEAVE (after every ENTER that set w->fd) ends it,
 * taking the channel out of w->ep if it is still the state's.
 *
 * hold returns fd's state with a reference held, or NULL (none to hold):
 * selectmux keeps it across a close that a signal handler makes while its
 * thread holds a mux lock, to end the closed items' waits later
 * (osf_ready_hold_disarm, as disarm with nothing woken) and then drop it
 * (osf_ready_unhold). */
#define OSF_BLIND_MS 10
enum { OSF_CHAN_ENTER, OSF_CHAN_FIRED, OSF_CHAN_LEAVE };
struct osf_chan_wait {
	int fd;       /* the channel's fd, -1: none */
	int ep;       /* the epoll it is registered in while entered, or -1 */
	uint64_t key; /* its data there */
	int reader;   /* the wait counted itself a reader (OSF_ARM_RX): only
			 then is the readers' want flag its own to lower */
};
struct osf_ready {
	short (*poll)(int fd, struct osf_fdt_entry *e);
	int (*arm_kinds)(int fd, struct osf_fdt_entry *e, short events);
	short (*arm)(int fd, struct osf_fdt_entry *e, int kinds, int already,
		     int *trim_due);
	void (*disarm)(int fd, struct osf_fdt_entry *e, int kinds, int woken);
	uint64_t (*stamp)(int fd, struct osf_fdt_entry *e);
	void (*trim)(int fd, struct osf_fdt_entry *e);
	int (*rx_blind)(int fd, struct osf_fdt_entry *e);
	short (*wake_events)(int fd, struct osf_fdt_entry *e);
	int (*wake_tx_fd)(const struct osf_fdt_entry *e);
	void *(*hold)(int fd, struct osf_fdt_entry *e);
	int (*chan)(void *h, int how, struct osf_chan_wait *w);
};

/* osf_ready_ops is the embedder's readiness table of each ops index
 * (libosf.so: preload/ops.c); NULL: the kernel's readiness. */
extern const struct osf_ready *const osf_ready_ops[OSF_FDT_OPS_MAX];

/* osf_ready_of returns the readiness of entry e, NULL when the kernel
 * reports it (an fd osf does not compute readiness for, or no more). */
static inline const struct osf_ready *osf_ready_of(const struct osf_fdt_entry *e)
{
	return osf_ready_ops[__atomic_load_n(&e->ops, __ATOMIC_ACQUIRE) &
			     (OSF_FDT_OPS_MAX - 1)];
}

/* osf_ready_hold_disarm and osf_ready_unhold act on a hold of any kind's
 * (struct osf_ready's hold); NULL is none. */
void osf_ready_hold_disarm(void *h, int kinds);
void osf_ready_unhold(void *h);

/* osf_ready_dup_fd returns a number other than fd at which this process
 * holds the open file of fd (a dup) whose readiness osf computes, or -1.
 * With entry e (fd still open) it looks only when fd's state counts more
 * than one fd here; with e NULL (fd closed already) it looks for the file
 * of identity ino. */
int osf_ready_dup_fd(int fd, struct osf_fdt_entry *e, uint64_t ino);

#endif
