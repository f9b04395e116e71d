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
 *   - one a hook serves (osf_static_fastnr) moves to the thread's
 *     carrier stack and FS (static_thr, found from the program's FS in
 *     registers only: nothing is written on the goroutine's stack, which
 *     may be a few bytes from its end, as gosys.c), calls the hook and
 *     moves back. A signal meanwhile is deferred (a Go handler must never
 *     run on the carrier's FS: static_sig.c); the trampoline unblocks it
 *     once FS is the program's again, and makes the call again when the
 *     kernel would have restarted it after the handler. From the
 *     thread's alternate signal stack (a handler's call) it traps
 *     instead: a signal's frame would land on that stack's top.
 *
 * In the child of os/exec's vfork (a copy: static.c) every call goes to
 * the kernel. The trampoline needs rdfsbase/wrfsbase (osf_static_exec
 * patches only where the CPU and kernel allow them).
 *
 * The runtime's own futex, usleep and osyield stubs, whose calls osf
 * passes to the kernel unchanged, are moved above the dispatched range
 * (copy_stubs): the runtime parks and wakes its threads without a trap. */
#include "osf.h"
#include "static.h"
#include "goabi.h"

#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* The Go call a trampoline built in t: the hook's result (or -errno) in
 * t->r, and in t->restart whether to make it again once the handlers
 * deferred meanwhile ran. On the carrier's stack and FS. */
void osf_static_go_c(struct static_thr *t);
void osf_static_go_c(struct static_thr *t)
{
	t->r = osf_static_call(t->n, t->a);
	t->restart = osf_intr_take_restart() && t->r == -EINTR && static_restarts(t->n);
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
	"	movq %rsp, %r11\n"
	"	subq " S(STATIC_THR_SS_SP) "(%r12), %r11\n"
	"	cmpq " S(STATIC_THR_SS_SIZE) "(%r12), %r11\n"
	"	jb 7f\n" /* on the alternate signal stack: trap */
	"	movb $1, " S(STATIC_THR_BUSY) "(%r12)\n"
	"	movq %rax, " S(STATIC_THR_N) "(%r12)\n"
	"	movq %rbx, " S(STATIC_THR_A) "(%r12)\n"
	"	movq %rcx, " S(STATIC_THR_A) "+8(%r12)\n"
	"	movq %rdi, " S(STATIC_THR_A) "+16(%r12)\n"
	"	movq %rsi, " S(STATIC_THR_A) "+24(%r12)\n"
	"	movq %r8, " S(STATIC_THR_A) "+32(%r12)\n"
	"	movq %r9, " S(STATIC_THR_A) "+40(%r12)\n"
	"	movq %r10, " S(STATIC_THR_PROGFS) "(%r12)\n"
	"	movq %rsp, %r13\n"
	/* FS first, the stack second, and back in the other order: a Go
	 * handler never runs on the carrier's stack */
	"6:\n"
	"	movq " S(STATIC_THR_CARRIER) "(%r12), %rax\n"
	"	wrfsbase %rax\n"
	"	movq " S(STATIC_THR_STACK) "(%r12), %rsp\n"
	"	cld\n"
	"	movq %r12, %rdi\n"
	"	call osf_static_go_c\n"
	"	movq %r13, %rsp\n"
	"	movq " S(STATIC_THR_PROGFS) "(%r12), %rax\n"
	"	wrfsbase %rax\n"
	/* the signals deferred meanwhile (static_sig.c) run now, on the
	 * program's FS; the record stays busy (their calls trap) */
	"	cmpq $0, " S(STATIC_THR_DEFERRED) "(%r12)\n"
	"	je 8f\n"
	"	xorl %eax, %eax\n"
	"	xchgq %rax, " S(STATIC_THR_DEFERRED) "(%r12)\n"
	"	movq %rax, " S(STATIC_THR_UNBLOCK) "(%r12)\n"
	"	movl $" S(SYS_rt_sigprocmask) ", %eax\n"
	"	movl $" S(SIG_UNBLOCK) ", %edi\n"
	"	leaq " S(STATIC_THR_UNBLOCK) "(%r12), %rsi\n"
	"	xorl %edx, %edx\n"
	"	movl $8, %r10d\n"
	"	syscall\n"
	"	cmpb $0, " S(STATIC_THR_RESTART) "(%r12)\n"
	"	jne 6b\n"
	"8:\n"
	"	movq " S(STATIC_THR_R) "(%r12), %rax\n"
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

/* Go 1.26's runtime stubs of calls osf passes to the kernel unchanged and
 * the runtime makes often (osf_go_static_syms' order): runtime.futex (an
 * M parks or wakes another: a few per round trip of a ping-pong),
 * runtime.usleep (sysmon's naps, every 20 us while the program is busy),
 * runtime.osyield. Each would trap (about 1.3 us, docs/STATIC.md) where
 * the bare program pays about 0.1 us. Their code, checked byte for byte,
 * only addresses the stack: a copy above the dispatched range runs the
 * same instructions, and its syscall does not trap. */
static const unsigned char futex_code[] = {
	0x48, 0x8b, 0x7c, 0x24, 0x08, 0x8b, 0x74, 0x24, 0x10, 0x8b, 0x54, 0x24, 0x14,
	0x4c, 0x8b, 0x54, 0x24, 0x18, 0x4c, 0x8b, 0x44, 0x24, 0x20, 0x44, 0x8b, 0x4c,
	0x24, 0x28, 0xb8, 0xca, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x89, 0x44, 0x24, 0x30,
	0xc3,
};
static const unsigned char usleep_code[] = {
	0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xba, 0x00, 0x00, 0x00, 0x00,
	0x8b, 0x44, 0x24, 0x20, 0xb9, 0x40, 0x42, 0x0f, 0x00, 0xf7, 0xf1, 0x48, 0x89,
	0x04, 0x24, 0xb8, 0xe8, 0x03, 0x00, 0x00, 0xf7, 0xe2, 0x48, 0x89, 0x44, 0x24,
	0x08, 0x48, 0x89, 0xe7, 0xbe, 0x00, 0x00, 0x00, 0x00, 0xb8, 0x23, 0x00, 0x00,
	0x00, 0x0f, 0x05, 0x48, 0x83, 0xc4, 0x10, 0x5d, 0xc3,
};
static const unsigned char osyield_code[] = {0xb8, 0x18, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xc3};
static const struct {
	const unsigned char *code;
	size_t len;
} go_stubs[OSF_GO_STUBS] = {
	{futex_code, sizeof(futex_code)},
	{usleep_code, sizeof(usleep_code)},
	{osyield_code, sizeof(osyield_code)},
};

/* copy_stubs moves the stubs at at[] whose code is Go 1.26's to copies in
 * a page of their own (mapped where the kernel puts it: above the
 * program); a stub shorter than the jump must be followed by int3
 * padding it may cover. It returns how many it moved. */
static int copy_stubs(const uintptr_t at[OSF_GO_STUBS])
{
	unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char *to[OSF_GO_STUBS] = {0};
	size_t off = 0;
	int n = 0;

	if (page == MAP_FAILED)
		return 0;
	for (int i = 0; i < OSF_GO_STUBS; i++) {
		const unsigned char *p = (const unsigned char *)at[i];
		size_t len = go_stubs[i].len;
		int fits = p && memcmp(p, go_stubs[i].code, len) == 0;
		for (size_t k = len; fits && k < OSF_GO_JUMP_LEN; k++)
			fits = p[k] == 0xcc;
		if (!fits)
			continue;
		to[i] = page + off;
		memcpy(to[i], go_stubs[i].code, len);
		off += (len + 15) & ~15UL;
	}
	if (!off || mprotect(page, 4096, PROT_READ | PROT_EXEC) < 0) {
		munmap(page, 4096);
		return 0;
	}
	for (int i = 0; i < OSF_GO_STUBS; i++)
		if (to[i] && osf_go_jump(at[i], to[i]) == 0)
			n++;
	return n;
}

int osf_static_go_patch(int fd, unsigned long bias, unsigned char *trap)
{
	static const unsigned char gadget[] = {0x0f, 0x05, 0x41, 0xff, 0xe4}; /* syscall; jmp *%r12 */
	uintptr_t stubs[OSF_GO_STUBS];
	unsigned long at = osf_go_static_syms(fd, bias, stubs), pg = 4096;

	copy_stubs(stubs);
	if (!at || !trap)
		return -1;
	if (mprotect((void *)((unsigned long)trap & ~(pg - 1)), pg, PROT_READ | PROT_WRITE | PROT_EXEC) < 0)
		return -1;
	memcpy(trap, gadget, sizeof(gadget));
	if (mprotect((void *)((unsigned long)trap & ~(pg - 1)), pg, PROT_READ | PROT_EXEC) < 0)
		return -1;
	osf_static_gotrap = trap;
	return osf_go_jump(at, (const void *)osf_static_go6);
}
