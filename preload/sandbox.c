//go:build osf_make

/* sandbox.c: osf under a seccomp filter (sshd's pre-auth sandbox,
 * systemd's SystemCallFilter=, chromium-style filters).
 *
 * A filter allows what the program's own calls need, and nothing more;
 * on kernel TCP a read or write of a socket needs read or write, a wait
 * poll. So once a filter is on (found at start in /proc/self/status, or
 * installed later through prctl(PR_SET_SECCOMP) or libseccomp's
 * seccomp_load), osf's data path makes only such calls (preload/sys.c:
 * wake tokens by poll and write/read instead of send/recv, no FIONREAD),
 * and new sockets stay on kernel TCP (reason "seccomp filter"), as
 * setting up a connection takes calls no filter expects of the program.
 * Connections offloaded before keep working.
 */
#include "conn.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

void osf_sandbox_detect(void)
{
	char buf[4096], *p;

	if (osf_read_file("/proc/self/status", buf, sizeof(buf)) <= 0)
		return;
	p = strstr(buf, "\nSeccomp:");
	if (p && strtol(p + 9, NULL, 10) != SECCOMP_MODE_DISABLED)
		__atomic_store_n(&osf.sandboxed, 1, __ATOMIC_RELEASE);
}

static int detected; /* osf_sandbox_detect ran in this image */

void osf_sandbox_check(void)
{
	if (__atomic_load_n(&detected, __ATOMIC_ACQUIRE))
		return;
	osf_sandbox_detect();
	__atomic_store_n(&detected, 1, __ATOMIC_RELEASE);
}

/* sandbox_enter turns sandbox mode on, after mapping every connection
 * this image inherited and has not used yet (mapping one needs fstat and
 * mmap, which a filter need not allow later). */
static void sandbox_enter(void)
{
	struct osf_fdt_entry *c;
	int fd;

	OSF_FDT_FOREACH(fd, c)
		if (osf_kind_is_conn(c->kind) &&
		    __atomic_load_n(&c->image, __ATOMIC_ACQUIRE) != osf.image)
			(void)osf_conn_poll(fd, c);
	__atomic_store_n(&osf.sandboxed, 1, __ATOMIC_RELEASE);
}

/* prctl passes every option to the kernel; a seccomp filter (or strict
 * mode) that took effect turns osf's sandbox mode on. */
OSF_EXPORT int prctl(int option, ...)
{
	unsigned long a[4];
	va_list ap;
	long r;
	int i;

	va_start(ap, option);
	for (i = 0; i < 4; i++)
		a[i] = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_SECCOMP)
		sandbox_enter();
	r = syscall(SYS_prctl, option, a[0], a[1], a[2], a[3]);
	if (r < 0 && option == PR_SET_SECCOMP) {
		int err = errno;
		osf_sandbox_detect(); /* a filter may be on from before */
		errno = err;
	}
	return (int)r;
}

/* seccomp_load is libseccomp's, which installs its filter with the
 * seccomp system call, past prctl: the mode goes on before the filter. */
OSF_EXPORT int seccomp_load(const void *ctx)
{
	static int (*real)(const void *);

	if (!real)
		real = (int (*)(const void *))dlsym(RTLD_NEXT, "seccomp_load");
	if (!real)
		return -ENOSYS;
	sandbox_enter();
	return real(ctx);
}
