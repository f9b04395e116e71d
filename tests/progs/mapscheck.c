//go:build osf_make

/* mapscheck: prints "libosf: loaded" or "libosf: not loaded" according to
 * its /proc/self/maps, and its real and effective user ids; exits 0. The
 * setuid test runs it as a setuid-root copy with LD_PRELOAD set. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char line[4096];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f) {
		perror("/proc/self/maps");
		return 2;
	}
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, "/libosf.so") != NULL;
	fclose(f);
	printf("libosf: %s\n", found ? "loaded" : "not loaded");
	printf("uid %d euid %d\n", (int)getuid(), (int)geteuid());
	return 0;
}
