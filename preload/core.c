//go:build osf_make

/* core.c: loading libosfcore.so (the Go core) on demand and calling it.
 *
 * Application threads never run Go code. The first slow path that needs
 * the core starts one osf thread, "osf-core", with every signal blocked;
 * that thread dlopens the core (so the Go runtime's threads inherit a
 * mask with all asynchronous signals blocked and never steal a signal a
 * program waits for with sigwait or signalfd), runs its init, puts back
 * the dispositions of asynchronous signals that the Go runtime changed,
 * and then serves calls one at a time. A caller hands its request over
 * and sleeps on a futex until the answer is there.
 *
 * After fork the child never calls the inherited core (docs/DESIGN.md D1: a
 * forked child that re-enters the parent's Go runtime hangs). If the child
 * needs the core, it loads a fresh copy of the library from a memfd, since
 * dlopen of the same path would return the stale, already-mapped one.
 */
#include "osf.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

enum core_state { CORE_NONE, CORE_LOADING, CORE_READY, CORE_FAILED };
enum core_op { CORE_OP_LISTEN = 1, CORE_OP_CONNECT };

/* A caller waits for the core's load while the loading thread makes
 * progress (uses CPU: a slow but healthy host), up to CORE_LOAD_MAX_MS; it
 * gives up after CORE_LOAD_TIMEOUT_MS without progress (e.g. the loader
 * lock is held by our caller: the loading thread sleeps). */
#define CORE_LOAD_TIMEOUT_MS 5000
#define CORE_LOAD_MAX_MS 120000

static struct {
	int state;      /* enum core_state, for this process only */
	pid_t pid;      /* process in which state is meaningful */
	int mapped;     /* some copy of the core is mapped in this image */
	int fresh;      /* the next load must use a memfd copy */
	pthread_mutex_t start_mu;
	pthread_mutex_t call_mu;
	uint32_t state_seq; /* futex: bumped when state changes */
	uint32_t req_seq;   /* futex: bumped by a caller */
	uint32_t done_seq;  /* futex: bumped by the core thread */
	int op;
	const void *in;
	void *out;
	int ret;
	struct osf_core_fns fns;
	struct osf_core_init_out cfg;
	char err[4400];
	struct sigaction before[NSIG]; /* dispositions before the load */
	void *go_handler[NSIG];        /* what the Go runtime installed */
	char path[4200];               /* the object dlopen was given */
	int loading;                   /* a copy is mapped or being mapped */
	clockid_t loader_cpu;          /* the loading thread's CPU clock */
	int loader_cpu_ok;             /* loader_cpu is set (atomic) */
} core = {
	.start_mu = PTHREAD_MUTEX_INITIALIZER,
	.call_mu = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP,
};

static void futex_wake_all(uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

/* futex_wait_ms sleeps while *w == val, at most ms milliseconds (ms < 0:
 * no limit); a signal just makes it return early. */
static void futex_wait_ms(uint32_t *w, uint32_t val, int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, ms < 0 ? NULL : &ts,
		NULL, 0);
}

static void set_state(int st)
{
	__atomic_store_n(&core.state, st, __ATOMIC_RELEASE);
	__atomic_add_fetch(&core.state_seq, 1, __ATOMIC_RELEASE);
	futex_wake_all(&core.state_seq);
}

/* is_sync reports the signals the Go runtime must keep handling: faults in
 * Go code are turned into panics by its handlers. */
static int is_sync(int sig)
{
	return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE ||
	       sig == SIGILL || sig == SIGTRAP || sig == SIGSYS;
}

static void snapshot_signals(void)
{
	int sig;

	for (sig = 1; sig < NSIG; sig++)
		if (REAL(sigaction)(sig, NULL, &core.before[sig]) < 0)
			core.before[sig].sa_handler = SIG_ERR;
}

int osf_core_owns(const void *addr)
{
	Dl_info info;

	if (!__atomic_load_n(&core.loading, __ATOMIC_ACQUIRE) || !addr)
		return 0;
	return dladdr(addr, &info) && info.dli_fname &&
	       strcmp(info.dli_fname, core.path) == 0;
}

void osf_core_note_prior(int sig)
{
	struct sigaction cur;

	if (sig < 1 || sig >= NSIG || REAL(sigaction)(sig, NULL, &cur) < 0 ||
	    osf_core_owns((void *)cur.sa_handler))
		return;
	core.before[sig] = cur; /* what the runtime is about to replace */
}

void osf_core_program_view(int sig, struct sigaction *old)
{
	if (sig < 1 || sig >= NSIG || !osf_core_owns((void *)old->sa_handler) ||
	    core.before[sig].sa_handler == SIG_ERR)
		return;
	*old = core.before[sig];
}

/* restore_async_signals undoes what the Go runtime did to asynchronous
 * signals (SIGPIPE, SIGURG): with asynchronous preemption off the core
 * never needs them, and the program's dispositions must stay its own.
 * Only handlers that belong to the core are touched: a handler the
 * program installed meanwhile (another thread) stays. */
static void restore_async_signals(void)
{
	int sig;

	for (sig = 1; sig < NSIG; sig++) {
		struct sigaction cur;
		if (core.before[sig].sa_handler == SIG_ERR ||
		    REAL(sigaction)(sig, NULL, &cur) < 0 ||
		    !osf_core_owns((void *)cur.sa_handler))
			continue;
		core.go_handler[sig] = (void *)cur.sa_handler;
		if (!is_sync(sig))
			REAL(sigaction)(sig, &core.before[sig], NULL);
	}
}

static void core_path(char *buf, size_t n)
{
	const char *slash = strrchr(osf.lib_path, '/');
	int dir = slash ? (int)(slash - osf.lib_path) : 0;

	if (slash)
		snprintf(buf, n, "%.*s/libosfcore.so", dir, osf.lib_path);
	else
		snprintf(buf, n, "libosfcore.so");
}

/* memfd_copy copies the core into a memfd and returns its /proc path in
 * buf, with the fd (to close after dlopen), or -1. */
static int memfd_copy(const char *src, char *buf, size_t n)
{
	int in, out;
	struct stat st;
	off_t off = 0;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	out = memfd_create("osfcore", MFD_CLOEXEC);
	if (out < 0 || fstat(in, &st) < 0)
		goto fail;
	while (off < st.st_size)
		if (sendfile(out, in, &off, (size_t)(st.st_size - off)) <= 0)
			goto fail;
	REAL(close)(in);
	snprintf(buf, n, "/proc/self/fd/%d", out);
	return out;
fail:
	if (out >= 0)
		REAL(close)(out);
	REAL(close)(in);
	return -1;
}

/* The Go runtime opens fds of its own while it starts (the netpoller's
 * epoll and eventfd) and keeps their numbers in private variables, so they
 * cannot be moved later. While the core starts, every free fd number below
 * osf's hidden range holds a placeholder (osf_fdt_reserve_low), so that
 * the runtime's fds are born in the hidden range and the program's fd
 * numbering is unchanged. Another thread of the program may meanwhile
 * claim a placeholder's number (dup2) or close it (EBADF, as if free). */
/* mark_runtime_fds records the fds that appeared in the hidden range while
 * the core started (the runtime's) as osf's own, so the program cannot
 * close them; before says which were open then. */
static void mark_runtime_fds(int base, const uint64_t *before)
{
	int fd;

	for (fd = base; fd < base + 64; fd++) {
		if (before[0] & (1ULL << (fd - base)))
			continue;
		if (REAL(fcntl)(fd, F_GETFD, NULL) >= 0 && osf_fdt_kind(fd) == OSF_FD_NONE)
			osf_fdt_mark_hidden(fd);
	}
}

/* other_threads reports whether the process has threads besides the
 * caller and osf-core, which could be opening fds while the core starts. */
static int other_threads(void)
{
	char buf[2048];
	int n = 0;
	char *p;

	if (osf_read_file("/proc/self/status", buf, sizeof(buf)) <= 0)
		return 1;
	p = strstr(buf, "\nThreads:");
	if (!p || sscanf(p + 9, "%d", &n) != 1)
		return 1;
	return n > 2;
}

/* reserve_limit is how far the placeholders go: the hidden range when
 * nothing else runs; with other threads, which would get any new fd above
 * the placeholders meanwhile, only to 256 so that their fds stay usable
 * with select (FD_SETSIZE). */
static int reserve_limit(void)
{
	int base = osf_fdt_hidden_base();

	if (base > (int)OSF_FDT_RESERVE_MAX) /* placeholders go no further */
		base = OSF_FDT_RESERVE_MAX;
	return other_threads() && base > 256 ? 256 : base;
}

static uint64_t open_above(int base)
{
	uint64_t m = 0;
	int fd;

	for (fd = base; fd < base + 64; fd++)
		if (REAL(fcntl)(fd, F_GETFD, NULL) >= 0)
			m |= 1ULL << (fd - base);
	return m;
}

/* core_load loads and starts the Go core. It stays one function (about 80
 * lines) because its steps must undo each other in reverse on every
 * failure: placeholder fds, blocked signals, the memfd copy, dlopen, the
 * runtime's signal handlers and RLIMIT_NOFILE. */
static int core_load(void)
{
	char path[4200], mpath[64];
	struct osf_core_init_in in;
	const char *load = path;
	uint64_t low[OSF_FDT_RESERVE_MAX / 64];
	uint64_t above;
	struct rlimit nofile;
	int limit, have_nofile;
	void *h;
	int mfd = -1, rc;

	/* Before the Go runtime records the fault handlers it forwards to. */
	osf_fault_arm();
	core_path(path, sizeof(path));
	if (core.fresh) {
		mfd = memfd_copy(path, mpath, sizeof(mpath));
		if (mfd < 0) {
			snprintf(core.err, sizeof(core.err),
				 "cannot copy %s: %s", path, strerror(errno));
			return -1;
		}
		load = mpath;
	}
	snapshot_signals();
	snprintf(core.path, sizeof(core.path), "%s", load);
	__atomic_store_n(&core.loading, 1, __ATOMIC_RELEASE);
	limit = reserve_limit();
	have_nofile = getrlimit(RLIMIT_NOFILE, &nofile) == 0;
	above = open_above(limit);
	osf_fdt_reserve_low(limit, low);
	if (have_nofile && nofile.rlim_cur < nofile.rlim_max) {
		/* Room for the runtime's fds above the placeholders, which may
		 * fill the program's whole limit (restored below). */
		struct rlimit up = {nofile.rlim_max, nofile.rlim_max};
		(void)setrlimit(RLIMIT_NOFILE, &up);
	}
	h = dlopen(load, RTLD_NOW | RTLD_LOCAL);
	if (mfd >= 0)
		REAL(close)(mfd);
	if (!h) {
		if (have_nofile)
			(void)setrlimit(RLIMIT_NOFILE, &nofile);
		osf_fdt_release_low(limit, low);
		snprintf(core.err, sizeof(core.err), "%s", dlerror());
		return -1;
	}
	core.mapped = 1;
	core.fns.init = (osf_core_init_fn)dlsym(h, "osfcore_init");
	core.fns.listen = (osf_core_listen_fn)dlsym(h, "osfcore_listen");
	core.fns.connect = (osf_core_connect_fn)dlsym(h, "osfcore_connect");
	core.fns.rdma_find = (osf_core_rdma_find_fn)dlsym(h, "osfcore_rdma_find");
	if (!core.fns.init || !core.fns.listen || !core.fns.connect) {
		snprintf(core.err, sizeof(core.err),
			 "%s lacks the osfcore_* entry points", path);
		if (have_nofile)
			(void)setrlimit(RLIMIT_NOFILE, &nofile);
		osf_fdt_release_low(limit, low);
		return -1;
	}
	memset(&in, 0, sizeof(in));
	in.abi = OSF_CORE_ABI;
	in.fresh_copy = core.fresh;
	in.pid = getpid();
	in.env_len = osf.env_len;
	in.env = osf.env;
	in.prog = osf.prog;
	in.lib_path = osf.lib_path;
	in.hidden_base = osf_fdt_inrange_base(); /* the core's F_DUPFD */
	core.cfg.log_fd = -1;
	rc = core.fns.init(&in, &core.cfg);
	/* The Go runtime raises the soft open-files limit to the hard one as
	 * it starts (package os); the program keeps the limit it had: a
	 * select() user relies on it, and exec'd children inherit it. Its
	 * init has run once an exported function returns. */
	if (have_nofile)
		(void)setrlimit(RLIMIT_NOFILE, &nofile);
	osf_fdt_release_low(limit, low);
	restore_async_signals();
	if (core.cfg.log_fd >= 0)
		osf_fdt_mark_hidden(core.cfg.log_fd);
	mark_runtime_fds(limit, &above);
	if (rc != 0) {
		snprintf(core.err, sizeof(core.err), "core init: %s",
			 strerror(rc));
		return -1;
	}
	if (core.cfg.disabled)
		osf.disabled = 1; /* the core reported the malformed value */
	return 0;
}

/* serve runs requests forever: one is pending whenever the request
 * counter differs from the completion counter. */
static void serve(void)
{
	for (;;) {
		uint32_t r = __atomic_load_n(&core.req_seq, __ATOMIC_ACQUIRE);
		uint32_t d = __atomic_load_n(&core.done_seq, __ATOMIC_ACQUIRE);
		if (r == d) {
			futex_wait_ms(&core.req_seq, r, -1);
			continue;
		}
		switch (core.op) {
		case CORE_OP_LISTEN:
			core.ret = core.fns.listen(core.in, core.out);
			break;
		case CORE_OP_CONNECT:
			core.ret = core.fns.connect(core.in, core.out);
			break;
		default:
			core.ret = ENOSYS;
		}
		__atomic_store_n(&core.done_seq, r, __ATOMIC_RELEASE);
		futex_wake_all(&core.done_seq);
	}
}

static void *core_main(void *arg)
{
	clockid_t cpu;

	(void)arg;
	if (pthread_getcpuclockid(pthread_self(), &cpu) == 0) {
		core.loader_cpu = cpu;
		__atomic_store_n(&core.loader_cpu_ok, 1, __ATOMIC_RELEASE);
	}
	if (core_load() < 0) {
		osf_report("cannot load the core (%s); continuing without "
			   "offload",
			   core.err);
		set_state(CORE_FAILED);
		return NULL;
	}
	osf_fdt_core_loaded();
	set_state(CORE_READY);
	serve();
	return NULL;
}

/* start_thread creates osf-core with every signal blocked; start_mu is
 * held. */
static int start_thread(void)
{
	return osf_thread_start(core_main, "osf-core");
}

/* begin starts loading in this process unless that is under way. */
static int begin(void)
{
	int st;

	pthread_mutex_lock(&core.start_mu);
	if (core.pid != osf_pid()) { /* first use in this process */
		core.pid = osf_pid();
		core.state = CORE_NONE;
	}
	st = core.state;
	if (st == CORE_NONE) {
		__atomic_store_n(&core.loader_cpu_ok, 0, __ATOMIC_RELEASE);
		set_state(CORE_LOADING);
		if (start_thread() != 0) {
			snprintf(core.err, sizeof(core.err),
				 "cannot start the core thread");
			set_state(CORE_FAILED);
		}
		st = core.state;
	}
	pthread_mutex_unlock(&core.start_mu);
	return st;
}

/* GO_VM_NEEDED is the address space the Go runtime reserves when it starts
 * (measured: about 1.5 GiB; docs/DESIGN.md D1). */
#define GO_VM_NEEDED (2ULL << 30)

/* room_for_go reports whether RLIMIT_AS leaves room for the Go runtime; a
 * program run under `ulimit -v` would otherwise be killed by it. */
static int room_for_go(void)
{
	struct rlimit rl;
	unsigned long long pages = 0;
	FILE *f;

	if (getrlimit(RLIMIT_AS, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1;
	f = fopen("/proc/self/statm", "re");
	if (f) {
		if (fscanf(f, "%llu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	return (unsigned long long)rl.rlim_cur >
	       pages * (unsigned long long)sysconf(_SC_PAGESIZE) + GO_VM_NEEDED;
}

/* loader_cpu_ms is the loading thread's CPU time in ms, or -1. */
static long loader_cpu_ms(void)
{
	struct timespec t;

	if (!__atomic_load_n(&core.loader_cpu_ok, __ATOMIC_ACQUIRE) ||
	    clock_gettime(core.loader_cpu, &t) != 0)
		return -1;
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 +
	       (t.tv_nsec - t0->tv_nsec) / 1000000;
}

int osf_core_ready(void)
{
	struct timespec t0, win;
	long cpu0;
	int st;

	if (osf.disabled)
		return 0;
	st = __atomic_load_n(&core.state, __ATOMIC_ACQUIRE);
	if (likely(st == CORE_READY && core.pid == osf_pid()))
		return 1;
	if (st != CORE_LOADING && !room_for_go()) {
		errno = ENOMEM;
		return 0;
	}
	st = begin();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	win = t0;
	cpu0 = loader_cpu_ms();
	if (cpu0 < 0) /* the loader has not started: its clock starts at 0 */
		cpu0 = 0;
	while (st == CORE_LOADING) {
		uint32_t seq =
			__atomic_load_n(&core.state_seq, __ATOMIC_ACQUIRE);
		long ms, cpu;
		st = __atomic_load_n(&core.state, __ATOMIC_ACQUIRE);
		if (st != CORE_LOADING)
			break;
		ms = ms_since(&win);
		if (ms >= CORE_LOAD_TIMEOUT_MS) {
			/* A loader that used CPU in this window is slow, not
			 * stuck: wait another window, up to the maximum. */
			cpu = loader_cpu_ms();
			if (cpu < 0 || cpu0 < 0 || cpu - cpu0 < 50 ||
			    ms_since(&t0) >= CORE_LOAD_MAX_MS)
				return 0; /* e.g. loader lock held by our caller */
			clock_gettime(CLOCK_MONOTONIC, &win);
			cpu0 = cpu;
			ms = 0;
		}
		futex_wait_ms(&core.state_seq, seq,
			      (int)(CORE_LOAD_TIMEOUT_MS - ms));
	}
	return st == CORE_READY && !osf.disabled;
}

/* call runs one operation on the core thread and waits for it. */
static int call(int op, const void *in, void *out)
{
	uint32_t seq;

	if (!osf_core_ready())
		return errno == ENOMEM ? ENOMEM : ENOSYS;
	if (pthread_mutex_lock(&core.call_mu) != 0)
		return EDEADLK; /* re-entered from a signal handler */
	core.op = op;
	core.in = in;
	core.out = out;
	seq = __atomic_add_fetch(&core.req_seq, 1, __ATOMIC_RELEASE);
	futex_wake_all(&core.req_seq);
	for (;;) {
		uint32_t d = __atomic_load_n(&core.done_seq, __ATOMIC_ACQUIRE);
		if (d == seq)
			break;
		futex_wait_ms(&core.done_seq, d, -1);
	}
	op = core.ret;
	pthread_mutex_unlock(&core.call_mu);
	return op;
}

int osf_core_listen(const struct osf_core_listen_in *in,
		    struct osf_core_listen_out *out)
{
	return call(CORE_OP_LISTEN, in, out);
}

int osf_core_connect(const struct osf_core_connect_in *in,
		     struct osf_core_conn *out)
{
	return call(CORE_OP_CONNECT, in, out);
}

struct osf_rdma_tx *osf_core_rdma_find(uint64_t dev, uint64_t ino, uint32_t *gen)
{
	if (__atomic_load_n(&core.state, __ATOMIC_ACQUIRE) != CORE_READY ||
	    core.pid != osf_pid() || !core.fns.rdma_find)
		return NULL;
	return core.fns.rdma_find(dev, ino, gen);
}

OSF_FORK_TEXT int osf_core_touched(void)
{
	return __atomic_load_n(&core.state, __ATOMIC_ACQUIRE) != CORE_NONE ||
	       __atomic_load_n(&core.mapped, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&core.loading, __ATOMIC_ACQUIRE);
}

/* child_after_fork forgets the parent's core in a fork child: it is never
 * called again here (docs/DESIGN.md D1), and the signal handlers it
 * installed are put back to what they were before it loaded. */
OSF_FORK_TEXT static void child_after_fork(void)
{
	int sig;
	pthread_mutex_t fresh_start = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_t fresh_call = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;

	OSF_RESET_MEM(&core.start_mu, fresh_start);
	OSF_RESET_MEM(&core.call_mu, fresh_call);
	OSF_RESET(core.state, CORE_NONE);
	OSF_RESET(core.pid, 0);
	OSF_RESET(core.req_seq, 0);
	OSF_RESET(core.done_seq, 0);
	if (!core.mapped)
		return;
	core.fresh = 1;
	/* The parent's Go handlers would run a runtime that has no threads
	 * here; faults must reach the program's own dispositions. */
	for (sig = 1; sig < NSIG; sig++) {
		struct sigaction cur;
		if (!core.go_handler[sig] ||
		    REAL(sigaction)(sig, NULL, &cur) < 0)
			continue;
		if ((void *)cur.sa_handler == core.go_handler[sig])
			REAL(sigaction)(sig, &core.before[sig], NULL);
		core.go_handler[sig] = NULL;
	}
}
OSF_AFTER_FORK(child_after_fork, OSF_FORK_RESET);
