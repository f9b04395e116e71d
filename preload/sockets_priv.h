/* sockets_priv.h: what the socket hooks' files share: sockets.c
 * (socket, bind, listen, connect, options, shutdown, names),
 * sock_accept.c (accept), sock_carry.c (options carried from a TCP socket
 * to an offloaded one), sock_kfd.c (connect under OSF_SHM_KFD) and
 * sock_ports.c (ports held for closed listeners
 * and passed on by connections). Each function's comment is at its
 * definition.
 */
#ifndef OSF_SOCKETS_PRIV_H
#define OSF_SOCKETS_PRIV_H

#include "osf.h"

#include <sys/socket.h>

/* sockets.c */
int sock_on(void);
int sock_core_reason(int rc);
void sock_record_kernel(int fd, int role, int reason, int rule, int reason_errno,
			const struct sockaddr *peer, socklen_t peerlen);
int sock_sa_split(const struct sockaddr *sa, socklen_t len, int32_t *family,
		  uint8_t addr[16], uint16_t *port);
int sock_split16(const void *b, size_t len, uint8_t a16[16], uint16_t *port);
int sock_port_read(int fd, struct osf_bound_port *bp);
int sock_port_hold(const struct osf_bound_port *bp);
void sock_bp_set_addr(struct osf_bound_port *bp, const uint8_t local[28]);
void sock_kernel_connected(int fd);

/* sock_carry.c */
struct carried {
	struct timeval rcvtimeo, sndtimeo;
	struct linger linger;
	int keepalive, nodelay, rcvlowat;
	int bufs[2]; /* SO_RCVBUF, SO_SNDBUF as the kernel has them (doubled),
			0: not set */
	int oobinline;
	int nkopts; /* TCP and IP options, when any was set (kopt.c) */
	struct osf_kopt kopts[8];
};
int sock_carried_option(int level, int name);
uint32_t sock_carried_bit(int level, int name);
void sock_carry_read(int fd, struct carried *o);
void sock_carry_changed(void);
void sock_carry_apply(int fd, const struct carried *o);
void sock_abandon(const struct osf_core_conn *cc);

/* sock_kfd.c */
int sock_connect_kfd(int fd, const struct sockaddr *sa, socklen_t len, struct osf_core_conn *cc,
		     const struct carried *opts, int fl, int fdfl, int window);

/* sock_ports.c */
void sock_hold_listener_port(int fd, const uint8_t local[28]);

#endif
