//go:build osf_make

/* setup_syn.c: a full backlog completes no more connections than the
 * kernel would.
 *
 * An offloaded listener queues connections in two places, its companion
 * and the kernel's accept queue. A client that found the companion full
 * and simply connected over kernel TCP would find that queue empty: the
 * backlog would double. With TCP the client's SYN is dropped while the queue is full
 * and retransmitted (1 s, 3 s, 7 s, ...): the socket stays in SYN_SENT,
 * completes at the first retransmission after the server accepted,
 * is refused once the listener is gone, and gives up with ETIMEDOUT.
 *
 * osf lets the kernel do all of that with the client's own socket:
 * - an offloaded listener carries a classic BPF socket filter that drops
 *   SYNs whose IP TOS (IPv6 traffic class) is OSF_SYN_MARK;
 * - a client that found the companion full sets that mark on its TCP
 *   socket and connects over kernel TCP: its SYNs are dropped, exactly as
 *   when the kernel's own queue is full, and every call on the socket
 *   (poll, shutdown, SO_ERROR, connect again, SO_SNDTIMEO, signals) is the
 *   kernel's;
 * - a thread (osf-syn, alive while such sockets exist) looks at the
 *   companion every OSF_SYN_PROBE_MS with a connection it closes at once
 *   (accept drops such an empty one, as the hello watcher's kicks); when
 *   the companion has room or is gone, it restores the socket's own TOS,
 *   and the next retransmitted SYN reaches the listener (a kernel TCP
 *   connection, reason "backlog full") or its absence (refused). */
#include "setup_priv.h"

#include <linux/filter.h>
#include <netinet/tcp.h>
#include <stdlib.h>

/* DSCP 39 (unassigned), ECN bits clear: TCP keeps its own ECN bits. */
#define OSF_SYN_MARK 0x9c
#define OSF_SYN_PROBE_MS 200
#define SYN_MAX 4096 /* beyond this, a connect completes as it used to */

/* The filter: drop a segment that came over loopback (osf's clients are
 * on this host; a remote network that re-marks DSCP must not lock anyone
 * out) with SYN and without ACK whose TOS (IPv4) or traffic class (IPv6)
 * is the mark; keep everything else. skb->data is the TCP header
 * (tcp_filter); SKF_NET_OFF reaches the IP header; loopback is ifindex 1
 * in every network namespace (LOOPBACK_IFINDEX). */
static struct sock_filter syn_prog[] = {
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_IFINDEX),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 15), /* not lo: keep */
	BPF_STMT(BPF_LD | BPF_B | BPF_ABS, SKF_NET_OFF),     /* version */
	BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 4),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4, 0, 3),
	BPF_STMT(BPF_LD | BPF_B | BPF_ABS, SKF_NET_OFF + 1), /* v4: TOS */
	BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xfc),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OSF_SYN_MARK, 5, 9),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, 8),
	BPF_STMT(BPF_LD | BPF_H | BPF_ABS, SKF_NET_OFF),     /* v6: class */
	BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 4),
	BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xfc),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OSF_SYN_MARK, 0, 4),
	BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 13),              /* TCP flags */
	BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x12),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x02, 0, 1),
	BPF_STMT(BPF_RET | BPF_K, 0),
	BPF_STMT(BPF_RET | BPF_K, 0xffffffff),
};
#define SYN_PROG_LEN (sizeof(syn_prog) / sizeof(syn_prog[0]))

void osf_setup_syn_filter(int lfd)
{
	struct sock_fprog fp = {SYN_PROG_LEN, syn_prog};
	int saved = errno;

	(void)REAL(setsockopt)(lfd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof(fp));
	errno = saved;
}

void osf_setup_syn_unfilter(int fd)
{
	socklen_t n = 0;
	int saved = errno;

	/* An accepted socket inherits its listener's filter; take ours off
	 * (only ours: the program may have attached its own). */
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_GET_FILTER, NULL, &n) == 0 &&
	    n == SYN_PROG_LEN)
		(void)REAL(setsockopt)(fd, SOL_SOCKET, SO_DETACH_FILTER, NULL, 0);
	errno = saved;
}

/* Sockets whose SYN carries the mark, watched by osf-syn. */
static struct {
	pthread_mutex_t mu;
	int n, cap, running;
	struct syn {
		int fd, tos, tclass, v6;
		uint64_t ino;
		long long since;
		char name[108];
	} *p;
} syn = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* syn_room makes room for one more entry; syn.mu is held. */
static int syn_room(void)
{
	struct syn *n;
	int cap;

	if (syn.n < syn.cap)
		return 1;
	if (syn.cap >= SYN_MAX)
		return 0;
	cap = syn.cap ? 2 * syn.cap : 16;
	n = realloc(syn.p, (size_t)cap * sizeof(*n));
	if (!n)
		return 0;
	syn.p = n;
	syn.cap = cap;
	return 1;
}

static uint64_t ino_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* unmark restores the socket's own TOS (and traffic class). */
static void unmark(const struct syn *s)
{
	(void)REAL(setsockopt)(s->fd, IPPROTO_IP, IP_TOS, &s->tos, sizeof(int));
	if (s->v6)
		(void)REAL(setsockopt)(s->fd, IPPROTO_IPV6, IPV6_TCLASS, &s->tclass,
				       sizeof(int));
}

/* companion_try connects a socket of type to the companion at sun and
 * closes it at once: 1 when it has room, 0 when it is full (or no socket
 * now: look again later), -1 with errno when it is gone. */
static int companion_try(const struct sockaddr_un *sun, socklen_t sl, int type)
{
	int s = REAL(socket)(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), r, e;

	if (s < 0)
		return 0;
	r = REAL(connect)(s, (const struct sockaddr *)sun, sl) == 0 ? 1 : errno == EAGAIN ? 0 : -1;
	e = errno;
	REAL(close)(s);
	errno = e;
	return r;
}

/* companion_state connects to the companion name and closes at once:
 * 1 when it has room, 0 when it is full, -1 when it is gone. An
 * OSF_SHM_KFD listener's companion is a SOCK_SEQPACKET one, which refuses
 * a SOCK_STREAM connect as an absent one does (ECONNREFUSED: an abstract
 * name is found with its socket type). */
static int companion_state(const char *name)
{
	struct sockaddr_un sun;
	socklen_t sl = setup_abstract(&sun, name);
	int r = companion_try(&sun, sl, SOCK_STREAM);

	if (r < 0 && (errno == ECONNREFUSED || errno == EPROTOTYPE))
		r = companion_try(&sun, sl, SOCK_SEQPACKET);
	return r;
}

/* syn_check decides about one watched socket: 1 to stop watching it. */
static int syn_check(struct syn *s, long long now)
{
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	int st;

	if (ino_of(s->fd) != s->ino)
		return 1; /* closed: not ours to touch any more */
	if (REAL(getsockopt)(s->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) < 0) {
		unmark(s);
		return 1;
	}
	if (ti.tcpi_state != TCP_SYN_SENT) {
		/* Not connecting yet (the connect call is on its way), or no
		 * longer: shut down, timed out, refused, or it reached a
		 * listener without the filter. */
		if (ti.tcpi_state == TCP_CLOSE && now - s->since < 1000000000LL)
			return 0;
		unmark(s);
		return 1;
	}
	st = companion_state(s->name);
	if (st == 0)
		return 0;
	unmark(s); /* room, or the listener is gone: the next SYN decides */
	return 1;
}

static void *syn_watch(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec ts = {0, OSF_SYN_PROBE_MS * 1000000L};
		long long now;
		int i;

		nanosleep(&ts, NULL);
		now = osf_now_ns();
		pthread_mutex_lock(&syn.mu);
		for (i = 0; i < syn.n;)
			if (syn_check(&syn.p[i], now))
				syn.p[i] = syn.p[--syn.n];
			else
				i++;
		if (syn.n == 0) {
			syn.running = 0;
			pthread_mutex_unlock(&syn.mu);
			return NULL;
		}
		pthread_mutex_unlock(&syn.mu);
	}
}

/* start_syn_watch starts osf-syn unless it runs; syn.mu is held. */
static void start_syn_watch(void)
{
	if (!syn.running && osf_thread_start(syn_watch, "osf-syn") == 0)
		syn.running = 1;
}

int setup_syn_hold(int fd, int v6, const char *name)
{
	struct syn s;
	socklen_t l = sizeof(int);
	int mark = OSF_SYN_MARK, saved = errno, ok = 0;

	memset(&s, 0, sizeof(s));
	s.fd = fd;
	s.v6 = v6;
	s.ino = ino_of(fd);
	s.since = osf_now_ns();
	snprintf(s.name, sizeof(s.name), "%s", name);
	if (REAL(getsockopt)(fd, IPPROTO_IP, IP_TOS, &s.tos, &l) < 0)
		goto out;
	l = sizeof(int);
	if (v6 && REAL(getsockopt)(fd, IPPROTO_IPV6, IPV6_TCLASS, &s.tclass, &l) < 0)
		goto out;
	pthread_mutex_lock(&syn.mu);
	if (s.ino && syn_room() &&
	    REAL(setsockopt)(fd, IPPROTO_IP, IP_TOS, &mark, sizeof(mark)) == 0 &&
	    (!v6 || REAL(setsockopt)(fd, IPPROTO_IPV6, IPV6_TCLASS, &mark, sizeof(mark)) == 0)) {
		syn.p[syn.n++] = s;
		start_syn_watch();
		ok = 1;
	} else {
		unmark(&s);
	}
	pthread_mutex_unlock(&syn.mu);
out:
	errno = saved;
	return ok;
}

/* syn_after_fork resets the SYN watcher's state in a fork child. */
OSF_FORK_TEXT static void syn_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	/* The parent's osf-syn keeps watching the sockets it marked. */
	OSF_RESET_MEM(&syn.mu, fresh);
	OSF_RESET(syn.running, 0);
	OSF_RESET(syn.n, 0);
}
OSF_AFTER_FORK(syn_after_fork, OSF_FORK_RESET);
