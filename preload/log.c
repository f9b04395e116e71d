//go:build osf_make

/* log.c: libosf.so's own log lines (the C set-up's: listen, connect,
 * accept), written in C so that logging never loads the Go core
 * (docs/DESIGN.md D1: a pre-fork server's worker would otherwise load a
 * core of its own for one debug line).
 *
 * A line looks exactly like one of the core's zap logger (preload/core/
 * log.go: console encoder, ISO 8601 local time to the millisecond, level,
 * logger name "osf", message, then the pid and program as JSON):
 *
 *   2026-12-06T09:41:07.123Z	debug	osf	accept on 127.0.0.1:80: shm ...	{"pid": 42, "prog": "nginx"}
 *
 * and goes where the core's go: OSF_LOG_FILE (appended to, opened at the
 * first line in osf's hidden fd range, close-on-exec, kept across fork)
 * or standard error, each line in one write. A line for a standard error
 * that is itself an offloaded connection is dropped (a raw write would
 * land in its wake socket). tests/coreload_test.go
 * TestForkChildLogsWithoutCore holds the format to the core's. */
#include "osf.h"
#include "../internal/routec/route.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_fd = -1;	     /* the OSF_LOG_FILE fd, hidden; -1: none yet */
static int log_failed;	     /* OSF_LOG_FILE could not be opened: stderr */

/* open_fd returns the fd lines go to: OSF_LOG_FILE's, opened on first use,
 * or 2. Two first lines at once may both open it; one keeps its fd. */
static int open_fd(void)
{
	const char *path = osf_env("OSF_LOG_FILE");
	int fd, hfd, cur, e;

	cur = __atomic_load_n(&log_fd, __ATOMIC_ACQUIRE);
	if (cur >= 0)
		return cur;
	if (!path || !path[0] || __atomic_load_n(&log_failed, __ATOMIC_RELAXED))
		return 2;
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		e = errno;
		if (!__atomic_exchange_n(&log_failed, 1, __ATOMIC_RELAXED))
			osf_report("OSF_LOG_FILE=\"%s\": %s; logging to stderr", path,
				   strerror(e));
		return 2;
	}
	hfd = osf_fdt_dup_high(fd, 1);
	REAL(close)(fd);
	if (hfd < 0 || osf_fdt_keep_hidden(hfd, -1) < 0)
		return 2;
	cur = -1;
	if (!__atomic_compare_exchange_n(&log_fd, &cur, hfd, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		osf_fdt_close_hidden(hfd);
		return cur;
	}
	return hfd;
}

void osf_log_hidden_moved(int old, int nfd)
{
	int cur = old;

	__atomic_compare_exchange_n(&log_fd, &cur, nfd, 0, __ATOMIC_ACQ_REL,
				    __ATOMIC_RELAXED);
}

/* json_str appends s to out as a JSON string body, escaped as zap's JSON
 * encoder escapes it; it returns the new length (at most n - 1). */
static size_t json_str(char *out, size_t k, size_t n, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	for (; *s && k + 7 < n; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			out[k++] = '\\';
			out[k++] = (char)c;
		} else if (c == '\n' || c == '\r' || c == '\t') {
			out[k++] = '\\';
			out[k++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
		} else if (c < 0x20) {
			memcpy(out + k, "\\u00", 4);
			out[k + 4] = hex[c >> 4];
			out[k + 5] = hex[c & 15];
			k += 6;
		} else {
			out[k++] = (char)c;
		}
	}
	return k;
}

static const char *level_name(int level)
{
	switch (level) {
	case OSF_LOGL_DEBUG: return "debug";
	case OSF_LOGL_INFO: return "info";
	case OSF_LOGL_WARN: return "warn";
	}
	return "error";
}

void osf_log(int level, const char *fmt, ...)
{
	char line[1024], zone[16] = "Z";
	struct timespec ts;
	struct tm tm;
	size_t k, n = sizeof(line) - 1; /* room for the newline */
	ssize_t w;
	va_list ap;
	int saved = errno, fd, off, r;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	off = (int)(tm.tm_gmtoff / 60) % (24 * 60);
	if (off != 0)
		snprintf(zone, sizeof(zone), "%c%02d%02d", off < 0 ? '-' : '+',
			 (off < 0 ? -off : off) / 60, (off < 0 ? -off : off) % 60);
	r = snprintf(line, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03ld%s\t%s\tosf\t",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, zone, level_name(level));
	k = r > 0 ? (size_t)r : 0;
	va_start(ap, fmt);
	r = vsnprintf(line + k, n - k, fmt, ap);
	va_end(ap);
	k = r < 0 ? k : k + (size_t)r < n ? k + (size_t)r : n - 1;
	r = snprintf(line + k, n - k, "\t{\"pid\": %d, \"prog\": \"", (int)osf_pid());
	k = r < 0 ? k : k + (size_t)r < n ? k + (size_t)r : n - 1;
	k = json_str(line, k, n, osf.prog);
	if (k + 2 < n) {
		line[k++] = '"';
		line[k++] = '}';
	}
	line[k++] = '\n';
	fd = open_fd();
	if (fd == 2 && osf_fdt_kind(2) >= OSF_FD_SHM) {
		errno = saved;
		return;
	}
	for (size_t done = 0; done < k; done += (size_t)w) {
		w = REAL(write)(fd, line + done, k - done);
		if (w < 0 && errno == EINTR) {
			w = 0;
			continue;
		}
		if (w <= 0)
			break; /* a full non-blocking fd drops the rest, as the core's */
	}
	errno = saved;
}
