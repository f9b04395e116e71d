/* conn.h: the operations on an offloaded connection (osf_kind_is_conn)
 * that the hooks dispatch to. Every function here is called
 * only for fds whose table entry e says so, follows Linux TCP's errno and
 * signal behaviour for the same situation, and makes no system call while
 * data (or room) is there. */
#ifndef OSF_PRELOAD_CONN_H
#define OSF_PRELOAD_CONN_H

#include "osf.h"
#include "ops.h"

ssize_t osf_conn_recv(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags);
ssize_t osf_conn_send(int fd, struct osf_fdt_entry *e, const struct iovec *iov,
		      int iovcnt, int flags);
/* The readiness of an offloaded connection (conn_poll.c), its table's
 * (ops.h; each does what struct osf_ready says, selectmux/ready.h):
 * computed from the rings, and woken by the wake protocol (sdp/side.h).
 * osf_conn_arm_kinds is arm_kinds for any connection: OSF_ARM_RX for
 * readers, OSF_ARM_TX for writers. */
short osf_conn_poll(int fd, struct osf_fdt_entry *e);
int osf_conn_arm_kinds(short events);
int osf_conn_arm_kinds_fd(int fd, struct osf_fdt_entry *e, short events);
short osf_conn_arm(int fd, struct osf_fdt_entry *e, int kinds, int already,
		   int *trim_due);
void osf_conn_disarm(int fd, struct osf_fdt_entry *e, int kinds, int woken);
uint64_t osf_conn_stamp(int fd, struct osf_fdt_entry *e);
void osf_conn_trim(int fd, struct osf_fdt_entry *e);
int osf_conn_rx_blind(int fd, struct osf_fdt_entry *e);
short osf_conn_wake_events(int fd, struct osf_fdt_entry *e);
int osf_conn_wake_tx_fd(const struct osf_fdt_entry *e);
void *osf_conn_hold(int fd, struct osf_fdt_entry *e);
/* osf_conn_chan is chan for an RDMA connection (h: a hold), with
 * OSF_RDMA_RX=caller (conn_rdma.c osf_conn_rdma_chan). */
int osf_conn_chan(void *h, int how, struct osf_chan_wait *w);

ssize_t osf_conn_sendfile(int fd, struct osf_fdt_entry *e, int in_fd,
			  off_t *offset, size_t count);
/* osf_conn_splice moves up to len bytes between offloaded connection fd
 * and the pipe pfd, from the connection to the pipe when to_pipe, else
 * from the pipe to the connection, as splice(2) would. */
ssize_t osf_conn_splice(int fd, struct osf_fdt_entry *e, int pfd, int to_pipe,
			size_t len, unsigned int flags);
int osf_conn_shutdown(int fd, struct osf_fdt_entry *e, int how);
int osf_conn_getsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			void *val, socklen_t *len);
int osf_conn_setsockopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len);
/* osf_conn_carry_kopt takes a TCP or IP option a new connection carries
 * over from the kernel socket it was made from, as setsockopt would,
 * without asking a fresh kernel socket whether the value is valid (the
 * kernel took it already); 0. */
int osf_conn_carry_kopt(int fd, struct osf_fdt_entry *e, int level, int name,
			const void *val, socklen_t len);
/* osf_conn_set_oobinline notes SO_OOBINLINE (on) for c, in this process
 * and in its side's flags (the peer reads them: send_urgent). */
struct osf_conn;
void osf_conn_set_oobinline(struct osf_conn *c, int on);
/* osf_conn_zc_sent notes a MSG_ZEROCOPY send that moved bytes: its
 * notification (copied, as loopback TCP's always are) joins the one
 * waiting in the error queue when it follows it, as the kernel's do. */
void osf_conn_zc_sent(struct osf_conn *c);
/* osf_conn_errqueue is recvmsg with MSG_ERRQUEUE: the waiting MSG_ZEROCOPY
 * notification (IP_RECVERR or IPV6_RECVERR, SO_EE_ORIGIN_ZEROCOPY,
 * SO_EE_CODE_ZEROCOPY_COPIED, ids ee_info to ee_data) and 0, else EAGAIN. */
int osf_conn_errqueue(int fd, struct osf_fdt_entry *e, struct msghdr *msg, int flags);
/* osf_conn_carry_buf gives a new connection the buffer size (SO_RCVBUF
 * or SO_SNDBUF) of the kernel socket it was made from, size as that
 * socket reports it (doubled): what it reads back and the bytes in flight
 * it allows are then those of a connection that set it; 0, or -1. */
int osf_conn_carry_buf(int fd, struct osf_fdt_entry *e, int name, int size);
/* osf_conn_cmsgs fills msg's control buffer after a recvmsg that returned
 * got (>= 0) as TCP would: the receive timestamp (SO_TIMESTAMP,
 * SO_TIMESTAMPNS) and TCP_INQ when the program asked for them; none gives
 * msg_controllen 0, a buffer too short MSG_CTRUNC. */
void osf_conn_cmsgs(int fd, struct osf_fdt_entry *e, struct msghdr *msg,
		    ssize_t got);
int osf_conn_getname(int fd, struct osf_fdt_entry *e, int peer,
		     struct sockaddr *sa, socklen_t *len);
int osf_conn_ioctl(int fd, struct osf_fdt_entry *e, unsigned long req,
		   void *arg);

/* A connection to an osfgw gateway over an offloaded stream (conn_gw.c):
 * none waiting, waiting for the gateway's reply, or failed (the reply was
 * an error: a connect that failed, SO_ERROR holds the errno). */
#define OSF_CONN_GW_NONE 0
#define OSF_CONN_GW_WAIT 1
#define OSF_CONN_GW_FAILED 2
#define OSF_CONN_GW_FOREVER (1 << 30) /* wait_ms: as long as it takes (the
					 gateway answers or goes away) */

/* osf_conn_gw_begin marks fd's new connection as waiting for the reply. */
void osf_conn_gw_begin(int fd, struct osf_fdt_entry *e);

/* osf_conn_gw_state returns fd's OSF_CONN_GW_* without settling. */
int osf_conn_gw_state(int fd, struct osf_fdt_entry *e);

/* osf_conn_gw_settle takes the gateway's reply if it is there, waiting up
 * to wait_ms for it (0: not at all): -1 still waiting (wait_ms 0 only);
 * 0 established, or nothing was waiting; else the errno the connect
 * failed with (ETIMEDOUT when wait_ms ran out), also left in SO_ERROR. */
int osf_conn_gw_settle(int fd, struct osf_fdt_entry *e, int wait_ms);

/* osf_conn_gw_notice takes the 48-byte notice and the 32-byte delivery
 * token an osfgw gateway puts at the head of a connection it delivers to
 * a listener over the rings (written before its hello, so all there at
 * accept), the notice into b: 0; or -1 when the stream does not start
 * with a notice followed by token (nothing is taken). */
int osf_conn_gw_notice(int fd, struct osf_fdt_entry *e, uint8_t b[48],
		       const uint8_t token[32]);

/* osf_conn_install turns fd into an offloaded connection described by the
 * core's handshake result cc: for a client (how has OSF_INSTALL_DUP) the
 * wake socket is moved onto fd, for a server fd already is the wake
 * socket. OSF_INSTALL_FL_OWN says that osf made the wake socket with no
 * file status flag but O_NONBLOCK (the C set-up), so that they are set
 * without being read first. The segment fd and the writers' wake socket
 * are hidden. Returns 0, or -1 with errno; either way it has taken (and
 * on failure released) the mapping, seg_fd and wake_tx_fd, and marked
 * them so in cc; wake_fd is -1 in cc once it was moved onto fd. */
#define OSF_INSTALL_DUP 0x1
#define OSF_INSTALL_FL_OWN 0x2
/* OSF_INSTALL_AS_ASKED: a server's fd already has the file status and
 * descriptor flags asked for (accept4 made it so): neither is set.
 * OSF_INSTALL_PLACED: seg_fd and wake_tx_fd were placed and marked hidden
 * by osf and held since (a spare's, osf_fdt_hide_placed): kept where they
 * are without a look at them. */
#define OSF_INSTALL_AS_ASKED 0x4
#define OSF_INSTALL_PLACED 0x8
/* OSF_INSTALL_KFD: fd is the application's kernel TCP socket, connected
 * by the kernel, and is the wake socket (OSF_SHM_KFD, kfd.c). */
#define OSF_INSTALL_KFD 0x10
/* OSF_INSTALL_NOPOKE: a client's OSF_SHM_KFD connection whose server's
 * listener has no TCP_DEFER_ACCEPT (its link's note): no token at its
 * first publish (kfd.c osf_kfd_poke). */
#define OSF_INSTALL_NOPOKE 0x20
int osf_conn_install(int fd, struct osf_core_conn *cc, int role, int cloexec,
		     int nonblock, int how);

/* osf_conn_dup notes one more fd for the connection of entry e. */
void osf_conn_dup(struct osf_fdt_entry *e);

/* osf_conn_close releases this process's hold on the connection behind
 * fd (the fd itself is closed by the caller). */
void osf_conn_close(int fd, struct osf_fdt_entry *e);

/* osf_conn_hello_attach gives fd's connection, just installed, the hello
 * that waits for its first byte which osf_setup_connect left on this
 * thread (setup.h osf_setup_hello_take), if any. osf_conn_hello_flush
 * sends every such hello of this process: before fork, exec, spawn and a
 * hand-off, after which another process may write the connection. */
void osf_conn_hello_attach(int fd, struct osf_fdt_entry *e);
void osf_conn_hello_flush(void);

/* osf_conn_hold_port gives the connection of entry e the hidden fd pfd,
 * a TCP socket bound to the connection's local port: it holds that port
 * in the kernel (bind() elsewhere gets EADDRINUSE, as with TCP) until the
 * connection's last fd in this process closes. Not kept across exec. */
void osf_conn_hold_port(struct osf_fdt_entry *e, int pfd);

/* osf_conn_keep_port gives an accepted connection (entry e) pfd, a TCP
 * socket bound to its local address and port after its listener closed:
 * held while any connection accepted on that address lives in this
 * process (at the connection's end it passes to another,
 * osf_port_pass_on). osf_conn_port_held reports whether e's connection
 * holds a port socket. */
void osf_conn_keep_port(struct osf_fdt_entry *e, int pfd);
int osf_conn_port_held(struct osf_fdt_entry *e);

/* osf_conn_setfl mirrors F_SETFL's O_NONBLOCK and O_ASYNC (fl) into the
 * connection. */
void osf_conn_setfl(struct osf_fdt_entry *e, long fl);

/* osf_conn_fork_holders counts one more (delta 1) or one fewer (-1)
 * process holding each connection of this process: around fork, which
 * holds the table lock (osf_fdt_lock), as osf_conn_close does while it
 * lets go of an entry's connection. */
void osf_conn_fork_holders(int delta);

/* osf_conn_debug_fork_us (tests: OSF_DEBUG_FORK_WALK_US, libosf.so's
 * init): fork's count of holders sleeps that long at each connection it
 * found, between reading the entry and counting, as a forking thread
 * preempted there would; 0 in production. */
extern unsigned osf_conn_debug_fork_us;

/* osf_conn_debug_close_us (tests: OSF_DEBUG_CLOSE_US, libosf.so's init):
 * a process's last close of a connection sleeps that long between
 * letting go of its holder count and bumping close_seq, as a closer
 * preempted there would; 0 in production. */
extern unsigned osf_conn_debug_close_us;

/* osf_conn_spawn_holders counts one more (delta 1) or one fewer (-1)
 * process holding each connection a posix_spawn (or os/exec) child may
 * inherit: those without close-on-exec, fds[0..nfds) (its file actions'
 * dup2 sources), or all. The spawned image adopts what it inherited
 * without counting itself (as an exec'd one, osf_conn_rebuild), and
 * may do so only after this process closed its copy: counted at the
 * spawn, the child keeps the slot until its own last close. */
void osf_conn_spawn_holders(const int *fds, int nfds, int all, int delta);

/* Exec of a program osf cannot follow (conn_exec.c; process.c decides: a
 * set-user-ID or set-group-ID program that changes the effective id, or
 * one with file capabilities: the loader ignores LD_PRELOAD). Such a
 * program would see only an offloaded connection's wake socket: its reads
 * would end or block while the data sits in the ring.
 * osf_conn_exec_unfollowable replaces every inheritable connection fd by a
 * socket that is reset (the first read gets ECONNRESET, writes EPIPE, as
 * after a TCP reset), marks the side reset when this process is its last
 * holder (the peer then gets ECONNRESET, never a silent end of file with
 * its data lost) and makes the connection's hidden fds close-on-exec;
 * osf_conn_exec_failed undoes it when the exec fails. At most
 * OSF_EXEC_UNDO_MAX connections. */
#define OSF_EXEC_UNDO_MAX 64
struct osf_conn;
struct osf_exec_undo {
	int n;
	struct {
		int fd, saved, reset, aux, aux2;
		struct osf_conn *c;
	} v[OSF_EXEC_UNDO_MAX];
};
void osf_conn_exec_unfollowable(struct osf_exec_undo *u);
void osf_conn_exec_failed(struct osf_exec_undo *u);

/* osf_conn_spawn_unfollowable is the same for posix_spawn, done by file
 * actions added to fa in the child only (this process keeps its
 * connections, so the peer sees nothing): a reset socket dup2'd onto each
 * inheritable connection fd, the hidden fds closed. It returns the reset
 * sockets it opened in dead (at most max), for the caller to close after
 * the spawn. */
int osf_conn_spawn_unfollowable(posix_spawn_file_actions_t *fa, int *dead, int max);

/* osf_conn_hidden_moved points the connections that cache hidden fd old
 * (segment, writers' wake socket, port socket) at nfd (osf_fdt_relocate_hidden). */
void osf_conn_hidden_moved(int old, int nfd);

/* osf_conn_unmap_due unmaps the segments of closed connections kept
 * mapped (conn.c, "unmapped later") whose peer has let go or that waited
 * OSF_TRIM_IDLE_MS, or all of them (all): for moments the process would
 * wait anyway. One relaxed load when there are none. */
extern int osf_conn_later_n;
void osf_conn_unmap_due_slow(int all);
static inline void osf_conn_unmap_due(int all)
{
	if (__atomic_load_n(&osf_conn_later_n, __ATOMIC_RELAXED))
		osf_conn_unmap_due_slow(all);
}

#endif
