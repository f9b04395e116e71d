//go:build osf_make

/* static_load.c: a statically linked program's image and initial stack
 * (osfrun --static, static.c): its ELF headers read, its PT_LOAD segments
 * mapped below every other piece of code in the process (a static PIE at
 * STATIC_PIE_BASE) with the break reserved after them, and argv, envp
 * and the auxiliary vector (AT_PHDR, AT_ENTRY, AT_BASE 0, AT_EXECFN the
 * program's) on a fresh stack. */
#include "osf.h"
#include "static.h"

#include <elf.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

const char *osf_static_read_image(int fd, struct image *im)
{
	Elf64_Ehdr *e = &im->eh;
	size_t phsz;

	if (pread(fd, e, sizeof(*e), 0) != (ssize_t)sizeof(*e) ||
	    memcmp(e->e_ident, ELFMAG, SELFMAG) != 0)
		return "not an ELF file";
	if (e->e_ident[EI_CLASS] != ELFCLASS64 || e->e_machine != EM_X86_64)
		return "not an x86-64 executable";
	if (e->e_type != ET_EXEC && e->e_type != ET_DYN)
		return "not an executable";
	if (e->e_phentsize != sizeof(Elf64_Phdr) || e->e_phnum == 0 ||
	    e->e_phnum > sizeof(im->ph) / sizeof(im->ph[0]))
		return "unexpected program headers";
	phsz = (size_t)e->e_phnum * sizeof(Elf64_Phdr);
	if (pread(fd, im->ph, phsz, (off_t)e->e_phoff) != (ssize_t)phsz)
		return "cannot read the program headers";
	im->lo = ~0UL;
	im->hi = 0;
	for (int i = 0; i < e->e_phnum; i++) {
		const Elf64_Phdr *p = &im->ph[i];
		if (p->p_type == PT_INTERP)
			return "";
		if (p->p_type == PT_PHDR)
			im->phdr = p->p_vaddr;
		if (p->p_type != PT_LOAD)
			continue;
		if (p->p_memsz < p->p_filesz || p->p_vaddr + p->p_memsz < p->p_vaddr ||
		    p->p_vaddr + p->p_memsz >= STATIC_TOP / 2 || p->p_align < 4096 ||
		    (p->p_vaddr - p->p_offset) % 4096)
			return "unexpected PT_LOAD segment";
		if (p->p_vaddr < im->lo)
			im->lo = p->p_vaddr & ~4095UL;
		if (p->p_vaddr + p->p_memsz > im->hi)
			im->hi = p->p_vaddr + p->p_memsz;
		if (!im->phdr && p->p_offset == 0)
			im->phdr = p->p_vaddr + e->e_phoff;
	}
	if (im->hi == 0 || !im->phdr)
		return "no loadable segment";
	im->bias = e->e_type == ET_DYN ? STATIC_PIE_BASE - im->lo : 0;
	return NULL;
}

static int prot(unsigned f)
{
	return (f & PF_R ? PROT_READ : 0) | (f & PF_W ? PROT_WRITE : 0) | (f & PF_X ? PROT_EXEC : 0);
}

const char *osf_static_map_image(int fd, struct image *im)
{
	unsigned long lo = im->lo + im->bias, hi = ((im->hi + im->bias) + 4095) & ~4095UL;
	int nx = 0;

	if (mmap((void *)lo, hi - lo, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
		 -1, 0) != (void *)lo)
		return "its addresses are taken in this process";
	for (int i = 0; i < im->eh.e_phnum; i++) {
		const Elf64_Phdr *p = &im->ph[i];
		unsigned long va = p->p_vaddr + im->bias, pa = va & ~4095UL;
		unsigned long fend = va + p->p_filesz, mend = ((va + p->p_memsz) + 4095) & ~4095UL;
		unsigned long fpage = (fend + 4095) & ~4095UL;
		int pr = prot(p->p_flags);

		if (p->p_type != PT_LOAD)
			continue;
		if (p->p_filesz &&
		    mmap((void *)pa, fend - pa, pr | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd,
			 (off_t)(p->p_offset - (va - pa))) != (void *)pa)
			return "cannot map a segment";
		if (p->p_memsz > p->p_filesz) {
			if (p->p_filesz && fpage > fend)
				memset((void *)fend, 0, fpage - fend);
			if (mend > fpage &&
			    mmap((void *)fpage, mend - fpage, pr, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
				 -1, 0) != (void *)fpage)
				return "cannot map a segment's zero pages";
		}
		if (mprotect((void *)pa, mend - pa, pr) < 0)
			return "cannot protect a segment";
		if ((p->p_flags & PF_X) && mend > static_st.text_end)
			static_st.text_end = mend;
		if ((p->p_flags & PF_X) && (!static_st.text_lo || pa < static_st.text_lo))
			static_st.text_lo = pa;
		nx += (p->p_flags & PF_X) != 0;
	}
	osf_static_sites_map(lo, nx);
	static_st.brk_lo = static_st.brk_cur = hi;
	static_st.brk_top = hi;
	if (mmap((void *)hi, STATIC_BRK_MAX, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0) == (void *)hi)
		static_st.brk_top = hi + STATIC_BRK_MAX;
	return NULL;
}

/* go_image says whether the mapped image carries Go's build-id note. */
int osf_static_go_image(const struct image *im)
{
	for (int i = 0; i < im->eh.e_phnum; i++)
		if (im->ph[i].p_type == PT_NOTE &&
		    osf_go_note((const unsigned char *)(im->ph[i].p_vaddr + im->bias), im->ph[i].p_filesz))
			return 1;
	return 0;
}

/* below_text says whether any executable mapping other than the program's
 * and its stubs' lies below its code's end (it would be dispatched too). */
int osf_static_below_text(const struct image *im)
{
	char buf[512];
	FILE *f = fopen("/proc/self/maps", "re");
	unsigned long own = static_st.stubs ? (unsigned long)static_st.stubs : im->lo + im->bias;
	int bad = 0;

	if (!f)
		return 1;
	while (!bad && fgets(buf, sizeof(buf), f)) {
		unsigned long a, b;
		char perm[5];
		if (sscanf(buf, "%lx-%lx %4s", &a, &b, perm) == 3 && perm[2] == 'x' &&
		    a < static_st.text_end && (a < own || b > static_st.text_end))
			bad = 1;
	}
	fclose(f);
	return bad;
}

/* start jumps to the program's entry with SP at argc, RDX 0 (no
 * rtld_fini) and the other registers cleared. */
__attribute__((noreturn)) void osf_static_start(unsigned long sp, unsigned long entry)
{
	__asm__ volatile("movq %0, %%rsp\n"
			 "xorl %%edx, %%edx\n"
			 "xorl %%ebp, %%ebp\n"
			 "jmp *%1\n"
			 :
			 : "r"(sp), "r"(entry)
			 : "memory");
	__builtin_unreachable();
}

const char *osf_static_build_stack(const struct image *im, const char *path, int argc, char **argv,
			       char **envp, unsigned long *spp)
{
	char **e = envp;
	Elf64_auxv_t *aux;
	size_t envc, auxc = 0, words;
	unsigned long *sp, top;
	void *stk = mmap(NULL, STATIC_STACK, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);

	if (stk == MAP_FAILED)
		return "cannot map a stack";
	while (*e)
		e++;
	envc = (size_t)(e - envp);
	aux = (Elf64_auxv_t *)(e + 1);
	while (aux[auxc].a_type != AT_NULL)
		auxc++;
	words = 1 + (size_t)argc + 1 + envc + 1 + 2 * (auxc + 1);
	top = (unsigned long)stk + STATIC_STACK - 256;
	sp = (unsigned long *)((top - words * 8) & ~15UL);
	{
		unsigned long *w = sp;
		*w++ = (unsigned long)argc;
		for (int i = 0; i < argc; i++)
			*w++ = (unsigned long)argv[i];
		*w++ = 0;
		for (size_t i = 0; i < envc; i++)
			*w++ = (unsigned long)envp[i];
		*w++ = 0;
		for (size_t i = 0; i <= auxc; i++) {
			unsigned long t = aux[i].a_type, v = aux[i].a_un.a_val;
			switch (t) {
			case AT_PHDR:
				v = im->phdr + im->bias;
				break;
			case AT_PHNUM:
				v = im->eh.e_phnum;
				break;
			case AT_PHENT:
				v = sizeof(Elf64_Phdr);
				break;
			case AT_ENTRY:
				v = im->eh.e_entry + im->bias;
				break;
			case AT_BASE:
				v = 0;
				break;
			case AT_EXECFN:
				v = (unsigned long)path;
				break;
			}
			*w++ = t;
			*w++ = v;
		}
	}
	*spp = (unsigned long)sp;
	return NULL;
}
