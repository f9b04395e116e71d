/* wake: what waking a sleeping reader costs, per mechanism (docs/D2-PROPOSAL.md).
 *
 *   wake MECH N PIN
 *
 * Two processes ping-pong one byte N times through the rings of one slot of a
 * shared region; each side always sleeps for the other's byte (no spin). The
 * byte is in the ring; only the wake-up differs:
 *   unix     a 1-byte token on an AF_UNIX socketpair (today's wake socket)
 *   tcp      a 1-byte token on a loopback TCP connection (the proposal's app fd)
 *   futex    FUTEX_WAIT/FUTEX_WAKE on the slot's want word (shared mapping)
 *   eventfd  one eventfd per receiving side
 *   tcpdata  no ring: kernel TCP ping-pong of the byte itself (the baseline)
 * A reader raises its want word, checks the ring again and sleeps; a writer
 * publishes, fences and wakes only if it takes the want word (as osf's wake
 * protocol). Prints rt_p50_us rt_p90_us and CPU per round trip of both sides.
 * With SPIN_US=n in the environment a reader first spins up to n µs on the
 * ring (as OSF_SPIN_US), and sleeps, and so needs a wake-up, only after. */
#include "spike.h"
#include <sys/eventfd.h>

enum { UNIX, TCP, FUTEX, EVENTFD, TCPDATA };
static int mech;
static int fds[2];	/* per side: socket end (unix, tcp) or eventfd to sleep on */
static int wakefd[2];	/* per side: what the other side writes to wake it */
static struct slot *s;
static uint64_t spin_ns;

static void sleep_wait(void *arg, int side)
{
	(void)arg;
	if (mech == FUTEX) {
		if (futex(&s->want[side], FUTEX_WAIT, 1) < 0 && errno != EAGAIN && errno != EINTR)
			die("futex wait");
		return;
	}
	uint64_t v;
	ssize_t k = mech == EVENTFD ? read(fds[side], &v, 8) : recv(fds[side], &v, 1, 0);
	if (k <= 0)
		die("sleep");
}

static void wake(void *arg, int side)
{
	(void)arg;
	if (mech == FUTEX) {
		futex(&s->want[side], FUTEX_WAKE, 1);
		return;
	}
	uint64_t one = 1;
	ssize_t k = mech == EVENTFD ? write(wakefd[side], &one, 8) : send(wakefd[side], &one, 1, 0);
	if (k <= 0)
		die("wake");
}

static struct waker w = {.sleep = sleep_wait, .wake = wake};

static void tcp_pair(int out[2])
{
	struct sockaddr_in a = lo_addr(0);
	socklen_t al = sizeof(a);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listen");
	out[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(out[0], (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	out[1] = accept(l, NULL, NULL);
	if (out[1] < 0)
		die("accept");
	setsockopt(out[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(out[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	close(l);
}

static void side_b(long n)
{
	for (long k = 0; k < n; k++) {
		unsigned char b;
		if (mech == TCPDATA) {
			if (read(fds[1], &b, 1) != 1 || write(fds[1], &b, 1) != 1)
				die("b io");
			continue;
		}
		ring_wait(s, 1, &w);
		b = ring_get(s, 1);
		ring_put(s, 1, b, &w);
	}
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: wake unix|tcp|futex|eventfd|tcpdata N PIN\n");
		return 2;
	}
	const char *names[] = {"unix", "tcp", "futex", "eventfd", "tcpdata"};
	mech = -1;
	for (int i = 0; i < 5; i++)
		if (!strcmp(argv[1], names[i]))
			mech = i;
	if (mech < 0)
		return 2;
	long n = atol(argv[2]);
	int pinned = atoi(argv[3]);
	if (getenv("SPIN_US"))
		spin_ns = (uint64_t)atol(getenv("SPIN_US")) * 1000;
	w.spin_ns = spin_ns;
	w.late = mech != FUTEX;
	s = mmap(NULL, SLOT_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED)
		die("mmap");
	memset(s, 0, SLOT_BYTES);
	int p[2];
	if (mech == UNIX) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) < 0)
			die("socketpair");
		fds[0] = wakefd[1] = p[0];
		fds[1] = wakefd[0] = p[1];
	} else if (mech == TCP || mech == TCPDATA) {
		tcp_pair(p);
		fds[0] = wakefd[1] = p[0];
		fds[1] = wakefd[0] = p[1];
	} else if (mech == EVENTFD) {
		fds[0] = wakefd[0] = eventfd(0, 0);
		fds[1] = wakefd[1] = eventfd(0, 0);
	}
	uint64_t *rt = calloc((size_t)n, sizeof(uint64_t));
	pid_t pid = fork();
	if (pid == 0) {
		pin(pinned ? 1 : -1);
		side_b(n);
		exit(0);
	}
	pin(pinned ? 0 : -1);
	struct rusage r0, r1, rc;
	usleep(10000);
	getrusage(RUSAGE_SELF, &r0);
	for (long k = 0; k < n; k++) {
		uint64_t t = now_ns();
		unsigned char b = (unsigned char)k;
		if (mech == TCPDATA) {
			if (write(fds[0], &b, 1) != 1 || read(fds[0], &b, 1) != 1)
				die("a io");
		} else {
			ring_put(s, 0, b, &w);
			ring_wait(s, 0, &w);
			if (ring_get(s, 0) != (unsigned char)k)
				die("bad byte");
		}
		rt[k] = now_ns() - t;
	}
	getrusage(RUSAGE_SELF, &r1);
	int st;
	waitpid(pid, &st, 0);
	getrusage(RUSAGE_CHILDREN, &rc);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		die("side b failed");
	qsort(rt, (size_t)n, sizeof(uint64_t), cmp_u64);
	printf("%s spin_us=%lu pin=%d rounds=%ld rt_p50_us=%.1f rt_p90_us=%.1f cpu_a_us=%.1f cpu_b_us=%.1f\n",
	       names[mech], (unsigned long)(spin_ns / 1000), pinned, n, rt[n / 2] / 1e3, rt[n * 9 / 10] / 1e3,
	       (cpu_us(&r1) - cpu_us(&r0)) / (double)n, cpu_us(&rc) / (double)n);
	return 0;
}
