/* segment.h: the connection segment of an offloaded stream, and the hello
 * that introduces it. The one definition, included by libosf.so's data path
 * (C) and by the Go core through cgo (packages sdp, shm, verbs users).
 * docs/ARCHITECTURE.md, "Connection segment", explains it in prose.
 *
 * A segment is a memfd (mode 0600, sealed against shrinking and growing
 * before it is shared) of ring_bytes R per direction, 2R + 4096 bytes. One
 * page, the shared page at offset R, holds the header and the first bytes
 * of both rings, so that a small request and its reply touch one page:
 *
 *   A = OSF_SEG_RING0_SHARED, H = OSF_SEG_HDR_BYTES
 *   0 .. A              unused
 *   A .. R + A          ring 0's region: bytes side 0 (client) sends; its
 *                       positions 0 .. A - 1 are its last A bytes, in the
 *                       shared page (a bias of R - A)
 *   R + A .. R + A + H  struct osf_seg_hdr
 *   R + A + H ..        ring 1's region (R bytes): bytes side 1 (server)
 *                       sends, position 0 first, in the shared page
 *
 * Each ring has exactly one producing side and one consuming side. Head and
 * tail are free-running byte counts (they never wrap in practice), on
 * separate cache lines; the offset in ring r's region of a position is
 * (pos - base + osf_seg_ring_bias(R, r)) & (R - 1), the one function both ends
 * (and both RDMA engines) use. The bias comes from R and r, never from the
 * segment. A shm producer moves a ring's base, the position at its start,
 * to head when it writes into an empty ring (osf_seg_view below).
 *
 * Everything in the segment can be written by the peer, so everything read
 * from it is hostile input: positions are checked (0 <= head - tail <= size)
 * and only ever used masked, so a consumer or producer can never touch
 * memory outside its ring, whatever the peer writes. Sizes are never read
 * back from the segment after the handshake.
 */
#ifndef OSF_SDP_SEGMENT_H
#define OSF_SDP_SEGMENT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#define OSF_SEG_MAGIC 0x3147455346534f51ULL /* "QOSFSEG1" */
#define OSF_SEG_VERSION 6
#define OSF_SEG_PAGE 4096u
#define OSF_SEG_HDR_BYTES 768u /* sizeof(struct osf_seg_hdr) */
/* Each ring's bytes in the shared page: ring 0's before the header, ring
 * 1's the rest after it (as many). */
#define OSF_SEG_RING0_SHARED ((OSF_SEG_PAGE - OSF_SEG_HDR_BYTES) / 2)
#define OSF_SEG_RING1_SHARED (OSF_SEG_PAGE - OSF_SEG_RING0_SHARED - OSF_SEG_HDR_BYTES)
#define OSF_SEG_MIN_RING 4096u
#define OSF_SEG_MAX_RING (64u << 20)
#define OSF_SEG_NAME "osf-seg"

/* Sides. The connecting side (client) is 0, the accepting side 1; side s
 * produces into ring s and consumes ring 1 - s. */
#define OSF_SIDE_CLIENT 0
#define OSF_SIDE_SERVER 1

/* Side state flags (osf_seg_side.flags), set only by the side itself. */
#define OSF_SIDE_FIN 0x1u   /* shutdown(SHUT_WR): no data after head */
#define OSF_SIDE_RESET 0x2u /* a holder closed with SO_LINGER 0: once
			       the side's last holder is gone, the peer
			       sees ECONNRESET (not readiness by itself) */
#define OSF_SIDE_RDSHUT 0x4u /* shutdown(SHUT_RD) here: reads end at once */
#define OSF_SIDE_RDSOCK 0x8u /* the side's wake socket is shut for reading
				(a shutdown woke its readers): it takes no
				more tokens (sdp/side.c osf_side_shut_wake) */
#define OSF_SIDE_WRSOCK 0x10u /* the same for its writers' wake socket */
#define OSF_SIDE_OOBINLINE 0x40u /* SO_OOBINLINE here: the peer leaves an
				    urgent byte it replaces in the stream */
#define OSF_SIDE_KERNEL 0x200u /* OSF_SHM_KFD, on a client side: its
				 connection went to kernel TCP after the
				 hello was sent (preload/kfd.c
				 osf_kfd_connect's -2); a server that finds
				 the hello serves it as kernel TCP */
#define OSF_SIDE_TIMEDOUT 0x20u /* with RESET, set by an RDMA engine on the
				   side it plays: it gave up on the remote
				   peer (its device stopped answering), so
				   the end is ETIMEDOUT, as when TCP's
				   retransmissions give up */

struct osf_seg_side {
	/* Cache line 0: what the peer looks at. */
	uint32_t flags;     /* OSF_SIDE_* */
	uint32_t close_seq; /* bumped when a process drops its last fd for
			       this side: a hint to check for the end */
	uint32_t rx_want;   /* 1: this side waits until data (or the end)
			       arrives; the peer clears it and sends wake
			       tokens on the wake socket */
	uint32_t tx_want;   /* 1: this side waits until there is room; the
			       tokens go on the writers' wake socket */
	uint32_t rx_waiters; /* threads of this side waiting for data: asleep
				in recv, or in poll/epoll with the fd armed.
				The peer sends that many tokens (at least 1,
				at most 32); each waiter takes one */
	uint32_t tx_waiters; /* the same for room, on the writers' socket */
	uint32_t holders;   /* processes holding this side */
	uint32_t rx_tokens; /* readers' tokens sent to this side and not
			       taken yet: the peer adds what it sends, this
			       side subtracts what it takes; more than
			       rx_waiters means stale ones, which the next
			       waiter drains before it asks for more */
	uint32_t tx_tokens; /* the same on the writers' wake socket */
	uint32_t sndlim;    /* 0, or the bytes this side may have in flight
			       (in its ring, unread) as its SO_SNDBUF says */
	uint32_t rcvlim;    /* 0, or the bytes the peer may have in flight
			       towards this side as its SO_RCVBUF says */
	uint32_t cork;      /* TCP_CORK: OSF_CORK_ON | the bytes this side
			       wrote after its head and holds back (under
			       its tx_lock); 0 when off with nothing held */
	uint64_t urg;       /* MSG_OOB: the stream position just past the
			       urgent byte this side sent last (TCP's urgent
			       pointer), published after head; 0: none */
	uint64_t urg_read;  /* the peer's urg whose byte this side read out
			       of band (TCP_URG_READ); 0: none */
	/* Cache line 1: locks of this side's producers and consumers; 0 when
	 * free, else the owner's tid, | OSF_LOCK_WAITERS when contended. */
	uint32_t tx_lock;
	uint32_t rx_lock;
	/* A trim of this side's ring by a consumer of the peer (sdp/side.c
	 * osf_side_trim): trim_owner is the trimming thread's tid (0: none),
	 * claimed first; while trim_stop is not 0, this side's producers write
	 * only below ring position trim_stop, and the trimmer gives back pages
	 * at and above it. Both are words a peer can write: a producer takes
	 * trim_stop only as a bound on its room (osf_side_tx_free), a trimmer
	 * punches only what it computed from its own mapping. */
	uint32_t trim_owner;
	uint32_t opts_seq; /* bumped by any holder of this side after it set
			      an option that its other holders cache
			      (SO_RCVTIMEO: preload/conn_rdma.c): a changed
			      value only makes them read it again */
	uint64_t trim_stop;
	uint64_t urg_hole;  /* like urg: an earlier urgent byte the peer's
			       reader sat at when urg replaced it, which it
			       skips (tcp_check_urg); 0: none */
	uint32_t chan_lent; /* RDMA, the engine's side only: 1 while the
			       connection's completion channel is lent to
			       the application's waiters (out of the engine's
			       epoll with none asleep on it); a waiter that
			       does not sleep on it takes the word from 1 and
			       calls the engine back with a token
			       (osf_side_call_back). 0 on shm */
	uint8_t pad1[28];
	/* Cache line 2: this side's counters (osfstat). */
	uint64_t send_calls;
	uint64_t recv_calls;
	uint64_t sleeps;     /* times a reader or writer slept */
	uint64_t wakes_sent; /* wake-ups sent to the peer */
	uint8_t pad2[32];
};

#define OSF_LOCK_WAITERS 0x80000000u

/* osf_seg_side.cork: the option's bit and the count of held bytes. */
#define OSF_CORK_ON 0x80000000u
#define OSF_CORK_HELD 0x7fffffffu

/* The wake protocol's constants (sdp/side.c, and the RDMA engine through
 * cgo): a side wakes at most OSF_WAKE_MAX_TOKENS waiters of one kind per
 * wake-up, and wakes writers only once the room in their ring reaches the
 * low-water mark, half the ring (as TCP wakes writers only for a useful
 * amount of space). */
#define OSF_WAKE_MAX_TOKENS 32u

/* osf_seg_lowat returns the low-water mark of a ring of size bytes. */
static inline uint32_t osf_seg_lowat(uint32_t size) { return size / 2; }

/* osf_seg_rcv_part returns the part of the bytes in flight that a
 * receiver's buffer holds: its SO_RCVBUF as set (rcvlim), else a fresh TCP
 * socket's receive buffer, at most a quarter of the ring. */
static inline uint64_t osf_seg_rcv_part(uint32_t size, uint32_t rcvlim)
{
	return rcvlim ? rcvlim : (size / 4 < 131072 ? size / 4 : 131072);
}

/* osf_seg_tx_limit returns the bytes a side may have in flight in a ring of
 * size bytes: the ring, or less once either program set a buffer size (the
 * side's sndlim, the peer's rcvlim); an unset one counts as half the ring
 * (send) or osf_seg_rcv_part (receive). */
static inline uint64_t osf_seg_tx_limit(uint32_t size, uint32_t sndlim,
					uint32_t rcvlim)
{
	uint64_t l;

	if (__builtin_expect(!(sndlim | rcvlim), 1))
		return size;
	l = (uint64_t)(sndlim ? sndlim : size / 2) + osf_seg_rcv_part(size, rcvlim);
	return l < size ? l : size;
}

/* osf_seg_tx_lowat returns the room that makes a side writable (POLLOUT)
 * with in-flight limit lim: the low-water mark, or half of lim when that
 * is smaller. A writer with less room waits for the peer. */
static inline uint64_t osf_seg_tx_lowat(uint32_t size, uint64_t lim)
{
	return lim / 2 < osf_seg_lowat(size) ? lim / 2 : osf_seg_lowat(size);
}

/* osf_wake_tokens returns how many wake tokens to send to a side with
 * waiters counted waiters of one kind: one per waiter, at least one (a
 * waiter osf does not count: the application's own poll), at most
 * OSF_WAKE_MAX_TOKENS. */
static inline uint32_t osf_wake_tokens(uint32_t waiters)
{
	if (waiters == 0)
		return 1;
	return waiters < OSF_WAKE_MAX_TOKENS ? waiters : OSF_WAKE_MAX_TOKENS;
}

/* osf_wake_sub subtracts n from a token count, never below 0. */
static inline void osf_wake_sub(uint32_t *v, uint32_t n)
{
	uint32_t cur = __atomic_load_n(v, __ATOMIC_RELAXED);

	while (cur && !__atomic_compare_exchange_n(v, &cur, cur > n ? cur - n : 0, 0,
						   __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		;
}

/* OSF_WANT_CLOSED in a side's rx_want: the side's last holder closes its
 * kernel TCP socket (OSF_SHM_KFD; preload/kfd.c osf_kfd_close), where a
 * token that arrives after the close makes the kernel's close a reset. A
 * sender takes the flag only from 1 (osf_wake_claim), so it never sends
 * there once the closer put this value. */
#define OSF_WANT_CLOSED 2u

/* osf_wake_put sends n one-byte tokens, already counted in tokens, on
 * sock with send_fn (the sender's send(2)): what was not sent is
 * uncounted, and the want flag raised again (from 0 only: never over
 * OSF_WANT_CLOSED) so that the next publish retries, unless the socket's
 * end is why (EPIPE, ECONNRESET: nobody waits there any more). It counts
 * the wake-up in *wakes_sent (the waker's side) and returns the send's
 * result, with its errno. */
static inline long osf_wake_put(int sock, uint32_t *want, uint32_t *tokens, uint32_t n,
				uint64_t *wakes_sent,
				ssize_t (*send_fn)(int, const void *, size_t, int))
{
	static const char tok[OSF_WAKE_MAX_TOKENS];
	uint32_t zero = 0;
	ssize_t r;
	int err;

	r = send_fn(sock, tok, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	err = errno;
	if (r < (ssize_t)n) {
		osf_wake_sub(tokens, n - (uint32_t)(r > 0 ? r : 0));
		if (r >= 0 || (err != EPIPE && err != ECONNRESET))
			__atomic_compare_exchange_n(want, &zero, 1, 0, __ATOMIC_ACQ_REL,
						    __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(wakes_sent, 1, __ATOMIC_RELAXED);
	errno = err;
	return (long)r;
}

/* osf_wake_send wakes the waiters of one kind of a side: its want flag
 * was up (the caller cleared it), waiters and tokens are its count words
 * of that kind (rx_ or tx_). It sends them osf_wake_tokens(waiters)
 * one-byte tokens on sock, counted in tokens before they are sent
 * (osf_wake_put). The one implementation of a wake-up: the C data
 * path's (sdp/side.c) and the RDMA receiving rule's (sdp/rdma/rx.h). */
static inline long osf_wake_send(int sock, uint32_t *want, const uint32_t *waiters,
				 uint32_t *tokens, uint64_t *wakes_sent,
				 ssize_t (*send_fn)(int, const void *, size_t, int))
{
	uint32_t n = osf_wake_tokens(__atomic_load_n(waiters, __ATOMIC_RELAXED));

	__atomic_add_fetch(tokens, n, __ATOMIC_ACQ_REL);
	return osf_wake_put(sock, want, tokens, n, wakes_sent, send_fn);
}

/* osf_wake_claim takes a want flag a sender saw up, for a wake-up whose
 * tokens go to a kernel TCP socket (sdp/side.c osf_side_wake_reader): it
 * counts the tokens in tokens first (*n of them, for the waiters counted
 * in waiters), then takes the flag, from 1 only. So a closer that puts
 * OSF_WANT_CLOSED and then reads the count either sees every token that
 * will still come, or no token comes: the count and the flag are
 * separate words, and a sender that took the flag before counting could
 * count and send after the closer looked. Returns 1 when the flag was
 * taken (then send the *n tokens: osf_wake_put), else 0, the count put
 * back. */
static inline int osf_wake_claim(uint32_t *want, const uint32_t *waiters, uint32_t *tokens,
				 uint32_t *n)
{
	uint32_t one = 1;

	*n = osf_wake_tokens(__atomic_load_n(waiters, __ATOMIC_RELAXED));
	__atomic_add_fetch(tokens, *n, __ATOMIC_SEQ_CST);
	if (__atomic_compare_exchange_n(want, &one, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		return 1;
	osf_wake_sub(tokens, *n);
	return 0;
}

/* osf_wake_take reads, without blocking, up to max wake tokens waiting
 * on sock with recv_fn (the reader's recv(2)) and uncounts them from
 * tokens (the taking side's count of that kind). It returns how many it
 * read and sets *end when it reached the socket's end (every holder of
 * the other end gone, or a reset). The one way a side takes its tokens:
 * the C data path's (side.c osf_side_drain) and the RDMA engine's
 * (sdp/rdma stream.go drainWake). */
static inline uint32_t osf_wake_take(int sock, uint32_t *tokens, uint32_t max, int *end,
				     ssize_t (*recv_fn)(int, void *, size_t, int))
{
	char buf[256];
	uint32_t got = 0;
	ssize_t r;
	int saved = errno;

	*end = 0;
	while (sock >= 0 && got < max) {
		r = recv_fn(sock, buf, max - got < sizeof(buf) ? max - got : sizeof(buf),
			    MSG_DONTWAIT);
		if (r > 0) {
			got += (uint32_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		*end = r == 0 || errno == ECONNRESET;
		break;
	}
	if (got)
		osf_wake_sub(tokens, got);
	errno = saved;
	return got;
}

struct osf_seg_ring {
	uint64_t head; /* written by the producer */
	uint64_t base; /* written by the producer: the position at the
			  ring's start ("bases" below) */
	uint8_t pad0[48];
	uint64_t tail; /* written by the consumer */
	uint64_t trims; /* written by the consumer: its trims that held the
			   producers back (osf_side_trim), counted so that
			   the stop's end moves the producer's stamp */
	uint8_t pad1[48];
};

/* Segment header flags (osf_seg_hdr.flags), informational: set by the
 * side that creates the segment before it is shared. */
#define OSF_SEG_F_RDMA 0x1u /* the other side is a progress engine that
			       mirrors the rings over RDMA to another host */
#define OSF_SEG_F_LINK 0x2u /* ... as a stream on a link (OSF_RDMA_LINKS):
			       the engine takes its completions and posts
			       its writes (no caller's path) */

struct osf_seg_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_bytes;
	uint32_t ring_bytes;
	uint32_t flags; /* OSF_SEG_F_* */
	int32_t client_pid;
	int32_t server_pid;
	uint8_t client_addr[28]; /* sockaddr_in/in6, informational */
	uint8_t server_addr[28];
	int64_t connect_ns; /* CLOCK_MONOTONIC when the client connected, or
			       0: where TCP_DEFER_ACCEPT counts from */
	/* A slot of a region (OSF_HELLO_F_POOL; preload/pool.c), all hostile
	 * input like the rest: */
	uint32_t slot_gen;    /* the generation the region's owner gave the
				 slot when it took it for this connection */
	uint32_t slot_done;   /* bit s: side s let go of the slot (its last
				 holder's connection is gone in every
				 process); the owner reuses it at 3 */
	uint64_t slot_ino[2]; /* st_ino of side s's wake socket: an adopter
				 (exec, a passed fd) takes the slot only if
				 its own socket is this one */
	uint32_t srv_defer; /* the listener's TCP_DEFER_ACCEPT (seconds, 0:
			       none), written by the server as it takes the
			       hello, read by the client: its next
			       connections to that listener reach the
			       companion with their first byte
			       (preload/setup.h; a peer's word, which only
			       the client's own connections depend on) */
	uint8_t pad[4]; /* the sides and rings on whole cache lines */
	struct osf_seg_side side[2];
	struct osf_seg_ring ring[2];
};

/* The hello: the first and only message the client sends on the unix
 * socket, with two fds attached (SCM_RIGHTS): the segment's memfd, and the
 * server's end of the writers' wake socket (a socketpair the client made:
 * tokens that wake a side's writers travel there, so that readers and
 * writers of one side never take each other's tokens). */
#define OSF_HELLO_MAGIC 0x48465351u /* "QSFH" */
#define OSF_HELLO_F_RDMA 0x1u /* the sender is an RDMA progress engine */
#define OSF_HELLO_F_POOL 0x2u /* the segment is a slot of a region: struct
				 osf_hello_pool follows, and the memfd is the
				 region (up to OSF_REGION_SLOTS_MAX slots of
				 osf_seg_bytes(ring_bytes) each, slot i at
				 i * osf_seg_bytes(ring_bytes)) */
#define OSF_HELLO_F_KFD 0x4u  /* OSF_SHM_KFD: the connection is the kernel
				 TCP connection from client (its bound
				 address and port) that follows; the unix
				 socket carries only this hello (the server
				 keeps it until it accepts that connection) */
#define OSF_HELLO_F_EFD 0x8u  /* OSF_SHM_EFD, with OSF_HELLO_F_POOL only:
				 the second fd is the region's writers'
				 eventfd (sdp/side.h osf_side_use_efd), not
				 a wake socket */
struct osf_hello {
	uint32_t magic;
	uint16_t version;    /* OSF_SEG_VERSION */
	uint16_t size;       /* sizeof(struct osf_hello) */
	uint32_t ring_bytes; /* per direction */
	uint32_t flags;      /* OSF_HELLO_F_* */
	uint8_t client[28];  /* the client's address, as getpeername at the
				server should report it */
	uint8_t server[28];  /* the address the client connected to */
};

/* The pooled hello's second part. A region has OSF_REGION_SLOTS slots
 * (fewer for large rings); a wide one (RLIMIT_NOFILE soft = hard under
 * OSF_SHM_KFD: one region for all of a client process's connections to a
 * listener, preload/pool.c) up to OSF_REGION_SLOTS_MAX, and at most
 * OSF_REGION_BYTES_MAX, which is what a server maps. */
#define OSF_REGION_SLOTS 64u
#define OSF_REGION_SLOTS_MAX 16384u
#define OSF_REGION_BYTES_MAX (1ull << 35)
#define OSF_REGION_NAME "osf-region"
struct osf_hello_pool {
	uint32_t slot;         /* < region_bytes / osf_seg_bytes(ring_bytes) */
	uint32_t gen;          /* the slot's slot_gen for this connection */
	uint64_t region_bytes; /* the region memfd's size: a whole number of
				  slots, at most OSF_REGION_SLOTS_MAX */
};

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct osf_hello_pool) == 16, "pooled hello layout");
_Static_assert(offsetof(struct osf_seg_hdr, slot_ino) % 8 == 0, "slot words");
_Static_assert(sizeof(struct osf_seg_side) == 192, "side layout");
_Static_assert(offsetof(struct osf_seg_side, trim_stop) % 8 == 0,
	       "trim_stop is one aligned 64-bit word");
_Static_assert(sizeof(struct osf_seg_ring) == 128, "ring layout");
_Static_assert(sizeof(struct osf_seg_hdr) == OSF_SEG_HDR_BYTES,
	       "segment header size");
_Static_assert(offsetof(struct osf_seg_hdr, side) % 64 == 0 &&
		       OSF_SEG_RING0_SHARED % 64 == 0,
	       "sides, rings and ring data on cache lines");
_Static_assert(sizeof(struct osf_hello) == 72, "hello layout");
#endif

/* TCP states, numbered as Linux numbers them (include/net/tcp_states.h:
 * TCP_INFO's tcpi_state, the "st" column of /proc/net/tcp). */
#define OSF_TCP_ESTABLISHED 1
#define OSF_TCP_FIN_WAIT2 5
#define OSF_TCP_CLOSE 7
#define OSF_TCP_CLOSE_WAIT 8

/* osf_end_is_reset reports whether the end of a side whose last holder is
 * gone is, as TCP would see it, a reset rather than a FIN: the side closed
 * abortively (OSF_SIDE_RESET: SO_LINGER 0), or left unread bytes the other
 * side sent it (unread: head != tail of the ring it consumed). */
static inline int osf_end_is_reset(uint32_t gone_flags, int unread)
{
	return (gone_flags & OSF_SIDE_RESET) || unread;
}

/* osf_tcp_state returns the state Linux TCP would report for one end of an
 * offloaded connection: me and peer are the two sides' OSF_SIDE_* flags,
 * peer_gone says the peer's last holder closed, reset that the connection
 * ended with a reset (osf_end_is_reset, or a corrupt segment). Measured on
 * kernel TCP over loopback: a reset, or both directions shut down, is
 * CLOSE on both ends (the first to shut down passes TIME_WAIT, which an
 * open socket reports as CLOSE; never CLOSING, since loopback acknowledges
 * a FIN at once, which is also why shutting down writing gives FIN_WAIT2
 * and not FIN_WAIT1). */
static inline int osf_tcp_state(uint32_t me, uint32_t peer, int peer_gone,
				int reset)
{
	int peer_done = (peer & OSF_SIDE_FIN) || peer_gone;

	if (reset || ((me & OSF_SIDE_FIN) && peer_done))
		return OSF_TCP_CLOSE;
	if (me & OSF_SIDE_FIN)
		return OSF_TCP_FIN_WAIT2;
	if (peer_done)
		return OSF_TCP_CLOSE_WAIT;
	return OSF_TCP_ESTABLISHED;
}

/* osf_seg_bytes is the size of a segment with rings of ring_bytes. */
static inline uint64_t osf_seg_bytes(uint32_t ring_bytes)
{
	return (uint64_t)OSF_SEG_PAGE + 2 * (uint64_t)ring_bytes;
}

/* osf_seg_hdr_off is the header's offset in a segment with rings of
 * ring_bytes; the page that holds it (the shared page) starts at
 * ring_bytes. */
static inline uint64_t osf_seg_hdr_off(uint32_t ring_bytes)
{
	return (uint64_t)ring_bytes + OSF_SEG_RING0_SHARED;
}

/* osf_seg_ring_off is the offset of ring r's region (ring_bytes long). */
static inline uint64_t osf_seg_ring_off(uint32_t ring_bytes, int r)
{
	return r ? osf_seg_hdr_off(ring_bytes) + OSF_SEG_HDR_BYTES
		 : (uint64_t)OSF_SEG_RING0_SHARED;
}

/* osf_seg_ring_bias is what ring r adds to a position before masking it:
 * ring 0's position 0 is its region's last OSF_SEG_RING0_SHARED bytes, in
 * the shared page; ring 1's is its region's start, in the shared page. */
static inline uint32_t osf_seg_ring_bias(uint32_t ring_bytes, int r)
{
	return r ? 0 : ring_bytes - OSF_SEG_RING0_SHARED;
}

/* ---- bases ---------------------------------------------------------------
 *
 * A ring's positions map to its region from a base: position p is at
 * offset (p - base + osf_seg_ring_bias(R, r)) & (R - 1), so that position
 * base is at the ring's start in the shared page. A shm producer moves
 * the base to head whenever it writes into an empty ring (under its
 * tx_lock, with nothing held back by TCP_CORK, no trim under way and no
 * urgent byte ever sent: sdp/side_mem.c osf_side_tx_rebase). Request and reply
 * traffic then always starts again at the ring's first bytes, and a
 * kept-alive connection that moves megabytes touches a few pages of its
 * rings (each first touch costs a page fault in both processes, and
 * memory) instead of all of them; the ring's capacity stays R. The base
 * changes only while no byte is in the ring, so no byte is ever read
 * through another base than it was written with; a consumer reads the
 * base after head (the producer stores it before the head that follows).
 * The word is hostile input like head: whatever its value, offsets stay
 * masked within the region. RDMA rings keep base 0. */

/* An osf_ring_view maps ring positions to bytes: position p is at
 * d[(p + bias) & mask] (the ring functions below take p + bias). */
struct osf_ring_view {
	uint8_t *d;
	uint32_t mask, bias;
};

/* osf_seg_view returns the view of ring r, of ring_bytes, whose region
 * starts at region, from base. */
static inline struct osf_ring_view osf_seg_view(uint8_t *region,
						uint32_t ring_bytes, int r,
						uint64_t base)
{
	struct osf_ring_view v;

	v.d = region;
	v.mask = ring_bytes - 1;
	v.bias = (uint32_t)((osf_seg_ring_bias(ring_bytes, r) - base) & v.mask);
	return v;
}

/* osf_seg_hdr returns the header of the segment mapped at base. */
static inline struct osf_seg_hdr *osf_seg_hdr(void *base, uint32_t ring_bytes)
{
	return (struct osf_seg_hdr *)((uint8_t *)base + osf_seg_hdr_off(ring_bytes));
}

/* osf_ring_size_ok reports whether ring_bytes is a usable ring size. */
static inline int osf_ring_size_ok(uint32_t ring_bytes)
{
	return ring_bytes >= OSF_SEG_MIN_RING && ring_bytes <= OSF_SEG_MAX_RING &&
	       (ring_bytes & (ring_bytes - 1)) == 0;
}

/* Verdicts of osf_hello_check. */
#define OSF_HELLO_OK 0
#define OSF_HELLO_MALFORMED 1 /* size, magic, version */
#define OSF_HELLO_BAD_RING 2  /* not a usable ring size */
#define OSF_HELLO_OVER_CAP 3  /* above what the server maps */

/* osf_hello_check checks the n bytes a client sent as its hello (b holds
 * at least sizeof(struct osf_hello) bytes) against the server's ring cap:
 * OSF_HELLO_OK, or what is wrong. The one parser of a hello (sdp/setup.c
 * osf_hello_take, every server's); every field it passes comes from a
 * hostile client. */
static inline int osf_hello_check(const void *b, size_t n, uint32_t cap)
{
	struct osf_hello h;

	if (n != sizeof(h) && n != sizeof(h) + sizeof(struct osf_hello_pool))
		return OSF_HELLO_MALFORMED;
	memcpy(&h, b, sizeof(h));
	if ((n != sizeof(h)) != ((h.flags & OSF_HELLO_F_POOL) != 0))
		return OSF_HELLO_MALFORMED; /* the second part iff the flag */
	if (h.magic != OSF_HELLO_MAGIC || h.version != OSF_SEG_VERSION ||
	    h.size != sizeof(h))
		return OSF_HELLO_MALFORMED;
	if (!(h.ring_bytes >= OSF_SEG_MIN_RING && h.ring_bytes <= OSF_SEG_MAX_RING &&
	      (h.ring_bytes & (h.ring_bytes - 1)) == 0))
		return OSF_HELLO_BAD_RING;
	return h.ring_bytes > cap ? OSF_HELLO_OVER_CAP : OSF_HELLO_OK;
}

/* osf_seg_hdr_check reports whether a segment header (a copy, or the
 * mapped one) matches the ring size the hello announced: the magic,
 * version, header size and ring size the creator wrote before sharing.
 * Only the check: the size used afterwards is ring, never the header's. */
static inline int osf_seg_hdr_check(const struct osf_seg_hdr *h, uint32_t ring)
{
	return __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == OSF_SEG_MAGIC &&
	       h->version == OSF_SEG_VERSION && h->ring_bytes == ring &&
	       h->hdr_bytes == OSF_SEG_HDR_BYTES;
}

/* osf_region_slots returns the slots of a region of bytes with rings of
 * ring_bytes, or 0 when that is not a whole number of slots between 1 and
 * OSF_REGION_SLOTS_MAX, or more than OSF_REGION_BYTES_MAX (ring_bytes is a
 * usable ring size). */
static inline uint32_t osf_region_slots(uint64_t bytes, uint32_t ring_bytes)
{
	uint64_t sb = osf_seg_bytes(ring_bytes);

	if (bytes == 0 || bytes > OSF_REGION_BYTES_MAX || bytes % sb ||
	    bytes / sb > OSF_REGION_SLOTS_MAX)
		return 0;
	return (uint32_t)(bytes / sb);
}

/* osf_ring_used returns the bytes between tail and head, or -1 when the
 * positions are impossible (the peer corrupted them). */
static inline int64_t osf_ring_used(uint64_t head, uint64_t tail,
				    uint32_t size)
{
	uint64_t used = head - tail;

	return used <= size ? (int64_t)used : -1;
}

/* The ring functions below take a biased position: pos plus the ring's
 * osf_seg_ring_bias (struct osf_side's txb and rxb). */

/* osf_ring_copy_out copies n <= size bytes starting at position pos out of
 * a ring of size mask + 1. */
static inline void osf_ring_copy_out(const uint8_t *data, uint32_t mask,
				     uint64_t pos, void *dst, size_t n)
{
	size_t off = (size_t)(pos & mask), first = (size_t)mask + 1 - off;

	if (first > n)
		first = n;
	memcpy(dst, data + off, first);
	if (n > first)
		memcpy((uint8_t *)dst + first, data, n - first);
}

/* osf_ring_copy_in copies n <= size bytes into a ring at position pos. */
static inline void osf_ring_copy_in(uint8_t *data, uint32_t mask, uint64_t pos,
				    const void *src, size_t n)
{
	size_t off = (size_t)(pos & mask), first = (size_t)mask + 1 - off;

	if (first > n)
		first = n;
	memcpy(data + off, src, first);
	if (n > first)
		memcpy(data, (const uint8_t *)src + first, n - first);
}

/* osf_ring_span returns the contiguous bytes from pos to the ring's end,
 * at most n: where a single read() or pread() may land. */
static inline size_t osf_ring_span(uint32_t mask, uint64_t pos, size_t n)
{
	size_t first = (size_t)mask + 1 - (size_t)(pos & mask);

	return first < n ? first : n;
}

#endif
