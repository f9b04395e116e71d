/* osfperf.h: what osfperf's files share (osfperf.c: the command line and
 * syscall-loop; wire.c: hashing, the pattern, I/O, sockets and the test
 * header; server.c; client.c). The wire format is described in osfperf.c. */
#ifndef OSFPERF_H
#define OSFPERF_H

#include <ctype.h>
#include <endian.h>
#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define HDR_MAGIC 0x4f534650u /* "OSFP" */
#define HDR_VERSION 1
#define HDR_SIZE 24
#define REPLY_SIZE 16
#define FLAG_BLOCKING 0x1u
#define FLAG_NOVERIFY 0x2u
#define MAX_IO_SIZE (64u << 20)

#define PATTERN_PERIOD 1048573u /* prime, just under 1 MiB */
#define PATTERN_SEED 0x6f736670657266ull

#define IO_TIMEOUT_MS 30000 /* no progress for this long (twice, if blocking) is an error */
#define DEFAULT_PORT "11111"

/* FAIL sets errno and returns -1: the one way a helper reports an error. */
#define FAIL(e)                                                                                    \
	do {                                                                                       \
		errno = (e);                                                                       \
		return -1;                                                                         \
	} while (0)

enum test { TEST_PINGPONG = 1, TEST_STREAM = 2, TEST_RSTREAM = 3 };
extern const char *const test_names[]; /* by enum test (wire.c) */

/* opts holds the command line of every mode; each mode reads its own fields. */
struct opts {
	const char *addr;
	const char *port;
	bool once;          /* server: exit after one client */
	enum test test;     /* client */
	size_t size;        /* client pingpong: message size */
	uint64_t iters;     /* client pingpong; syscall-loop */
	bool iters_set;
	double secs;        /* client pingpong: time limit, 0 = none */
	uint64_t total;     /* client stream, rstream */
	size_t wsize;       /* client stream, rstream */
	uint64_t warmup;    /* client pingpong */
	bool blocking;      /* client: blocking sockets on both sides */
	bool noverify;      /* client stream, rstream: count bytes, do not hash */
	bool json;
	const char *call;   /* syscall-loop: "fcntl" or "devnull" */
};

/* hdr is the decoded test header. */
struct hdr {
	enum test test;
	uint32_t flags;
	uint32_t size;
	uint64_t total;
};

/* wire.c */
uint64_t now_ns(void);
void *xmalloc(size_t n);
void put_be(uint8_t *p, uint64_t v, int n);
uint64_t get_be(const uint8_t *p, int n);
uint8_t *pattern_new(size_t w);
uint64_t pattern_hash(const uint8_t *pat, uint64_t total);
ssize_t read_full(int fd, void *buf, size_t len);
int write_full(int fd, const void *buf, size_t len);
int write_pattern(int fd, const uint8_t *pat, uint64_t total, size_t w);
int64_t read_hashed(int fd, uint8_t *buf, size_t len, uint64_t limit, uint64_t *sum);
int set_nodelay(int fd);
int set_blocking(int fd);
int listen_on(const char *addr, const char *port);
int connect_to(const char *addr, const char *port);
void print_listening(int fd);
void send_hdr(int fd, const struct hdr *h);
bool recv_hdr(int fd, struct hdr *h);

/* server.c */
int server_main(const struct opts *o);

/* client.c */
int client_main(const struct opts *o);

#endif
