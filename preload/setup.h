/* setup.h: the shm connection set-up in C (preload/setup.c): route
 * decisions with the C evaluator (route.h), the companion listener, connect
 * with hello and segment, and accept with the hello's validation, without
 * the Go core (DESIGN.md D1, revised). The Go core is asked only for what
 * needs it: a configuration the C evaluator cannot read, or a decision
 * that depends on an RDMA device. */
#ifndef OSF_PRELOAD_SETUP_H
#define OSF_PRELOAD_SETUP_H

#include "osf.h"

/* osf_setup_listen decides a listener and binds its companion: 1 when done
 * in C (out filled as osf_core_listen would), 0 when the core must. The
 * companion of a SO_REUSEPORT listener (reuseport) takes a free slot of its
 * group's names, so that several share the offloaded connections; under
 * OSF_SHM_KFD (group, not NULL) the group has one companion and one hello
 * store, which group receives (setup_group_bind: its pair's ends and page,
 * for osf_setup_group_store; -1 each when it has none) and out->fd may be
 * listening already; listening: the kernel listener listens already (its
 * port was bound by listen: a new group). */
int osf_setup_listen(const struct osf_core_listen_in *in, int reuseport,
		     struct osf_core_listen_out *out, int group[3], int listening);

/* osf_setup_group_store keeps store st of osf_setup_listen as the store of
 * listener lfd's companion aux_fd (hidden): 1, or 0 when it has none (its
 * fds closed; the companion is then shut down, in every process holding
 * it, so that clients use kernel TCP). */
int osf_setup_group_store(int lfd, int aux_fd, const int st[3]);
/* osf_setup_group_drop closes the fds of st that are open (-1 each then). */
void osf_setup_group_drop(int st[3]);

/* osf_setup_port_listened: 1 when a kernel TCP listener holds port (or
 * the kernel does not say), 0 when none does (the census, uncached). */
int osf_setup_port_listened(uint16_t port);

/* osf_setup_connect decides a connect and, for shm, opens the connection:
 * 1 when done in C (out filled as osf_core_connect would), 0 when the core
 * must. *port_fd is -1, or for an offloaded connection from an unbound
 * socket a TCP socket bound to the connection's local port, which holds
 * that port: a dup of the application's own socket where it may be kept,
 * already in osf's hidden range, close-on-exec (the caller keeps it with
 * osf_fdt_keep_hidden or closes it). *placed is set for an offloaded
 * connection whose segment and writers' socket came from a spare, placed
 * and marked hidden already (osf_conn_install's OSF_INSTALL_PLACED).
 * *window is set when it returns with its fd window still open for the
 * caller's install (an offloaded connection, no debug line to log): the
 * caller ends it (osf_fdt_high_end). */
int osf_setup_connect(const struct osf_core_connect_in *in,
		      struct osf_core_conn *out, int *port_fd, int *placed, int *window);

/* A connection whose companion connection waits for its first byte:
 * its listener defers (TCP_DEFER_ACCEPT, as its server noted in the
 * region: osf_seg_hdr.srv_defer), so its wake socket, a unix socket not
 * yet connected, connects to the companion and sends the hello when the
 * connection first publishes (data, FIN), closes, shuts down, waits to
 * read, crosses fork, exec or SCM_RIGHTS, or its defer time is over
 * (conn.c): the server accepts it with its first bytes, or without any
 * after that time, as TCP's accept would.
 * osf_setup_hello_take returns what the calling thread's last
 * osf_setup_connect left for the install of fd, or NULL (a hidden dup of
 * the socket kept in it, and when it is due: *due, CLOCK_MONOTONIC ns).
 * osf_setup_hello_go connects the socket and sends the hello (seg: the
 * connection's segment): 0, or -1 when the companion is gone, full past
 * the handshake bound, or no longer the one the region's listener had
 * (the socket is then shut: the connection reads as reset).
 * osf_setup_hello_drop lets it go unsent (the server never saw it);
 * osf_setup_hello_forget is a fork child's (its parent sends it);
 * osf_setup_hello_abandon drops the one left on this thread for a
 * connection whose install failed (seg its slot). All free w. */
struct osf_hello_wait;
struct osf_hello_wait *osf_setup_hello_take(int fd, long long *due);
int osf_setup_hello_go(struct osf_hello_wait *w, void *seg);
void osf_setup_hello_drop(struct osf_hello_wait *w, void *seg);
void osf_setup_hello_forget(struct osf_hello_wait *w);
void osf_setup_hello_abandon(void *seg);

/* osf_setup_kfd_announce sends the hello of the OSF_SHM_KFD connection
 * osf_setup_connect just made on this thread from a socket without a
 * port (its hello names the port the kernel's connect picked), once the
 * kernel's connect of fd has run: 0 (nothing was waiting, or sent: cc's
 * local port set, and its segment and fds those of a fresh dial's when
 * the link had broken), or -1 when it could not be sent (the slot and
 * cc's fds let go: the connection must be kernel TCP). *poke: whether
 * the connection's first publish must send a token (its link's note,
 * setup_link_note_flags; OSF_INSTALL_NOPOKE). A connect that
 * failed calls osf_setup_kfd_unannounced instead: 1 when it let such a
 * hello's slot and fds go (the caller must not), else 0. */
int osf_setup_kfd_announce(int fd, struct osf_core_conn *cc, int *poke);
int osf_setup_kfd_unannounced(void);

/* osf_setup_accept takes one offloaded connection from the companion
 * aux_fd of the listener lfd (listening on family/addr/port of in), never
 * waiting: a connection whose hello has not arrived stays parked and is
 * looked at again by later calls. Returns the accepted unix socket (the
 * connection's fd) with cc filled, -2 when none is ready, or -1 with errno
 * (EMFILE/ENFILE: the connection stays queued). The fd has the flags the
 * application asked for (flags: SOCK_CLOEXEC, SOCK_NONBLOCK; *as_asked 1)
 * when accept4 took it from the companion in this call, else (a parked
 * one, *as_asked 0) it is close-on-exec and non-blocking. *wait_ms is
 * what may still be spent waiting for late hellos in this application
 * call (-1 at its start: the handshake bound). *window is set when it
 * returns an fd with an fd window open (osf_fdt_high_begin) for the
 * install's hidden fds (not when debug lines are logged: the core's logger
 * is never called inside a window): the caller ends it. */
int osf_setup_accept(int lfd, int aux_fd, const struct osf_core_accept_in *in,
		     struct osf_core_conn *cc, int *wait_ms, int flags, int *as_asked,
		     int *window);

/* osf_setup_kfd_take finds the hello (OSF_HELLO_F_KFD) of the kernel
 * connection nfd from peer to local (its addresses) accepted on listener
 * lfd, whose companion is aux_fd, sent by the owner of its client end
 * (or root): among the hellos kept and those queued on this process's
 * links of the companion, then, when its SYN carried the mark (*marked:
 * 1, 0 unmarked, -1 the kernel kept no SYN; -2 not read yet, read here
 * when needed: osf_kfd_marked), in the family's store, waiting for one
 * that comes after the connection (its client's port was the connect's:
 * setup_connect.c) up to the handshake bound (2 ms when no SYN was
 * kept). 0 with cc filled (its fds above the program's limit, names
 * still to set), -1 when there is none, 1 when its client made the
 * connection kernel TCP after its hello (OSF_SIDE_KERNEL), 2 when a
 * marked connection's client closed or reset it before any hello came
 * (to be passed over). */
int osf_setup_kfd_take(int lfd, int aux_fd, const struct osf_core_accept_in *in,
		       const uint8_t peer[28], const uint8_t local[28], int *marked, int nfd,
		       struct osf_core_conn *cc);

/* osf_setup_kfd_shut keeps the hellos companion aux_fd of OSF_SHM_KFD
 * listener lfd queued, as osf_setup_kfd_take would, and shuts it in every
 * process sharing it: new clients find no companion. */
void osf_setup_kfd_shut(int lfd, int aux_fd, const struct osf_core_accept_in *in);

/* A server's links (OSF_SHM_KFD: one per client process and listener)
 * end when their client process closes them (it exited).
 * osf_setup_kfd_links_copy puts up to max of this process's links' fds
 * in fds (how many), for selectmux's waits on an OSF_SHM_KFD listener to
 * watch (selectmux/host.h osf_links_copy; new ones osf_mux_link_added);
 * osf_setup_kfd_links_ended reads each link that ended to its end,
 * keeping the hellos still on it for their accepts, closes it, and lets
 * the regions its client brought go once no connection of theirs lives
 * here (pool.h osf_pool_peer_gone). listener finds a link's listener by
 * its companion: its fd with in filled, or -1 (that link is left to the
 * next accept). So a server that takes no more connections still closes
 * what its ended clients left. */
int osf_setup_kfd_links_copy(int *fds, int max);
void osf_setup_kfd_links_ended(int (*listener)(int aux_fd, struct osf_core_accept_in *in));

/* osf_setup_kfd_renote shuts this process's links of companion aux_fd,
 * whose listener's TCP_DEFER_ACCEPT was just set: their notes said what
 * it was (setup_link_note_flags), and their clients dial anew and read the
 * new one. A fork family's store keeps its links (LIMITS.md). */
void osf_setup_kfd_renote(int aux_fd);

/* osf_setup_kfd_family reports whether companion aux_fd's listener has a
 * fork family's hello store (setup_fam.c): its accepts then find hellos
 * read by any process of the family. osf_setup_kfd_fork_prepare, called
 * by fork before it takes the table's locks, makes one for each OSF_SHM_KFD
 * listener that has none and puts the links this process accepted in it. */
int osf_setup_kfd_family(int aux_fd);
void osf_setup_kfd_fork_prepare(void);

/* The store crosses exec. osf_setup_kfd_store, called for each listener
 * an exec'd or spawned image may share, makes listener lfd's store when
 * it is an OSF_SHM_KFD listener without one, as a fork would: 1 when it
 * has one, 0 when it is not such a listener or none could be made.
 * osf_setup_kfd_exec_inherit (on) makes each store's fds cross the
 * next exec when its companion does, (off) close-on-exec again (a spawn
 * makes every hidden fd cross: osf_fdt_spawn_inherit). osf_setup_kfd_adopt,
 * in an image that adopted an inherited fd table, finds the stores its
 * table names (OSF_FDF_STORE) and maps their pages; a store whose
 * listener did not cross is closed. */
int osf_setup_kfd_store(int lfd);
void osf_setup_kfd_exec_inherit(int on);
void osf_setup_kfd_adopt(void);

/* osf_setup_parked_fds puts up to max parked connections of companion
 * aux_fd into p (events POLLIN), for a blocking accept's wait; returns how
 * many. */
int osf_setup_parked_fds(int aux_fd, struct pollfd *p, int max);

/* osf_setup_forget_companion drops the parked connections of a companion
 * being closed. */
void osf_setup_forget_companion(int aux_fd);

/* osf_setup_hidden_moved renames hidden fd old (a companion or a parked
 * connection) nfd in the parked list (osf_fdt_relocate_hidden). */
void osf_setup_hidden_moved(int old, int nfd);

/* osf_setup_reset_companion resets every connection waiting in companion
 * aux_fd (queued or parked: the client sees ECONNRESET, as TCP's
 * connections in the queue of a listener that stops) and makes it refuse
 * new ones, in every process that shares it. */
void osf_setup_reset_companion(int aux_fd);

/* osf_setup_syn_filter attaches to the kernel TCP listener lfd of an
 * offloaded listener the filter that drops the SYNs of clients waiting
 * for room in its companion (setup_syn.c); osf_setup_syn_unfilter takes
 * it off a socket accepted from such a listener. */
void osf_setup_syn_filter(int lfd);
void osf_setup_syn_unfilter(int fd);

/* osf_spare_fill makes the client's next segment and writers' socket pair
 * ahead of its next connect (setup_spare.c) when osf_spare_wanted says
 * one is wanted: a reader calls it before it waits for data, where it
 * would otherwise sleep. */
extern int osf_spare_wanted;
void osf_spare_fill(void);

/* osf_spare_idle frees a made segment not taken within OSF_TRIM_IDLE_MS:
 * called where idle rings are trimmed (memory follows the traffic). */
void osf_spare_idle(void);

#endif
