/* unixchurn: step 1 of docs/D2-PROPOSAL.md measured on its own, in today's
 * shape: the application's fd is an AF_UNIX socket to the listener's companion
 * and rings are what changes.
 *
 *   unixchurn segment|step1 N PIN PORT
 *
 * Per connection, both variants do what today's set-up does at the level of
 * system calls: the client binds a TCP socket to port 0 and reads its port
 * (the port hold), connects an AF_UNIX socket to the server's abstract
 * companion, makes the writers' socketpair, and sends a hello with two fds;
 * the server accepts, receives, checks the fds (fstat, seals, SO_DOMAIN), and
 * both exchange 1 byte each way through the rings (20 us spin, then tokens on
 * the unix socket), then close everything.
 *   segment  today: a new memfd per connection (2 MiB + 4 KiB, sealed, one page
 *            used), mapped and unmapped by both ends.
 *   step1    a slot of a region made once; the hello still carries the region's
 *            memfd (so an acceptor that never saw it could map it) and the server
 *            maps each region once, known by its inode.
 * Prints the same line as churn. */
#include "spike.h"
#include <sys/stat.h>

#define SEG_BYTES ((2u << 20) + 4096u)
static int variant; /* 0 segment, 1 step1 */
static struct region *reg;
static const uint32_t nslots = 4096;

static void send_hello(int s, uint32_t slot, int fd0, int fd1)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(2 * sizeof(int))];
	} u;
	struct iovec iov = {&slot, sizeof(slot)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			   .msg_controllen = sizeof(u.b)};
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	int fds[2] = {fd0, fd1};
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(h), fds, sizeof(fds));
	if (sendmsg(s, &m, MSG_NOSIGNAL) != sizeof(slot))
		die("send hello");
}

static uint32_t take_hello(int s, int fds[2])
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(2 * sizeof(int))];
	} u;
	uint32_t slot;
	struct iovec iov = {&slot, sizeof(slot)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			   .msg_controllen = sizeof(u.b)};
	if (recvmsg(s, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC) != sizeof(slot))
		die("hello");
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	if (!h || h->cmsg_len != CMSG_LEN(2 * sizeof(int)))
		die("hello fds");
	memcpy(fds, CMSG_DATA(h), 2 * sizeof(int));
	/* today's checks: a sealed memfd of the right size, an AF_UNIX socket */
	struct stat st;
	int dom = 0;
	socklen_t dl = sizeof(dom);
	if (fstat(fds[0], &st) < 0 || fcntl(fds[0], F_GET_SEALS) < 0 || fstat(fds[1], &st) < 0 ||
	    getsockopt(fds[1], SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0 || dom != AF_UNIX)
		die("hello checks");
	return slot;
}

static void server(int port, long n, int cpu, int ready)
{
	pin(cpu);
	struct sockaddr_un u;
	socklen_t ulen;
	abstract_name(&u, &ulen, "osf-spike-u", port);
	int ul = socket(AF_UNIX, SOCK_STREAM, 0);
	if (ul < 0 || bind(ul, (struct sockaddr *)&u, ulen) < 0 || listen(ul, 1024) < 0)
		die("companion");
	(void)!write(ready, "r", 1);
	ino_t mapped = 0;
	for (long k = 0; k < n; k++) {
		int c = accept4(ul, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			die("accept");
		int fds[2];
		uint32_t i = take_hello(c, fds);
		struct slot *s;
		void *seg = NULL;
		if (variant == 0) {
			seg = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
			if (seg == MAP_FAILED)
				die("mmap segment");
			s = seg;
		} else {
			struct stat st;
			fstat(fds[0], &st);
			if (st.st_ino != mapped) {
				reg = mmap(NULL, region_bytes(nslots), PROT_READ | PROT_WRITE, MAP_SHARED,
					   fds[0], 0);
				if (reg == MAP_FAILED)
					die("mmap region");
				mapped = st.st_ino;
			}
			if (i >= nslots)
				die("bad slot");
			s = slot_at(reg, i);
		}
		close(fds[0]);
		struct waker w = {.sleep = sock_token_sleep, .wake = sock_token_wake, .arg = &c, .late = 1,
				  .spin_ns = 20000};
		ring_wait(s, 1, &w);
		ring_put(s, 1, ring_get(s, 1), &w);
		uint32_t was = atomic_fetch_or(&s->state, 2u);
		if (variant == 1 && (was | 2u) == 3)
			slot_give(reg, i);
		if (seg)
			munmap(seg, SEG_BYTES);
		close(fds[1]);
		close(c);
	}
	exit(0);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: unixchurn segment|step1 N PIN PORT\n");
		return 2;
	}
	variant = !strcmp(argv[1], "segment") ? 0 : !strcmp(argv[1], "step1") ? 1 : -1;
	if (variant < 0)
		return 2;
	long n = atol(argv[2]);
	int pinned = atoi(argv[3]), port = atoi(argv[4]);
	int ready[2];
	if (pipe(ready) < 0)
		die("pipe");
	signal(SIGPIPE, SIG_IGN);
	pid_t pid = fork();
	if (pid == 0)
		server(port, n + 1, pinned ? 1 : -1, ready[1]);
	pin(pinned ? 0 : -1);
	int rm = -1;
	if (variant == 1) {
		rm = memfd_create("osf-pair", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (rm < 0 || ftruncate(rm, (off_t)region_bytes(nslots)) < 0 ||
		    fcntl(rm, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
			die("region");
		reg = mmap(NULL, region_bytes(nslots), PROT_READ | PROT_WRITE, MAP_SHARED, rm, 0);
		if (reg == MAP_FAILED)
			die("mmap region");
		reg->nslots = nslots;
	}
	char c;
	if (read(ready[0], &c, 1) != 1)
		die("ready");
	struct sockaddr_un u;
	socklen_t ulen;
	abstract_name(&u, &ulen, "osf-spike-u", port);
	uint64_t *lat = calloc((size_t)n, sizeof(uint64_t));
	struct rusage r0;
	uint64_t t0 = 0;
	for (long k = 0; k <= n; k++) {
		churn_start(k, &r0, &t0);
		uint64_t s0 = now_ns();
		/* the port hold: the application's TCP socket bound to port 0 */
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in me = lo_addr(0);
		socklen_t ml = sizeof(me);
		if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0 ||
		    getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
			die("port hold");
		int wp[2], seg_fd = -1;
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, wp) < 0)
			die("socketpair");
		struct slot *s;
		void *seg = NULL;
		int i = 0;
		if (variant == 0) {
			seg_fd = memfd_create("osf-seg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
			if (seg_fd < 0 || ftruncate(seg_fd, SEG_BYTES) < 0 ||
			    fcntl(seg_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
				die("segment");
			seg = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, seg_fd, 0);
			if (seg == MAP_FAILED)
				die("mmap segment");
			s = seg;
		} else {
			i = slot_take(reg);
			if (i < 0)
				die("no slot");
			s = slot_at(reg, (uint32_t)i);
		}
		s->gen++;
		atomic_store(&s->state, 0);
		for (int d = 0; d < 2; d++) {
			atomic_store(&s->want[d], 0);
			atomic_store(&s->ring[d].head, 0);
			atomic_store(&s->ring[d].tail, 0);
		}
		int cs = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (cs < 0 || connect(cs, (struct sockaddr *)&u, ulen) < 0)
			die("companion connect");
		send_hello(cs, (uint32_t)i, variant == 0 ? seg_fd : rm, wp[1]);
		close(wp[1]);
		struct waker w = {.sleep = sock_token_sleep, .wake = sock_token_wake, .arg = &cs, .late = 1,
				  .spin_ns = 20000};
		ring_put(s, 0, 'x', &w);
		ring_wait(s, 0, &w);
		if (ring_get(s, 0) != 'x')
			die("bad reply");
		uint32_t was = atomic_fetch_or(&s->state, 1u);
		if (variant == 1 && (was | 1u) == 3)
			slot_give(reg, (uint32_t)i);
		if (seg) {
			munmap(seg, SEG_BYTES);
			close(seg_fd);
		}
		close(wp[0]);
		close(cs);
		close(fd);
		if (k)
			lat[k - 1] = now_ns() - s0;
	}
	churn_report(argv[1], pinned, n, t0, now_ns(), &r0, lat, 1, pid);
	return 0;
}
