//go:build osf_make

/* static_sig.c: a statically linked program's signals (osfrun --static,
 * static.c).
 *
 * osf's hooks run on the thread's carrier FS (the loader's C library's
 * TLS), where no handler of the program may run: its TLS would be the
 * wrong one (a Go handler finds its g there). So every handler the
 * program installs (rt_sigaction, emulated in the SIGSYS handler) is
 * installed as on_signal below, with the program's flags and mask and a
 * restorer outside the program (its own would trap on rt_sigreturn);
 * reading an action back gives the program's. on_signal looks at FS
 * before anything else:
 *
 *   - the program's FS (its code runs, or a sleep the SIGSYS handler
 *     passes to the kernel): it calls the program's handler at once;
 *   - the carrier's while a hook runs: it defers the signal. It queues it
 *     again to the thread, blocked in the frame's mask (rt_sigreturn puts
 *     that mask on) and noted in the thread's record, and tells the hook
 *     (osf_intr_defer): a wait in the hook ends with EINTR, as the
 *     kernel's ends when a handler runs. When the hook returns, the fast
 *     path (static.c) or Go's trampoline (static_go.c) moves FS back and
 *     unblocks what was deferred (osf_static_unblock): the handlers run
 *     then, on the program's FS, and a call whose wait would have
 *     restarted after them (accept or recv without a timeout, every
 *     handler with SA_RESTART: osf_intr_take_restart) is made again, as
 *     the kernel restarts it.
 *
 * So the hooks need no signal mask of their own and a blocking one (a
 * server in accept) takes signals: the default action of one (SIGTERM)
 * is the kernel's and needs nothing of osf.
 *
 * SIGSEGV and SIGBUS are always on_signal's, whatever the program sets:
 * a fault of a probe in osf's code becomes EFAULT (fault.c); any other
 * fault in osf's code kills as SIG_DFL does; one in the program's code
 * gets the program's action. */
#include "osf.h"
#include "static.h"

#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>

#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1U << 31)
#endif
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

#define NSIGS 65 /* 1..64 */
/* The kernel's smallest alternate stack (asm/signal.h's MINSIGSTKSZ).
 * glibc's MINSIGSTKSZ under _GNU_SOURCE is sysconf(_SC_SIGSTKSZ), four
 * times the CPU's signal frame: 47,808 bytes where the CPU has AMX,
 * which refused Go's 32 KiB signal stacks that the kernel takes. */
#define KERNEL_MINSIGSTKSZ 2048
#define BIT(sig) (1UL << ((sig) - 1))

/* The restorer every program handler returns through: the program's own
 * (in its code) would trap on rt_sigreturn. */
void osf_static_restorer(void);
__asm__(".text\n"
	".globl osf_static_restorer\n"
	".hidden osf_static_restorer\n"
	".type osf_static_restorer,@function\n"
	"osf_static_restorer:\n"
	"	movq $15, %rax\n" /* SYS_rt_sigreturn */
	"	syscall\n"
	"	hlt\n");

/* The program's actions as it set them, for the signals whose kernel
 * action is on_signal: two slots per signal, the one in use named by
 * cur[sig], so that a new action is written whole before on_signal can
 * see it (signals.c's way). */
static struct kact acts[NSIGS][2];
static int cur[NSIGS];
static unsigned char wrapped[NSIGS]; /* the kernel's action is on_signal */
static int act_lock;

static int fault_sig(int sig) { return sig == SIGSEGV || sig == SIGBUS; }

static int is_handler(unsigned long h)
{
	return h != (unsigned long)SIG_DFL && h != (unsigned long)SIG_IGN;
}

static void on_signal(int sig, siginfo_t *si, void *uc);

/* kernel_act is the action the kernel gets for the program's u. */
static struct kact kernel_act(const struct kact *u)
{
	struct kact k = {
		.handler = (unsigned long)on_signal,
		.flags = u->flags | SA_SIGINFO | SA_RESTORER,
		.restorer = (unsigned long)osf_static_restorer,
		.mask = u->mask & ~BIT(SIGSYS),
	};
	return k;
}

/* die_default does what the kernel does with a fault whose action is
 * SIG_DFL (or a fault in osf's code): the default action put back, the
 * faulting instruction runs again (si_code > 0), or the signal sent
 * again, as it was blocked here. SIG_IGN drops a signal a process sent.
 * No TLS (the program's FS). */
static void die_default(int sig, const siginfo_t *si, unsigned long h)
{
	struct kact dfl = {.handler = (unsigned long)SIG_DFL};

	if (h == (unsigned long)SIG_IGN && si->si_code <= 0)
		return;
	osf_rawsys(SYS_rt_sigaction, sig, (long)&dfl, 0, sizeof(dfl.mask), 0, 0);
	if (si->si_code <= 0)
		osf_rawsys(SYS_tgkill, osf_rawsys(SYS_getpid, 0, 0, 0, 0, 0, 0),
			   osf_rawsys(SYS_gettid, 0, 0, 0, 0, 0, 0), sig, 0, 0, 0);
}

/* unrestart: a wait of osf's own that the kernel is restarting after an
 * SA_RESTART handler (the frame resumes at its `syscall` again, RCX the
 * address after it, as that instruction left it) fails with EINTR
 * instead: the hook returns, the handler runs, and the program's call is
 * made again (static.c), as the kernel restarts it. A recv on a wake
 * socket is such a wait. */
static int unrestart(ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	const unsigned char *ip = (const unsigned char *)g[REG_RIP];

	if (ip[0] != 0x0f || ip[1] != 0x05 || g[REG_RCX] != g[REG_RIP] + 2)
		return 0;
	g[REG_RAX] = -EINTR;
	g[REG_RIP] += 2;
	return 1;
}

/* defer keeps sig for osf_static_unblock: queued again to this thread,
 * blocked until then. On the carrier's FS. */
static void defer(struct static_thr *t, int sig, siginfo_t *si, ucontext_t *uc, const struct kact *u)
{
	long pid = osf_rawsys(SYS_getpid, 0, 0, 0, 0, 0, 0), tid = osf_rawsys(SYS_gettid, 0, 0, 0, 0, 0, 0);

	if (u->flags & SA_RESETHAND) { /* reset by this delivery: the next one is the handler's */
		struct kact k = kernel_act(u);
		osf_rawsys(SYS_rt_sigaction, sig, (long)&k, 0, sizeof(k.mask), 0, 0);
	}
	/* another thread's tgkill or a kernel signal cannot be queued with
	 * its siginfo on a thread that is not the main one: without it */
	if (osf_rawsys(SYS_rt_tgsigqueueinfo, pid, tid, sig, (long)si, 0, 0) < 0)
		osf_rawsys(SYS_tgkill, pid, tid, sig, 0, 0, 0);
	*(unsigned long *)&uc->uc_sigmask |= BIT(sig);
	__atomic_or_fetch(&t->deferred, BIT(sig), __ATOMIC_RELAXED);
	osf_intr_defer((u->flags & SA_RESTART) != 0, (u->flags & SA_RESTART) && unrestart(uc));
}

/* on_signal is every program handler's kernel action (above). It starts
 * on any FS: no TLS (and so no stack protector) until it knows. */
__attribute__((no_stack_protector)) static void on_signal(int sig, siginfo_t *si, void *uc)
{
	const struct kact *u;
	struct static_thr *t;

	if (sig < 1 || sig >= NSIGS)
		return;
	u = &acts[sig][__atomic_load_n(&cur[sig], __ATOMIC_ACQUIRE)];
	t = osf_static_osf_running();
	if (t) {
		if (fault_sig(sig) && osf_fault_fixup(uc))
			return;
		if (si->si_code > 0 && (fault_sig(sig) || sig == SIGFPE || sig == SIGILL ||
					sig == SIGTRAP)) {
			die_default(sig, si, (unsigned long)SIG_DFL); /* osf's own fault */
			return;
		}
		defer(t, sig, si, uc, u);
		return;
	}
	if (!is_handler(u->handler)) {
		if (fault_sig(sig))
			die_default(sig, si, u->handler);
		return;
	}
	if (u->flags & SA_SIGINFO)
		((void (*)(int, siginfo_t *, void *))u->handler)(sig, si, uc);
	else
		((void (*)(int))u->handler)(sig);
}

/* osf_static_unblock runs on the program's FS, right after a hook: the
 * signals deferred meanwhile reach the program's handlers as the mask
 * lets them go. It returns them (0: none). No TLS. */
__attribute__((no_stack_protector)) unsigned long osf_static_unblock(struct static_thr *t)
{
	unsigned long set;

	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&t->deferred, __ATOMIC_RELAXED))
		return 0;
	set = __atomic_exchange_n(&t->deferred, 0, __ATOMIC_RELAXED);
	osf_rawsys(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&set, 0, sizeof(set), 0, 0);
	return set;
}

/* set_act installs the program's action act for sig (its old one in
 * *old when old); a handler, and any action of SIGSEGV and SIGBUS,
 * through on_signal. */
static long set_act(int sig, const struct kact *act, struct kact *old)
{
	int wrap = is_handler(act->handler) || fault_sig(sig), prev = cur[sig], next = !prev;
	struct kact k = *act, kold;
	long r;

	k.mask &= ~BIT(SIGSYS);
	if (wrap) {
		acts[sig][next] = k;
		__atomic_store_n(&cur[sig], next, __ATOMIC_RELEASE);
		k = kernel_act(&acts[sig][next]);
	}
	r = osf_rawsys(SYS_rt_sigaction, sig, (long)&k, (long)&kold, sizeof(k.mask), 0, 0);
	if (r < 0) {
		__atomic_store_n(&cur[sig], prev, __ATOMIC_RELEASE);
		return r;
	}
	if (old)
		*old = wrapped[sig] && kold.handler == (unsigned long)on_signal ? acts[sig][prev] : kold;
	wrapped[sig] = (unsigned char)wrap;
	return 0;
}

long osf_static_sigaction(const long *a)
{
	int sig = (int)a[0];
	const struct kact *act = (const void *)a[1];
	struct kact *old = (void *)a[2], o;
	long r;

	if ((size_t)a[3] != sizeof(o.mask))
		return -EINVAL;
	if (sig == SIGSYS) { /* recorded, never installed */
		if (old)
			*old = static_st.sigsys;
		if (act)
			static_st.sigsys = *act;
		return 0;
	}
	if (sig < 1 || sig >= NSIGS)
		return osf_rawsys(SYS_rt_sigaction, sig, a[1], a[2], a[3], 0, 0);
	while (__atomic_exchange_n(&act_lock, 1, __ATOMIC_ACQUIRE))
		;
	if (act) {
		r = set_act(sig, act, old ? &o : NULL);
	} else {
		r = osf_rawsys(SYS_rt_sigaction, sig, 0, (long)&o, a[3], 0, 0);
		if (r == 0 && wrapped[sig] && o.handler == (unsigned long)on_signal)
			o = acts[sig][cur[sig]];
	}
	__atomic_store_n(&act_lock, 0, __ATOMIC_RELEASE);
	if (r == 0 && old)
		*old = o;
	return r;
}

int osf_static_sig_init(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS};
	struct kact dfl = {.handler = (unsigned long)SIG_DFL};

	osf_intr_static_init();
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (set_act(sigs[i], &dfl, NULL) < 0)
			return -1;
	return 0;
}

/* The thread's signal mask and alternate stack are the kernel's only
 * between the program's calls: the SIGSYS handler runs with every signal
 * blocked, and rt_sigreturn puts back the mask and the alternate stack
 * saved in the frame. So the program's rt_sigprocmask and sigaltstack
 * read and write those (uc), which the kernel applies as the handler
 * returns; SIGSYS is never blocked. */
long osf_static_sigprocmask(void *uc, const long *a)
{
	unsigned long *cur_mask = (unsigned long *)&((ucontext_t *)uc)->uc_sigmask, set = 0,
		      old = *cur_mask;
	const unsigned long never = BIT(SIGSYS) | BIT(SIGKILL) | BIT(SIGSTOP);

	if ((size_t)a[3] != sizeof(set))
		return -EINVAL;
	if (a[1]) {
		set = *(const unsigned long *)a[1];
		if (a[0] == SIG_BLOCK)
			set |= old;
		else if (a[0] == SIG_UNBLOCK)
			set = old & ~set;
		else if (a[0] != SIG_SETMASK)
			return -EINVAL;
		*cur_mask = set & ~never;
	}
	if (a[2])
		*(unsigned long *)a[2] = old;
	return 0;
}

/* The alternate stack is noted in the thread's record too: Go's
 * trampoline does not move to the carrier's stack from it (a signal
 * would put its frame at the top of the stack in use). */
long osf_static_sigaltstack(void *ucv, const long *a)
{
	ucontext_t *uc = ucv;
	const stack_t *ss = (const stack_t *)a[0];
	stack_t old = uc->uc_stack;
	struct static_thr *t = osf_static_osf_running();

	if (ss) {
		int mode = ss->ss_flags & ~(int)SS_AUTODISARM;
		if (old.ss_flags & SS_ONSTACK)
			return -EPERM;
		if (mode != SS_DISABLE && mode != SS_ONSTACK && mode != 0)
			return -EINVAL;
		if (mode == SS_DISABLE) {
			uc->uc_stack.ss_sp = NULL;
			uc->uc_stack.ss_size = 0;
		} else if (ss->ss_size < KERNEL_MINSIGSTKSZ) {
			return -ENOMEM;
		} else {
			uc->uc_stack.ss_sp = ss->ss_sp;
			uc->uc_stack.ss_size = ss->ss_size;
		}
		uc->uc_stack.ss_flags = ss->ss_flags;
		if (t) {
			t->ss_sp = (unsigned long)uc->uc_stack.ss_sp;
			t->ss_size = uc->uc_stack.ss_size;
		}
	}
	if (a[1])
		*(stack_t *)a[1] = old;
	return 0;
}
