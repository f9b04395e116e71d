//go:build osf_make

/* segpages: the memory a small exchange allocates in its segment.
 *
 *   segpages REQ REPLY [ROUNDS]
 *                        makes a loopback connection, sends REQ bytes from
 *                        the client, reads them at the server, answers
 *                        with REPLY bytes and reads them at the client
 *                        (bytes checked), ROUNDS times (1), then prints,
 *                        for each osf
 *                        segment (memfd:osf-seg) the process holds, the
 *                        bytes of memory it has allocated: "seg INODE
 *                        BYTES" (once per fd: the same memfd may show
 *                        twice).
 *
 * Under osf both ends of the connection are in this process, so every page
 * either end touched is counted once, in the connection's memfd. */
#include "pair.h"
#include "segmaps.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int xfer(int from, int to, size_t n, unsigned char seed)
{
	unsigned char *b = malloc(n), *c = malloc(n);
	size_t i, got = 0;

	for (i = 0; i < n; i++)
		b[i] = (unsigned char)(seed + i * 7);
	if (write(from, b, n) != (ssize_t)n)
		return perror("write"), -1;
	while (got < n) {
		ssize_t r = read(to, c + got, n - got);
		if (r <= 0)
			return perror("read"), -1;
		got += (size_t)r;
	}
	if (memcmp(b, c, n) != 0)
		return fprintf(stderr, "bytes differ\n"), -1;
	free(b);
	free(c);
	return 0;
}

static void print_seg(const struct stat *st, void *arg)
{
	(void)arg;
	printf("seg %llu %lld\n", (unsigned long long)st->st_ino,
	       (long long)st->st_blocks * 512);
}

int main(int argc, char **argv)
{
	int l, c, s;
	long rounds = argc == 4 ? atol(argv[3]) : 1, i;

	if (argc != 3 && argc != 4)
		return fprintf(stderr, "usage: segpages REQ REPLY [ROUNDS]\n"), 2;
	if (loopback_pair(&l, &c, &s) < 0)
		return 1;
	for (i = 0; i < rounds && i < 100000; i++)
		if (xfer(c, s, (size_t)atol(argv[1]), 1) < 0 ||
		    xfer(s, c, (size_t)atol(argv[2]), 2) < 0)
			return 1;
	if (seg_fds(print_seg, NULL) < 0)
		return perror("/proc/self/fd"), 1;
	return 0;
}
