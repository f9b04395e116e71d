//go:build osf_make

/* setup_spare.c: a client's next segment made while it waits (setup.h
 * osf_spare_fill, setup_priv.h setup_spare_take).
 *
 * A connect needs a fresh segment (a memfd created, sized, sealed and
 * mapped, its first pages allocated) and the writers' socket pair: about
 * a third of what an offloaded connection costs its client, all of it on
 * the connection's critical path while the server waits. A process that
 * keeps connecting gets its next ones made where it would otherwise
 * sleep: a reader about to wait for data (the reply to the request it
 * just sent, typically) first makes one *kit*, if one is wanted, and the
 * next connect takes it. A kit is made once, for this process, handed out
 * once, and never reused.
 *
 * Who pays: only a process that connected SPARE_AFTER times (a short
 * client's one connection starts nothing), at most one kit at a time, and
 * only while one is wanted (a connect took the last one, or made its
 * segment itself): a reader on long-lived connections makes at most one
 * kit after the last connect, then none. It is made in the reader's own
 * thread, its fds coming into being as the connect's did (the lowest free
 * numbers, for the moment of a system call) and then living in the hidden
 * range (close-on-exec, marked hidden: above the program's soft
 * RLIMIT_NOFILE when the hard limit leaves room, as the connections' own).
 * A program at its limit gets no kit (its connect makes the segment).
 *
 * Processes: a kit names the process that made it. A fork child closes
 * its copies of the parent's kit and unmaps its copy of the mapping
 * (spare_after_fork); an exec'd image gets its fds closed
 * (close-on-exec; a posix_spawn image's adoption closes hidden fds no
 * connection uses); a child made otherwise (a raw clone, no fork hook)
 * finds a kit that is not its own and leaves it alone. */
#include "setup_priv.h"
#include "../sdp/setup.h"
#include "../sdp/side.h"

#define SPARE_AFTER 2

static struct {
	uint8_t *seg; /* the kit's mapping, or NULL: none ready */
	int fd[3];    /* segment, writers' pair (client's end, server's end) */
	uint32_t ring;
	pid_t pid;
	long long made; /* CLOCK_MONOTONIC ns */
	unsigned connects;
	int busy; /* a take, fill or drop under way: another one (a signal
		   * handler's, or another thread's) skips its turn */
} kit = {.fd = {-1, -1, -1}};

/* Next to kit (in .data, as kit is): a fork child resets both, and one
 * page written is one page fault. */
int osf_spare_wanted __attribute__((section(".data")));

/* The kit's fields change only in an fd window (a connect's take) or
 * under the limit lock's exclusive hold, which waits for every window (a
 * fill publishing, a drop, a rename); busy keeps takes (two threads'
 * windows are open at once), fills and drops from crossing (one skips). */

void *setup_spare_take(uint32_t ring, int *segfd, int wtx[2])
{
	uint8_t *m;

	if (__atomic_exchange_n(&kit.busy, 1, __ATOMIC_ACQUIRE))
		return NULL; /* a signal handler's connect inside a fill */
	m = kit.seg;
	if (kit.connects < SPARE_AFTER)
		kit.connects++;
	if (!m || kit.pid != getpid() || kit.ring != ring) {
		if (kit.connects >= SPARE_AFTER && !m)
			__atomic_store_n(&osf_spare_wanted, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&kit.busy, 0, __ATOMIC_RELEASE);
		return NULL;
	}
	/* The segment and the client's end stay marked hidden (install
	 * keeps them in place, osf_fdt_hide); the server's end is sent and
	 * closed. */
	osf_fdt_clear(kit.fd[2]);
	*segfd = kit.fd[0];
	wtx[0] = kit.fd[1];
	wtx[1] = kit.fd[2];
	kit.seg = NULL;
	kit.fd[0] = kit.fd[1] = kit.fd[2] = -1;
	__atomic_store_n(&osf_spare_wanted, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&kit.busy, 0, __ATOMIC_RELEASE);
	return m;
}

/* make makes a kit's segment and socket pair, their fds in the hidden
 * range (fd: segment, client's end, server's end); the mapping, or NULL.
 * Its one fd window (the limit lock) is taken before the table lock
 * osf_fdt_hide takes, in fork's order. */
static uint8_t *make(uint32_t ring, int fd[3])
{
	volatile uint8_t *h;
	int w[2], i, hfd[3] = {-1, -1, -1};

	h = osf_seg_new(ring, &fd[0]);
	if (!h)
		return NULL;
	if (REAL(socketpair)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w) < 0) {
		munmap((void *)h, osf_seg_bytes(ring));
		REAL(close)(fd[0]);
		return NULL;
	}
	fd[1] = w[0];
	fd[2] = w[1];
	osf_fdt_high_begin(); /* one window (one RLIMIT_NOFILE read) for all three */
	for (i = 0; i < 3; i++) { /* owner 0: movable (setup_spare_moved) */
		int h2 = osf_fdt_hide(fd[i], 0);
		if (h2 < 0) {
			osf_fdt_high_end();
			for (; i < 3; i++)
				REAL(close)(fd[i]);
			for (i = 0; i < 3; i++)
				osf_fdt_close_hidden(hfd[i]);
			munmap((void *)h, osf_seg_bytes(ring));
			return NULL;
		}
		hfd[i] = h2;
	}
	osf_fdt_high_end();
	/* The shared page (the header and both rings' first bytes): all a
	 * small exchange touches (allocated here rather than on the
	 * critical path). */
	h[osf_seg_hdr_off(ring)] = 0;
	for (i = 0; i < 3; i++)
		fd[i] = hfd[i];
	return (uint8_t *)h;
}

void osf_spare_fill(void)
{
	int saved = errno, fd[3], i;
	uint32_t ring;
	uint8_t *m;

	if (!setup_usable() || __atomic_exchange_n(&kit.busy, 1, __ATOMIC_ACQUIRE))
		return;
	ring = setup_cfg.c.ring_size;
	if (!__atomic_load_n(&kit.seg, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&osf_spare_wanted, __ATOMIC_RELAXED) &&
	    !__atomic_load_n(&osf.sandboxed, __ATOMIC_ACQUIRE) &&
	    (m = make(ring, fd)) != NULL) {
		/* kit.seg is still NULL: only a holder of busy changes it. */
		osf_fdt_limit_lock();
		for (i = 0; i < 3; i++)
			kit.fd[i] = fd[i];
		kit.ring = ring;
		kit.pid = getpid();
		kit.made = osf_now_ns();
		__atomic_store_n(&kit.seg, m, __ATOMIC_RELEASE);
		osf_fdt_limit_unlock();
	}
	/* One try per wanted kit: a failure waits for the next connect. */
	__atomic_store_n(&osf_spare_wanted, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&kit.busy, 0, __ATOMIC_RELEASE);
	errno = saved;
}

/* kit_free unmaps the kit's mapping (if any) and closes its fds. */
OSF_FORK_TEXT static void kit_free(void)
{
	int i;

	if (kit.seg) /* without the C library's munmap: a fork child runs this */
		(void)osf_rawsys(SYS_munmap, (long)kit.seg, (long)osf_seg_bytes(kit.ring), 0, 0, 0, 0);
	for (i = 0; i < 3; i++)
		osf_fdt_close_hidden(kit.fd[i]); /* -1: nothing */
	/* Written only when they change: in a fork child, a write to
	 * this page is a page fault. */
	OSF_RESET(kit.seg, NULL);
	for (i = 0; i < 3; i++)
		OSF_RESET(kit.fd[i], -1);
}

/* drop frees this process's kit; the limit lock is held. */
static void drop(void)
{
	if (kit.seg && kit.pid == getpid())
		kit_free();
}

void osf_spare_idle(void)
{
	int saved = errno;

	if (!__atomic_load_n(&kit.seg, __ATOMIC_RELAXED) ||
	    osf_now_ns() - kit.made < OSF_TRIM_IDLE_MS * 1000000LL ||
	    __atomic_exchange_n(&kit.busy, 1, __ATOMIC_ACQUIRE))
		return;
	osf_fdt_limit_lock();
	drop();
	osf_fdt_limit_unlock();
	__atomic_store_n(&kit.busy, 0, __ATOMIC_RELEASE);
	errno = saved;
}

/* spare_after_fork forgets the parent's maker in a fork child. */
OSF_FORK_TEXT static void spare_after_fork(void)
{
	kit_free(); /* this child's copies; the fds are -1 now */
	OSF_RESET(kit.ring, 0);
	OSF_RESET(kit.pid, 0);
	OSF_RESET(kit.made, 0);
	OSF_RESET(kit.connects, 0);
	OSF_RESET(kit.busy, 0);
	OSF_RESET(osf_spare_wanted, 0);
}
OSF_AFTER_FORK(spare_after_fork, OSF_FORK_RESET);

void setup_spare_moved(int old, int nfd)
{
	int i;

	osf_fdt_limit_lock();
	for (i = 0; i < 3; i++)
		if (kit.fd[i] == old)
			kit.fd[i] = nfd;
	osf_fdt_limit_unlock();
}
