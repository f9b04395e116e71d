//go:build osf_make

/* stdio.c: standard streams and fdopen on offloaded connections.
 *
 * glibc's stdio reads and writes through its internal __read and __write,
 * which no preload library can interpose: a program that reads an
 * offloaded connection with fread (sha256sum on an inetd-style stdin, a
 * server that fdopens its socket) would read the wake socket's tokens.
 * When an offloaded connection is, or becomes, fd 0, 1 or 2, the standard
 * stream is replaced by a fopencookie stream whose I/O calls osf's own read
 * and write hooks (which route by the fd table at each call, so the stream
 * stays right whatever the fd later becomes), and fdopen of an offloaded fd
 * returns such a stream. The stream keeps its fd number: fileno works.
 */
#include "osf.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define IO_IS_FILEBUF 0x2000 /* glibc: fileno() answers for this stream */

extern FILE _IO_2_1_stdin_, _IO_2_1_stdout_, _IO_2_1_stderr_;

static ssize_t s_read(void *cookie, char *buf, size_t n)
{
	int fd = (int)(intptr_t)cookie;
	ssize_t r;

	do
		r = read(fd, buf, n);
	while (r < 0 && errno == EINTR);
	return r;
}

/* s_write writes all of buf, as glibc's own file streams do; a cookie
 * stream would take a short write for an error. */
static ssize_t s_write(void *cookie, const char *buf, size_t n)
{
	int fd = (int)(intptr_t)cookie;
	size_t done = 0;

	while (done < n) {
		ssize_t r = write(fd, buf + done, n - done);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return done ? (ssize_t)done : -1;
		}
		done += (size_t)r;
	}
	return (ssize_t)done;
}

static int s_seek(void *cookie, off64_t *off, int whence)
{
	off64_t r = lseek64((int)(intptr_t)cookie, *off, whence);

	if (r < 0)
		return -1;
	*off = r;
	return 0;
}

static int s_close(void *cookie) { return close((int)(intptr_t)cookie); }

static FILE *stream(int fd, const char *mode)
{
	cookie_io_functions_t io = {s_read, s_write, s_seek, s_close};
	FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);

	if (f) {
		f->_fileno = fd;
		f->_flags |= IO_IS_FILEBUF;
	}
	return f;
}

void osf_stdio_take(int fd)
{
	FILE **std, *orig, *f;
	int saved = errno;

	switch (fd) {
	case 0:
		std = &stdin, orig = &_IO_2_1_stdin_;
		break;
	case 1:
		std = &stdout, orig = &_IO_2_1_stdout_;
		break;
	case 2:
		std = &stderr, orig = &_IO_2_1_stderr_;
		break;
	default:
		return;
	}
	if (*std != orig) /* already replaced, by osf or the program */
		return;
	f = stream(fd, fd == 0 ? "r" : "w");
	if (!f) {
		errno = saved;
		return;
	}
	if (fd == 2)
		setvbuf(f, NULL, _IONBF, 0);
	if (fd != 0 && orig->_IO_write_ptr > orig->_IO_write_base) {
		/* Output buffered before the fd changed goes where it would
		 * have gone: the fd as it is when flushed. */
		fwrite(orig->_IO_write_base, 1,
		       (size_t)(orig->_IO_write_ptr - orig->_IO_write_base), f);
		orig->_IO_write_ptr = orig->_IO_write_base;
	}
	*std = f;
	errno = saved;
}

OSF_EXPORT FILE *fdopen(int fd, const char *mode)
{
	static FILE *(*real_fdopen)(int, const char *);

	if (osf_fdt_kind(fd) >= OSF_FD_SHM)
		return stream(fd, mode);
	if (!real_fdopen)
		real_fdopen = (FILE * (*)(int, const char *)) osf_resolve("fdopen", NULL);
	return real_fdopen(fd, mode);
}
