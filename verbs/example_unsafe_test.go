package verbs_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/verbs"
)

// Example shows the active side of a connection: resolve, build the verbs
// resources, connect, write with immediate and poll. It is compiled but not
// run (it needs a peer).
func Example() {
	if err := dialAndWrite(netip.MustParseAddrPort("10.0.0.2:5000")); err != nil {
		if errors.Is(err, verbs.ErrNoDevice) || errors.Is(err, verbs.ErrRejected) ||
			errors.Is(err, verbs.ErrUnreachable) {
			fmt.Println("fall back to TCP:", err)
		}
	}
}

// waitFor returns the next event on ch, or its failure.
func waitFor(ch *verbs.EventChannel, want verbs.EventType) (*verbs.Event, error) {
	ev, err := ch.WaitEvent(5 * time.Second)
	if err != nil {
		return nil, err
	}
	if err := ev.Err(); err != nil {
		return nil, err
	}
	if ev.Type != want {
		return nil, fmt.Errorf("got %v, want %v", ev, want)
	}
	return ev, nil
}

func dialAndWrite(dst netip.AddrPort) error {
	ch, err := verbs.NewEventChannel()
	if err != nil {
		return err // errors.Is(err, verbs.ErrNoDevice) without RDMA
	}
	defer ch.Close()
	id, err := ch.CreateID()
	if err != nil {
		return err
	}
	defer id.Close() // also closes the QP
	if err := id.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
		return err
	}
	if _, err := waitFor(ch, verbs.EventAddrResolved); err != nil {
		return err
	}

	ctx, err := id.Context()
	if err != nil {
		return err
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Close()
	cq, err := ctx.CreateCQ(256, nil, 0)
	if err != nil {
		return err
	}
	defer cq.Close()
	// NIC-visible memory comes from mmap, never the Go heap.
	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	mr, err := pd.RegMR(unsafe.Pointer(&buf[0]), len(buf), verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Close()
	qp, err := id.CreateQP(pd, verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 128, MaxRecvWR: 128})
	if err != nil {
		return err
	}

	if err := id.ResolveRoute(time.Second); err != nil {
		return err
	}
	if _, err := waitFor(ch, verbs.EventRouteResolved); err != nil {
		return err
	}
	hello := []byte{1, 0, 0, 0} // the caller's own format, with its own lengths
	if err := id.Connect(verbs.ConnParam{PrivateData: hello}); err != nil {
		return err
	}
	ev, err := waitFor(ch, verbs.EventEstablished)
	if err != nil {
		return err
	}
	if len(ev.PrivateData) < 12 {
		return errors.New("short accept")
	}
	raddr := binary.LittleEndian.Uint64(ev.PrivateData[0:])
	rkey := binary.LittleEndian.Uint32(ev.PrivateData[8:])

	n := copy(buf, "hello")
	sge, err := mr.SGE(0, n)
	if err != nil {
		return err
	}
	wrid := verbs.MakeWRID(1, 0, 0)
	if err := qp.PostWriteImm(uint64(wrid), sge, raddr, rkey, uint32(n), true); err != nil {
		return err
	}
	wc := make([]verbs.WC, 16)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		k, err := cq.Poll(wc)
		if err != nil {
			return err
		}
		for _, c := range wc[:k] {
			if !c.Status.OK() {
				return fmt.Errorf("write %d failed: %v", verbs.WRID(c.WRID).Seq(), c.Status)
			}
			if verbs.WRID(c.WRID) == wrid {
				return id.Disconnect()
			}
		}
	}
	return verbs.ErrTimeout
}
