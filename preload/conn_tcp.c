//go:build osf_make

/* conn_tcp.c: what TCP would answer about an offloaded connection: socket
 * options (remembered per connection, with Linux's defaults), TCP_INFO,
 * socket names and ioctls.
 */
#include "conn_priv.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/errqueue.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

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

/* tcp_fallback is what Linux answers for a TCP option never set, for when
 * no kernel socket can be asked (kopt.c). */
static int tcp_fallback(int name)
{
	switch (name) {
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
	default:
		return 0;
	}
}

/* osf_conn_maxseg is the MSS an established loopback connection reports (the
 * kernel answers its mss_cache, whatever TCP_MAXSEG asked for). */
int osf_conn_maxseg(const struct osf_conn *c)
{
	if (c->s.side == OSF_SIDE_SERVER)
		return 32768;
	return c->v6 ? 32732 : 32741;
}

/* tcp_info_size returns the size of the running kernel's struct tcp_info
 * (what TCP_INFO gives a large enough buffer: 280 bytes on 6.18, the C
 * library's struct is older and smaller), asked once of a fresh socket. */
static socklen_t tcp_info_size(void)
{
	static socklen_t size;
	socklen_t n = __atomic_load_n(&size, __ATOMIC_RELAXED);
	unsigned char buf[1024];
	int s, saved = errno;

	if (n)
		return n;
	n = sizeof(struct tcp_info);
	/* Under a seccomp filter a new socket may be fatal: the C size. */
	s = osf.sandboxed ? -1 : REAL(socket)(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s >= 0) {
		socklen_t l = sizeof(buf);
		if (REAL(getsockopt)(s, IPPROTO_TCP, TCP_INFO, buf, &l) == 0 &&
		    l > n)
			n = l;
		REAL(close)(s);
	}
	errno = saved;
	__atomic_store_n(&size, n, __ATOMIC_RELAXED);
	return n;
}

/* The kernel's struct tcp_info past the C library's (linux/tcp.h), by
 * offset: the byte and segment counters. */
#define TI_BYTES_ACKED 120
#define TI_BYTES_RECEIVED 128
#define TI_SEGS_OUT 136
#define TI_SEGS_IN 140
#define TI_NOTSENT_BYTES 144
#define TI_MIN_RTT 148
#define TI_DATA_SEGS_IN 152
#define TI_DATA_SEGS_OUT 156
#define TI_DELIVERED 192
#define TI_BYTES_SENT 200
#define TI_SND_WND 228
#define TI_RCV_WND 232

static void put32(unsigned char *b, int off, uint64_t v)
{
	uint32_t x = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;

	memcpy(b + off, &x, sizeof(x));
}

static void put64(unsigned char *b, int off, uint64_t v) { memcpy(b + off, &v, sizeof(v)); }

/* tcp_info_counts fills in TCP_INFO's counters from the rings as loopback
 * TCP counts them: bytes sent are acknowledged once they reach the peer
 * (the ring), the client's count of acknowledged bytes includes its SYN,
 * each write that moved bytes is a data segment, each data segment is
 * acknowledged by one segment, and the handshake adds the client's SYN
 * and ACK and the server's SYN-ACK (which the server's counters leave
 * out, as the kernel's do). The peer's words only feed these counts. */
static void tcp_info_counts(struct osf_conn *c, unsigned char *b)
{
	int client = c->s.side == OSF_SIDE_CLIENT;
	uint64_t sent = __atomic_load_n(&c->s.tx->head, __ATOMIC_RELAXED),
		 got = __atomic_load_n(&c->s.rx->head, __ATOMIC_RELAXED),
		 dout = __atomic_load_n(&c->s.me->send_calls, __ATOMIC_RELAXED),
		 din = __atomic_load_n(&c->s.peer->send_calls, __ATOMIC_RELAXED);

	put64(b, TI_BYTES_SENT, sent);
	put64(b, TI_BYTES_ACKED, sent + (uint64_t)client);
	put64(b, TI_BYTES_RECEIVED, got);
	put32(b, TI_DATA_SEGS_OUT, dout);
	put32(b, TI_DATA_SEGS_IN, din);
	put32(b, TI_SEGS_OUT, dout + din + (client ? 2 : 0));
	put32(b, TI_SEGS_IN, din + dout + (client ? 1 : 2));
	put32(b, TI_DELIVERED, dout + 1);
	put32(b, TI_NOTSENT_BYTES, __atomic_load_n(&c->s.me->cork, __ATOMIC_RELAXED) & OSF_CORK_HELD);
	put32(b, TI_MIN_RTT, 1);
	put32(b, TI_SND_WND, osf_side_peer_rcv_part(&c->s));
	put32(b, TI_RCV_WND, osf_seg_rcv_part(c->s.size, __atomic_load_n(&c->s.me->rcvlim,
									   __ATOMIC_RELAXED)));
}

/* tcp_info answers TCP_INFO, as long as the kernel's struct (the fields
 * past the C library's struct are zero). The kernel has processed a
 * peer's FIN or reset by the time its socket is asked, so the state is
 * taken after asking whether the other side is gone (one poll): else a
 * connection whose peer closed would say ESTABLISHED until the next recv
 * or poll. */
static int tcp_info(int fd, struct osf_conn *c, void *val, socklen_t *len)
{
	union {
		struct tcp_info ti;
		unsigned char b[1024];
	} u;
	struct tcp_info ti;
	socklen_t n, full = tcp_info_size();

	memset(&u, 0, sizeof(u));
	memset(&ti, 0, sizeof(ti));
	osf_side_check_end(&c->s, fd);
	ti.tcpi_state = (uint8_t)osf_side_tcp_state(&c->s);
	ti.tcpi_snd_mss = ti.tcpi_rcv_mss = 65483;
	ti.tcpi_advmss = 65483;
	ti.tcpi_pmtu = 65536;
	ti.tcpi_snd_cwnd = 10;
	ti.tcpi_rto = 204000; /* loopback: TCP_RTO_MIN plus a little */
	ti.tcpi_rtt = 1;
	ti.tcpi_rcv_space = c->s.size;
	ti.tcpi_snd_ssthresh = 0x7fffffff;
	ti.tcpi_rcv_ssthresh = c->s.size;
	u.ti = ti;
	tcp_info_counts(c, u.b);
	if (full > sizeof(u))
		full = sizeof(u);
	n = *len < full ? *len : full;
	memcpy(val, u.b, n);
	*len = n;
	return 0;
}

/* fam is the family of the kernel socket that answers for c. */
static int fam(const struct osf_conn *c) { return c->v6 ? AF_INET6 : AF_INET; }

/* kopt_set reports whether the program set the option on c. */
static int kopt_set(const struct osf_conn *c, int level, int name)
{
	int i;

	for (i = 0; i < OSF_CONN_OPTS; i++)
		if (c->opts[i].len && c->opts[i].level == level &&
		    c->opts[i].name == name)
			return 1;
	return 0;
}

/* get_kopt answers an IPPROTO_TCP, IP or IPV6 option as kernel TCP does
 * for a socket given this connection's options (kopt.c); fallback is the
 * value when no kernel socket can be asked. */
static int get_kopt(struct osf_conn *c, int level, int name, void *val,
		    socklen_t *len, int fallback)
{
	int r = osf_kopt_get(fam(c), c->opts, OSF_CONN_OPTS, level, name, val,
			     len);

	return r == 1 ? put_int(val, len, fallback) : r;
}

/* default_buf is what TCP reports for SO_RCVBUF/SO_SNDBUF never set: a
 * fresh loopback connection's (tcp_rmem[1]; the send buffer as grown at
 * connect for loopback's MSS with the default reordering, at most
 * tcp_wmem[2]; the kernel's grows to tcp_wmem[2] when the destination's
 * cached metrics remember reordering, which osf does not model). */
static int default_buf(int name)
{
	static int rmem1, wmem2;
	const char *path = name == SO_RCVBUF ? "/proc/sys/net/ipv4/tcp_rmem"
					     : "/proc/sys/net/ipv4/tcp_wmem";
	int *v = name == SO_RCVBUF ? &rmem1 : &wmem2;

	if (!__atomic_load_n(v, __ATOMIC_RELAXED)) {
		char b[96] = "";
		int a[3] = {0, 131072, 4194304}, f = open(path, O_RDONLY | O_CLOEXEC);
		if (f >= 0) {
			ssize_t n = REAL(read)(f, b, sizeof(b) - 1);
			if (n > 0)
				b[n] = 0;
			REAL(close)(f);
			if (sscanf(b, "%d %d %d", &a[0], &a[1], &a[2]) != 3)
				a[1] = 131072, a[2] = 4194304;
		}
		__atomic_store_n(v, name == SO_RCVBUF ? a[1] : a[2],
				 __ATOMIC_RELAXED);
	}
	if (name == SO_RCVBUF)
		return rmem1;
	return wmem2 < 3939840 ? wmem2 : 3939840;
}

int osf_conn_getsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			void *val, socklen_t *len)
{
	struct osf_conn *c = conn_get(fd, e);
	int r;

	if (!c)
		return OSF_FAIL(EBADF);
	/* A bad pointer is EFAULT, never a crash: the length, and the
	 * value's first int (every option writes that much, unless the
	 * length is shorter; a longer one's tail is not probed, where the
	 * option may write less than the length says). */
	osf_fault_arm();
	if (!len || osf_probe_wr(len, sizeof(*len)) < 0 ||
	    ((int)*len > 0 &&
	     osf_probe_wr(val, *len < sizeof(int) ? *len : sizeof(int)) < 0)) {
		conn_put(c);
		return OSF_FAIL(EFAULT);
	}
	osf_side_peer_closing(&c->s, fd); /* SO_ERROR, TCP_INFO: a reset */
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
			if (unlikely(c->gw == OSF_CONN_GW_WAIT))
				(void)osf_conn_gw_settle(fd, e, 0);
			r = put_int(val, len, osf_side_take_pending(&c->s));
			break;
		case SO_RCVBUF:
		case SO_SNDBUF:
			if (c->bufset & (name == SO_RCVBUF ? 1 : 2))
				r = REAL(getsockopt)(fd, level, name, val, len);
			else
				r = put_int(val, len, default_buf(name));
			break;
		case SO_REUSEPORT:
			r = put_int(val, len, 0);
			break;
		case SO_RCVLOWAT:
			r = c->kfd ? put_int(val, len, c->rcvlowat)
				   : REAL(getsockopt)(fd, level, name, val, len);
			break;
		case SO_PEEK_OFF:
			r = put_int(val, len, __atomic_load_n(&c->peek_off, __ATOMIC_RELAXED));
			break;
		case SO_ZEROCOPY:
			r = put_int(val, len, c->zerocopy);
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
		if (name == TCP_INFO)
			r = val ? tcp_info(fd, c, val, len) : OSF_FAIL(EFAULT);
		else if (name == TCP_MAXSEG)
			r = put_int(val, len, osf_conn_maxseg(c));
		else if (name == TCP_WINDOW_CLAMP && !kopt_set(c, level, name))
			/* set at connect: the space of the receive buffer */
			r = put_int(val, len, default_buf(SO_RCVBUF) / 2);
		else
			r = get_kopt(c, level, name, val, len, tcp_fallback(name));
		break;
	case IPPROTO_IP:
	case IPPROTO_IPV6:
		if (level == IPPROTO_IP && name == IP_MTU)
			r = put_int(val, len, 65535); /* loopback's, capped */
		else if (level == IPPROTO_IPV6 && name == IPV6_MTU)
			r = put_int(val, len, 65536);
		else if (c->s.side == OSF_SIDE_SERVER &&
			 ((level == IPPROTO_IP && name == IP_MULTICAST_TTL) ||
			  (level == IPPROTO_IPV6 && name == IPV6_MULTICAST_HOPS)) &&
			 !kopt_set(c, level, name))
			/* an accepted socket takes the TTL of the SYN */
			r = put_int(val, len, 64);
		else
			r = get_kopt(c, level, name, val, len,
				     name == IP_TTL ? 64 : 0);
		break;
	default:
		r = OSF_FAIL(ENOPROTOOPT);
	}
	conn_put(c);
	return r;
}

/* buf_limit turns a buffer size as the kernel has it (doubled, clamped)
 * into the bytes in flight it allows (segment.h sndlim, rcvlim): the size
 * itself up to a quarter of the ring, then growing with it so that the
 * largest size the sysctls allow (net.core.wmem_max, rmem_max, doubled)
 * is the whole ring; so any increase makes room, as it does in TCP. */
static uint32_t buf_limit(const struct osf_conn *c, int rcv, int eff)
{
	static int maxes[2];
	uint64_t q = c->s.size / 4, top;
	int *m = &maxes[rcv];

	if (!__atomic_load_n(m, __ATOMIC_RELAXED)) {
		char b[32] = "";
		int f = open(rcv ? "/proc/sys/net/core/rmem_max"
				 : "/proc/sys/net/core/wmem_max",
			     O_RDONLY | O_CLOEXEC), v = 0;
		if (f >= 0) {
			ssize_t n = REAL(read)(f, b, sizeof(b) - 1);
			if (n > 0)
				b[n] = 0;
			REAL(close)(f);
		}
		if (sscanf(b, "%d", &v) != 1 || v <= 0)
			v = 212992;
		__atomic_store_n(m, v, __ATOMIC_RELAXED);
	}
	top = 2 * (uint64_t)*m;
	if (eff <= 0)
		return 0;
	if ((uint64_t)eff <= q)
		return (uint32_t)eff;
	if (top <= q || (uint64_t)eff >= top)
		return c->s.size;
	return (uint32_t)(q + (c->s.size - q) * ((uint64_t)eff - q) / (top - q));
}

/* rcvlowat_clamp bounds an SO_RCVLOWAT value as tcp_set_rcvlowat does. */
static int rcvlowat_clamp(int fd, const struct osf_conn *c, int v)
{
	static int rmem_max2;
	int cap = 0;

	if (c->bufset & 1) {
		socklen_t l = sizeof(cap);
		if (REAL(getsockopt)(fd, SOL_SOCKET, SO_RCVBUF, &cap, &l) < 0)
			cap = 0;
		cap >>= 1;
	} else {
		cap = __atomic_load_n(&rmem_max2, __ATOMIC_RELAXED);
		if (!cap) {
			char b[96] = "";
			int f = open("/proc/sys/net/ipv4/tcp_rmem", O_RDONLY | O_CLOEXEC);
			int lo, def, hi = 6291456;
			if (f >= 0) {
				ssize_t n = REAL(read)(f, b, sizeof(b) - 1);
				if (n > 0)
					b[n] = 0;
				REAL(close)(f);
			}
			if (sscanf(b, "%d %d %d", &lo, &def, &hi) != 3 || hi <= 0)
				hi = 6291456;
			cap = hi >> 1;
			__atomic_store_n(&rmem_max2, cap, __ATOMIC_RELAXED);
		}
	}
	if (v < 0)
		v = INT_MAX;
	if (cap > 0 && v > cap)
		v = cap;
	return v ? v : 1;
}

/* own_change wakes this process's epoll waits for a change of c's own
 * state that may have made it ready for events (POLLIN, POLLOUT): no peer
 * sends a token for it, and the kernel wakes the socket's waits (SO_RCVLOWAT:
 * tcp_set_rcvlowat's tcp_data_ready; SO_SNDBUF: sk_write_space), an
 * edge-triggered one with a new edge. */
static void own_change(int fd, struct osf_fdt_entry *e, struct osf_conn *c, short events)
{
	if (osf_conn_poll(fd, e) & events)
		osf_mux_changed(fd, __atomic_load_n(&c->fds, __ATOMIC_RELAXED) > 1,
				events & POLLIN ? EPOLLIN | EPOLLRDNORM : EPOLLOUT | EPOLLWRNORM);
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
	case SO_SNDBUFFORCE: {
		/* The wake socket doubles and clamps the size as TCP does. */
		int rcv = name == SO_RCVBUF || name == SO_RCVBUFFORCE, eff = 0;
		socklen_t l = sizeof(eff);
		r = REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
		if (r != 0)
			return r;
		c->bufset |= rcv ? 1 : 2;
		if (REAL(getsockopt)(fd, SOL_SOCKET, rcv ? SO_RCVBUF : SO_SNDBUF,
				     &eff, &l) == 0)
			__atomic_store_n(rcv ? &c->s.me->rcvlim : &c->s.me->sndlim,
					 buf_limit(c, rcv, eff), __ATOMIC_RELAXED);
		if (!rcv)
			own_change(fd, e, c, POLLOUT);
		return 0;
	}
	case SO_SNDTIMEO:
		/* A blocked writer sleeps in recv on the writers' socket: the
		 * send timeout is its receive timeout (on the region's
		 * eventfd it reads fd's SO_SNDTIMEO). */
		r = REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
		if (r == 0 && c->s.wfd >= 0) /* else the writer reads fd's own */
			(void)REAL(setsockopt)(c->s.wfd, SOL_SOCKET, SO_RCVTIMEO,
					       val, len);
		return r;
	case SO_RCVTIMEO_OLD:
#ifdef SO_RCVTIMEO_NEW
	case SO_RCVTIMEO_NEW:
#endif
		/* An RDMA reader asleep on its channel keeps the value
		 * (conn_rdma.c rcv_timeout): every holder reads it again. */
		r = REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
		if (r == 0)
			__atomic_add_fetch(&c->s.me->opts_seq, 1, __ATOMIC_SEQ_CST);
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
	case SO_OOBINLINE: /* the wake socket keeps it for getsockopt and exec */
		r = REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
		if (r == 0 && get_int(val, len, &v) == 0)
			osf_conn_set_oobinline(c, v != 0);
		return r;
	case SO_ZEROCOPY: /* loopback TCP copies: every send is notified so */
		if (len < sizeof(int))
			return OSF_FAIL(EINVAL);
		if (get_int(val, len, &v) < 0)
			return -1;
		c->zerocopy = v != 0;
		return 0;
	case SO_PEEK_OFF: /* any value; a negative one turns it off */
		if (len < sizeof(int))
			return OSF_FAIL(EINVAL);
		if (get_int(val, len, &v) < 0)
			return -1;
		__atomic_store_n(&c->peek_off, v < 0 ? -1 : v, __ATOMIC_RELAXED);
		return 0;
	case SO_RCVLOWAT:
		/* As tcp_set_rcvlowat: at most half the receive buffer
		 * (tcp_rmem's largest unless SO_RCVBUF was set), 0 is 1;
		 * the wake socket keeps the value for getsockopt and exec. */
		if (len < sizeof(int))
			return OSF_FAIL(EINVAL);
		if (get_int(val, len, &v) < 0)
			return -1;
		v = rcvlowat_clamp(fd, c, v);
		/* A kernel TCP socket (OSF_SHM_KFD) would wait for that many
		 * tokens: osf keeps the value itself. */
		r = c->kfd ? 0 : REAL(setsockopt)(fd, SOL_SOCKET, name, &v, sizeof(v));
		if (r == 0) {
			c->rcvlowat = v;
			own_change(fd, e, c, POLLIN);
		}
		return r;
	case SO_TIMESTAMP_OLD:
	case SO_TIMESTAMPNS_OLD:
	case SO_TIMESTAMP_NEW:
	case SO_TIMESTAMPNS_NEW:
		r = REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
		if (r == 0 && get_int(val, len, &v) == 0)
			c->cm_ts = v ? name : 0;
		return r;
	default:
		return REAL(setsockopt)(fd, SOL_SOCKET, name, val, len);
	}
}

/* state_refuses reports what the kernel refuses for an established (not
 * yet closed) socket that an unconnected one, which kopt.c asks, takes. */
static int state_refuses(struct osf_conn *c, int level, int name,
			 const void *val, socklen_t len)
{
	int v = 1;

	if (osf_side_tcp_closed(&c->s) || (val && get_int(val, len, &v) < 0))
		return 0;
	if (level == IPPROTO_TCP)
		return (name == TCP_WINDOW_CLAMP && v == 0) ||
		       (name == TCP_FASTOPEN && v >= 0) ||
		       (name == TCP_FASTOPEN_CONNECT && v >= 0 && v <= 1);
	return level == IPPROTO_IPV6 && name == IPV6_V6ONLY; /* bound */
}

/* kopt_took applies what an IPPROTO_TCP option the connection took
 * changes in osf itself: TCP_NODELAY's flag, TCP_INQ's control message,
 * TCP_CORK and TCP_NODELAY's hold on written bytes. */
static void kopt_took(int fd, struct osf_fdt_entry *e, struct osf_conn *c,
		      int level, int name, const void *val, socklen_t len)
{
	int v = 0;

	if (level != IPPROTO_TCP || get_int(val, len, &v) != 0)
		return;
	if (name == TCP_NODELAY)
		e->flags = v ? (e->flags | OSF_FDF_NODELAY)
			     : (e->flags & ~OSF_FDF_NODELAY);
	if (name == TCP_INQ)
		c->cm_inq = v != 0;
	if (name == TCP_CORK || name == TCP_NODELAY)
		osf_conn_cork_option(c, fd, name, v);
}

/* kfd_kernel_kopt reports whether an option set on a connection whose fd
 * is its kernel TCP socket (OSF_SHM_KFD) goes to that socket too: those
 * of the connection's life (TCP_LINGER2, user timeout, ...), not those
 * that would hold or mark its wake tokens (TCP_NODELAY, TCP_CORK, the
 * TOS that marks its SYN), nor keepalive's timing: a loopback
 * connection's probes are answered by the kernel whatever its processes
 * do, so they change nothing a program sees (getsockopt answers from
 * what was set, as without the switch), and Go and redis set three per
 * connection (the kernel uses its default idle time; SO_KEEPALIVE
 * itself stays on the socket, which keeps it for getsockopt). */
static int kfd_kernel_kopt(int level, int name)
{
	if (level == IPPROTO_TCP)
		return name != TCP_NODELAY && name != TCP_CORK && name != TCP_INQ &&
		       name != TCP_KEEPIDLE && name != TCP_KEEPINTVL && name != TCP_KEEPCNT;
	if (level == IPPROTO_IP)
		return name != IP_TOS;
	return level == IPPROTO_IPV6 && name != IPV6_TCLASS;
}

/* set_kopt validates, normalises and remembers an IPPROTO_TCP, IP or IPV6
 * option as kernel TCP does (kopt.c). */
static int set_kopt(int fd, struct osf_fdt_entry *e, struct osf_conn *c,
		    int level, int name, const void *val, socklen_t len)
{
	int r, v = 0;

	if (level == IPPROTO_TCP && (name == TCP_ULP || name == TCP_MD5SIG))
		return 0;
	if (state_refuses(c, level, name, val, len))
		return OSF_FAIL(EINVAL);
	r = osf_kopt_set(fam(c), c->opts, OSF_CONN_OPTS, level, name, val, len);
	if (r == 1) /* no kernel socket to ask: take it as it comes */
		r = get_int(val, len, &v);
	if (r == 0)
		kopt_took(fd, e, c, level, name, val, len);
	if (r == 0 && c->kfd && kfd_kernel_kopt(level, name)) {
		int saved = errno;
		(void)REAL(setsockopt)(fd, level, name, val, len);
		errno = saved;
	}
	return r;
}

int osf_conn_carry_kopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len)
{
	struct osf_conn *c = conn_get(fd, e);

	if (!c)
		return OSF_FAIL(EBADF);
	if (len <= sizeof(c->opts[0].val))
		(void)osf_kopt_record(c->opts, OSF_CONN_OPTS, level, name, val, len);
	kopt_took(fd, e, c, level, name, val, len);
	conn_put(c);
	return 0;
}

int osf_conn_carry_buf(int fd, struct osf_fdt_entry *e, int name, int size)
{
	int force = name == SO_RCVBUF ? SO_RCVBUFFORCE : SO_SNDBUFFORCE, v = size / 2, got = 0;
	socklen_t l = sizeof(got);

	if (osf_conn_setsockopt(fd, e, SOL_SOCKET, name, &v, sizeof(v)) < 0)
		return -1;
	/* Past net.core.[rw]mem_max the program had the privilege to force it. */
	if (REAL(getsockopt)(fd, SOL_SOCKET, name, &got, &l) == 0 && got != size)
		(void)osf_conn_setsockopt(fd, e, SOL_SOCKET, force, &v, sizeof(v));
	return 0;
}

int osf_conn_setsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len)
{
	struct osf_conn *c = conn_get(fd, e);
	int r = 0;

	if (!c)
		return OSF_FAIL(EBADF);
	osf_fault_arm(); /* as getsockopt's: the value's first int */
	if ((int)len > 0 && osf_probe_rd(val, len < sizeof(int) ? len : sizeof(int)) < 0) {
		conn_put(c);
		return OSF_FAIL(EFAULT);
	}
	switch (level) {
	case SOL_SOCKET:
		r = set_socket(fd, e, c, name, val, len);
		break;
	case IPPROTO_TCP:
	case IPPROTO_IP:
	case IPPROTO_IPV6:
		r = set_kopt(fd, e, c, level, name, val, len);
		break;
	default:
		r = OSF_FAIL(ENOPROTOOPT);
	}
	conn_put(c);
	return r;
}

/* put_cmsg appends one control message as the kernel's put_cmsg does: it
 * fits whole or the buffer is marked truncated; 0 when it did not fit. */
static int put_cmsg(struct msghdr *msg, size_t *used, int level, int type,
		    const void *data, size_t n)
{
	struct cmsghdr h;
	size_t space = CMSG_SPACE(n), room = msg->msg_controllen - *used;

	if (room < CMSG_LEN(n)) {
		msg->msg_flags |= MSG_CTRUNC;
		return 0;
	}
	h.cmsg_len = CMSG_LEN(n);
	h.cmsg_level = level;
	h.cmsg_type = type;
	memcpy((char *)msg->msg_control + *used, &h, sizeof(h));
	memcpy((char *)msg->msg_control + *used + CMSG_LEN(0), data, n);
	*used += space < room ? space : room;
	return 1;
}

void osf_conn_cmsgs(int fd, struct osf_fdt_entry *e, struct msghdr *msg,
		    ssize_t got)
{
	struct osf_conn *c = msg->msg_control && msg->msg_controllen
				     ? conn_get(fd, e)
				     : NULL;
	size_t used = 0;

	if (c && c->cm_ts && got > 0) { /* the time it was read: no earlier */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		if (c->cm_ts == SO_TIMESTAMPNS_OLD || c->cm_ts == SO_TIMESTAMPNS_NEW) {
			put_cmsg(msg, &used, SOL_SOCKET, c->cm_ts, &ts, sizeof(ts));
		} else {
			struct timeval tv = {ts.tv_sec, ts.tv_nsec / 1000};
			put_cmsg(msg, &used, SOL_SOCKET, c->cm_ts, &tv, sizeof(tv));
		}
	}
	if (c && c->cm_inq && got >= 0) { /* as tcp_inq_hint */
		int64_t left = osf_side_rx_used(&c->s);
		int inq = left < 0 ? 0 : (int)left;
		if (inq == 0 && (osf_side_revents(&c->s) & POLLRDHUP))
			inq = 1;
		put_cmsg(msg, &used, SOL_TCP, TCP_CM_INQ, &inq, sizeof(inq));
	}
	msg->msg_controllen = used;
	if (c)
		conn_put(c);
}

void osf_conn_zc_sent(struct osf_conn *c)
{
	uint32_t id = c->zc_next++;

	if (c->zc_pending && id == c->zc_hi + 1) {
		c->zc_hi = id;
		return;
	}
	c->zc_lo = c->zc_hi = id;
	c->zc_pending = 1;
}

int osf_conn_errqueue(int fd, struct osf_fdt_entry *e, struct msghdr *msg, int flags)
{
	struct osf_conn *c = conn_get(fd, e);
	struct sock_extended_err ee;
	size_t used = 0;

	(void)flags;
	if (!c)
		return OSF_FAIL(EBADF);
	if (!c->zc_pending) {
		conn_put(c);
		return OSF_FAIL(EAGAIN);
	}
	memset(&ee, 0, sizeof(ee));
	ee.ee_origin = SO_EE_ORIGIN_ZEROCOPY;
	ee.ee_code = SO_EE_CODE_ZEROCOPY_COPIED;
	ee.ee_info = c->zc_lo;
	ee.ee_data = c->zc_hi;
	c->zc_pending = 0;
	msg->msg_flags = MSG_ERRQUEUE;
	msg->msg_namelen = 0;
	if (msg->msg_control && msg->msg_controllen)
		put_cmsg(msg, &used, c->v6 ? SOL_IPV6 : SOL_IP,
			 c->v6 ? IPV6_RECVERR : IP_RECVERR, &ee, sizeof(ee));
	else
		msg->msg_flags |= MSG_CTRUNC;
	msg->msg_controllen = used;
	conn_put(c);
	return 0;
}

int osf_conn_getname(int fd, struct osf_fdt_entry *e, int peer,
		     struct sockaddr *sa, socklen_t *len)
{
	const uint8_t *src = peer ? e->peer : e->local;
	socklen_t full;
	sa_family_t fam;

	if (peer) { /* a closed TCP socket has no peer */
		struct osf_conn *c = conn_get(fd, e);
		int closed = 0;
		if (c) {
			osf_side_peer_closing(&c->s, fd);
			closed = osf_side_tcp_closed(&c->s);
			conn_put(c);
		}
		if (closed)
			return OSF_FAIL(ENOTCONN);
	}
	memcpy(&fam, src, sizeof(fam));
	full = fam == AF_INET6 ? sizeof(struct sockaddr_in6)
			       : sizeof(struct sockaddr_in);
	return osf_addr_out(sa, len, src, full);
}

int osf_conn_ioctl(int fd, struct osf_fdt_entry *e, unsigned long req,
		   void *arg)
{
	struct osf_conn *c = conn_get(fd, e);
	int r = 0;
	int64_t v;

	if (!c)
		return OSF_FAIL(EBADF);
	/* The int osf writes: a bad pointer is EFAULT, as the kernel's
	 * put_user (FIONBIO and FIOASYNC: the kernel read it first). */
	osf_fault_arm();
	if ((req == FIONREAD || req == SIOCOUTQ || req == SIOCOUTQNSD || req == SIOCATMARK) &&
	    osf_probe_wr(arg, sizeof(int)) < 0) {
		conn_put(c);
		return OSF_FAIL(EFAULT);
	}
	switch (req) {
	case FIONREAD: /* SIOCINQ */
		v = osf_side_rx_used(&c->s);
		*(int *)arg = v < 0 ? 0 : (int)v;
		break;
	case SIOCOUTQ:
	case SIOCOUTQNSD:
		v = osf_side_tx_unacked(&c->s);
		/* and what TCP_CORK holds back: TCP counts it, unsent */
		if (v >= 0) { /* held: a peer-writable word, at most the ring */
			uint32_t held = __atomic_load_n(&c->s.me->cork, __ATOMIC_RELAXED) &
					OSF_CORK_HELD;
			v += held < c->s.size ? held : 0;
		}
		*(int *)arg = v < 0 ? 0 : (int)v;
		break;
	case SIOCATMARK: { /* at the urgent byte, read out of band or not */
		uint64_t u = osf_side_urg_now(&c->s);
		*(int *)arg = u && __atomic_load_n(&c->s.rx->tail, __ATOMIC_ACQUIRE) == u - 1;
		break;
	}
	case FIONBIO:
		r = REAL(ioctl)(fd, req, arg);
		if (r == 0)
			c->nonblock = *(int *)arg != 0;
		break;
	case FIOASYNC:
		r = REAL(ioctl)(fd, req, arg);
		if (r == 0)
			conn_set_async(c, *(int *)arg != 0);
		break;
	default:
		r = REAL(ioctl)(fd, req, arg);
	}
	conn_put(c);
	return r;
}
