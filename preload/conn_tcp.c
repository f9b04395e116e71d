//go:build osf_make

/* conn_tcp.c: what TCP would answer about an offloaded connection: socket
 * options (remembered per connection, with Linux's defaults), TCP_INFO,
 * socket names and ioctls.
 */
#include "conn_priv.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/ioctl.h>

/* ---- options, names ----------------------------------------------------------- */

static int put_int(void *val, socklen_t *len, int v)
{
	if (!len || !val)
		return OSF_FAIL(EFAULT);
	if (*len < sizeof(int)) {
		if (*len == 0)
			return OSF_FAIL(EINVAL);
		*(char *)val = (char)v;
		*len = 1;
		return 0;
	}
	*(int *)val = v;
	*len = sizeof(int);
	return 0;
}

static int get_int(const void *val, socklen_t len, int *v)
{
	if (!val)
		return OSF_FAIL(EFAULT);
	if (len >= sizeof(int))
		*v = *(const int *)val;
	else if (len > 0)
		*v = *(const char *)val;
	else
		return OSF_FAIL(EINVAL);
	return 0;
}

/* tcp_default is what Linux answers for a TCP option never set. */
static int tcp_default(int name)
{
	switch (name) {
	case TCP_MAXSEG:
		return 32741; /* what Linux reports on loopback */
	case TCP_KEEPIDLE:
		return 7200;
	case TCP_KEEPINTVL:
		return 75;
	case TCP_KEEPCNT:
		return 9;
	case TCP_SYNCNT:
		return 6;
	case TCP_LINGER2:
		return 60;
	case TCP_QUICKACK:
		return 1;
	case TCP_NOTSENT_LOWAT:
		return 0;
	default:
		return 0;
	}
}

/* tcp_info answers TCP_INFO. The kernel has processed a peer's FIN or
 * reset by the time its socket is asked, so the state is taken after
 * asking whether the other side is gone (one poll): else a connection
 * whose peer closed would say ESTABLISHED until the next recv or poll. */
static int tcp_info(int fd, struct osf_conn *c, void *val, socklen_t *len)
{
	struct tcp_info ti;
	socklen_t n;

	memset(&ti, 0, sizeof(ti));
	osf_side_check_end(&c->s, fd);
	ti.tcpi_state = (uint8_t)osf_side_tcp_state(&c->s);
	ti.tcpi_snd_mss = ti.tcpi_rcv_mss = 65483;
	ti.tcpi_advmss = 65483;
	ti.tcpi_pmtu = 65536;
	ti.tcpi_snd_cwnd = 10;
	ti.tcpi_rtt = 1;
	ti.tcpi_rcv_space = c->s.size;
	ti.tcpi_snd_ssthresh = 0x7fffffff;
	ti.tcpi_rcv_ssthresh = c->s.size;
	n = *len < sizeof(ti) ? *len : (socklen_t)sizeof(ti);
	memcpy(val, &ti, n);
	*len = n;
	return 0;
}

static struct ipopt *ip_slot(struct osf_conn *c, int level, int name, int add)
{
	int i;

	for (i = 0; i < IP_OPTS; i++)
		if (c->ipopt[i].level == level && c->ipopt[i].name == name)
			return &c->ipopt[i];
	if (!add)
		return NULL;
	for (i = 0; i < IP_OPTS; i++)
		if (c->ipopt[i].level < 0) {
			c->ipopt[i].level = level;
			c->ipopt[i].name = name;
			return &c->ipopt[i];
		}
	return &c->ipopt[IP_OPTS - 1];
}

static int ip_default(int level, int name)
{
	if ((level == IPPROTO_IP && name == IP_TTL) ||
	    (level == IPPROTO_IPV6 && name == IPV6_UNICAST_HOPS))
		return 64;
	return 0;
}

/* default_buf is what TCP reports for SO_RCVBUF/SO_SNDBUF never set: osf
 * buffers a ring of this size in each direction. */
static int default_buf(struct osf_conn *c) { return (int)c->s.size; }

int osf_conn_getsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			void *val, socklen_t *len)
{
	struct osf_conn *c = conn_get(fd, e);
	struct ipopt *o;
	int r;

	if (!c)
		return OSF_FAIL(EBADF);
	if (!len) {
		conn_put(c);
		return OSF_FAIL(EFAULT);
	}
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_DOMAIN:
			r = put_int(val, len, c->v6 ? AF_INET6 : AF_INET);
			break;
		case SO_PROTOCOL:
			r = put_int(val, len, IPPROTO_TCP);
			break;
		case SO_ERROR:
			r = put_int(val, len, osf_side_take_pending(&c->s));
			break;
		case SO_RCVBUF:
		case SO_SNDBUF:
			if (c->bufset & (name == SO_RCVBUF ? 1 : 2))
				r = REAL(getsockopt)(fd, level, name, val, len);
			else
				r = put_int(val, len, default_buf(c));
			break;
		case SO_REUSEPORT:
			r = put_int(val, len, 0);
			break;
		case SO_PEERCRED: { /* TCP has no peer credentials */
			struct ucred u = {0, (uid_t)-1, (gid_t)-1};
			socklen_t n = *len < sizeof(u) ? *len : sizeof(u);
			if (val)
				memcpy(val, &u, n);
			*len = n;
			r = 0;
			break;
		}
		default:
			r = REAL(getsockopt)(fd, level, name, val, len);
		}
		break;
	case IPPROTO_TCP:
		if (name == TCP_INFO) {
			r = val ? tcp_info(fd, c, val, len) : OSF_FAIL(EFAULT);
		} else if (name == TCP_CONGESTION) {
			socklen_t n = *len < 6 ? *len : 6;
			if (val)
				memcpy(val, "cubic", n);
			*len = n;
			r = 0;
		} else if (name >= 0 && name < TCP_OPTS) {
			r = put_int(val, len,
				    c->tcpset[name] ? c->tcpopt[name]
						    : tcp_default(name));
		} else {
			r = OSF_FAIL(ENOPROTOOPT);
		}
		break;
	case IPPROTO_IP:
	case IPPROTO_IPV6:
		if (level == IPPROTO_IP && name == IP_OPTIONS) {
			*len = 0; /* no IP options: Linux returns none */
			r = 0;
			break;
		}
		o = ip_slot(c, level, name, 0);
		r = put_int(val, len, o ? o->value : ip_default(level, name));
		break;
	default:
		r = OSF_FAIL(ENOPROTOOPT);
	}
	conn_put(c);
	return r;
}

/* set_socket handles a SOL_SOCKET option: the kernel keeps most of them on
 * the wake socket (fd); osf notes what changes its own behaviour. */
static int set_socket(int fd, struct osf_fdt_entry *e, struct osf_conn *c,
		      int name, const void *val, socklen_t len)
{
	int r, v = 0;

	switch (name) {
	case SO_RCVBUF:
	case SO_SNDBUF:
	case SO_RCVBUFFORCE:
	case SO_SNDBUFFORCE:
		r = REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
		if (r == 0)
			c->bufset |= (name == SO_RCVBUF || name == SO_RCVBUFFORCE)
					     ? 1
					     : 2;
		return r;
	case SO_SNDTIMEO:
		/* A blocked writer sleeps in recv on the writers' socket: the
		 * send timeout is its receive timeout. */
		r = REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
		if (r == 0)
			(void)REAL(setsockopt)(c->s.wfd, SOL_SOCKET, SO_RCVTIMEO,
					       val, len);
		return r;
	case SO_LINGER: {
		const struct linger *l = val;
		r = REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
		if (r == 0 && l && len >= sizeof(*l)) {
			if (l->l_onoff)
				e->flags |= OSF_FDF_LINGER;
			else
				e->flags &= ~OSF_FDF_LINGER;
			e->linger_secs = (uint32_t)l->l_linger;
			/* An earlier holder's close with linger 0 no longer
			 * decides how the last one ends. */
			if (!l->l_onoff || l->l_linger != 0)
				__atomic_and_fetch(&c->s.me->flags,
						   ~OSF_SIDE_RESET,
						   __ATOMIC_ACQ_REL);
		}
		return r;
	}
	case SO_REUSEPORT:
		return get_int(val, len, &v);
	default:
		return REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
	}
}

/* set_tcp remembers an IPPROTO_TCP option, as getsockopt reports it. */
static int set_tcp(struct osf_fdt_entry *e, struct osf_conn *c, int name,
		   const void *val, socklen_t len)
{
	int r, v = 0;

	if (name == TCP_CONGESTION || name == TCP_ULP || name == TCP_MD5SIG)
		return 0;
	if (name < 0 || name >= TCP_OPTS)
		return OSF_FAIL(ENOPROTOOPT);
	r = get_int(val, len, &v);
	if (r == 0) {
		c->tcpopt[name] = v;
		c->tcpset[name] = 1;
		if (name == TCP_NODELAY)
			e->flags = v ? (e->flags | OSF_FDF_NODELAY)
				     : (e->flags & ~OSF_FDF_NODELAY);
	}
	return r;
}

int osf_conn_setsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len)
{
	struct osf_conn *c = conn_get(fd, e);
	int r = 0, v = 0;

	if (!c)
		return OSF_FAIL(EBADF);
	switch (level) {
	case SOL_SOCKET:
		r = set_socket(fd, e, c, name, val, len);
		break;
	case IPPROTO_TCP:
		r = set_tcp(e, c, name, val, len);
		break;
	case IPPROTO_IP:
	case IPPROTO_IPV6:
		r = get_int(val, len, &v);
		if (r == 0)
			ip_slot(c, level, name, 1)->value = v;
		break;
	default:
		r = OSF_FAIL(ENOPROTOOPT);
	}
	conn_put(c);
	return r;
}

int osf_conn_getname(int fd, struct osf_fdt_entry *e, int peer,
		     struct sockaddr *sa, socklen_t *len)
{
	const uint8_t *src = peer ? e->peer : e->local;
	socklen_t full;
	sa_family_t fam;

	if (!len)
		return OSF_FAIL(EFAULT);
	if (peer) { /* a closed TCP socket has no peer */
		struct osf_conn *c = conn_get(fd, e);
		int closed = c && osf_side_tcp_closed(&c->s);
		if (c)
			conn_put(c);
		if (closed)
			return OSF_FAIL(ENOTCONN);
	}
	memcpy(&fam, src, sizeof(fam));
	full = fam == AF_INET6 ? sizeof(struct sockaddr_in6)
			       : sizeof(struct sockaddr_in);
	if (sa)
		memcpy(sa, src, *len < full ? *len : full);
	*len = full;
	return 0;
}

int osf_conn_ioctl(int fd, struct osf_fdt_entry *e, unsigned long req,
		   void *arg)
{
	struct osf_conn *c = conn_get(fd, e);
	int r = 0;
	int64_t v;

	if (!c)
		return OSF_FAIL(EBADF);
	switch (req) {
	case FIONREAD: /* SIOCINQ */
		v = osf_side_rx_used(&c->s);
		*(int *)arg = v < 0 ? 0 : (int)v;
		break;
	case SIOCOUTQ:
	case SIOCOUTQNSD:
		v = osf_side_tx_free(&c->s);
		*(int *)arg = v < 0 ? 0 : (int)(c->s.size - (uint64_t)v);
		break;
	case SIOCATMARK:
		*(int *)arg = 0;
		break;
	case FIONBIO:
		r = REAL(ioctl)(fd, req, arg);
		if (r == 0)
			c->nonblock = *(int *)arg != 0;
		break;
	default:
		r = REAL(ioctl)(fd, req, arg);
	}
	conn_put(c);
	return r;
}
