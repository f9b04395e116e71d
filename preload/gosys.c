//go:build osf_make

/* gosys.c: Go programs' system calls reach libosf.so's hooks (OSF_GO=1).
 *
 * Go makes its system calls without the C library, so the LD_PRELOAD
 * hooks never see them. In Go 1.26 on amd64 every system call the net
 * package and the runtime's netpoller make goes through one function,
 * internal/runtime/syscall/linux.Syscall6 (syscall.Syscall, RawSyscall,
 * the runtime's epoll calls). At start-up (before any Go code runs: the
 * constructor runs before the executable's entry), osf_go_init finds it in
 * /proc/self/exe's symbol table, checks its code byte for byte against Go
 * 1.26's, and replaces its first instructions by a jump to
 * osf_go_syscall6 below. That trampoline passes every system call number
 * osf does not hook straight to the kernel, with the original
 * instructions; for the others it moves to the thread's system stack as
 * runtime.asmcgocall does, without writing the goroutine's stack
 * (goroutine stacks are small and may move: no C code runs on them), and
 * calls the hook of the same name, then returns in Go's convention (r1,
 * r2, errno).
 *
 * os/exec's child (syscall.rawVforkSyscall, CLONE_VM|CLONE_VFORK) shares
 * the parent's memory until it execs: no osf code may run there. The
 * child's calls go through Syscall6 too, so rawVforkSyscall is replaced by
 * a copy that marks the child in the thread-local osf_go_child (the child
 * runs on the suspended parent thread's TLS; the parent clears the mark
 * when it resumes), and the trampoline sends a marked thread's calls to
 * the kernel. The fds the child moves (ExtraFiles, Stdin) are handed on
 * as by a posix_spawn with file actions (osf_go_spawn_begin).
 *
 * Anything unexpected (no symbol table, another Go version, other code)
 * leaves the program untouched on kernel TCP, with a reason in the fd
 * table's header (osfstat shows it) and, as OSF_GO=1 asked for it, a line
 * on stderr. */
#include "osf.h"
#include "goabi.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* The hooked numbers; every number at or above OSF_GO_NSYS passes. */
unsigned char osf_go_hooked[OSF_GO_NSYS];
/* Set on the thread of os/exec's vfork child until the parent resumes. */
__thread unsigned char osf_go_child __attribute__((tls_model("initial-exec")));

/* One hooked call, built by the trampoline on the system stack and read
 * by osf_go_dispatch; r is the result: a value, or -errno. */
struct go_call {
	long r; /* in: the number */
	long a[6];
};

int32_t osf_go_dispatch(struct go_call *c);

/* What the trampoline needs of the runtime to move to the system stack as
 * runtime.asmcgocall does, read from asmcgocall's and
 * gosave_systemstack_switch's code (go_runtime below): the TLS offset of
 * g, and runtime.systemstack_switch+8 (the PC a traceback of the
 * goroutine starts from while it is on the system stack). The structure
 * offsets are those the same code uses (Go 1.26: g.m 0x30, m.g0 0,
 * m.gsignal 0x48, g.sched.sp 0x38, .pc 0x40, .bp 0x60). */
long osf_go_tlsg;
void *osf_go_switchpc;

/* GO_TO_G0 moves to the thread's system stack as runtime.asmcgocall does,
 * in registers (nothing is written on the goroutine's stack): the
 * goroutine's SP, PC and BP into g.sched (gosave_systemstack_switch), g0
 * into the thread's g, SP from g0.sched.sp, 16-byte aligned; already on g0
 * or the signal stack it stays there. It leaves the goroutine's SP in R12
 * and g in R13 (callee-saved in C, for GO_FROM_G0) and uses R10, R11, DX.
 * GO_FROM_G0 comes back. */
#define GO_TO_G0                                                               \
	"	movq %rsp, %r12\n"                                             \
	"	movq osf_go_tlsg(%rip), %r11\n"                                \
	"	movq %fs:(%r11), %r13\n"                                       \
	"	testq %r13, %r13\n"                                            \
	"	jz 8f\n"                                                       \
	"	movq 0x30(%r13), %r10\n"                                       \
	"	cmpq %r13, 0x48(%r10)\n"                                       \
	"	je 8f\n"                                                       \
	"	movq 0(%r10), %r10\n"                                          \
	"	cmpq %r13, %r10\n"                                             \
	"	je 8f\n"                                                       \
	"	movq osf_go_switchpc(%rip), %rdx\n"                            \
	"	movq %rdx, 0x40(%r13)\n"                                       \
	"	movq %rsp, 0x38(%r13)\n"                                       \
	"	movq %rbp, 0x60(%r13)\n"                                       \
	"	movq %r10, %fs:(%r11)\n"                                       \
	"	movq 0x38(%r10), %rsp\n"                                       \
	"8:\n"                                                                 \
	"	andq $-16, %rsp\n"
#define GO_FROM_G0                                                             \
	"	movq osf_go_tlsg(%rip), %r11\n"                                \
	"	movq %r13, %fs:(%r11)\n"                                       \
	"	movq %r12, %rsp\n"                                             \
	"	xorps %xmm15, %xmm15\n"

/* os/exec's child (osf_go_vfork) of a process holding offloaded fds: the
 * table's snapshot it hands on (-1: none), the OSF_FDTABLE=<fd> and
 * LD_PRELOAD=<libosf.so> the child's execve adds to its environment
 * (osf_go_preload: only without an LD_PRELOAD), the OSF_* variables of
 * this process's environment that replace the child's (osf_go_envadd, as
 * the exec hooks do: the new image runs with its parent's configuration,
 * OSF_GO=1 included, even where os/exec's Env dropped it), and the array
 * that environment is built in (GO_ENVMAX pointers, made at start-up):
 * the child runs no C code, so the trampoline does it in assembly. */
#define GO_ENVMAX 4096
#define GO_ENVADD 64
int osf_go_snap = -1;
char osf_go_envvar[32];
char osf_go_preload[sizeof("LD_PRELOAD=") + sizeof(osf.lib_path)];
char **osf_go_envbuf;
char *osf_go_envadd[GO_ENVADD + 1];

/* The trampoline (Go ABIInternal: AX number, BX CX DI SI R8 R9 the six
 * arguments; returns AX r1, BX r2, CX errno; R14 is g, X15 must be zero
 * on return). Its pass-through path is Syscall6's own body. The hooked
 * path writes nothing on the goroutine's stack, as Syscall6 (NOSPLIT, $0)
 * does not: no push, no call before SP is on the system stack (a
 * goroutine in a NOSPLIT chain may be within a few bytes of its stack's
 * end). It does runtime.asmcgocall's switch in registers: the goroutine's
 * SP, PC and BP into g.sched (gosave_systemstack_switch), g0 into the
 * thread's g, SP from g0.sched.sp; already on g0 or the signal stack it
 * stays there. R12 (the goroutine's SP) and R13 (g) live across the C
 * call (callee-saved in C; scratch in Go's ABI, as Syscall6 may clobber
 * all but R14, R15, BP and SP). */
__asm__(".text\n"
	".globl osf_go_syscall6\n"
	".hidden osf_go_syscall6\n"
	".type osf_go_syscall6,@function\n"
	"osf_go_syscall6:\n"
	"	movq osf_go_child@gottpoff(%rip), %r11\n"
	"	cmpb $0, %fs:(%r11)\n"
	"	jne 6f\n"
	"	cmpq $512, %rax\n"
	"	jae 1f\n"
	"	leaq osf_go_hooked(%rip), %r11\n"
	"	cmpb $0, (%r11,%rax)\n"
	"	je 1f\n"
	GO_TO_G0
	"	subq $64, %rsp\n"
	"	movq %rax, 0(%rsp)\n"
	"	movq %rbx, 8(%rsp)\n"
	"	movq %rcx, 16(%rsp)\n"
	"	movq %rdi, 24(%rsp)\n"
	"	movq %rsi, 32(%rsp)\n"
	"	movq %r8, 40(%rsp)\n"
	"	movq %r9, 48(%rsp)\n"
	"	movq %rsp, %rdi\n"
	"	call osf_go_dispatch\n"
	"	movq 0(%rsp), %rax\n"
	GO_FROM_G0
	"	xorl %edx, %edx\n"
	"	jmp 2f\n"
	/* os/exec's child: execve gets this process's OSF_* variables and
	 * OSF_FDTABLE=<snapshot> in place of any OSF_ entry (the new image
	 * adopts that table), and LD_PRELOAD=<libosf.so> when it has no
	 * LD_PRELOAD (as the exec hooks put it back), unless the environment
	 * has GO_ENVMAX-3-GO_ENVADD entries or more. R8 walks the
	 * environment, R9 is an entry, RDX the count copied, SI whether
	 * LD_PRELOAD was seen. */
	"6:\n"
	"	cmpq $59, %rax\n" /* SYS_execve */
	"	jne 1f\n"
	"	cmpl $0, osf_go_snap(%rip)\n"
	"	jl 1f\n"
	"	movq osf_go_envbuf(%rip), %r10\n"
	"	xorl %edx, %edx\n"
	"	xorl %esi, %esi\n"
	"	movq %rdi, %r8\n"
	"	testq %r8, %r8\n"
	"	jz 7f\n"
	"9:\n"
	"	movq (%r8), %r9\n"
	"	testq %r9, %r9\n"
	"	jz 7f\n"
	"	addq $8, %r8\n"
	"	leaq osf_go_envvar(%rip), %r11\n"
	"	xorl %r12d, %r12d\n"
	"10:\n"
	"	movzbl (%r9,%r12), %r13d\n"
	"	cmpb (%r11,%r12), %r13b\n"
	"	jne 12f\n"
	"	incq %r12\n"
	"	cmpq $4, %r12\n" /* strlen("OSF_") */
	"	jb 10b\n"
	"	jmp 9b\n"
	"12:\n"
	"	leaq osf_go_preload(%rip), %r11\n"
	"	xorl %r12d, %r12d\n"
	"13:\n"
	"	movzbl (%r9,%r12), %r13d\n"
	"	cmpb (%r11,%r12), %r13b\n"
	"	jne 11f\n"
	"	incq %r12\n"
	"	cmpq $11, %r12\n" /* strlen("LD_PRELOAD=") */
	"	jb 13b\n"
	"	movl $1, %esi\n"
	"11:\n"
	"	cmpq $4029, %rdx\n" /* GO_ENVMAX - 3 - GO_ENVADD */
	"	jae 1f\n"
	"	movq %r9, (%r10,%rdx,8)\n"
	"	incq %rdx\n"
	"	jmp 9b\n"
	"7:\n"
	"	leaq osf_go_envadd(%rip), %r11\n"
	"15:\n"
	"	movq (%r11), %r9\n"
	"	testq %r9, %r9\n"
	"	jz 16f\n"
	"	movq %r9, (%r10,%rdx,8)\n"
	"	incq %rdx\n"
	"	addq $8, %r11\n"
	"	jmp 15b\n"
	"16:\n"
	"	leaq osf_go_envvar(%rip), %r11\n"
	"	movq %r11, (%r10,%rdx,8)\n"
	"	incq %rdx\n"
	"	testl %esi, %esi\n"
	"	jnz 14f\n"
	"	leaq osf_go_preload(%rip), %r11\n"
	"	movq %r11, (%r10,%rdx,8)\n"
	"	incq %rdx\n"
	"14:\n"
	"	movq $0, (%r10,%rdx,8)\n"
	"	movq %r10, %rdi\n"
	GO_SYSCALL6_TAIL
	".size osf_go_syscall6, .-osf_go_syscall6\n");

/* syscall.rawVforkSyscall(trap, a1, a2, a3 uintptr) (r1, err uintptr),
 * ABI0 (arguments at 8(SP)...), as Go 1.26 has it, plus the child's mark.
 * The return address is held in R12 across the call: the child runs on
 * the same stack and must not overwrite it. */
__asm__(".text\n"
	".globl osf_go_vfork\n"
	".hidden osf_go_vfork\n"
	".type osf_go_vfork,@function\n"
	"osf_go_vfork:\n"
	"	cmpq $0, osf_go_envbuf(%rip)\n"
	"	je 5f\n"
	GO_TO_G0
	"	call osf_go_spawn_begin\n"
	GO_FROM_G0
	"5:\n"
	"	movq 0x10(%rsp), %rdi\n"
	"	movq 0x18(%rsp), %rsi\n"
	"	movq 0x20(%rsp), %rdx\n"
	"	movq $0, %r10\n"
	"	movq $0, %r8\n"
	"	movq $0, %r9\n"
	"	movq 0x8(%rsp), %rax\n"
	"	popq %r12\n"
	"	syscall\n"
	"	pushq %r12\n"
	"	movq osf_go_child@gottpoff(%rip), %r11\n"
	"	testq %rax, %rax\n"
	"	sete %fs:(%r11)\n"
	"	je 2f\n"
	"	cmpl $0, osf_go_snap(%rip)\n"
	"	jl 2f\n"
	"	movq %rax, %rbx\n"
	GO_TO_G0
	"	call osf_go_spawn_end\n"
	GO_FROM_G0
	"	movq %rbx, %rax\n"
	"2:\n"
	"	cmpq $-4095, %rax\n"
	"	jbe 1f\n"
	"	movq $-1, 0x28(%rsp)\n"
	"	negq %rax\n"
	"	movq %rax, 0x30(%rsp)\n"
	"	ret\n"
	"1:\n"
	"	movq %rax, 0x28(%rsp)\n"
	"	movq $0, 0x30(%rsp)\n"
	"	ret\n"
	".size osf_go_vfork, .-osf_go_vfork\n");

void osf_go_syscall6(void);
void osf_go_vfork(void);
void osf_go_spawn_begin(void);
void osf_go_spawn_end(void);

/* osf_go_spawn_begin runs in the parent on its system stack before
 * os/exec's clone, osf_go_spawn_end after it (the parent thread resumes
 * once the child has exec'd or died). The child's dup3s onto its own fd
 * numbers (ExtraFiles, Stdin, ...) happen where no hook sees them, so it
 * is prepared as a posix_spawn with file actions: the new image gets a
 * snapshot of the table (named by OSF_FDTABLE, which the child's execve
 * adds) and every hidden fd, and finds the connections at their new
 * numbers by inode (osf_fdt_adopt). */
void osf_go_spawn_begin(void)
{
	int saved = errno;

	osf_go_snap = osf_spawn_begin();
	if (osf_go_snap >= 0)
		snprintf(osf_go_envvar, sizeof(osf_go_envvar), "OSF_FDTABLE=%d", osf_go_snap);
	errno = saved;
}

void osf_go_spawn_end(void)
{
	int saved = errno;

	osf_spawn_end(osf_go_snap);
	osf_go_snap = -1;
	errno = saved;
}

/* The system call numbers Go's net, os and runtime use on sockets and
 * their readiness, each reaching the hook of the same name. */
static const int hooked[] = {
	SYS_socket,	  SYS_connect,	     SYS_accept,      SYS_accept4,
	SYS_bind,	  SYS_listen,	     SYS_read,	      SYS_write,
	SYS_readv,	  SYS_writev,	     SYS_recvfrom,    SYS_sendto,
	SYS_recvmsg,	  SYS_sendmsg,	     SYS_close,	      SYS_shutdown,
	SYS_getsockopt,	  SYS_setsockopt,    SYS_getsockname, SYS_getpeername,
	SYS_fcntl,	  SYS_ioctl,	     SYS_dup,	      SYS_dup2,
	SYS_dup3,	  SYS_sendfile,	     SYS_splice,      SYS_epoll_create,
	SYS_epoll_create1, SYS_epoll_ctl,    SYS_epoll_wait,  SYS_epoll_pwait,
	SYS_epoll_pwait2, SYS_execve,	     SYS_prlimit64,   SYS_setrlimit,
};

void osf_go_mark(unsigned char t[OSF_GO_NSYS])
{
	for (size_t i = 0; i < sizeof(hooked) / sizeof(hooked[0]); i++)
		t[hooked[i]] = 1;
}

long osf_go_hook(long n, const long *a)
{
	switch (n) {
	case SYS_socket:
		return socket((int)a[0], (int)a[1], (int)a[2]);
	case SYS_connect:
		return connect((int)a[0], (const struct sockaddr *)a[1], (socklen_t)a[2]);
	case SYS_accept:
		return accept((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
	case SYS_accept4:
		return accept4((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2], (int)a[3]);
	case SYS_bind:
		return bind((int)a[0], (const struct sockaddr *)a[1], (socklen_t)a[2]);
	case SYS_listen:
		return listen((int)a[0], (int)a[1]);
	case SYS_read:
		return read((int)a[0], (void *)a[1], (size_t)a[2]);
	case SYS_write:
		return write((int)a[0], (const void *)a[1], (size_t)a[2]);
	case SYS_readv:
		return readv((int)a[0], (const struct iovec *)a[1], (int)a[2]);
	case SYS_writev:
		return writev((int)a[0], (const struct iovec *)a[1], (int)a[2]);
	case SYS_recvfrom:
		return recvfrom((int)a[0], (void *)a[1], (size_t)a[2], (int)a[3],
				(struct sockaddr *)a[4], (socklen_t *)a[5]);
	case SYS_sendto:
		return sendto((int)a[0], (const void *)a[1], (size_t)a[2], (int)a[3],
			      (const struct sockaddr *)a[4], (socklen_t)a[5]);
	case SYS_recvmsg:
		return recvmsg((int)a[0], (struct msghdr *)a[1], (int)a[2]);
	case SYS_sendmsg:
		return sendmsg((int)a[0], (const struct msghdr *)a[1], (int)a[2]);
	case SYS_close:
		return close((int)a[0]);
	case SYS_shutdown:
		return shutdown((int)a[0], (int)a[1]);
	case SYS_getsockopt:
		return getsockopt((int)a[0], (int)a[1], (int)a[2], (void *)a[3],
				  (socklen_t *)a[4]);
	case SYS_setsockopt:
		return setsockopt((int)a[0], (int)a[1], (int)a[2], (const void *)a[3],
				  (socklen_t)a[4]);
	case SYS_getsockname:
		return getsockname((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
	case SYS_getpeername:
		return getpeername((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
	case SYS_fcntl:
		return fcntl((int)a[0], (int)a[1], a[2]);
	case SYS_ioctl:
		return ioctl((int)a[0], (unsigned long)a[1], a[2]);
	case SYS_dup:
		return dup((int)a[0]);
	case SYS_dup2:
		return dup2((int)a[0], (int)a[1]);
	case SYS_dup3:
		return dup3((int)a[0], (int)a[1], (int)a[2]);
	case SYS_sendfile:
		return sendfile((int)a[0], (int)a[1], (off_t *)a[2], (size_t)a[3]);
	case SYS_splice:
		return splice((int)a[0], (loff_t *)a[1], (int)a[2], (loff_t *)a[3],
			      (size_t)a[4], (unsigned)a[5]);
	case SYS_epoll_create:
		return epoll_create((int)a[0]);
	case SYS_epoll_create1:
		return epoll_create1((int)a[0]);
	case SYS_epoll_ctl:
		return epoll_ctl((int)a[0], (int)a[1], (int)a[2], (struct epoll_event *)a[3]);
	case SYS_epoll_wait:
		return epoll_wait((int)a[0], (struct epoll_event *)a[1], (int)a[2], (int)a[3]);
	case SYS_epoll_pwait:
		/* a[5] is the kernel's sigsetsize: the C library passes its own */
		return epoll_pwait((int)a[0], (struct epoll_event *)a[1], (int)a[2],
				   (int)a[3], (const sigset_t *)a[4]);
	case SYS_epoll_pwait2:
		return epoll_pwait2((int)a[0], (struct epoll_event *)a[1], (int)a[2],
				    (const struct timespec *)a[3], (const sigset_t *)a[4]);
	case SYS_prlimit64: /* osf keeps its fds at the top of RLIMIT_NOFILE */
		return prlimit((pid_t)a[0], (__rlimit_resource_t)a[1],
			       (const struct rlimit *)a[2], (struct rlimit *)a[3]);
	case SYS_setrlimit:
		return setrlimit((__rlimit_resource_t)a[0], (const struct rlimit *)a[1]);
	case SYS_execve:
		return execve((const char *)a[0], (char *const *)a[1], (char *const *)a[2]);
	}
	return -ENOSYS;
}

/* osf_go_dispatch runs on the thread's system stack (the trampoline). */
int32_t osf_go_dispatch(struct go_call *c)
{
	int saved = errno;
	long r = osf_go_hook(c->r, c->a);

	c->r = r == -1 ? -(long)errno : r;
	errno = saved;
	return 0;
}

/* ---- finding and checking Go's code --------------------------------- */

/* Go 1.26 amd64 internal/runtime/syscall/linux.Syscall6 (asm_linux_amd64.s). */
static const unsigned char syscall6_code[] = {
	0x49, 0x89, 0xf2, 0x48, 0x89, 0xfa, 0x48, 0x89, 0xce, 0x48, 0x89,
	0xdf, 0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, 0x76, 0x15,
	0x48, 0xf7, 0xd8, 0x48, 0x89, 0xc1, 0x48, 0xc7, 0xc0, 0xff, 0xff,
	0xff, 0xff, 0x48, 0xc7, 0xc3, 0x00, 0x00, 0x00, 0x00, 0xc3, 0x48,
	0x89, 0xd3, 0x48, 0xc7, 0xc1, 0x00, 0x00, 0x00, 0x00, 0xc3,
};

/* Go 1.26 amd64 syscall.rawVforkSyscall (ABI0, asm_linux_amd64.s). */
static const unsigned char vfork_code[] = {
	0x48, 0x8b, 0x7c, 0x24, 0x10, 0x48, 0x8b, 0x74, 0x24, 0x18, 0x48,
	0x8b, 0x54, 0x24, 0x20, 0x49, 0xc7, 0xc2, 0x00, 0x00, 0x00, 0x00,
	0x49, 0xc7, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x49, 0xc7, 0xc1, 0x00,
	0x00, 0x00, 0x00, 0x48, 0x8b, 0x44, 0x24, 0x08, 0x41, 0x5c, 0x0f,
	0x05, 0x41, 0x54, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, 0x76, 0x12,
	0x48, 0xc7, 0x44, 0x24, 0x28, 0xff, 0xff, 0xff, 0xff, 0x48, 0xf7,
	0xd8, 0x48, 0x89, 0x44, 0x24, 0x30, 0xc3, 0x48, 0x89, 0x44, 0x24,
	0x28, 0x48, 0xc7, 0x44, 0x24, 0x30, 0x00, 0x00, 0x00, 0x00, 0xc3,
};

/* match compares n bytes at p with want, where want's byte 0x100 matches
 * any byte (a displacement or a branch offset). */
static int match(const unsigned char *p, const short *want, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (want[i] != 0x100 && p[i] != want[i])
			return 0;
	return 1;
}

static int32_t rel32(const unsigned char *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

#define ANY 0x100
#define ANY4 ANY, ANY, ANY, ANY

/* go_runtime reads what the trampoline needs from Go 1.26's amd64
 * runtime.asmcgocall (ABI0) at a, whose switch to the system stack it
 * repeats: the thread's g is at %fs:tlsg (get_tls: an absolute
 * displacement, or a constant in CX in a position-independent
 * executable), g.m at 0x30, m.gsignal 0x48, m.g0 0, g0.sched.sp 0x38;
 * and from gosave_systemstack_switch, which asmcgocall calls first, the
 * address of runtime.systemstack_switch+8 and g.sched's pc 0x40, sp 0x38
 * and bp 0x60. Returns -1 unless the code is exactly that. */
static int go_runtime(const unsigned char *a)
{
	static const short fixed_tls[] = {0x64, 0x48, 0x8b, 0x3c, 0x25, ANY4};
	static const short pic_tls[] = {0x48, 0xc7, 0xc1, ANY4, 0x64, 0x48, 0x8b, 0x39};
	static const short checks[] = {
		0x48, 0x83, 0xff, 0x00, 0x74, ANY,			/* CMPQ DI, $0; JEQ */
		0x4c, 0x8b, 0x47, 0x30,					/* MOVQ g_m(DI), R8 */
		0x49, 0x8b, 0x70, 0x48,					/* MOVQ m_gsignal(R8), SI */
		0x48, 0x39, 0xf7, 0x74, ANY,				/* CMPQ DI, SI; JEQ */
		0x49, 0x8b, 0x30,					/* MOVQ m_g0(R8), SI */
		0x48, 0x39, 0xf7, 0x74, ANY,				/* CMPQ DI, SI; JEQ */
		0x48, 0x8b, 0x44, 0x24, 0x10, 0x48, 0x8b, 0x5c, 0x24, 0x18, /* fn, arg */
		0x48, 0x89, 0xe2,					/* MOVQ SP, DX */
		0xe8, ANY4,						/* CALL gosave_systemstack_switch */
	};
	static const short fixed_set[] = {0x64, 0x48, 0x89, 0x34, 0x25, ANY4};
	static const short pic_set[] = {0x64, 0x48, 0x89, 0x31};
	static const short to_g0[] = {0x48, 0x8b, 0x66, 0x38}; /* MOVQ g_sched+gobuf_sp(SI), SP */
	static const short gosave[] = {
		0x4c, 0x8d, 0x0d, ANY4,		/* LEAQ systemstack_switch+8(SB), R9 */
		0x4d, 0x89, 0x4e, 0x40,		/* MOVQ R9, g_sched+gobuf_pc(R14) */
		0x4c, 0x8d, 0x4c, 0x24, 0x08,	/* LEAQ 8(SP), R9 */
		0x4d, 0x89, 0x4e, 0x38,		/* MOVQ R9, g_sched+gobuf_sp(R14) */
		0x49, 0x89, 0x6e, 0x60,		/* MOVQ BP, g_sched+gobuf_bp(R14) */
		0x4d, 0x8b, 0x4e, 0x50, 0x4d, 0x85, 0xc9, 0x74, 0x05, /* ctxt == 0 */
		0xe8, ANY4, 0xc3,		/* CALL runtime.abort; RET */
	};
	static const unsigned char head[] = {0x55, 0x48, 0x89, 0xe5};
	const unsigned char *p = a + sizeof(head), *save;
	int pic;
	long tls;

	if (memcmp(a, head, sizeof(head)) != 0)
		return -1;
	if (match(p, fixed_tls, sizeof(fixed_tls) / sizeof(short))) {
		pic = 0, tls = rel32(p + 5), p += sizeof(fixed_tls) / sizeof(short);
	} else if (match(p, pic_tls, sizeof(pic_tls) / sizeof(short))) {
		pic = 1, tls = rel32(p + 3), p += sizeof(pic_tls) / sizeof(short);
	} else {
		return -1;
	}
	if (!match(p, checks, sizeof(checks) / sizeof(short)))
		return -1;
	p += sizeof(checks) / sizeof(short);
	save = p + rel32(p - 4);
	if (pic ? !match(p, pic_set, sizeof(pic_set) / sizeof(short))
		: !match(p, fixed_set, sizeof(fixed_set) / sizeof(short)) || rel32(p + 5) != tls)
		return -1;
	p += pic ? sizeof(pic_set) / sizeof(short) : sizeof(fixed_set) / sizeof(short);
	if (!match(p, to_g0, sizeof(to_g0) / sizeof(short)) ||
	    !match(save, gosave, sizeof(gosave) / sizeof(short)))
		return -1;
	osf_go_tlsg = tls;
	osf_go_switchpc = (void *)(save + 7 + rel32(save + 3));
	return 0;
}


enum { SYM_SYSCALL6, SYM_VFORK, SYM_VFORK_ABI0, SYM_ASMCGOCALL, SYM_VERSION,
       SYM_STUBS, NSYMS = SYM_STUBS + OSF_GO_STUBS };
static const char *const sym_names[NSYMS] = {
	"internal/runtime/syscall/linux.Syscall6",
	"syscall.rawVforkSyscall",
	"syscall.rawVforkSyscall.abi0",
	"runtime.asmcgocall.abi0",
	"runtime.buildVersion",
	"runtime.futex.abi0",
	"runtime.usleep.abi0",
	"runtime.osyield.abi0",
};

struct image {
	const unsigned char *p;
	size_t len;
	uintptr_t bias;
	uintptr_t sym[NSYMS];
	size_t size[NSYMS];
	int symtab;
};

static int in_file(const struct image *im, uint64_t off, uint64_t len)
{
	return off <= im->len && len <= im->len - off;
}

/* scan reads the symbol table for the symbols we need. */
static int scan(struct image *im)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)im->p;
	const Elf64_Shdr *sh, *shstr;
	const char *names;

	if (im->len < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_machine != EM_X86_64 ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) ||
	    !in_file(im, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)) ||
	    eh->e_shstrndx >= eh->e_shnum)
		return -1;
	sh = (const Elf64_Shdr *)(im->p + eh->e_shoff);
	shstr = &sh[eh->e_shstrndx];
	if (!in_file(im, shstr->sh_offset, shstr->sh_size))
		return -1;
	names = (const char *)im->p + shstr->sh_offset;
	(void)names;
	for (int i = 0; i < eh->e_shnum; i++) {
		const Elf64_Shdr *st = &sh[i], *str;
		const Elf64_Sym *sym;
		size_t n;

		if (st->sh_type != SHT_SYMTAB || st->sh_link >= eh->e_shnum)
			continue;
		str = &sh[st->sh_link];
		if (!in_file(im, st->sh_offset, st->sh_size) ||
		    !in_file(im, str->sh_offset, str->sh_size) || str->sh_size == 0)
			continue;
		im->symtab = 1;
		sym = (const Elf64_Sym *)(im->p + st->sh_offset);
		n = st->sh_size / sizeof(*sym);
		for (size_t k = 0; k < n; k++) {
			const char *nm;
			if (sym[k].st_name >= str->sh_size || sym[k].st_value == 0)
				continue;
			nm = (const char *)im->p + str->sh_offset + sym[k].st_name;
			if (nm[0] != 'i' && nm[0] != 's' && nm[0] != 'r')
				continue;
			for (int j = 0; j < NSYMS; j++)
				if (!im->sym[j] &&
				    strnlen(nm, str->sh_size - sym[k].st_name) <
					    str->sh_size - sym[k].st_name &&
				    strcmp(nm, sym_names[j]) == 0) {
					im->sym[j] = sym[k].st_value;
					im->size[j] = sym[k].st_size;
				}
		}
	}
	return 0;
}

/* The executable as it is mapped: its load bias, and whether it carries
 * Go's build-id note (name "Go", padded to 4, type 4: .note.go.buildid, in a PT_NOTE
 * segment), found without a system call: every program under osf asks. */
struct exe {
	uintptr_t bias;
	int go;
};

int osf_go_note(const unsigned char *p, size_t len)
{
	while (len >= 12) {
		uint32_t nsz, dsz, type;
		size_t step;
		memcpy(&nsz, p, 4);
		memcpy(&dsz, p + 4, 4);
		memcpy(&type, p + 8, 4);
		step = 12 + (((size_t)nsz + 3) & ~(size_t)3) + (((size_t)dsz + 3) & ~(size_t)3);
		if (step > len)
			return 0;
		if (type == 4 && (nsz == 3 || nsz == 4) && memcmp(p + 12, "Go", 3) == 0)
			return 1;
		p += step;
		len -= step;
	}
	return 0;
}

static int first_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct exe *x = arg;

	(void)size;
	x->bias = info->dlpi_addr;
	for (int i = 0; i < info->dlpi_phnum && !x->go; i++)
		if (info->dlpi_phdr[i].p_type == PT_NOTE)
			x->go = osf_go_note((const unsigned char *)(info->dlpi_addr +
								info->dlpi_phdr[i].p_vaddr),
					info->dlpi_phdr[i].p_filesz);
	return 1; /* the first object is the executable */
}

int osf_go_table;

uintptr_t osf_go_static_syms(int fd, uintptr_t bias, uintptr_t stubs[OSF_GO_STUBS])
{
	struct image im = {0};
	struct stat st;
	void *map;
	uintptr_t r = 0;

	memset(stubs, 0, OSF_GO_STUBS * sizeof(stubs[0]));
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr))
		return 0;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return 0;
	im.p = map;
	im.len = (size_t)st.st_size;
	if (scan(&im) == 0 && im.sym[SYM_SYSCALL6] &&
	    im.size[SYM_SYSCALL6] >= sizeof(syscall6_code) &&
	    memcmp((const void *)(bias + im.sym[SYM_SYSCALL6]), syscall6_code,
		   sizeof(syscall6_code)) == 0)
		r = bias + im.sym[SYM_SYSCALL6];
	for (int i = 0; i < OSF_GO_STUBS; i++)
		stubs[i] = im.sym[SYM_STUBS + i] ? bias + im.sym[SYM_STUBS + i] : 0;
	munmap(map, im.len);
	return r;
}


/* refuse leaves a Go program on kernel TCP, says why and has the fd table
 * made, so that osfstat shows it. */
static void refuse(int reason, const char *fmt, const char *what)
{
	char detail[120];

	snprintf(detail, sizeof(detail), fmt, what);
	osf_fdt_set_go(reason, detail);
	osf_report("OSF_GO=1, but this Go program's sockets stay on kernel TCP: %s", detail);
	osf_go_table = 1;
}

int osf_go_jump(uintptr_t addr, const void *to)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t lo = addr & ~(uintptr_t)(pg - 1);
	size_t len = (addr + OSF_GO_JUMP_LEN - lo + (size_t)pg - 1) & ~((size_t)pg - 1);
	unsigned char j[OSF_GO_JUMP_LEN] = {0x49, 0xbb};
	uint64_t t = (uint64_t)(uintptr_t)to;

	memcpy(j + 2, &t, 8);
	j[10] = 0x41, j[11] = 0xff, j[12] = 0xe3;
	if (mprotect((void *)lo, len, PROT_READ | PROT_WRITE) < 0)
		return -1;
	memcpy((void *)addr, j, OSF_GO_JUMP_LEN);
	__builtin___clear_cache((char *)addr, (char *)addr + OSF_GO_JUMP_LEN);
	return mprotect((void *)lo, len, PROT_READ | PROT_EXEC);
}

void osf_go_init(void)
{
	struct image im = {0};
	struct exe x = {0};
	struct stat st;
	const char *on = osf_env("OSF_GO");
	uintptr_t vfork;
	const struct {
		const char *p;
		long n;
	} *ver;
	int fd;
	void *map;

	dl_iterate_phdr(first_object, &x);
	if (!x.go)
		return;
	if (!on || strcmp(on, "1") != 0) {
		osf_fdt_set_go(OSF_R_GO_OFF, "");
		return;
	}
	im.bias = x.bias;
	fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	map = MAP_FAILED;
	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(Elf64_Ehdr))
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (fd >= 0)
		REAL(close)(fd);
	if (map == MAP_FAILED) {
		refuse(OSF_R_GO_UNKNOWN, "%s", "cannot read /proc/self/exe");
		return;
	}
	im.p = map;
	im.len = (size_t)st.st_size;
	if (scan(&im) < 0) {
		refuse(OSF_R_GO_UNKNOWN, "%s", "cannot read the executable's ELF headers");
		goto out;
	}
	if (!im.symtab) {
		refuse(OSF_R_GO_STRIPPED, "%s", "no symbol table");
		goto out;
	}
	vfork = im.sym[SYM_VFORK_ABI0] ? im.sym[SYM_VFORK_ABI0] : im.sym[SYM_VFORK];
	for (int j = 0; j < SYM_STUBS; j++) /* the stubs are the static path's */
		if (!im.sym[j] && j != SYM_VFORK && j != SYM_VFORK_ABI0) {
			refuse(OSF_R_GO_UNKNOWN, "no symbol %s", sym_names[j]);
			goto out;
		}
	if (!vfork) {
		refuse(OSF_R_GO_UNKNOWN, "no symbol %s", sym_names[SYM_VFORK]);
		goto out;
	}
	ver = (const void *)(im.bias + im.sym[SYM_VERSION]);
	if (ver->n < 6 || ver->n > 64 || memcmp(ver->p, "go1.26", 6) != 0 ||
	    (ver->n > 6 && ver->p[6] != '.' && ver->p[6] != '-' && ver->p[6] != ' ')) {
		char v[80];
		snprintf(v, sizeof(v), "%.*s", ver->n > 0 && ver->n <= 64 ? (int)ver->n : 0, ver->p);
		refuse(OSF_R_GO_UNKNOWN, "Go version %s, not go1.26", v);
		goto out;
	}
	if (memcmp((const void *)(im.bias + im.sym[SYM_SYSCALL6]), syscall6_code,
		   sizeof(syscall6_code)) != 0) {
		refuse(OSF_R_GO_UNKNOWN, "unexpected code in %s", sym_names[SYM_SYSCALL6]);
		goto out;
	}
	if (memcmp((const void *)(im.bias + vfork), vfork_code, sizeof(vfork_code)) != 0) {
		refuse(OSF_R_GO_UNKNOWN, "unexpected code in %s", sym_names[SYM_VFORK]);
		goto out;
	}
	if (im.size[SYM_ASMCGOCALL] < 72 ||
	    go_runtime((const unsigned char *)(im.bias + im.sym[SYM_ASMCGOCALL])) < 0) {
		refuse(OSF_R_GO_UNKNOWN, "unexpected code in %s", sym_names[SYM_ASMCGOCALL]);
		goto out;
	}
	osf_go_mark(osf_go_hooked);
	snprintf(osf_go_preload, sizeof(osf_go_preload), "LD_PRELOAD=%s", osf.lib_path);
	{
		const char *e = osf.env;
		int k = 0;
		for (; e < osf.env + osf.env_user_len && k < GO_ENVADD; e += strlen(e) + 1)
			osf_go_envadd[k++] = (char *)e;
	}
	osf_go_envbuf = mmap(NULL, GO_ENVMAX * sizeof(char *), PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (osf_go_envbuf == MAP_FAILED)
		osf_go_envbuf = NULL; /* the child is not prepared (osf_go_vfork) */
	/* The child's copy first: once Syscall6 jumps, os/exec must mark. */
	if (osf_go_jump(im.bias + vfork, osf_go_vfork) < 0 ||
	    osf_go_jump(im.bias + im.sym[SYM_SYSCALL6], osf_go_syscall6) < 0) {
		refuse(OSF_R_GO_UNKNOWN, "%s", "cannot write the program's code (mprotect)");
		goto out;
	}
	{
		char v[80];
		snprintf(v, sizeof(v), "%.*s", (int)ver->n, ver->p);
		osf_fdt_set_go(OSF_R_NONE, v);
		osf_go_table = 1;
	}
out:
	munmap(map, im.len);
}
