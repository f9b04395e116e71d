/* spike.h: helpers shared by the D2 spike programs (docs/D2-PROPOSAL.md).
 * Measurement code, not product code: no hooks, no osf headers. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void die(const char *what)
{
	perror(what);
	exit(2);
}

static inline void pin(int cpu)
{
	cpu_set_t s;
	if (cpu < 0)
		return;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof(s), &s) < 0)
		die("sched_setaffinity");
}

static inline double cpu_us(const struct rusage *r)
{
	return r->ru_utime.tv_sec * 1e6 + r->ru_utime.tv_usec + r->ru_stime.tv_sec * 1e6 +
	       r->ru_stime.tv_usec;
}

static inline int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static inline struct sockaddr_in lo_addr(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	return a;
}

static inline int futex(_Atomic uint32_t *w, int op, uint32_t v)
{
	return (int)syscall(SYS_futex, (uint32_t *)w, op, v, NULL, NULL, 0);
}

/* SCM_RIGHTS one fd over a unix socket (the once-per-pair region hand-off). */
struct fdmsg {
	char c;
	struct iovec iov;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m;
};

static inline void fdmsg_init(struct fdmsg *f)
{
	memset(f, 0, sizeof(*f));
	f->c = 'R';
	f->iov = (struct iovec){&f->c, 1};
	f->m = (struct msghdr){.msg_iov = &f->iov, .msg_iovlen = 1, .msg_control = f->u.b,
			       .msg_controllen = sizeof(f->u.b)};
}

static inline void send_fd(int s, int fd)
{
	struct fdmsg f;
	fdmsg_init(&f);
	struct cmsghdr *h = CMSG_FIRSTHDR(&f.m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(int));
	if (sendmsg(s, &f.m, 0) != 1)
		die("sendmsg fd");
}

static inline int recv_fd(int s)
{
	struct fdmsg f;
	int fd;
	fdmsg_init(&f);
	if (recvmsg(s, &f.m, 0) != 1)
		die("recvmsg fd");
	struct cmsghdr *h = CMSG_FIRSTHDR(&f.m);
	if (!h || h->cmsg_type != SCM_RIGHTS)
		die("no fd");
	memcpy(&fd, CMSG_DATA(h), sizeof(int));
	return fd;
}

/* ---- the per-process-pair region (prototype of the proposal) ----
 * One memfd per pair, shared once. A bitmap of slots (lock-free: fetch_or to
 * take, fetch_and to give back); each slot is one 4 KiB page holding the
 * connection's words and two tiny rings, so a small exchange touches one
 * page, as today's layout 3 does. Real slots would continue with larger
 * rings after that page; the spike only moves one byte. */
#define SLOT_BYTES 4096u
#define RING_BYTES 1024u
#define MAX_SLOTS 65536u

struct ring {
	_Alignas(64) _Atomic uint32_t head;
	_Alignas(64) _Atomic uint32_t tail;
};

struct slot {
	_Alignas(64) _Atomic uint32_t state; /* bit 0: client closed, bit 1: server closed */
	uint32_t gen;
	_Alignas(64) _Atomic uint32_t want[2]; /* side s waits for data in ring 1-s */
	_Alignas(64) _Atomic uint32_t fin[2];
	_Alignas(64) _Atomic uint32_t fut[2]; /* futex words, for the wake spike */
	struct ring ring[2];
	_Alignas(64) unsigned char data[2][RING_BYTES];
};

struct region {
	char magic[8];
	uint64_t secret[2];
	uint32_t nslots;
	_Atomic uint32_t fresh; /* next never-used slot (variant "fresh") */
	_Alignas(64) _Atomic uint64_t bitmap[MAX_SLOTS / 64];
	/* variant "nohello": the client announces slot + 1 under its local port
	 * right after connect; the server takes it by the port accept reported. */
	_Atomic uint32_t announce[65536];
};

#define REGION_HDR (16384u + 262144u) /* bitmap 8 KiB, announce 256 KiB */
static inline struct slot *slot_at(void *region, uint32_t i)
{
	return (struct slot *)((char *)region + REGION_HDR + (size_t)i * SLOT_BYTES);
}

static inline size_t region_bytes(uint32_t nslots)
{
	return REGION_HDR + (size_t)nslots * SLOT_BYTES;
}

/* Lowest free slot, or -1. */
static inline int slot_take(struct region *r)
{
	uint32_t words = r->nslots / 64;
	for (uint32_t w = 0; w < words; w++) {
		uint64_t v = atomic_load_explicit(&r->bitmap[w], memory_order_relaxed);
		while (~v) {
			int b = __builtin_ctzll(~v);
			uint64_t bit = 1ull << b;
			v = atomic_fetch_or(&r->bitmap[w], bit);
			if (!(v & bit))
				return (int)(w * 64 + (uint32_t)b);
		}
	}
	return -1;
}

static inline void slot_give(struct region *r, uint32_t i)
{
	atomic_fetch_and(&r->bitmap[i / 64], ~(1ull << (i % 64)));
}

/* ---- the wake protocol (osf's, reduced to one byte) ----
 * A reader that finds its ring empty spins up to spin_ns, then raises its want
 * word, looks once more and sleeps; a writer publishes, fences, and wakes the
 * reader only if it takes the want word. How to sleep and wake is the caller's. */
struct waker {
	int yield;	  /* spin with sched_yield (lets a peer on this CPU run) */
	void (*sleep)(void *arg, int side); /* block side until woken */
	void (*wake)(void *arg, int side);  /* wake side */
	void *arg;
	int late;	  /* 1: a wake-up sent after the reader found data must be taken */
	uint64_t spin_ns;
};

/* Wait until ring (1 - side) of s has a byte. */
static inline void ring_wait(struct slot *s, int side, const struct waker *w)
{
	struct ring *r = &s->ring[1 - side];
	uint64_t t0 = w->spin_ns ? now_ns() : 0;

	for (;;) {
		if (atomic_load_explicit(&r->head, memory_order_acquire) !=
		    atomic_load_explicit(&r->tail, memory_order_relaxed))
			return;
		if (w->spin_ns && now_ns() - t0 < w->spin_ns) {
			if (w->yield)
				sched_yield();
			else
				__builtin_ia32_pause();
			continue;
		}
		atomic_store(&s->want[side], 1);
		if (atomic_load(&r->head) != atomic_load_explicit(&r->tail, memory_order_relaxed)) {
			/* the writer took the flag: its wake-up is on its way */
			if (atomic_exchange(&s->want[side], 0) == 0 && w->late)
				w->sleep(w->arg, side);
			return;
		}
		w->sleep(w->arg, side);
	}
}

static inline void ring_put(struct slot *s, int side, unsigned char b, const struct waker *w)
{
	struct ring *r = &s->ring[side];
	uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	s->data[side][h % RING_BYTES] = b;
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&s->want[1 - side], memory_order_relaxed) &&
	    atomic_exchange(&s->want[1 - side], 0))
		w->wake(w->arg, 1 - side);
}

static inline unsigned char ring_get(struct slot *s, int side)
{
	struct ring *r = &s->ring[1 - side];
	uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	unsigned char b = s->data[1 - side][t % RING_BYTES];
	atomic_store_explicit(&r->tail, t + 1, memory_order_release);
	return b;
}

/* A waker whose sleep is a blocking recv of a 1-byte token on a socket and
 * whose wake-up sends one (arg points at the socket's fd). */
static inline void sock_token_sleep(void *arg, int side)
{
	char c;
	(void)side;
	if (recv(*(int *)arg, &c, 1, MSG_WAITALL) != 1)
		die("recv token");
}

static inline void sock_token_wake(void *arg, int side)
{
	char c = 'w';
	(void)side;
	if (send(*(int *)arg, &c, 1, MSG_NOSIGNAL) != 1)
		die("send token");
}

/* An abstract AF_UNIX name PREFIX/PORT (a stand-in for osf's companion). */
static inline void abstract_name(struct sockaddr_un *u, socklen_t *len, const char *prefix,
				 int port)
{
	memset(u, 0, sizeof(*u));
	u->sun_family = AF_UNIX;
	int k = snprintf(u->sun_path + 1, sizeof(u->sun_path) - 1, "%s/%d", prefix, port);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)k);
}

/* Connection 0 of a churn run warms up (osf's first connect loads its state)
 * and is not counted: the clock and the CPU count start at connection 1. */
static inline void churn_start(long k, struct rusage *r0, uint64_t *t0)
{
	if (k == 1) {
		getrusage(RUSAGE_SELF, r0);
		*t0 = now_ns();
	}
}

/* The end of a churn run: the timed loop ended at t1 (started at t0, with r0
 * taken then); waits for the server pid and prints the one line run.sh reads. */
static inline void churn_report(const char *name, int pinned, long n, uint64_t t0, uint64_t t1,
				const struct rusage *r0, uint64_t *lat, int unixfd, pid_t pid)
{
	struct rusage r1, rc;
	int st;
	getrusage(RUSAGE_SELF, &r1);
	waitpid(pid, &st, 0);
	getrusage(RUSAGE_CHILDREN, &rc);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		die("server failed");
	qsort(lat, (size_t)n, sizeof(uint64_t), cmp_u64);
	printf("%s pin=%d conns=%ld conn_per_s=%.0f p50_us=%.1f p90_us=%.1f client_cpu_us=%.1f "
	       "server_cpu_us=%.1f app_fd_unix=%d max_us=%.0f\n",
	       name, pinned, n, (double)n / ((double)(t1 - t0) / 1e9), lat[n / 2] / 1e3,
	       lat[n * 9 / 10] / 1e3, (cpu_us(&r1) - cpu_us(r0)) / (double)n,
	       cpu_us(&rc) / (double)n, unixfd, lat[n - 1] / 1e3);
}
