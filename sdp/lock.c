/* lock.c: the slow path of the segment locks (lock.h). */
#include "lock.h"

#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

__thread uint32_t osf_lock_tls_tid __attribute__((tls_model(OSF_LOCK_TLS_MODEL)));

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long futex_shared(uint32_t *w, int op, uint32_t val, int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	return syscall(SYS_futex, w, op, val, ms >= 0 ? &ts : NULL, NULL, 0);
}

void osf_lock_wake(uint32_t *w) { futex_shared(w, FUTEX_WAKE, INT_MAX, -1); }

__attribute__((section(".text.hot.osf_fork"))) /* OSF_FORK_TEXT, fdt.h */
void osf_lock_after_fork(void) { osf_lock_tls_tid = 0; }

/* Holder states (holder_state). */
enum { HOLDER_RUNS, HOLDER_STOPPED, HOLDER_GONE };

/* holder_state tells whether thread tid runs, is stopped (SIGSTOP, job
 * control, a debugger: it will continue) or is gone: it does not exist,
 * or it is dead and not yet reaped (a SIGKILLed child stays a zombie
 * while its parent, the other writer, waits for this very lock). The
 * /proc read is only for a holder seen across a whole wait (look). */
static int holder_state(pid_t tid, int look)
{
	char path[48], buf[256], *p;
	ssize_t n;
	int fd;

	/* tid comes from a lock word the peer can write: 0 (a word of only
	 * OSF_LOCK_WAITERS) names no thread, and kill(0, 0) would probe
	 * this process's own group instead. */
	if (tid <= 0)
		return HOLDER_GONE;
	if (kill(tid, 0) < 0 && errno == ESRCH)
		return HOLDER_GONE;
	if (!look)
		return HOLDER_RUNS;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? HOLDER_GONE : HOLDER_RUNS;
	n = osf_sys_read(fd, buf, sizeof(buf) - 1);
	osf_sys_close(fd);
	if (n <= 0)
		return HOLDER_RUNS;
	buf[n] = 0;
	p = strrchr(buf, ')'); /* the name may hold anything but ends here */
	if (!p || p[1] != ' ')
		return HOLDER_RUNS;
	switch (p[2]) {
	case 'Z':
	case 'X':
		return HOLDER_GONE;
	case 'T':
	case 't':
		return HOLDER_STOPPED;
	}
	return HOLDER_RUNS;
}

int osf_lock_holder_gone(uint32_t tid)
{
	int saved = errno, gone = tid != 0 && holder_state((pid_t)tid, 1) == HOLDER_GONE;

	errno = saved;
	return gone;
}

long osf_sock_timeout_ms(int fd, int snd)
{
	struct timeval tv = {0, 0};
	socklen_t len = sizeof(tv);
	int saved = errno;

	if (fd < 0 || osf_sys_getsockopt(fd, SOL_SOCKET, snd ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, &len) < 0 ||
	    (tv.tv_sec == 0 && tv.tv_usec == 0)) {
		errno = saved;
		return -1;
	}
	return tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
}

int osf_lock_slow(uint32_t *w, uint32_t me, const struct osf_lock_wait *how)
{
	long start = 0, limit = -2, now;
	uint32_t seen = 0;
	int spins = 0;

	for (;;) {
		uint32_t cur = __atomic_load_n(w, __ATOMIC_RELAXED), owner;
		int st;
		if (cur == 0) {
			if (__atomic_compare_exchange_n(w, &cur, me, 0,
							__ATOMIC_ACQUIRE,
							__ATOMIC_RELAXED)) {
				*how->since = 0;
				return 0;
			}
			continue;
		}
		owner = cur & ~OSF_LOCK_WAITERS;
		if (owner == me)
			return OSF_LOCK_BROKEN; /* re-entered from a signal handler */
		if (spins++ < 256) {
			__builtin_ia32_pause();
			continue;
		}
		now = now_ms();
		if (!start)
			start = now;
		/* A non-blocking caller looks at once: a sleep before it
		 * knows the holder is stopped can cost it more than the
		 * sleep on a loaded machine (a wake-up 0.1 to 0.5 s late). */
		st = holder_state((pid_t)owner, owner == seen || how->nonblock);
		seen = owner;
		if (st == HOLDER_GONE) {
			if (__atomic_compare_exchange_n(w, &cur, me, 0,
							__ATOMIC_ACQUIRE,
							__ATOMIC_RELAXED)) {
				*how->since = 0;
				return 0;
			}
			continue;
		}
		if (st == HOLDER_STOPPED) {
			/* Not the peer's doing, not a reset: the time it is
			 * stopped does not count against it. */
			*how->since = 0;
			if (how->nonblock)
				return OSF_LOCK_AGAIN;
		} else {
			if (!*how->since)
				*how->since = now;
			if (now - *how->since > OSF_LOCK_STUCK_MS)
				return OSF_LOCK_BROKEN;
			if (how->nonblock && now - start >= OSF_LOCK_NB_WAIT_MS)
				return OSF_LOCK_AGAIN;
		}
		if (!how->nonblock) {
			if (limit == -2)
				limit = osf_sock_timeout_ms(how->timeo_fd, how->sndtimeo);
			if (limit >= 0 && now - start >= limit)
				return OSF_LOCK_AGAIN;
		}
		if (!(cur & OSF_LOCK_WAITERS) &&
		    !__atomic_compare_exchange_n(w, &cur, cur | OSF_LOCK_WAITERS,
						 0, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
			continue;
		futex_shared(w, FUTEX_WAIT, cur | OSF_LOCK_WAITERS,
			     how->nonblock ? 1 : 10);
	}
}
