/* osfload: runs a statically linked program under osf (osfrun --static).
 *
 * usage: LD_PRELOAD=libosf.so osfload PROGRAM [ARGS...]
 *
 * osfload is dynamically linked, so libosf.so loads into it as into any
 * program; libosf.so's osf_static_exec then maps PROGRAM into this process
 * and runs it with its system calls dispatched to osf's hooks
 * (preload/static.c). Where that cannot be done (libosf.so not preloaded,
 * no Syscall User Dispatch, not a static x86-64 executable) osfload says
 * why on standard error and execs PROGRAM itself: it runs on kernel TCP.
 * A dynamically linked PROGRAM is exec'd without a word: libosf.so loads
 * into it as usual. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

typedef int static_exec_fn(const char *, int, char **, char **, const char **);

int main(int argc, char **argv, char **envp)
{
	static_exec_fn *run;
	const char *why = "libosf.so is not preloaded";

	if (argc < 2) {
		fprintf(stderr, "usage: osfload PROGRAM [ARGS...]\n");
		return 2;
	}
	run = (static_exec_fn *)dlsym(RTLD_DEFAULT, "osf_static_exec");
	if (run)
		run(argv[1], argc - 1, argv + 1, envp, &why);
	if (*why) /* "": dynamically linked, libosf.so preloaded as usual */
		fprintf(stderr, "osf: static: %s: %s; it runs on kernel TCP\n", argv[1], why);
	execve(argv[1], argv + 1, envp);
	fprintf(stderr, "osfload: exec %s: %s\n", argv[1], strerror(errno));
	return 127;
}
