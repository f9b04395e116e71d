/* sigclose PORT SECONDS [raw]: a SIGALRM handler, run every 50 µs by an
 * interval timer, acts on an offloaded connection while the main thread
 * waits on it in epoll_wait, poll or select, round after round for
 * SECONDS: it closes it, deletes it from the epoll, modifies its
 * registration, or connects a new socket and adds it to the epoll. Under
 * osf those calls take the locks a wait holds while it collects and arms
 * epoll items (selectmux/): a handler landing there waited for its
 * own thread for ever. With "raw" the handler is installed through libc's
 * own sigaction, behind osf's back, and only closes, during epoll_wait
 * (no trampoline: osf then defers the close's epoll bookkeeping, and
 * cannot tell a poll that a handler ran).
 *
 * Each round makes a connection, checks its bytes, registers both ends in
 * an epoll (data: round and fd), and waits until the handler acted (the
 * handler acts only while the main thread is at its wait call, victim
 * armed around it, and only when the signal interrupted the call itself,
 * not the program's own code around it: in_program). Then,
 * as with kernel TCP: the handler's call returned 0; the interrupted wait
 * returned -1 with EINTR or events, never POLLNVAL or EBADF for a closed
 * fd; after a close the fd number is free (the next socket gets it), the
 * peer reads EOF, and the epoll never reports the fd again; after a DEL
 * the epoll does not report it and a second DEL is ENOENT; after a MOD to
 * EPOLLOUT the epoll reports it writable with the new data and an ADD is
 * EEXIST; the handler's connection carries bytes and its epoll
 * registration reports them. Prints "rounds N epoll E poll P select S";
 * exits 1 on any difference. The caller bounds the run (a hang is a
 * failure). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

enum { A_CLOSE, A_DEL, A_MOD, A_CONNECT, A_N };

static volatile sig_atomic_t victim = -1, action, acted, result, made = -1;
static int ep;
static uint64_t mod_tag;
static struct sockaddr_in addr;

/* in_program reports whether the signal interrupted this program's own
 * code (its text, PLT stubs included) rather than a call it made: there
 * a close lands before the wait call starts or after it returned, where
 * the kernel too answers POLLNVAL or EBADF. The handler acts only inside
 * the call (osf's part of it, libc's, or the kernel's wait). On a busy
 * host the main thread is often preempted right after arming victim,
 * and the pending signal then runs on its resumption, outside the call.
 * Without osf (the bare run), libc's wrapper around the system call is
 * outside it too: the kernel's wait itself must have been interrupted
 * (the instruction at or before the saved IP is `syscall`), else a close
 * before the system call is the kernel's EBADF (seen once in 722 rounds
 * of select on a loaded host). */
static int under_osf;

static int in_program(const void *ucv)
{
#if defined(__x86_64__)
	extern char __executable_start[], etext[];
	const ucontext_t *uc = ucv;
	uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	const unsigned char *p = (const unsigned char *)ip;

	if (ip >= (uintptr_t)__executable_start && ip < (uintptr_t)etext)
		return 1;
	return !under_osf && !(p[-2] == 0x0f && p[-1] == 0x05) &&
	       !(p[0] == 0x0f && p[1] == 0x05);
#else
	(void)ucv;
	return 0;
#endif
}

static void on_alarm(int sig, siginfo_t *si, void *uc)
{
	int saved = errno, fd = victim;
	struct epoll_event ev;

	(void)sig;
	(void)si;
	if (fd < 0 || in_program(uc)) {
		errno = saved;
		return;
	}
	victim = -1;
	switch (action) {
	case A_CLOSE:
		result = close(fd) ? errno : 0;
		break;
	case A_DEL:
		result = epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) ? errno : 0;
		break;
	case A_MOD:
		ev.events = EPOLLIN | EPOLLOUT;
		ev.data.u64 = mod_tag;
		result = epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) ? errno : 0;
		break;
	case A_CONNECT:
		made = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(made, (struct sockaddr *)&addr, sizeof addr) ||
		    write(made, "hi", 2) != 2) {
			result = errno;
			break;
		}
		ev.events = EPOLLIN;
		ev.data.u64 = mod_tag;
		result = epoll_ctl(ep, EPOLL_CTL_ADD, made, &ev) ? errno : 0;
		break;
	}
	acted = 1;
	errno = saved;
}

static int fail(const char *what, long round)
{
	fprintf(stderr, "sigclose: round %ld: %s (errno %d %s)\n", round, what,
		errno, strerror(errno));
	return 1;
}

static void timer(long us)
{
	struct itimerval it = {{0, us}, {0, us}};

	setitimer(ITIMER_REAL, &it, NULL);
}

/* has reports whether the epoll reports data tag with all of events
 * within ms. */
static int has(uint64_t tag, uint32_t events, int ms)
{
	struct epoll_event out[8];
	int n = epoll_wait(ep, out, 8, ms), i;

	for (i = 0; i < n; i++)
		if (out[i].data.u64 == tag && (out[i].events & events) == events)
			return 1;
	return 0;
}

/* after checks what the handler's action left, as kernel TCP leaves it. */
static int after(int l, int srv, int cli, uint64_t tag, long round)
{
	char buf[16];
	int fd, acc;

	if (result) {
		errno = result;
		return fail("the handler's call failed", round);
	}
	switch (action) {
	case A_CLOSE:
		/* The number is free: the lowest, as srv was the highest. */
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd != srv)
			return fail("the closed fd's number is not free", round);
		close(fd);
		if (read(cli, buf, sizeof buf) != 0)
			return fail("the peer did not read EOF", round);
		if (has(tag, 0, 0))
			return fail("epoll reported the closed fd", round);
		if (epoll_ctl(ep, EPOLL_CTL_DEL, srv, NULL) == 0 || errno != EBADF)
			return fail("EPOLL_CTL_DEL of the closed fd: not EBADF", round);
		break;
	case A_DEL:
		if (epoll_ctl(ep, EPOLL_CTL_DEL, srv, NULL) == 0 || errno != ENOENT)
			return fail("a second EPOLL_CTL_DEL: not ENOENT", round);
		if (write(cli, "x", 1) != 1 || has(tag, 0, 10))
			return fail("epoll reported the deleted fd", round);
		if (read(srv, buf, sizeof buf) != 1 || buf[0] != 'x')
			return fail("bytes after DEL", round);
		close(srv);
		break;
	case A_MOD:
		if (!has(mod_tag, EPOLLOUT, 100))
			return fail("epoll did not report the modified fd writable", round);
		if (epoll_ctl(ep, EPOLL_CTL_ADD, srv, &(struct epoll_event){EPOLLIN, {0}}) == 0 ||
		    errno != EEXIST)
			return fail("EPOLL_CTL_ADD after MOD: not EEXIST", round);
		epoll_ctl(ep, EPOLL_CTL_DEL, srv, NULL);
		close(srv);
		break;
	case A_CONNECT:
		if ((acc = accept(l, NULL, NULL)) < 0 || read(acc, buf, sizeof buf) != 2 ||
		    memcmp(buf, "hi", 2) || write(acc, "yo", 2) != 2)
			return fail("the handler's connection: bytes", round);
		if (!has(mod_tag, EPOLLIN, 1000))
			return fail("epoll did not report the handler's connection", round);
		if (read(made, buf, sizeof buf) != 2 || memcmp(buf, "yo", 2))
			return fail("the handler's connection: reply", round);
		epoll_ctl(ep, EPOLL_CTL_DEL, made, NULL);
		close(made);
		close(acc);
		made = -1;
		epoll_ctl(ep, EPOLL_CTL_DEL, srv, NULL);
		close(srv);
		break;
	}
	if (epoll_ctl(ep, EPOLL_CTL_DEL, cli, NULL))
		return fail("EPOLL_CTL_DEL cli", round);
	close(cli);
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = {.sa_sigaction = on_alarm, .sa_flags = SA_RESTART | SA_SIGINFO};
	int (*act)(int, const struct sigaction *, struct sigaction *) = sigaction;
	long round = 0, by[3] = {0, 0, 0};
	int l, one = 1, raw = argc == 4 && !strcmp(argv[3], "raw");
	time_t end;

	if (argc != 3 && !raw)
		return 2;
	under_osf = dlsym(RTLD_DEFAULT, "qsock_readable") != NULL;
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons(atoi(argv[1]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&addr, sizeof addr) || listen(l, 8))
		return fail("listen", 0);
	ep = epoll_create1(0);
	if (raw) { /* libc's own sigaction: osf does not see the handler */
		void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
		act = libc ? (int (*)(int, const struct sigaction *,
				      struct sigaction *))dlsym(libc, "sigaction")
			   : NULL;
		if (!act)
			return fail("libc's sigaction", 0);
	}
	act(SIGALRM, &sa, NULL);
	end = time(NULL) + atoi(argv[2]);
	for (round = 0; time(NULL) < end; round++) {
		struct epoll_event ev, out[8];
		uint64_t tag;
		char buf[16];
		int cli, srv, mode = raw ? 0 : (int)(round % 3), i, n, spins;

		cli = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(cli, (struct sockaddr *)&addr, sizeof addr) ||
		    (srv = accept(l, NULL, NULL)) < 0)
			return fail("connect", round);
		if (write(cli, "ping", 4) != 4 || read(srv, buf, sizeof buf) != 4 ||
		    memcmp(buf, "ping", 4))
			return fail("bytes", round);
		tag = (uint64_t)round << 32 | (uint32_t)srv;
		mod_tag = (uint64_t)round << 32 | 0xabcdu;
		ev.events = EPOLLIN;
		ev.data.u64 = tag;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, srv, &ev))
			return fail("epoll_ctl srv", round);
		ev.data.u64 = (uint64_t)round << 32 | (uint32_t)cli;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cli, &ev))
			return fail("epoll_ctl cli", round);
		action = raw ? A_CLOSE : (int)(round / 3 % A_N);
		acted = 0;
		timer(50);
		for (spins = 0; !acted; spins++) {
			if (spins > 100000)
				return fail("the handler never acted", round);
			if (mode == 0) {
				victim = srv; /* armed only around the wait (ARM) */
				n = epoll_wait(ep, out, 8, 1);
				victim = -1;
				for (i = 0; i < n; i++)
					if (out[i].data.u64 == tag)
						return fail("epoll reported the idle srv", round);
			} else if (mode == 1) {
				struct pollfd pf[2] = {{cli, POLLIN, 0}, {srv, POLLIN, 0}};
				victim = srv;
				n = poll(pf, 2, 1);
				victim = -1;
				if (n > 0)
					return fail(pf[1].revents & POLLNVAL
							    ? "poll said POLLNVAL for the fd its handler closed"
							    : "poll reported an idle fd",
						    round);
			} else {
				fd_set r;
				struct timeval tv = {0, 1000};
				FD_ZERO(&r);
				FD_SET(cli, &r);
				FD_SET(srv, &r);
				victim = srv;
				n = select(srv + 1, &r, NULL, NULL, &tv);
				victim = -1;
				if (n < 0 && errno == EBADF)
					return fail("select said EBADF for the fd its handler closed", round);
				if (n > 0)
					return fail("select reported an idle fd", round);
			}
			if (n < 0 && errno != EINTR)
				return fail("wait", round);
		}
		timer(0);
		victim = -1;
		by[mode]++;
		if (after(l, srv, cli, tag, round))
			return 1;
	}
	printf("rounds %ld epoll %ld poll %ld select %ld\n", round, by[0], by[1], by[2]);
	return 0;
}
