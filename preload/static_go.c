//go:build osf_make

/* static_go.c: a statically linked Go program's system calls reach the
 * hooks without a trap (osfrun --static).
 *
 * Every system call of Go's net, os and syscall packages and of the
 * runtime's netpoller goes through internal/runtime/syscall/linux.Syscall6
 * (preload/gosys.c). osf_static_go_patch finds it in the executable's
 * symbol table, checks its code against Go 1.26's and writes a jump to
 * osf_static_go6 over its entry, as gosys.c does for a dynamically linked
 * Go program. The trampoline runs in libosf.so, above the dispatched
 * range, so its own `syscall` does not trap:
 *
 *   - a number osf does not serve goes to the kernel at once;
 *   - one static.c emulates (arch_prctl, clone, rt_sigaction, execve...)
 *     runs a `syscall` below the program, which traps to static.c's
 *     handler;
 *   - one a hook serves (osf_static_fastnr) blocks every signal (a Go
 *     handler must never run on the carrier's FS), moves to the thread's
 *     carrier stack and FS (static_thr, found from the program's FS in
 *     registers only: nothing is written on the goroutine's stack, which
 *     may be a few bytes from its end, as gosys.c), calls the hook and
 *     undoes all three.
 *
 * In the child of os/exec's vfork (a copy: static.c) every call goes to
 * the kernel. The trampoline needs rdfsbase/wrfsbase (osf_static_exec
 * patches only where the CPU and kernel allow them). */
#include "osf.h"
#include "static.h"
#include "goabi.h"

#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* Every signal: the mask a hook runs under. */
const unsigned long osf_static_allmask = ~0UL;

/* The Go call a trampoline built in t: the hook's result (or -errno) in
 * t->n. On the carrier's stack and FS, signals blocked. */
void osf_static_go_c(struct static_thr *t);
void osf_static_go_c(struct static_thr *t)
{
	t->n = osf_static_call(t->n, t->a);
}

#define S_(x) #x
#define S(x) S_(x)

/* Go ABIInternal: AX the number, BX CX DI SI R8 R9 the arguments; returns
 * AX r1, BX r2, CX errno (goabi.h), with X15 zero; R14 (g), R15, BP and SP kept,
 * everything else scratch (Syscall6's own contract). R12 holds the
 * static_thr and R13 the goroutine's SP across the C call (callee-saved
 * in C). */
void osf_static_go6(void);
__asm__(".text\n"
	".globl osf_static_go6\n"
	".hidden osf_static_go6\n"
	".type osf_static_go6,@function\n"
	"osf_static_go6:\n"
	"	cmpb $0, osf_static_vchild(%rip)\n"
	"	jne 1f\n"
	"	cmpq $512, %rax\n"
	"	jae 1f\n"
	"	leaq osf_static_trapnr(%rip), %r11\n"
	"	cmpb $0, (%r11,%rax)\n"
	"	jne 7f\n"
	"	leaq osf_static_fastnr(%rip), %r11\n"
	"	cmpb $0, (%r11,%rax)\n"
	"	je 1f\n"
	/* the program's FS -> static_thr: R10 the key, R11 the slot, R13 the
	 * probes left, RDX the table */
	"	rdfsbase %r10\n"
	"	movq %r10, %r11\n"
	"	shrq $6, %r11\n"
	"	andl $" S(STATIC_FSMAP - 1) ", %r11d\n"
	"	movl $" S(STATIC_FSMAP) ", %r13d\n"
	"	leaq osf_static_fsprog(%rip), %rdx\n"
	"4:\n"
	"	movq (%rdx,%r11,8), %r12\n"
	"	cmpq %r10, %r12\n"
	"	je 5f\n"
	"	testq %r12, %r12\n"
	"	jz 7f\n" /* no carrier known: trap */
	"	incl %r11d\n"
	"	andl $" S(STATIC_FSMAP - 1) ", %r11d\n"
	"	decl %r13d\n"
	"	jnz 4b\n"
	"	jmp 7f\n"
	"5:\n"
	"	leaq osf_static_fsthr(%rip), %rdx\n"
	"	movq (%rdx,%r11,8), %r12\n"
	"	cmpb $0, " S(STATIC_THR_BUSY) "(%r12)\n"
	"	jne 7f\n" /* a signal handler's call inside another: trap */
	"	movb $1, " S(STATIC_THR_BUSY) "(%r12)\n"
	"	movq %rax, " S(STATIC_THR_N) "(%r12)\n"
	"	movq %rbx, " S(STATIC_THR_A) "(%r12)\n"
	"	movq %rcx, " S(STATIC_THR_A) "+8(%r12)\n"
	"	movq %rdi, " S(STATIC_THR_A) "+16(%r12)\n"
	"	movq %rsi, " S(STATIC_THR_A) "+24(%r12)\n"
	"	movq %r8, " S(STATIC_THR_A) "+32(%r12)\n"
	"	movq %r9, " S(STATIC_THR_A) "+40(%r12)\n"
	"	movq %r10, " S(STATIC_THR_PROGFS) "(%r12)\n"
	"	movl $" S(SYS_rt_sigprocmask) ", %eax\n"
	"	movl $" S(SIG_SETMASK) ", %edi\n"
	"	leaq osf_static_allmask(%rip), %rsi\n"
	"	leaq " S(STATIC_THR_MASK) "(%r12), %rdx\n"
	"	movl $8, %r10d\n"
	"	syscall\n"
	"	movq %rsp, %r13\n"
	"	movq " S(STATIC_THR_STACK) "(%r12), %rsp\n"
	"	movq " S(STATIC_THR_CARRIER) "(%r12), %rax\n"
	"	wrfsbase %rax\n"
	"	cld\n"
	"	movq %r12, %rdi\n"
	"	call osf_static_go_c\n"
	"	movq " S(STATIC_THR_PROGFS) "(%r12), %rax\n"
	"	wrfsbase %rax\n"
	"	movq %r13, %rsp\n"
	"	movl $" S(SYS_rt_sigprocmask) ", %eax\n"
	"	movl $" S(SIG_SETMASK) ", %edi\n"
	"	leaq " S(STATIC_THR_MASK) "(%r12), %rsi\n"
	"	xorl %edx, %edx\n"
	"	movl $8, %r10d\n"
	"	syscall\n"
	"	movq " S(STATIC_THR_N) "(%r12), %rax\n"
	"	movb $0, " S(STATIC_THR_BUSY) "(%r12)\n"
	"	xorl %edx, %edx\n"
	"	xorps %xmm15, %xmm15\n"
	"	jmp 2f\n"
	/* emulated: the trap gadget below the program, back through R12 */
	"7:\n"
	"	movq %rsi, %r10\n"
	"	movq %rdi, %rdx\n"
	"	movq %rcx, %rsi\n"
	"	movq %rbx, %rdi\n"
	"	leaq 2f(%rip), %r12\n"
	"	movq osf_static_gotrap(%rip), %r11\n"
	"	jmp *%r11\n"
	/* Syscall6's own body */
	GO_SYSCALL6_TAIL
	".size osf_static_go6, .-osf_static_go6\n");

unsigned char *osf_static_gotrap;

int osf_static_go_patch(int fd, unsigned long bias, unsigned char *trap)
{
	static const unsigned char gadget[] = {0x0f, 0x05, 0x41, 0xff, 0xe4}; /* syscall; jmp *%r12 */
	unsigned long at = osf_go_static_syscall6(fd, bias), pg = 4096;
	unsigned char j[13] = {0x49, 0xbb}; /* movabs $osf_static_go6, %r11; jmp *%r11 */
	uint64_t to = (uint64_t)(uintptr_t)osf_static_go6;
	unsigned long lo = at & ~(pg - 1), len = (at + sizeof(j) - lo + pg - 1) & ~(pg - 1);

	if (!at || !trap)
		return -1;
	if (mprotect((void *)((unsigned long)trap & ~(pg - 1)), pg, PROT_READ | PROT_WRITE | PROT_EXEC) < 0)
		return -1;
	memcpy(trap, gadget, sizeof(gadget));
	if (mprotect((void *)((unsigned long)trap & ~(pg - 1)), pg, PROT_READ | PROT_EXEC) < 0)
		return -1;
	osf_static_gotrap = trap;
	memcpy(j + 2, &to, 8);
	j[10] = 0x41, j[11] = 0xff, j[12] = 0xe3;
	if (mprotect((void *)lo, len, PROT_READ | PROT_WRITE) < 0)
		return -1;
	memcpy((void *)at, j, sizeof(j));
	__builtin___clear_cache((char *)at, (char *)at + sizeof(j));
	return mprotect((void *)lo, len, PROT_READ | PROT_EXEC);
}
