//go:build osf_make

/* signals.c: sigaction and signal.
 *
 * Handlers get SA_ONSTACK (DESIGN.md D1): a handler that runs on a thread
 * with an alternate signal stack must not run on whatever stack the thread
 * happened to be using. A thread without an alternate stack is unaffected.
 * The flag osf added is hidden again from the old action a program reads
 * back, so sigaction round trips are exact.
 */
#include "osf.h"

static uint64_t added_onstack; /* bit sig-1: osf added SA_ONSTACK */
static uint64_t no_restart;    /* bit sig-1: a handler without SA_RESTART */

static int is_handler(sighandler_t h) { return h != SIG_DFL && h != SIG_IGN; }

static void mark(int sig, int added)
{
	uint64_t bit;

	if (sig < 1 || sig > 64)
		return;
	bit = 1ULL << (sig - 1);
	if (added)
		__atomic_or_fetch(&added_onstack, bit, __ATOMIC_RELAXED);
	else
		__atomic_and_fetch(&added_onstack, ~bit, __ATOMIC_RELAXED);
}

static void note_restart(int sig, const struct sigaction *act)
{
	uint64_t bit;

	if (sig < 1 || sig > 64 || !act)
		return;
	bit = 1ULL << (sig - 1);
	if (is_handler(act->sa_handler) && !(act->sa_flags & SA_RESTART))
		__atomic_or_fetch(&no_restart, bit, __ATOMIC_RELAXED);
	else
		__atomic_and_fetch(&no_restart, ~bit, __ATOMIC_RELAXED);
}

int osf_restartable(void)
{
	return __atomic_load_n(&no_restart, __ATOMIC_RELAXED) == 0;
}

static int was_added(int sig)
{
	return sig >= 1 && sig <= 64 &&
	       (__atomic_load_n(&added_onstack, __ATOMIC_RELAXED) &
		(1ULL << (sig - 1)));
}

OSF_EXPORT int sigaction(int sig, const struct sigaction *act,
			 struct sigaction *old)
{
	struct sigaction a;
	int added = 0, hid, r;

	/* The Go core's runtime installs its own handlers: no bookkeeping,
	 * so that the program's read-backs stay as the program set them. */
	if (unlikely(osf_core_owns(__builtin_return_address(0)))) {
		if (act)
			osf_core_note_prior(sig);
		return REAL(sigaction)(sig, act, old);
	}
	hid = was_added(sig);
	if (act && is_handler(act->sa_handler) &&
	    !(act->sa_flags & SA_ONSTACK)) {
		a = *act;
		a.sa_flags |= SA_ONSTACK;
		act = &a;
		added = 1;
	}
	r = REAL(sigaction)(sig, act, old);
	if (r < 0)
		return r;
	if (old && hid)
		old->sa_flags &= ~SA_ONSTACK;
	if (act) {
		mark(sig, added);
		note_restart(sig, act);
	}
	return r;
}

OSF_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	sighandler_t old = REAL(signal)(sig, handler);
	struct sigaction cur;
	int saved = errno;

	if (old == SIG_ERR)
		return old;
	if (REAL(sigaction)(sig, NULL, &cur) == 0) {
		note_restart(sig, &cur);
		if (is_handler(handler) && !(cur.sa_flags & SA_ONSTACK)) {
			cur.sa_flags |= SA_ONSTACK;
			REAL(sigaction)(sig, &cur, NULL);
			mark(sig, 1);
		} else if (!is_handler(handler)) {
			mark(sig, 0);
		}
	}
	errno = saved;
	return old;
}
