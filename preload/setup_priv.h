/* setup_priv.h: what the three parts of libosf.so's side of the shm set-up
 * share (setup.c: configuration, addresses, names, route decisions,
 * logging and listen; setup_connect.c: the census cache and connect;
 * setup_accept.c: accept, parked connections and the hello watcher),
 * around the set-up every side shares (sdp/setup.h). Not for the rest of
 * libosf.so, which sees setup.h. */
#ifndef OSF_PRELOAD_SETUP_PRIV_H
#define OSF_PRELOAD_SETUP_PRIV_H

#include "setup.h"
#include "../internal/routec/route.h"
#include "../sdp/segment.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A server maps at most this much ring per direction for a client, or its
 * own OSF_RING_SIZE if larger (kernel TCP's buffers are ~4-6 MiB). */
#define SERVER_RING_CAP (4u << 20)
#define PARK_MAX 32
#define ACCEPT_TRIES 16
/* What one accept call may wait, in all, for hellos not there yet: the
 * handshake bound (OSF_CONNECT_TIMEOUT_MS, 1 s by default). */
#define HELLO_WAIT_MS (setup_cfg.rc == OSF_ROUTE_OK ? (int)setup_cfg.c.connect_timeout_ms : 1000)

/* The configuration, parsed once per process (setup_cfg_load). */
struct setup_cfg {
	pthread_once_t once;
	int rc; /* OSF_ROUTE_* of the parse */
	struct osf_route_config c;
};
extern struct setup_cfg setup_cfg;

/* The IPv4-mapped IPv6 prefix, ::ffff:0:0/96. */
extern const uint8_t setup_v4mapped[12];

/* An address in one form: v4 in a[0..3] when v4, else 16 bytes. */
struct ip {
	int v4;
	uint8_t a[16];
	uint16_t port;
};

void setup_cfg_load(void);
int setup_usable(void);

/* setup_debug_core loads the core at a connection set-up (listen,
 * connect, accept) when OSF_DEBUG_CORE_AT_SETUP=1 (tests of the core's
 * loading: a fresh copy in a fork child, signals, limits). */
void setup_debug_core(void);
/* Read on first use: no RDMA device at all (no /sys/class/infiniband
 * entries, no OSF_DEBUG_RDMA_SIM); the ephemeral port range; the first
 * unprivileged port. */
int setup_rdma_absent(void);
void setup_eph_range(uint16_t *lo, uint16_t *hi);
unsigned setup_unpriv_port(void);
struct ip setup_ip_from(int family, const uint8_t *addr, uint16_t port);
struct ip setup_ip_unmap(struct ip ip);
struct ip setup_as_family(struct ip ip, int v6like);
int setup_ip_unspec(const struct ip *ip);
int setup_ip_loop(const struct ip *ip);
void setup_put_sockaddr(uint8_t out[28], const struct ip *ip);
int setup_get_sockaddr(const uint8_t in[28], struct ip *ip);
int setup_is_local(struct ip ip);
void setup_fmt_host(const struct ip *ip, char *out, size_t n);
socklen_t setup_abstract(struct sockaddr_un *sun, const char *name);
void setup_decide(int role, struct ip ip, struct osf_route_decision *d);
/* setup_begin starts a listen's or connect's set-up (role OSF_ROUTE_SERVER
 * or OSF_ROUTE_CLIENT) at the address of family, addr and port: 1 with
 * that address in *ip and the route decision in *d, or 0 when the C
 * set-up does not answer (unusable, or the decision needs the Go core). */
int setup_begin(int role, int family, const uint8_t *addr, uint16_t port,
		struct ip *ip, struct osf_route_decision *d);
void setup_set_detail(char out[96], const char *s);
/* FD_ROOM_DETAIL is the detail of a connection or listener left to kernel
 * TCP because osf's fds would cost the program (osf_fdt_affordable). */
#define FD_ROOM_DETAIL "RLIMIT_NOFILE soft = hard: no room for osf's fds"
/* SETUP_CLIENT_FDS: what a client process costs a server under
 * OSF_SHM_KFD, its link and its region's memfd and eventfd. */
#define SETUP_CLIENT_FDS 3
/* FD_CAP_DETAIL: under OSF_SHM_KFD, osf holds as many fds as it may in
 * such a limit (OSF_FDT_TIGHT_CAP) and this set-up would add some. */
#define FD_CAP_DETAIL "RLIMIT_NOFILE soft = hard: osf holds the fds it may"
const char *setup_fmt_ap(const struct ip *ip, char *out, size_t n);
int setup_logs(int level);
__attribute__((format(printf, 5, 6))) void
setup_slog(int level, int reason, int rule, const char *detail, const char *fmt, ...);
uint16_t setup_client_port(pid_t pid);

/* setup_syn_hold marks the TCP socket fd (v6: an AF_INET6 one) whose
 * connect found the companion name full, so that the listener's filter
 * drops its SYNs until the companion has room (setup_syn.c): 1 when
 * marked. */
int setup_syn_hold(int fd, int v6, const char *name);

/* setup_accept.c's park lock (its parked connections, and setup_kfd.c's
 * kept hellos and links); setup_take_hello reads and checks the hello on
 * companion connection cfd (its client's credentials cr, or NULL to ask)
 * into cc (0, EAGAIN when it has not come, else an error: cfd is bad);
 * setup_unhide moves a hidden fd to the program's
 * lowest free number, or (high) above its limit (-1: EMFILE, or hfd when
 * high). */
void setup_park_lock(void);
void setup_park_unlock(void);
int setup_take_hello(int cfd, const struct ucred *cr, const struct osf_core_accept_in *in,
		     struct osf_core_conn *cc, struct ip *kfd, uid_t *by);
int setup_unhide(int hfd, int high);

/* setup_kfd.c: OSF_SHM_KFD hellos kept for their kernel connection and
 * the links they come on, under the park lock (_locked). put keeps the
 * hello in cc (from companion aux_fd) under the client's key; forget drops
 * companion aux_fd's; moved renames a hidden fd osf_fdt_relocate_hidden
 * moved; after_fork drops a fork child's copies (its parent keeps them). */
void setup_kfd_put_locked(int aux_fd, int lfd, struct osf_core_conn *cc,
			  const struct ip *key, uid_t by);
/* struct kfd_owner is the client end of a kernel connection an
 * OSF_SHM_KFD accept looks for the hello of: a hello names it by its
 * address and port, which anyone can claim, so only one that its
 * socket's owner sent is its (or root: setup_kfd_owner_ok, by the
 * hello's sender's uid; the owner looked up once, when first needed). */
struct kfd_owner {
	struct ip peer, local; /* the connection's ends, unmapped */
	int state;             /* 0: not looked up; 1: uid; -1: none */
	uid_t uid;
	int nfd;     /* the connection's kernel socket */
	int *marked; /* its SYN's mark (osf_kfd_marked), -2 until read */
};
int setup_kfd_owner_ok(struct kfd_owner *o, uid_t by);
void setup_kfd_forget_locked(int aux_fd);
void setup_kfd_moved_locked(int old, int nfd);
/* setup_kfd_let_go lets go of the server's side of hello cc taken but
 * never to be installed (gone: for good, its client reads a reset; else
 * a fork child's copy), closing its fds. setup_kfd_link_pop_locked takes
 * a link of companion aux_fd out of the table: its hidden fd, or -1. */
void setup_kfd_let_go(struct osf_core_conn *cc, int gone);
/* setup_kfd_client_gone reports whether the client of hello cc (mapped)
 * let go of its side (its connect failed, or it closed): its port may be
 * a new connection's now, so the hello is no accepted connection's. */
int setup_kfd_client_gone(const struct osf_core_conn *cc);
/* setup_kfd_fd_named closes *fd, a hello's region memfd (efd 0) or
 * writers' eventfd (efd 1) for slot seg of ring, when its region names
 * its own here already (a connection of it came before): 1 (*fd -1),
 * else 0. */
int setup_kfd_fd_named(const void *seg, uint32_t ring, int *fd, int efd);
int setup_kfd_link_pop_locked(int aux_fd);

/* setup_fam.c: the hello store of an OSF_SHM_KFD listener shared by a
 * fork family. setup_fam_take looks for the hello under want in companion
 * aux_fd's store, and on the links queued on the companion, the store's
 * mutex held: 0 (cc filled), 1 (its client's connection is kernel TCP),
 * -1 (not found), -2 (the mutex not had within its bound). forget drops
 * companion aux_fd's store (this process's listener closed), moved
 * renames a hidden fd osf_fdt_relocate_hidden moved (park lock held).
 * setup_take_stored is setup_take_hello for a stored hello (msg, n bytes
 * as its client sent them; fds its two; cr its client's). */
int setup_fam_take(int aux_fd, const struct osf_core_accept_in *in, const struct ip *want,
		   struct kfd_owner *owner, struct osf_core_conn *cc);
void setup_fam_forget_locked(int aux_fd);
void setup_fam_moved_locked(int old, int nfd);
int setup_take_stored(const void *msg, size_t n, int fds[2], const struct ucred *cr,
		      const struct osf_core_accept_in *in, struct osf_core_conn *cc,
		      struct ip *kfd);

/* The head of a store's page (setup_fam.c): what a SO_REUSEPORT group's
 * member of another process reads to find the store's fds in the
 * owner's /proc/PID/fd (setup_group.c), and the group's shut word. */
#define SETUP_FAM_MAGIC 0x6f736667u /* "gfso" */
#define SETUP_FAM_PAGE 4096
struct setup_fam_head {
	uint32_t magic;
	uint32_t shut;   /* a member could not join: links shut as read */
	uint64_t ino[3]; /* the companion's, the pair's read and write ends' */
};
/* setup_fam_new makes a store for companion comp, not hidden yet: its
 * pair's read and write ends and its page's memfd in st (close-on-exec),
 * the page's head and mutex written: 0, or -1. setup_fam_adopt keeps
 * store st (new, or another process's copies) as the store of listener
 * lfd's companion aux_fd (hidden): 0, or -1 with st closed. */
int setup_fam_new(int comp, int st[3]);
int setup_fam_adopt(int lfd, int aux_fd, const int st[3]);

/* setup_group.c: a SO_REUSEPORT group's one companion under OSF_SHM_KFD.
 * setup_group_bind binds companion *fd at name and listens (in->backlog)
 * with a new store (st), or, when another process holds the name, takes
 * copies of that companion (*fd, its own closed) and store from a holder:
 * 0 new, 1 joined (either listening), 2 not joined (*fd stays unbound: no
 * client dials it; the group's holders shut the companion), 3 none
 * (kernel listeners on the port came before any companion: members osf
 * does not serve; not looked at when listening, a port the kernel chose),
 * -1 with errno. A member that could not join sends struct
 * setup_group_shut on a link (its uid the holders' own), and the holder
 * that shut the group sends it back. */
int setup_group_bind(int *fd, const char *name, const struct osf_core_listen_in *in,
		     int listening, int st[3]);
#define SETUP_GROUP_SHUT_MAGIC 0x6f736773u /* "sgso" */
struct setup_group_shut {
	uint32_t magic;
	uint32_t pad;
};

/* setup_spare.c: a client's segments made ahead of need.
 * setup_spare_take returns a fresh segment of ring bytes per direction,
 * mapped, sized and sealed, its fd in *segfd and a fresh writers' socket
 * pair in wtx (close-on-exec, at the lowest free numbers: the caller's fd
 * window is open), or NULL: make them. setup_spare_moved renames a hidden
 * fd of the maker that osf_fdt_relocate_hidden moved. */
void *setup_spare_take(uint32_t ring, int *segfd, int wtx[2]);
void setup_spare_moved(int old, int nfd);

/* OSF_SHM_KFD clients' links (setup_link.c), keyed by the destination
 * dialed. setup_link_get gives the link to dst's companion's owner and
 * name and its generation, or 0 when there is none. setup_link_lock takes
 * the links' lock and returns that link's fd when it is still generation
 * gen, else -1 (unlocked); setup_link_unlock lets go, dropping the link
 * when err (its sendmsg's errno) says it broke. setup_link_keep keeps s,
 * a companion connection that carried a hello, as dst's link (or closes
 * it when another thread keeps one). setup_link_moved renames a hidden
 * fd osf_fdt_relocate_hidden moved. */
unsigned setup_link_get(const struct ip *dst, struct ucred *owner, char name[108]);
int setup_link_lock(const struct ip *dst, unsigned gen);
void setup_link_unlock(const struct ip *dst, int err);
void setup_link_keep(const struct ip *dst, int s, const struct ucred *owner,
		     const char name[108]);
void setup_link_moved(int old, int nfd);

/* The one message a server writes on a link (setup_kfd.c
 * setup_kfd_link_note) when it accepts it: flags SETUP_LINK_NOTE_DEFER
 * when the listener has TCP_DEFER_ACCEPT (its clients' first publish
 * then sends a token, which ends the kernel's wait: kfd.c osf_kfd_poke;
 * without it the token only costs both ends system calls), and when its
 * program's RLIMIT_NOFILE has no room above it (soft = hard) slots: make
 * the next region for this listener a wide one of slots slots (at most
 * OSF_REGION_SLOTS_MAX), so that the server maps one more region of this
 * client process at most, not one per OSF_REGION_SLOTS connections.
 * setup_link_wide returns what dst's link (generation gen) was asked, 0
 * for none: the server's word, clamped (it only sizes this process's
 * region). SETUP_LINK_NOTE_SYN: the listener keeps its connections'
 * SYNs (TCP_SAVE_SYN; an MPTCP listener, Go's default, cannot), so its
 * accept of a marked connection waits for a hello that comes after the
 * SYN: a client whose link's note says so leaves its port to the
 * kernel's connect and sends its hello after it (setup_connect.c),
 * else it binds first and sends its hello before the SYN.
 * setup_link_note_flags returns SETUP_LINK_NOTED and the note's flags
 * once dst's link (generation gen) has its note, reading it the first
 * times, else 0. A hostile server's note only costs or saves its own
 * clients a token, or a bind. */
#define SETUP_LINK_NOTE_MAGIC 0x57465351u /* "QSFW" */
#define SETUP_LINK_NOTE_DEFER 0x1u
#define SETUP_LINK_NOTE_SYN 0x2u
#define SETUP_LINK_NOTED 0x80000000u
struct setup_link_note {
	uint32_t magic;
	uint32_t slots;
	uint32_t flags;
};
uint32_t setup_link_wide(const struct ip *dst, unsigned gen);
unsigned setup_link_note_flags(const struct ip *dst, unsigned gen);
void setup_kfd_link_note(int fd, int lfd);

/* setup_link_prune closes the links whose server closed its end (its
 * listener closed): at soft = hard under OSF_SHM_KFD they count in osf's
 * fds (osf_fdt_budget_ok) until a new link would prune them. */
void setup_link_prune(void);

/* A connection whose companion connection waits for its first byte
 * (setup.h; setup_defer.c): what its hello needs, made by setup_connect.c's
 * defer_dial and left for the install on this thread (setup_hello_leave).
 * It reaches the companion at most SETUP_DEFER_DUE_S seconds after its
 * connect, whatever the defer time: the note may be stale (the listener's
 * option changed since its server wrote it), and only a client that stays
 * silent sees the difference. */
struct osf_hello_wait {
	char name[108];      /* the companion (the region's) */
	struct ucred owner;  /* its owner, as the region's dial found it */
	uint32_t ring, hf;
	uint8_t client[28], server[28];
	int regionfd;        /* the region's memfd (pool.c's) */
	int wtx, wtx_own;    /* the writers': the region's eventfd, or the
				server's end of a pair, hidden (wtx_own) */
	int sock;            /* the wake socket, hidden (a dup: the
				program's fd may close meanwhile) */
	long long due;       /* when the defer time is over */
	struct osf_hello_pool hp;
};
#define SETUP_DEFER_DUE_S 1LL
void setup_hello_leave(struct osf_hello_wait *w);
/* setup_defer_find looks for this process's region of a listener that
 * defers among the companions that could serve a (setup_defer.c): its
 * defer time (seconds) with d's owner and name set, or 0. */
struct osf_census;
struct osf_dial;
uint32_t setup_defer_find(const struct ip *a, const struct osf_census *c, struct osf_dial *d);

#endif
