//go:build osf_make

/* kopt.c: what kernel TCP says about a socket option.
 *
 * An offloaded connection has no kernel TCP socket, yet setsockopt and
 * getsockopt at IPPROTO_TCP, IPPROTO_IP and IPPROTO_IPV6 must validate,
 * normalise and report exactly as one would (ranges, the TCP_LINGER2 and
 * TCP_DEFER_ACCEPT conversions, the congestion control names the kernel
 * offers, defaults that sysctls decide). Rather than a copy of the
 * kernel's rules, osf asks the kernel: a fresh, unbound TCP socket of the
 * connection's family takes the options this connection was given (each
 * exactly as the program passed it) and then the call in question. Only
 * option calls pay for this (a socket, a few calls, a close); the data
 * path never does. Behaviour that depends on the connection's state
 * (TCP_INFO, TCP_MAXSEG, IP_MTU, a zero TCP_WINDOW_CLAMP) stays with the
 * caller. Options the kernel takes with any int (any_int) are checked
 * here, without a socket, and so are values every kernel takes of an
 * option checked by its value alone (in_range). */
#include "osf.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <unistd.h>

/* oracle returns a fresh kernel TCP socket of family fam with the
 * recorded options applied, or -1 (no fd to spare: the caller falls
 * back to its own answer). */
static int oracle(int fam, const struct osf_kopt *tab, int n)
{
	int s = REAL(socket)(fam, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP), i;

	if (s < 0)
		return -1;
	for (i = 0; tab && i < n; i++)
		if (tab[i].len)
			(void)REAL(setsockopt)(s, tab[i].level, tab[i].name,
					       tab[i].val, tab[i].len);
	return s;
}

int osf_kopt_record(struct osf_kopt *tab, int n, int level, int name,
		    const void *val, socklen_t len)
{
	int i, slot = -1;

	for (i = 0; i < n && slot < 0; i++)
		if (tab[i].len && tab[i].level == level && tab[i].name == name)
			slot = i;
	for (i = 0; i < n && slot < 0; i++)
		if (!tab[i].len)
			slot = i;
	if (slot < 0) { /* full: the oldest goes (they replay in order) */
		slot = n - 1;
		memmove(&tab[0], &tab[1], sizeof(tab[0]) * (size_t)slot);
	}
	tab[slot].level = level;
	tab[slot].name = name;
	tab[slot].len = len;
	memcpy(tab[slot].val, val, len);
	return 0;
}

/* any_int reports the options kernel TCP takes with any int value (at
 * least an int's length, readable), whatever the socket's family and
 * state: do_tcp_setsockopt copies the int and sets a flag from it.
 * TCP_NODELAY is set on nearly every connection (wrk, curl, nginx, node),
 * after connect: a scratch socket there cost a client three system calls
 * and a TCP socket's making and freeing per connection. */
static int any_int(int level, int name)
{
	return level == IPPROTO_TCP && name == TCP_NODELAY;
}

/* in_range reports an option whose check is a range of the int alone
 * and a value inside it (do_tcp_setsockopt: TCP_KEEPIDLE and
 * TCP_KEEPINTVL 1..MAX_TCP_KEEPIDLE, 32767, TCP_KEEPCNT 1..MAX_TCP_KEEPCNT,
 * 127, the same since Linux 2.4): every kernel takes it, and a value
 * outside is the kernel's to judge. Go's net sets all three on every
 * connection it dials or accepts (KeepAliveConfig, 15 s by default): a
 * scratch socket for each cost a Go server nine system calls and three TCP
 * sockets' making and freeing per connection. (A cache of values the
 * kernel took once still asked once per thread that set one before the
 * first answer came: Go's dialing goroutines at once.) */
static int in_range(int level, int name, const void *val, socklen_t len)
{
	int v;

	if (level != IPPROTO_TCP || len != sizeof(int) || !val ||
	    (name != TCP_KEEPIDLE && name != TCP_KEEPINTVL && name != TCP_KEEPCNT) ||
	    osf_probe_rd(val, sizeof(int)) < 0)
		return 0; /* the kernel says (EFAULT too) */
	memcpy(&v, val, sizeof(v));
	return v >= 1 && v <= (name == TCP_KEEPCNT ? 127 : 32767);
}

int osf_kopt_set(int fam, struct osf_kopt *tab, int n, int level, int name,
		 const void *val, socklen_t len)
{
	int s, r, err;

	if (len > sizeof(tab[0].val))
		return 1; /* not an option osf records */
	if (any_int(level, name)) {
		if (len < sizeof(int))
			return OSF_FAIL(EINVAL);
		if (!val || osf_probe_rd(val, sizeof(int)) < 0)
			return OSF_FAIL(EFAULT);
		return osf_kopt_record(tab, n, level, name, val, len);
	}
	if (in_range(level, name, val, len))
		return osf_kopt_record(tab, n, level, name, val, len);
	s = oracle(fam, NULL, 0);
	if (s < 0)
		return 1;
	r = REAL(setsockopt)(s, level, name, val, len);
	err = errno;
	REAL(close)(s);
	if (r < 0)
		return OSF_FAIL(err);
	return osf_kopt_record(tab, n, level, name, val, len);
}

int osf_kopt_get(int fam, const struct osf_kopt *tab, int n, int level,
		 int name, void *val, socklen_t *len)
{
	int s = oracle(fam, tab, n), r, err;

	if (s < 0)
		return 1;
	r = REAL(getsockopt)(s, level, name, val, len);
	err = errno;
	REAL(close)(s);
	return r < 0 ? OSF_FAIL(err) : 0;
}

/* The options a connection takes from the kernel socket it was made from
 * (a listener's accepted sockets are its clones; a client set them before
 * connect). */
static const struct {
	int level, name;
	socklen_t len;
} inherited[] = {
	{IPPROTO_TCP, TCP_USER_TIMEOUT, sizeof(int)},
	{IPPROTO_TCP, TCP_KEEPIDLE, sizeof(int)},
	{IPPROTO_TCP, TCP_KEEPINTVL, sizeof(int)},
	{IPPROTO_TCP, TCP_KEEPCNT, sizeof(int)},
	{IPPROTO_TCP, TCP_LINGER2, sizeof(int)},
	{IPPROTO_TCP, TCP_WINDOW_CLAMP, sizeof(int)},
	{IPPROTO_TCP, TCP_NOTSENT_LOWAT, sizeof(int)},
	{IPPROTO_TCP, TCP_CORK, sizeof(int)},
	{IPPROTO_TCP, TCP_SYNCNT, sizeof(int)},
	{IPPROTO_TCP, TCP_CONGESTION, 16},
	{IPPROTO_IP, IP_TOS, sizeof(int)},
	{IPPROTO_IP, IP_TTL, sizeof(int)},
	{IPPROTO_IPV6, IPV6_TCLASS, sizeof(int)},
	{IPPROTO_IPV6, IPV6_UNICAST_HOPS, sizeof(int)},
};

_Static_assert(sizeof(inherited) / sizeof(inherited[0]) <= 16,
	       "osf_kopt_bit's bits stay below sockets.c's (16 and up)");

uint32_t osf_kopt_bit(int level, int name)
{
	size_t i;

	for (i = 0; i < sizeof(inherited) / sizeof(inherited[0]); i++)
		if (inherited[i].level == level && inherited[i].name == name)
			return 1u << i;
	return 0;
}

int osf_kopt_carry(int fd, int fam, uint32_t set, struct osf_kopt *tab, int n)
{
	int s = -1, got = 0;
	size_t i;

	memset(tab, 0, sizeof(*tab) * (size_t)n);
	/* Not known which were set: compare with a fresh socket's. */
	if ((set & OSF_OPTS_ALL) && (s = oracle(fam, NULL, 0)) < 0)
		return 0;
	for (i = 0; i < sizeof(inherited) / sizeof(inherited[0]) && got < n; i++) {
		unsigned char v[32], d[32];
		socklen_t lv = inherited[i].len, ld = inherited[i].len;
		if (!(set & OSF_OPTS_ALL) && !(set & (1u << i)))
			continue;
		memset(v, 0, sizeof(v));
		memset(d, 0, sizeof(d));
		if (REAL(getsockopt)(fd, inherited[i].level, inherited[i].name, v, &lv) < 0 ||
		    (s >= 0 && (REAL(getsockopt)(s, inherited[i].level, inherited[i].name, d, &ld) < 0 ||
				(lv == ld && !memcmp(v, d, lv)))))
			continue;
		tab[got].level = inherited[i].level;
		tab[got].name = inherited[i].name;
		/* a name is set by its length, a number as an int */
		tab[got].len = inherited[i].name == TCP_CONGESTION &&
					       inherited[i].level == IPPROTO_TCP
				       ? (socklen_t)strnlen((char *)v, 16)
				       : lv;
		memcpy(tab[got].val, v, tab[got].len);
		got++;
	}
	if (s >= 0)
		REAL(close)(s);
	return got;
}
