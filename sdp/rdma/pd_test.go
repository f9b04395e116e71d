package rdma

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/verbs"
)

// TestDeviceCrossWrite: a remote peer can write only its own connection's
// rings. Two connections A and B from one process (cli) into another
// (srv); the client end of A, playing a hostile peer, posts an RDMA write
// on A's QP aimed at B's server ring with the rkey and address B's client
// learned from the handshake. The server's NIC refuses it (a remote access
// error: each segment's registration and its connection's QP are in a
// protection domain of their own): A is reset, B's ring holds none of the
// hostile bytes and B carries bytes both ways.
func TestDeviceCrossWrite(t *testing.T) {
	cli, lfd, addr := startServerClient(t)
	var conns [2][2]*fakeApp
	for i := range conns {
		cep, err := cli.Dial(addr, netip.AddrPortFrom(addr.Addr(), uint16(40006+i)), 64<<10, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns[i] = acceptBoth(t, lfd, addr, cep)
	}
	a, b := conns[0], conns[1]
	defer func() {
		for _, c := range conns {
			c[0].close(true)
			c[1].close(true)
		}
	}()

	// The client ends' streams, found by their segments' memfds.
	find := func(app *fakeApp) (s *stream, l *verbsLink) {
		dev, ino := app.seg.FileID()
		_ = cli.eng.Do(func() {
			for _, c := range cli.conns {
				if d, i := c.seg.FileID(); d == dev && i == ino {
					s = c
					l, _ = c.link.(*verbsLink)
				}
			}
		})
		if l == nil || l.qp == nil {
			t.Fatalf("no RDMA link for the client segment %d:%d", dev, ino)
		}
		return s, l
	}
	sa, la := find(a[0])
	_, lb := find(b[0])

	const off, n = 4096, 64
	hostile := make([]byte, n)
	for i := range hostile {
		hostile[i] = 0xa5
	}
	// The source: A's own registered send ring (the application's bytes
	// there go nowhere until it moves its head).
	copy(a[0].seg.RingData(0)[off:], hostile)
	target := b[1].seg.RingData(0)[off : off+n] // B's server ring the client writes
	if !slices.Equal(target, make([]byte, n)) {
		t.Fatal("B's server ring is not zero before the write")
	}
	var perr error
	_ = cli.eng.Do(func() {
		sge, err := la.mr.mr[0].SGE(off, n)
		if err != nil {
			perr = err
			return
		}
		// Unsignaled: only a refused write completes (with an error).
		perr = la.qp.PostSend(verbs.SendWR{
			ID: uint64(verbs.MakeWRID(wrWrite, sa.id, 0)), Opcode: verbs.OpWrite, Local: sge,
			RemoteAddr: lb.rbase + off, RKey: lb.rkey,
		})
	})
	if perr != nil {
		t.Fatalf("post the hostile write: %v", perr)
	}
	buf := make([]byte, 16)
	_, err := a[0].read(buf, 10*time.Second)
	if !errors.Is(err, unix.ECONNRESET) {
		t.Errorf("A's client read after its QP wrote into B's ring: %v, want ECONNRESET (the write refused, A reset)", err)
	}
	if slices.Equal(target, hostile) {
		t.Fatal("A's peer wrote into B's ring through A's QP")
	}
	if !slices.Equal(target, make([]byte, n)) {
		t.Errorf("B's server ring changed at %d", off)
	}
	exchangeBoth(t, b, 256<<10, 81, 30*time.Second)
}

// TestDeviceWireFailReleases: a link's QP that cannot be made (here on a
// CM id bound to no device) fails newVerbsWire with an error, having
// released the domain, CQ and buffers it made; it used to release through
// the nil result of its error return and panic the engine (the guests'
// unit run hit it when a link's accept met a resource error, which a
// remote peer can cause).
func TestDeviceWireFailReleases(t *testing.T) {
	tr, _ := startDevice(t)
	ch, err := verbs.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	id, err := ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	var w *verbsWire
	var werr error
	if err := tr.eng.Do(func() {
		for _, d := range tr.devs {
			w, werr = newVerbsWire(tr.eng, id, d, tr.cfg.HiddenBase)
			return
		}
		werr = errors.New("no device opened")
	}); err != nil {
		t.Fatal(err)
	}
	if werr == nil || w != nil {
		t.Fatalf("newVerbsWire on an unbound id: %v, %v; want an error", w, werr)
	}
}
