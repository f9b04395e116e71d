//go:build osf_make

/* sock_kfd.c: connect's OSF_SHM_KFD path (sockets.c for the rest): the
 * kernel's connect of the program's own socket, the hello a socket
 * without a port sends after it (setup_connect.c osf_setup_kfd_announce)
 * and the connection installed on the socket (kfd.c, ARCHITECTURE.md
 * "The kernel TCP socket as the connection's fd"). */
#include "conn.h"
#include "kfd.h"
#include "setup.h"
#include "sockets_priv.h"
#include "../selectmux/mux.h"

#include <fcntl.h>

/* sock_connect_kfd connects fd, whose hello osf_setup_connect sent (or
 * left to osf_setup_kfd_announce), by the kernel's connect, and installs
 * the connection on it (kfd.c): fl and fdfl are its file status and
 * descriptor flags, window the set-up's fd window, still open. */
int sock_connect_kfd(int fd, const struct sockaddr *sa, socklen_t len,
		     struct osf_core_conn *cc, const struct carried *opts, int fl, int fdfl,
		     int window)
{
	int r, err, v6 = sa->sa_family == AF_INET6, old[2], poke;
	struct osf_fdt_entry *e;

	if (window)
		osf_fdt_high_end();
	r = fl < 0 || fdfl < 0 ? -1 : osf_kfd_connect(fd, sa, len, v6, old);
	err = errno;
	if (r == -2) { /* the kernel's, in progress: the hello says so */
		__atomic_or_fetch(&osf_seg_hdr((void *)(uintptr_t)cc->seg_addr, cc->ring_bytes)
					   ->side[OSF_SIDE_CLIENT].flags,
				  OSF_SIDE_KERNEL, __ATOMIC_RELEASE);
		if (osf_setup_kfd_announce(fd, cc, &poke) == 0)
			sock_abandon(cc);
		sock_record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_BACKLOG, cc->rule, 0, sa, len);
		sock_kernel_connected(fd);
		errno = err;
		return -1;
	}
	if (r < 0 && err != EINPROGRESS) {
		/* The hello, sent before, waits at the server until its
		 * time is up; one not sent yet is let go. */
		if (!osf_setup_kfd_unannounced())
			sock_abandon(cc);
		if (fl >= 0 && fdfl >= 0)
			sock_kernel_connected(fd);
		errno = err;
		return -1;
	}
	if (osf_setup_kfd_announce(fd, cc, &poke) < 0) {
		/* No hello: the connection is made over again, kernel TCP. */
		r = osf_kfd_again(fd, sa, len, v6, old);
		err = errno;
		sock_record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_HANDSHAKE, cc->rule, 0, sa, len);
		sock_kernel_connected(fd);
		errno = err;
		return r;
	}
	if (osf_conn_install(fd, cc, OSF_ROLE_CLIENT, fdfl & FD_CLOEXEC, (fl & O_NONBLOCK) != 0,
			     OSF_INSTALL_AS_ASKED | OSF_INSTALL_KFD |
				     (poke ? 0 : OSF_INSTALL_NOPOKE)) < 0) {
		/* The connection is the kernel's (its peer waits for
		 * bytes that stay in the ring: a limit, LIMITS.md). */
		sock_record_kernel(fd, OSF_ROLE_CLIENT, OSF_R_RESOURCE, cc->rule, errno, sa, len);
		sock_kernel_connected(fd);
		errno = err;
		return r;
	}
	sock_carry_apply(fd, opts);
	if (opts->rcvlowat > 1) /* osf keeps it (conn_tcp.c), not the token socket */
		osf_kfd_lowat(fd);
	osf_mux_offloaded(fd);
	if (r < 0 && (e = osf_fdt_lookup(fd)) != NULL) { /* as loopback TCP: in progress */
		e->flags |= OSF_FDF_INPROGRESS;
		errno = EINPROGRESS;
		return -1;
	}
	return r;
}
