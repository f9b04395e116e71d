//go:build osf_make

/* setup_accept.c: the server's side of the shm set-up (setup.h): accept,
 * hello validation, connections parked while their hello is late, and the
 * watcher thread that wakes pollers when one arrives. */
#include "setup_priv.h"
#include "spin.h"
#include "../sdp/setup.h"
#include "pool.h"

#include <netinet/tcp.h>
#include <stdlib.h>

/* ---- accept ------------------------------------------------------------ */

/* Connections taken from a companion whose hello has not arrived yet, or
 * (defer) whose hello has, on a TCP_DEFER_ACCEPT listener, while the
 * client has sent nothing: their fds in osf's hidden range. */
static struct {
	pthread_mutex_t mu;
	int n;
	struct parked {
		int aux_fd, hfd;
		long long since;
		int kicked; /* the watcher made the companion readable for it */
		int defer;  /* hello taken: cc holds it (hidden fds, mapping) */
		long long deadline; /* defer: handed over without data then */
		struct osf_core_conn cc;
	} p[PARK_MAX];
	int watcher; /* the watcher thread runs (in this process) */
} park = {.mu = PTHREAD_MUTEX_INITIALIZER};

void setup_park_lock(void)
{
	pthread_mutex_lock(&park.mu);
}

void setup_park_unlock(void)
{
	pthread_mutex_unlock(&park.mu);
}


/* kick makes companion aux_fd readable: a connection from this process
 * that closes at once, which accept drops (it carries no hello). The
 * application's poll, epoll or accept then wakes and takes the parked
 * connection whose hello has arrived. */
static void kick(int aux_fd)
{
	struct sockaddr_un sun;
	socklen_t sl = sizeof(sun);
	int s;

	if (REAL(getsockname)(aux_fd, (struct sockaddr *)&sun, &sl) < 0)
		return;
	s = REAL(socket)(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return;
	(void)REAL(connect)(s, (struct sockaddr *)&sun, sl);
	REAL(close)(s);
}

/* watcher waits, on its own thread (every signal blocked), for the hellos
 * of parked connections, and kicks their companion when one arrives, so
 * that an application sleeping in epoll or poll on the listener learns of
 * it; it ends when nothing is parked. */
static void *watcher(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd p[PARK_MAX];
		int aux[PARK_MAX], due[PARK_MAX], n = 0, nd = 0, i;
		long long now = osf_now_ns();
		pthread_mutex_lock(&park.mu);
		for (i = 0; i < park.n; i++) {
			if (park.p[i].kicked)
				continue;
			if (park.p[i].defer && now >= park.p[i].deadline) {
				park.p[i].kicked = 1; /* its defer time is over */
				due[nd++] = park.p[i].aux_fd;
				continue;
			}
			p[n].fd = park.p[i].hfd;
			p[n].events = POLLIN;
			p[n].revents = 0;
			aux[n++] = park.p[i].aux_fd;
		}
		if (n == 0 && nd == 0) {
			park.watcher = 0;
			pthread_mutex_unlock(&park.mu);
			return NULL;
		}
		pthread_mutex_unlock(&park.mu);
		for (i = 0; i < nd; i++)
			kick(due[i]);
		if (n == 0 || REAL(poll)(p, (nfds_t)n, 50) <= 0)
			continue;
		pthread_mutex_lock(&park.mu);
		for (i = 0; i < n; i++) {
			int k;
			if (!p[i].revents)
				continue;
			for (k = 0; k < park.n; k++)
				if (park.p[k].hfd == p[i].fd)
					park.p[k].kicked = 1;
		}
		pthread_mutex_unlock(&park.mu);
		for (i = 0; i < n; i++)
			if (p[i].revents)
				kick(aux[i]);
	}
}

/* start_watcher starts the watcher unless it runs; park.mu is held. */
static void start_watcher(void)
{
	if (!park.watcher && osf_thread_start(watcher, "osf-hello") == 0)
		park.watcher = 1;
}

/* park_drop_locked drops parked connection i; a deferred one ends as a
 * reset for its client, as TCP resets a connection it never accepted.
 * park_forget_locked only lets go of this process's copy (a fork child's:
 * the parent keeps the connection). */
OSF_FORK_TEXT static void park_forget_locked(int i)
{
	struct parked *p = &park.p[i];

	if (p->defer) { /* a slot: only this process's hold on it goes */
		osf_seg_release((void *)(uintptr_t)p->cc.seg_addr, p->cc.ring_bytes,
				OSF_SIDE_SERVER, 0);
		osf_fdt_close_hidden(p->cc.seg_fd);
		osf_fdt_close_hidden(p->cc.wake_tx_fd);
	}
	osf_fdt_close_hidden(p->hfd);
	park.p[i] = park.p[--park.n];
}

static void park_drop_locked(int i)
{
	struct parked *p = &park.p[i];

	if (p->defer) {
		struct osf_seg_hdr *h = osf_seg_hdr((void *)(uintptr_t)p->cc.seg_addr,
						    p->cc.ring_bytes);
		__atomic_or_fetch(&h->side[OSF_SIDE_SERVER].flags, OSF_SIDE_RESET,
				  __ATOMIC_ACQ_REL);
		/* Never held: the server side lets go of a slot for good. */
		__atomic_or_fetch(&h->slot_done, 1u << OSF_SIDE_SERVER, __ATOMIC_ACQ_REL);
	}
	park_forget_locked(i);
}

/* park_put parks hidden wake socket hfd for companion aux_fd (with cc for
 * a deferred connection); the oldest parked connection makes room when
 * all slots are taken (a client that connects and stays silent loses its
 * place, never anyone else's). */
static void park_put(int aux_fd, int hfd, const struct osf_core_conn *cc,
		     long long deadline)
{
	int i, old = 0;

	pthread_mutex_lock(&park.mu);
	if (park.n == PARK_MAX) {
		for (i = 1; i < park.n; i++)
			if (park.p[i].since < park.p[old].since)
				old = i;
		park_drop_locked(old);
	}
	park.p[park.n].aux_fd = aux_fd;
	park.p[park.n].hfd = hfd;
	park.p[park.n].since = osf_now_ns();
	park.p[park.n].kicked = 0;
	park.p[park.n].defer = cc != NULL;
	park.p[park.n].deadline = deadline;
	if (cc)
		park.p[park.n].cc = *cc;
	park.n++;
	start_watcher();
	pthread_mutex_unlock(&park.mu);
}

/* park_nonblock makes cfd, accepted with the application's flags, non-
 * blocking before it is parked: a parked connection is handed over as
 * such (osf_setup_accept's *as_asked 0). */
static void park_nonblock(int cfd, int flags)
{
	if (!(flags & SOCK_NONBLOCK))
		(void)REAL(fcntl)(cfd, F_SETFL, (void *)(long)O_NONBLOCK);
}

/* park_add parks cfd, whose hello has not arrived, for companion aux_fd. */
static void park_add(int aux_fd, int lfd, int cfd, int flags)
{
	int hfd;

	park_nonblock(cfd, flags);
	hfd = osf_fdt_hide(cfd, lfd);

	if (hfd < 0) {
		REAL(close)(cfd);
		return;
	}
	park_put(aux_fd, hfd, NULL, 0);
}

/* ---- TCP_DEFER_ACCEPT --------------------------------------------------- */

/* defer_secs returns the listener's TCP_DEFER_ACCEPT as the kernel
 * reports it (seconds, rounded to its SYN-ACK retransmissions), 0 when
 * off; only a listener the program set TCP options on pays the call. The
 * option stays on the kernel listener, so connections that fall back to
 * kernel TCP are deferred by the kernel itself. *shared: other processes
 * may accept from the listener. Such a listener parks nothing here: a
 * parked connection could only be taken by this process, which may have
 * stopped accepting (apache's event MPM), where TCP's queue serves every
 * process; its clients defer instead (osf_seg_hdr.srv_defer: their next
 * connections come with their first byte). */
static int defer_secs(int lfd, int *shared)
{
	struct osf_fdt_entry *e = osf_fdt_lookup(lfd);
	int v = 0;
	socklen_t l = sizeof(v);

	*shared = e && (e->flags & OSF_FDF_SHARED);
	if (!e || !(e->flags & OSF_FDF_KOPTS) ||
	    REAL(getsockopt)(lfd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &v, &l) < 0)
		return 0;
	return v;
}

/* defer_ready reports whether the client of a taken hello has sent what
 * ends TCP's deferral: a byte in its ring, its FIN, or (on wake socket
 * wfd) a wake token or its close. */
static int defer_ready(const struct osf_core_conn *cc, int wfd)
{
	struct osf_seg_hdr *h = osf_seg_hdr((void *)(uintptr_t)cc->seg_addr,
					    cc->ring_bytes);
	struct osf_seg_ring *r = &h->ring[OSF_SIDE_CLIENT];
	struct pollfd p = {wfd, POLLIN, 0};

	if (__atomic_load_n(&r->head, __ATOMIC_ACQUIRE) !=
		    __atomic_load_n(&r->tail, __ATOMIC_RELAXED) ||
	    (__atomic_load_n(&h->side[OSF_SIDE_CLIENT].flags, __ATOMIC_ACQUIRE) &
	     OSF_SIDE_FIN))
		return 1;
	return REAL(poll)(&p, 1, 0) > 0;
}

/* defer_park parks connection cfd (its hello taken into cc) while the
 * listener defers it (secs > 0) and its client has sent nothing: 1 when
 * parked (cfd and cc are the park's now), 0 to hand it over at once. The
 * server side asks for a wake token, so the client's first write (or its
 * close) makes cfd readable for the watcher and blocking accepts. The
 * deferral counts from the client's connect as its segment says, believed
 * only within [now - secs, now] (a client can only hurry its own
 * connection, as sending a byte would). With the park full it is handed
 * over at once, as if its defer time were over, rather than displace a
 * parked connection. */
static int defer_park(int aux_fd, int lfd, int cfd, struct osf_core_conn *cc,
		      int secs, int flags)
{
	struct osf_seg_hdr *h = osf_seg_hdr((void *)(uintptr_t)cc->seg_addr,
					    cc->ring_bytes);
	long long now = osf_now_ns(), span = secs * 1000000000LL, from;
	int hfd, hs, hw, full;

	from = __atomic_load_n(&h->connect_ns, __ATOMIC_RELAXED);
	if (from > now || from == 0)
		from = now;
	if (secs <= 0 || from <= now - span || defer_ready(cc, cfd))
		return 0;
	pthread_mutex_lock(&park.mu);
	full = park.n >= PARK_MAX; /* hand it over rather than evict */
	pthread_mutex_unlock(&park.mu);
	if (full)
		return 0;
	__atomic_store_n(&h->side[OSF_SIDE_SERVER].rx_want, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (defer_ready(cc, cfd))
		return 0;
	park_nonblock(cfd, flags);
	hfd = osf_fdt_hide(cfd, lfd);
	if (hfd < 0)
		return 0;
	hs = osf_fdt_hide(cc->seg_fd, lfd);
	hw = osf_fdt_hide(cc->wake_tx_fd, lfd);
	cc->wake_fd = hfd;
	cc->seg_fd = hs < 0 ? cc->seg_fd : hs;
	cc->wake_tx_fd = hw < 0 ? cc->wake_tx_fd : hw;
	park_put(aux_fd, hfd, cc, from + span);
	memset(cc, 0, sizeof(*cc));
	cc->wake_fd = cc->seg_fd = cc->wake_tx_fd = -1;
	return 1;
}

/* setup_unhide moves a parked fd out of the hidden table: to the program's
 * lowest free number, or (high) above the program's limit, where the
 * fds of a hello land (setup_take_hello); -1 (EMFILE) leaves it parked. */
int setup_unhide(int hfd, int high)
{
	int fd = high ? osf_fdt_dup_high(hfd, 1) : REAL(fcntl)(hfd, F_DUPFD_CLOEXEC, (void *)0L);

	if (fd >= 0)
		osf_fdt_close_hidden(hfd);
	return fd < 0 && high ? hfd : fd;
}

int osf_setup_parked_fds(int aux_fd, struct pollfd *p, int max)
{
	int i, n = 0;

	pthread_mutex_lock(&park.mu);
	for (i = 0; i < park.n && n < max; i++)
		if (park.p[i].aux_fd == aux_fd) {
			p[n].fd = park.p[i].hfd;
			p[n].events = POLLIN;
			p[n].revents = 0;
			n++;
		}
	pthread_mutex_unlock(&park.mu);
	return n;
}

void osf_setup_forget_companion(int aux_fd)
{
	int i;

	pthread_mutex_lock(&park.mu);
	for (i = 0; i < park.n;)
		if (park.p[i].aux_fd == aux_fd)
			park_drop_locked(i);
		else
			i++;
	setup_kfd_forget_locked(aux_fd);
	pthread_mutex_unlock(&park.mu);
}

void osf_setup_hidden_moved(int old, int nfd)
{
	int i;

	pthread_mutex_lock(&park.mu);
	for (i = 0; i < park.n; i++) {
		if (park.p[i].aux_fd == old)
			park.p[i].aux_fd = nfd;
		if (park.p[i].hfd == old)
			park.p[i].hfd = nfd;
	}
	setup_kfd_moved_locked(old, nfd);
	pthread_mutex_unlock(&park.mu);
	setup_spare_moved(old, nfd);
	setup_link_moved(old, nfd);
}

/* drain closes, without reading their hellos, the connections queued in
 * companion aux_fd: the kernel gives each client ECONNRESET and a hang-up
 * (a unix socket closed with unread data), and its side, never held by a
 * server, reads as reset (sdp/side.c osf_side_mark_gone). */
static void drain(int aux_fd)
{
	int c, n;

	for (n = 0; n < 4096; n++) {
		c = REAL(accept4)(aux_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c < 0)
			return;
		REAL(close)(c);
	}
}

void osf_setup_reset_companion(int aux_fd)
{
	int saved = errno;

	drain(aux_fd);
	/* New connects get ECONNREFUSED (unix_stream_connect), in every
	 * process; a connect that came between the drain and this is
	 * drained next. */
	(void)REAL(shutdown)(aux_fd, SHUT_RDWR);
	osf_setup_forget_companion(aux_fd);
	drain(aux_fd);
	errno = saved;
}

/* park_after_fork closes the parked connections in a fork child: the
 * parent looks after them. */
OSF_FORK_TEXT static void park_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	OSF_RESET_MEM(&park.mu, fresh);
	OSF_RESET(park.watcher, 0);
	while (park.n > 0)
		park_forget_locked(park.n - 1);
}
OSF_AFTER_FORK(park_after_fork, OSF_FORK_RELEASE);

/* server_ring_cap is the largest ring a client may make this server map. */
static uint32_t server_ring_cap(void)
{
	uint32_t own = setup_cfg.rc == OSF_ROUTE_OK ? setup_cfg.c.ring_size : (1u << 20);

	return own > SERVER_RING_CAP ? own : SERVER_RING_CAP;
}

/* derive_names sets the connection's addresses as the kernel would let
 * the peer (cred) have them; the hello's word counts only for osf's own
 * RDMA engine in this process. */
static void derive_names(const struct osf_core_accept_in *in, const struct osf_hello *h,
			 const struct ucred *cr, struct osf_core_conn *cc)
{
	struct ip lis = setup_ip_from(in->family, in->addr, in->port), client, server;
	int v6 = in->family == AF_INET6, okc, oks;

	okc = setup_get_sockaddr(h->client, &client);
	oks = setup_get_sockaddr(h->server, &server);
	if (cr->pid == osf_pid() && okc && oks) {
		server.port = in->port;
		server = setup_as_family(server, v6);
		client = setup_as_family(client, v6);
		setup_put_sockaddr(cc->local, &server);
		setup_put_sockaddr(cc->peer, &client);
		return;
	}
	/* The server's own address: the listener's, or for a wildcard
	 * listener the one the client connected to if it is this host's. */
	if (setup_ip_unspec(&lis)) {
		int claims_v4 = okc && setup_ip_unmap(client).v4;
		if (!oks || !setup_is_local(server) || setup_ip_unspec(&server)) {
			static const uint8_t lo4[4] = {127, 0, 0, 1};
			static const uint8_t lo6[16] = {[15] = 1};
			server = (!v6 || claims_v4) ? setup_ip_from(AF_INET, lo4, 0)
						    : setup_ip_from(AF_INET6, lo6, 0);
		}
	} else {
		server = lis;
	}
	server.port = in->port;
	server = setup_as_family(server, v6);
	/* The client: an address of this host, and a privileged port only
	 * for a privileged peer. */
	if (!okc || !setup_is_local(client) || setup_ip_unspec(&client) ||
	    (!v6 && !setup_ip_unmap(client).v4)) {
		uint16_t p = okc ? client.port : 0;
		client = server;
		client.port = p;
	}
	if (client.port == 0 || (cr->uid != 0 && client.port < setup_unpriv_port()))
		client.port = setup_client_port(cr->pid);
	client = setup_as_family(client, v6);
	setup_put_sockaddr(cc->local, &server);
	setup_put_sockaddr(cc->peer, &client);
}

/* setup_take_hello reads and checks the hello on cfd (osf_hello_take,
 * sdp/setup.c, which checks everything a hostile client controls): 0 with
 * cc filled, EAGAIN when it has not arrived, another errno when the
 * connection is bad (logged at debug level only: a peer's fault is no
 * reason to write on the server's stderr). */
static int took_hello(int rc, const char *why, int cfd, const struct osf_core_accept_in *in,
		      struct osf_hello_in *hi, struct osf_core_conn *cc, struct ip *kfd);

int setup_take_hello(int cfd, const struct ucred *cr, const struct osf_core_accept_in *in,
		      struct osf_core_conn *cc, struct ip *kfd, uid_t *by)
{
	struct osf_hello_in hi;
	char why[160];
	int rc;

	/* The fds may land above the program's limit: they are osf's
	 * (osf_conn_install hides them), not the program's to count. */
	osf_fdt_high_begin();
	rc = osf_hello_take_cred(cfd, cr, server_ring_cap(), &hi, why, sizeof(why), osf_pool_map);
	osf_fdt_high_end();
	if (rc == EAGAIN)
		return rc;
	if (by)
		*by = hi.cr.uid; /* its sender's (SO_PEERCRED), when rc is 0 */
	return took_hello(rc, why, cfd, in, &hi, cc, kfd);
}

int setup_take_stored(const void *msg, size_t n, int fds[2], const struct ucred *cr,
		      const struct osf_core_accept_in *in, struct osf_core_conn *cc,
		      struct ip *kfd)
{
	struct osf_hello_in hi;
	char why[160];
	int rc = osf_hello_take_stored(msg, n, fds, cr, server_ring_cap(), &hi, why,
				       sizeof(why), osf_pool_map);

	return took_hello(rc, why, -1, in, &hi, cc, kfd);
}

/* took_hello logs a bad hello (rc, why) or fills cc from good one hi,
 * which came on cfd (-1: from the family's store). */
static int took_hello(int rc, const char *why, int cfd, const struct osf_core_accept_in *in,
		      struct osf_hello_in *hi, struct osf_core_conn *cc, struct ip *kfd)
{
	if (rc != 0) {
		if (why[0] && setup_logs(OSF_LOGL_DEBUG)) {
			struct ip lis = setup_ip_from(in->family, in->addr, in->port);
			char a[80];
			setup_slog(OSF_LOGL_DEBUG, -1, 0, NULL, "accept on %s: handshake failed: %s",
			     setup_fmt_ap(&lis, a, sizeof(a)), why);
		}
		return rc;
	}
	osf_seg_hdr(hi->seg, hi->h.ring_bytes)->server_pid = osf_pid();
	setup_debug_core();
	memset(cc, 0, sizeof(*cc));
	cc->status = OSF_CORE_OFFLOADED;
	cc->wake_fd = cfd;
	cc->seg_fd = hi->seg_fd;
	cc->wake_tx_fd = hi->wake_tx_fd;
	cc->wake_tx_efd = (hi->h.flags & OSF_HELLO_F_EFD) != 0; /* checked by osf_hello_take_pool */
	cc->wake_tx_ino = hi->wake_tx_ino;
	cc->side = OSF_SIDE_SERVER;
	cc->seg_addr = (uint64_t)(uintptr_t)hi->seg;
	cc->ring_bytes = hi->h.ring_bytes;
	derive_names(in, &hi->h, &hi->cr, cc);
	/* OSF_SHM_KFD: the kernel connection that follows names it (its
	 * peer address and port), never this unix socket. */
	kfd->port = 0;
	if ((hi->h.flags & OSF_HELLO_F_KFD) && setup_get_sockaddr(hi->h.client, kfd))
		*kfd = setup_ip_unmap(*kfd);
	if (setup_logs(OSF_LOGL_DEBUG)) {
		struct ip lis = setup_ip_from(in->family, in->addr, in->port), peer;
		char a[80], b[80];
		setup_get_sockaddr(cc->peer, &peer);
		setup_slog(OSF_LOGL_DEBUG, -1, 0, NULL, "accept on %s: %s from %s (pid %d uid %u)",
		     setup_fmt_ap(&lis, a, sizeof(a)),
		     (osf_seg_hdr(hi->seg, hi->h.ring_bytes)->flags & OSF_SEG_F_RDMA)
			     ? "rdma (the engine's hand-off)" : "shm",
		     setup_fmt_ap(&peer, b, sizeof(b)), (int)hi->cr.pid, (unsigned)hi->cr.uid);
	}
	return 0;
}

/* unpark tries the parked connections of aux_fd: a connection fd (moved
 * out of the hidden range) with cc filled, or -2. */
static int unpark(int lfd, int aux_fd, const struct osf_core_accept_in *in,
		  struct osf_core_conn *cc)
{
	long long now = osf_now_ns(), limit;
	struct ip kfd;
	uid_t by = 0;
	int i;

	limit = (long long)(setup_cfg.rc == OSF_ROUTE_OK ? setup_cfg.c.connect_timeout_ms : 1000) * 1000000LL;
	pthread_mutex_lock(&park.mu);
	for (i = 0; i < park.n;) {
		struct pollfd p;
		int nfd, rc;
		if (park.p[i].aux_fd != aux_fd) {
			i++;
			continue;
		}
		if (park.p[i].defer) {
			struct parked *d = &park.p[i];
			if (now < d->deadline && !defer_ready(&d->cc, d->hfd)) {
				i++;
				continue;
			}
			/* Only the connection's own fd takes a number of the
			 * program's; the segment and writers' socket stay
			 * above its limit (fdtable/fdwindow.c, osf_fdt_high_begin). */
			nfd = setup_unhide(d->hfd, 0);
			if (nfd < 0)
				break; /* EMFILE: stays parked */
			*cc = d->cc;
			cc->wake_fd = nfd;
			cc->seg_fd = setup_unhide(d->cc.seg_fd, 1);
			cc->wake_tx_fd = setup_unhide(d->cc.wake_tx_fd, 1);
			park.p[i] = park.p[--park.n];
			pthread_mutex_unlock(&park.mu);
			return cc->wake_fd;
		}
		p.fd = park.p[i].hfd;
		p.events = POLLIN;
		p.revents = 0;
		if (REAL(poll)(&p, 1, 0) <= 0) {
			if (now - park.p[i].since > limit)
				park_drop_locked(i); /* silent too long */
			else
				i++;
			continue;
		}
		nfd = osf_fdt_fds_free(3) /* its hello's fds too (osf_setup_accept) */
			      ? REAL(fcntl)(park.p[i].hfd, F_DUPFD_CLOEXEC, (void *)0L) : -1;
		if (nfd < 0)
			break; /* EMFILE: stays parked */
		osf_fdt_close_hidden(park.p[i].hfd);
		park.p[i] = park.p[--park.n];
		rc = setup_take_hello(nfd, NULL, in, cc, &kfd, &by);
		if (rc == 0 && kfd.port) {
			setup_kfd_put_locked(aux_fd, lfd, cc, &kfd, by);
			REAL(close)(nfd);
			continue;
		}
		if (rc == 0) {
			pthread_mutex_unlock(&park.mu);
			return nfd;
		}
		REAL(close)(nfd);
	}
	pthread_mutex_unlock(&park.mu);
	return -2;
}

int osf_setup_accept(int lfd, int aux_fd, const struct osf_core_accept_in *in,
		     struct osf_core_conn *cc, int *wait_ms, int flags, int *as_asked,
		     int *window)
{
	int tries, cfd, rc, defer = -1, win;
	uint32_t note = 0; /* the listener's TCP_DEFER_ACCEPT, for its clients */
	struct ip kfd;
	uid_t by = 0;

	pthread_once(&setup_cfg.once, setup_cfg_load);
	if (*wait_ms < 0)
		*wait_ms = HELLO_WAIT_MS;
	*as_asked = *window = 0;
	/* One fd window for the hello's fds and the install's hides
	 * (setup_take_hello's nests in it), never held while waiting, around
	 * park.mu (unpark takes them in the other order) or around a debug
	 * line (the core's logger). */
	win = !setup_logs(OSF_LOGL_DEBUG);
	cfd = unpark(lfd, aux_fd, in, cc);
	if (cfd >= 0)
		return cfd;
	for (tries = 0; tries < ACCEPT_TRIES; tries++) {
		/* EMFILE (no number below the limit) leaves the connection
		 * queued, as TCP's. The hello's fds land above the limit
		 * when the hard one leaves room (take_hello); else they need
		 * two numbers of the program's besides the connection's,
		 * and with fewer free the kernel would drop them (and so the
		 * connection): EMFILE, the connection stays queued. */
		if (!osf_fdt_fds_free(3))
			return OSF_FAIL(EMFILE);
		cfd = REAL(accept4)(aux_fd, NULL, NULL, flags);
		rc = errno;
		if (cfd < 0) {
			if (rc == EMFILE || rc == ENFILE || rc == ENOBUFS || rc == ENOMEM ||
			    rc == EINVAL) { /* EINVAL: shut down (by a sharer) */
				errno = rc;
				return -1;
			}
			return -2; /* EAGAIN, ECONNABORTED, EINTR */
		}
		if (win)
			osf_fdt_high_begin();
		rc = setup_take_hello(cfd, NULL, in, cc, &kfd, &by);
		if (rc == EAGAIN && *wait_ms > 0) {
			/* An honest client sends its hello in the system call
			 * after its connect, unless preempted in between: give
			 * it a moment (a spin, then a sleep), once per call
			 * (parking is a last resort:
			 * a parked connection waits for this process's next
			 * accept or the watcher's kick). */
			struct pollfd pf = {cfd, POLLIN, 0};
			if (win)
				osf_fdt_high_end();
			if (osf_spin_poll(&pf, 1, *wait_ms) == 0) /* not on EINTR */
				(void)REAL(poll)(&pf, 1, *wait_ms);
			*wait_ms = 0;
			if (win)
				osf_fdt_high_begin();
			rc = setup_take_hello(cfd, NULL, in, cc, &kfd, &by);
		}
		if (rc == 0 && kfd.port) { /* kept for its kernel connection */
			if (win)
				osf_fdt_high_end();
			pthread_mutex_lock(&park.mu);
			setup_kfd_put_locked(aux_fd, lfd, cc, &kfd, by);
			pthread_mutex_unlock(&park.mu);
			REAL(close)(cfd);
			continue;
		}
		if (rc == 0) {
			if (defer < 0) {
				int shared;
				defer = defer_secs(lfd, &shared);
				note = defer > 0 ? (uint32_t)defer : 0;
				if (shared)
					defer = 0;
			}
			/* The client's next connections to this listener reach
			 * its companion with their first byte (setup.h). */
			osf_seg_hdr((void *)(uintptr_t)cc->seg_addr, cc->ring_bytes)->srv_defer = note;
			if (defer > 0 && win)
				osf_fdt_high_end();
			if (defer <= 0 || !defer_park(aux_fd, lfd, cfd, cc, defer, flags)) {
				if (defer > 0 && win)
					osf_fdt_high_begin();
				*as_asked = 1;
				*window = win; /* the caller's to end */
				return cfd;
			}
			continue;
		}
		if (win)
			osf_fdt_high_end();
		if (rc == EAGAIN)
			park_add(aux_fd, lfd, cfd, flags);
		else
			REAL(close)(cfd);
	}
	return -2;
}

