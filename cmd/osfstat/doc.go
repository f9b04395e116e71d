// Command osfstat lists the processes on this host that run under osf
// (libosf.so mapped) and the sockets osf has seen in each, like `ss -tanp`:
// pid, program, fd, role, local and remote address, transport, and for a
// socket on kernel TCP the reason it was not offloaded.
//
// It reads each process's fd table (a memfd, see package fdtable) through
// /proc, read-only, so it needs no daemon and never disturbs the programs;
// it sees the processes the caller may inspect (same user, or root).
//
// Usage:
//
//	osfstat               all processes under osf and their sockets
//	osfstat -p 1234       one process
//	osfstat --json        machine-readable output
//	osfstat -s            a summary: connections per transport
//	osfstat -i 2          refresh every 2 seconds
package main
