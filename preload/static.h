/* static.h: what the parts of the static path (osfrun --static) share:
 * static.c (the entry, the SIGSYS handler and its emulation, carriers),
 * static_load.c (the program's image and initial stack), static_site.c
 * (rewritten call sites) and static_go.c (Go's Syscall6 patched to call
 * the hooks without a trap). */
#ifndef OSF_STATIC_H
#define OSF_STATIC_H

#include <elf.h>
#include <stddef.h>
#include <sys/syscall.h>

#define STATIC_PIE_BASE 0x10000000UL  /* below any PIE or library */
#define STATIC_BRK_MAX (1UL << 30)     /* the program's break region */
#define STATIC_STACK (8UL << 20)       /* the program's initial stack */
#define STATIC_TOP (1UL << 47)         /* end of user space */
#define STUB_SIZE 64
#define STUB_SLOTS 1024
#define STUB_AREA (STUB_SIZE * STUB_SLOTS)

/* The path's state, written by osf_static_exec before the program runs
 * and by the handler after. */
struct static_state {
	int fsgsbase;
	unsigned long text_end;  /* the allowed range's start */
	unsigned long brk_lo, brk_cur, brk_top; /* [brk_lo, brk_cur) writable */
	struct kact {
		unsigned long handler, flags, restorer, mask;
	} sigsys; /* the program's SIGSYS action: recorded, never installed */
	unsigned char hooked[OSF_GO_NSYS];
	int warned_threads;
	/* The rewritten call sites' stubs (static_site.c): STUB_SLOTS slots
	 * of STUB_SIZE bytes in a mapping just below the program, inside the
	 * dispatched range (a stub's own syscall traps); the program's code
	 * range [text_lo, text_end). */
	unsigned char *stubs;
	int nstubs;
	unsigned long text_lo;
	unsigned long refused[64]; /* sites found unsafe to rewrite */
	int nrefused;
	unsigned long sites[STUB_SLOTS]; /* the site of each stub */
	int threads;                     /* carriers made (sys_thread) */
	int go;                          /* a Go program: no site is rewritten */
};
extern struct static_state static_st;

/* The program's executable (static_load.c). */
struct image {
	Elf64_Ehdr eh;
	Elf64_Phdr ph[64];
	unsigned long bias, lo, hi, phdr;
};
/* Each returns NULL or why the program cannot run here; read_image ""
 * for a dynamically linked program. */
const char *osf_static_read_image(int fd, struct image *im);
const char *osf_static_map_image(int fd, struct image *im);
const char *osf_static_build_stack(const struct image *im, const char *path, int argc,
				   char **argv, char **envp, unsigned long *spp);
int osf_static_go_image(const struct image *im);
int osf_static_below_text(const struct image *im);
__attribute__((noreturn)) void osf_static_start(unsigned long sp, unsigned long entry);

/* static_site.c: osf_static_sites_map maps the stubs' area below the
 * program's code at lo (one executable segment: nx 1); osf_static_rewrite
 * makes the site of a trapped call that ended at ret jump to a stub when
 * create and its bytes allow it, and returns where the call resumes. */
void osf_static_sites_map(unsigned long lo, int nx);
unsigned long osf_static_rewrite(unsigned long ret, int create);
/* osf_static_gate makes the call in RAX and the argument registers
 * through osf_static_fast (a number osf_static_fastnr serves) and returns
 * to the address at the top of the stack, 128 bytes below which it is. */
void osf_static_gate(void);

/* One per program thread, in its carrier's TLS (static.c): what a hook
 * call from that thread needs before it can use TLS. The offsets are
 * read by static_go.c's assembly (STATIC_THR_* below). */
struct static_thr {
	unsigned long carrier_fs; /* the carrier's FS: the C library's TLS */
	unsigned long stack;      /* top of the stack osf's code runs on */
	unsigned long prog_fs;    /* the program's FS while a call runs */
	long n;                   /* a Go call: the number */
	long a[6];
	unsigned char busy;     /* a Go call is under way (one at a time) */
	unsigned char restart;  /* a Go call: run it again (static_go.c) */
	long r;                 /* a Go call's result, or -errno */
	unsigned long deferred; /* signals static_sig.c deferred meanwhile */
	unsigned long unblock;  /* what the Go trampoline unblocks */
	unsigned long ss_sp, ss_size; /* the program's alternate signal stack */
};
#define STATIC_THR_CARRIER 0
#define STATIC_THR_STACK 8
#define STATIC_THR_PROGFS 16
#define STATIC_THR_N 24
#define STATIC_THR_A 32
#define STATIC_THR_BUSY 80
#define STATIC_THR_RESTART 81
#define STATIC_THR_R 88
#define STATIC_THR_DEFERRED 96
#define STATIC_THR_UNBLOCK 104
#define STATIC_THR_SS_SP 112
#define STATIC_THR_SS_SIZE 120
_Static_assert(offsetof(struct static_thr, n) == STATIC_THR_N, "static_thr layout");
_Static_assert(offsetof(struct static_thr, a) == STATIC_THR_A, "static_thr layout");
_Static_assert(offsetof(struct static_thr, busy) == STATIC_THR_BUSY, "static_thr layout");
_Static_assert(offsetof(struct static_thr, restart) == STATIC_THR_RESTART, "static_thr layout");
_Static_assert(offsetof(struct static_thr, r) == STATIC_THR_R, "static_thr layout");
_Static_assert(offsetof(struct static_thr, deferred) == STATIC_THR_DEFERRED, "static_thr layout");
_Static_assert(offsetof(struct static_thr, unblock) == STATIC_THR_UNBLOCK, "static_thr layout");
_Static_assert(offsetof(struct static_thr, ss_sp) == STATIC_THR_SS_SP, "static_thr layout");
_Static_assert(offsetof(struct static_thr, ss_size) == STATIC_THR_SS_SIZE, "static_thr layout");

/* The program's FS -> its thread's static_thr (open addressing on
 * (fs >> 6) % STATIC_FSMAP; a key is written after its value, with
 * release, and never removed). */
#define STATIC_FSMAP 4096
extern unsigned long osf_static_fsprog[STATIC_FSMAP];
extern struct static_thr *osf_static_fsthr[STATIC_FSMAP];

/* The numbers a hook serves without a trap (the hooked ones but execve,
 * and poll and select), and those static.c emulates (a patched Go
 * Syscall6 makes them trap). */
extern unsigned char osf_static_fastnr[512];
extern unsigned char osf_static_trapnr[512];
/* Set in the child of a vfork-like clone (a copy: no osf code runs in
 * it, its calls go to the kernel). */
extern unsigned char osf_static_vchild;

/* osf_static_osf_running tells a signal handler, before it touches TLS,
 * whether osf's code runs on this thread (FS is its carrier's while the
 * program has one of its own): the thread's record then, else NULL
 * (static.c). */
struct static_thr *osf_static_osf_running(void);

/* static_sig.c: the program's signal actions. osf_static_sig_init wraps
 * SIGSEGV and SIGBUS (a probe's fault in osf's code becomes EFAULT);
 * the others emulate rt_sigaction, rt_sigprocmask and sigaltstack in the
 * SIGSYS handler (uc its frame); osf_static_unblock lets the signals
 * deferred while a hook ran (t->deferred) reach the program's handlers,
 * on the program's FS. */
int osf_static_sig_init(void);
long osf_static_sigaction(const long *a);
long osf_static_sigprocmask(void *uc, const long *a);
long osf_static_sigaltstack(void *uc, const long *a);
unsigned long osf_static_unblock(struct static_thr *t);

/* static_restarts says whether the kernel may restart call n after an
 * SA_RESTART handler: never a poll, select or epoll_wait. */
static inline int static_restarts(long n)
{
	return n != SYS_poll && n != SYS_ppoll && n != SYS_select && n != SYS_pselect6 &&
	       n != SYS_epoll_wait && n != SYS_epoll_pwait && n != SYS_epoll_pwait2;
}

/* osf_static_call emulates system call n with a[0..5] on the carrier's
 * FS and returns the result or -errno. */
long osf_static_call(long n, const long *a);

/* osf_static_go_patch makes Go 1.26's Syscall6, in the Go executable open
 * at fd and mapped at bias, jump to static_go.c's trampoline; trap is a
 * `syscall; jmp *%r12` in the dispatched range (below the program) that
 * the trampoline runs for numbers static.c emulates (NULL: Syscall6 is
 * left as it is). It moves the runtime's futex, usleep and osyield stubs
 * above the dispatched range either way. Returns 0 when Syscall6 is
 * patched, -1 when not (every call then traps). */
int osf_static_go_patch(int fd, unsigned long bias, unsigned char *trap);

#endif
