package rdma

/*
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

// The engine's ends of wake sockets (both kinds, and the stand-in's links
// and listeners) must not live on in a child that fork (without exec)
// made: the C data path learns that the engine closed the connection from
// the end of the wake sockets, which never comes while a child holds a
// copy of the engine's end. They are close-on-exec; for fork
// a child handler registered with pthread_atfork closes them. It runs in
// the child right after fork, in C, before anything else: the child never
// runs the parent's Go code (docs/DESIGN.md D1).
//
// The set of fds is a bitmap the engine maintains with atomic operations;
// the handler closes every fd in it and clears it, so that a later fork of
// the child (whose fd numbers have moved on) closes nothing.

#define OSF_RDMA_FORK_FDS (1 << 20) // RLIMIT_NOFILE's hard ceiling (nr_open)
static uint64_t osf_rdma_fork_bits[OSF_RDMA_FORK_FDS / 64];
static int osf_rdma_fork_max = -1;
static pthread_once_t osf_rdma_fork_once = PTHREAD_ONCE_INIT;

static void osf_rdma_fork_child(void)
{
	int top = __atomic_load_n(&osf_rdma_fork_max, __ATOMIC_RELAXED);
	int w;

	for (w = 0; w <= top / 64 && top >= 0; w++) {
		uint64_t b = __atomic_exchange_n(&osf_rdma_fork_bits[w], 0, __ATOMIC_RELAXED);
		while (b) {
			int bit = __builtin_ctzll(b);
			syscall(SYS_close, w * 64 + bit); // not through libosf.so's hook
			b &= b - 1;
		}
	}
	osf_rdma_fork_max = -1;
}

static void osf_rdma_fork_register(void)
{
	pthread_atfork(NULL, NULL, osf_rdma_fork_child);
}

static void osf_rdma_fork_add(int fd)
{
	int cur;

	if (fd < 0 || fd >= OSF_RDMA_FORK_FDS)
		return;
	pthread_once(&osf_rdma_fork_once, osf_rdma_fork_register);
	__atomic_or_fetch(&osf_rdma_fork_bits[fd / 64], 1ULL << (fd % 64), __ATOMIC_SEQ_CST);
	cur = __atomic_load_n(&osf_rdma_fork_max, __ATOMIC_RELAXED);
	while (fd > cur && !__atomic_compare_exchange_n(&osf_rdma_fork_max, &cur, fd, 0,
						       __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		;
}

static void osf_rdma_fork_del(int fd)
{
	if (fd < 0 || fd >= OSF_RDMA_FORK_FDS)
		return;
	__atomic_and_fetch(&osf_rdma_fork_bits[fd / 64], ~(1ULL << (fd % 64)), __ATOMIC_SEQ_CST);
}

static int osf_rdma_fork_has(int fd)
{
	if (fd < 0 || fd >= OSF_RDMA_FORK_FDS)
		return 0;
	return (__atomic_load_n(&osf_rdma_fork_bits[fd / 64], __ATOMIC_SEQ_CST) >> (fd % 64)) & 1;
}
*/
import "C"

// forkCloseAdd records fd as one a forked child must close at once.
func forkCloseAdd(fd int) { C.osf_rdma_fork_add(C.int(fd)) }

// forkCloseDel forgets fd (the engine closed it).
func forkCloseDel(fd int) { C.osf_rdma_fork_del(C.int(fd)) }

// forkCloses reports whether a forked child would close fd (tests).
func forkCloses(fd int) bool { return C.osf_rdma_fork_has(C.int(fd)) != 0 }
