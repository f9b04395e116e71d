// Command osfperf measures the latency and bandwidth of TCP streams, run
// plain or under osf, and the per-call cost osf adds to calls it does not
// offload.
//
// The command is written in C (osfperf.c: the command line; wire.c: hashing,
// the pattern, I/O and the test header; server.c; client.c. The Makefile
// builds it with gcc into build/bin/osfperf, and the osf_make build tag
// keeps the Go toolchain away from it). It has to be: the program under test must reach the network only
// through libc so that libosf.so, preloaded, intercepts every call. Go's net
// package makes system calls directly, bypassing libc, and a Go process could
// not host osf's Go core besides its own runtime. This package holds only this
// documentation.
//
// # Usage
//
//	osfperf server [-a ADDR] [-p PORT] [-1]
//	osfperf client [-a ADDR] [-p PORT] [-t pingpong|stream|rstream] [-s MSGSIZE]
//	               [-n ITERATIONS] [-d SECONDS] [-b TOTALBYTES] [-w WRITESIZE]
//	               [--warmup N] [--blocking] [--no-verify] [--json]
//	osfperf syscall-loop [-n N] [-f fcntl|devnull] [--json]
//
// The server listens on ADDR (default 0.0.0.0; IPv6 with -a :: or -a ::1) and
// PORT (default 11111; 0 picks a free port), prints
//
//	listening ADDR PORT
//
// on stdout, flushed, and serves each client in a forked child. With -1 it
// serves one client in the process itself and exits: status 0 if the test
// ran, 1 if it failed.
//
// The client connects to ADDR (default 127.0.0.1) and PORT and runs one test;
// the server learns which from the header the client sends first:
//
//   - pingpong (the default): the client sends MSGSIZE bytes (default 64), the
//     server echoes them; the client times each round trip with
//     CLOCK_MONOTONIC and checks the echo. --warmup round trips (default 1000)
//     run first and are not counted; then ITERATIONS (default 100000) are
//     measured, or, with -d, as many as fit in SECONDS (both: whichever ends
//     first). Reported latencies are half round trips, as sockperf and
//     netperf report them.
//   - stream: the client sends TOTALBYTES (default 1G) in writes of WRITESIZE
//     (default 64K); the server replies with the byte count and the XXH64 of
//     what it received, which the client compares with what it sent. The time
//     runs from the header to that reply.
//   - rstream: the same in reverse; the server sends, the client reads (in
//     WRITESIZE reads) to EOF and checks count and XXH64.
//
// Sizes take K, M and G suffixes (powers of 1024). Both sides set TCP_NODELAY.
// Sockets are nonblocking and wait in poll, as event-driven servers do; with
// --blocking both sides use blocking sockets instead, as threaded programs
// do. With --no-verify the stream tests check only the byte count: XXH64 runs
// at about 9 GB/s per core, so verifying caps what a fast transport can show.
// The data is a pseudo-random pattern with an odd prime period (1048573), so
// a lost, duplicated or reordered block is caught.
//
// syscall-loop times N calls (default 1000000) of fcntl(F_GETFL) on a pipe
// (-f fcntl, the default) or of a one-byte write to /dev/null (-f devnull),
// through the ordinary libc entry points, so that comparing a run with and
// without LD_PRELOAD=libosf.so gives osf's cost on a descriptor it does not
// offload.
//
// Examples:
//
//	osfperf server -p 0 -1 > port.txt &
//	osfperf client -p "$(awk '{print $3}' port.txt)" -t stream -w 1M
//
//	LD_PRELOAD=/path/to/libosf.so osfperf server -a ::1 &
//	LD_PRELOAD=/path/to/libosf.so osfperf client -a ::1 -d 10 --json
//
//	osfperf syscall-loop -f devnull
//	LD_PRELOAD=/path/to/libosf.so osfperf syscall-loop -f devnull
//
// # Output
//
// One line per result on stdout; latencies in microseconds, MB is 10^6 bytes,
// Gbit is 10^9 bits:
//
//	pingpong size=64 n=100000 p50=9.322us p90=12.298us p99=16.316us p999=45.706us min=8.515us max=93.289us mean=9.850us
//	stream bytes=1073741824 write=65536 secs=0.252 MB/s=4252.9 Gbit/s=34.02 checksum=ok
//	rstream bytes=1073741824 write=65536 secs=0.227 MB/s=4734.7 Gbit/s=37.88 checksum=ok
//	syscall-loop call=fcntl n=1000000 ns_per_call=223.4
//
// checksum is ok, or skipped with --no-verify; a transfer that does not
// verify prints no result line. With --json each result is one JSON object
// on one line, numbers unquoted, with the same fields plus "test", and with
// MB/s and Gbit/s spelled MB_per_s and Gbit_per_s:
//
//	{"test":"pingpong","size":64,"n":100000,"p50":9.322,"p90":12.298,"p99":16.316,"p999":45.706,"min":8.515,"max":93.289,"mean":9.850}
//	{"test":"stream","bytes":1073741824,"write":65536,"secs":0.252004,"MB_per_s":4252.9,"Gbit_per_s":34.023,"checksum":"ok"}
//	{"test":"syscall-loop","call":"fcntl","n":1000000,"ns_per_call":223.4}
//
// # Errors
//
// Errors go to stderr as "osfperf: <what>: <reason>" and exit with status 1
// (2 for a bad command line). Neither side waits forever: 30 seconds without
// progress on a connection (up to 60 with --blocking, where the socket's own
// timeout runs out before poll waits) is an error (ETIMEDOUT, "Connection
// timed out").
//
// # Measuring on a small VM
//
// On the 2-vCPU machines osf is developed on, waking a peer on the other vCPU
// dominates loopback latency (kernel TCP half round trip: p50 about 55 µs
// across vCPUs, about 9 µs with both processes pinned to one vCPU with
// taskset -c 0). Pin, or say which you measured.
package osfperf
