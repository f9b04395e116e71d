/* nagle: do 1-byte wake tokens in one direction meet Nagle and delayed ACKs?
 * (docs/D2-PROPOSAL.md, hard part "Tokens and Nagle").
 *
 *   nagle N GAP_US NODELAY [pp]
 *
 * A writer process sends N one-byte tokens on a loopback TCP connection, one
 * every GAP_US, and never reads; the reader process blocks in recv for each and
 * never writes (the shape of a stream whose reader sleeps between chunks). The
 * reader's wake-up latency per token (send to recv return) is printed, p50 /
 * p99 / max, with or without TCP_NODELAY on the writer. Writer on CPU 0,
 * reader on CPU 1; the gap is a usleep.
 * With "pp", each round is first a ping-pong (a token each way, which puts
 * the connection in the kernel's interactive "pingpong" ACK mode), then two
 * tokens GAP_US apart from the writer; the second one's latency is printed:
 * Nagle holds a small segment while an earlier one is unacknowledged. */
#include "spike.h"

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5)
		return 2;
	int pp = argc == 5;
	long n = atol(argv[1]);
	long gap = atol(argv[2]);
	int nodelay = atoi(argv[3]);
	uint64_t *sent = mmap(NULL, (size_t)n * 8, PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t *lat = calloc((size_t)n, 8);
	struct sockaddr_in a = lo_addr(0);
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listen");
	int w = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(w, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	int r = accept(l, NULL, NULL);
	if (nodelay)
		setsockopt(w, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof(nodelay));
	pid_t pid = fork();
	if (pid == 0) {
		pin(0);
		close(r);
		for (long k = 0; k < n; k++) {
			if (pp) {
				char c;
				usleep(200);
				if (send(w, "p", 1, 0) != 1 || recv(w, &c, 1, 0) != 1)
					die("ping");
				if (send(w, "a", 1, 0) != 1)
					die("send a");
			}
			usleep((useconds_t)gap);
			sent[k] = now_ns();
			if (send(w, "t", 1, 0) != 1)
				die("send");
		}
		exit(0);
	}
	close(w);
	pin(1);
	for (long k = 0; k < n; k++) {
		char c;
		if (pp && (recv(r, &c, 1, 0) != 1 || send(r, "q", 1, 0) != 1 ||
			   recv(r, &c, 1, 0) != 1))
			die("pong");
		if (recv(r, &c, 1, 0) != 1)
			die("recv");
		lat[k] = now_ns() - sent[k];
	}
	waitpid(pid, NULL, 0);
	qsort(lat, (size_t)n, 8, cmp_u64);
	printf("%snodelay=%d gap_us=%ld tokens=%ld wake_p50_us=%.1f p99_us=%.1f max_us=%.1f\n", pp ? "pp " : "", nodelay,
	       gap, n, lat[n / 2] / 1e3, lat[n * 99 / 100] / 1e3, lat[n - 1] / 1e3);
	return 0;
}
