/* sys.h: the system calls the stream protocol's C side (sdp/side.c,
 * sdp/lock.c) and the shm set-up (sdp/setup.c) make.
 *
 * sdp/ does not know who embeds it: libosf.so defines these as the real
 * libc functions (never its own hooks, preload/sys.c), a unit-test driver
 * as plain libc. Each behaves exactly like the libc function of the same
 * name without the osf_sys_ prefix (errno, cancellation, SA_RESTART).
 */
#ifndef OSF_SDP_SYS_H
#define OSF_SDP_SYS_H

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>

ssize_t osf_sys_send(int fd, const void *buf, size_t n, int flags);
ssize_t osf_sys_recv(int fd, void *buf, size_t n, int flags);
ssize_t osf_sys_read(int fd, void *buf, size_t n);
int osf_sys_close(int fd);
int osf_sys_shutdown(int fd, int how);
int osf_sys_poll(struct pollfd *p, nfds_t n, int timeout);
int osf_sys_ioctl(int fd, unsigned long req, void *arg);
/* osf_sys_gettid is gettid(2) (libosf.so's answers without the system
 * call under a seccomp filter). */
pid_t osf_sys_gettid(void);
int osf_sys_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
int osf_sys_socket(int domain, int type, int protocol);
int osf_sys_socketpair(int domain, int type, int protocol, int sv[2]);
int osf_sys_connect(int fd, const struct sockaddr *sa, socklen_t len);
ssize_t osf_sys_sendto(int fd, const void *buf, size_t n, int flags,
		       const struct sockaddr *sa, socklen_t len);
ssize_t osf_sys_sendmsg(int fd, const struct msghdr *m, int flags);
ssize_t osf_sys_recvmsg(int fd, struct msghdr *m, int flags);
/* osf_sys_fcntl takes fcntl's third argument as a long (F_ADD_SEALS,
 * F_GET_SEALS, F_SETFL: an int). */
int osf_sys_fcntl(int fd, int cmd, long arg);

ssize_t osf_sys_write(int fd, const void *buf, size_t n);
int osf_sys_epoll_create1(int flags);
int osf_sys_epoll_ctl(int ep, int op, int fd, struct epoll_event *ev);
int osf_sys_epoll_wait(int ep, struct epoll_event *ev, int n, int timeout);

/* osf_sys_intr_begin starts counting the signal handlers that run in this
 * thread; after a wait failed with EINTR, osf_sys_intr_restart says
 * whether every handler that ran since had SA_RESTART (the kernel would
 * have restarted the call). A driver that does not know the handlers
 * says 0: EINTR. */
void osf_sys_intr_begin(void);
int osf_sys_intr_restart(void);

/* osf_sys_debug_punch is called by a trim right before each punch, with
 * the producers' stop set: libosf.so stops its own process there (SIGSTOP,
 * once per process) when OSF_DEBUG_TRIM_STOP=1, for tests; others do
 * nothing. */
void osf_sys_debug_punch(void);

#endif
