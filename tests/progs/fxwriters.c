//go:build osf_make

/* fxwriters: two processes write records to one TCP connection at once,
 * as a parent and its forked child share a stdout; the reader checks that
 * each writer's records arrive complete, uncorrupted and in order, and
 * counts the writes that did not land whole.
 *
 *   fxwriters write PORT RECORDS [pause]
 *   fxwriters read PORT [allow-cut]
 *
 * write connects to 127.0.0.1:PORT, prints "connected PID FD" (with
 * "pause", it then waits for a line on its standard input), forks, and
 * parent (writer P) and child (writer C) each write RECORDS records, one
 * write() per record, each record
 *
 *   "<" ID SEQ(8 hex digits) LEN(4 hex digits) ">" PAYLOAD "\n"
 *
 * with LEN (0..8191, varying) bytes of a pattern of (ID, SEQ, offset).
 * Writer P's bytes all have the high bit clear, writer C's all have it set
 * (C's record is P's format with every byte ORed with 0x80), so the reader
 * can tell every byte's writer even where two writes interleave. A write
 * that returns less than the whole record is reported as "short write"
 * (exit 1). The child exits when done; the parent waits for it, prints
 * "wrote 2x RECORDS", closes the connection and exits 0.
 *
 * read listens on 127.0.0.1:PORT, prints "listening", accepts one
 * connection and reads until end of file, parsing each writer's bytes as
 * its own stream of records. It prints "64 MiB read" when it has, and at
 * the end
 *
 *   writer P records N
 *   writer C records N
 *   bytes B split S
 *
 * (S: records whose bytes the other writer's bytes interrupted, i.e.
 * writes that did not land whole) and exits 0, or, at the first byte that
 * is not what that writer's next record must hold there, "corrupt at
 * offset O: WHAT" and exits 1. A writer whose last record stops short at
 * the end is corrupt too, unless allow-cut is given (a writer was killed
 * in the middle of a write): then it prints "writer W cut in record N"
 * first.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define HDR 15 /* "<" id seq(8) len(4) ">" */
#define MAXLEN 8192

static void die(const char *what)
{
	fprintf(stderr, "fxwriters: %s: %s\n", what, strerror(errno));
	exit(2);
}

static inline uint8_t pat(int id, uint32_t seq, uint32_t i)
{
	return (uint8_t)(id * 7 + seq * 13 + i * 31 + (i >> 8)) & 0x7f;
}

static uint32_t rec_len(int id, uint32_t seq)
{
	uint32_t x = seq * 2654435761u ^ (uint32_t)id * 40503u;

	x ^= x >> 15;
	x *= 2246822519u;
	x ^= x >> 13;
	return x % MAXLEN;
}

static void writer(int s, int id, long n)
{
	static char rec[HDR + MAXLEN + 1];

	for (uint32_t seq = 0; seq < (uint32_t)n; seq++) {
		uint32_t len = rec_len(id, seq), total = HDR + len + 1;
		ssize_t w;

		snprintf(rec, sizeof rec, "<%c%08x%04x>", id, seq, len);
		for (uint32_t i = 0; i < len; i++)
			rec[HDR + i] = (char)pat(id, seq, i);
		rec[HDR + len] = '\n';
		if (id == 'C')
			for (uint32_t i = 0; i < total; i++)
				rec[i] = (char)((uint8_t)rec[i] | 0x80);
		do
			w = write(s, rec, total);
		while (w < 0 && errno == EINTR);
		if (w < 0)
			die("write");
		if ((uint32_t)w != total) {
			printf("short write: writer %c record %u: %zd of %u bytes\n",
			       id, seq, w, total);
			exit(1);
		}
	}
}

/* parser follows one writer's stream of records. */
struct parser {
	int id;
	uint32_t seq, len, pos; /* record seq; its payload length; bytes of it seen */
	char hdr[HDR + 1];
};

/* feed takes the writer's next byte (high bit stripped); it returns 0, or
 * 1 after printing what is wrong. */
static int feed(struct parser *p, char b, unsigned long long off)
{
	if (p->pos < HDR) {
		p->hdr[p->pos++] = b;
		if (p->pos < HDR)
			return 0;
		unsigned seq, len;
		if (p->hdr[0] != '<' || p->hdr[1] != p->id || p->hdr[HDR - 1] != '>' ||
		    sscanf(p->hdr + 2, "%8x%4x", &seq, &len) != 2) {
			printf("corrupt at offset %llu: writer %c: bad header %.15s\n",
			       off, p->id, p->hdr);
			return 1;
		}
		if (seq != p->seq || len != rec_len(p->id, seq)) {
			printf("corrupt at offset %llu: writer %c record %u (len %u), want record %u\n",
			       off, p->id, seq, len, p->seq);
			return 1;
		}
		p->len = len;
		return 0;
	}
	if (p->pos < HDR + p->len) {
		uint32_t i = p->pos - HDR;
		if ((uint8_t)b != pat(p->id, p->seq, i)) {
			printf("corrupt at offset %llu: writer %c record %u byte %u\n",
			       off, p->id, p->seq, i);
			return 1;
		}
		p->pos++;
		return 0;
	}
	if (b != '\n') {
		printf("corrupt at offset %llu: writer %c record %u: no newline\n",
		       off, p->id, p->seq);
		return 1;
	}
	p->seq++;
	p->pos = 0;
	return 0;
}

static int reader(int s, int allow_cut)
{
	static uint8_t buf[65536];
	struct parser ps[2] = {{.id = 'P'}, {.id = 'C'}};
	unsigned long long off = 0, split = 0;
	int last = -1;

	for (;;) {
		ssize_t r = read(s, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("read");
		if (r == 0)
			break;
		if (off < (64ULL << 20) && off + (unsigned long long)r >= (64ULL << 20))
			printf("64 MiB read\n");
		for (ssize_t i = 0; i < r; i++, off++) {
			int w = buf[i] >> 7;
			if (last >= 0 && w != last && ps[last].pos != 0)
				split++; /* the other writer cut into a record */
			last = w;
			if (feed(&ps[w], (char)(buf[i] & 0x7f), off))
				return 1;
		}
	}
	for (int w = 0; w < 2; w++)
		if (ps[w].pos != 0 && allow_cut) {
			printf("writer %c cut in record %u\n", ps[w].id, ps[w].seq);
		} else if (ps[w].pos != 0) {
			printf("corrupt at offset %llu: writer %c record %u cut short\n",
			       off, ps[w].id, ps[w].seq);
			return 1;
		}
	printf("writer P records %u\nwriter C records %u\nbytes %llu split %llu\n",
	       ps[0].seq, ps[1].seq, off, split);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int s, one = 1, st;
	pid_t pid;
	long n;

	if (argc < 3 || (strcmp(argv[1], "read") && argc < 4)) {
		fprintf(stderr, "usage: fxwriters write PORT RECORDS [pause] | read PORT [allow-cut]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	a.sin_port = htons((unsigned short)atoi(argv[2]));
	if (strcmp(argv[1], "read") == 0) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
		    bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0)
			die("listen");
		printf("listening\n");
		s = accept(l, NULL, NULL);
		if (s < 0)
			die("accept");
		close(l);
		return reader(s, argc > 3 && strcmp(argv[3], "allow-cut") == 0);
	}
	n = atol(argv[3]);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
		die("connect");
	printf("connected %d %d\n", (int)getpid(), s);
	if (argc > 4 && strcmp(argv[4], "pause") == 0) {
		char line[64];
		if (read(0, line, sizeof line) < 0)
			die("read stdin");
	}
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		writer(s, 'C', n);
		_exit(0);
	}
	writer(s, 'P', n);
	if (waitpid(pid, &st, 0) < 0)
		die("waitpid");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("child failed: status 0x%x\n", st);
		return 1;
	}
	printf("wrote 2x %ld\n", n);
	close(s);
	return 0;
}
