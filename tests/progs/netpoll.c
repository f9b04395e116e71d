//go:build osf_make

/* netpoll: several threads wait on one edge-triggered epoll at once, as
 * Go's runtime netpoller does, over many connections between two
 * processes; a lost wake-up is a hang, reported as a stall.
 *
 *   netpoll PORT [conns=16] [rounds=300] [workers=2] [spinners=1]
 *           [maxev=128] [wait=pwait|wait|pwait2] [big=16] [stall=8]
 *           [seconds=60] [go=signal|now]
 *
 * The process listens on 127.0.0.1:PORT, forks a client that makes
 * `conns` connections, accepts them, and prints
 *
 *   ready server PID client PID
 *
 * then (go=signal, the default) waits for SIGUSR1 before any data moves
 * (so that a test may look at the transports first; at most 30 s).
 * Each process runs the same machinery, Go's: every socket non-blocking
 * and registered once in one epoll (epoll_create1(EPOLL_CLOEXEC)) with
 * EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, an eventfd registered for
 * wake-ups; one thread blocks in the wait with timeout -1 and hands the
 * events over; `workers` threads move the data of a runnable connection
 * until EAGAIN, and when they find nothing to run make one non-blocking
 * wait (timeout 0, at most `maxev` events) before they sleep; `spinners`
 * threads make a burst of non-blocking waits whenever work was handed
 * out, then sleep too. Nothing ever polls on a timer: once a connection
 * parks (its reads and writes got EAGAIN), only an event the epoll
 * reports makes it runnable again (Go's pollDesc: an event that comes
 * while it runs is kept, so the runner looks again before it parks).
 *
 * The client ping-pongs `rounds` messages per connection (a header
 * {length, sequence} and a payload whose bytes are a function of the
 * connection, sequence and offset), 64 bytes of payload, and every
 * `big`-th one from 4 KiB to 1.25 MiB, more than a ring holds; the
 * server checks each and echoes it, the client checks the echo. A
 * connection of the client that completes no round trip for `stall`
 * seconds has stalled: both processes print each connection's state (the
 * runner's flags, what is buffered, and poll(2) on the socket: readiness
 * the epoll never reported), and when NETPOLL_OSFSTAT names osfstat it is
 * run on both processes (the rings). The run is bounded by `seconds`. The
 * client prints
 *
 *   result ok conns N rounds N bytes N rtt_us p50 N p99 N max N
 *   result stalled conn I ...
 *
 * and the process exits 0 only when both sides finished and verified
 * every byte.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "progs.h"

#define HDR 8
#define BIG_MIN 4096
#define BIG_SPAN (1280 * 1024 - BIG_MIN)
#define SMALL 64
#define MAXEV 128

enum { W_WAIT, W_PWAIT, W_PWAIT2 };

static int nconns = 16, rounds = 300, nworkers = 2, nspinners = 1;
static int maxev = MAXEV, waitkind = W_PWAIT, big = 16, stall_s = 8;
static int seconds = 60, go_now, eager, shortread;
static volatile int blocking; /* the blocker is in its wait (Go's
				 sched.lastpoll == 0) */
static int is_client, ep, evfd;
static pid_t server_pid, client_pid;
static volatile int stop, failed;

struct conn {
	int fd, idx;
	pthread_mutex_t mu;
	int parked;  /* waiting for an event: nobody runs it */
	int ready;   /* an event came since its runner last looked */
	int events;  /* events reported for it, in all */
	unsigned char *in;
	size_t inlen, incap;
	unsigned char *out;
	size_t outoff, outlen, outcap;
	uint32_t seq; /* client: round trips done; server: messages echoed */
	int done;
	long last_ms; /* the last progress (client: a round trip) */
	long sent_ns;
	uint64_t bytes;
};

static struct conn *conns;
static long *rtt_us;
static int nrtt, ndone;
static pthread_mutex_t stat_mu = PTHREAD_MUTEX_INITIALIZER;

/* The run queue, and the count of hand-outs the spinners wake for. */
static pthread_mutex_t rq_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rq_cv = PTHREAD_COND_INITIALIZER;
static struct conn **rq;
static int rq_head, rq_len;
static unsigned long handouts;

static long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

static long now_ms(void) { return now_ns() / 1000000; }

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("%s: ", is_client ? "client" : "server");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
	failed = 1;
	stop = 1;
}

static uint8_t pat(int idx, uint32_t seq, size_t i)
{
	return (uint8_t)(i * 31 + seq * 7 + (uint32_t)idx * 13 + (i >> 8));
}

static uint32_t msg_len(int idx, uint32_t seq)
{
	if (big && seq % (uint32_t)big == (uint32_t)big - 1)
		return BIG_MIN + (uint32_t)((seq * 7919u + (uint32_t)idx * 104729u) % BIG_SPAN);
	return SMALL;
}

static void enqueue_locked(struct conn *c)
{
	rq[(rq_head + rq_len) % nconns] = c;
	rq_len++;
	handouts++;
	pthread_cond_broadcast(&rq_cv);
}

/* deliver hands an event for c over: the runner sees it, or c is
 * runnable again (Go's netpollready). */
static void deliver(struct conn *c)
{
	int wake;

	pthread_mutex_lock(&c->mu);
	c->ready = 1;
	c->events++;
	wake = c->parked;
	c->parked = 0;
	pthread_mutex_unlock(&c->mu);
	if (wake) {
		pthread_mutex_lock(&rq_mu);
		enqueue_locked(c);
		pthread_mutex_unlock(&rq_mu);
	}
}

static int ep_wait(struct epoll_event *ev, int max, int timeout)
{
	struct timespec ts = {0, 0};

	switch (waitkind) {
	case W_WAIT:
		return epoll_wait(ep, ev, max, timeout);
	case W_PWAIT2:
		return epoll_pwait2(ep, ev, max, timeout < 0 ? NULL : &ts, NULL);
	default:
		return epoll_pwait(ep, ev, max, timeout, NULL);
	}
}

/* netpoll waits once and hands the events over; the number of events. */
static int netpoll(int max, int timeout)
{
	struct epoll_event ev[MAXEV];
	int n = ep_wait(ev, max, timeout), i;

	if (n < 0) {
		if (errno != EINTR)
			fail("epoll wait: %s", strerror(errno));
		return 0;
	}
	for (i = 0; i < n; i++) {
		if (ev[i].data.u64 == UINT64_MAX) {
			uint64_t v;
			if (!stop) /* the stop's stays for every waiter */
				(void)!read(evfd, &v, sizeof v);
			continue;
		}
		if (ev[i].data.u64 >= (uint64_t)nconns) {
			fail("epoll reported unknown data %llu", (unsigned long long)ev[i].data.u64);
			continue;
		}
		deliver(&conns[ev[i].data.u64]);
	}
	return n;
}

static void grow(unsigned char **b, size_t *cap, size_t need)
{
	if (*cap >= need)
		return;
	while (*cap < need)
		*cap = *cap ? *cap * 2 : 65536;
	*b = realloc(*b, *cap);
	if (!*b)
		die("realloc");
}

/* put_msg appends message seq of c to its output. */
static void put_msg(struct conn *c, uint32_t seq)
{
	uint32_t len = msg_len(c->idx, seq), i;
	unsigned char *p;

	if (c->outoff == c->outlen)
		c->outoff = c->outlen = 0;
	grow(&c->out, &c->outcap, c->outlen + HDR + len);
	p = c->out + c->outlen;
	memcpy(p, &len, 4);
	memcpy(p + 4, &seq, 4);
	for (i = 0; i < len; i++)
		p[HDR + i] = pat(c->idx, seq, i);
	c->outlen += HDR + len;
}

/* take_msgs checks the complete messages in c's input: the server echoes
 * them, the client counts a round trip and sends the next. */
static void take_msgs(struct conn *c)
{
	size_t off = 0;

	while (!c->done && c->inlen - off >= HDR) {
		unsigned char *p = c->in + off;
		uint32_t len, seq, i;
		memcpy(&len, p, 4);
		memcpy(&seq, p + 4, 4);
		if (seq != c->seq || len != msg_len(c->idx, seq)) {
			fail("conn %d: message %u of %u bytes, want %u of %u", c->idx,
			     seq, len, c->seq, msg_len(c->idx, c->seq));
			return;
		}
		if (c->inlen - off < HDR + (size_t)len)
			break;
		for (i = 0; i < len; i++)
			if (p[HDR + i] != pat(c->idx, seq, i)) {
				fail("conn %d: message %u byte %u is %u, want %u", c->idx,
				     seq, i, p[HDR + i], pat(c->idx, seq, i));
				return;
			}
		off += HDR + len;
		c->seq++;
		c->last_ms = now_ms();
		if (!is_client) {
			put_msg(c, seq);
			continue;
		}
		pthread_mutex_lock(&stat_mu);
		rtt_us[nrtt++] = (now_ns() - c->sent_ns) / 1000;
		pthread_mutex_unlock(&stat_mu);
		if (c->seq == (uint32_t)rounds) {
			c->done = 1;
			if (shutdown(c->fd, SHUT_WR) < 0)
				fail("conn %d: shutdown: %s", c->idx, strerror(errno));
		} else {
			c->sent_ns = now_ns();
			put_msg(c, c->seq);
		}
	}
	memmove(c->in, c->in + off, c->inlen - off);
	c->inlen -= off;
}

/* step moves c's data until its reads and writes would block; 1 when the
 * connection is finished (the client: every round trip; the server: the
 * client's end, everything echoed). */
static int step(struct conn *c)
{
	int drained = 0;

	for (;;) {
		int moved = 0;
		size_t ask;
		ssize_t r = -1;
		grow(&c->in, &c->incap, c->inlen + 65536);
		ask = c->incap - c->inlen;
		errno = EAGAIN;
		if (!drained)
			r = read(c->fd, c->in + c->inlen, ask);
		if (r > 0 && shortread && (size_t)r < ask)
			drained = 1; /* a short read drained it: wait for the edge */
		if (r > 0) {
			c->inlen += (size_t)r;
			c->bytes += (uint64_t)r;
			moved = 1;
			take_msgs(c);
			if (failed)
				return 1;
		} else if (r == 0) {
			if (is_client) {
				if (!c->done)
					fail("conn %d: end of file after %u round trips", c->idx, c->seq);
				return 1;
			}
			if (c->inlen)
				fail("conn %d: end of file in a message", c->idx);
			c->done = 1;
		} else if (errno != EAGAIN) {
			fail("conn %d: read: %s", c->idx, strerror(errno));
			return 1;
		}
		while (c->outoff < c->outlen) {
			ssize_t w = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
			if (w < 0) {
				if (errno != EAGAIN)
					fail("conn %d: write: %s", c->idx, strerror(errno));
				break;
			}
			c->outoff += (size_t)w;
			c->bytes += (uint64_t)w;
			moved = 1;
		}
		if (failed)
			return 1;
		if (c->done && c->outoff == c->outlen)
			return 1;
		if (!moved)
			return 0;
	}
}

/* run runs c until it must wait for an event, then parks it (unless one
 * came meanwhile: then it looks again, as a goroutine whose pollDesc says
 * ready does not park). */
static void run(struct conn *c)
{
	for (;;) {
		pthread_mutex_lock(&c->mu);
		c->ready = 0;
		pthread_mutex_unlock(&c->mu);
		if (step(c)) {
			pthread_mutex_lock(&stat_mu);
			ndone++;
			if (ndone == nconns) {
				uint64_t one = 1;
				stop = 1;
				(void)!write(evfd, &one, sizeof one); /* netpollBreak */
			}
			pthread_mutex_unlock(&stat_mu);
			pthread_mutex_lock(&rq_mu);
			pthread_cond_broadcast(&rq_cv);
			pthread_mutex_unlock(&rq_mu);
			return;
		}
		pthread_mutex_lock(&c->mu);
		if (!c->ready) {
			c->parked = 1;
			pthread_mutex_unlock(&c->mu);
			return;
		}
		pthread_mutex_unlock(&c->mu);
	}
}

static struct conn *take(void)
{
	struct conn *c = NULL;

	pthread_mutex_lock(&rq_mu);
	if (rq_len) {
		c = rq[rq_head];
		rq_head = (rq_head + 1) % nconns;
		rq_len--;
	}
	pthread_mutex_unlock(&rq_mu);
	return c;
}

/* sleep_for_work sleeps until the run queue has work or the run stops,
 * never polling: a timeout only lets it look at stop. */
static void sleep_for_work(unsigned long *seen)
{
	pthread_mutex_lock(&rq_mu);
	while (!stop && !rq_len && (!seen || *seen == handouts)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec++;
		pthread_cond_timedwait(&rq_cv, &rq_mu, &ts);
	}
	if (seen)
		*seen = handouts;
	pthread_mutex_unlock(&rq_mu);
}

/* blocker waits with no timeout (Go's netpoll(-1)) until the run stops. */
static void *blocker(void *arg)
{
	(void)arg;
	while (!stop) {
		__atomic_store_n(&blocking, 1, __ATOMIC_SEQ_CST);
		netpoll(MAXEV, -1);
		__atomic_store_n(&blocking, 0, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

/* nbpoll is a non-blocking wait, made as Go's scheduler makes it: only
 * while no thread blocks in the wait (a check that races with the
 * blocker, as Go's does), or always (eager=1). */
static int nbpoll(void)
{
	if (!eager && __atomic_load_n(&blocking, __ATOMIC_SEQ_CST))
		return 0;
	return netpoll(maxev, 0);
}

/* worker runs connections; with none to run it makes one non-blocking
 * wait (Go's findRunnable), then sleeps until work is handed out. */
static void *worker(void *arg)
{
	(void)arg;
	while (!stop) {
		struct conn *c = take();
		if (c) {
			run(c);
			continue;
		}
		nbpoll();
		c = take();
		if (c)
			run(c);
		else
			sleep_for_work(NULL);
	}
	return NULL;
}

/* spinner makes a burst of non-blocking waits each time work was handed
 * out (Go's spinning Ms), then sleeps. */
static void *spinner(void *arg)
{
	unsigned long seen = 0;

	(void)arg;
	while (!stop) {
		int i;
		sleep_for_work(&seen);
		for (i = 0; i < 8 && !stop; i++) {
			if (nbpoll() == 0)
				sched_yield();
		}
	}
	return NULL;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return (x > y) - (x < y);
}

static const char *rtt_summary(void)
{
	static char b[128];
	long p50, p99, max;
	int j;

	if (!nrtt)
		return "none";
	qsort(rtt_us, (size_t)nrtt, sizeof(long), cmp_long);
	max = rtt_us[nrtt - 1];
	p50 = rtt_us[nrtt / 2];
	j = nrtt * 99 / 100;
	p99 = rtt_us[j < nrtt ? j : nrtt - 1];
	snprintf(b, sizeof b, "p50 %ld p99 %ld max %ld", p50, p99, max);
	return b;
}

/* report prints every unfinished connection's state, and runs osfstat. */
static void report(void)
{
	const char *osfstat = getenv("NETPOLL_OSFSTAT");
	int i;

	for (i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];
		struct pollfd p = {c->fd, POLLIN | POLLOUT | POLLRDHUP, 0};
		if (c->done)
			continue;
		(void)poll(&p, 1, 0);
		printf("%s conn %d fd %d: seq %u done %d parked %d ready %d events %d "
		       "in %zu out %zu idle %ld ms poll 0x%x\n",
		       is_client ? "client" : "server", i, c->fd, c->seq, c->done,
		       c->parked, c->ready, c->events, c->inlen, c->outlen - c->outoff,
		       now_ms() - c->last_ms, p.revents);
	}
	if (osfstat && is_client) {
		char cmd[512];
		snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD %s -p %d; env -u LD_PRELOAD %s -p %d",
			 osfstat, (int)client_pid, osfstat, (int)server_pid);
		fflush(stdout);
		(void)!system(cmd);
	}
	fflush(stdout);
}

static volatile sig_atomic_t peer_stalled, go_sig;
static void on_usr2(int sig) { (void)sig; peer_stalled = 1; }
static void on_usr1(int sig) { (void)sig; go_sig = 1; }

/* watch ends the run at a stall or at the deadline (the client's
 * connections that made no round trip for stall seconds). */
static void watch(long start)
{
	while (!stop) {
		long now = now_ms();
		int i, stalled = -1;
		usleep(50000);
		if (is_client)
			for (i = 0; i < nconns; i++)
				if (!conns[i].done && now - conns[i].last_ms > stall_s * 1000L) {
					stalled = i;
					break;
				}
		if (stalled >= 0) {
			printf("result stalled conn %d after %u round trips (%d of %d "
			       "connections done)\n",
			       stalled, conns[stalled].seq, ndone, nconns);
			fflush(stdout);
			report();
			kill(server_pid, SIGUSR2);
			usleep(200000); /* the server's report, before the end */
			failed = 1;
			stop = 1;
		} else if (peer_stalled) {
			report();
			failed = 1;
			stop = 1;
		} else if (now - start > (seconds + (is_client ? 0 : 5)) * 1000L) {
			printf("result deadline: %d of %d connections done after %d s\n",
			       ndone, nconns, seconds);
			report();
			failed = 1;
			stop = 1;
		}
	}
}

static void setup_epoll(void)
{
	struct epoll_event e;
	int i;

	ep = epoll_create1(EPOLL_CLOEXEC);
	evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ep < 0 || evfd < 0)
		die("epoll_create1/eventfd");
	e.events = EPOLLIN;
	e.data.u64 = UINT64_MAX;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, evfd, &e) < 0)
		die("epoll_ctl eventfd");
	for (i = 0; i < nconns; i++) {
		int fl = fcntl(conns[i].fd, F_GETFL);
		if (fl < 0 || fcntl(conns[i].fd, F_SETFL, fl | O_NONBLOCK) < 0)
			die("fcntl");
		e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		e.data.u64 = (uint64_t)i;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &e) < 0)
			die("epoll_ctl");
	}
}

/* side runs one process's part; 0 when it finished and verified all. */
static int side(void)
{
	pthread_t t[16];
	int nt = 0, i;
	long start = now_ms();

	setup_epoll();
	rq = calloc((size_t)nconns, sizeof(*rq));
	rtt_us = calloc((size_t)nconns * (size_t)rounds + 1, sizeof(long));
	if (!rq || !rtt_us)
		die("calloc");
	pthread_mutex_lock(&rq_mu);
	for (i = 0; i < nconns; i++) {
		conns[i].last_ms = start;
		if (is_client) {
			conns[i].sent_ns = now_ns();
			put_msg(&conns[i], 0);
		}
		enqueue_locked(&conns[i]);
	}
	pthread_mutex_unlock(&rq_mu);
	if (pthread_create(&t[nt++], NULL, blocker, NULL))
		die("pthread_create");
	for (i = 0; i < nworkers; i++)
		if (pthread_create(&t[nt++], NULL, worker, NULL))
			die("pthread_create");
	for (i = 0; i < nspinners; i++)
		if (pthread_create(&t[nt++], NULL, spinner, NULL))
			die("pthread_create");
	watch(start);
	{
		uint64_t one = 1;
		(void)!write(evfd, &one, sizeof one);
	}
	pthread_mutex_lock(&rq_mu);
	pthread_cond_broadcast(&rq_cv);
	pthread_mutex_unlock(&rq_mu);
	for (i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	if (failed)
		return 1;
	if (is_client) {
		uint64_t bytes = 0;
		for (i = 0; i < nconns; i++)
			bytes += conns[i].bytes;
		printf("result ok conns %d rounds %d bytes %llu rtt_us %s\n", nconns,
		       rounds, (unsigned long long)bytes, rtt_summary());
	}
	return 0;
}

static int arg(const char *a, const char *name, int *v)
{
	size_t n = strlen(name);

	if (strncmp(a, name, n) || a[n] != '=')
		return 0;
	*v = atoi(a + n + 1);
	return 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int l, i, one = 1, status, gopipe[2];
	char b;

	if (argc < 2) {
		fprintf(stderr, "usage: netpoll PORT [key=value...]\n");
		return 2;
	}
	for (i = 2; i < argc; i++) {
		const char *a = argv[i];
		if (arg(a, "conns", &nconns) || arg(a, "rounds", &rounds) ||
		    arg(a, "workers", &nworkers) || arg(a, "spinners", &nspinners) ||
		    arg(a, "maxev", &maxev) || arg(a, "big", &big) ||
		    arg(a, "stall", &stall_s) || arg(a, "seconds", &seconds) ||
		    arg(a, "eager", &eager) || arg(a, "shortread", &shortread))
			continue;
		if (!strcmp(a, "wait=wait"))
			waitkind = W_WAIT;
		else if (!strcmp(a, "wait=pwait"))
			waitkind = W_PWAIT;
		else if (!strcmp(a, "wait=pwait2"))
			waitkind = W_PWAIT2;
		else if (!strcmp(a, "go=now"))
			go_now = 1;
		else if (strcmp(a, "go=signal")) {
			fprintf(stderr, "netpoll: unknown argument %s\n", a);
			return 2;
		}
	}
	if (nconns < 1 || nconns > 4096 || rounds < 1 || nworkers < 1 ||
	    nworkers > 8 || nspinners < 0 || nspinners > 6 || maxev < 1 ||
	    maxev > MAXEV || big < 0 || stall_s < 1 || seconds < 1) {
		fprintf(stderr, "netpoll: argument out of range\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGUSR2, on_usr2);
	signal(SIGUSR1, on_usr1);
	conns = calloc((size_t)nconns, sizeof(*conns));
	if (!conns)
		die("calloc");
	for (i = 0; i < nconns; i++) {
		conns[i].idx = i;
		pthread_mutex_init(&conns[i].mu, NULL);
	}
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)atoi(argv[1]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, nconns) < 0)
		die("listen");
	if (pipe(gopipe) < 0)
		die("pipe");
	server_pid = getpid();
	client_pid = fork();
	if (client_pid < 0)
		die("fork");
	if (client_pid == 0) {
		close(l);
		close(gopipe[1]);
		is_client = 1;
		client_pid = getpid();
		for (i = 0; i < nconns; i++) {
			conns[i].fd = socket(AF_INET, SOCK_STREAM, 0);
			if (conns[i].fd < 0 ||
			    connect(conns[i].fd, (struct sockaddr *)&sa, sizeof sa) < 0)
				die("connect");
		}
		if (read(gopipe[0], &b, 1) != 1) /* the server says go */
			return 2;
		return side();
	}
	close(gopipe[0]);
	for (i = 0; i < nconns; i++)
		if ((conns[i].fd = accept(l, NULL, NULL)) < 0)
			die("accept");
	printf("ready server %d client %d\n", (int)server_pid, (int)client_pid);
	for (i = 0; !go_now && !go_sig && i < 3000; i++)
		usleep(10000);
	if (write(gopipe[1], "g", 1) != 1)
		die("write");
	status = side();
	for (i = 0; i < nconns; i++)
		close(conns[i].fd);
	if (waitpid(client_pid, &i, 0) < 0 || !WIFEXITED(i) || WEXITSTATUS(i))
		status = 1;
	if (!status)
		printf("server ok\n");
	return status;
}
