//go:build osf_make

/* hostile: a peer that speaks osf's shared-memory handshake itself and then
 * misbehaves, to prove that a peer can break only its own connection.
 *
 *   hostile server PORT SECONDS SEED   accept osf clients of 127.0.0.1:PORT
 *       (binding the companion name), map each client's segment and
 *       scribble on it: random and plausible head/tail values, flags, lock
 *       words, sleeper and token counts, holders, cork, sndlim/rcvlim,
 *       trim slots (owner, base, len), counters, header fields, ring
 *       bytes, and random bytes on the wake socket, for SECONDS; then
 *       close.
 *   hostile client PORT SEED           connect to the osf companion of a
 *       server on 127.0.0.1:PORT with bad hellos: an unsealed segment (so
 *       that it could be truncated under the server), a wrong size, a bad
 *       magic, no fd, two fds, garbage; then a good one that it scribbles.
 *   hostile lockflip PORT SECONDS      connect with a good hello, keep data
 *       in the server's ring, and write two live tids in turn into the
 *       server side's lock words for SECONDS (issue 10, item 4).
 *   hostile trimsteer PORT ADDR LEN SECONDS   connect with a good hello,
 *       give the server pages to read and trim (none in the last second),
 *       and write ADDR and LEN where layout 3's trim slots were, for
 *       SECONDS (issue 24, item 1).
 *   hostile claim PORT SECONDS LO HI   OSF_SHM_KFD's hellos on one link
 *       for client ports LO to HI, each ring holding "HIJACK", for
 *       connections it never makes, then one marked connection without a
 *       hello (its accept reads every link), waited for until the server
 *       resets it; held for SECONDS.
 *
 * With OSF_SHM_KFD=1 in its environment it speaks as a peer with that
 * switch does (preload/kfd.c): as a client, each hello, flagged
 * OSF_HELLO_F_KFD and naming a TCP socket bound to 127.0.0.1 and marked
 * (DSCP 38), goes on a link of its own to the SOCK_SEQPACKET companion,
 * then that socket connects to the server's kernel listener and is the
 * connection's wake socket; as a server, its companion is a
 * SOCK_SEQPACKET one whose links carry the hellos, and each connection's
 * wake socket is the kernel connection from the port its hello names.
 *
 * The layout comes from sdp/segment.h, the names from shm/names.go. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../sdp/segment.h"

static uint64_t rng;
static int kfd; /* OSF_SHM_KFD=1: hellos as a client with the switch sends them */

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static socklen_t abstract(struct sockaddr_un *sun, const char *name)
{
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	strncpy(sun->sun_path + 1, name, sizeof(sun->sun_path) - 2);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
}

static uint64_t plausible(uint64_t other, uint32_t size)
{
	switch (rnd() % 5) {
	case 0:
		return rnd();
	case 1:
		return other + rnd() % (size + 2);
	case 2:
		return other - rnd() % (size + 2);
	case 3:
		return other;
	default:
		return rnd() % 64;
	}
}

/* scribble rewrites what a peer can reach in the segment. */
static void scribble(uint8_t *seg, uint32_t ring, int wake)
{
	struct osf_seg_hdr *h = osf_seg_hdr(seg, ring);
	struct osf_seg_side *s = &h->side[rnd() % 2];
	struct osf_seg_ring *r = &h->ring[rnd() % 2];
	char junk[64];

	switch (rnd() % 20) {
	case 0:
		r->head = plausible(r->tail, ring);
		break;
	case 1:
		r->tail = plausible(r->head, ring);
		break;
	case 2:
		s->flags = (uint32_t)rnd();
		break;
	case 3:
		s->tx_lock = (uint32_t)rnd() % 2 ? (uint32_t)rnd() : (uint32_t)getpid();
		break;
	case 4:
		s->rx_lock = (uint32_t)rnd();
		break;
	case 5:
		s->rx_waiters = (uint32_t)rnd();
		s->tx_waiters = (uint32_t)rnd();
		s->rx_want = (uint32_t)rnd();
		s->tx_want = (uint32_t)rnd();
		break;
	case 6:
		s->close_seq = (uint32_t)rnd();
		break;
	case 7:
		memset(seg + osf_seg_ring_off(ring, (int)(rnd() % 2)) +
			       rnd() % ((uint64_t)ring - 64),
		       (int)rnd(), 64);
		break;
	case 8:
		h->ring_bytes = (uint32_t)rnd(); /* never read back after the handshake */
		h->magic = rnd();
		break;
	case 9:
		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (char)rnd();
		(void)!send(wake, junk, 1 + rnd() % sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL);
		break;
	case 10: /* restore sanity for a while, so data flows again */
		r->head = r->tail;
		s->tx_lock = s->rx_lock = 0;
		break;
	case 11: /* TCP_CORK's word: the bit and a held count */
		s->cork = (uint32_t)(rnd() % 3 == 0 ? rnd()
				     : (rnd() & OSF_CORK_ON) | (uint32_t)plausible(0, ring));
		break;
	case 12: /* buffer sizes: 0, near the ring, or anything */
		s->sndlim = (uint32_t)plausible(ring, ring);
		s->rcvlim = (uint32_t)plausible(0, ring);
		break;
	case 13: /* token and holder counts */
		s->rx_tokens = (uint32_t)plausible(0, 64);
		s->tx_tokens = (uint32_t)rnd();
		s->holders = (uint32_t)plausible(1, 4);
		break;
	case 14: /* the trim and urgent words: owners, stops, positions */
		s->trim_owner = rnd() % 2 ? (uint32_t)rnd() : 0;
		s->trim_stop = rnd() % 2 ? rnd() : plausible(r->head, ring);
		s->urg = plausible(r->tail, ring);
		s->urg_hole = plausible(r->tail, ring);
		s->urg_read = rnd();
		break;
	case 15: /* lock words of only the waiters bit, or the counters */
		s->tx_lock = s->rx_lock = OSF_LOCK_WAITERS;
		s->send_calls = rnd();
		s->recv_calls = rnd();
		s->sleeps = rnd();
		s->wakes_sent = rnd();
		break;
	case 16: /* the rest of the header, informational after the hello */
		h->flags = (uint32_t)rnd();
		h->connect_ns = (int64_t)rnd();
		h->client_pid = (int32_t)rnd();
		h->server_pid = (int32_t)rnd();
		h->version = (uint32_t)rnd();
		h->hdr_bytes = (uint32_t)rnd();
		break;
	case 17: /* every word of a side at once */
		for (size_t i = 0; i < sizeof(*s); i++)
			((uint8_t *)s)[i] = (uint8_t)rnd();
		break;
	case 18: /* adversarial: more tokens than a waiter count above
		    INT_MAX, and bytes on the wake socket for a drain to read */
		s->rx_waiters = s->tx_waiters = 0x80000000u + (uint32_t)(rnd() % 64);
		s->rx_tokens = s->tx_tokens = 0xffffffffu;
		(void)!send(wake, "xxxxxxxx", 1 + rnd() % 8, MSG_DONTWAIT | MSG_NOSIGNAL);
		break;
	default:
		r->head += rnd() % 100;
		break;
	}
}

/* A hello as a link carries it: one message, a pooled one's second part
 * included. */
struct kfd_msg {
	struct osf_hello h;
	struct osf_hello_pool p;
};

/* kfd_accept takes the next connection as a server with OSF_SHM_KFD does:
 * a link from companion l (replacing *link), a hello from the link, then
 * the kernel connection from the port the hello names, accepted from t
 * (others accepted meanwhile are closed). Returns that connection with m
 * and *segfd filled, or -1 when none came this time (within about 1 s). */
static int kfd_accept(int l, int t, int *link, struct kfd_msg *m, int *segfd)
{
	char cbuf[CMSG_SPACE(2 * sizeof(int))];
	struct iovec iov = {m, sizeof(*m)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct pollfd p[2] = {{l, POLLIN, 0}, {*link, POLLIN, 0}};
	struct sockaddr_in cl, peer;
	struct cmsghdr *cm;
	int fds[2] = {-1, -1}, c;
	double until;
	ssize_t n;

	if (poll(p, 2, 100) <= 0)
		return -1;
	if (p[0].revents & POLLIN) {
		c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (c >= 0) {
			if (*link >= 0)
				close(*link);
			*link = c;
		}
		return -1;
	}
	memset(m, 0, sizeof(*m));
	n = recvmsg(*link, &mh, 0);
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_type == SCM_RIGHTS)
			memcpy(fds, CMSG_DATA(cm),
			       cm->cmsg_len - CMSG_LEN(0) < sizeof(fds) ? cm->cmsg_len - CMSG_LEN(0)
									: sizeof(fds));
	if (fds[1] >= 0)
		close(fds[1]);
	if (n <= 0) {
		close(*link);
		*link = -1;
	}
	if (n < (ssize_t)sizeof(m->h) || !(m->h.flags & OSF_HELLO_F_KFD)) {
		if (fds[0] >= 0)
			close(fds[0]);
		return -1;
	}
	memcpy(&cl, m->h.client, sizeof(cl));
	for (until = now() + 1.0; now() < until;) {
		struct pollfd q = {t, POLLIN, 0};
		socklen_t pl = sizeof(peer);
		if (poll(&q, 1, 100) <= 0)
			continue;
		c = accept4(t, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
		if (c >= 0 && peer.sin_port == cl.sin_port) {
			*segfd = fds[0];
			return c;
		}
		if (c >= 0)
			close(c);
	}
	if (fds[0] >= 0)
		close(fds[0]);
	return -1;
}

static int serve(int port, double secs)
{
	struct sockaddr_un sun;
	char name[64];
	int l, c, link = -1;
	double end = now() + secs;

	/* The kernel TCP listener an osf client checks the companion's owner
	 * against: this peer is the server, a hostile one, not a squatter. */
	struct sockaddr_in tcp = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (t < 0 || setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(t, (struct sockaddr *)&tcp, sizeof(tcp)) < 0 || listen(t, 16) < 0) {
		perror("hostile: tcp listener");
		return 1;
	}
	snprintf(name, sizeof(name), "osf1/4/127.0.0.1/%d", port);
	l = socket(AF_UNIX, (kfd ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&sun, abstract(&sun, name)) < 0 ||
	    listen(l, 16) < 0) {
		perror("hostile: companion");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	while (now() < end) {
		struct pollfd p = {l, POLLIN, 0};
		struct kfd_msg msg;
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = {&msg.h, sizeof(msg.h)};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
		struct cmsghdr *cm;
		struct osf_hello *hello = &msg.h;
		struct osf_hello_pool pool;
		struct stat st;
		int segfd = -1;
		uint8_t *seg, *base;
		size_t bytes;
		uint64_t sb;
		double until;

		if (kfd) {
			/* The wake socket is the kernel connection. */
			c = kfd_accept(l, t, &link, &msg, &segfd);
			if (c < 0)
				continue;
		} else {
			if (poll(&p, 1, 100) <= 0)
				continue;
			c = accept(l, NULL, NULL);
			if (c < 0)
				continue;
			if (recvmsg(c, &mh, 0) != (ssize_t)sizeof(*hello)) {
				close(c);
				continue;
			}
			for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
				if (cm->cmsg_type == SCM_RIGHTS)
					memcpy(&segfd, CMSG_DATA(cm), sizeof(int));
		}
		/* A pooled hello (OSF_SHM_POOL client): the whole region is
		 * ours to scribble on, its every slot_done forged "free" too. */
		sb = osf_seg_bytes(hello->ring_bytes);
		bytes = (size_t)sb;
		memset(&pool, 0, sizeof(pool));
		if (kfd)
			pool = msg.p;
		if ((hello->flags & OSF_HELLO_F_POOL) &&
		    ((!kfd && recv(c, &pool, sizeof(pool), MSG_WAITALL) != (ssize_t)sizeof(pool)) ||
		     fstat(segfd, &st) < 0 || (bytes = (size_t)st.st_size) < sb)) {
			if (segfd >= 0)
				close(segfd);
			close(c);
			continue;
		}
		base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, segfd, 0);
		if (base == MAP_FAILED) {
			close(c);
			continue;
		}
		seg = base + (pool.slot % (bytes / sb)) * sb;
		/* Scribble on this connection for a while, then drop it. */
		until = now() + 0.2 + (rnd() % 100) / 100.0;
		while (now() < until && now() < end) {
			scribble(seg, hello->ring_bytes, c);
			if (hello->flags & OSF_HELLO_F_POOL) {
				uint64_t i;
				for (i = 0; i < bytes / sb; i++)
					osf_seg_hdr(base + i * sb, hello->ring_bytes)->slot_done = 3;
				if (rnd() % 4 == 0)
					scribble(base + (rnd() % (bytes / sb)) * sb,
						 hello->ring_bytes, c);
			}
			if (rnd() % 8 == 0)
				usleep(100);
		}
		munmap(base, bytes);
		close(segfd);
		close(c);
	}
	return 0;
}

/* kfd_socket makes the TCP socket an OSF_SHM_KFD hello names: bound to
 * 127.0.0.1 (its port in *cport), TCP_NODELAY, its SYN marked as an osf
 * client's (DSCP 38, preload/kfd.c). */
static int kfd_socket(uint16_t *cport)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, tos = 0x98;

	if (t < 0 || bind(t, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(t, (struct sockaddr *)&a, &al) < 0 ||
	    setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
	    setsockopt(t, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0) {
		if (t >= 0)
			close(t);
		return -1;
	}
	*cport = ntohs(a.sin_port);
	return t;
}

/* kfd_connect connects t, whose hello went on a link, to the server's
 * kernel listener of name (osf1/4/ADDR/PORT; a wildcard one's on
 * 127.0.0.1); returns t, or -1. */
static int kfd_connect(int t, const char *name)
{
	struct sockaddr_in sv = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	const char *p = strrchr(name, '/');

	sv.sin_port = htons((uint16_t)atoi(p ? p + 1 : "0"));
	if (connect(t, (struct sockaddr *)&sv, sizeof(sv)) < 0) {
		int e = errno;
		close(t);
		errno = e;
		return -1;
	}
	return t;
}

/* send_hello sends a hello over a fresh companion connection with up to
 * three fds (a negative one is left out); returns the connection. With
 * OSF_SHM_KFD (kfd) the connection is a kernel one: the hello (when it is
 * one, at least its fixed part) gets OSF_HELLO_F_KFD and the address of
 * a fresh marked TCP socket, goes on a link of its own (closed once
 * sent: the server reads what it carried), and that socket, connected
 * after it, is returned; an empty message only dials the link. */
static int send_hello(const char *name, const void *msg, size_t len, int fd1,
		      int fd2, int fd3)
{
	struct sockaddr_un sun;
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct {
		struct osf_hello h;
		struct osf_hello_pool p;
	} kh; /* the hello, and a pooled one's second part */
	struct iovec iov = {(void *)msg, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	int c = socket(AF_UNIX, (kfd ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC, 0), n = 0,
	    fds[3], t = -1;

	if (connect(c, (struct sockaddr *)&sun, abstract(&sun, name)) < 0) {
		close(c);
		return -1;
	}
	if (kfd && len == 0)
		return c;
	if (kfd && len >= sizeof(kh.h) && len <= sizeof(kh)) {
		struct sockaddr_in cl;
		uint16_t cport;
		if ((t = kfd_socket(&cport)) < 0) {
			close(c);
			return -1;
		}
		memcpy(&kh, msg, len);
		kh.h.flags |= OSF_HELLO_F_KFD;
		memcpy(&cl, kh.h.client, sizeof(cl));
		cl.sin_port = htons(cport);
		memcpy(kh.h.client, &cl, sizeof(cl));
		iov.iov_base = &kh;
	}
	if (fd1 >= 0)
		fds[n++] = fd1;
	if (fd2 >= 0)
		fds[n++] = fd2;
	if (fd3 >= 0)
		fds[n++] = fd3;
	if (n) {
		struct cmsghdr *cm;
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
	}
	(void)!sendmsg(c, &mh, MSG_NOSIGNAL);
	if (t >= 0) {
		close(c);
		return kfd_connect(t, name);
	}
	return c;
}

/* plausible_hdr writes the segment header an honest creator of ring
 * would, at h. */
static void plausible_hdr(struct osf_seg_hdr *h, uint32_t ring)
{
	h->magic = OSF_SEG_MAGIC;
	h->version = OSF_SEG_VERSION;
	h->hdr_bytes = OSF_SEG_HDR_BYTES;
	h->ring_bytes = ring;
}

static int make_segment(uint32_t ring, int seal, off_t size)
{
	int fd = memfd_create("osf-seg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct osf_seg_hdr *h;
	void *m;

	if (fd < 0 || ftruncate(fd, size) < 0)
		return -1;
	m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m != MAP_FAILED && osf_seg_hdr_off(ring) + OSF_SEG_HDR_BYTES <= (uint64_t)size) {
		h = osf_seg_hdr(m, ring);
		plausible_hdr(h, ring);
	}
	if (m != MAP_FAILED)
		munmap(m, (size_t)size);
	if (seal)
		fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	return fd;
}

/* make_region makes a region of n slots of ring (OSF_SHM_POOL), each slot's
 * header plausible with generation gen, sealed if seal, bytes long. */
static int make_region(uint32_t ring, uint32_t n, int seal, uint32_t gen, off_t bytes)
{
	int fd = memfd_create("osf-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint8_t *m;
	uint32_t i;

	if (fd < 0 || ftruncate(fd, bytes) < 0)
		return -1;
	m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	for (i = 0; m != MAP_FAILED && i < n &&
		    (i + 1) * osf_seg_bytes(ring) <= (uint64_t)bytes; i++) {
		struct osf_seg_hdr *h = osf_seg_hdr(m + i * osf_seg_bytes(ring), ring);
		plausible_hdr(h, ring);
		h->slot_gen = gen;
	}
	if (m != MAP_FAILED)
		munmap(m, (size_t)bytes);
	if (seal)
		fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	return fd;
}

/* truthful_hello fills in a hello as an honest osf client of
 * 127.0.0.1:port would send it, from client port cport. */
static void truthful_hello(struct osf_hello *h, int port, uint32_t ring, uint16_t cport)
{
	struct sockaddr_in cl = {.sin_family = AF_INET, .sin_port = htons(cport),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in sv = cl;

	memset(h, 0, sizeof(*h));
	h->magic = OSF_HELLO_MAGIC;
	h->version = OSF_SEG_VERSION;
	h->size = sizeof(*h);
	h->ring_bytes = ring;
	sv.sin_port = htons((uint16_t)port);
	memcpy(h->client, &cl, sizeof(cl));
	memcpy(h->server, &sv, sizeof(sv));
}

static int attack(int port)
{
	char name[64];
	struct osf_hello h;
	uint32_t ring = 1 << 16;
	int c, fd, i;

	/* The companion of a listener on 127.0.0.1, or on any address. */
	snprintf(name, sizeof(name), "osf1/4/127.0.0.1/%d", port);
	c = send_hello(name, "", 0, -1, -1, -1);
	if (c < 0)
		snprintf(name, sizeof(name), "osf1/4/*/%d", port);
	else
		close(c);
	truthful_hello(&h, port, ring, 40000);
	for (i = 0; i < 10; i++) {
		int fd2 = -1, fd3 = -1, bad, wake[2] = {-1, -1};
		/* The writers' wake socket every hello carries after the segment. */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, wake) < 0)
			return 1;
		fd2 = wake[1];
		switch (i) {
		case 0: /* unsealed: could be truncated under the server */
			fd = make_segment(ring, 0, (off_t)osf_seg_bytes(ring));
			break;
		case 1: /* sealed, wrong size */
			fd = make_segment(ring, 1, (off_t)osf_seg_bytes(ring) - 4096);
			break;
		case 2: /* bad header */
			fd = make_segment(ring * 2, 1, (off_t)osf_seg_bytes(ring));
			break;
		case 3: /* no fd */
			fd = fd2 = -1;
			break;
		case 4: /* three fds */
			fd = make_segment(ring, 1, (off_t)osf_seg_bytes(ring));
			fd3 = make_segment(ring, 1, (off_t)osf_seg_bytes(ring));
			break;
		case 5: /* not a memfd at all */
			fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
			break;
		case 6: /* a wake "socket" that is a file */
			fd = make_segment(ring, 1, (off_t)osf_seg_bytes(ring));
			fd2 = open("/dev/null", O_RDWR | O_CLOEXEC);
			break;
		case 7: /* garbage hello, good segment */
			fd = make_segment(ring, 1, (off_t)osf_seg_bytes(ring));
			h.magic = (uint32_t)rnd();
			break;
		case 8: /* a truthful hello whose segment we then try to shrink */
			fd = make_segment(ring, 1, (off_t)osf_seg_bytes(ring));
			h.magic = OSF_HELLO_MAGIC;
			break;
		default: /* a truthful hello, then scribbling while it is served */
			fd = make_segment(ring, 1, (off_t)osf_seg_bytes(ring));
			break;
		}
		c = send_hello(name, &h, sizeof(h), fd, fd2, fd3);
		if (fd2 >= 0 && fd2 != wake[1])
			close(fd2);
		close(wake[1]);
		if (c < 0) {
			fprintf(stderr, "hostile: connect %s: %s\n", name, strerror(errno));
			return 1;
		}
		if (i == 8) {
			bad = ftruncate(fd, 4096); /* the seal must refuse this */
			printf("truncate after sealing: %s\n", bad < 0 ? strerror(errno) : "allowed");
			usleep(200000);
		}
		if (i == 9) {
			uint8_t *seg = mmap(NULL, (size_t)osf_seg_bytes(ring),
					    PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			double until = now() + 1.0;
			if (seg != MAP_FAILED) {
				/* Send data now and then so the server reads. */
				struct osf_seg_hdr *sh = osf_seg_hdr(seg, ring);
				while (now() < until) {
					scribble(seg, ring, c);
					if (rnd() % 4 == 0) {
						sh->ring[0].head = sh->ring[0].tail + rnd() % 1000;
						(void)!send(c, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
					}
					usleep(50);
				}
				munmap(seg, (size_t)osf_seg_bytes(ring));
			}
		}
		usleep(50000);
		close(c);
		if (fd >= 0)
			close(fd);
		if (fd3 >= 0)
			close(fd3);
		close(wake[0]);
	}
	/* Pooled hellos (OSF_HELLO_F_POOL): a region's bounds, its slot, the
	 * slot's generation, and a slot named twice are all the client's; so
	 * is the region's writers' eventfd (OSF_HELLO_F_EFD), what it is and
	 * what is written to it. */
	for (i = 0; i < 13; i++) {
		struct {
			struct osf_hello h;
			struct osf_hello_pool p;
		} ph;
		uint64_t sb = osf_seg_bytes(ring);
		size_t len = sizeof(ph);
		int wake[2], c2 = -1, w2[2] = {-1, -1}, second;
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, wake) < 0)
			return 1;
		second = wake[1];
		truthful_hello(&ph.h, port, ring, 40000);
		ph.h.flags = OSF_HELLO_F_POOL;
		ph.p.slot = 1;
		ph.p.gen = 7;
		ph.p.region_bytes = 2 * sb;
		fd = make_region(ring, 2, 1, 7, (off_t)(2 * sb));
		switch (i) {
		case 0: /* a slot beyond the region */
			ph.p.slot = 2;
			break;
		case 1: /* a region that is not a whole number of slots */
			close(fd);
			fd = make_region(ring, 2, 1, 7, (off_t)(2 * sb + 4096));
			ph.p.region_bytes = 2 * sb + 4096;
			break;
		case 2: /* the slot's generation is not the hello's */
			ph.p.gen = 8;
			break;
		case 3: /* unsealed */
			close(fd);
			fd = make_region(ring, 2, 0, 7, (off_t)(2 * sb));
			break;
		case 4: /* the flag without the second part */
			len = sizeof(ph.h);
			break;
		case 5: /* more slots than a region has (a wide one too) */
			close(fd);
			fd = make_region(ring, 2, 1, 7, (off_t)((OSF_REGION_SLOTS_MAX + 1) * sb));
			ph.p.region_bytes = (OSF_REGION_SLOTS_MAX + 1) * sb;
			break;
		case 6: /* the same slot named by two connections at once */
			if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w2) < 0)
				return 1;
			c2 = send_hello(name, &ph, len, fd, w2[1], -1);
			usleep(100000); /* served: the server holds slot 1 */
			break;
		case 8: /* an "eventfd" that is the writers' socket */
			ph.h.flags |= OSF_HELLO_F_EFD;
			break;
		case 9: /* an "eventfd" that is an epoll: no type, no write */
			ph.h.flags |= OSF_HELLO_F_EFD;
			second = epoll_create1(EPOLL_CLOEXEC);
			break;
		case 10: /* an eventfd without a region */
			ph.h.flags = OSF_HELLO_F_EFD;
			len = sizeof(ph.h);
			second = eventfd(0, EFD_CLOEXEC);
			break;
		case 11: /* a truthful one, written as fast as we can, to its maximum too */
			ph.h.flags |= OSF_HELLO_F_EFD;
			second = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
			break;
		case 12: /* a kernel TCP connection's "eventfd" that is a socket */
			ph.h.flags |= OSF_HELLO_F_EFD | OSF_HELLO_F_KFD;
			break;
		default: /* a truthful pooled hello, then scribbling on both slots */
			break;
		}
		c = send_hello(name, &ph, len, fd, second, -1);
		close(wake[1]);
		if (second != wake[1] && i != 11)
			close(second);
		if (c < 0) {
			fprintf(stderr, "hostile: connect %s: %s\n", name, strerror(errno));
			return 1;
		}
		if (i == 11) {
			uint64_t one = 1, most = UINT64_MAX - 1;
			double until = now() + 1.0;
			long n = 0;
			while (now() < until) {
				(void)!write(second, n % 64 ? &one : &most, sizeof(one));
				if (++n % 1024 == 0)
					(void)!send(c, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
			}
			close(second);
			printf("eventfd written %ld times\n", n);
		}
		if (i == 7) {
			uint8_t *m = mmap(NULL, (size_t)(2 * sb), PROT_READ | PROT_WRITE,
					  MAP_SHARED, fd, 0);
			double until = now() + 1.0;
			if (m != MAP_FAILED) {
				struct osf_seg_hdr *sh = osf_seg_hdr(m + sb, ring);
				while (now() < until) {
					scribble(m + (rnd() & 1) * sb, ring, c);
					sh->slot_gen = (uint32_t)rnd();
					sh->slot_done = (uint32_t)rnd();
					sh->slot_ino[rnd() & 1] = rnd();
					if (rnd() % 4 == 0) {
						sh->ring[0].head = sh->ring[0].tail + rnd() % 1000;
						(void)!send(c, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
					}
					usleep(50);
				}
				munmap(m, (size_t)(2 * sb));
			}
		}
		usleep(50000);
		close(c);
		if (c2 >= 0)
			close(c2);
		if (w2[0] >= 0)
			close(w2[0]);
		if (w2[1] >= 0)
			close(w2[1]);
		if (fd >= 0)
			close(fd);
		close(wake[0]);
	}
	printf("attacks done\n");
	return 0;
}

/* connect_truthful connects to the server on 127.0.0.1:port as an honest
 * osf client from client port cport would, with a ring of ring bytes: the
 * companion connection, or -1; *fd, *seg and *wake are the segment's fd,
 * its mapping and our end of the writers' wake socket. */
static int connect_truthful(int port, uint32_t ring, uint16_t cport, int *fd,
			    uint8_t **seg, int *wake)
{
	char name[64];
	struct osf_hello h;
	int c, w[2];

	snprintf(name, sizeof(name), "osf1/4/127.0.0.1/%d", port);
	truthful_hello(&h, port, ring, cport);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w) < 0)
		return -1;
	*fd = make_segment(ring, 1, (off_t)osf_seg_bytes(ring));
	*seg = mmap(NULL, (size_t)osf_seg_bytes(ring), PROT_READ | PROT_WRITE,
		    MAP_SHARED, *fd, 0);
	if (*fd < 0 || *seg == MAP_FAILED)
		return -1;
	c = send_hello(name, &h, sizeof(h), *fd, w[1], -1);
	close(w[1]);
	*wake = w[0];
	if (c < 0)
		fprintf(stderr, "hostile: connect %s: %s\n", name, strerror(errno));
	return c;
}

/* lockflip connects with a truthful hello to the server on 127.0.0.1:PORT,
 * keeps data in the server's receive ring (the server reads it), and
 * writes live tids into the server side's locks, two in turn, so that the
 * holder seems to change all the time: for SECONDS, then it closes. */
static int lockflip(int port, double secs)
{
	uint32_t ring = 1 << 16, tids[2] = {(uint32_t)getpid(), (uint32_t)getppid()};
	int c, fd, wake[2], i = 0;
	struct osf_seg_hdr *sh;
	uint8_t *seg;
	double until = now() + secs;

	c = connect_truthful(port, ring, 40001, &fd, &seg, &wake[0]);
	if (c < 0)
		return 1;
	sh = osf_seg_hdr(seg, ring);
	printf("flipping\n");
	fflush(stdout);
	while (now() < until) {
		/* The server must believe there is something to read. */
		if (sh->ring[0].head - sh->ring[0].tail < 100) {
			sh->ring[0].head += 100;
			(void)!send(c, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		}
		__atomic_store_n(&sh->side[1].rx_lock, tids[i & 1], __ATOMIC_RELEASE);
		__atomic_store_n(&sh->side[1].tx_lock, tids[i & 1], __ATOMIC_RELEASE);
		i++;
		usleep(200);
	}
	printf("flipped %d times\n", i);
	close(c);
	close(fd);
	close(wake[0]);
	return 0;
}

/* trimsteer connects with a truthful hello to the server on 127.0.0.1:PORT
 * and, for SECONDS, hands it a page of data every 150 ms, so that the
 * server's idle poller trims the ring it reads (ours: side 0 writes ring
 * 0), and meanwhile rewrites, without pause, the words of its own side
 * where segment layout 3 kept the trim slots' struct iovec (bytes 80-95
 * and 104-119 of struct osf_seg_side) with ADDR and LEN: a shared mapping
 * of the server's own that no trim may punch (issue 24, item 1). Its
 * trim_owner words it leaves alone, so a trimmer claims them as usual. */
static int trimsteer(int port, uint64_t addr, uint64_t len, double secs)
{
	uint32_t ring = 1 << 16;
	int c, fd, wake[2], sent = 0;
	struct osf_seg_hdr *sh;
	uint8_t *seg, *mine;
	double until = now() + secs, next = 0;

	c = connect_truthful(port, ring, 40002, &fd, &seg, &wake[0]);
	if (c < 0)
		return 1;
	sh = osf_seg_hdr(seg, ring);
	mine = (uint8_t *)&sh->side[0];
	printf("steering\n");
	fflush(stdout);
	while (now() < until) {
		uint64_t *w;
		if (now() >= next && now() < until - 1.0) {
			/* A page more for the server to read; none in the
			 * last second, which the server spends idle (it trims
			 * then) while the scribbling goes on. */
			uint64_t head = __atomic_load_n(&sh->ring[0].head, __ATOMIC_RELAXED);
			if (head + 4096 - __atomic_load_n(&sh->ring[0].tail, __ATOMIC_ACQUIRE) <= ring) {
				uint8_t *d = seg + osf_seg_ring_off(ring, 0);
				for (uint64_t i = 0; i < 4096; i++)
					d[(head + osf_seg_ring_bias(ring, 0) + i) & (ring - 1)] = (uint8_t)(head + i);
				__atomic_store_n(&sh->ring[0].head, head + 4096, __ATOMIC_SEQ_CST);
				/* A token only when the server asked for one, as
				 * osf's writers do: a poller that finds stale ones
				 * never sleeps long enough to call its rings idle. */
				if (__atomic_exchange_n(&sh->side[1].rx_want, 0, __ATOMIC_SEQ_CST))
					(void)!send(c, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
				sent++;
			}
			next = now() + 0.15;
		}
		for (int k = 0; k < 1000; k++) {
			w = (uint64_t *)(mine + 80);
			__atomic_store_n(&w[0], addr, __ATOMIC_RELAXED);
			__atomic_store_n(&w[1], len, __ATOMIC_RELAXED);
			w = (uint64_t *)(mine + 104);
			__atomic_store_n(&w[0], addr, __ATOMIC_RELAXED);
			__atomic_store_n(&w[1], len, __ATOMIC_RELAXED);
		}
	}
	printf("steered: %d pages sent\n", sent);
	close(c);
	close(fd);
	close(wake[0]);
	return 0;
}

/* poke connects a marked socket without a hello to the server of link
 * name (OSF_SHM_KFD): its accept reads every link, then resets it. It
 * waits for that (at most 10 s) and returns how it ended: "reset", else
 * what came instead. */
static const char *poke(const char *name)
{
	struct timeval tv = {10, 0};
	const char *how = "none";
	uint16_t cp;
	ssize_t r;
	char b;
	int t = kfd_socket(&cp);

	if (t >= 0)
		t = kfd_connect(t, name);
	if (t >= 0 && setsockopt(t, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0) {
		r = recv(t, &b, 1, 0);
		how = r == 0 ? "end" : r > 0 ? "data" : errno == ECONNRESET ? "reset" : "waited";
	}
	if (t >= 0)
		close(t);
	return how;
}

/* claim sends, on one link (OSF_SHM_KFD), a truthful hello for each
 * client port from LO to HI, each segment's ring holding "HIJACK\n" for
 * the server to read, for connections it never makes: hellos that claim
 * the ports other clients' connections will come from, and that crowd
 * the hellos the server keeps; a full link is poked (poke) for the server
 * to read it, and so is the link at the end. It prints "claimed N, own
 * connection HOW" (the last poke's: reset) and holds them for SECONDS. */
static int claim(int port, double secs, int lo, int hi)
{
	uint32_t ring = 1 << 16;
	struct sockaddr_un sun;
	char name[64];
	int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), n = 0;

	snprintf(name, sizeof(name), "osf1/4/127.0.0.1/%d", port);
	if (connect(c, (struct sockaddr *)&sun, abstract(&sun, name)) < 0) {
		perror("hostile: link");
		return 1;
	}
	for (int p = lo; p <= hi; p++) {
		struct osf_hello h;
		char cbuf[CMSG_SPACE(2 * sizeof(int))];
		struct iovec iov = {&h, sizeof(h)};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
		struct cmsghdr *cm;
		int w[2], fd = make_segment(ring, 1, (off_t)osf_seg_bytes(ring)), fds[2];
		uint8_t *seg;

		if (fd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w) < 0)
			return 1;
		seg = mmap(NULL, (size_t)osf_seg_bytes(ring), PROT_READ | PROT_WRITE,
			   MAP_SHARED, fd, 0);
		if (seg != MAP_FAILED) {
			static const char m[] = "HIJACK\n";
			struct osf_seg_hdr *sh = osf_seg_hdr(seg, ring);
			uint8_t *d = seg + osf_seg_ring_off(ring, 0);
			for (uint64_t i = 0; i < sizeof(m) - 1; i++)
				d[(osf_seg_ring_bias(ring, 0) + i) & (ring - 1)] = (uint8_t)m[i];
			__atomic_store_n(&sh->ring[0].head, sizeof(m) - 1, __ATOMIC_SEQ_CST);
		}
		truthful_hello(&h, port, ring, (uint16_t)p);
		h.flags = OSF_HELLO_F_KFD;
		fds[0] = fd;
		fds[1] = w[1];
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(cm), fds, sizeof(fds));
		/* A full link: a poke makes the server read it. */
		for (int k = 0; k < 3; k++) {
			if (sendmsg(c, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(h)) {
				n++;
				break;
			}
			if (errno != EAGAIN)
				break;
			(void)poke(name);
		}
		close(w[1]);
	}
	printf("claimed %d, own connection %s\n", n, poke(name)); /* the rest read */
	fflush(stdout);
	usleep((useconds_t)(secs * 1e6));
	close(c);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: hostile server PORT SECONDS SEED | hostile client PORT SEED | "
				"hostile lockflip PORT SECONDS | hostile trimsteer PORT ADDR LEN SECONDS | "
				"hostile claim PORT SECONDS LO HI\n");
		return 2;
	}
	kfd = getenv("OSF_SHM_KFD") && strcmp(getenv("OSF_SHM_KFD"), "1") == 0;
	if (strcmp(argv[1], "claim") == 0 && argc >= 6)
		return claim(atoi(argv[2]), atof(argv[3]), atoi(argv[4]), atoi(argv[5]));
	if (strcmp(argv[1], "lockflip") == 0)
		return lockflip(atoi(argv[2]), atof(argv[3]));
	if (strcmp(argv[1], "trimsteer") == 0 && argc >= 6)
		return trimsteer(atoi(argv[2]), strtoull(argv[3], NULL, 0),
				 strtoull(argv[4], NULL, 0), atof(argv[5]));
	if (strcmp(argv[1], "server") == 0 && argc >= 5) {
		rng = strtoull(argv[4], NULL, 10) | 1;
		return serve(atoi(argv[2]), atof(argv[3]));
	}
	rng = strtoull(argv[3], NULL, 10) | 1;
	return attack(atoi(argv[2]));
}
