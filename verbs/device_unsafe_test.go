package verbs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/testutil"
	"github.com/osfproject/osf/verbs"
)

// These tests need a real RDMA device (or soft-RoCE, see doc.go) and skip
// with the reason otherwise.

const eventTimeout = 10 * time.Second

// mmapBuf returns n bytes of anonymous mmap memory, unmapped at cleanup.
func mmapBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// closeLater registers c.Close at cleanup and fails the test if it errors.
// Cleanups run last-in first-out, so register parents first.
func closeLater(t *testing.T, what string, c interface{ Close() error }) {
	t.Helper()
	t.Cleanup(func() {
		if err := c.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("close %s: %v", what, err)
		}
	})
}

// activeDevice returns a device and port that is ACTIVE.
func activeDevice(t *testing.T) (verbs.DeviceInfo, verbs.PortInfo) {
	t.Helper()
	devs, err := verbs.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.State.Active() {
				return d, p
			}
		}
	}
	t.Fatal("SkipIfNoRDMA passed but no ACTIVE port")
	return verbs.DeviceInfo{}, verbs.PortInfo{}
}

func TestDevicesListed(t *testing.T) {
	testutil.SkipIfNoRDMA(t)
	devs, err := verbs.Devices()
	if err != nil || len(devs) == 0 {
		t.Fatalf("Devices() = %v, %v", devs, err)
	}
	for _, d := range devs {
		t.Logf("%s guid %s transport %s err %v", d.Name, d.GUID, d.Transport, d.Err)
		for _, p := range d.Ports {
			t.Logf("  port %d %s %s mtu %s/%s lid %d netdevs %v", p.Num, p.State, p.LinkLayer, p.ActiveMTU, p.MaxMTU, p.LID, p.Netdevs)
			if p.LinkLayer.RoCE() && p.State.Active() && len(p.Netdevs) > 0 {
				dev, port, err := verbs.DeviceForInterface(p.Netdevs[0])
				if err != nil || dev != d.Name || port != p.Num {
					t.Errorf("DeviceForInterface(%s) = %s, %d, %v; want %s, %d", p.Netdevs[0], dev, port, err, d.Name, p.Num)
				}
			}
		}
	}
}

func TestDeviceResources(t *testing.T) {
	testutil.SkipIfNoRDMA(t)
	dev, port := activeDevice(t)

	ctx, err := verbs.OpenDevice(dev.Name)
	if err != nil {
		t.Fatalf("OpenDevice(%s): %v", dev.Name, err)
	}
	closeLater(t, "context", ctx)
	if ctx.Name() != dev.Name {
		t.Errorf("Name() = %q, want %q", ctx.Name(), dev.Name)
	}
	attr, err := ctx.Attr()
	if err != nil || attr.Ports < 1 || attr.MaxQPWR < 1 || attr.MaxCQE < 1 {
		t.Fatalf("Attr() = %+v, %v", attr, err)
	}
	pi, err := ctx.QueryPort(port.Num)
	if err != nil || pi.Num != port.Num || !pi.State.Active() {
		t.Fatalf("QueryPort(%d) = %+v, %v", port.Num, pi, err)
	}
	if _, err := ctx.QueryPort(0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("QueryPort(0) = %v, want EINVAL", err)
	}

	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	closeLater(t, "pd", pd)

	buf := mmapBuf(t, 1<<16)
	if _, err := pd.RegMR(unsafe.Pointer(&buf[0]), len(buf), verbs.AccessRemoteWrite); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RegMR(remote write without local write) = %v, want EINVAL", err)
	}
	mr, err := pd.RegMR(unsafe.Pointer(&buf[0]), len(buf), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	closeLater(t, "mr", mr)
	if mr.Addr() != uint64(uintptr(unsafe.Pointer(&buf[0]))) || mr.Len() != len(buf) {
		t.Errorf("MR Addr/Len = %#x/%d, want %p/%d", mr.Addr(), mr.Len(), &buf[0], len(buf))
	}
	if sge, err := mr.SGE(16, 32); err != nil || sge.Addr != mr.Addr()+16 || sge.Length != 32 || sge.LKey != mr.LKey() {
		t.Errorf("SGE(16, 32) = %+v, %v", sge, err)
	}

	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatalf("CreateCompChannel: %v", err)
	}
	closeLater(t, "comp channel", ch)
	if ch.Fd() < 0 {
		t.Errorf("Fd() = %d", ch.Fd())
	}
	if fl, err := unix.FcntlInt(uintptr(ch.Fd()), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("comp channel fd flags %#x, %v: want FD_CLOEXEC", fl, err)
	}
	if err := ch.SetNonblock(true); err != nil {
		t.Fatalf("SetNonblock: %v", err)
	}
	if _, err := ch.GetEvent(); !errors.Is(err, verbs.ErrWouldBlock) || !errors.Is(err, unix.EAGAIN) {
		t.Errorf("GetEvent on an idle channel = %v, want ErrWouldBlock/EAGAIN", err)
	}

	cq, err := ctx.CreateCQ(64, ch, 0)
	if err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	closeLater(t, "cq", cq)
	if cq.Size() < 64 {
		t.Errorf("Size() = %d, want >= 64", cq.Size())
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Errorf("ReqNotify: %v", err)
	}
	wc := make([]verbs.WC, 8)
	if n, err := cq.Poll(wc); n != 0 || err != nil {
		t.Errorf("Poll on an empty CQ = %d, %v; want 0, nil", n, err)
	}

	// Parents refuse to close while children are open.
	if err := ctx.Close(); !errors.Is(err, unix.EBUSY) {
		t.Errorf("Context.Close with children = %v, want EBUSY", err)
	}
	if err := pd.Close(); !errors.Is(err, unix.EBUSY) {
		t.Errorf("PD.Close with an MR = %v, want EBUSY", err)
	}
	if err := ch.Close(); !errors.Is(err, unix.EBUSY) {
		t.Errorf("CompChannel.Close with a CQ = %v, want EBUSY", err)
	}

	// Children first, then parents; a second Close is ErrClosed.
	for _, c := range []struct {
		name string
		c    interface{ Close() error }
	}{{"cq", cq}, {"comp channel", ch}, {"mr", mr}, {"pd", pd}, {"context", ctx}} {
		if err := c.c.Close(); err != nil {
			t.Fatalf("Close %s: %v", c.name, err)
		}
		if err := c.c.Close(); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("second Close %s = %v, want ErrClosed", c.name, err)
		}
	}
	if mr.LKey() == 0 && mr.RKey() == 0 {
		t.Log("MR keys are both zero (allowed, but unusual)")
	}
}

// cmEvents reads one event channel and hands out events by type and id,
// keeping the others for later calls: the two ends of a loopback
// connection share the channel, and their events interleave.
type cmEvents struct {
	t       *testing.T
	ch      *verbs.EventChannel
	backlog []*verbs.Event
}

// want returns the first event of type typ for id (any id when nil).
func (e *cmEvents) want(typ verbs.EventType, id *verbs.CMID) *verbs.Event {
	e.t.Helper()
	match := func(ev *verbs.Event) bool {
		return ev.Type == typ && (id == nil || ev.ID == id || ev.Listener == id)
	}
	for i, ev := range e.backlog {
		if match(ev) {
			e.backlog = append(e.backlog[:i], e.backlog[i+1:]...)
			return ev
		}
	}
	deadline := time.Now().Add(eventTimeout)
	for {
		ev, err := e.ch.WaitEvent(time.Until(deadline))
		if err != nil {
			e.t.Fatalf("waiting for %s: %v (backlog %v)", typ, err, e.backlog)
		}
		if match(ev) {
			return ev
		}
		if typ != verbs.EventAddrError && typ != verbs.EventRejected && ev.Err() != nil && (id == nil || ev.ID == id) {
			e.t.Fatalf("waiting for %s, got %v: %v", typ, ev, ev.Err())
		}
		e.backlog = append(e.backlog, ev)
	}
}

// endpoint is one side of a test connection: PD, CQ, MR over mmap memory,
// QP on id.
type endpoint struct {
	id  *verbs.CMID
	pd  *verbs.PD
	ch  *verbs.CompChannel
	cq  *verbs.CQ
	mr  *verbs.MR
	buf []byte
	qp  *verbs.QP
}

// newEndpoint builds the verbs resources for id, which must be bound to a
// device.
func newEndpoint(t *testing.T, id *verbs.CMID) *endpoint {
	t.Helper()
	ctx, err := id.Context()
	if err != nil {
		t.Fatalf("Context: %v", err)
	}
	ep := &endpoint{id: id}
	if ep.pd, err = ctx.AllocPD(); err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	closeLater(t, "pd", ep.pd)
	if ep.ch, err = ctx.CreateCompChannel(); err != nil {
		t.Fatalf("CreateCompChannel: %v", err)
	}
	closeLater(t, "comp channel", ep.ch)
	if ep.cq, err = ctx.CreateCQ(64, ep.ch, 0); err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	closeLater(t, "cq", ep.cq)
	ep.buf = mmapBuf(t, 1<<16)
	if ep.mr, err = ep.pd.RegMR(unsafe.Pointer(&ep.buf[0]), len(ep.buf), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	closeLater(t, "mr", ep.mr)
	ep.qp, err = id.CreateQP(ep.pd, verbs.QPConfig{SendCQ: ep.cq, RecvCQ: ep.cq, MaxSendWR: 16, MaxRecvWR: 16})
	if err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	closeLater(t, "cm id", id) // closes the QP too; runs before the CQ/PD cleanups
	if st, err := ep.qp.State(); err != nil || st != verbs.QPInit {
		t.Errorf("new QP state = %v, %v; want INIT", st, err)
	}
	return ep
}

// pollOne polls cq until one completion arrives.
func pollOne(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(eventTimeout)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		if n == 1 {
			return wc[0]
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("no completion")
	return verbs.WC{}
}

// rdmaAddr returns a local IPv4 address whose interface an RDMA device
// serves, or 127.0.0.1 (rdma_cm binds loopback to the first active
// device).
func rdmaAddr(t *testing.T) netip.Addr {
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		if _, _, err := verbs.DeviceForInterface(ifi.Name); err != nil {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() {
					t.Logf("using %s on %s", ip.Unmap(), ifi.Name)
					return ip.Unmap()
				}
			}
		}
	}
	t.Log("no interface served by an RDMA device has an IPv4 address; using 127.0.0.1")
	return netip.MustParseAddr("127.0.0.1")
}

// listen binds a listener on addr with an ephemeral port.
func listen(t *testing.T, ch *verbs.EventChannel, addr netip.Addr) (*verbs.CMID, netip.AddrPort) {
	t.Helper()
	lis, err := ch.CreateID()
	if err != nil {
		t.Fatalf("CreateID: %v", err)
	}
	closeLater(t, "listener", lis)
	if err := lis.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	if err := lis.Listen(8); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ap := lis.LocalAddr()
	if ap.Port() == 0 {
		t.Fatalf("listener LocalAddr = %v, want a port", ap)
	}
	return lis, ap
}

// dial resolves dst on a new id and builds its endpoint, ready to Connect.
func dial(t *testing.T, ev *cmEvents, dst netip.AddrPort) *endpoint {
	t.Helper()
	id, err := ev.ch.CreateID()
	if err != nil {
		t.Fatalf("CreateID: %v", err)
	}
	if err := id.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
		id.Close()
		t.Fatalf("ResolveAddr: %v", err)
	}
	ev.want(verbs.EventAddrResolved, id)
	ep := newEndpoint(t, id)
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		t.Fatalf("ResolveRoute: %v", err)
	}
	ev.want(verbs.EventRouteResolved, id)
	return ep
}

func newEventChannel(t *testing.T) *cmEvents {
	t.Helper()
	ch, err := verbs.NewEventChannel()
	if err != nil {
		t.Fatalf("NewEventChannel: %v", err)
	}
	closeLater(t, "event channel", ch) // registered first, so closed last
	if fl, err := unix.FcntlInt(uintptr(ch.Fd()), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("event channel fd flags %#x, %v: want FD_CLOEXEC", fl, err)
	}
	return &cmEvents{t: t, ch: ch}
}

// TestLoopbackWriteImm connects two RC QPs over rdma_cm on a local address,
// passes the server's MR in the accept private data and moves data with
// RDMA WRITE WITH IMMEDIATE, then disconnects.
func TestLoopbackWriteImm(t *testing.T) {
	testutil.SkipIfNoRDMA(t)
	ev := newEventChannel(t)
	lis, ap := listen(t, ev.ch, rdmaAddr(t))

	cli := dial(t, ev, ap)
	hello := []byte("osf-hello")
	if err := cli.id.Connect(verbs.ConnParam{PrivateData: hello}); err != nil {
		t.Fatalf("Connect: %v", err)
	}

	req := ev.want(verbs.EventConnectRequest, lis)
	if req.Listener != lis || req.ID == nil || req.ID == lis {
		t.Fatalf("CONNECT_REQUEST ids: listener %p (want %p), id %p", req.Listener, lis, req.ID)
	}
	if !bytes.HasPrefix(req.PrivateData, hello) {
		t.Fatalf("request private data %q does not start with %q", req.PrivateData, hello)
	}
	if req.RemoteQPNum != cli.qp.Num() {
		t.Errorf("request RemoteQPNum = %d, want %d", req.RemoteQPNum, cli.qp.Num())
	}
	srv := newEndpoint(t, req.ID)
	t.Logf("server side: local %v remote %v port %d; client local %v",
		srv.id.LocalAddr(), srv.id.RemoteAddr(), srv.id.Port(), cli.id.LocalAddr())
	if srv.id.LocalAddr().Port() != ap.Port() {
		t.Errorf("server LocalAddr = %v, want port %d", srv.id.LocalAddr(), ap.Port())
	}
	const nrecv = 4
	for i := range nrecv {
		if err := srv.qp.PostRecv(uint64(verbs.MakeWRID(1, 7, uint32(i))), verbs.SGE{}); err != nil {
			t.Fatalf("PostRecv: %v", err)
		}
	}
	if err := srv.cq.ReqNotify(false); err != nil {
		t.Fatalf("ReqNotify: %v", err)
	}

	// Accept private data: the region as addr(8) rkey(4) len(4), little
	// endian, then a length-free layout is all the peer needs.
	acc := make([]byte, 16)
	binary.LittleEndian.PutUint64(acc[0:], srv.mr.Addr())
	binary.LittleEndian.PutUint32(acc[8:], srv.mr.RKey())
	binary.LittleEndian.PutUint32(acc[12:], uint32(srv.mr.Len()))
	if err := srv.id.Accept(verbs.ConnParam{PrivateData: acc}); err != nil {
		t.Fatalf("Accept: %v", err)
	}
	ev.want(verbs.EventEstablished, srv.id)
	est := ev.want(verbs.EventEstablished, cli.id)
	if len(est.PrivateData) < len(acc) || !bytes.Equal(est.PrivateData[:len(acc)], acc) {
		t.Fatalf("ESTABLISHED private data %x does not start with %x", est.PrivateData, acc)
	}
	raddr := binary.LittleEndian.Uint64(est.PrivateData[0:])
	rkey := binary.LittleEndian.Uint32(est.PrivateData[8:])
	for _, qp := range []*verbs.QP{cli.qp, srv.qp} {
		if st, err := qp.State(); err != nil || !st.CanSend() {
			t.Errorf("QP %d state after ESTABLISHED = %v, %v; want RTS", qp.Num(), st, err)
		}
	}

	// Write with data.
	msg := []byte("hello over RDMA WRITE WITH IMMEDIATE")
	copy(cli.buf, msg)
	sge, err := cli.mr.SGE(0, len(msg))
	if err != nil {
		t.Fatal(err)
	}
	const off = 128
	if err := cli.qp.PostWriteImm(42, sge, raddr+off, rkey, 0xdeadbeef, true); err != nil {
		t.Fatalf("PostWriteImm: %v", err)
	}
	wc := pollOne(t, cli.cq)
	if wc.WRID != 42 || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMAWrite {
		t.Fatalf("sender completion %+v (%v)", wc, wc.Status)
	}

	// The receiver sleeps on its completion channel, as the progress
	// engine will.
	fds := []unix.PollFd{{Fd: int32(srv.ch.Fd()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(eventTimeout/time.Millisecond)); n != 1 || err != nil {
		t.Fatalf("poll on the completion channel = %d, %v", n, err)
	}
	gotCQ, err := srv.ch.GetEvent()
	if err != nil || gotCQ != srv.cq {
		t.Fatalf("GetEvent = %p, %v; want %p", gotCQ, err, srv.cq)
	}
	srv.cq.AckEvents(1)
	wc = pollOne(t, srv.cq)
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm || !wc.HasImm ||
		wc.ImmData != 0xdeadbeef || wc.ByteLen != uint32(len(msg)) || wc.QPNum != srv.qp.Num() {
		t.Fatalf("receiver completion %+v (%v, %v)", wc, wc.Status, wc.Opcode)
	}
	if id := verbs.WRID(wc.WRID); id.Kind() != 1 || id.Conn() != 7 || id.Seq() != 0 {
		t.Errorf("receiver WRID %#x = (%d, %d, %d)", wc.WRID, id.Kind(), id.Conn(), id.Seq())
	}
	if got := srv.buf[off : off+len(msg)]; !bytes.Equal(got, msg) {
		t.Fatalf("server buffer = %q, want %q", got, msg)
	}

	// A zero-length write with immediate: only the immediate travels.
	if err := cli.qp.PostWriteImm(43, verbs.SGE{}, raddr, rkey, 7, true); err != nil {
		t.Fatalf("PostWriteImm(empty): %v", err)
	}
	if wc := pollOne(t, cli.cq); wc.WRID != 43 || wc.Status != verbs.WCSuccess {
		t.Fatalf("sender completion %+v", wc)
	}
	if wc := pollOne(t, srv.cq); wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ImmData != 7 || wc.ByteLen != 0 {
		t.Fatalf("receiver completion %+v", wc)
	}

	// An unsignaled write followed by a signaled one: one completion.
	if err := cli.qp.PostWriteImm(44, sge, raddr, rkey, 8, false); err != nil {
		t.Fatal(err)
	}
	if err := cli.qp.PostSend(verbs.SendWR{ID: 45, Opcode: verbs.OpWrite, Local: sge, RemoteAddr: raddr + 4096, RKey: rkey, Flags: verbs.SendSignaled}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, cli.cq); wc.WRID != 45 {
		t.Fatalf("expected only the signaled completion, got %+v", wc)
	}
	if wc := pollOne(t, srv.cq); wc.ImmData != 8 {
		t.Fatalf("receiver completion %+v", wc)
	}

	// Disconnect: the server hears it and answers with its own
	// Disconnect (as the engine does); only then does the client hear
	// DISCONNECTED (the IB CM's DREQ/DREP: on a real device it does not
	// come before the server answers). The QP is in ERR.
	if err := cli.id.Disconnect(); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	ev.want(verbs.EventDisconnected, srv.id)
	if err := srv.id.Disconnect(); err != nil {
		t.Fatalf("server Disconnect: %v", err)
	}
	ev.want(verbs.EventDisconnected, cli.id)
	if st, err := cli.qp.State(); err != nil || !st.Failed() {
		t.Errorf("client QP after disconnect = %v, %v; want ERR", st, err)
	}
	// The server's remaining receive is flushed.
	if wc := pollOne(t, srv.cq); !wc.Status.Flushed() {
		t.Errorf("leftover receive completed with %v, want a flush", wc.Status)
	}
}

func TestConnectRejected(t *testing.T) {
	testutil.SkipIfNoRDMA(t)
	ev := newEventChannel(t)
	lis, ap := listen(t, ev.ch, rdmaAddr(t))
	cli := dial(t, ev, ap)
	if err := cli.id.Connect(verbs.ConnParam{PrivateData: make([]byte, verbs.MaxConnectPrivateData+1)}); !errors.Is(err, verbs.ErrPrivateDataTooLong) {
		t.Fatalf("Connect with 57 bytes of private data = %v, want ErrPrivateDataTooLong", err)
	}
	if err := cli.id.Connect(verbs.ConnParam{}); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	req := ev.want(verbs.EventConnectRequest, lis)
	closeLater(t, "request id", req.ID)
	why := []byte("osf: go away")
	if err := req.ID.Reject(why); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	rej := ev.want(verbs.EventRejected, cli.id)
	err := rej.Err()
	if !errors.Is(err, verbs.ErrRejected) || !errors.Is(err, unix.ECONNREFUSED) && rej.Status >= 0 {
		t.Errorf("REJECTED Err() = %v (status %d), want ErrRejected", err, rej.Status)
	}
	if !bytes.HasPrefix(rej.PrivateData, why) {
		t.Errorf("reject private data %q does not start with %q", rej.PrivateData, why)
	}
}

func TestConnectNoListener(t *testing.T) {
	testutil.SkipIfNoRDMA(t)
	ev := newEventChannel(t)
	addr := rdmaAddr(t)
	// Find a free port: listen, note the port, close.
	lis, ap := listen(t, ev.ch, addr)
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	cli := dial(t, ev, ap)
	if err := cli.id.Connect(verbs.ConnParam{}); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	deadline := time.Now().Add(eventTimeout)
	for {
		e, err := ev.ch.WaitEvent(time.Until(deadline))
		if err != nil {
			t.Fatalf("waiting for a failure: %v", err)
		}
		if e.ID != cli.id {
			continue
		}
		err = e.Err()
		if err == nil {
			t.Fatalf("connect to a port without listener gave %v", e)
		}
		if !errors.Is(err, verbs.ErrRejected) && !errors.Is(err, verbs.ErrUnreachable) {
			t.Errorf("%v: Err() = %v, want ErrRejected or ErrUnreachable", e, err)
		}
		t.Logf("no listener: %v", err)
		return
	}
}

func TestResolveUnreachable(t *testing.T) {
	testutil.SkipIfNoRDMA(t)
	ev := newEventChannel(t)
	id, err := ev.ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "id", id)
	if err := id.ResolveRoute(time.Second); !errors.Is(err, unix.EINVAL) {
		t.Errorf("ResolveRoute before ResolveAddr = %v, want EINVAL", err)
	}
	if _, err := id.Context(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Context before ResolveAddr = %v, want EINVAL", err)
	}
	// TEST-NET-1 is not routable: the resolution fails one way or another.
	dst := netip.MustParseAddrPort("192.0.2.1:4791")
	if err := id.ResolveAddr(netip.AddrPort{}, dst, 500*time.Millisecond); err != nil {
		if !errors.Is(err, verbs.ErrUnreachable) && !errors.Is(err, verbs.ErrNoDevice) {
			t.Logf("ResolveAddr(%v) failed at once: %v", dst, err)
		}
		return
	}
	e, err := ev.ch.WaitEvent(eventTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if e.Type == verbs.EventAddrResolved {
		t.Skipf("%v resolved on this network", dst)
	}
	if e.Type != verbs.EventAddrError || !errors.Is(e.Err(), verbs.ErrUnreachable) {
		t.Errorf("got %v (%v), want ADDR_ERROR satisfying ErrUnreachable", e, e.Err())
	}
}
