/* idle: what N open, idle connections cost two processes (docs/D2-PROPOSAL.md).
 *
 *   idle tcp|pool|sparse N
 *
 * The process forks a server; the client makes N connections one after the
 * other, each moving 64 bytes each way, and keeps them all open. Then it prints,
 * for itself and the server: open fds, mappings, PSS and RSS (smaps_rollup),
 * page tables (VmPTE), and the netns's TCP/UNIX socket counts.
 *   tcp     kernel TCP (run it under LD_PRELOAD=libosf.so for today's osf)
 *   pool    kernel TCP fds + one region shared once; slot pages dense (4 KiB
 *           stride), 64 B through the slot's rings, a token on the TCP socket
 *   sparse  pool, but slots 2 MiB + 4 KiB apart (as separate 2 x 1 MiB
 *           segments lie), to show the page tables a dense slot array saves
 * In pool mode the server then times, with the N connections open, what it
 * would cost to learn who is at the other end of an accepted TCP connection:
 * a NETLINK_SOCK_DIAG exact look-up of the 4-tuple (uid, inode), a full read
 * of /proc/net/tcp, and SO_PEERCRED (not filled in for TCP). */
#include "spike.h"
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <poll.h>

#define MSG 64
static struct region *reg;
static size_t stride = SLOT_BYTES;
static int variant; /* 0 tcp, 1 pool, 2 sparse */

static struct slot *slot_n(uint32_t i)
{
	return (struct slot *)((char *)reg + REGION_HDR + (size_t)i * stride);
}

static void stats(const char *who, pid_t pid)
{
	char p[128], line[256];
	long pss = 0, rss = 0, pte = 0, maps = 0, fds = 0;
	snprintf(p, sizeof(p), "/proc/%d/smaps_rollup", pid);
	FILE *f = fopen(p, "r");
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "Pss: %ld", &pss);
		sscanf(line, "Rss: %ld", &rss);
	}
	if (f)
		fclose(f);
	snprintf(p, sizeof(p), "/proc/%d/status", pid);
	f = fopen(p, "r");
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "VmPTE: %ld", &pte);
	if (f)
		fclose(f);
	snprintf(p, sizeof(p), "/proc/%d/maps", pid);
	f = fopen(p, "r");
	while (f && fgets(line, sizeof(line), f))
		maps++;
	if (f)
		fclose(f);
	snprintf(p, sizeof(p), "ls /proc/%d/fd | wc -l", pid);
	f = popen(p, "r");
	if (f && fscanf(f, "%ld", &fds) != 1)
		fds = -1;
	if (f)
		pclose(f);
	printf("  %s: fds=%ld maps=%ld rss_kb=%ld pss_kb=%ld pte_kb=%ld\n", who, fds, maps, rss,
	       pss, pte);
}

/* Active slab bytes, whole host (other work moves it: a noisy upper bound). */
static long slab_kb(void)
{
	FILE *f = fopen("/proc/slabinfo", "r");
	char line[512];
	double b = 0;
	while (f && fgets(line, sizeof(line), f)) {
		char name[128];
		long act, num, sz;
		if (sscanf(line, "%127s %ld %ld %ld", name, &act, &num, &sz) == 4)
			b += (double)act * (double)sz;
	}
	if (f)
		fclose(f);
	return (long)(b / 1024);
}

static void auth_costs(int c, int n)
{
	struct sockaddr_in peer, me;
	socklen_t pl = sizeof(peer), ml = sizeof(me);
	getpeername(c, (struct sockaddr *)&peer, &pl);
	getsockname(c, (struct sockaddr *)&me, &ml);
	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		die("netlink");
	const int R = 2000;
	uint32_t uid = 0, ino = 0;
	uint64_t t0 = now_ns();
	for (int k = 0; k < R; k++) {
		struct {
			struct nlmsghdr h;
			struct inet_diag_req_v2 r;
		} q = {.h = {.nlmsg_len = sizeof(q), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			     .nlmsg_flags = NLM_F_REQUEST},
		       .r = {.sdiag_family = AF_INET, .sdiag_protocol = IPPROTO_TCP,
			     .idiag_states = ~0u,
			     .id = {.idiag_sport = peer.sin_port, .idiag_dport = me.sin_port,
				    .idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}}};
		q.r.id.idiag_src[0] = peer.sin_addr.s_addr;
		q.r.id.idiag_dst[0] = me.sin_addr.s_addr;
		if (send(nl, &q, sizeof(q), 0) != sizeof(q))
			die("diag send");
		char buf[8192];
		ssize_t got = recv(nl, buf, sizeof(buf), 0);
		struct nlmsghdr *h = (struct nlmsghdr *)buf;
		if (got <= 0 || h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
			die("diag answer");
		struct inet_diag_msg *m = NLMSG_DATA(h);
		uid = m->idiag_uid;
		ino = m->idiag_inode;
	}
	uint64_t t1 = now_ns();
	const int P = 20;
	long lines = 0;
	for (int k = 0; k < P; k++) {
		FILE *f = fopen("/proc/net/tcp", "r");
		char line[512];
		lines = 0;
		while (fgets(line, sizeof(line), f))
			lines++;
		fclose(f);
	}
	uint64_t t2 = now_ns();
	struct ucred cr = {0};
	socklen_t cl = sizeof(cr);
	int pr = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl);
	printf("  auth (server, %d connections open): sock_diag exact 4-tuple look-up %.1f us "
	       "(peer uid %u, inode %u); /proc/net/tcp read %.0f us (%ld lines); "
	       "SO_PEERCRED on TCP: rc=%d pid=%d uid=%d\n",
	       n, (double)(t1 - t0) / R / 1e3, uid, ino, (double)(t2 - t1) / P / 1e3, lines, pr,
	       cr.pid, (int)cr.uid);
	close(nl);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	variant = !strcmp(argv[1], "tcp") ? 0 : !strcmp(argv[1], "pool") ? 1
		  : !strcmp(argv[1], "sparse") ? 2 : -1;
	if (variant < 0)
		return 2;
	if (variant == 2)
		stride = (2u << 20) + 4096;
	int n = atoi(argv[2]);
	size_t rb = REGION_HDR + (size_t)n * stride;
	int ready[2], pair[2], done[2];
	if (pipe(ready) < 0 || pipe(done) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
		die("pipe");
	int port = 6000 + getpid() % 1000;
	long slab0 = slab_kb();
	pid_t pid = fork();
	if (pid == 0) {
		if (variant) {
			reg = mmap(NULL, rb, PROT_READ | PROT_WRITE, MAP_SHARED, recv_fd(pair[1]), 0);
			if (reg == MAP_FAILED)
				die("mmap");
		}
		close(pair[1]);
		close(pair[0]);
		struct sockaddr_in a = lo_addr(port);
		int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4096) < 0)
			die("listen");
		(void)!write(ready[1], "r", 1);
		int c = -1;
		for (int k = 0; k < n; k++) {
			c = accept(l, NULL, NULL);
			if (c < 0)
				die("accept");
			char buf[MSG];
			if (!variant) {
				if (recv(c, buf, MSG, MSG_WAITALL) != MSG || write(c, buf, MSG) != MSG)
					die("server io");
				continue;
			}
			uint32_t hello[2];
			if (recv(c, hello, 8, MSG_WAITALL) != 8 || hello[1] >= (uint32_t)n)
				die("hello");
			struct slot *s = slot_n(hello[1]);
			memcpy(buf, s->data[0], MSG);
			atomic_store(&s->ring[0].tail, MSG);
			memcpy(s->data[1], buf, MSG);
			atomic_store(&s->ring[1].head, MSG);
			if (send(c, "w", 1, 0) != 1)
				die("token");
		}
		(void)!write(ready[1], "d", 1);
		char x;
		if (read(done[0], &x, 1) == 1 && variant)
			auth_costs(c, n);
		fflush(stdout);
		exit(0);
	}
	if (variant) {
		int m = memfd_create("osf-pair", MFD_CLOEXEC);
		if (m < 0 || ftruncate(m, (off_t)rb) < 0)
			die("memfd");
		reg = mmap(NULL, rb, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
		if (reg == MAP_FAILED)
			die("mmap");
		send_fd(pair[0], m);
		close(m);
	}
	close(pair[0]);
	close(pair[1]);
	char x;
	if (read(ready[0], &x, 1) != 1)
		die("ready");
	struct sockaddr_in a = lo_addr(port);
	char buf[MSG];
	memset(buf, 'q', MSG);
	for (int k = 0; k < n; k++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
		if (!variant) {
			if (write(fd, buf, MSG) != MSG || recv(fd, buf, MSG, MSG_WAITALL) != MSG)
				die("client io");
			continue;
		}
		struct slot *s = slot_n((uint32_t)k);
		memcpy(s->data[0], buf, MSG);
		atomic_store(&s->ring[0].head, MSG);
		uint32_t hello[2] = {0x4f534632u, (uint32_t)k};
		char t;
		if (send(fd, hello, 8, 0) != 8 || recv(fd, &t, 1, 0) != 1)
			die("client pool io");
		if (atomic_load(&s->ring[1].head) != MSG || memcmp(s->data[1], buf, MSG))
			die("bad reply");
		atomic_store(&s->ring[1].tail, MSG);
	}
	if (read(ready[0], &x, 1) != 1)
		die("done");
	usleep(200000);
	printf("%s conns=%d\n", argv[1], n);
	stats("client", getpid());
	stats("server", pid);
	printf("  slab (host-wide, active objects) grew by %ld KiB\n", slab_kb() - slab0);
	FILE *f = fopen("/proc/net/sockstat", "r");
	char line[256];
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "TCP:", 4))
			printf("  sockstat %s", line);
	if (f)
		fclose(f);
	f = popen("grep -c . /proc/net/unix", "r");
	int un = 0;
	if (f && fscanf(f, "%d", &un) == 1)
		printf("  /proc/net/unix lines (netns): %d\n", un - 1);
	if (f)
		pclose(f);
	fflush(stdout);
	(void)!write(done[1], "x", 1);
	int st;
	waitpid(pid, &st, 0);
	return 0;
}
