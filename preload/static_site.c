//go:build osf_make

/* static_site.c: rewritten system call sites of a statically linked
 * program (osfrun --static, static.c).
 *
 * A trap costs a signal (docs/STATIC.md: about 1.3 us here). After a
 * trapped call whose number osf_static_fastnr serves, the site is
 * rewritten when its bytes are glibc's `syscall; cmp $imm32, %rax` (8
 * bytes) and no branch within 4 KiB lands inside them: they become `jmp
 * rel32` to a stub of their own,
 *
 *	lea -128(%rsp), %rsp		past the red zone
 *	lea 1f(%rip), %rcx
 *	movabs $osf_static_fast, %r11
 *	jmp *%r11			R11 0: served, 1: not ours
 *  1:	lea 128(%rsp), %rsp
 *	test %r11, %r11
 *	jz 2f
 *	syscall				traps: the stub is below the program's code
 *  2:	cmp $imm32, %rax		the instruction the jmp displaced
 *	jmp site+8
 *
 * osf_static_fast keeps every register the kernel keeps across a system
 * call but RCX and R11 (which `syscall` clobbers too), and XMM0-15, and
 * calls osf_static_fast_c, which switches FS, calls the hook and switches
 * back (a signal meanwhile waits for that: static_sig.c).
 *
 * A trapped call of a site that is not rewritten leaves the SIGSYS
 * handler for osf_static_gate, which calls osf_static_fast the same way,
 * outside the handler (where signals reach the program), and resumes
 * where the handler left below the red zone. */
#include "osf.h"
#include "static.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static pthread_mutex_t rewrite_lock = PTHREAD_MUTEX_INITIALIZER;

long osf_static_fast_c(long n, const long *a);
void osf_static_fast(void);
__asm__(".text\n"
	".globl osf_static_fast\n"
	".hidden osf_static_fast\n"
	".type osf_static_fast,@function\n"
	"osf_static_fast:\n"
	"	cmpq $512, %rax\n"
	"	jae 9f\n"
	"	leaq osf_static_fastnr(%rip), %r11\n"
	"	cmpb $0, (%r11,%rax)\n"
	"	je 9f\n"
	"	pushq %rcx\n"
	"	pushq %rbp\n"
	"	movq %rsp, %rbp\n"
	"	pushq %r9\n"
	"	pushq %r8\n"
	"	pushq %r10\n"
	"	pushq %rdx\n"
	"	pushq %rsi\n"
	"	pushq %rdi\n"
	"	movq %rsp, %rsi\n"
	"	subq $256, %rsp\n"
	"	andq $-16, %rsp\n"
	"	movups %xmm0, 0(%rsp)\n"
	"	movups %xmm1, 16(%rsp)\n"
	"	movups %xmm2, 32(%rsp)\n"
	"	movups %xmm3, 48(%rsp)\n"
	"	movups %xmm4, 64(%rsp)\n"
	"	movups %xmm5, 80(%rsp)\n"
	"	movups %xmm6, 96(%rsp)\n"
	"	movups %xmm7, 112(%rsp)\n"
	"	movups %xmm8, 128(%rsp)\n"
	"	movups %xmm9, 144(%rsp)\n"
	"	movups %xmm10, 160(%rsp)\n"
	"	movups %xmm11, 176(%rsp)\n"
	"	movups %xmm12, 192(%rsp)\n"
	"	movups %xmm13, 208(%rsp)\n"
	"	movups %xmm14, 224(%rsp)\n"
	"	movups %xmm15, 240(%rsp)\n"
	"	cld\n"
	"	movq %rax, %rdi\n"
	"	call osf_static_fast_c\n"
	"	movups 0(%rsp), %xmm0\n"
	"	movups 16(%rsp), %xmm1\n"
	"	movups 32(%rsp), %xmm2\n"
	"	movups 48(%rsp), %xmm3\n"
	"	movups 64(%rsp), %xmm4\n"
	"	movups 80(%rsp), %xmm5\n"
	"	movups 96(%rsp), %xmm6\n"
	"	movups 112(%rsp), %xmm7\n"
	"	movups 128(%rsp), %xmm8\n"
	"	movups 144(%rsp), %xmm9\n"
	"	movups 160(%rsp), %xmm10\n"
	"	movups 176(%rsp), %xmm11\n"
	"	movups 192(%rsp), %xmm12\n"
	"	movups 208(%rsp), %xmm13\n"
	"	movups 224(%rsp), %xmm14\n"
	"	movups 240(%rsp), %xmm15\n"
	"	leaq -48(%rbp), %rsp\n"
	"	popq %rdi\n"
	"	popq %rsi\n"
	"	popq %rdx\n"
	"	popq %r10\n"
	"	popq %r8\n"
	"	popq %r9\n"
	"	popq %rbp\n"
	"	popq %rcx\n"
	"	xorl %r11d, %r11d\n"
	"	jmp *%rcx\n"
	"9:\n"
	"	movl $1, %r11d\n"
	"	jmp *%rcx\n");

/* The stack at the gate: 8 bytes, where the call resumes, then the red
 * zone's 128 (static.c dispatch). */
void osf_static_gate(void);
__asm__(".text\n"
	".globl osf_static_gate\n"
	".hidden osf_static_gate\n"
	".type osf_static_gate,@function\n"
	"osf_static_gate:\n"
	"	leaq 1f(%rip), %rcx\n"
	"	jmp osf_static_fast\n" /* a number it serves: back at 1, R11 0 */
	"1:\n"
	"	popq %rcx\n"
	"	leaq 128(%rsp), %rsp\n"
	"	jmp *%rcx\n");

/* branches_into says whether a direct branch within 4 KiB of site (in the
 * program's code) may land on one of its bytes after the first: every
 * byte is read as a possible opcode, so it errs towards yes. */
static int branches_into(unsigned long site, unsigned long len)
{
	unsigned long lo = site > static_st.text_lo + 4096 ? site - 4096 : static_st.text_lo;
	unsigned long hi = site + 4096 < static_st.text_end ? site + 4096 : static_st.text_end;

	for (unsigned long j = lo; j + 6 <= hi; j++) {
		const unsigned char *b = (const unsigned char *)j;
		unsigned long t = 0;
		int32_t d;
		if ((b[0] >= 0x70 && b[0] <= 0x7f) || (b[0] >= 0xe0 && b[0] <= 0xe3) || b[0] == 0xeb) {
			t = j + 2 + (unsigned long)(long)(int8_t)b[1];
		} else if (b[0] == 0xe8 || b[0] == 0xe9) {
			memcpy(&d, b + 1, 4);
			t = j + 5 + (unsigned long)(long)d;
		} else if (b[0] == 0x0f && b[1] >= 0x80 && b[1] <= 0x8f) {
			memcpy(&d, b + 2, 4);
			t = j + 6 + (unsigned long)(long)d;
		}
		if (t > site && t < site + len)
			return 1;
	}
	return 0;
}

/* rewrite makes the site whose syscall ended at ret take a stub from now
 * on, when create and it is safe to, and returns where the trapped call resumes: the
 * stub's displaced cmp when the site is rewritten (now, or by another
 * thread while this one was in the call: ret is then inside the jmp), else
 * ret. Once the program has threads, only a site whose 8 bytes are one
 * aligned word is rewritten (one store: a thread running it sees the old
 * bytes or the new ones, and one that trapped on the old resumes in the
 * stub). */
static unsigned long rewrite_locked(unsigned long ret, int create)
{
	unsigned long site = ret - 2, pg = site & ~4095UL;
	unsigned char *p = (unsigned char *)site, *s, jmp[8] = {0xe9, 0, 0, 0, 0, 0x90, 0x90, 0x90};
	int32_t rel;

	for (int i = 0; i < static_st.nstubs; i++)
		if (static_st.sites[i] == site) /* another thread rewrote it */
			return (unsigned long)(static_st.stubs + (size_t)i * STUB_SIZE + 40);
	if (!create || !static_st.stubs || static_st.nstubs >= STUB_SLOTS || site < static_st.text_lo || site + 8 > static_st.text_end ||
	    p[0] != 0x0f || p[1] != 0x05 || p[2] != 0x48 || p[3] != 0x3d ||
	    (static_st.threads && (site & 7))) /* others may run it: one 8-byte store */
		return ret;
	for (int i = 0; i < static_st.nrefused; i++)
		if (static_st.refused[i] == site)
			return ret;
	if (branches_into(site, 8)) {
		if (static_st.nrefused < (int)(sizeof(static_st.refused) / sizeof(static_st.refused[0])))
			static_st.refused[static_st.nrefused++] = site;
		return ret;
	}
	s = static_st.stubs + (size_t)static_st.nstubs * STUB_SIZE;
	rel = (int32_t)((long)s - (long)(site + 5));
	if ((long)s - (long)(site + 5) != rel)
		return ret;
	memcpy(jmp + 1, &rel, 4);
	/* other threads may be running earlier stubs: the area stays
	 * executable while it is written */
	if (mprotect(static_st.stubs, STUB_AREA, PROT_READ | PROT_WRITE | PROT_EXEC) < 0)
		return ret;
	/* lea -128(%rsp), %rsp; lea 1f(%rip), %rcx (1f: 25 bytes in) */
	memcpy(s, "\x48\x8d\x64\x24\x80\x48\x8d\x0d\x0d\x00\x00\x00", 12);
	s[12] = 0x49, s[13] = 0xbb; /* movabs $osf_static_fast, %r11 */
	{
		uint64_t f = (uint64_t)(uintptr_t)osf_static_fast;
		memcpy(s + 14, &f, 8);
	}
	memcpy(s + 22, "\x41\xff\xe3", 3); /* jmp *%r11 */
	/* 1: lea 128(%rsp), %rsp; test %r11, %r11; jz 2f; syscall */
	memcpy(s + 25, "\x48\x8d\xa4\x24\x80\x00\x00\x00\x4d\x85\xdb\x74\x02\x0f\x05", 15);
	memcpy(s + 40, p + 2, 6); /* 2: cmp $imm32, %rax */
	s[46] = 0xe9;             /* jmp site+8 */
	rel = (int32_t)((long)(site + 8) - (long)(s + 51));
	memcpy(s + 47, &rel, 4);
	if (mprotect(static_st.stubs, STUB_AREA, PROT_READ | PROT_EXEC) < 0 ||
	    mprotect((void *)pg, site + 8 - pg, PROT_READ | PROT_WRITE | PROT_EXEC) < 0)
		return ret;
	static_st.sites[static_st.nstubs++] = site;
	if (!(site & 7)) {
		uint64_t v;
		memcpy(&v, jmp, 8);
		__atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE);
	} else { /* one thread: the jmp's first byte last */
		memcpy(p + 1, jmp + 1, 7);
		__atomic_store_n(p, jmp[0], __ATOMIC_RELEASE);
	}
	__builtin___clear_cache((char *)p, (char *)p + 8);
	mprotect((void *)pg, site + 8 - pg, PROT_READ | PROT_EXEC);
	return (unsigned long)(s + 40);
}

unsigned long osf_static_rewrite(unsigned long ret, int create)
{
	unsigned long r;

	pthread_mutex_lock(&rewrite_lock);
	r = rewrite_locked(ret, create);
	pthread_mutex_unlock(&rewrite_lock);
	return r;
}

void osf_static_sites_map(unsigned long lo, int nx)
{
	/* rewrite scans the code around a site: one executable segment, no
	 * holes */
	if (nx != 1 || lo < STUB_AREA + 65536)
		return;
	static_st.stubs = mmap((void *)(lo - STUB_AREA), STUB_AREA, PROT_READ | PROT_EXEC,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (static_st.stubs != (void *)(lo - STUB_AREA)) {
		if (static_st.stubs != MAP_FAILED)
			munmap(static_st.stubs, STUB_AREA);
		static_st.stubs = NULL; /* every call traps */
	}
}
