//go:build osf_make

/* sigdisp: sets a disposition for most signals, loads osf's core (a TCP
 * connection on loopback), and reads every disposition back with
 * sigaction, so a test can check that loading the Go runtime changed
 * nothing but the synchronous signals it must handle (docs/DESIGN.md D1: checked
 * on every Go upgrade).
 *
 * Prints one line per signal whose disposition (handler, flags or mask)
 * after the load differs from before it:
 *
 *   changed SEGV handler=0x0->0x7f.. flags=0x0->0x1c000004 mask-differs=0
 *
 * then "parent checked N signals, M changed". A forked child (the core is
 * stale there) does the same comparison against the same "before" and
 * prints "child checked N signals, M changed" (its lines say "child-changed").
 * Finally "mask unchanged yes|no" compares the thread's signal mask. The
 * program's own settings are chosen to cover handlers, SIG_IGN, SIG_DFL,
 * SA_SIGINFO, SA_RESTART, SA_NODEFER, SA_RESETHAND, SA_ONSTACK and masks.
 *
 * sigdisp --wait-core is for OSF_DEBUG_LOAD_CORE=1, where osf loads the
 * core on its own thread while main runs: main sets the dispositions at
 * once (while the core may still be loading), waits (at most 5 s, and
 * only if libosf.so is mapped) until the core is mapped and 200 ms more, and checks every handler against
 * what it set: "reverted SIG handler=EXPECTED->NOW" per difference, then
 * "async checked N settings, M reverted". */
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "progs.h"

static void h(int sig) { (void)sig; }
static void hinfo(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
}

struct setting {
	int sig;
	int kind; /* 0 handler, 1 SA_SIGINFO handler, 2 SIG_IGN, 3 SIG_DFL */
	int flags;
	int mask1, mask2; /* signals to add to sa_mask, or 0 */
};

static const struct setting settings[] = {
	{SIGHUP, 0, SA_RESTART, SIGUSR2, 0},
	{SIGINT, 2, 0, 0, 0},
	{SIGQUIT, 1, SA_RESTART, 0, 0},
	{SIGUSR1, 2, 0, 0, 0},
	{SIGUSR2, 0, SA_NODEFER, 0, 0},
	{SIGPIPE, 2, 0, 0, 0},
	{SIGALRM, 0, 0, 0, 0},
	{SIGTERM, 1, SA_RESETHAND, SIGINT, SIGQUIT},
	{SIGCHLD, 0, SA_NOCLDSTOP | SA_RESTART, 0, 0},
	{SIGCONT, 0, 0, 0, 0},
	{SIGTSTP, 2, 0, 0, 0},
	{SIGTTIN, 2, 0, 0, 0},
	{SIGTTOU, 2, 0, 0, 0},
	{SIGURG, 0, SA_RESTART, 0, 0},
	{SIGXCPU, 2, 0, 0, 0},
	{SIGXFSZ, 2, 0, 0, 0},
	{SIGVTALRM, 0, 0, 0, 0},
	{SIGPROF, 0, SA_RESTART, 0, 0},
	{SIGWINCH, 0, SA_ONSTACK, 0, 0},
	{SIGIO, 0, 0, 0, 0},
	{SIGPWR, 2, 0, 0, 0},
	{SIGSTKFLT, 3, 0, 0, 0},
	{SIGSYS, 3, 0, 0, 0},
	{40, 1, 0, 0, 0},  /* SIGRTMIN+6 with glibc */
	{45, 2, 0, 0, 0},
	{64, 0, SA_RESTART, SIGHUP, 0},
};

static struct sigaction before[NSIG];
static int valid[NSIG];

static void apply(void)
{
	size_t i;

	for (i = 0; i < sizeof settings / sizeof settings[0]; i++) {
		const struct setting *s = &settings[i];
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sigemptyset(&sa.sa_mask);
		if (s->mask1)
			sigaddset(&sa.sa_mask, s->mask1);
		if (s->mask2)
			sigaddset(&sa.sa_mask, s->mask2);
		sa.sa_flags = s->flags;
		switch (s->kind) {
		case 0:
			sa.sa_handler = h;
			break;
		case 1:
			sa.sa_sigaction = hinfo;
			sa.sa_flags |= SA_SIGINFO;
			break;
		case 2:
			sa.sa_handler = SIG_IGN;
			break;
		default:
			sa.sa_handler = SIG_DFL;
		}
		if (sigaction(s->sig, &sa, NULL) < 0) {
			fprintf(stderr, "sigaction %d: ", s->sig);
			perror("");
			exit(2);
		}
	}
}

static void snapshot(struct sigaction *out, int *ok)
{
	int sig;

	for (sig = 1; sig < NSIG; sig++)
		ok[sig] = sigaction(sig, NULL, &out[sig]) == 0;
}

/* same_set compares two signal sets on the signals Linux has (glibc's
 * sigset_t is larger than the kernel's; the rest is not meaningful). */
static int same_set(const sigset_t *a, const sigset_t *b)
{
	int sig;

	for (sig = 1; sig < NSIG; sig++)
		if (sigismember(a, sig) != sigismember(b, sig))
			return 0;
	return 1;
}

static const char *name(int sig, char *buf, size_t n)
{
	const char *a = sigabbrev_np(sig);

	if (a)
		return a;
	snprintf(buf, n, "%d", sig);
	return buf;
}

/* compare prints the signals whose disposition differs from before and
 * returns how many do; *checked counts the signals compared. */
static int compare(const char *label, int *checked)
{
	struct sigaction now[NSIG];
	int ok[NSIG], sig, changed = 0;

	snapshot(now, ok);
	*checked = 0;
	for (sig = 1; sig < NSIG; sig++) {
		char nb[16];
		int mask_diff;
		if (!valid[sig] || !ok[sig])
			continue;
		(*checked)++;
		mask_diff = !same_set(&now[sig].sa_mask, &before[sig].sa_mask);
		if (now[sig].sa_handler == before[sig].sa_handler &&
		    now[sig].sa_flags == before[sig].sa_flags && !mask_diff)
			continue;
		changed++;
		printf("%s %s handler=%p->%p flags=%#x->%#x mask-differs=%d\n",
		       label, name(sig, nb, sizeof nb),
		       (void *)before[sig].sa_handler, (void *)now[sig].sa_handler,
		       (unsigned)before[sig].sa_flags, (unsigned)now[sig].sa_flags,
		       mask_diff);
	}
	return changed;
}

static void *expected(const struct setting *s)
{
	switch (s->kind) {
	case 0:
		return (void *)h;
	case 1:
		return (void *)hinfo;
	case 2:
		return (void *)SIG_IGN;
	default:
		return (void *)SIG_DFL;
	}
}

/* wait_core applies the settings at once and checks them after the core
 * (loaded by osf on its own thread) is there. */
static int wait_core(void)
{
	struct timespec ts = {0, 10 * 1000000L};
	size_t i;
	int ms, reverted = 0;

	apply();
	for (ms = 0; ms < 5000 && maps_has("/libosf.so") && !maps_has("osfcore"); ms += 10)
		nanosleep(&ts, NULL);
	fprintf(stderr, "maps: libosf=%d libosfcore=%d\n", maps_has("/libosf.so"),
		maps_has("/libosfcore.so") || maps_has("/memfd:osfcore"));
	ts.tv_nsec = 200 * 1000000L;
	nanosleep(&ts, NULL);
	for (i = 0; i < sizeof settings / sizeof settings[0]; i++) {
		struct sigaction now;
		char nb[16];
		if (sigaction(settings[i].sig, NULL, &now) < 0)
			continue;
		if ((void *)now.sa_handler == expected(&settings[i]))
			continue;
		reverted++;
		printf("reverted %s handler=%p->%p\n", name(settings[i].sig, nb, sizeof nb),
		       expected(&settings[i]), (void *)now.sa_handler);
	}
	printf("async checked %zu settings, %d reverted\n", i, reverted);
	return 0;
}

static sigjmp_buf fault_jmp;
static volatile sig_atomic_t faults;
static void on_fault(int sig)
{
	(void)sig;
	faults++;
	siglongjmp(fault_jmp, 1);
}

static int *volatile null_ptr; /* hidden from the compiler */

/* fault_own installs a SIGSEGV handler after the core loaded, reads it
 * back, takes a real fault in it, and puts SIG_DFL back:
 * "segv own handler read back yes, fault reached it yes, SIG_DFL read
 * back yes". */
static void fault_own(void)
{
	struct sigaction sa, old;
	volatile int back;
	int dfl;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_fault;
	sigaction(SIGSEGV, &sa, NULL);
	back = sigaction(SIGSEGV, NULL, &old) == 0 && old.sa_handler == on_fault;
	if (sigsetjmp(fault_jmp, 1) == 0)
		*null_ptr = 1;
	sa.sa_handler = SIG_DFL;
	sigaction(SIGSEGV, &sa, &old);
	back = back && old.sa_handler == on_fault;
	dfl = sigaction(SIGSEGV, NULL, &old) == 0 && old.sa_handler == SIG_DFL;
	printf("segv own handler read back %s, fault reached it %s, SIG_DFL read back %s\n",
	       back ? "yes" : "no", faults == 1 ? "yes" : "no", dfl ? "yes" : "no");
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	sigset_t mask_before, mask_after;
	int l, c, checked, changed;
	pid_t pid;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc > 1 && strcmp(argv[1], "--wait-core") == 0)
		return wait_core();
	apply();
	snapshot(before, valid);
	pthread_sigmask(SIG_SETMASK, NULL, &mask_before);

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0 ||
	    (c = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    connect(c, (struct sockaddr *)&a, al) < 0) {
		perror("sigdisp: tcp connection on loopback");
		return 2;
	}
	close(c);
	close(l);
	fprintf(stderr, "maps: libosf=%d libosfcore=%d\n", maps_has("/libosf.so"),
		maps_has("/libosfcore.so") || maps_has("/memfd:osfcore"));

	changed = compare("changed", &checked);
	printf("parent checked %d signals, %d changed\n", checked, changed);
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		changed = compare("child-changed", &checked);
		printf("child checked %d signals, %d changed\n", checked, changed);
		_exit(0);
	}
	waitpid(pid, NULL, 0);
	pthread_sigmask(SIG_SETMASK, NULL, &mask_after);
	printf("mask unchanged %s\n",
	       same_set(&mask_before, &mask_after) ? "yes" : "no");
	fault_own();
	return 0;
}
