// Command osfstat lists the processes on this host that run under osf
// (libosf.so mapped) and the sockets osf has seen in each, like `ss -tanp`:
// pid, program, fd, role, state, local and remote address, transport, for
// an offloaded connection the counters of its shared segment, and for a
// socket on kernel TCP the reason it was not offloaded (the same words as
// `osfrun --explain`).
//
// It reads each process's fd table (a memfd, see package fdtable) and the
// segments of its offloaded connections through /proc, read-only: files
// are mapped PROT_READ and nothing is ever written or locked, so it needs
// no daemon and never disturbs the programs. It sees the processes the
// caller may inspect (same user, or root). Kernel TCP sockets get their
// state, addresses and queues from /proc/PID/net/tcp and tcp6.
//
// Usage:
//
//	osfstat               all processes under osf and their sockets
//	osfstat -p 1234       one process (exit status 1 if it is not under osf)
//	osfstat --json        machine-readable output (below)
//	osfstat -s            a summary: sockets, connections and bytes per transport
//	osfstat --ss          the offloaded sockets (which ss cannot see) in the
//	                      columns of `ss -tanp`, the transport after the
//	                      process ("osf:shm"); -t is the same
//	osfstat -i 2          refresh every 2 seconds until SIGINT or SIGTERM
//	                      (with --json: one JSON document per line)
//
// # Columns
//
//	PID PROGRAM      the process and its name (/proc/PID/comm)
//	CORE             "loaded" once the process loaded osf's Go core;
//	                 ",disabled" when osf is pass-through (configuration error);
//	                 "go" for a Go program whose sockets osf sees (OSF_GO=1),
//	                 "go(kernel)" for one whose it does not: the REASON of
//	                 its line without a socket says why
//	FD               the socket's fd number in the process
//	ROLE             listener, client (connect), server (accept), - (undecided)
//	STATE            as TCP names it: LISTEN, ESTABLISHED, CLOSE_WAIT, ...
//	                 (below); - when unknown
//	LOCAL PEER       addresses, as getsockname and getpeername report them
//	TRANSPORT        shm, rdma, kernel, or - (not decided yet)
//	RECV-Q SEND-Q    bytes waiting to be read here / to be read by the peer
//	RING             ring size per direction of an offloaded connection
//	OUT IN           bytes this side has sent / received over the rings
//	CALLS(S/R)       send and receive calls on the connection
//	SLEEPS/WAKES     times this side slept in the kernel waiting for data or
//	                 room / wake-ups it sent to the peer
//	REASON           why the socket is on kernel TCP; for an offloaded
//	                 connection, anything impossible read from its segment
//
// The counters of an offloaded connection are those of its side (client
// or server) in the segment: every process holding that side (after fork)
// adds to the same counters. OUT is the head of the side's send ring and IN
// the tail of its receive ring, exact at the moment they are read.
//
// State of an offloaded connection, from the FIN and RESET flags of the two
// sides and whether the peer's side is still held by a process:
// ESTABLISHED; CLOSE_WAIT (the peer shut down writing or closed); FIN_WAIT2
// (this side shut down writing); CLOSE (both did, or the peer reset the
// connection: it closed abortively, or with data it never read; the
// peer's flags say RESET for the former). This is what TCP_INFO reports in
// the process itself, and what kernel TCP would report. Kernel TCP sockets
// show the kernel's state.
//
// # JSON
//
// `osfstat --json` prints one object; these field names are stable (new
// fields may be added):
//
//	{"processes": [{
//	    "pid": 1234, "program": "redis-server",
//	    "core_loaded": true,       // the Go core is loaded
//	    "core_loads": 1,           // times the process loaded it
//	    "disabled": false,         // osf is pass-through in the process
//	    "go": {"offloaded": true,  // a Go program (omitted otherwise): osf sees its sockets
//	           "detail": "go1.26.8", // its Go version, or what osf did not recognise
//	           "reason": "...", "hint": "...", "reason_code": 17}, // when not offloaded
//	    "sockets": [{
//	        "fd": 7,
//	        "kind": "shm",         // fd table kind: tcp (undecided), kernel, listen, shm, rdma
//	        "role": "server",      // client, server, listener, "-"
//	        "state": "ESTABLISHED",// as the STATE column, "-" when unknown
//	        "local": "127.0.0.1:6379", "peer": "127.0.0.1:50312", // omitted when unknown
//	        "transport": "shm",    // shm, rdma, kernel, gateway, "-"
//	        "gateway": "10.0.1.1:7000", "gateway_leg": "kernel", // transport gateway only
//	        "reason": "...",       // kernel only: why, as osfrun --explain says it
//	        "hint": "...",         // kernel only: what to do about it
//	        "reason_code": 0,      // internal/policy.Reason
//	        "rule": 2,             // route rule that decided; 0 the implicit one, -1 none
//	        "recv_q": 0, "send_q": 0, // bytes queued each way; omitted when unknown
//	        "segment": {           // offloaded connections only
//	            "side": 1,         // 0 client (connecting) side, 1 server side
//	            "ring_bytes": 262144,
//	            "peer_pid": 1300,  // the other side's process, as the header says (omitted if unset)
//	            "bytes_out": 1000, // this side's send ring head
//	            "bytes_in": 2000,  // this side's receive ring tail
//	            "tx_queued": 0,    // send ring head - tail
//	            "rx_queued": 0,    // receive ring head - tail
//	            "send_calls": 3, "recv_calls": 5,
//	            "sleeps": 1,       // times this side slept waiting
//	            "wakes_sent": 2,   // wake-ups it sent to the peer
//	            "flags": "-",      // this side's flags: FIN, RESET, RDSHUT joined by |, "-" none
//	            "peer_flags": "FIN",
//	            "peer_closed": false, // no process holds the peer's side any more
//	            "link": true,      // rdma: a stream on a link (OSF_RDMA_LINKS), the engine's path (omitted if not)
//	            "anomalies": ["..."]  // impossible values read (omitted when none)
//	        },
//	        "segment_error": "..." // offloaded, but the segment could not be read
//	                               // (one closed while osfstat read it is state CLOSING instead)
//	    }]
//	}]}
//
// `osfstat -s --json` prints the summary instead:
//
//	{"processes": 3, "core_loaded": 3,
//	 "sockets":     {"shm": 1001, "rdma": 0, "kernel": 2, "-": 0},  // per transport
//	 "connections": {"shm": 1000, "rdma": 0, "kernel": 2},          // client and server sockets
//	 "bytes":       {"shm": {"out": 5000, "in": 5000}, "rdma": {"out": 0, "in": 0}}}
//
// Both ends of a connection between two processes under osf on this host
// are counted, one socket each, as ss counts them. osf does not count the
// bytes of kernel TCP connections.
package main
