/* fdt_priv.h: what the fd table's C files share (fdtable.c, fdwindow.c,
 * fdfork.c); libosf.so's other files use fdt.h. */
#ifndef OSF_FDTABLE_FDT_PRIV_H
#define OSF_FDTABLE_FDT_PRIV_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cdefs.h"
#include "fdt.h"

/* The table (fdtable.c). */
extern struct osf_fdt_header *fdt_hdr; /* NULL until the first tracked fd */
extern int fdt_fd;                     /* the table's memfd */
extern off_t fdt_size;                 /* current size of the memfd */
extern int fdt_reserving;     /* osf_fdt_reserve_low calls not yet released */
extern int fdt_inherit_count; /* offloaded entries without FD_CLOEXEC */
extern int fdt_table_inherits; /* the table's fd is without FD_CLOEXEC */
extern int fdt_stale; /* a flag left inheritable until the next exec */
extern int fdt_offload_count; /* offloaded entries */

/* The table's addresses: the header and the chunks of fds below
 * NEAR_CHUNKS * 1024 (past the highest hidden base, OSF_FDT_HIGH_MAX) sit
 * at their file offsets in one reserved range (fdt_base), so that the kernel
 * keeps them as one mapping and a fork child moves to its copy with one
 * mmap; chunks above it are mapped one by one, as is everything when the
 * reservation failed (fdt_base NULL). The reservation is address space only
 * (PROT_NONE, no memory): 9 MiB. */
#define NEAR_CHUNKS 72u
#define NEAR_BYTES (OSF_FDT_HDR_BYTES + (size_t)NEAR_CHUNKS * OSF_FDT_CHUNK_BYTES)
extern char *fdt_base;

/* fdt_chunk_mark records chunk i as mapped (osf_fdt_chunk_map), before
 * its pointer is published; the lock is held. */
static inline void fdt_chunk_mark(unsigned i)
{
	__atomic_or_fetch(&osf_fdt_chunk_map[i / 64], 1ull << (i % 64), __ATOMIC_RELAXED);
}
#define FDT_FOREACH_CHUNK(i, from) \
	for ((i) = osf_fdt_chunk_next(from); (i) < OSF_FDT_MAX_CHUNKS; \
	     (i) = osf_fdt_chunk_next((i) + 1))

/* sys_ret turns osf_rawsys's result into the C library's convention. */
static inline int sys_ret(long r)
{
	if (r < 0 && r > -4096) {
		errno = (int)-r;
		return -1;
	}
	return (int)r;
}
static inline int sys_close(int fd) { return sys_ret(osf_rawsys(SYS_close, fd, 0, 0, 0, 0, 0)); }
static inline int sys_fcntl(int fd, int cmd, long arg)
{
	return sys_ret(osf_rawsys(SYS_fcntl, fd, cmd, arg, 0, 0, 0));
}
static inline int sys_dup3(int oldfd, int newfd, int flags)
{
	return sys_ret(osf_rawsys(SYS_dup3, oldfd, newfd, flags, 0, 0, 0));
}
/* my_tid is the calling thread's id, asked of the kernel once per thread
 * (and again in a fork child, osf_fdt_child_after_fork): the lock below
 * runs several times per connection set-up and close. */
extern __thread int fdt_tls_tid __attribute__((tls_model("initial-exec")));
/* fdt_tls_win: this thread's holds of a shared fd window (its window and
 * what nests in it), 0: none; fdt_tls_excl_wait: it waits for the shared
 * windows to end (fdwindow.c). */
extern __thread int fdt_tls_win __attribute__((tls_model("initial-exec")));
extern __thread int fdt_tls_excl_wait __attribute__((tls_model("initial-exec")));
static inline int my_tid(void)
{
	if (__builtin_expect(fdt_tls_tid == 0, 0))
		fdt_tls_tid = (int)syscall(SYS_gettid);
	return fdt_tls_tid;
}

/* The lock word holds the owner's tid, with LOCK_WAITERS once another
 * thread sleeps on it: an uncontended lock and unlock make no system call.
 *
 * Contended, the lock is handed over, not dropped: an unlock that finds
 * sleepers stores LOCK_HANDOFF and wakes one, and only a thread that has
 * slept on the word may take a handed-over lock. A thread that takes the
 * lock again right after letting go of it (a connecting thread's next fd
 * window) queues behind the sleepers instead of overtaking them every
 * time: a fork waiting for the window lock while two threads connect in a
 * loop got it a few hundred times in 3 s against thousands bare. The kernel
 * wakes futex sleepers of equal priority in arrival order.
 *
 * A handed-over lock is never stranded: a sleeper wakes at least every
 * LOCK_NAP_NS and may then take it (the woken thread may have left the
 * wait by siglongjmp from a handler); an unlock that woke nobody drops the
 * lock and wakes again; and a signal handler that interrupted its own
 * thread's wait may take it at once (tls_lock_waits), since the interrupted
 * wait cannot run until the handler returns. */
#define LOCK_WAITERS 0x40000000
#define LOCK_HANDOFF 0x3fffffff /* above any tid (PID_MAX_LIMIT is 2^22) */
#define LOCK_NAP_NS 20000000L

#define OSF_FDT_EDEADLK() (errno = EDEADLK, -1)
#define OSF_FAIL_EBUSY() (errno = EBUSY, -1)

/* Shared between the table's files; each is documented where it is
 * defined. */
void word_lock(int *w);
void word_unlock(int *w);
int held_by_me(void);
uint64_t ino_of(int fd);
void reserve(void);
void *map_hdr(int fd);
struct osf_fdt_entry *map_chunk(int fd, unsigned i);
struct osf_fdt_entry *entry_locked(int fd);
void hidden_entry(struct osf_fdt_entry *e, int owner, uint64_t ino);
void set_hidden_locked(int fd, int owner, uint64_t ino);
int table_create(void);

/* go_header writes this image's Go fields (osf_fdt_set_go) into a header
 * it owns: a new table's, or one adopted across exec. */
void go_header(struct osf_fdt_header *h);
int accounted(int kind);
int has_aux2(const struct osf_fdt_entry *e);
void account(const struct osf_fdt_entry *e, int delta);
/* table_inherit clears (on) or sets FD_CLOEXEC of the table's fd and
 * records it (fdt_table_inherits). The lock is held. */
void table_inherit(int on);
int snapshot(void);

#endif
