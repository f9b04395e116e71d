/* ops.h: the operations table of each kind of fd that libosf.so handles
 * itself (docs/ARCHITECTURE.md, "Per-kind operations"), as libvma's
 * socket_fd_api or rsocket's one call per operation: the install of an fd
 * chooses its table (the entry's ops), and the data hooks (io.c), close
 * (fd.c) and selectmux (through the table's readiness, selectmux/ready.h)
 * call through it without asking what kind the fd is. A new kind is a
 * file of its functions with its table, one OSF_OPS_* and one line in
 * ops.c.
 *
 * Calls outside the table (sendfile, splice, shutdown, the socket
 * options, MSG_ERRQUEUE, MSG_OOB) stay with the hooks that know their
 * kinds (conn.h for offloaded connections). */
#ifndef OSF_PRELOAD_OPS_H
#define OSF_PRELOAD_OPS_H

#include "osf.h"
#include "../selectmux/ready.h"

#include <sys/uio.h>

/* The indexes of the tables are enum osf_ops_kind (fdtable.h, the entry's
 * ops: OSF_OPS_SHM, OSF_OPS_RDMA, OSF_OPS_GW_PENDING). */

/* struct osf_fd_ops: what a kind does. ready is its readiness, for
 * selectmux (selectmux/ready.h). recv and send are the data calls (recv,
 * read, readv, recvfrom, recvmsg; send, write, writev, sendto, sendmsg),
 * with Linux TCP's errno and blocking: flags MSG_*, iov already checked
 * against IOV_MAX by the hook where the kernel checks it. close (may be
 * NULL: nothing to release) lets go of this process's hold on fd's state
 * before the hook closes fd and clears its entry. */
struct osf_fd_ops {
	struct osf_ready ready;
	ssize_t (*recv)(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
			int iovcnt, int flags);
	ssize_t (*send)(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
			int iovcnt, int flags);
	void (*close)(int fd, struct osf_fdt_entry *e);
};

extern const struct osf_fd_ops osf_ops_shm, osf_ops_rdma, osf_ops_gw_pending;

/* osf_fd_ops is the table of each OSF_OPS_* (NULL: none). */
extern const struct osf_fd_ops *const osf_fd_ops[OSF_FDT_OPS_MAX];

/* osf_ops_of returns the table of entry e, NULL for the kernel's. */
static inline const struct osf_fd_ops *osf_ops_of(const struct osf_fdt_entry *e)
{
	return osf_fd_ops[__atomic_load_n(&e->ops, __ATOMIC_ACQUIRE) &
			  (OSF_FDT_OPS_MAX - 1)];
}

#endif
