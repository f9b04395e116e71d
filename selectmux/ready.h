/* ready.h: readiness of offloaded connections, the interface selectmux
 * (poll, select, epoll) waits through. selectmux owns it and does not know
 * who implements it: in libosf.so, preload/conn_poll.c over the stream
 * protocol's side (sdp/side.h), and preload/reaper.c (osf_reap_kick);
 * qsock_* uses it too. */
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

/* osf_conn_poll returns the poll(2) events fd would report now, computed
 * from the rings (POLLIN, POLLOUT, POLLRDHUP, POLLHUP, POLLERR). */
short osf_conn_poll(int fd, struct osf_fdt_entry *e);

/* osf_conn_arm_kinds returns the OSF_ARM_* kinds poll events ask for
 * (OSF_ARM_RX for none: the end and errors come on the wake socket). */
int osf_conn_arm_kinds(short events);

/* osf_conn_arm_kinds_fd is osf_conn_arm_kinds for fd's connection: a
 * connection still waiting for a gateway's reply also arms OSF_ARM_RX. */
int osf_conn_arm_kinds_fd(int fd, struct osf_fdt_entry *e, short events);

/* osf_conn_arm counts the caller as a waiter of kinds (OSF_ARM_*) not in
 * already (kinds it armed before and has not disarmed), asks the peer to
 * wake it (a token on fd for OSF_ARM_RX, on the writers' socket for
 * OSF_ARM_TX), and returns the events ready after arming: when they
 * include any awaited one the caller must not sleep. A poller sleeps on fd
 * (POLLIN) for OSF_ARM_RX and on osf_conn_wake_tx_fd(e) for OSF_ARM_TX.
 * *trim_due is set when fd's receive ring has pages to give back once idle
 * (osf_conn_trim). */
short osf_conn_arm(int fd, struct osf_fdt_entry *e, int kinds, int already,
		   int *trim_due);

/* osf_conn_disarm ends the wait of kinds (0: none was armed): it stops
 * counting the caller, takes the token it is owed from each armed socket
 * the kernel reported readable (woken: OSF_ARM_* of the sockets that
 * fired), and notes the other side's end when a socket fired. */
void osf_conn_disarm(int fd, struct osf_fdt_entry *e, int kinds, int woken);

/* osf_conn_hold returns fd's connection with a reference held, or NULL
 * (none, or a gateway's kernel socket): selectmux keeps it across a close
 * that a signal handler makes while its thread holds a mux lock, to end
 * the closed items' waits later (osf_conn_hold_disarm, as osf_conn_disarm
 * with nothing woken) and then drop it (osf_conn_unhold). */
void *osf_conn_hold(int fd, struct osf_fdt_entry *e);
void osf_conn_hold_disarm(void *h, int kinds);
void osf_conn_unhold(void *h);

/* osf_conn_dup_fd returns a number other than fd at which this process
 * holds the open file of fd's connection (a dup), or -1. With entry e
 * (fd still open) it looks only when the connection counts more than one
 * fd here; with e NULL (fd closed already) it looks for the file of
 * identity ino. */
int osf_conn_dup_fd(int fd, struct osf_fdt_entry *e, uint64_t ino);

/* osf_conn_wake_events returns the events a poller asks of fd itself,
 * the application's wake socket (osf_side_wake_events): POLLIN |
 * POLLRDHUP, 0 once this side shut it for reading, -1 when it must be
 * left out. */
short osf_conn_wake_events(int fd, struct osf_fdt_entry *e);

/* osf_conn_rx_blind reports whether no wake token can tell fd's pollers
 * of data arriving any more (osf_side_rx_blind: a shutdown(SHUT_RD) shut
 * its wake socket to wake sleepers): an edge-triggered wait for it looks
 * at the rings every OSF_BLIND_MS instead. */
#define OSF_BLIND_MS 10
int osf_conn_rx_blind(int fd, struct osf_fdt_entry *e);

/* osf_conn_wake_tx_fd returns the writers' wake socket of entry e. */
static inline int osf_conn_wake_tx_fd(const struct osf_fdt_entry *e)
{
	return e->aux2_fd;
}

/* osf_conn_stamp returns a value that changes whenever data arrives,
 * room appears or the other side's state changes: an edge-triggered
 * waiter compares stamps to tell a new edge from an old readiness. */
uint64_t osf_conn_stamp(int fd, struct osf_fdt_entry *e);

/* osf_conn_trim gives back the pages of fd's receive ring that hold no
 * unread data (sdp/side.h, "memory"): a poller calls it for the
 * connections it armed with pages to give back once its wait has slept
 * OSF_TRIM_IDLE_MS with nothing arriving. */
void osf_conn_trim(int fd, struct osf_fdt_entry *e);

#endif
