/* churn: the cost of one short connection, per variant (docs/D2-PROPOSAL.md).
 *
 *   churn VARIANT N PIN PORT
 *
 * The process forks a server (it makes the listener itself, after the fork),
 * then connects N times: connect, 1 byte each way, close. PIN 1: client on
 * CPU 0, server on CPU 1; PIN 0: unpinned.
 *   tcp    kernel TCP alone (run it under LD_PRELOAD=libosf.so for today's osf)
 *   pool   the proposal: kernel TCP connect/accept; the client's SYN is marked
 *          (IP_TOS, DSCP 38) and the server reads the mark (TCP_SAVED_SYN);
 *          the client takes a slot from a bitmap in a region the two processes
 *          shared once (memfd + SCM_RIGHTS at start, not timed), writes its
 *          byte into the slot's ring, and sends an 8-byte hello naming the slot
 *          on the TCP socket (it is also the first wake-up); the reply comes
 *          through the other ring, woken by a 1-byte token on the TCP socket
 *          when the reader said it sleeps; close returns the slot (the lowest
 *          free one is taken next: a reused slot, its page mapped in both).
 *   fresh  pool, but every connection takes a never-used slot (its page
 *          faulted in both processes, as a grown or trimmed pool's would be).
 *   spin   pool, and a reader spins up to 20 us on the ring before it sleeps.
 *   nohello  spin, and no hello on the TCP socket: the client learns its port
 *          (getsockname) and announces its slot under it in the region; the
 *          server takes the port from accept and spins for the announcement.
 *          A connection then makes no data system call when the spins pay.
 *   pair   spin, and every connection also sets up a new pair first (an
 *          AF_UNIX connect to the server's abstract listener, a memfd region
 *          sent by SCM_RIGHTS, mapped by both, unmapped and closed at the
 *          end): a short client process, which meets its server once.
 *   bound  spin, no hello, and the announcement made before connect: the
 *          client binds to port 0 and reads its port (bind, getsockname)
 *          before connect, so the server finds the slot at accept, always.
 * SPIN_YIELD=1 in the environment makes every spin call sched_yield (a peer
 * on the same CPU then runs; osf's adaptive spin avoids such spins otherwise).
 * Prints one line: variant pin conns conn_per_s p50_us client_cpu_us
 * server_cpu_us (CPU per connection, getrusage) and whether the client's fd
 * was an AF_UNIX socket (today's osf) or not. */
#include "spike.h"
#include <netinet/ip.h>

#define MARK_TOS 0x98 /* DSCP 38 */
#define HELLO_MAGIC 0x4f534632u
#define ANNOUNCE_WANT 0xffffffffu

static struct region *reg;
static int variant; /* 0 tcp, 1 pool, 2 fresh, 3 spin, 4 nohello, 5 bound, 6 pair */
static uint64_t spin_ns;
static int spin_yield; /* SPIN_YIELD=1: spins call sched_yield */

static void map_region(int fd, uint32_t nslots)
{
	reg = mmap(NULL, region_bytes(nslots), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (reg == MAP_FAILED)
		die("mmap region");
}

static struct waker waker_for(int *fd)
{
	return (struct waker){.sleep = sock_token_sleep, .wake = sock_token_wake, .arg = fd, .late = 1,
			      .spin_ns = spin_ns, .yield = spin_yield};
}

/* A slot taken by the client is made new before anything names it. */
static void slot_reset(struct slot *s)
{
	s->gen++;
	atomic_store(&s->state, 0);
	for (int d = 0; d < 2; d++) {
		atomic_store(&s->want[d], 0);
		atomic_store(&s->fin[d], 0);
		atomic_store(&s->ring[d].head, 0);
		atomic_store(&s->ring[d].tail, 0);
	}
}

static void slot_close(uint32_t i, int side)
{
	struct slot *s = slot_at(reg, i);
	atomic_store(&s->fin[side], 1);
	uint32_t was = atomic_fetch_or(&s->state, 1u << side);
	if ((was | (1u << side)) == 3 && variant != 2)
		slot_give(reg, i);
}

static void server(int port, long n, int cpu, int ready, int pairsock, uint32_t nslots)
{
	pin(cpu);
	if (variant && variant != 6)
		map_region(recv_fd(pairsock), nslots);
	int ul = -1;
	if (variant == 6) {
		struct sockaddr_un u;
		socklen_t ulen;
		abstract_name(&u, &ulen, "osf-spike", port);
		ul = socket(AF_UNIX, SOCK_STREAM, 0);
		if (ul < 0 || bind(ul, (struct sockaddr *)&u, ulen) < 0 || listen(ul, 1024) < 0)
			die("unix listen");
	}
	struct sockaddr_in a = lo_addr(port);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		die("socket");
	if (variant && setsockopt(l, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof(one)) < 0)
		die("TCP_SAVE_SYN");
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1024) < 0)
		die("listen");
	(void)!write(ready, "r", 1);
	for (long k = 0; k < n; k++) {
		int lk = -1, m = -1;
		if (variant == 6) {
			lk = accept(ul, NULL, NULL);
			if (lk < 0)
				die("unix accept");
			m = recv_fd(lk);
			map_region(m, nslots);
			if (memcmp(reg->magic, "OSFPAIR1", 8))
				die("region magic");
		}
		struct sockaddr_in peer;
		socklen_t pl = sizeof(peer);
		int c = accept(l, (struct sockaddr *)&peer, &pl);
		if (c < 0)
			die("accept");
		if (!variant) {
			char b;
			if (read(c, &b, 1) != 1 || write(c, &b, 1) != 1)
				die("server io");
			close(c);
			continue;
		}
		unsigned char syn[256];
		socklen_t sl = sizeof(syn);
		if (getsockopt(c, IPPROTO_TCP, TCP_SAVED_SYN, syn, &sl) < 0 || sl < 20)
			die("TCP_SAVED_SYN");
		if (syn[1] != MARK_TOS)
			die("SYN not marked");
		uint32_t hello[2] = {HELLO_MAGIC, 0};
		if (variant == 5) {
			uint32_t v = atomic_exchange(&reg->announce[ntohs(peer.sin_port)], 0);
			if (!v)
				die("not announced before connect");
			hello[1] = v - 1;
		} else if (variant == 4) {
			/* Spin up to spin_ns for the announcement, then say so in
			 * the entry (ANNOUNCE_WANT) and sleep for the client's token. */
			_Atomic uint32_t *an = &reg->announce[ntohs(peer.sin_port)];
			uint64_t t = now_ns();
			uint32_t v = 0;
			while (now_ns() - t < spin_ns) {
				if ((v = atomic_load(an)) != 0)
					break;
				if (spin_yield)
					sched_yield();
				else
					__builtin_ia32_pause();
			}
			if (!v) {
				uint32_t z = 0;
				if (atomic_compare_exchange_strong(an, &z, ANNOUNCE_WANT)) {
					char tok;
					if (recv(c, &tok, 1, MSG_WAITALL) != 1)
						die("announce token");
				}
			}
			v = atomic_exchange(an, 0);
			if (!v || v == ANNOUNCE_WANT)
				die("no announcement");
			hello[1] = v - 1;
		} else if (recv(c, hello, sizeof(hello), MSG_WAITALL) != sizeof(hello))
			die("hello");
		if (hello[0] != HELLO_MAGIC || hello[1] >= nslots)
			die("bad hello");
		struct slot *s = slot_at(reg, hello[1]);
		struct waker w = waker_for(&c);
		ring_wait(s, 1, &w);
		unsigned char b = ring_get(s, 1);
		ring_put(s, 1, b, &w);
		slot_close(hello[1], 1);
		close(c);
		if (variant == 6) {
			munmap(reg, region_bytes(nslots));
			close(m);
			close(lk);
		}
	}
	exit(0);
}

static int fd_is_unix(int fd)
{
	char p[64], l[64], line[512];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	ssize_t k = readlink(p, l, sizeof(l) - 1);
	if (k <= 0)
		return -1;
	l[k] = 0;
	unsigned long ino;
	if (sscanf(l, "socket:[%lu]", &ino) != 1)
		return -1;
	FILE *f = fopen("/proc/net/unix", "r");
	if (!f)
		return -1;
	int found = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long i;
		if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu", &i) == 1 && i == ino)
			found = 1;
	}
	fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: churn tcp|pool|fresh|spin|nohello|bound|pair N PIN PORT\n");
		return 2;
	}
	const char *v = argv[1];
	variant = !strcmp(v, "tcp") ? 0 : !strcmp(v, "pool") ? 1 : !strcmp(v, "fresh") ? 2
					  : !strcmp(v, "spin") ? 3 : !strcmp(v, "nohello") ? 4
					  : !strcmp(v, "bound") ? 5 : !strcmp(v, "pair") ? 6 : -1;
	if (variant < 0)
		return 2;
	if (variant >= 3)
		spin_ns = 20000;
	spin_yield = getenv("SPIN_YIELD") && atoi(getenv("SPIN_YIELD"));
	long n = atol(argv[2]);
	int pinned = atoi(argv[3]), port = atoi(argv[4]);
	uint32_t nslots = variant == 2 ? (uint32_t)((n + 64) / 64 * 64) : variant == 6 ? 64 : 4096;
	int ready[2], pair[2];
	if (pipe(ready) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
		die("pipe");
	signal(SIGPIPE, SIG_IGN);
	pid_t pid = fork();
	if (pid == 0)
		server(port, n + 1, pinned ? 1 : -1, ready[1], pair[1], nslots);
	pin(pinned ? 0 : -1);
	if (variant && variant != 6) {
		int m = memfd_create("osf-pair", MFD_CLOEXEC);
		if (m < 0 || ftruncate(m, (off_t)region_bytes(nslots)) < 0)
			die("memfd");
		map_region(m, nslots);
		memcpy(reg->magic, "OSFPAIR1", 8);
		reg->nslots = nslots;
		send_fd(pair[0], m);
	}
	char c;
	if (read(ready[0], &c, 1) != 1)
		die("ready");
	struct sockaddr_in a = lo_addr(port);
	uint64_t *lat = calloc((size_t)n, sizeof(uint64_t));
	struct rusage r0;
	int unixfd = -1;
	uint64_t t0 = 0;
	for (long k = 0; k <= n; k++) {
		churn_start(k, &r0, &t0);
		uint64_t s0 = now_ns();
		int lk = -1, m = -1;
		if (variant == 6) {
			struct sockaddr_un u;
			socklen_t ulen;
			abstract_name(&u, &ulen, "osf-spike", port);
			lk = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (lk < 0 || connect(lk, (struct sockaddr *)&u, ulen) < 0)
				die("unix connect");
			m = memfd_create("osf-pair", MFD_CLOEXEC);
			if (m < 0 || ftruncate(m, (off_t)region_bytes(nslots)) < 0)
				die("memfd");
			map_region(m, nslots);
			memcpy(reg->magic, "OSFPAIR1", 8);
			reg->nslots = nslots;
			send_fd(lk, m);
		}
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket");
		if (variant) {
			int tos = MARK_TOS;
			if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0)
				die("IP_TOS");
		}
		int pre = -1;
		if (variant == 5) {
			struct sockaddr_in me = lo_addr(0);
			socklen_t ml = sizeof(me);
			if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0 ||
			    getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
				die("bind 0");
			pre = slot_take(reg);
			if (pre < 0)
				die("no slot");
			slot_reset(slot_at(reg, (uint32_t)pre));
			atomic_store(&reg->announce[ntohs(me.sin_port)], (uint32_t)pre + 1);
		}
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
		if (k == 0)
			unixfd = fd_is_unix(fd);
		if (!variant) {
			char b = 'x';
			if (write(fd, &b, 1) != 1 || read(fd, &b, 1) != 1)
				die("client io");
		} else {
			int i = variant == 2 ? (int)atomic_fetch_add(&reg->fresh, 1)
				: variant == 5 ? pre : slot_take(reg);
			if (i < 0 || (uint32_t)i >= nslots)
				die("no slot");
			struct slot *s = slot_at(reg, (uint32_t)i);
			if (variant != 5)
				slot_reset(s);
			struct waker w = waker_for(&fd);
			ring_put(s, 0, 'x', &w);
			if (variant == 5) {
				/* announced before connect */
			} else if (variant == 4) {
				struct sockaddr_in me;
				socklen_t ml = sizeof(me);
				if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
					die("getsockname");
				if (atomic_exchange(&reg->announce[ntohs(me.sin_port)], (uint32_t)i + 1) ==
				    ANNOUNCE_WANT) {
					char tok = 'a';
					if (send(fd, &tok, 1, MSG_NOSIGNAL) != 1)
						die("send announce token");
				}
			} else {
				uint32_t hello[2] = {HELLO_MAGIC, (uint32_t)i};
				if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != sizeof(hello))
					die("send hello");
			}
			ring_wait(s, 0, &w);
			if (ring_get(s, 0) != 'x')
				die("bad reply");
			slot_close((uint32_t)i, 0);
		}
		close(fd);
		if (variant == 6) {
			munmap(reg, region_bytes(nslots));
			close(m);
			close(lk);
		}
		if (k)
			lat[k - 1] = now_ns() - s0;
	}
	churn_report(v, pinned, n, t0, now_ns(), &r0, lat, unixfd, pid);
	return 0;
}
