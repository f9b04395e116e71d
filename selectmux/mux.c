//go:build osf_make

/* mux.c: select, poll and epoll hooks of libosf.so. */
#include "../preload/osf.h"

OSF_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return REAL(poll)(fds, n, timeout);
}

OSF_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout,
			  size_t fdslen)
{
	return REAL(__poll_chk)(fds, n, timeout, fdslen);
}

OSF_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		     const sigset_t *mask)
{
	return REAL(ppoll)(fds, n, ts, mask);
}

OSF_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n,
			   const struct timespec *ts, const sigset_t *mask,
			   size_t fdslen)
{
	return REAL(__ppoll_chk)(fds, n, ts, mask, fdslen);
}

OSF_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *x,
		      struct timeval *tv)
{
	return REAL(select)(n, r, w, x, tv);
}

OSF_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *x,
		       const struct timespec *ts, const sigset_t *mask)
{
	return REAL(pselect)(n, r, w, x, ts, mask);
}

OSF_EXPORT int epoll_create(int size) { return REAL(epoll_create)(size); }

OSF_EXPORT int epoll_create1(int flags) { return REAL(epoll_create1)(flags); }

OSF_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	return REAL(epoll_ctl)(epfd, op, fd, ev);
}

OSF_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max,
			  int timeout)
{
	return REAL(epoll_wait)(epfd, ev, max, timeout);
}

OSF_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max,
			   int timeout, const sigset_t *mask)
{
	return REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
}

OSF_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			    const struct timespec *ts, const sigset_t *mask)
{
	return REAL(epoll_pwait2)(epfd, ev, max, ts, mask);
}
