//go:build osf_make

/* sock_carry.c: the socket options a program set on its TCP socket,
 * carried to the offloaded connection that replaces it (sockets.c).
 */
#include "conn.h"
#include "gateway.h"
#include "kfd.h"
#include "pool.h"
#include "setup.h"
#include "sockets_priv.h"
#include "spin.h"
#include "../sdp/names.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- options carried from a TCP socket to an offloaded one -------------- */

/* sock_carried_option reports whether an option is one sock_carry_read reads back
 * (or a TCP/IP one, osf_kopt_carry's): setting it marks the socket
 * OSF_FDF_OPTSET. */
int sock_carried_option(int level, int name)
{
	if (level == IPPROTO_TCP || level == IPPROTO_IP || level == IPPROTO_IPV6)
		return 1;
	if (level != SOL_SOCKET)
		return 0;
	switch (name) {
	case SO_RCVTIMEO_OLD:
	case SO_SNDTIMEO_OLD:
#ifdef SO_RCVTIMEO_NEW
	case SO_RCVTIMEO_NEW:
	case SO_SNDTIMEO_NEW:
#endif
	case SO_LINGER:
	case SO_KEEPALIVE:
	case SO_RCVLOWAT:
	case SO_RCVBUF:
	case SO_SNDBUF:
	case SO_RCVBUFFORCE:
	case SO_SNDBUFFORCE:
	case SO_OOBINLINE:
		return 1;
	}
	return 0;
}

/* The opts_set bits of the options sock_carry_read reads itself (osf_kopt_bit
 * has the TCP and IP ones, below 16). */
#define OPT_RCVTIMEO (1u << 16)
#define OPT_SNDTIMEO (1u << 17)
#define OPT_LINGER (1u << 18)
#define OPT_KEEPALIVE (1u << 19)
#define OPT_NODELAY (1u << 20)
#define OPT_RCVLOWAT (1u << 21)
#define OPT_RCVBUF (1u << 22)
#define OPT_SNDBUF (1u << 23)
#define OPT_OOBINLINE (1u << 24)

/* sock_carried_bit is the opts_set bit of an option sock_carry_read reads back (0
 * for one it does not: setting it costs a connection nothing). */
uint32_t sock_carried_bit(int level, int name)
{
	if (level == IPPROTO_TCP && name == TCP_NODELAY)
		return OPT_NODELAY;
	if (level != SOL_SOCKET)
		return osf_kopt_bit(level, name);
	switch (name) {
	case SO_RCVTIMEO_OLD:
#ifdef SO_RCVTIMEO_NEW
	case SO_RCVTIMEO_NEW:
#endif
		return OPT_RCVTIMEO;
	case SO_SNDTIMEO_OLD:
#ifdef SO_SNDTIMEO_NEW
	case SO_SNDTIMEO_NEW:
#endif
		return OPT_SNDTIMEO;
	case SO_LINGER:
		return OPT_LINGER;
	case SO_KEEPALIVE:
		return OPT_KEEPALIVE;
	case SO_RCVLOWAT:
		return OPT_RCVLOWAT;
	case SO_RCVBUF:
	case SO_RCVBUFFORCE:
		return OPT_RCVBUF;
	case SO_SNDBUF:
	case SO_SNDBUFFORCE:
		return OPT_SNDBUF;
	case SO_OOBINLINE:
		return OPT_OOBINLINE;
	}
	return 0;
}

/* carry_bufs reads fd's buffer sizes the program set (set: opts_set's
 * bits, ~0u when not known which: then those that differ from a fresh
 * socket's). A socket's sizes cannot say whether they were set (a size
 * set to what TCP starts with reads the same but stops autotuning), so
 * only the bits tell for sure. */
static void carry_bufs(int fd, int fam, uint32_t set, int bufs[2])
{
	static const int names[2] = {SO_RCVBUF, SO_SNDBUF};
	static const uint32_t bits[2] = {OPT_RCVBUF, OPT_SNDBUF};
	int fresh = -1, i;

	for (i = 0; i < 2; i++) {
		socklen_t l = sizeof(int);
		int d = 0;
		if (!(set & bits[i]) ||
		    REAL(getsockopt)(fd, SOL_SOCKET, names[i], &bufs[i], &l) < 0) {
			bufs[i] = 0;
			continue;
		}
		if (set != ~0u)
			continue;
		if (fresh < 0 && (fresh = REAL(socket)(fam, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
			bufs[i] = 0;
			continue;
		}
		l = sizeof(int);
		if (REAL(getsockopt)(fresh, SOL_SOCKET, names[i], &d, &l) < 0 || d == bufs[i])
			bufs[i] = 0;
	}
	if (fresh >= 0)
		REAL(close)(fresh);
}

/* ---- a listener's options, read once for its accepts -------------------- */

/* Every accept carries the listener's options to its connection, and they
 * seldom change: the last listener's read is kept (lcache) and used again
 * while it is the same listener (fd and socket inode, the entry's option
 * bits, which a dup changes) and nothing may have changed them: a
 * setsockopt of a carried option through this process's hooks, on any
 * fd, bumps lcache_gen once it returned (sock_carry_changed), and a read
 * is used for at most LCACHE_TTL_NS, so that a change past the hooks
 * (another process sharing the listener, a raw system call) is seen
 * within that time, as the rlimit's (fdtable/fdwindow.c FLAT_TTL_NS): the kernel itself gives a
 * connection the options its listener had at the handshake, not at the
 * accept. The word is only tried (taken, a reader reads the kernel), so
 * no thread waits and a fork child whose parent held it reads the kernel
 * until its reset. */
#define LCACHE_TTL_NS 100000000LL
static struct {
	int word;
	int fd;
	uint32_t gen, set, flags;
	uint64_t ino;
	long long at;
	struct carried o;
} lcache;
static uint32_t lcache_gen = 1;

void sock_carry_changed(void)
{
	__atomic_add_fetch(&lcache_gen, 1, __ATOMIC_RELEASE);
}

static void lcache_after_fork(void)
{
	OSF_RESET(lcache.word, 0);
}
OSF_AFTER_FORK(lcache_after_fork, OSF_FORK_RESET);

/* lcache_get copies the kept read of listener fd into o: 1, or 0 (read
 * it: *gen is the generation to store it under). */
static int lcache_get(int fd, const struct osf_fdt_entry *e, uint32_t set, uint32_t flags,
		      struct carried *o, uint32_t *gen)
{
	int hit = 0;

	*gen = __atomic_load_n(&lcache_gen, __ATOMIC_ACQUIRE);
	if (__atomic_exchange_n(&lcache.word, 1, __ATOMIC_ACQUIRE))
		return 0;
	if (lcache.gen == *gen && lcache.fd == fd && lcache.ino == e->ino && lcache.set == set &&
	    lcache.flags == flags && osf_now_ns() - lcache.at < LCACHE_TTL_NS) {
		*o = lcache.o;
		hit = 1;
	}
	__atomic_store_n(&lcache.word, 0, __ATOMIC_RELEASE);
	return hit;
}

static void lcache_put(int fd, const struct osf_fdt_entry *e, uint32_t set, uint32_t flags,
		       const struct carried *o, uint32_t gen)
{
	if (__atomic_exchange_n(&lcache.word, 1, __ATOMIC_ACQUIRE))
		return;
	lcache.gen = gen;
	lcache.fd = fd;
	lcache.ino = e->ino;
	lcache.set = set;
	lcache.flags = flags;
	lcache.at = osf_now_ns();
	lcache.o = *o;
	__atomic_store_n(&lcache.word, 0, __ATOMIC_RELEASE);
}

static void carry_read(int fd, const struct osf_fdt_entry *e, uint32_t set, struct carried *o);

/* sock_carry_read reads the options a connection made from fd carries over:
 * none when none was ever set through any fd of it, those set through
 * fd when it never had a dup (opts_set), else every one; a listener's
 * from its last read while it stands (lcache). */
void sock_carry_read(int fd, struct carried *o)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	uint32_t set = OSF_OPTS_ALL, flags, gen;

	memset(o, 0, sizeof(*o));
	if (e && !(__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_OPTSET))
		return; /* never set through any fd: the defaults, all zero */
	if (e)
		set = __atomic_load_n(&e->opts_set, __ATOMIC_RELAXED);
	if (set & OSF_OPTS_ALL)
		set = ~0u;
	if (!e || e->kind != OSF_FD_LISTEN || !e->ino) {
		carry_read(fd, e, set, o);
		return;
	}
	flags = __atomic_load_n(&e->flags, __ATOMIC_RELAXED) & (OSF_FDF_KOPTS | OSF_FDF_V6);
	if (lcache_get(fd, e, set, flags, o, &gen))
		return;
	carry_read(fd, e, set, o);
	lcache_put(fd, e, set, flags, o, gen);
}

/* carry_read reads fd's options named by set (~0u: all) into o, zeroed. */
static void carry_read(int fd, const struct osf_fdt_entry *e, uint32_t set, struct carried *o)
{
	socklen_t l;

	if (e && (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & OSF_FDF_KOPTS) &&
	    (set & 0xffffu))
		o->nkopts = osf_kopt_carry(fd, (e->flags & OSF_FDF_V6) ? AF_INET6 : AF_INET,
					   set == ~0u ? OSF_OPTS_ALL : set & 0xffffu,
					   o->kopts, 8);
	l = sizeof(o->rcvtimeo);
	if (set & OPT_RCVTIMEO)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &o->rcvtimeo, &l);
	l = sizeof(o->sndtimeo);
	if (set & OPT_SNDTIMEO)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_SNDTIMEO, &o->sndtimeo, &l);
	l = sizeof(o->linger);
	if (set & OPT_LINGER)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_LINGER, &o->linger, &l);
	l = sizeof(int);
	if (set & OPT_KEEPALIVE)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_KEEPALIVE, &o->keepalive, &l);
	l = sizeof(int);
	if (set & OPT_NODELAY)
		REAL(getsockopt)(fd, IPPROTO_TCP, TCP_NODELAY, &o->nodelay, &l);
	l = sizeof(int);
	if (set & OPT_RCVLOWAT)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &o->rcvlowat, &l);
	l = sizeof(int);
	if (set & OPT_OOBINLINE)
		REAL(getsockopt)(fd, SOL_SOCKET, SO_OOBINLINE, &o->oobinline, &l);
	if (set & (OPT_RCVBUF | OPT_SNDBUF))
		carry_bufs(fd, e && (e->flags & OSF_FDF_V6) ? AF_INET6 : AF_INET, set, o->bufs);
}

void sock_carry_apply(int fd, const struct carried *o)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(fd);
	int saved = errno;

	if (!e || !osf_kind_is_conn(e->kind))
		return;
	for (int i = 0; i < o->nkopts; i++)
		osf_conn_carry_kopt(fd, e, o->kopts[i].level, o->kopts[i].name,
				    o->kopts[i].val, o->kopts[i].len);
	if (o->rcvtimeo.tv_sec || o->rcvtimeo.tv_usec)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_RCVTIMEO,
				    &o->rcvtimeo, sizeof(o->rcvtimeo));
	if (o->sndtimeo.tv_sec || o->sndtimeo.tv_usec)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_SNDTIMEO,
				    &o->sndtimeo, sizeof(o->sndtimeo));
	if (o->linger.l_onoff)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_LINGER, &o->linger,
				    sizeof(o->linger));
	if (o->keepalive)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_KEEPALIVE,
				    &o->keepalive, sizeof(int));
	if (o->nodelay)
		osf_conn_carry_kopt(fd, e, IPPROTO_TCP, TCP_NODELAY,
				    &o->nodelay, sizeof(int));
	if (o->rcvlowat > 1)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_RCVLOWAT,
				    &o->rcvlowat, sizeof(int));
	if (o->oobinline)
		osf_conn_setsockopt(fd, e, SOL_SOCKET, SO_OOBINLINE,
				    &o->oobinline, sizeof(int));
	for (int i = 0; i < 2; i++)
		if (o->bufs[i] > 0) /* the kernel doubles what it is given */
			osf_conn_carry_buf(fd, e, i ? SO_SNDBUF : SO_RCVBUF, o->bufs[i]);
	errno = saved;
}

/* abandon releases what the core handed over when it cannot be used. */
void sock_abandon(const struct osf_core_conn *cc)
{
	if (cc->seg_addr) /* never held: this side lets go for good */
		osf_seg_release((void *)(uintptr_t)cc->seg_addr, cc->ring_bytes, cc->side, 1);
	if (cc->seg_fd >= 0 && !osf_pool_is_region_fd(cc->seg_fd))
		REAL(close)(cc->seg_fd);
	if (cc->wake_tx_fd >= 0 && !osf_pool_is_region_fd(cc->wake_tx_fd))
		REAL(close)(cc->wake_tx_fd); /* a region's eventfd is pool.c's */
	if (cc->wake_fd >= 0)
		REAL(close)(cc->wake_fd);
}
