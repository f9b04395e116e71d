/* gateway.h: the node side of a connection through an osfgw gateway (route
 * action "gateway"; protocol in docs/ARCHITECTURE.md, "Gateways"). The
 * core connects the application's own socket to a gateway and sends the
 * request; this side waits for the reply on the application's thread.
 * Afterwards the socket is a plain kernel TCP stream (kind KERNEL,
 * transport GATEWAY) whose getpeername reports the destination. */
#ifndef OSF_PRELOAD_GATEWAY_H
#define OSF_PRELOAD_GATEWAY_H

#include "osf.h"

/* osf_gateway_connect finishes connect(fd, sa, len) after the core
 * answered OSF_CORE_GATEWAY in cc: it returns what connect returns (0, or
 * -1 with EINPROGRESS for a non-blocking socket that is connected, or -1
 * with the errno of the gateway's reply, the socket then unconnected). */
int osf_gateway_connect(int fd, const struct sockaddr *sa, socklen_t len,
			const struct osf_core_conn *cc);

/* osf_gateway_getpeername reports the destination of a gateway stream. */
int osf_gateway_getpeername(struct osf_fdt_entry *e, struct sockaddr *sa,
			    socklen_t *len);

#endif
