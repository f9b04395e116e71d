/* census.h: whom a companion can be trusted for. A companion (the AF_UNIX
 * listener that stands for a kernel TCP listener) is trusted only when its
 * owner (SO_PEERCRED: who called listen on it) holds a kernel TCP listener
 * the companion's name serves, as NETLINK_SOCK_DIAG reports it: anyone can
 * bind an abstract name, only the port's owner its TCP listener.
 *
 * One implementation for every dialer: sdp/setup.c's osf_dial_companion
 * (libosf.so's connect and the Go dialers) checks a companion with it, and
 * the census is taken by preload/setup_connect.c (which caches censuses)
 * or shm's binding (one per dial). The functions are
 * static; the includer may define OSF_CENSUS_SYS(name) to the system call
 * it wants (libosf.so: its REAL functions, never its own hooks); the
 * default is the libc function. */
#ifndef OSF_SDP_CENSUS_H
#define OSF_SDP_CENSUS_H

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "names.h" /* addresses in IPv6 form: osf_name_v4mapped, osf_name_unspec */

#ifndef OSF_CENSUS_SYS
#define OSF_CENSUS_SYS(name) name
#endif

/* The kernel TCP listeners on one port: who owns each and where it is
 * bound (IPv6 form; v4 mapped). As many as an SO_REUSEPORT group has
 * companions, and one more: a full census only says "more than that"
 * (osf_dial_companion then tries every slot). */
#define OSF_CENSUS_MAX ((int)OSF_SLOT_MAX + 1)
struct osf_census {
	int n;
	struct {
		uid_t uid;
		uint8_t a[16];
	} l[OSF_CENSUS_MAX];
};

/* osf_census_dump adds the listeners of family fam on port to c over the
 * netlink socket s; 0, or -1 when the kernel did not answer. AF_UNSPEC
 * asks for both families at once with the older request
 * (TCPDIAG_GETSOCK: SOCK_DIAG_BY_FAMILY takes one family): the kernel
 * walks its whole listener table for each dump, one family or two, so one
 * dump costs half of two (~20 µs each on a 2-vCPU VM). */
static inline int osf_census_dump(int s, int fam, uint16_t port, struct osf_census *c)
{
	struct {
		struct nlmsghdr nlh;
		union {
			struct inet_diag_req_v2 v2;
			struct inet_diag_req v1;
		} r;
	} req;
	struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
	char buf[8192];
	int rounds = 0;

	memset(&req, 0, sizeof(req));
	req.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	if (fam == AF_UNSPEC) {
		req.nlh.nlmsg_len = NLMSG_LENGTH(sizeof(req.r.v1));
		req.nlh.nlmsg_type = TCPDIAG_GETSOCK;
		req.r.v1.idiag_family = AF_UNSPEC;
		req.r.v1.idiag_states = 1u << 10; /* TCP_LISTEN */
		req.r.v1.id.idiag_sport = htons(port);
	} else {
		req.nlh.nlmsg_len = NLMSG_LENGTH(sizeof(req.r.v2));
		req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
		req.r.v2.sdiag_family = (uint8_t)fam;
		req.r.v2.sdiag_protocol = IPPROTO_TCP;
		req.r.v2.idiag_states = 1u << 10;
		req.r.v2.id.idiag_sport = htons(port);
	}
	if (OSF_CENSUS_SYS(sendto)(s, &req, req.nlh.nlmsg_len, 0, (struct sockaddr *)&nl,
				   sizeof(nl)) < 0)
		return -1;
	while (rounds++ < 1000) {
		ssize_t n = OSF_CENSUS_SYS(recv)(s, buf, sizeof(buf), 0);
		struct nlmsghdr *h;
		if (n <= 0)
			return -1;
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			struct inet_diag_msg *m;
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR)
				return -1;
			m = NLMSG_DATA(h);
			if (m->idiag_state != 10 || ntohs(m->id.idiag_sport) != port ||
			    (m->idiag_family != AF_INET && m->idiag_family != AF_INET6) ||
			    c->n >= OSF_CENSUS_MAX)
				continue;
			c->l[c->n].uid = m->idiag_uid;
			if (m->idiag_family == AF_INET) {
				memcpy(c->l[c->n].a, osf_name_v4mapped, 12);
				memcpy(c->l[c->n].a + 12, m->id.idiag_src, 4);
			} else {
				memcpy(c->l[c->n].a, m->id.idiag_src, 16);
			}
			c->n++;
		}
	}
	return -1;
}

/* osf_census_read finds the kernel TCP listeners on port in this thread's
 * network namespace; -1 when the kernel cannot tell (no sock_diag): then
 * nobody is trusted. */
static inline int osf_census_read(uint16_t port, struct osf_census *c)
{
	int s, r;

	c->n = 0;
	s = OSF_CENSUS_SYS(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (s < 0)
		return -1;
	r = osf_census_dump(s, AF_UNSPEC, port, c);
	if (r < 0) { /* a kernel without the older request: one per family */
		c->n = 0;
		r = osf_census_dump(s, AF_INET, port, c);
		if (r == 0)
			r = osf_census_dump(s, AF_INET6, port, c);
	}
	OSF_CENSUS_SYS(close)(s);
	return r;
}

/* osf_census_owns reports whether uid holds a kernel TCP listener that a
 * companion named for want (IPv6 form, v4 mapped) serves: bound to want
 * itself or to a wildcard (wild: a wildcard name, which only a wildcard
 * listener has). */
static inline int osf_census_owns(const struct osf_census *c, uid_t uid, const uint8_t want[16],
			   int wild)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (c->l[i].uid == uid &&
		    (osf_name_unspec(c->l[i].a) || (!wild && memcmp(c->l[i].a, want, 16) == 0)))
			return 1;
	return 0;
}

/* osf_census_conn_uid finds, in this thread's network namespace, the
 * TCP socket whose own address is src:sport (family fam: 4 or 16 bytes)
 * and whose peer is dst:dport, and reads its owner into *uid (the uid
 * that made it, as ss -e shows it): 0, or -1 when there is none (closed,
 * reset) or the kernel cannot tell (no sock_diag). An OSF_SHM_KFD server
 * asks it of the client end of a connection it accepted: only a hello
 * sent by its owner may name it (preload/setup_kfd.c). */
static inline int osf_census_conn_uid(int fam, const uint8_t *src, uint16_t sport,
				      const uint8_t *dst, uint16_t dport, uid_t *uid)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req;
	struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
	union {
		struct nlmsghdr h;
		char b[1024];
	} buf;
	size_t al = fam == AF_INET ? 4 : 16;
	struct nlmsghdr *h = &buf.h;
	struct inet_diag_msg *m;
	ssize_t n;
	int s, r = -1;

	memset(&req, 0, sizeof(req));
	req.nlh.nlmsg_len = sizeof(req);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = (uint8_t)fam;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	req.r.id.idiag_sport = htons(sport);
	req.r.id.idiag_dport = htons(dport);
	memcpy(req.r.id.idiag_src, src, al);
	memcpy(req.r.id.idiag_dst, dst, al);
	req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	s = OSF_CENSUS_SYS(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (s < 0)
		return -1;
	if (OSF_CENSUS_SYS(sendto)(s, &req, sizeof(req), 0, (struct sockaddr *)&nl, sizeof(nl)) ==
		    (ssize_t)sizeof(req) &&
	    (n = OSF_CENSUS_SYS(recv)(s, &buf, sizeof(buf), 0)) > 0 &&
	    NLMSG_OK(h, (size_t)n) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
	    h->nlmsg_len >= NLMSG_LENGTH(sizeof(*m))) {
		m = NLMSG_DATA(h);
		if (ntohs(m->id.idiag_sport) == sport && ntohs(m->id.idiag_dport) == dport &&
		    !memcmp(m->id.idiag_src, src, al) && !memcmp(m->id.idiag_dst, dst, al)) {
			*uid = m->idiag_uid;
			r = 0;
		}
	}
	OSF_CENSUS_SYS(close)(s);
	return r;
}

/* osf_companion_owner reads who called listen on the companion at the
 * other end of the connected AF_UNIX socket s; -1 when it cannot tell. */
static inline int osf_companion_owner(int s, struct ucred *cr)
{
	socklen_t l = sizeof(*cr);

	return OSF_CENSUS_SYS(getsockopt)(s, SOL_SOCKET, SO_PEERCRED, cr, &l);
}

#endif
