//go:build osf_make

/* conn_cork.c: TCP_CORK on an offloaded connection.
 *
 * TCP with the cork in sends only whole segments and holds a partial one
 * back until the cork comes out, the held bytes make a segment, the socket
 * shuts down or closes, TCP_NODELAY is set, or 200 ms pass. osf holds them
 * in the ring itself: written after the producer's head but not published
 * (segment.h, osf_seg_side.cork counts them under the tx_lock, so every
 * process holding this side writes after them). The write path (conn_io.c,
 * send_corked) looks at that one word; this file flushes: the option, the
 * close of the last descriptor, and the timer thread that publishes what
 * has waited 200 ms. A side whose last holder dies without closing has its
 * held bytes published by the peer (osf_side_mark_gone), as the kernel
 * sends a dead process's queue. */
#include "conn_priv.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <time.h>

#define CORK_NS (200 * 1000000LL) /* TCP's ceiling on holding back */
#define CORK_MAX 64               /* connections the timer watches */

/* The timer's connections: each with a reference and a hidden dup of its
 * wake socket (the application may close or reuse its own fd number). */
static struct {
	pthread_mutex_t mu;
	int n, running;
	struct corked {
		struct osf_conn *c;
		int wfd;
		long long due;
	} t[CORK_MAX];
} ck = {.mu = PTHREAD_MUTEX_INITIALIZER};

int osf_conn_cork_publish(struct osf_conn *c)
{
	uint32_t w = __atomic_load_n(&c->s.me->cork, __ATOMIC_RELAXED);
	uint32_t held = w & OSF_CORK_HELD;
	uint64_t head = __atomic_load_n(&c->s.tx->head, __ATOMIC_RELAXED);

	if (!held)
		return 0;
	/* The word is in the segment, which the peer can write: a held
	 * count that would put head past the room this process's ring has
	 * (tail + size) is not ours, and is dropped, not published. */
	if (held >= c->s.size ||
	    osf_ring_used(head + held, __atomic_load_n(&c->s.tx->tail, __ATOMIC_ACQUIRE),
			  c->s.size) < 0) {
		__atomic_store_n(&c->s.me->cork, w & OSF_CORK_ON, __ATOMIC_RELAXED);
		return 0;
	}
	__atomic_store_n(&c->s.tx->head, head + held, __ATOMIC_RELEASE);
	__atomic_store_n(&c->s.me->cork, w & OSF_CORK_ON, __ATOMIC_RELAXED);
	return 1;
}

/* cork_update puts the cork in (on 1), takes it out (0) or leaves it (-1),
 * and but for on == 1 publishes what is held, waking the reader on fd. */
static void cork_update(struct osf_conn *c, int fd, int on)
{
	int locked = osf_side_lock_tx(&c->s, fd, 0) == 0, sent = 0;

	if (on == 1)
		__atomic_or_fetch(&c->s.me->cork, OSF_CORK_ON, __ATOMIC_RELAXED);
	else if (on == 0)
		__atomic_and_fetch(&c->s.me->cork, ~OSF_CORK_ON, __ATOMIC_RELAXED);
	if (locked) {
		if (on != 1)
			sent = osf_conn_cork_publish(c);
		osf_seg_unlock(&c->s.me->tx_lock);
	}
	if (sent && fd >= 0)
		conn_wake_reader(c, fd);
}

void osf_conn_cork_flush(struct osf_conn *c, int fd)
{
	if (__atomic_load_n(&c->s.me->cork, __ATOMIC_RELAXED) & OSF_CORK_HELD)
		cork_update(c, fd, -1);
}

void osf_conn_cork_option(struct osf_conn *c, int fd, int name, int v)
{
	if (name == TCP_CORK)
		cork_update(c, fd, v != 0);
	else if (name == TCP_NODELAY && v)
		osf_conn_cork_flush(c, fd); /* pushes what is held, once */
}

/* drop_locked forgets timer entry i; ck.mu is held. */
static struct corked drop_locked(int i)
{
	struct corked k = ck.t[i];

	ck.t[i] = ck.t[--ck.n];
	return k;
}

static void release(struct corked k)
{
	osf_fdt_close_hidden(k.wfd);
	conn_put(k.c);
}

/* timer publishes, on its own thread (every signal blocked), what each
 * watched connection held when its 200 ms were up; it ends when it
 * watches nothing. A later entry is never due earlier, so it sleeps
 * until the first one's time. */
static void *timer(void *arg)
{
	(void)arg;
	for (;;) {
		long long first, now;
		struct corked due[CORK_MAX];
		int i, n = 0;
		struct timespec ts;
		pthread_mutex_lock(&ck.mu);
		if (ck.n == 0) {
			ck.running = 0;
			pthread_mutex_unlock(&ck.mu);
			return NULL;
		}
		for (first = ck.t[0].due, i = 1; i < ck.n; i++)
			if (ck.t[i].due < first)
				first = ck.t[i].due;
		pthread_mutex_unlock(&ck.mu);
		now = osf_now_ns();
		if (first > now) {
			ts.tv_sec = (first - now) / 1000000000LL;
			ts.tv_nsec = (first - now) % 1000000000LL;
			nanosleep(&ts, NULL);
		}
		now = osf_now_ns();
		pthread_mutex_lock(&ck.mu);
		for (i = 0; i < ck.n;)
			if (ck.t[i].due <= now)
				due[n++] = drop_locked(i);
			else
				i++;
		pthread_mutex_unlock(&ck.mu);
		for (i = 0; i < n; i++) {
			osf_conn_cork_flush(due[i].c, due[i].wfd);
			release(due[i]);
		}
	}
}

void osf_conn_cork_arm(struct osf_conn *c, int fd)
{
	int i, wfd, hfd;

	pthread_mutex_lock(&ck.mu);
	for (i = 0; i < ck.n; i++)
		if (ck.t[i].c == c) {
			pthread_mutex_unlock(&ck.mu);
			return; /* its timer runs */
		}
	wfd = ck.n < CORK_MAX ? REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (void *)0L) : -1;
	if (wfd < 0) {
		pthread_mutex_unlock(&ck.mu);
		osf_conn_cork_flush(c, fd); /* no timer: hold nothing */
		return;
	}
	hfd = osf_fdt_hide(wfd, fd);
	__atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
	ck.t[ck.n].c = c;
	ck.t[ck.n].wfd = hfd < 0 ? wfd : hfd;
	ck.t[ck.n].due = osf_now_ns() + CORK_NS;
	ck.n++;
	if (!ck.running && osf_thread_start(timer, "osf-cork") == 0)
		ck.running = 1;
	if (!ck.running) {
		struct corked k = drop_locked(ck.n - 1);
		pthread_mutex_unlock(&ck.mu);
		osf_conn_cork_flush(c, fd);
		release(k);
		return;
	}
	pthread_mutex_unlock(&ck.mu);
}

void osf_conn_cork_closed(struct osf_conn *c, int fd)
{
	struct corked k = {NULL, -1, 0};
	int i;

	osf_conn_cork_flush(c, fd); /* TCP sends the queue before its FIN */
	pthread_mutex_lock(&ck.mu);
	for (i = 0; i < ck.n; i++)
		if (ck.t[i].c == c) {
			k = drop_locked(i);
			break;
		}
	pthread_mutex_unlock(&ck.mu);
	if (k.c)
		release(k); /* its wake socket must not outlive the close */
}

/* cork_after_fork lets go of the parent's corked connections in a fork
 * child (after the connections' own resets: it releases them). */
OSF_FORK_TEXT static void cork_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	OSF_RESET_MEM(&ck.mu, fresh);
	OSF_RESET(ck.running, 0);
	while (ck.n > 0)
		release(drop_locked(ck.n - 1));
}
OSF_AFTER_FORK(cork_after_fork, OSF_FORK_RELEASE);
