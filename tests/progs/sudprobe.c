/* sudprobe: what Syscall User Dispatch (preload/static.c) costs on this
 * machine and what it covers (docs/STATIC.md).
 *
 *   sudprobe [N]   N getppid calls (default 200000) made plainly, then
 *                  each trapped (SIGSYS, the handler makes the call), then
 *                  trapped with the FS switch osf's handler adds (rdfsbase,
 *                  wrfsbase twice); then whether a thread and a fork child
 *                  inherit dispatch. Prints one line:
 *   plain_ns P trap_ns T trap_fsswap_ns F traps_per_call 1.00
 *   thread_inherits no fork_inherits no
 *   or "sud unavailable: REASON". */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/auxv.h>
#include <ucontext.h>
#include <unistd.h>
#include <asm/prctl.h>

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#endif

extern char etext[];
static volatile long traps;
static int swapfs;

/* raw getppid from this program's text (outside the allowed range) */
__attribute__((noinline)) static long raw_getppid(void)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "0"((long)SYS_getppid) : "rcx", "r11", "memory");
	return r;
}

static void on_sys(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;
	unsigned long fs = 0;
	(void)sig;
	(void)si;
	if (swapfs) { /* needs HWCAP2_FSGSBASE: the probe runs it only then */
		__asm__ volatile("rdfsbase %0" : "=r"(fs));
		__asm__ volatile("wrfsbase %0" ::"r"(fs));
	}
	__atomic_fetch_add(&traps, 1, __ATOMIC_RELAXED);
	uc->uc_mcontext.gregs[REG_RAX] = syscall(uc->uc_mcontext.gregs[REG_RAX]);
	if (swapfs)
		__asm__ volatile("wrfsbase %0" ::"r"(fs));
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static double per_call(int n)
{
	double t0 = now();
	for (int i = 0; i < n; i++)
		raw_getppid();
	return (now() - t0) / n;
}

static int sud_on(void)
{
	return prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, (unsigned long)etext,
		     (1UL << 47) - (unsigned long)etext, 0);
}

static void *thread(void *arg)
{
	(void)arg;
	long before = traps;
	raw_getppid();
	return (void *)(traps - before);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200000;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sys;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSYS, &sa, NULL);

	double plain = per_call(n);
	if (sud_on() < 0) {
		printf("sud unavailable: %s\n", strerror(errno));
		return 0;
	}
	long t0 = traps;
	double trap = per_call(n);
	long ntraps = traps - t0;
	swapfs = (getauxval(AT_HWCAP2) & 2) != 0; /* HWCAP2_FSGSBASE */
	double trapfs = swapfs ? per_call(n) : 0;
	swapfs = 0;
	pthread_t th;
	void *thr;
	pthread_create(&th, NULL, thread, NULL);
	pthread_join(th, &thr);
	pid_t pid = fork();
	if (pid == 0) {
		long before = traps;
		raw_getppid();
		_exit(traps - before == 1 ? 1 : 0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	printf("plain_ns %.1f trap_ns %.1f trap_fsswap_ns %.1f traps_per_call %.2f thread_inherits %s fork_inherits %s\n",
	       plain, trap, trapfs, (double)ntraps / n, thr ? "yes" : "no",
	       WEXITSTATUS(st) == 1 ? "yes" : "no");
	return 0;
}
