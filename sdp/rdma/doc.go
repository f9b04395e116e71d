// Package rdma is osf's transport between hosts: SDP-style streams over
// RDMA reliable-connected queue pairs whose rings are advanced by RDMA
// WRITE WITH IMMEDIATE (the Qsockets design, docs/DESIGN.md D4).
//
// The C data path of libosf.so is the same as for peers on one host (package
// shm): an offloaded fd is a connected AF_UNIX stream socket that carries
// only readers' wake tokens and the end, a hidden second socket carries
// writers' wake tokens, and a memfd segment (package sdp) holds the two
// rings. For RDMA each host has its own segment, and this package's
// progress engine, in the process that owns the queue pair, plays "the
// other side" of it towards the C data path: it holds the other ends of
// both wake sockets and a registered mapping of the segment, RDMA-writes
// the bytes the application publishes into the same offsets of the peer's
// ring, advances the peer's head with the immediate, stores the heads the
// peer's immediates announce, wakes the application's readers and writers
// each on their own socket, returns the application's consumer positions
// as credits, mirrors FIN and RESET, and closes its ends of the wake
// sockets when the connection ends, which the C data path turns into end
// of file or ECONNRESET exactly as for a dead local peer.
// docs/ARCHITECTURE.md, "RDMA transport", specifies the messages and the
// wake protocol.
//
// Connection management runs over librdmacm in the TCP port space
// (RDMA_PS_TCP). A listener that the route policy replicates over RDMA gets
// an rdma_cm listener on the same address and port (Replicate); the engine
// hands each connection it accepts to the application through the
// listener's shm companion, as a local shm client would, so the C accept
// path takes it unchanged.
//
// The ring-mirroring logic is separated from the hardware behind Link, with
// a verbs implementation; in the tests, an in-process fake that executes
// work requests asynchronously as a NIC does; and Sim, a software stand-in
// for a device between processes of one host (each queue pair an AF_UNIX
// socket), which OSF_DEBUG_RDMA_SIM=1 makes the core use so that the whole
// RDMA path can be tested through libosf.so without RDMA hardware. Sim is
// for tests only.
//
// Example (what the core does):
//
//	t, err := rdma.Start(rdma.Config{HiddenBase: base, PollSpin: 20 * time.Microsecond})
//	if errors.Is(err, verbs.ErrNoDevice) {
//		// no RDMA: kernel TCP for other hosts
//	}
//	ep, err := t.Dial(dst, local, 1<<20, time.Second) // sdp.ErrNoListener...: kernel TCP
//
//	lfd, _ := shm.Transport{}.Listen(addr, 128, false) // the listener's companion
//	err = t.Replicate(addr, false, 128)                // RDMA connections arrive on lfd too
package rdma
