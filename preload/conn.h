/* conn.h: the operations on an offloaded connection (kinds OSF_FD_SHM and
 * OSF_FD_RDMA) that the hooks dispatch to. Every function here is called
 * only for fds whose table entry e says so, follows Linux TCP's errno and
 * signal behaviour for the same situation, and makes no system call while
 * data (or room) is there. */
#ifndef OSF_PRELOAD_CONN_H
#define OSF_PRELOAD_CONN_H

#include "osf.h"

ssize_t osf_conn_recv(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags);
ssize_t osf_conn_send(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags);
ssize_t osf_conn_sendfile(int fd, struct osf_fdt_entry *e, int in_fd,
			  off_t *offset, size_t count);
int osf_conn_shutdown(int fd, struct osf_fdt_entry *e, int how);
int osf_conn_getsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			void *val, socklen_t *len);
int osf_conn_setsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len);
int osf_conn_getname(int fd, struct osf_fdt_entry *e, int peer,
		     struct sockaddr *sa, socklen_t *len);
int osf_conn_ioctl(int fd, struct osf_fdt_entry *e, unsigned long req,
		   void *arg);
/* osf_conn_close releases this process's hold on the connection behind
 * fd (the fd itself is closed by the caller). */
void osf_conn_close(int fd, struct osf_fdt_entry *e);

#endif
