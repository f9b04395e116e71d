/* segmaps.h: the osf segments a test program maps or holds. */
#ifndef OSF_TESTS_SEGMAPS_H
#define OSF_TESTS_SEGMAPS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* is_seg_link reports whether l, a /proc link or maps line, names an osf
 * segment's memfd: osf-seg, or a region of slots (OSF_SHM_POOL=1). */
static inline int is_seg_link(const char *l)
{
	return strstr(l, "memfd:osf-seg") || strstr(l, "memfd:osf-region");
}

/* seg_mappings counts the mappings of memfds named osf-seg in
 * /proc/self/maps; it exits 2 when the file cannot be read. */
static inline int seg_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f) {
		perror("maps");
		exit(2);
	}
	while (fgets(line, sizeof(line), f))
		if (is_seg_link(line))
			n++;
	fclose(f);
	return n;
}

/* memfd_fd returns the fd of this process that holds the memfd named name
 * (the last one found when several do), -1 when none does. */
static inline int memfd_fd(const char *name)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char want[128];
	int fd = -1;

	snprintf(want, sizeof(want), "memfd:%s ", name);
	while (d && (de = readdir(d)) != NULL) {
		char p[300], l[256];
		ssize_t k;
		snprintf(p, sizeof(p), "/proc/self/fd/%s", de->d_name);
		k = readlink(p, l, sizeof(l) - 1);
		if (k > 0 && (l[k] = 0, strstr(l, want)) != NULL)
			fd = atoi(de->d_name);
	}
	if (d)
		closedir(d);
	return fd;
}

/* seg_fds calls each(st, arg) for every fd of this process that holds a
 * memfd named osf-seg (the same memfd may show under several fds); it
 * returns how many, or -1 when /proc/self/fd cannot be read. */
static inline int seg_fds(void (*each)(const struct stat *st, void *arg),
			  void *arg)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n_segs = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char p[300], l[256];
		struct stat st;
		ssize_t n;
		snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
		n = readlink(p, l, sizeof(l) - 1);
		if (n <= 0)
			continue;
		l[n] = 0;
		if (is_seg_link(l) && stat(p, &st) == 0) {
			n_segs++;
			if (each)
				each(&st, arg);
		}
	}
	closedir(d);
	return n_segs;
}

#endif
