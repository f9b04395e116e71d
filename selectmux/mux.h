/* mux.h: what libosf.so's other hooks tell selectmux, which owns select,
 * poll and epoll over mixed kernel and offloaded fds (poll.c, epoll*.c,
 * notify.c, lock.c). selectmux reads readiness through ready.h and the
 * rest it needs through host.h, both of which the embedder implements. */
#ifndef OSF_SELECTMUX_MUX_H
#define OSF_SELECTMUX_MUX_H

#include "../fdtable/fdt.h"

/* osf_mux_closed releases what osf keeps for a listener or an epoll
 * instance being closed; shared says another fd (a dup) still uses its
 * hidden fd. */
void osf_mux_closed(int fd, struct osf_fdt_entry *e, int shared);

/* osf_mux_forget drops a connection or undecided socket being closed from
 * this process's epolls; osf_mux_offloaded redoes the epoll registrations
 * of a socket that just became offloaded (or an offloaded listener). */
void osf_mux_forget(int fd);
void osf_mux_offloaded(int fd);

/* osf_mux_kernel_ready hands fd, a kernel socket whose readiness osf
 * computed until now (its entry's ops just went back to none: a connect
 * through a gateway settled, preload/gateway.c), from osf's inner epolls
 * back to the kernel's: each epoll it was registered in meanwhile
 * (OSF_FDF_MUXITEMS) gets the kernel registration with the application's
 * events and data. */
void osf_mux_kernel_ready(int fd);

/* osf_mux_changed re-checks, in this process's epolls, the items of the
 * connection of fd (of its dups too when dups) that wait for any of
 * events (OSF_MUX_ALL: every item), whose own state this process just
 * changed (shutdown, SO_RCVLOWAT, SO_SNDBUF): the kernel wakes the waits
 * asleep on a socket for that (with those events as the wake-up's key),
 * and no peer sends a wake token for it. */
#define OSF_MUX_ALL 0xffffffffu
void osf_mux_changed(int fd, int dups, uint32_t events);

/* osf_mux_hidden_moved renames hidden fd old nfd in the epolls' state and
 * registrations (osf_fdt_relocate_hidden; both numbers still hold the
 * file). */
void osf_mux_hidden_moved(int old, int nfd);

/* osf_mux_link_added tells of fd, a link a server just accepted (host.h
 * osf_links_copy): the epolls that watch links register it. Called
 * under the set-up's lock, never with a mux lock held. */
void osf_mux_link_added(int fd);

/* osf_mux_busy reports whether this thread holds or awaits a mux lock
 * (signals.c defers an asynchronous signal's handler then, host.h). */
int osf_mux_busy(void);

#endif
