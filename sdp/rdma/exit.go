package rdma

/*
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// At exit. Kernel TCP delivers what a program wrote even when it exits
// right after writing: the sockets outlive the process. An RDMA stream's
// engine lives in the process, so exit(3) would cut off whatever it has
// not sent yet, and the peer would see a reset. An atexit handler, in C,
// on the exiting thread (which never runs Go code), tells the engine that
// the process is exiting and waits, at most OSF_RDMA_EXIT_MS, until the
// engine has closed every stream as if the program had closed its fds:
// the rest of the data, a last credit, CLOSE, acknowledged by the peer.
// _exit(2), a fatal signal or SIGKILL skip atexit handlers; their streams
// are reset.
//
// The handler returns at once when the engine's count of open connections
// is 0, so the engine raises the count before the application can learn
// of a connection (before the hello to the companion, before a dial
// returns) and so before it can read a byte of one: a server that reads a
// request, closes and exits at once must find its stream counted.
//
// The handler belongs to the process that started the engine: in a fork
// child (the handler is inherited with the memory) it does nothing.

#define OSF_RDMA_EXIT_MS 2000

static pid_t osf_rdma_exit_pid;
static int osf_rdma_exit_kick = -1; // the engine's eventfd
static uint32_t osf_rdma_exiting;    // set by the handler
static uint32_t osf_rdma_open;       // connections not settled yet; futex word
static pthread_once_t osf_rdma_exit_once = PTHREAD_ONCE_INIT;

static void osf_rdma_at_exit(void)
{
	uint64_t one = 1;
	struct timespec start, now;
	long left;

	if (osf_rdma_exit_pid != getpid() || __atomic_load_n(&osf_rdma_open, __ATOMIC_ACQUIRE) == 0)
		return;
	__atomic_store_n(&osf_rdma_exiting, 1, __ATOMIC_RELEASE);
	if (syscall(SYS_write, osf_rdma_exit_kick, &one, sizeof one) < 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		uint32_t open = __atomic_load_n(&osf_rdma_open, __ATOMIC_ACQUIRE);
		struct timespec ts;
		if (open == 0)
			return;
		clock_gettime(CLOCK_MONOTONIC, &now);
		left = OSF_RDMA_EXIT_MS - ((now.tv_sec - start.tv_sec) * 1000 +
					   (now.tv_nsec - start.tv_nsec) / 1000000);
		if (left <= 0)
			return;
		ts.tv_sec = left / 1000;
		ts.tv_nsec = (left % 1000) * 1000000L;
		syscall(SYS_futex, &osf_rdma_open, FUTEX_WAIT_PRIVATE, open, &ts, NULL, 0);
	}
}

static void osf_rdma_exit_register(void) { atexit(osf_rdma_at_exit); }

static void osf_rdma_exit_arm(int kick)
{
	osf_rdma_exit_pid = getpid();
	osf_rdma_exit_kick = kick;
	pthread_once(&osf_rdma_exit_once, osf_rdma_exit_register);
}

// osf_rdma_exit_disarm: the engine whose eventfd is kick stopped; exit(3)
// has nothing to wait for (and must not write to the closed eventfd).
static void osf_rdma_exit_disarm(int kick)
{
	if (osf_rdma_exit_kick != kick)
		return;
	osf_rdma_exit_pid = 0;
	osf_rdma_exit_kick = -1;
	if (__atomic_exchange_n(&osf_rdma_open, 0, __ATOMIC_ACQ_REL) != 0)
		syscall(SYS_futex, &osf_rdma_open, FUTEX_WAKE_PRIVATE, 1 << 30, NULL, NULL, 0);
}

static int osf_rdma_exit_requested(void) { return __atomic_load_n(&osf_rdma_exiting, __ATOMIC_ACQUIRE); }

static uint32_t osf_rdma_exit_pending(void) { return __atomic_load_n(&osf_rdma_open, __ATOMIC_ACQUIRE); }

static void osf_rdma_exit_reset(void)
{
	__atomic_store_n(&osf_rdma_exiting, 0, __ATOMIC_RELEASE);
	osf_rdma_exit_pid = 0;
}

static void osf_rdma_exit_open(uint32_t n)
{
	if (__atomic_exchange_n(&osf_rdma_open, n, __ATOMIC_ACQ_REL) != n)
		syscall(SYS_futex, &osf_rdma_open, FUTEX_WAKE_PRIVATE, 1 << 30, NULL, NULL, 0);
}
*/
import "C"

// exitHook makes exit(3) wait for the engine whose kick eventfd is kick
// (see the C comment above). Engine goroutine.
func exitHook(kick int) { C.osf_rdma_exit_arm(C.int(kick)) }

// exitUnhook undoes exitHook when the engine whose kick eventfd is kick
// stops. Engine goroutine.
func exitUnhook(kick int) { C.osf_rdma_exit_disarm(C.int(kick)) }

// exitRequested reports whether the process is exiting.
func exitRequested() bool { return C.osf_rdma_exit_requested() != 0 }

// exitOpen publishes how many streams are still to be closed.
func exitOpen(n int) { C.osf_rdma_exit_open(C.uint32_t(n)) }

// runExitHandler runs the exit handler as exit(3) would (tests).
func runExitHandler() { C.osf_rdma_at_exit() }

// exitPending returns the count the exit handler waits on (tests).
func exitPending() int { return int(C.osf_rdma_exit_pending()) }

// resetExit forgets a simulated exit (tests).
func resetExit() { C.osf_rdma_exit_reset() }
