//go:build osf_make

/* fault.c: touching a program's buffers without dying of a bad pointer.
 *
 * The kernel copies a socket call's data with instructions listed in its
 * exception table: a bad user pointer (read(fd, NULL, 3), a buffer that
 * runs into a PROT_NONE page) makes the call fail with EFAULT instead of
 * killing the program. osf copies between the program's buffers and the
 * rings in user space, so it does the same thing the kernel's way: before
 * copying, it probes every page of the range it is about to touch with one
 * of the few instructions below, and the SIGSEGV/SIGBUS handler
 * (signals.c's trampoline, armed once a connection is offloaded) resumes
 * a faulting probe at its fix-up label instead of delivering the signal.
 * The copy itself stays glibc's memcpy, so the normal path costs one load
 * (a load and a store when writing) per page touched and nothing else.
 *
 * A buffer another thread unmaps between the probe and the copy is not
 * covered (the kernel would return EFAULT; osf's copy faults): that needs
 * a program racing munmap against its own recv. */
#include "osf.h"

#include <string.h>
#include <ucontext.h>

#if defined(__x86_64__)
/* osf_probe_rd(p, n) loads one byte of each page of [p, p+n); 0, or -1
 * when one faulted. osf_probe_wr does the same with a load and a store of
 * the same byte (a write probe: a read-only page faults too). The byte is
 * written back unchanged, and the caller is about to overwrite it.
 * PROBE_NEXT_PAGE is both probes' step to the next page (label 1: the
 * probe, 2: done, 0 in eax), up to the last byte in %rsi; an address that
 * wraps ends the walk. */
#define PROBE_NEXT_PAGE                                                        \
	"	and $-4096, %rdi\n"                                          \
	"	add $4096, %rdi\n"                                           \
	"	jc 2f\n"                                                     \
	"	cmp %rsi, %rdi\n"                                            \
	"	jbe 1b\n"                                                    \
	"2:\n"                                                               \
	"	xor %eax, %eax\n"                                            \
	"	ret\n"
__asm__(".text\n"
	".globl osf_probe_rd\n.hidden osf_probe_rd\n"
	".type osf_probe_rd,@function\n"
	"osf_probe_rd:\n"
	"	test %rsi, %rsi\n"
	"	jz 2f\n"
	"	lea -1(%rdi,%rsi), %rsi\n" /* the last byte */
	"1:\n"
	".globl osf_probe_rd_insn\n.hidden osf_probe_rd_insn\n"
	"osf_probe_rd_insn:\n"
	"	movb (%rdi), %al\n"
	PROBE_NEXT_PAGE
	".size osf_probe_rd, .-osf_probe_rd\n"
	".globl osf_probe_wr\n.hidden osf_probe_wr\n"
	".type osf_probe_wr,@function\n"
	"osf_probe_wr:\n"
	"	test %rsi, %rsi\n"
	"	jz 2f\n"
	"	lea -1(%rdi,%rsi), %rsi\n"
	"1:\n"
	".globl osf_probe_wr_insn\n.hidden osf_probe_wr_insn\n"
	"osf_probe_wr_insn:\n"
	"	movb (%rdi), %al\n"
	".globl osf_probe_wr_insn2\n.hidden osf_probe_wr_insn2\n"
	"osf_probe_wr_insn2:\n"
	"	movb %al, (%rdi)\n"
	PROBE_NEXT_PAGE
	".size osf_probe_wr, .-osf_probe_wr\n"
	".globl osf_probe_fixup\n.hidden osf_probe_fixup\n"
	".type osf_probe_fixup,@function\n"
	"osf_probe_fixup:\n"
	"	mov $-1, %eax\n"
	"	ret\n"
	".size osf_probe_fixup, .-osf_probe_fixup\n");

extern const char osf_probe_rd_insn[], osf_probe_wr_insn[],
	osf_probe_wr_insn2[], osf_probe_fixup[];

int osf_fault_fixup(void *uc)
{
	greg_t *rip = &((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];

	if (*rip != (greg_t)(uintptr_t)osf_probe_rd_insn &&
	    *rip != (greg_t)(uintptr_t)osf_probe_wr_insn &&
	    *rip != (greg_t)(uintptr_t)osf_probe_wr_insn2)
		return 0;
	*rip = (greg_t)(uintptr_t)osf_probe_fixup; /* returns -1 */
	return 1;
}
#else
/* Elsewhere no probe (a bad buffer faults as before). */
int osf_probe_rd(const void *p, size_t n)
{
	(void)p;
	(void)n;
	return 0;
}

int osf_probe_wr(void *p, size_t n)
{
	(void)p;
	(void)n;
	return 0;
}

int osf_fault_fixup(void *uc)
{
	(void)uc;
	return 0;
}
#endif

int osf_probe_iov(const struct iovec *iov, int cnt, int i, size_t off,
		  size_t n, int write)
{
	for (; n > 0 && i < cnt; i++, off = 0) {
		size_t k = iov[i].iov_len - off;
		char *p = (char *)iov[i].iov_base + off;
		if (k > n)
			k = n;
		if ((write ? osf_probe_wr(p, k) : osf_probe_rd(p, k)) < 0)
			return -1;
		n -= k;
	}
	return 0;
}

int osf_addr_out(void *sa, socklen_t *len, const void *p, socklen_t pl)
{
	socklen_t n;

	osf_fault_arm();
	if (!len || osf_probe_wr(len, sizeof(*len)) < 0)
		return OSF_FAIL(EFAULT);
	if ((int)*len < 0)
		return OSF_FAIL(EINVAL);
	n = *len < pl ? *len : pl;
	if (n && (!sa || osf_probe_wr(sa, n) < 0))
		return OSF_FAIL(EFAULT);
	if (n)
		memcpy(sa, p, n);
	*len = pl;
	return 0;
}
