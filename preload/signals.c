//go:build osf_make

/* signals.c: sigaction, signal and siginterrupt.
 *
 * A handler the program installs runs through a trampoline, for three
 * reasons:
 *
 *   - It runs with SA_ONSTACK (docs/DESIGN.md D1): a handler that runs on a
 *     thread with an alternate signal stack must not run on whatever stack
 *     the thread happened to be using. A thread without an alternate stack
 *     is unaffected.
 *   - A handler for an asynchronous signal that lands while its thread
 *     holds (or waits for) a selectmux lock runs when the thread lets go of
 *     its last one (defer, osf_intr_redeliver), as the kernel runs it after
 *     the system call: it may then close, connect or epoll_ctl offloaded
 *     sockets, which take those locks.
 *   - The trampoline notes, per thread, that a handler ran and whether it
 *     had SA_RESTART. Where osf waits in poll in place of a call the kernel
 *     would restart after an SA_RESTART handler (a blocking accept on a
 *     listener with a companion), it then knows what the kernel would have
 *     done for the signal that actually arrived (osf_intr_restart).
 *
 * Reading an action back gives exactly what the program set: its handler
 * and its flags, never the trampoline's.
 */
#include "osf.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <ucontext.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NSIGS 65 /* 1..64 */

/* The program's actions, for the signals whose kernel disposition is the
 * trampoline: two slots per signal, the one in use named by cur[sig], so
 * that a new action is written whole before the trampoline can see it. */
struct uact {
	void *handler; /* sa_handler or sa_sigaction */
	int flags;     /* sa_flags as the program gave them */
};
static struct uact slots[NSIGS][2];
static int cur[NSIGS];
static uint8_t wrapped[NSIGS]; /* the last action set here was wrapped */

static inline const struct uact *user(int sig)
{
	return &slots[sig][__atomic_load_n(&cur[sig], __ATOMIC_ACQUIRE)];
}

/* Per thread: INTR_RAN once a handler ran through the trampoline since
 * osf_intr_begin, INTR_NORESTART once one without SA_RESTART did. */
#define INTR_RAN 0x1u
#define INTR_NORESTART 0x2u
static __thread uint32_t tls_intr __attribute__((tls_model("initial-exec")));
__thread unsigned osf_intr_n __attribute__((tls_model("initial-exec")));

static int is_handler(sighandler_t h) { return h != SIG_DFL && h != SIG_IGN; }

/* SIGSEGV and SIGBUS go through the trampoline from osf_fault_arm on,
 * whatever the program sets, so that a probe of a bad buffer (fault.c)
 * becomes EFAULT; every other fault gets the program's action. */
static int fault_armed;

static int fault_sig(int sig) { return sig == SIGSEGV || sig == SIGBUS; }

/* fault_default does what the kernel does with a fault signal whose
 * action is SIG_DFL or SIG_IGN: a fault (si_code > 0) kills even when
 * ignored, so the default action is put back and the faulting instruction
 * runs again; one sent by a process is delivered again by default, or
 * dropped when ignored. */
static void fault_default(int sig, const siginfo_t *si, void *h)
{
	struct sigaction dfl;

	if (h == (void *)SIG_IGN && si->si_code <= 0)
		return;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	REAL(sigaction)(sig, &dfl, NULL);
	if (si->si_code <= 0) /* blocked here: delivered on return */
		syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), sig);
}

/* Per thread: the signals deferred while the thread was inside selectmux
 * (base.h), blocked in the meantime, with their siginfo. */
#define DEFER_MAX 4
__thread unsigned osf_intr_deferred __attribute__((tls_model("initial-exec")));
static __thread siginfo_t tls_deferred[DEFER_MAX] __attribute__((tls_model("initial-exec")));

/* async_sig reports a signal the kernel could have delivered a moment
 * later: anything but a fault the interrupted instruction raised. */
static int async_sig(int sig, const siginfo_t *si)
{
	return si->si_code <= 0 || !(sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE ||
				     sig == SIGILL || sig == SIGTRAP || sig == SIGSYS);
}

/* defer keeps sig for osf_intr_redeliver, blocked until then (the mask
 * the kernel restores from uc); 0 when it must run now. */
static int defer(int sig, const siginfo_t *si, void *uc, int fl)
{
	unsigned n = osf_intr_deferred;

	if (n >= DEFER_MAX || !uc || (fl & SA_RESETHAND) || !async_sig(sig, si) ||
	    !osf_mux_busy())
		return 0;
	tls_deferred[n] = *si;
	tls_deferred[n].si_signo = sig;
	sigaddset(&((ucontext_t *)uc)->uc_sigmask, sig);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	osf_intr_deferred = n + 1;
	return 1;
}

void osf_intr_redeliver(void)
{
	siginfo_t si[DEFER_MAX];
	uint64_t set = 0;
	unsigned i, n;
	int saved = errno;
	pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);

	n = osf_intr_deferred;
	if (n > DEFER_MAX)
		n = DEFER_MAX;
	memcpy(si, tls_deferred, n * sizeof(si[0]));
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	osf_intr_deferred = 0; /* they are blocked: none comes meanwhile */
	for (i = 0; i < n; i++) {
		if (syscall(SYS_rt_tgsigqueueinfo, pid, tid, si[i].si_signo, &si[i]) < 0)
			syscall(SYS_tgkill, pid, tid, si[i].si_signo); /* without its siginfo */
		set |= 1ULL << (si[i].si_signo - 1);
	}
	/* Delivered here, on this thread, in the order the kernel picks. */
	syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &set, NULL, sizeof(set));
	errno = saved;
}

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	const struct uact *u;
	void *h;
	int fl;

	if (sig < 1 || sig >= NSIGS)
		return;
	if (fault_sig(sig) && osf_fault_fixup(uc))
		return;
	u = user(sig);
	h = u->handler;
	fl = u->flags;
	if (fault_sig(sig) && !is_handler((sighandler_t)h)) {
		fault_default(sig, si, h);
		return;
	}
	if (defer(sig, si, uc, fl))
		return;
	tls_intr |= INTR_RAN | ((fl & SA_RESTART) ? 0 : INTR_NORESTART);
	osf_intr_n++;
	if (fl & SA_SIGINFO)
		((void (*)(int, siginfo_t *, void *))h)(sig, si, uc);
	else if (h != (void *)SIG_DFL && h != (void *)SIG_IGN)
		((void (*)(int))h)(sig);
}

/* A statically linked program (static_sig.c) has its own handlers' wrapper:
 * a signal that comes while a hook runs is deferred until the hook
 * returns (osf_intr_defer), so a wait that would restart after it returns
 * EINTR instead, and the caller restarts the call after the handler ran
 * (osf_intr_take_restart). tls_intr then covers one hook call. */
static int intr_static;
static __thread uint8_t tls_want_restart __attribute__((tls_model("initial-exec")));
static __thread uint8_t tls_static_deferred __attribute__((tls_model("initial-exec")));

void osf_intr_begin(void)
{
	if (!intr_static)
		tls_intr = 0;
}

int osf_intr_restart(void)
{
	/* EINTR from poll means a handler ran. One osf did not see installed
	 * (before osf loaded, or by a raw system call) is taken as one
	 * without SA_RESTART: a needless EINTR is handled by every caller of
	 * accept, a needless restart would ignore a program's stop signal. */
	if (intr_static) {
		tls_want_restart = tls_intr == INTR_RAN;
		return 0;
	}
	return tls_intr == INTR_RAN;
}

void osf_intr_static_init(void)
{
	intr_static = 1;
	/* static_sig.c wraps SIGSEGV and SIGBUS itself */
	__atomic_store_n(&fault_armed, 1, __ATOMIC_RELEASE);
}

void osf_intr_defer(int restart, int kernel_restart)
{
	tls_intr |= INTR_RAN | (restart ? 0 : INTR_NORESTART);
	tls_want_restart |= (uint8_t)(kernel_restart != 0);
	tls_static_deferred = 1;
	osf_intr_n++;
}

int osf_intr_pending(int restartable)
{
	if (likely(!tls_static_deferred))
		return 0;
	if (restartable)
		tls_want_restart = 1;
	return 1;
}

int osf_intr_take_restart(void)
{
	int r = tls_want_restart && tls_intr == INTR_RAN;

	tls_want_restart = tls_static_deferred = 0;
	tls_intr = 0;
	return r;
}

/* wrap rewrites a handler's action to go through the trampoline. */
static void wrap(int sig, const struct sigaction *act, struct sigaction *out)
{
	int next = !__atomic_load_n(&cur[sig], __ATOMIC_RELAXED);

	*out = *act;
	slots[sig][next].flags = act->sa_flags;
	slots[sig][next].handler = (act->sa_flags & SA_SIGINFO)
					   ? (void *)act->sa_sigaction
					   : (void *)act->sa_handler;
	__atomic_store_n(&cur[sig], next, __ATOMIC_RELEASE);
	out->sa_sigaction = trampoline;
	out->sa_flags |= SA_SIGINFO | SA_ONSTACK;
}

/* unwrap turns an action read from the kernel back into the program's;
 * slot is the program's action the trampoline stood for then (a call
 * that sets a new action has switched cur[sig] already). */
static void unwrap(int sig, struct sigaction *old, int slot)
{
	const struct uact *u;

	if (sig < 1 || sig >= NSIGS || !wrapped[sig])
		return;
	u = &slots[sig][slot];
	if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction == trampoline) {
		old->sa_flags = u->flags;
		if (u->flags & SA_SIGINFO)
			old->sa_sigaction =
				(void (*)(int, siginfo_t *, void *))u->handler;
		else
			old->sa_handler = (sighandler_t)u->handler;
	} else if (old->sa_handler == SIG_DFL && (u->flags & SA_RESETHAND)) {
		old->sa_flags = u->flags; /* reset by the delivery */
	}
}

OSF_EXPORT int sigaction(int sig, const struct sigaction *act,
			 struct sigaction *old)
{
	struct sigaction a;
	int r, prev = 0;

	/* The Go core's runtime installs its own handlers: no trampoline,
	 * so that the runtime sees and forwards to what the program set. */
	if (unlikely(osf_core_owns(__builtin_return_address(0)))) {
		if (act)
			osf_core_note_prior(sig);
		return REAL(sigaction)(sig, act, old);
	}
	if (act && sig >= 1 && sig < NSIGS &&
	    (is_handler(act->sa_handler) ||
	     (fault_sig(sig) && __atomic_load_n(&fault_armed, __ATOMIC_ACQUIRE)))) {
		prev = __atomic_load_n(&cur[sig], __ATOMIC_RELAXED);
		wrap(sig, act, &a);
		act = &a;
	}
	r = REAL(sigaction)(sig, act, old);
	if (r < 0 && act == &a) /* still the action before */
		__atomic_store_n(&cur[sig], prev, __ATOMIC_RELEASE);
	if (r == 0 && old) {
		osf_core_program_view(sig, old);
		unwrap(sig, old, act == &a ? prev
					   : __atomic_load_n(&cur[sig], __ATOMIC_ACQUIRE));
	}
	if (r == 0 && act && sig >= 1 && sig < NSIGS)
		wrapped[sig] = act == &a;
	return r;
}

void osf_fault_arm(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS};
	static int lock;
	struct sigaction old, a;
	size_t i;

	if (likely(__atomic_load_n(&fault_armed, __ATOMIC_ACQUIRE)))
		return;
	while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
	for (i = 0; !fault_armed && i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		int sig = sigs[i];
		if (REAL(sigaction)(sig, NULL, &old) < 0 ||
		    ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction == trampoline))
			continue;
		wrap(sig, &old, &a); /* the current action becomes the program's */
		if (REAL(sigaction)(sig, &a, NULL) == 0)
			wrapped[sig] = 1;
	}
	__atomic_store_n(&fault_armed, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

/* signal has glibc's BSD semantics: SA_RESTART unless siginterrupt asked
 * otherwise, the signal blocked in its handler. */
static uint64_t interrupting; /* bit sig-1: siginterrupt(sig, 1) */

OSF_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	struct sigaction act, old;

	if (sig < 1 || sig >= NSIGS || handler == SIG_ERR) {
		errno = EINVAL;
		return SIG_ERR;
	}
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	sigaddset(&act.sa_mask, sig);
	act.sa_flags = (__atomic_load_n(&interrupting, __ATOMIC_RELAXED) &
			(1ULL << (sig - 1)))
			       ? 0
			       : SA_RESTART;
	if (sigaction(sig, &act, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

OSF_EXPORT int siginterrupt(int sig, int flag)
{
	struct sigaction act;

	if (sig < 1 || sig >= NSIGS) {
		errno = EINVAL;
		return -1;
	}
	if (sigaction(sig, NULL, &act) < 0)
		return -1;
	if (flag) {
		__atomic_or_fetch(&interrupting, 1ULL << (sig - 1), __ATOMIC_RELAXED);
		act.sa_flags &= ~SA_RESTART;
	} else {
		__atomic_and_fetch(&interrupting, ~(1ULL << (sig - 1)),
				   __ATOMIC_RELAXED);
		act.sa_flags |= SA_RESTART;
	}
	return sigaction(sig, &act, NULL);
}
