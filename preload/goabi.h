/* goabi.h: the end of Go 1.26's amd64 internal/runtime/syscall/linux.Syscall6
 * in assembly, shared by the trampolines that replace it (gosys.c for a
 * dynamically linked Go program, static_go.c for a statically linked one).
 *
 * GO_SYSCALL6_TAIL: at label 1 the arguments move from Go's registers (BX
 * CX DI SI R8 R9, AX the number) to the kernel's and the call is made; at
 * label 2 RAX (the kernel's result) becomes Go's results: AX r1, BX r2
 * (RDX), CX errno, as Syscall6 returns them. */
#ifndef OSF_GOABI_H
#define OSF_GOABI_H

#define GO_SYSCALL6_TAIL                                                       \
	"1:\n"                                                                 \
	"	movq %rsi, %r10\n"                                             \
	"	movq %rdi, %rdx\n"                                             \
	"	movq %rcx, %rsi\n"                                             \
	"	movq %rbx, %rdi\n"                                             \
	"	syscall\n"                                                     \
	"2:\n"                                                                 \
	"	cmpq $-4095, %rax\n"                                           \
	"	jbe 3f\n"                                                      \
	"	negq %rax\n"                                                   \
	"	movq %rax, %rcx\n"                                             \
	"	movq $-1, %rax\n"                                              \
	"	xorl %ebx, %ebx\n"                                             \
	"	ret\n"                                                         \
	"3:\n"                                                                 \
	"	movq %rdx, %rbx\n"                                             \
	"	xorl %ecx, %ecx\n"                                             \
	"	ret\n"

#endif
