/* kfd.h: an shm connection on the application's own kernel TCP socket
 * (OSF_SHM_KFD=1; kfd.c). */
#ifndef OSF_PRELOAD_KFD_H
#define OSF_PRELOAD_KFD_H

#include "osf.h"

#include <sys/socket.h>

struct osf_conn;

/* osf_kfd_connect makes the kernel's connect of fd (v6: an AF_INET6
 * socket) with its SYN marked and TCP_NODELAY set: the connect's result
 * and errno, or -2 (errno EINPROGRESS, the mark taken off) when a non-
 * blocking connect's SYN was not answered at once (the listener's
 * backlog full): the connection must stay the kernel's. old: the
 * program's TOS, for osf_kfd_again. */
int osf_kfd_connect(int fd, const struct sockaddr *sa, socklen_t len, int v6, int old[2]);

/* osf_kfd_again makes fd's connection, marked and made by
 * osf_kfd_connect but whose hello could not be sent, a kernel TCP one:
 * the kernel's disconnect (connect to AF_UNSPEC: a reset, which its
 * server's accept passes over, setup_kfd.c), the program's TOS (old) put
 * back, and the kernel's connect again: its result and errno. */
int osf_kfd_again(int fd, const struct sockaddr *sa, socklen_t len, int v6, int old[2]);

/* osf_kfd_listen asks the kernel to keep the SYN of the connections
 * listener lfd accepts (TCP_SAVE_SYN), where the mark is read. */
void osf_kfd_listen(int lfd);

/* osf_kfd_marked reports whether accepted socket nfd's SYN carried the
 * mark: 1, 0, or -1 when the kernel kept no SYN for it. */
int osf_kfd_marked(int nfd);

/* osf_kfd_accepted installs accepted socket nfd (accept4's flags) as the
 * server's end of the connection whose hello osf_setup_kfd_take gave in
 * cc (peer and local filled): 0, or -1 with errno (cc released). */
int osf_kfd_accepted(int nfd, struct osf_core_conn *cc, int flags);

/* osf_kfd_lowat puts the kernel's SO_RCVLOWAT of connection socket fd
 * back to 1: tokens wake a reader one at a time; the program's value is
 * osf's (conn_tcp.c). */
void osf_kfd_lowat(int fd);

/* osf_kfd_close prepares socket fd of c, whose side's last holder goes,
 * for the kernel's close: owed tokens read, and SO_LINGER {1, 0} when its
 * ring holds unread data or linger0 (the program's SO_LINGER 0), so that
 * the kernel sends the RST TCP would and a FIN otherwise. */
void osf_kfd_close(struct osf_conn *c, int fd, int linger0);

/* osf_kfd_shut_foreign shuts the companion of each OSF_SHM_KFD listener
 * an image that runs without osf is about to inherit (spawn with file
 * actions: any, they may move one; else those without close-on-exec),
 * in every process, before it can accept: such an image reads no hello,
 * so its connections must be kernel TCP (sock_accept.c). */
void osf_kfd_shut_foreign(int any);

#endif
