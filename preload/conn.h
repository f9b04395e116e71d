/* conn.h: the operations on an offloaded connection (kinds OSF_FD_SHM and
 * OSF_FD_RDMA) that the hooks dispatch to. Every function here is called
 * only for fds whose table entry e says so, follows Linux TCP's errno and
 * signal behaviour for the same situation, and makes no system call while
 * data (or room) is there. */
#ifndef OSF_PRELOAD_CONN_H
#define OSF_PRELOAD_CONN_H

#include "osf.h"

ssize_t osf_conn_recv(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags);
ssize_t osf_conn_send(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags);
ssize_t osf_conn_sendfile(int fd, struct osf_fdt_entry *e, int in_fd,
			  off_t *offset, size_t count);
int osf_conn_shutdown(int fd, struct osf_fdt_entry *e, int how);
int osf_conn_getsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			void *val, socklen_t *len);
int osf_conn_setsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len);
int osf_conn_getname(int fd, struct osf_fdt_entry *e, int peer,
		     struct sockaddr *sa, socklen_t *len);
int osf_conn_ioctl(int fd, struct osf_fdt_entry *e, unsigned long req,
		   void *arg);

/* osf_conn_install turns fd into an offloaded connection described by the
 * core's handshake result cc: for a client (dup_wake) the wake socket is
 * moved onto fd, for a server fd already is the wake socket. The segment
 * fd and the writers' wake socket are hidden. Returns 0, or -1 with errno;
 * either way it has taken (and on failure released) the mapping, seg_fd
 * and wake_tx_fd, and marked them so in cc; wake_fd is -1 in cc once it
 * was moved onto fd. */
int osf_conn_install(int fd, struct osf_core_conn *cc, int role, int cloexec,
		     int nonblock, int dup_wake);

/* osf_conn_dup notes one more fd for the connection of entry e. */
void osf_conn_dup(struct osf_fdt_entry *e);

/* osf_conn_close releases this process's hold on the connection behind
 * fd (the fd itself is closed by the caller). */
void osf_conn_close(int fd, struct osf_fdt_entry *e);

/* osf_conn_setfl mirrors F_SETFL / FIONBIO into the connection. */
void osf_conn_setfl(struct osf_fdt_entry *e, int nonblock);

/* Readiness, for poll/select/epoll and qsock_*. */

/* osf_conn_poll returns the poll(2) events fd would report now, computed
 * from the rings (POLLIN, POLLOUT, POLLRDHUP, POLLHUP, POLLERR). */
short osf_conn_poll(int fd, struct osf_fdt_entry *e);

/* Arming, for a poller that is about to sleep in the kernel: the kinds of
 * event it waits for. */
#define OSF_ARM_RX 0x1 /* data or the end: a token on the fd itself */
#define OSF_ARM_TX 0x2 /* room: a token on the writers' socket */

/* osf_conn_arm_kinds returns the OSF_ARM_* kinds poll events ask for. */
int osf_conn_arm_kinds(short events);

/* osf_conn_arm counts the caller as a waiter of kinds (OSF_ARM_*) not in
 * already (kinds it armed before and has not disarmed), asks the peer to
 * wake it (a token on fd for OSF_ARM_RX, on the writers' socket for
 * OSF_ARM_TX), and returns the events ready after arming: when they
 * include any awaited one the caller must not sleep. A poller sleeps on fd
 * (POLLIN) for OSF_ARM_RX and on osf_conn_wake_tx_fd(e) for OSF_ARM_TX. */
short osf_conn_arm(int fd, struct osf_fdt_entry *e, int kinds, int already);

/* osf_conn_disarm ends the wait of kinds (0: none was armed): it stops
 * counting the caller, takes the token it is owed from each armed socket
 * the kernel reported readable (woken: OSF_ARM_* of the sockets that
 * fired), and notes the other side's end when a socket fired. */
void osf_conn_disarm(int fd, struct osf_fdt_entry *e, int kinds, int woken);

/* osf_conn_wake_tx_fd returns the writers' wake socket of entry e. */
static inline int osf_conn_wake_tx_fd(const struct osf_fdt_entry *e)
{
	return e->aux2_fd;
}

/* osf_conn_stamp returns a value that changes whenever data arrives,
 * room appears or the other side's state changes: an edge-triggered
 * waiter compares stamps to tell a new edge from an old readiness. */
uint64_t osf_conn_stamp(int fd, struct osf_fdt_entry *e);

/* osf_conn_cookie returns a pointer identifying fd's connection for the
 * qsock_* cookie, and osf_conn_cookie_poll the events it reports. */
void *osf_conn_cookie(int fd, struct osf_fdt_entry *e);
short osf_conn_cookie_poll(void *cookie);

/* osf_conn_fork_holders counts one more (delta 1) or one fewer (-1)
 * process holding each connection of this process: around fork. */
void osf_conn_fork_holders(int delta);

/* osf_conn_child_after_fork resets per-thread and pool state in a fork
 * child (its only thread is the one that forked). */
void osf_conn_child_after_fork(void);

#endif
