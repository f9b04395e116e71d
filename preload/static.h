/* static.h: what the parts of the static path (osfrun --static) share:
 * static.c (loading, the SIGSYS handler and its emulation, carriers) and
 * static_go.c (Go's Syscall6 patched to call the hooks without a trap). */
#ifndef OSF_STATIC_H
#define OSF_STATIC_H

#include <stddef.h>

/* One per program thread, in its carrier's TLS (static.c): what a hook
 * call from that thread needs before it can use TLS. The offsets are
 * read by static_go.c's assembly (STATIC_THR_* below). */
struct static_thr {
	unsigned long carrier_fs; /* the carrier's FS: the C library's TLS */
	unsigned long stack;      /* top of the stack osf's code runs on */
	unsigned long prog_fs;    /* the program's FS while a call runs */
	unsigned long mask;       /* the program's signal mask meanwhile */
	long n;                   /* a Go call: the number, then the result */
	long a[6];
	unsigned char busy; /* a Go call is under way (one at a time) */
};
#define STATIC_THR_CARRIER 0
#define STATIC_THR_STACK 8
#define STATIC_THR_PROGFS 16
#define STATIC_THR_MASK 24
#define STATIC_THR_N 32
#define STATIC_THR_A 40
#define STATIC_THR_BUSY 88
_Static_assert(offsetof(struct static_thr, a) == STATIC_THR_A, "static_thr layout");
_Static_assert(offsetof(struct static_thr, busy) == STATIC_THR_BUSY, "static_thr layout");

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

/* osf_static_call emulates system call n with a[0..5] on the carrier's
 * FS and returns the result or -errno. */
long osf_static_call(long n, const long *a);

/* osf_static_go_patch makes Go 1.26's Syscall6, in the Go executable open
 * at fd and mapped at bias, jump to static_go.c's trampoline; trap is a
 * `syscall; jmp *%r12` in the dispatched range (below the program) that
 * the trampoline runs for numbers static.c emulates. Returns 0 when
 * patched, -1 when Syscall6 is not found as expected (every call then
 * traps). */
int osf_static_go_patch(int fd, unsigned long bias, unsigned char *trap);

#endif
