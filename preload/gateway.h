/* gateway.h: the node side of a connection through an osfgw gateway (route
 * action "gateway"; protocol in docs/ARCHITECTURE.md, "Gateways"). The
 * core connects the application's own socket to a gateway and sends the
 * request; this side waits for the reply on the application's thread.
 * Afterwards the socket is a plain kernel TCP stream (kind KERNEL,
 * transport GATEWAY) whose getpeername reports the destination. */
#ifndef OSF_PRELOAD_GATEWAY_H
#define OSF_PRELOAD_GATEWAY_H

#include "osf.h"
#include "ops.h"

/* osf_gateway_connect finishes connect(fd, sa, len) after the core
 * answered OSF_CORE_GATEWAY in cc: it returns what connect returns (0, or
 * -1 with EINPROGRESS for a non-blocking socket that is connected, or -1
 * with the errno of the gateway's reply, the socket then unconnected). */
int osf_gateway_connect(int fd, const struct sockaddr *sa, socklen_t len,
			const struct osf_core_conn *cc);

/* A non-blocking connect through a gateway over a kernel TCP leg returns
 * EINPROGRESS once the request is sent; the entry (kind KERNEL, transport
 * GATEWAY) carries OSF_FDF_GWWAIT until the reply is taken by whoever
 * looks first, as the functions below do. */

/* osf_gw_pending: a kernel socket whose connect through a gateway
 * (kernel leg) waits for the reply or failed with SO_ERROR not yet read
 * (its operations table is then OSF_OPS_GW_PENDING, ops.h). */
static inline int osf_gw_pending(const struct osf_fdt_entry *e)
{
	return e->kind == OSF_FD_KERNEL &&
	       (__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) &
		(OSF_FDF_GWWAIT | OSF_FDF_GWERR));
}

/* osf_gateway_settle takes the reply if it is all there: 1 while it is
 * awaited, else 0 (and fd's epoll registrations, held by selectmux while
 * it waited, are the kernel's again unless it failed with SO_ERROR still
 * unread). */
int osf_gateway_settle(int fd, struct osf_fdt_entry *e);

/* osf_gateway_poll returns the poll events of such an fd: none while the
 * reply is awaited; after an error reply POLLOUT|POLLHUP|POLLERR (as the
 * kernel's socket after a refused connect) until SO_ERROR is read; after
 * an OK one the kernel socket's own. */
short osf_gateway_poll(int fd, struct osf_fdt_entry *e);

/* osf_gateway_sockerr is getsockopt(SO_ERROR) on such an fd: 0 while the
 * reply is awaited, then the reply's errno, once. */
int osf_gateway_sockerr(int fd, struct osf_fdt_entry *e, void *val,
			socklen_t *len);

/* osf_gateway_pending_connect is connect on such an fd: EALREADY while
 * awaited, the reply's errno once after an error reply (the socket may
 * then connect again, routed anew), 0 once after an OK one, then EISCONN. */
int osf_gateway_pending_connect(int fd, struct osf_fdt_entry *e);

/* osf_gateway_pending_io precedes a read or write on such an fd: -1 with
 * EAGAIN while awaited (nonblock; a blocking call waits for the reply),
 * with the reply's errno (once) after an error reply; 0 when the call may
 * go to the kernel socket. */
int osf_gateway_pending_io(int fd, struct osf_fdt_entry *e, int nonblock);

/* osf_gateway_leg_begin marks fd, just installed as an offloaded
 * connection to a gateway (the core sent the request through its rings),
 * as a stream through a gateway waiting for the reply (conn_gw.c). */
void osf_gateway_leg_begin(int fd, struct osf_fdt_entry *e);

/* osf_gateway_leg_connect finishes connect on such an fd: -1 with
 * EINPROGRESS when nonblock (the reply is taken when poll, select, epoll,
 * recv, send, SO_ERROR or connect look); else it waits up to wait_ms for
 * the reply: 0, or -1 with its errno. */
int osf_gateway_leg_connect(int fd, struct osf_fdt_entry *e, int nonblock,
			    uint32_t wait_ms);

/* osf_gateway_connect_again is connect on such an fd once connected or
 * connecting: EALREADY while the reply is awaited, the failure's errno
 * (once) after an error reply, 0 once after EINPROGRESS, then EISCONN. */
int osf_gateway_connect_again(int fd, struct osf_fdt_entry *e);

/* osf_gateway_getname reports the addresses of a gateway stream: peer,
 * the destination or (accepted) the remote client; else, for an accepted
 * one, the gateway's address on it, and the kernel's for a client. */
int osf_gateway_getname(int fd, struct osf_fdt_entry *e, int peer,
			struct sockaddr *sa, socklen_t *len);

/* osf_gateway_listen records listener fd, bound to ss, as listening
 * through a gateway after the core answered out (gw set): its control
 * connection (out->fd) is hidden and closed with the listener. When the
 * gateway could not listen, the listener is a node-local kernel one. */
void osf_gateway_listen(int fd, const struct osf_core_listen_out *out,
			const struct sockaddr_storage *ss, socklen_t sl);

/* osf_gateway_token_set records the delivery token of the gateway
 * listener whose companion is fd companion (process-private). */
void osf_gateway_token_set(int companion, const uint8_t token[32]);

/* osf_gateway_ring_accepted finishes an accept over the companion of
 * gateway listener l (kind LISTEN, transport GATEWAY): a connection the
 * gateway delivered over the rings starts with its notice and the
 * listener's delivery token, which it takes and records (flag OSF_FDF_GATEWAY, peer the outside client, local the
 * gateway's address on the accepted connection). */
void osf_gateway_ring_accepted(const struct osf_fdt_entry *l, int nfd);

/* osf_gateway_accepted finishes an accept on gateway listener entry l:
 * a connection from the gateway starts with a notice (the remote client
 * and the gateway's address), which is consumed and recorded, and sa/len
 * get the client's address. Other connections are left as they are. */
void osf_gateway_accepted(const struct osf_fdt_entry *l, int nfd,
			  struct sockaddr *sa, socklen_t *len);

#endif
