/* qsock.h: osf's fast-path readiness API, exported by libosf.so.
 *
 * A program that polls its sockets in a tight loop can ask osf directly,
 * without a system call, whether an offloaded socket has data to read or
 * room to write:
 *
 *     void *cookie = NULL;
 *     for (;;) {
 *         if (qsock_readable(fd, &cookie) > 0)
 *             n = read(fd, buf, sizeof buf);   // will not block
 *         ...
 *     }
 *
 * The cookie caches osf's connection for fd; start it at NULL, keep one
 * per fd, and reset it to NULL after the fd is closed or reused. With a
 * valid cookie a call costs tens of nanoseconds.
 *
 * On an fd that osf does not offload (kernel TCP, pipes, files) both
 * functions fall back to poll() with a zero timeout, a system call, and
 * leave the cookie NULL.
 *
 * Link against libosf.so, or look the functions up with dlsym so that the
 * program still runs without osf.
 */
#ifndef OSF_QSOCK_H
#define OSF_QSOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* qsock_readable returns 1 when a read on fd would not block (data, end of
 * stream or an error is pending), 0 when it would, and -1 with errno set
 * when fd is not open (EBADF). It never blocks. */
int qsock_readable(int fd, void **cookie);

/* qsock_writable returns 1 when a write on fd would not block (room in the
 * send ring, or an error is pending), 0 when it would, and -1 with errno
 * set when fd is not open (EBADF). It never blocks. */
int qsock_writable(int fd, void **cookie);

#ifdef __cplusplus
}
#endif

#endif
