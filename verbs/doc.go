// Package verbs is osf's RDMA transport layer: cgo bindings to libibverbs
// and librdmacm, and the choice of RDMA device for a network interface.
//
// It offers what osf's inter-host streams need and no more: devices and
// their ports (Devices, OpenDevice, DeviceForInterface, DeviceForAddr),
// protection domains (PD), memory regions over mmap'ed or C.malloc'ed
// memory (MR), completion channels and queues (CompChannel, CQ, WC),
// reliable-connected queue pairs driven by RDMA WRITE WITH IMMEDIATE (QP),
// and connection management on the RDMA_PS_TCP port space, whose port
// numbers are TCP's (EventChannel, CMID, Event). WRID packs a kind, a
// connection number and a sequence number into a work request id. verbs
// knows nothing about sockets or osf's ring layout; package sdp builds
// streams on top of it.
//
// # Errors and resources
//
// Errors wrap a sentinel (ErrNoDevice, ErrNoKernelSupport, ErrClosed,
// ErrTimeout, ErrRejected, ErrUnreachable, ErrWouldBlock,
// ErrPrivateDataTooLong) and, when the failure came from the kernel or the
// RDMA libraries, the unix.Errno; test them with errors.Is. The errno to
// sentinel table is in errors.go. On a machine without RDMA everything
// fails with ErrNoDevice (or ErrNoKernelSupport, which is also
// ErrNoDevice); nothing panics.
//
// Every resource has a Close that frees it exactly once; a second Close
// returns ErrClosed (the one exception, a Context obtained from a CMID,
// belongs to librdmacm and its Close is a no-op). Close children before
// parents: MRs and QPs before their PD, QPs before their CQs (CMID.Close
// closes its QP), CQs before their CompChannel, and everything before its
// Context or EventChannel; a parent with open children refuses with an
// error wrapping unix.EBUSY.
//
// Memory that the NIC reads or writes (every MR) must come from mmap or
// C.malloc, never from the Go heap.
//
// # Example
//
// The active side of a connection, error handling elided. The passive
// side Binds and Listens on a CMID, takes the EventConnectRequest's new
// ID, builds the same PD/CQ/MR/QP on it, posts receives and Accepts with
// its region's address and rkey in the private data.
//
//	ch, err := verbs.NewEventChannel()
//	id, err := ch.CreateID()
//	err = id.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.2:5000"), time.Second)
//	ev, err := ch.WaitEvent(5 * time.Second) // EventAddrResolved; ev.Err() says why not
//
//	ctx, err := id.Context() // the device serving the route
//	pd, err := ctx.AllocPD()
//	cc, err := ctx.CreateCompChannel()
//	cq, err := ctx.CreateCQ(256, cc, 0)
//	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
//	mr, err := pd.RegMR(unsafe.Pointer(&buf[0]), len(buf), verbs.AccessLocalWrite)
//	qp, err := id.CreateQP(pd, verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 128, MaxRecvWR: 128})
//
//	err = id.ResolveRoute(time.Second)
//	ev, err = ch.WaitEvent(5 * time.Second) // EventRouteResolved
//	err = id.Connect(verbs.ConnParam{PrivateData: hello})
//	ev, err = ch.WaitEvent(5 * time.Second) // EventEstablished
//	raddr, rkey := decode(ev.PrivateData)   // the acceptor's region; lengths are in the payload
//
//	n := copy(buf, "hello")
//	sge, err := mr.SGE(0, n)
//	err = qp.PostWriteImm(uint64(verbs.MakeWRID(kindData, conn, seq)), sge, raddr, rkey, uint32(n), true)
//
//	wc := make([]verbs.WC, 16)
//	for {
//		k, err := cq.Poll(wc) // never blocks
//		// handle wc[:k]; wc[i].Status.OK(), verbs.WRID(wc[i].WRID).Seq()
//		if k == 0 {
//			err = cq.ReqNotify(false)
//			// poll once more, then sleep in poll/epoll on cc.Fd(),
//			// cq, err := cc.GetEvent(); cq.AckEvents(1)
//		}
//	}
//
// # Device tests
//
// The tests that need a device call testutil.SkipIfNoRDMA, which skips
// with the exact reason (e.g. "no RDMA device: ibv_get_device_list
// returned 0 devices (errno ENOSYS: kernel has no RDMA support)"). They run
// on real InfiniBand or RoCE hardware as they are, and on any Linux
// machine whose kernel has RDMA support with soft-RoCE over an ordinary
// Ethernet interface:
//
//	sudo modprobe rdma_rxe
//	sudo rdma link add rxe0 type rxe netdev IFACE   # e.g. eth0; IFACE needs an IPv4 address
//	ibv_devices                                      # lists rxe0
//	go test -v ./verbs/
//
// They need /dev/infiniband/uverbs* and /dev/infiniband/rdma_cm to be
// accessible (root, or the rdma group) and enough locked memory
// (ulimit -l) for the MRs. Remove the soft-RoCE device with
// "rdma link delete rxe0".
package verbs
