//go:build osf_make

/* qsock.c: qsock_readable and qsock_writable (include/osf/qsock.h).
 * The cookie caches fd's table entry, so a call on an offloaded fd is a
 * check of the entry and a look at the rings: no lookup, no system call. */
#include "conn.h"

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

static int ask(int fd, void **cookie, short ev)
{
	struct osf_fdt_entry *e = cookie ? *cookie : NULL;
	short r;

	if (!e || !osf_kind_is_conn(e->kind))
		e = osf_fdt_lookup(fd);
	if (!e || !osf_kind_is_conn(e->kind)) {
		if (cookie)
			*cookie = NULL;
		return poll_now(fd, ev);
	}
	if (cookie)
		*cookie = e;
	r = osf_conn_poll(fd, e);
	if (r & POLLNVAL)
		return OSF_FAIL(EBADF);
	return (r & (ev | POLLERR | POLLHUP)) ? 1 : 0;
}

OSF_EXPORT int qsock_readable(int fd, void **cookie)
{
	return ask(fd, cookie, POLLIN);
}

OSF_EXPORT int qsock_writable(int fd, void **cookie)
{
	return ask(fd, cookie, POLLOUT);
}
