//go:build osf_make

/* init.c: libosf.so's constructor, the real-function table and the
 * configuration snapshot (docs/DESIGN.md D1: configuration is captured once,
 * before main, because programs wipe their environment). */
#include "osf.h"
#include "conf.h"
#include "../sdp/side.h"
#include "conn.h"
#include "setup.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>
#include <x86intrin.h>

/* The lazy stubs each real-function pointer starts at (see osf.h). */
#define OSF_LAZY_STUB(ret, name, ver, params, args)                            \
	static ret lazy_##name params                                          \
	{                                                                      \
		osf_real.name =                                                \
			(__typeof__(osf_real.name))osf_resolve(#name, ver);    \
		return osf_real.name args;                                     \
	}
OSF_REAL_FUNCS(OSF_LAZY_STUB)
#undef OSF_LAZY_STUB

static void lazy_closefrom(int low)
{
	osf_real.closefrom = (void (*)(int))osf_resolve("closefrom", NULL);
	osf_real.closefrom(low);
}

#define OSF_LAZY_INIT(ret, name, ver, params, args) .name = lazy_##name,
struct osf_real osf_real = {
	OSF_REAL_FUNCS(OSF_LAZY_INIT).closefrom = lazy_closefrom,
};
#undef OSF_LAZY_INIT

struct osf_state osf;

extern char **environ;

void *osf_resolve(const char *name, const char *version)
{
	int saved = errno;
	void *p = version ? dlvsym(RTLD_NEXT, name, version)
			  : dlsym(RTLD_NEXT, name);

	/* osf_resolve is called from a lazy stub inside libosf.so, so
	 * RTLD_NEXT names the definitions after libosf.so: libc's. */

	if (!p) {
		osf_report("cannot resolve %s in the C library", name);
		abort();
	}
	errno = saved;
	return p;
}

void osf_report(const char *fmt, ...)
{
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "osf: ");
	va_list ap;

	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	(void)!REAL(write)(2, buf, (size_t)n);
}

const char *osf_env(const char *name)
{
	size_t nl = strlen(name);
	const char *p = osf.env, *end = osf.env + osf.env_len;

	while (p < end) {
		size_t l = strlen(p);
		if (l > nl && p[nl] == '=' && memcmp(p, name, nl) == 0)
			return p + nl + 1;
		p += l + 1;
	}
	return NULL;
}

int osf_parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	unsigned long v = 0;

	if (!s || !*s || strlen(s) > 10)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	if (v < lo || v > hi)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* snapshot_env copies the OSF_* configuration variables (not the state
 * variable OSF_FDTABLE) into process memory. */
static void snapshot_env(void)
{
	char **e;

	for (e = environ; e && *e; e++) {
		size_t l;
		if (strncmp(*e, "OSF_", 4) != 0)
			continue;
		if (strncmp(*e, "OSF_FDTABLE=", 12) == 0) {
			snprintf(osf.fdtable_env, sizeof(osf.fdtable_env), "%s",
				 *e + 12);
			continue;
		}
		l = strlen(*e) + 1;
		if (osf.env_len + l > sizeof(osf.env)) {
			osf_report("OSF_* environment larger than %zu bytes; "
				   "ignoring %.40s...",
				   sizeof(osf.env), *e);
			continue;
		}
		memcpy(osf.env + osf.env_len, *e, l);
		osf.env_len += (uint32_t)l;
	}
}

/* load_file merges the configuration file (OSF_CONF, else /etc/osf.conf
 * when it exists) into the snapshot after the environment's entries, which
 * win; osf.env_user_len keeps the environment's part, the only one the
 * exec hooks hand on (a new program reads the file itself, for its own
 * [program] sections). A malformed file is reported once and makes osf
 * pass-through. */
static void load_file(void)
{
	const char *path = osf_env("OSF_CONF");
	char msg[1024];

	osf.env_user_len = osf.env_len;
	if (path && !*path)
		return;
	if (osf_conf_merge(path ? path : OSF_CONF_DEFAULT, path != NULL,
			   osf.prog, osf.env, &osf.env_len, sizeof(osf.env),
			   msg, sizeof(msg)) < 0) {
		osf_report("%s; osf is disabled (pass-through) in this process",
			   msg);
		osf.disabled = 1;
	}
}

/* core_beside reports whether libosfcore.so is in the directory of the
 * library path lib. */
static int core_beside(const char *lib)
{
	const char *slash = strrchr(lib, '/');
	char core[4200];

	snprintf(core, sizeof(core), "%.*s/libosfcore.so",
		 slash ? (int)(slash - lib) : 1, slash ? lib : ".");
	return access(core, R_OK) == 0;
}

/* find_lib_path records libosf.so's absolute path; the core is loaded from
 * its directory. When the path the loader used is a symbolic link and the
 * core is not beside it, the link's target is used. */
static void find_lib_path(void)
{
	Dl_info info;
	char *abs;

	if (!dladdr((void *)find_lib_path, &info) || !info.dli_fname)
		return;
	if (info.dli_fname[0] == '/' && core_beside(info.dli_fname)) {
		snprintf(osf.lib_path, sizeof(osf.lib_path), "%s",
			 info.dli_fname);
		return;
	}
	abs = realpath(info.dli_fname, NULL);
	snprintf(osf.lib_path, sizeof(osf.lib_path), "%s",
		 abs ? abs : info.dli_fname);
	free(abs);
}

/* tunable parses one C-owned data-path variable; a malformed value is
 * reported once and turns osf into pass-through for this process. */
static void tunable(const char *name, unsigned hi, unsigned *v)
{
	const char *s = osf_env(name);
	char where[4200] = "";

	if (!s)
		return;
	if (osf_parse_uint(s, 0, hi, v) < 0) {
		if (osf_conf_where(osf_env("OSF_CONF_ORIGIN"), name, 0, where,
				   sizeof(where) - 2) == 0)
			strcat(where, ": ");
		osf_report("%s%s=\"%s\": want a decimal integer 0-%u; osf is "
			   "disabled (pass-through) in this process",
			   where, name, s, hi);
		osf.disabled = 1;
	}
}

static void load_config(void)
{
	const char *dbg, *rx;

	osf.spin_us = 20;
	osf.poll_spin_us = 20;
	tunable("OSF_SPIN_US", 1000000, &osf.spin_us);
	tunable("OSF_POLL_SPIN_US", 1000000, &osf.poll_spin_us);
	dbg = osf_env("OSF_DEBUG_LOAD_CORE");
	osf.debug_load_core = dbg && strcmp(dbg, "1") == 0;
	dbg = osf_env("OSF_DEBUG_CORE_AT_SETUP");
	osf.debug_core_at_setup = dbg && strcmp(dbg, "1") == 0;
	dbg = osf_env("OSF_SHM_POOL"); /* on unless 0 */
	osf.shm_pool = !dbg || strcmp(dbg, "0") != 0;
	dbg = osf_env("OSF_SHM_DEFER"); /* on unless 0 */
	osf.shm_defer = !dbg || strcmp(dbg, "0") != 0;
	dbg = osf_env("OSF_SHM_KFD");
	osf.shm_kfd = dbg && strcmp(dbg, "1") == 0;
	osf.shm_pool |= osf.shm_kfd; /* its rings are slots of a region */
	/* Tests: a reader's wake-up on a kernel TCP socket as a preempted
	 * sender's (sdp/side.h osf_side_debug_wake_us; TestKfdCloseRace). */
	if (osf_parse_uint(osf_env("OSF_DEBUG_KFD_WAKE_US"), 0, 100000, &osf_side_debug_wake_us) < 0)
		osf_side_debug_wake_us = 0;
	/* Tests: fork's walk of the connections as a preempted thread's
	 * (preload/conn.h osf_conn_debug_fork_us; TestForkWhileClosing). */
	if (osf_parse_uint(osf_env("OSF_DEBUG_FORK_WALK_US"), 0, 100000, &osf_conn_debug_fork_us) < 0)
		osf_conn_debug_fork_us = 0;
	/* Tests: a last close as a preempted closer's (preload/conn.h
	 * osf_conn_debug_close_us; TestKfdShutdownClose). */
	if (osf_parse_uint(osf_env("OSF_DEBUG_CLOSE_US"), 0, 100000, &osf_conn_debug_close_us) < 0)
		osf_conn_debug_close_us = 0;
	dbg = osf_env("OSF_SHM_EFD"); /* on unless 0 */
	osf.shm_efd = !dbg || strcmp(dbg, "0") != 0;
	rx = osf_env("OSF_RDMA_RX"); /* the core rejects other values */
	osf.rdma_rx_caller = !rx || strcmp(rx, "engine") != 0;
	osf.rdma_lend = !rx || strcmp(rx, "lend") == 0;
}

__attribute__((constructor)) static void osf_constructor(void)
{
	int tfd, secure;

	osf_fdt_words_init();
	osf.image = __rdtsc() ^ ((uint64_t)(unsigned)osf_pid() << 32) ^
		    (uint64_t)(uintptr_t)&tfd;
	if (!osf.image)
		osf.image = 1;
	snprintf(osf.prog, sizeof(osf.prog), "%s",
		 program_invocation_short_name);
	/* A setuid or setgid program, or one with file capabilities (secure
	 * execution, which only /etc/ld.so.preload can bring osf into), runs
	 * without osf: its environment, configuration and fd table are its
	 * caller's to write (docs/ARCHITECTURE.md, "Security"). */
	secure = getauxval(AT_SECURE) != 0;
	if (secure)
		osf.disabled = 1;
	else {
		snapshot_env();
		load_file();
	}
	find_lib_path();
	if (!osf.disabled) {
		load_config();
		osf_go_init();
	}
	osf_fdt_set_image(osf.image);
	if (secure) {
		/* It never maps or trusts an inherited fd table: its caller,
		 * and any process the caller gave the table's memfd to, can
		 * write it. Its inherited connections are plain sockets; the
		 * table is not handed on to what it runs. */
		tfd = osf_fdt_find_inherited(NULL);
		if (tfd >= 0)
			(void)osf_rawsys(SYS_fcntl, tfd, F_SETFD, FD_CLOEXEC, 0, 0, 0);
		__atomic_store_n(&osf.ready, 1, __ATOMIC_RELEASE);
		return;
	}
	tfd = osf_fdt_find_inherited(osf.fdtable_env);
	if (tfd >= 0) /* inherited connections may be used at once */
		osf_sandbox_check();
	if (tfd >= 0 && osf_fdt_adopt(tfd, osf.image) < 0)
		osf_report("inherited fd table at fd %d is unusable", tfd);
	else if (tfd >= 0)
		osf_setup_kfd_adopt(); /* listeners' hello stores (setup_fam.c) */
	if (osf_go_table)
		(void)osf_fdt_ensure();
	for (int fd = 0; tfd >= 0 && fd <= 2; fd++)
		if (osf_fdt_kind(fd) >= OSF_FD_SHM)
			osf_stdio_take(fd);
	__atomic_store_n(&osf.ready, 1, __ATOMIC_RELEASE);
	/* Loaded before main, so that nothing of the program runs while the
	 * core starts (and its fds are placed out of the program's way). */
	if (osf.debug_load_core && !osf.disabled)
		(void)osf_core_ready();
}
