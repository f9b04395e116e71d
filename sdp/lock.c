//go:build osf_make

/* lock.c: the slow path of the segment locks (lock.h). */
#include "lock.h"

#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

__thread uint32_t osf_lock_tls_tid __attribute__((tls_model("initial-exec")));

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

void osf_lock_after_fork(void) { osf_lock_tls_tid = 0; }

/* holder_gone reports whether thread tid no longer runs: it does not exist,
 * or (asked only of a holder seen across a whole wait, as it costs a read
 * of /proc) it is dead and not yet reaped: a SIGKILLed child stays a
 * zombie while its parent, the other writer, waits for this very lock. */
static int holder_gone(pid_t tid, int held_long)
{
	char path[48], buf[256], *p;
	ssize_t n;
	int fd;

	if (kill(tid, 0) < 0 && errno == ESRCH)
		return 1;
	if (!held_long)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	n = osf_sys_read(fd, buf, sizeof(buf) - 1);
	osf_sys_close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')'); /* the name may hold anything but ends here */
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* osf_lock_slow waits for a segment lock. A holder that no longer exists
 * is replaced; one that holds it impossibly long means the peer wrote the
 * lock word: -1, the connection is broken. */
int osf_lock_slow(uint32_t *w, uint32_t me)
{
	uint32_t stuck_owner = 0;
	long stuck_since = 0;
	int spins = 0;

	for (;;) {
		uint32_t cur = __atomic_load_n(w, __ATOMIC_RELAXED), owner;
		if (cur == 0) {
			if (__atomic_compare_exchange_n(w, &cur, me, 0,
							__ATOMIC_ACQUIRE,
							__ATOMIC_RELAXED))
				return 0;
			continue;
		}
		owner = cur & ~OSF_LOCK_WAITERS;
		if (owner == me)
			return -1; /* re-entered from a signal handler */
		if (spins++ < 256) {
			__builtin_ia32_pause();
			continue;
		}
		if (holder_gone((pid_t)owner, owner == stuck_owner)) {
			if (__atomic_compare_exchange_n(w, &cur, me, 0,
							__ATOMIC_ACQUIRE,
							__ATOMIC_RELAXED))
				return 0;
			continue;
		}
		if (owner != stuck_owner) {
			stuck_owner = owner;
			stuck_since = now_ms();
		} else if (now_ms() - stuck_since > OSF_LOCK_STUCK_MS) {
			return -1;
		}
		if (!(cur & OSF_LOCK_WAITERS) &&
		    !__atomic_compare_exchange_n(w, &cur, cur | OSF_LOCK_WAITERS,
						 0, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
			continue;
		futex_shared(w, FUTEX_WAIT, cur | OSF_LOCK_WAITERS, 10);
	}
}
