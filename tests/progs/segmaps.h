/* segmaps.h: how many osf segments a test program maps. */
#ifndef OSF_TESTS_SEGMAPS_H
#define OSF_TESTS_SEGMAPS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* seg_mappings counts the mappings of memfds named osf-seg in
 * /proc/self/maps; it exits 2 when the file cannot be read. */
static int seg_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f) {
		perror("maps");
		exit(2);
	}
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "memfd:osf-seg"))
			n++;
	fclose(f);
	return n;
}

#endif
