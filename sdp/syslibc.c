//go:build !osf_make

/* syslibc.c: sys.h's system calls as the plain libc functions, for the Go
 * programs that link the stream protocol's C side through this package
 * (cside.go: osfgw's ring relay, sdp/sidetest). libosf.so defines them as
 * its real functions instead (preload/sys.c): the Makefile leaves this
 * file out of the library. */
#include "sys.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

ssize_t osf_sys_send(int fd, const void *buf, size_t n, int flags) { return send(fd, buf, n, flags); }
ssize_t osf_sys_recv(int fd, void *buf, size_t n, int flags) { return recv(fd, buf, n, flags); }
ssize_t osf_sys_read(int fd, void *buf, size_t n) { return read(fd, buf, n); }
int osf_sys_close(int fd) { return close(fd); }
int osf_sys_shutdown(int fd, int how) { return shutdown(fd, how); }
int osf_sys_poll(struct pollfd *p, nfds_t n, int timeout) { return poll(p, n, timeout); }
int osf_sys_ioctl(int fd, unsigned long req, void *arg) { return ioctl(fd, req, arg); }
pid_t osf_sys_gettid(void) { return (pid_t)syscall(SYS_gettid); }
int osf_sys_getsockopt(int fd, int level, int name, void *val, socklen_t *len) { return getsockopt(fd, level, name, val, len); }
int osf_sys_socket(int domain, int type, int protocol) { return socket(domain, type, protocol); }
int osf_sys_socketpair(int domain, int type, int protocol, int sv[2]) { return socketpair(domain, type, protocol, sv); }
int osf_sys_connect(int fd, const struct sockaddr *sa, socklen_t len) { return connect(fd, sa, len); }
ssize_t osf_sys_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len) { return sendto(fd, buf, n, flags, sa, len); }
ssize_t osf_sys_sendmsg(int fd, const struct msghdr *m, int flags) { return sendmsg(fd, m, flags); }
ssize_t osf_sys_recvmsg(int fd, struct msghdr *m, int flags) { return recvmsg(fd, m, flags); }
int osf_sys_fcntl(int fd, int cmd, long arg) { return fcntl(fd, cmd, arg); }
ssize_t osf_sys_write(int fd, const void *buf, size_t n) { return write(fd, buf, n); }
int osf_sys_epoll_create1(int flags) { return epoll_create1(flags); }
int osf_sys_epoll_ctl(int ep, int op, int fd, struct epoll_event *ev) { return epoll_ctl(ep, op, fd, ev); }
int osf_sys_epoll_wait(int ep, struct epoll_event *ev, int n, int timeout) { return epoll_wait(ep, ev, n, timeout); }
void osf_sys_intr_begin(void) {}
int osf_sys_intr_restart(void) { return 0; }
void osf_sys_debug_punch(void) {}

