/* ptreclaim: do a pool's page tables shrink again when the rings' pages are
 * given back? (docs/D2-PROPOSAL.md, "idle memory after large transfers").
 *
 *   ptreclaim N KIB remove|dontneed|remap
 *
 * One memfd region of N slots, each a 4 KiB head page plus 2 MiB of rings
 * (slots 2 MiB + 4 KiB apart, as separate segments today), mapped once.
 * KIB KiB of each slot's rings are written (a transfer), then given back as a
 * trim would: MADV_REMOVE on the range, or MADV_DONTNEED and a
 * fallocate(PUNCH_HOLE). "remap" lays the region out differently: the N head
 * pages first, densely, then each slot's rings in a 2 MiB-aligned area of their
 * own; the trim is MADV_REMOVE and then a MAP_FIXED map of the whole 2 MiB
 * area over itself (what a free slot's rings could get at an idle trim).
 * Prints RSS, PSS, VmPTE, the mappings and the memfd's allocated pages after
 * each step. */
#include "spike.h"
#include <sys/stat.h>

static void show(const char *when, int m)
{
	char line[256];
	long pte = 0, rss = 0, pss = 0, maps = 0;
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "VmPTE: %ld", &pte);
		sscanf(line, "VmRSS: %ld", &rss);
	}
	if (f)
		fclose(f);
	f = fopen("/proc/self/smaps_rollup", "r");
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "Pss: %ld", &pss);
	if (f)
		fclose(f);
	f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof(line), f))
		maps++;
	if (f)
		fclose(f);
	struct stat st;
	fstat(m, &st);
	printf("  %-22s rss_kb=%ld pss_kb=%ld pte_kb=%ld maps=%ld memfd_kb=%ld\n", when, rss, pss,
	       pte, maps, (long)st.st_blocks / 2);
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	long n = atol(argv[1]), kib = atol(argv[2]);
	int dontneed = !strcmp(argv[3], "dontneed"), remap = !strcmp(argv[3], "remap");
	size_t stride = (2u << 20) + 4096, bytes = (size_t)n * stride;
	size_t heads = ((size_t)n * 4096 + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
	if (remap)
		bytes = heads + (size_t)n * (2u << 20);
	int m = memfd_create("osf-pair", MFD_CLOEXEC);
	if (m < 0 || ftruncate(m, (off_t)bytes) < 0)
		die("memfd");
	/* 2 MiB-aligned start, so that "remap"'s ring areas fill page tables */
	char *raw = mmap(NULL, bytes + (2u << 20), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		die("reserve");
	char *r = (char *)(((uintptr_t)raw + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
	if (mmap(r, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m, 0) == MAP_FAILED)
		die("mmap");
	printf("%s slots=%ld written_kib=%ld\n", argv[3], n, kib);
	show("mapped", m);
	for (long i = 0; i < n; i++) {
		char *s = remap ? r + (size_t)i * 4096 : r + (size_t)i * stride;
		char *ring = remap ? r + heads + (size_t)i * (2u << 20) : s + 4096;
		s[0] = 1;
		memset(ring, 'x', (size_t)kib * 1024);
	}
	show("after the transfer", m);
	uint64_t t = now_ns();
	for (long i = 0; i < n; i++) {
		char *ring = remap ? r + heads + (size_t)i * (2u << 20) : r + (size_t)i * stride + 4096;
		size_t len = (size_t)kib * 1024;
		if (remap) {
			if (madvise(ring, len, MADV_REMOVE) < 0 ||
			    mmap(ring, 2u << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m,
				 ring - r) == MAP_FAILED)
				die("remap");
		} else if (dontneed) {
			if (madvise(ring, len, MADV_DONTNEED) < 0 ||
			    fallocate(m, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				      ring - r, (off_t)len) < 0)
				die("dontneed+punch");
		} else if (madvise(ring, len, MADV_REMOVE) < 0)
			die("MADV_REMOVE");
	}
	double us = (double)(now_ns() - t) / (double)n / 1e3;
	show("after the trim", m);
	printf("  trim per slot: %.1f us\n", us);
	return 0;
}
