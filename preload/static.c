//go:build osf_make

/* static.c: statically linked programs under osf (osfrun --static).
 *
 * A statically linked program cannot load libosf.so. osfrun --static execs
 * osfload (preload/loader/osfload.c), a dynamically linked program that
 * loads libosf.so as any program does and calls osf_static_exec: it maps
 * the static executable's PT_LOAD segments itself, below every other piece
 * of code in the process (an ET_EXEC links there; a static PIE is placed
 * at STATIC_PIE_BASE), builds its initial stack (argv, envp, auxv with
 * AT_PHDR, AT_ENTRY, AT_BASE 0, AT_EXECFN of the program), turns on Syscall
 * User Dispatch with the allowed range everything above the program's code
 * and jumps to its entry. Every system call the program makes then raises
 * SIGSYS; on_sigsys emulates it:
 *
 *   - the numbers the Go path hooks (osf_go_mark: sockets, read/write,
 *     epoll, dup, fcntl, close, ...) and poll/ppoll/select/pselect6 call
 *     the hook of the same name;
 *   - arch_prctl ARCH_SET_FS/GET_FS is kept (the program's TLS), brk is
 *     served from a reserved region (the kernel's break belongs to the
 *     loader's C library), rt_sigaction gets a restorer outside the
 *     program (its own would trap on rt_sigreturn) and never touches
 *     SIGSYS, rt_sigprocmask and sigaltstack act on the signal frame's
 *     saved mask and stack (rt_sigreturn restores them), SIGSYS never
 *     blocked;
 *   - a thread runs on a carrier the loader's C library makes
 *     (sys_thread); clone3 gets ENOSYS (the C library falls back to
 *     clone), a vfork (os/exec's) runs in a copy of the memory without
 *     dispatch, other CLONE_VM clones (posix_spawn) EAGAIN; a fork-like
 *     clone runs, and the child turns dispatch on again (the kernel does
 *     not carry it across fork or to a new thread);
 *   - everything else goes to the kernel unchanged.
 *
 * A site osf serves whose bytes allow it is then rewritten to jump to a
 * stub that calls the hook without a signal (static_site.c); a Go
 * program's Syscall6 is patched instead (static_go.c). The image and the
 * initial stack are static_load.c's.
 *
 * The handler (SA_ONSTACK: on a Go thread's signal stack, never a
 * goroutine's) starts with the program's FS; it moves FS to the thread's
 * carrier's TLS (the C library's, which libosf.so's code uses) before any
 * C code runs and back before it returns (wrfsbase where the CPU and
 * kernel allow it, else arch_prctl), and runs osf's code on the carrier's
 * stack. All signals are blocked while it runs: a program's handler must
 * never see osf's FS. So a call a hook serves leaves the handler for a
 * stub or osf_static_gate (static_site.c), where the hook runs with the
 * program's signal mask and the program's handlers are deferred until it
 * returns (static_sig.c); a Go program's trampoline does the same.
 *
 * Where any of this is unavailable (no Syscall User Dispatch, a program
 * that is not a static x86-64 executable, code mapped below the program)
 * osf_static_exec returns -1 with the reason, and osfload execs the program
 * on kernel TCP. */
#include "osf.h"
#include "static.h"

#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <asm/prctl.h>
#include <linux/sched.h>

#ifndef PR_SYS_DISPATCH_ON
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#endif
#ifndef HWCAP2_FSGSBASE
#define HWCAP2_FSGSBASE (1 << 1)
#endif

struct static_state static_st;

/* The numbers a rewritten site serves without a trap: the hooked ones,
 * and poll and select. Others at such a site take the stub's own
 * syscall, which traps. A Go trampoline traps for those in
 * osf_static_trapnr (execve among them). */
unsigned char osf_static_fastnr[OSF_GO_NSYS];
unsigned char osf_static_trapnr[OSF_GO_NSYS];
unsigned char osf_static_vchild;

/* ---- FS and dispatch's switch (no TLS, no libc: osf_rawsys) ------------ */

static inline unsigned long fs_get(void)
{
	unsigned long v = 0;

	if (static_st.fsgsbase)
		__asm__ volatile("rdfsbase %0" : "=r"(v));
	else
		osf_rawsys(SYS_arch_prctl, ARCH_GET_FS, (long)&v, 0, 0, 0, 0);
	return v;
}

static inline void fs_set(unsigned long v)
{
	if (static_st.fsgsbase)
		__asm__ volatile("wrfsbase %0" ::"r"(v) : "memory");
	else
		osf_rawsys(SYS_arch_prctl, ARCH_SET_FS, (long)v, 0, 0, 0, 0);
}

/* Each program thread runs on a thread of the loader's C library (its
 * carrier: the main thread, or one sys_thread made), whose TLS osf's code
 * uses and whose stack it runs on (a goroutine's is small). The fs map
 * (static.h) finds a carrier's static_thr from the program's FS the
 * thread runs with (a handler's first step, before any TLS); t_prog_fs is
 * the program's FS of this thread (0 until it sets one: it then runs on
 * the carrier's). Entries are never removed: a key comes back only when
 * the C library reuses a finished thread's TCB, and that thread's new
 * carrier overwrites it. */
unsigned long osf_static_fsprog[STATIC_FSMAP];
struct static_thr *osf_static_fsthr[STATIC_FSMAP];
static int fsmap_lock;
static __thread unsigned long t_prog_fs __attribute__((tls_model("initial-exec")));
static __thread struct static_thr t_thr __attribute__((tls_model("initial-exec")));

static inline struct static_thr *fsmap_get(unsigned long prog)
{
	for (unsigned long i = (prog >> 6) % STATIC_FSMAP, n = 0; n < STATIC_FSMAP;
	     i = (i + 1) % STATIC_FSMAP, n++) {
		unsigned long k = __atomic_load_n(&osf_static_fsprog[i], __ATOMIC_ACQUIRE);
		if (k == prog)
			return __atomic_load_n(&osf_static_fsthr[i], __ATOMIC_RELAXED);
		if (!k)
			break;
	}
	return NULL;
}

/* fsmap_put maps prog to this carrier's static_thr. */
static void fsmap_put(unsigned long prog)
{
	unsigned long i = (prog >> 6) % STATIC_FSMAP;

	while (__atomic_exchange_n(&fsmap_lock, 1, __ATOMIC_ACQUIRE))
		;
	for (unsigned long n = 0; n < STATIC_FSMAP; i = (i + 1) % STATIC_FSMAP, n++) {
		unsigned long k = osf_static_fsprog[i];
		if (k == prog || !k) {
			__atomic_store_n(&osf_static_fsthr[i], &t_thr, __ATOMIC_RELAXED);
			__atomic_store_n(&osf_static_fsprog[i], prog, __ATOMIC_RELEASE);
			break;
		}
	}
	__atomic_store_n(&fsmap_lock, 0, __ATOMIC_RELEASE);
}

/* thr_init records the carrier's FS and the top of the stack osf's code
 * runs on (the carrier's own below sp, which it no longer uses). */
static void thr_init(unsigned long sp)
{
	t_thr.carrier_fs = fs_get();
	t_thr.stack = (sp - 256) & ~15UL;
}

/* enter_osf moves FS from the program's to its carrier's and returns the
 * program's; leave_osf moves back (to the one the program set meanwhile,
 * if any). No TLS before enter_osf. */
static inline __attribute__((always_inline)) unsigned long enter_osf(void)
{
	unsigned long cur = fs_get();
	struct static_thr *t = fsmap_get(cur);

	if (t && t->carrier_fs != cur)
		fs_set(t->carrier_fs);
	return cur;
}

static inline __attribute__((always_inline)) void leave_osf(unsigned long cur)
{
	unsigned long want = t_prog_fs ? t_prog_fs : cur;

	if (want != fs_get())
		fs_set(want);
}

/* thr_self is the carrier's record, on the carrier's FS only. Out of
 * line: the compiler takes the thread pointer for a constant within a
 * function, which it is not here. */
__attribute__((noipa)) static struct static_thr *thr_self(void) { return &t_thr; }

__attribute__((no_stack_protector)) struct static_thr *osf_static_osf_running(void)
{
	unsigned long cur = fs_get();
	struct static_thr *t = fsmap_get(cur);

	if (t && t->carrier_fs != cur)
		return NULL; /* the program's FS */
	/* the carrier's: TLS is osf's */
	return t_prog_fs ? thr_self() : NULL;
}

static int sud_on(void)
{
	return (int)osf_rawsys(SYS_prctl, PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON,
			 (long)static_st.text_end, (long)(STATIC_TOP - static_st.text_end), 0, 0);
}

/* ---- emulation --------------------------------------------------------- */

#define SIGSYS_BIT (1UL << (SIGSYS - 1))

static long sys_brk(unsigned long want)
{
	unsigned long pg = 4096, cur = (static_st.brk_cur + pg - 1) & ~(pg - 1);
	unsigned long next = (want + pg - 1) & ~(pg - 1);

	if (want < static_st.brk_lo || want > static_st.brk_top)
		return (long)static_st.brk_cur;
	if (next > cur && mprotect((void *)cur, next - cur, PROT_READ | PROT_WRITE) < 0)
		return (long)static_st.brk_cur;
	if (next < cur) {
		madvise((void *)next, cur - next, MADV_DONTNEED);
		mprotect((void *)next, cur - next, PROT_NONE);
	}
	static_st.brk_cur = want;
	return (long)want;
}

static long sys_clone(const long *a)
{
	unsigned long flags = (unsigned long)a[0];
	long r;

	/* os/exec's child (Go's rawVforkSyscall: CLONE_VM|CLONE_VFORK, no
	 * stack) runs in a copy of the memory: in the shared memory it would
	 * return through the handler's frames, which the suspended parent
	 * returns through later. Its calls go to the kernel (no dispatch, no
	 * osf code) until it execs, as in gosys.c. */
	if ((flags & (CLONE_VM | CLONE_VFORK | CLONE_THREAD)) == (CLONE_VM | CLONE_VFORK) && !a[1]) {
		r = osf_rawsys(SYS_clone, (long)(flags & ~(unsigned long)CLONE_VM), 0, a[2], a[3], a[4], 0);
		if (r == 0)
			osf_static_vchild = 1;
		return r;
	}
	if ((flags & (CLONE_VM | CLONE_THREAD)) || a[1]) {
		if (!static_st.warned_threads++)
			dprintf(2, "osf: static: clone(CLONE_VM) other than a thread's is refused (EAGAIN)\n");
		return -EAGAIN;
	}
	r = osf_rawsys(SYS_clone, a[0], 0, a[2], a[3], a[4], 0);
	if (r == 0 && sud_on() < 0)
		osf_rawsys(SYS_exit_group, 127, 0, 0, 0, 0, 0);
	return r;
}

static long emulate(long n, const long *a)
{
	long r;

	if (n >= 0 && n < OSF_GO_NSYS && static_st.hooked[n]) {
		r = osf_go_hook(n, a);
		return r == -1 ? -(long)errno : r;
	}
	switch (n) {
	case SYS_arch_prctl:
		if (a[0] == ARCH_SET_FS) {
			fsmap_put((unsigned long)a[1]);
			t_prog_fs = (unsigned long)a[1];
			return 0;
		}
		if (a[0] == ARCH_GET_FS) {
			*(unsigned long *)a[1] = t_prog_fs ? t_prog_fs : fs_get();
			return 0;
		}
		break;
	case SYS_brk:
		return sys_brk((unsigned long)a[0]);
	case SYS_rt_sigaction:
		return osf_static_sigaction(a);
	case SYS_clone:
		return sys_clone(a);
	case SYS_clone3:
		return -ENOSYS; /* the C library falls back to clone */
	case SYS_fork:
	case SYS_vfork: {
		const long f[5] = {SIGCHLD};
		return sys_clone(f);
	}
	case SYS_poll:
		r = poll((struct pollfd *)a[0], (nfds_t)a[1], (int)a[2]);
		return r == -1 ? -(long)errno : r;
	case SYS_ppoll:
		r = ppoll((struct pollfd *)a[0], (nfds_t)a[1], (const struct timespec *)a[2],
			  (const sigset_t *)a[3]);
		return r == -1 ? -(long)errno : r;
	case SYS_select:
		r = select((int)a[0], (fd_set *)a[1], (fd_set *)a[2], (fd_set *)a[3],
			   (struct timeval *)a[4]);
		return r == -1 ? -(long)errno : r;
	case SYS_pselect6: {
		/* a[5] is {const sigset_t *, size_t}, as the kernel takes it */
		const struct {
			const sigset_t *set;
			size_t len;
		} *m = (const void *)a[5];
		r = pselect((int)a[0], (fd_set *)a[1], (fd_set *)a[2], (fd_set *)a[3],
			    (const struct timespec *)a[4], m ? m->set : NULL);
		return r == -1 ? -(long)errno : r;
	}
	}
	return osf_rawsys(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* osf_static_call emulates system call n on the loader's FS, errno kept. */
__attribute__((noinline)) long osf_static_call(long n, const long *a)
{
	int saved = errno;
	long r = emulate(n, a);

	errno = saved;
	return r;
}

/* osf_static_fast_c: a rewritten site's call (static_site.c) on the
 * loader's FS, with the program's signal mask: a handler for a signal
 * that comes meanwhile runs once FS is the program's again
 * (static_sig.c), and the call is made again when the kernel would have
 * restarted it after the handler. */
__attribute__((no_stack_protector)) long osf_static_fast_c(long n, const long *a)
{
	struct static_thr *t;
	unsigned long fs;
	long r;
	int again;

	do {
		fs = enter_osf();
		t = thr_self();
		r = osf_static_call(n, a);
		again = osf_intr_take_restart() && r == -EINTR && static_restarts(n);
		leave_osf(fs);
	} while (osf_static_unblock(t) && again);
	return r;
}

/* ---- threads ------------------------------------------------------------
 *
 * A thread the program makes (clone with CLONE_VM|CLONE_SIGHAND|
 * CLONE_THREAD and a stack) runs on a carrier made by the loader's C
 * library (pthread_create), so that osf's code has TLS on it too: the
 * carrier sets what the clone flags ask (the child's tid words, the
 * program's TLS), turns dispatch on (the kernel does not carry it to a new
 * task), takes the parent's signal mask and jumps to the instruction
 * after the parent's syscall with the parent's registers, RAX 0 and RSP
 * the new stack. The parent waits for the carrier's tid. When the program's
 * thread exits (SYS_exit), the carrier ends with it; the C library never
 * learns, so its stack (CARRIER_STACK) and TCB stay. */
#define THREAD_FLAGS (CLONE_VM | CLONE_SIGHAND | CLONE_THREAD)
#define CARRIER_STACK (256UL << 10) /* the program's thread's and osf's */

struct carrier {
	greg_t regs[NGREG];
	unsigned long flags, tls, mask;
	int *ctid, *ptid;
	int tid; /* the carrier's, once it runs; -errno if it cannot */
};

/* osf_static_jump loads regs (a gregs array: the program's registers) and
 * jumps to regs[REG_RIP] with RSP regs[REG_RSP] and RAX 0. */
__attribute__((noreturn)) void osf_static_jump(const greg_t *regs);
__asm__(".text\n"
	".globl osf_static_jump\n"
	".hidden osf_static_jump\n"
	".type osf_static_jump,@function\n"
	"osf_static_jump:\n"
	"	movq %rdi, %r15\n"
	"	movq 120(%r15), %rax\n" /* REG_RSP */
	"	subq $8, %rax\n"
	"	movq 128(%r15), %rcx\n" /* REG_RIP */
	"	movq %rcx, (%rax)\n"
	"	movq %rax, %rsp\n"
	"	movq 0(%r15), %r8\n"
	"	movq 8(%r15), %r9\n"
	"	movq 16(%r15), %r10\n"
	"	movq 24(%r15), %r11\n"
	"	movq 32(%r15), %r12\n"
	"	movq 40(%r15), %r13\n"
	"	movq 48(%r15), %r14\n"
	"	movq 64(%r15), %rdi\n"
	"	movq 72(%r15), %rsi\n"
	"	movq 80(%r15), %rbp\n"
	"	movq 88(%r15), %rbx\n"
	"	movq 96(%r15), %rdx\n"
	"	movq 112(%r15), %rcx\n"
	"	movq 56(%r15), %r15\n"
	"	xorl %eax, %eax\n"
	"	ret\n");

__attribute__((no_stack_protector)) static void *carrier_main(void *arg)
{
	struct carrier *c = arg;
	greg_t regs[NGREG];
	unsigned long mask = c->mask & ~SIGSYS_BIT, prog;
	int tid = (int)osf_rawsys(SYS_gettid, 0, 0, 0, 0, 0, 0);

	memcpy(regs, c->regs, sizeof(regs));
	if (c->flags & CLONE_CHILD_CLEARTID)
		osf_rawsys(SYS_set_tid_address, (long)c->ctid, 0, 0, 0, 0, 0);
	if (c->flags & CLONE_CHILD_SETTID)
		*c->ctid = tid;
	if (c->flags & CLONE_PARENT_SETTID) /* before the child can exit */
		*c->ptid = tid;
	prog = fs_get();
	thr_init((unsigned long)__builtin_frame_address(0));
	if (c->flags & CLONE_SETTLS) {
		fsmap_put(c->tls);
		t_prog_fs = prog = c->tls;
	}
	if (sud_on() < 0)
		tid = -EPERM;
	__atomic_store_n(&c->tid, tid, __ATOMIC_RELEASE);
	if (tid < 0)
		return NULL;
	/* c is the parent's from here on: only locals. No TLS once FS is
	 * the program's. */
	fs_set(prog);
	osf_rawsys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mask, 0, sizeof(mask), 0, 0);
	osf_static_jump(regs);
}

static long sys_thread(ucontext_t *uc, const long *a)
{
	struct carrier *c = calloc(1, sizeof(*c));
	pthread_attr_t at;
	pthread_t t;
	int tid, err;

	if (!c)
		return -EAGAIN;
	memcpy(c->regs, uc->uc_mcontext.gregs, sizeof(c->regs));
	c->regs[REG_RSP] = (greg_t)a[1];
	c->flags = (unsigned long)a[0];
	c->ptid = (int *)a[2];
	c->ctid = (int *)a[3];
	c->tls = (unsigned long)a[4];
	memcpy(&c->mask, &uc->uc_sigmask, sizeof(c->mask));
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, CARRIER_STACK);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	__atomic_store_n(&static_st.threads, 1, __ATOMIC_RELAXED);
	err = pthread_create(&t, &at, carrier_main, c);
	pthread_attr_destroy(&at);
	if (err) {
		free(c);
		return -EAGAIN;
	}
	while (!(tid = __atomic_load_n(&c->tid, __ATOMIC_ACQUIRE)))
		sched_yield();
	free(c);
	return tid;
}

/* dispatch runs a trapped call (on_sigsys, on the loader's FS) and
 * rewrites its site when a stub can serve it from then on. */
__attribute__((noinline)) static void dispatch(ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	const long a[6] = {g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]};
	long n = g[REG_RAX];
	int fast;

	if (n == SYS_clone && ((unsigned long)a[0] & THREAD_FLAGS) == THREAD_FLAGS && a[1] &&
	    !((unsigned long)a[0] & CLONE_VFORK)) {
		g[REG_RAX] = sys_thread(uc, a);
		return;
	}
	if (n == SYS_rt_sigprocmask) {
		g[REG_RAX] = osf_static_sigprocmask(uc, a);
		return;
	}
	if (n == SYS_sigaltstack) {
		g[REG_RAX] = osf_static_sigaltstack(uc, a);
		t_thr.ss_sp = (unsigned long)uc->uc_stack.ss_sp;
		t_thr.ss_size = uc->uc_stack.ss_size;
		return;
	}
	if (static_st.go) {
		g[REG_RAX] = osf_static_call(n, a);
		return;
	}
	/* the site first: once the call's effect shows (a line written), its
	 * site no longer traps */
	fast = n >= 0 && n < OSF_GO_NSYS && osf_static_fastnr[n];
	g[REG_RIP] = (greg_t)osf_static_rewrite((unsigned long)g[REG_RIP], fast);
	if (fast) {
		/* A hook runs outside this handler, where signals reach the
		 * program (static_sig.c): the call leaves for the gate, with
		 * where it resumes below the red zone. */
		unsigned long sp = (unsigned long)g[REG_RSP] - 128 - 8;
		*(unsigned long *)sp = (unsigned long)g[REG_RIP];
		g[REG_RSP] = (greg_t)sp;
		g[REG_RIP] = (greg_t)osf_static_gate;
		return;
	}
	g[REG_RAX] = osf_static_call(n, a);
}

/* osf_static_onstack calls fn(arg) on the stack whose top is top (0:
 * the current one). */
void osf_static_onstack(void (*fn)(ucontext_t *), ucontext_t *arg, unsigned long top);
__asm__(".text\n"
	".globl osf_static_onstack\n"
	".hidden osf_static_onstack\n"
	".type osf_static_onstack,@function\n"
	"osf_static_onstack:\n"
	"	pushq %rbp\n"
	"	movq %rsp, %rbp\n"
	"	testq %rdx, %rdx\n"
	"	jz 1f\n"
	"	movq %rdx, %rsp\n"
	"1:\n"
	"	andq $-16, %rsp\n"
	"	movq %rdi, %rax\n"
	"	movq %rsi, %rdi\n"
	"	call *%rax\n"
	"	movq %rbp, %rsp\n"
	"	popq %rbp\n"
	"	ret\n");

/* resume is dispatch's end for a call on_sigsys made itself: where the
 * call resumes (a site another thread rewrote meanwhile: the stub). */
__attribute__((noinline)) static void resume(ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;

	g[REG_RIP] = (greg_t)osf_static_rewrite((unsigned long)g[REG_RIP], 0);
}

/* sleeps reports the calls that may sleep and that osf passes to the
 * kernel unchanged (no hook, no emulation): Go's idle threads wait in
 * futex, a C program in nanosleep or wait4. */
static inline __attribute__((always_inline)) int sleeps(long n)
{
	return (n == SYS_futex || n == SYS_nanosleep || n == SYS_clock_nanosleep ||
		n == SYS_pause || n == SYS_wait4 || n == SYS_waitid ||
		n == SYS_rt_sigtimedwait) &&
	       !static_st.hooked[n] && !osf_static_trapnr[n];
}

/* on_sigsys runs with the program's FS: no TLS (and so no stack
 * protector) before enter_osf. A call that sleeps (above) runs here, on
 * the program's FS, with the program's signal mask: a signal then reaches
 * the program's handler during the wait, as in the kernel's call, where
 * with every signal blocked a SIGTERM to an idle static Go program (each
 * thread asleep in a trapped futex) waited for ever. Nothing of osf's is
 * held meanwhile (a handler may even leave by longjmp). */
__attribute__((no_stack_protector)) static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
	greg_t *g = ((ucontext_t *)uc)->uc_mcontext.gregs;
	unsigned long fs;

	(void)sig;
	(void)si;
	if (sleeps(g[REG_RAX])) {
		unsigned long all = ~0UL, prog;
		memcpy(&prog, &((ucontext_t *)uc)->uc_sigmask, sizeof(prog));
		prog &= ~SIGSYS_BIT;
		osf_rawsys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&prog, 0, sizeof(prog), 0, 0);
		g[REG_RAX] = osf_rawsys(g[REG_RAX], g[REG_RDI], g[REG_RSI], g[REG_RDX],
					g[REG_R10], g[REG_R8], g[REG_R9]);
		osf_rawsys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, 0, sizeof(all), 0, 0);
		if (static_st.go)
			return; /* no site of a Go program is rewritten */
		fs = enter_osf();
		osf_static_onstack(resume, uc, t_thr.stack);
		leave_osf(fs);
		return;
	}
	fs = enter_osf();
	/* the kernel's frame is on the program's signal stack (SA_ONSTACK:
	 * a Go thread's, once it has one) or its own; osf's code runs on the
	 * carrier's */
	osf_static_onstack(dispatch, uc, t_thr.stack);
	leave_osf(fs);
}

/* osf_static_exec runs the statically linked program at path in this
 * process with argv[0..argc) and envp (the process's own, the auxiliary
 * vector after it). It does not return on success; otherwise it returns
 * -1 and sets *why to the reason, "" for a dynamically linked program
 * (exec'd as it is, libosf.so preloaded, it needs no loader). */
OSF_EXPORT int osf_static_exec(const char *path, int argc, char **argv, char **envp, const char **why)
{
	static struct image im;
	static const int emulated[] = {
		SYS_arch_prctl, SYS_brk,    SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_clone,
		SYS_clone3,	SYS_fork,   SYS_vfork,	      SYS_execve,	  SYS_sigaltstack,
	};
	struct sigaction sa;
	unsigned long sp;
	int fd;

	*why = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*why = "cannot open the program";
		return -1;
	}
	*why = osf_static_read_image(fd, &im);
	if (!*why && osf_rawsys(SYS_prctl, PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0, 0) < 0)
		*why = "this kernel has no Syscall User Dispatch (Linux 5.11 or later)";
	if (!*why)
		*why = osf_static_map_image(fd, &im);
	static_st.fsgsbase = (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE) != 0;
	/* A Go program: its sites are not rewritten (a stub's frame would be
	 * on a goroutine's stack); its Syscall6 calls the hooks itself. */
	static_st.go = !*why && osf_static_go_image(&im);
	if (static_st.go)
		osf_static_go_patch(fd, im.bias, static_st.fsgsbase ? static_st.stubs : NULL);
	REAL(close)(fd);
	if (*why)
		return -1;
	if (osf_static_below_text(&im)) {
		*why = "other code is mapped below the program";
		return -1;
	}
	*why = osf_static_build_stack(&im, path, argc, argv, envp, &sp);
	if (*why)
		return -1;
	osf_go_mark(static_st.hooked);
	osf_go_mark(osf_static_fastnr);
	osf_static_fastnr[SYS_poll] = osf_static_fastnr[SYS_ppoll] = 1;
	osf_static_fastnr[SYS_select] = osf_static_fastnr[SYS_pselect6] = 1;
	for (size_t i = 0; i < sizeof(emulated) / sizeof(emulated[0]); i++)
		osf_static_trapnr[emulated[i]] = 1;
	thr_init((unsigned long)__builtin_frame_address(0));
	if (osf_static_sig_init() < 0) {
		*why = "cannot install the signal handlers";
		return -1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigfillset(&sa.sa_mask);
	if (REAL(sigaction)(SIGSYS, &sa, NULL) < 0) {
		*why = "cannot install the SIGSYS handler";
		return -1;
	}
	{
		const char *b = strrchr(path, '/');
		osf_rawsys(SYS_prctl, PR_SET_NAME, (long)(b ? b + 1 : path), 0, 0, 0, 0);
	}
	if (sud_on() < 0) {
		*why = "cannot turn on Syscall User Dispatch";
		return -1;
	}
	osf_static_start(sp, im.eh.e_entry + im.bias);
}
