//go:build osf_make

/* gateway.c: the node side of a connection through an osfgw gateway; see
 * gateway.h. */
#include "gateway.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define GW_REPLY_BYTES 32

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* read_reply reads exactly the reply's bytes (never any of the stream that
 * follows it) within ms milliseconds; 0 or an errno. */
static int read_reply(int fd, unsigned char *b, int64_t ms)
{
	int64_t deadline = now_ms() + ms;
	size_t got = 0;

	while (got < GW_REPLY_BYTES) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = deadline - now_ms();
		ssize_t n;
		int r;

		if (left <= 0)
			return ETIMEDOUT;
		r = REAL(poll)(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			return errno;
		if (r <= 0)
			continue;
		n = REAL(recv)(fd, b + got, GW_REPLY_BYTES - got, MSG_DONTWAIT);
		if (n > 0)
			got += (size_t)n;
		else if (n == 0)
			return ECONNRESET; /* the gateway went away */
		else if (errno != EAGAIN && errno != EINTR)
			return errno;
	}
	return 0;
}

/* unconnect dissolves fd's connection to the gateway, so that the socket
 * may connect again. */
static void unconnect(int fd)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	REAL(connect)(fd, &sa, sizeof(sa));
}

int osf_gateway_connect(int fd, const struct sockaddr *sa, socklen_t len,
			const struct osf_core_conn *cc)
{
	unsigned char b[GW_REPLY_BYTES];
	struct osf_fdt_entry *e;
	struct stat st;
	int err, fl;

	if (cc->reason_errno)
		return OSF_FAIL(cc->reason_errno);
	err = read_reply(fd, b, cc->gw_wait_ms);
	if (!err && (memcmp(b, "OSFA", 4) != 0 || b[4] != 1))
		err = EPROTO;
	if (!err)
		err = (int)((uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 |
			    (uint32_t)b[10] << 8 | b[11]);
	if (err) {
		unconnect(fd);
		return OSF_FAIL(err);
	}
	e = osf_fdt_get(fd);
	if (e) {
		e->transport = OSF_TP_GATEWAY;
		e->role = OSF_ROLE_CLIENT;
		e->reason = OSF_R_NONE;
		e->rule = cc->rule;
		e->reason_errno = 0;
		e->aux_fd = -1;
		e->ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
		memset(e->peer, 0, sizeof(e->peer));
		memcpy(e->peer, sa, len < sizeof(e->peer) ? len : sizeof(e->peer));
		__atomic_store_n(&e->kind, OSF_FD_KERNEL, __ATOMIC_RELEASE);
		osf_fdt_touch();
	}
	fl = REAL(fcntl)(fd, F_GETFL, NULL);
	if (fl >= 0 && (fl & O_NONBLOCK)) /* as TCP: in progress, then done */
		return OSF_FAIL(EINPROGRESS);
	return 0;
}

int osf_gateway_getpeername(struct osf_fdt_entry *e, struct sockaddr *sa,
			    socklen_t *len)
{
	const struct sockaddr *p = (const struct sockaddr *)e->peer;
	socklen_t n = p->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					       : sizeof(struct sockaddr_in);

	if (!sa || !len)
		return OSF_FAIL(EFAULT);
	memcpy(sa, e->peer, *len < n ? *len : n);
	*len = n;
	return 0;
}
