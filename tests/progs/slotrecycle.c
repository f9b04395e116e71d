//go:build osf_make

/* slotrecycle: an inherited connection whose slot was recycled is refused
 * by the image that adopts it (OSF_SHM_POOL=1; preload/pool.c).
 *
 *   slotrecycle keep|recycle   makes a connection to itself over loopback,
 *                              finds the slot its client end uses in the
 *                              region (memfd:osf-region) by the socket's
 *                              inode the slot records, and prints
 *                              "slot N records the client socket"; with
 *                              recycle it then rewrites the slot as a
 *                              recycled one looks (another socket's
 *                              inode, the next generation). A child
 *                              execs "slotrecycle child FD" with the
 *                              client end inheritable; it writes "hello"
 *                              and prints "child write: N" (or the
 *                              errno). The parent then prints what its
 *                              server end got within 500 ms: "server got:
 *                              hello" or "server got: nothing", and
 *                              whether the slot's ring 0 moved ("ring 0
 *                              head: N").
 *
 * Under osf with OSF_SHM_POOL=1 only (exit 3 when no region is found). */
#include "pair.h"
#include "segmaps.h"

#include "../../sdp/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

int main(int argc, char **argv)
{
	const uint32_t ring = 1u << 20; /* OSF_RING_SIZE's default */
	uint64_t sb = osf_seg_bytes(ring);
	struct stat cs, rs;
	int l, c, s, rfd, i, n, slot = -1, st;
	uint8_t *m;
	char b[16], fdarg[16];
	pid_t pid;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 3 && strcmp(argv[1], "child") == 0) {
		ssize_t w = write(atoi(argv[2]), "hello", 5);
		if (w < 0)
			printf("child write: %s\n", strerror(errno));
		else
			printf("child write: %zd\n", w);
		return 0;
	}
	if (argc != 2 || (strcmp(argv[1], "keep") && strcmp(argv[1], "recycle")))
		return fprintf(stderr, "usage: slotrecycle keep|recycle\n"), 2;
	if (loopback_pair(&l, &c, &s) < 0)
		return 2;
	rfd = memfd_fd("osf-region");
	if (rfd < 0 || fstat(rfd, &rs) < 0 || fstat(c, &cs) < 0) {
		printf("no region\n");
		return 3;
	}
	n = (int)((uint64_t)rs.st_size / sb);
	m = mmap(NULL, (size_t)rs.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
	if (m == MAP_FAILED)
		return perror("mmap"), 2;
	for (i = 0; i < n && slot < 0; i++)
		if (osf_seg_hdr(m + i * sb, ring)->slot_ino[OSF_SIDE_CLIENT] == (uint64_t)cs.st_ino)
			slot = i;
	if (slot < 0) {
		printf("no slot records the client socket\n");
		return 3;
	}
	printf("slot %d records the client socket\n", slot);
	if (strcmp(argv[1], "recycle") == 0) {
		struct osf_seg_hdr *h = osf_seg_hdr(m + slot * sb, ring);
		h->slot_ino[OSF_SIDE_CLIENT] = (uint64_t)cs.st_ino + 1000003;
		h->slot_gen++;
	}
	fcntl(s, F_SETFD, FD_CLOEXEC);
	fcntl(l, F_SETFD, FD_CLOEXEC);
	fcntl(c, F_SETFD, 0);
	snprintf(fdarg, sizeof(fdarg), "%d", c);
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "child", fdarg, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		return fprintf(stderr, "child failed\n"), 2;
	{
		struct pollfd p = {s, POLLIN, 0};
		ssize_t r = poll(&p, 1, 500) == 1 ? recv(s, b, sizeof(b) - 1, MSG_DONTWAIT) : 0;
		b[r > 0 ? r : 0] = 0;
		printf("server got: %s\n", r > 0 ? b : "nothing");
	}
	printf("ring 0 head: %llu\n",
	       (unsigned long long)osf_seg_hdr(m + slot * sb, ring)->ring[0].head);
	return 0;
}
