//go:build osf_make

/* kfd.c: OSF_SHM_KFD=1, an shm connection whose fd stays the application's
 * own kernel TCP socket (docs/D2-PROPOSAL.md step 3; ARCHITECTURE.md "The
 * kernel TCP socket as the connection's fd"). The kernel connects and
 * accepts it over loopback and keeps its port's whole life (bind
 * conflicts, 4-tuples, TIME_WAIT, FIN_WAIT2, ss); the data goes through
 * the rings of a slot of a region (pool.c), and the socket carries only
 * the readers' 1-byte wake tokens and the end (FIN or RST).
 *
 * The client marks its SYN (DSCP OSF_KFD_MARK), sends its hello (flag
 * OSF_HELLO_F_KFD, its bound address and port) to the listener's
 * companion before the kernel's connect (setup_connect.c), and installs
 * the connection on its TCP socket. The server's accept takes the kernel
 * connection, reads the SYN back (TCP_SAVED_SYN), and finds the hello
 * under the peer's address and port among the hellos its companion
 * queued (setup_accept.c osf_setup_kfd_take). */
#include "conn_priv.h"
#include "kfd.h"
#include "setup.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

/* The SYN's mark: DSCP 38 (0x98 in the TOS byte), unassigned; the
 * backlog's SYN-drop filter (setup_syn.c) drops DSCP 39. */
#define OSF_KFD_TOS 0x98

/* mark sets (on 1) or puts back (on 0, old) the TOS of fd's packets. A
 * socket no IP option was ever set on (the entry says) has the kernel's
 * default, 0: nothing to read. */
static void mark(int fd, int v6, int on, int old[2])
{
	struct osf_fdt_entry *e;
	socklen_t l = sizeof(int);
	int v = OSF_KFD_TOS;

	if (on) {
		old[0] = old[1] = 0;
		e = osf_fdt_lookup(fd);
		if (!e || (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) &
			   (OSF_FDF_KOPTS | OSF_FDF_OPTSET))) {
			if (REAL(getsockopt)(fd, IPPROTO_IP, IP_TOS, &old[0], &l) < 0)
				old[0] = -1;
			l = sizeof(int);
			if (v6 && REAL(getsockopt)(fd, IPPROTO_IPV6, IPV6_TCLASS, &old[1], &l) < 0)
				old[1] = -1;
		}
	}
	if (old[0] >= 0)
		(void)REAL(setsockopt)(fd, IPPROTO_IP, IP_TOS, on ? &v : &old[0], sizeof(int));
	if (v6 && old[1] >= 0)
		(void)REAL(setsockopt)(fd, IPPROTO_IPV6, IPV6_TCLASS, on ? &v : &old[1],
				       sizeof(int));
}

/* nodelay sets TCP_NODELAY on fd: a token must not wait for a delayed
 * ACK (docs/D2-PROPOSAL.md, hard part 10). The program's own value is the
 * fd table's (conn_tcp.c answers getsockopt). */
static void nodelay(int fd)
{
	int one = 1;

	(void)REAL(setsockopt)(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int osf_kfd_connect(int fd, const struct sockaddr *sa, socklen_t len, int v6, int old[2])
{
	struct pollfd p = {fd, POLLOUT, 0};
	int r, err;

	nodelay(fd);
	mark(fd, v6, 1, old);
	r = REAL(connect)(fd, sa, len);
	err = errno;
	/* Over loopback the kernel has done the handshake within a non-
	 * blocking connect, unless the listener's backlog dropped the SYN:
	 * then TCP's connect is in progress until a retransmitted SYN finds
	 * room, which an offloaded connection cannot mirror. */
	if (r < 0 && err == EINPROGRESS && REAL(poll)(&p, 1, 0) == 0)
		r = -2, err = EINPROGRESS;
	/* The mark stays on an offloaded connection, and the program's
	 * IP_TOS is answered by osf (conn_tcp.c). */
	if (r < 0 && (err != EINPROGRESS || r == -2))
		mark(fd, v6, 0, old);
	errno = err;
	return r;
}

int osf_kfd_again(int fd, const struct sockaddr *sa, socklen_t len, int v6, int old[2])
{
	struct sockaddr un = {.sa_family = AF_UNSPEC};
	int saved = errno;

	(void)REAL(connect)(fd, &un, sizeof(un));
	mark(fd, v6, 0, old);
	errno = saved;
	return REAL(connect)(fd, sa, len);
}

void osf_kfd_listen(int lfd)
{
	int one = 1;

	(void)REAL(setsockopt)(lfd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof(one));
}

int osf_kfd_marked(int nfd)
{
	uint8_t b[128];
	socklen_t l = sizeof(b);
	int tos, saved = errno;

	if (REAL(getsockopt)(nfd, IPPROTO_TCP, TCP_SAVED_SYN, b, &l) < 0 || l < 2) {
		errno = saved;
		return -1; /* no SYN saved (SYN cookies, TCP_SAVE_SYN set late) */
	}
	if ((b[0] >> 4) == 4)
		tos = b[1];
	else if ((b[0] >> 4) == 6)
		tos = ((b[0] & 0x0f) << 4) | (b[1] >> 4);
	else
		return 0;
	return (tos & 0xfc) == OSF_KFD_TOS;
}

int osf_kfd_accepted(int nfd, struct osf_core_conn *cc, int flags)
{
	nodelay(nfd);
	cc->wake_fd = -1; /* nfd itself */
	return osf_conn_install(nfd, cc, OSF_ROLE_SERVER, (flags & SOCK_CLOEXEC) != 0,
				(flags & SOCK_NONBLOCK) != 0,
				OSF_INSTALL_AS_ASKED | OSF_INSTALL_KFD);
}

void osf_kfd_lowat(int fd)
{
	int one = 1, saved = errno;

	(void)REAL(setsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
	errno = saved;
}

void osf_kfd_poke(struct osf_conn *c, int fd)
{
	int saved = errno;

	c->kfd = 1;
	/* The count before the look: the server raises holders at its
	 * install and reads the count at its close (osf_kfd_close), so
	 * either this look sees it accepted, or its close sees the token
	 * owed and waits for it (a byte that came after the close would make
	 * the kernel's close a reset). */
	__atomic_add_fetch(&c->s.peer->rx_tokens, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->s.peer->holders, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&c->s.peer->close_seq, __ATOMIC_SEQ_CST)) {
		osf_wake_sub(&c->s.peer->rx_tokens, 1); /* accepted: nothing waits for a byte */
		errno = saved;
		return;
	}
	if (REAL(send)(fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
		osf_wake_sub(&c->s.peer->rx_tokens, 1);
	errno = saved;
}

#define KFD_OWED_MS 200

void osf_kfd_close(struct osf_conn *c, int fd, int linger0)
{
	static uint32_t none;
	struct linger lg = {1, 0};
	int saved = errno, i;
	/* No other thread of this process in a call on c: this close is
	 * the socket's last reference, the kernel's close its end. Else
	 * (a reader asleep in recv on it, a poller) the kernel keeps the
	 * socket until that call returns, and it takes the next tokens as
	 * TCP's takes the peer's next data. */
	int last = __atomic_load_n(&c->refs, __ATOMIC_ACQUIRE) == 1;

	if (!last) {
		/* Only the tokens beyond its waiters: theirs they take. */
		if (__atomic_load_n(&c->s.me->rx_tokens, __ATOMIC_ACQUIRE))
			osf_side_drain(&c->s, fd, &c->s.me->rx_waiters);
		goto linger;
	}
	/* Tokens nobody will read would make the kernel's close a reset
	 * (unread data): no sender takes the flag from here on, and one
	 * that took it counted its tokens before (segment.h
	 * osf_wake_claim), so the count read after says every byte still
	 * to come (osf_kfd_poke's and osf_side_probe_peer's too: they count,
	 * then look at the flag, or at close_seq). Read them first. */
	__atomic_exchange_n(&c->s.me->rx_want, OSF_WANT_CLOSED, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->s.me->rx_tokens, __ATOMIC_ACQUIRE))
		osf_side_drain(&c->s, fd, &none);
	/* A token counted but not sent yet (its sender between the two, or
	 * preempted there) is waited for, briefly: the count is the peer's
	 * word, so at most KFD_OWED_MS. */
	for (i = 0; i < KFD_OWED_MS && __atomic_load_n(&c->s.me->rx_tokens, __ATOMIC_ACQUIRE);
	     i++) {
		struct pollfd p = {fd, POLLIN, 0};
		(void)REAL(poll)(&p, 1, 1);
		osf_side_drain(&c->s, fd, &none);
	}
linger:
	/* Unread data in this side's ring: TCP resets (RFC 2525), and so
	 * does SO_LINGER {1, 0}. */
	if (linger0 || osf_side_rx_used(&c->s) != 0)
		(void)REAL(setsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	errno = saved;
}
