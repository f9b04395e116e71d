//go:build osf_make

/* qsock.c: qsock_readable and qsock_writable (include/osf/qsock.h). */
#include "osf.h"

#include "../include/osf/qsock.h"

/* poll_now answers for fds osf does not offload. */
static int poll_now(int fd, short ev)
{
	struct pollfd p = {fd, ev, 0};
	int r = REAL(poll)(&p, 1, 0);

	if (r < 0)
		return -1;
	if (p.revents & POLLNVAL)
		return OSF_FAIL(EBADF);
	return r > 0 ? 1 : 0;
}

OSF_EXPORT int qsock_readable(int fd, void **cookie)
{
	if (cookie)
		*cookie = NULL;
	return poll_now(fd, POLLIN);
}

OSF_EXPORT int qsock_writable(int fd, void **cookie)
{
	if (cookie)
		*cookie = NULL;
	return poll_now(fd, POLLOUT);
}
