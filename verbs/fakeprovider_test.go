package verbs

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// These tests drive the cgo shim through a fake provider (fakeprovider.go),
// so the translation of work requests and completions is checked without
// an RDMA device.

func TestFakePollTranslation(t *testing.T) {
	p := newFakeProvider()
	defer p.free()
	q := p.cq()
	defer p.releaseCQ(q)

	in := []WC{
		{WRID: 1, Status: WCSuccess, Opcode: WCRDMAWrite, QPNum: 9},
		{WRID: uint64(MakeWRID(2, 3, 4)), Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: 1500, ImmData: 0xdeadbeef, HasImm: true, QPNum: 9},
		{WRID: 3, Status: WCRetryExcErr, Opcode: WCSend, QPNum: 9},
		{WRID: 4, Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: 0, ImmData: 1, HasImm: true, QPNum: 9},
	}
	for _, wc := range in {
		if !p.addWC(wc) {
			t.Fatal("fake queue full")
		}
	}
	wc := make([]WC, 3)
	n, err := q.Poll(wc)
	if err != nil || n != 3 {
		t.Fatalf("Poll = %d, %v; want 3, nil", n, err)
	}
	for i := range n {
		if wc[i] != in[i] {
			t.Errorf("wc[%d] = %+v, want %+v", i, wc[i], in[i])
		}
	}
	n, err = q.Poll(wc)
	if err != nil || n != 1 || wc[0] != in[3] {
		t.Fatalf("second Poll = %d, %v, %+v", n, err, wc[0])
	}
	n, err = q.Poll(wc)
	if err != nil || n != 0 {
		t.Fatalf("Poll on an empty CQ = %d, %v; want 0, nil", n, err)
	}
	if n, err := q.Poll(nil); n != 0 || err != nil {
		t.Errorf("Poll(nil) = %d, %v", n, err)
	}
}

func TestFakePollMoreThanBatch(t *testing.T) {
	// Poll loops over the shim's 16-entry batches until the caller's
	// slice is full or the CQ is empty.
	p := newFakeProvider()
	defer p.free()
	q := p.cq()
	defer p.releaseCQ(q)
	for i := range 40 {
		if !p.addWC(WC{WRID: uint64(i), Opcode: WCSend}) {
			t.Fatal("fake queue full")
		}
	}
	wc := make([]WC, 35)
	n, err := q.Poll(wc)
	if err != nil || n != 35 {
		t.Fatalf("Poll = %d, %v; want 35", n, err)
	}
	for i := range n {
		if wc[i].WRID != uint64(i) {
			t.Errorf("wc[%d].WRID = %d", i, wc[i].WRID)
		}
	}
	if p.pending() != 5 {
		t.Errorf("%d completions left in the fake CQ, want 5", p.pending())
	}
	n, err = q.Poll(wc)
	if err != nil || n != 5 || wc[4].WRID != 39 {
		t.Fatalf("second Poll = %d, %v", n, err)
	}
}

func TestFakePollError(t *testing.T) {
	p := newFakeProvider()
	defer p.free()
	q := p.cq()
	defer p.releaseCQ(q)
	p.setPollFail(-int(unix.EIO))
	if n, err := q.Poll(make([]WC, 4)); n != 0 || !errors.Is(err, unix.EIO) {
		t.Errorf("Poll with a failing provider = %d, %v; want EIO", n, err)
	}
}

func TestFakeReqNotify(t *testing.T) {
	p := newFakeProvider()
	defer p.free()
	q := p.cq()
	defer p.releaseCQ(q)
	if err := q.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	if n, sol := p.notifies(); n != 1 || !sol {
		t.Errorf("notify calls %d solicited %v", n, sol)
	}
	if err := q.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if n, sol := p.notifies(); n != 2 || sol {
		t.Errorf("notify calls %d solicited %v", n, sol)
	}
	p.setPostFail(int(unix.EINVAL))
	if err := q.ReqNotify(false); !errors.Is(err, unix.EINVAL) {
		t.Errorf("ReqNotify with a failing provider = %v", err)
	}
	if q.Size() != 8 {
		t.Errorf("Size() = %d", q.Size())
	}
}

func TestFakePostWriteImm(t *testing.T) {
	p := newFakeProvider()
	defer p.free()
	qp := p.qp()
	if qp.Num() != 0x1234 {
		t.Errorf("Num() = %#x", qp.Num())
	}

	local := SGE{Addr: 0x7f0000001000, Length: 300, LKey: 0x11}
	if err := qp.PostWriteImm(77, local, 0x55550000, 0x22, 0x01020304, true); err != nil {
		t.Fatal(err)
	}
	got := p.lastSend()
	want := fakeSend{
		WRID: 77, NumSGE: 1, Opcode: OpWriteImm, Flags: SendSignaled,
		ImmWire: [4]byte{1, 2, 3, 4}, RemoteAddr: 0x55550000, RKey: 0x22, SGE: local,
	}
	if got != want {
		t.Errorf("posted %+v\nwant   %+v", got, want)
	}

	// Empty write with immediate, unsignaled: no SGE at all.
	if err := qp.PostWriteImm(78, SGE{}, 0x55550000, 0x22, 9, false); err != nil {
		t.Fatal(err)
	}
	got = p.lastSend()
	if got.NumSGE != 0 || got.Flags != 0 || got.ImmWire != [4]byte{0, 0, 0, 9} || got.HasNext {
		t.Errorf("empty write imm posted %+v", got)
	}

	p.setPostFail(int(unix.ENOMEM))
	if err := qp.PostWriteImm(79, local, 0, 0, 0, true); !errors.Is(err, unix.ENOMEM) {
		t.Errorf("PostWriteImm on a full queue = %v, want ENOMEM", err)
	}
	if p.sends() != 3 {
		t.Errorf("provider saw %d sends", p.sends())
	}
}

func TestFakePostSend(t *testing.T) {
	p := newFakeProvider()
	defer p.free()
	qp := p.qp()
	local := SGE{Addr: 0x1000, Length: 8, LKey: 5}
	tests := []struct {
		wr   SendWR
		want fakeSend
	}{
		{
			SendWR{ID: 1, Opcode: OpWrite, Local: local, RemoteAddr: 0x2000, RKey: 6, Imm: 0xffff, Flags: SendSignaled | SendInline},
			// Imm is ignored without an *Imm opcode.
			fakeSend{WRID: 1, NumSGE: 1, Opcode: OpWrite, Flags: SendSignaled | SendInline, RemoteAddr: 0x2000, RKey: 6, SGE: local},
		},
		{
			SendWR{ID: 2, Opcode: OpSendImm, Local: local, Imm: 0xa0b0c0d0, Flags: SendSolicited},
			fakeSend{WRID: 2, NumSGE: 1, Opcode: OpSendImm, Flags: SendSolicited, ImmWire: [4]byte{0xa0, 0xb0, 0xc0, 0xd0}, SGE: local},
		},
		{
			SendWR{ID: 3, Opcode: OpRead, Local: local, RemoteAddr: 0x3000, RKey: 7, Flags: SendFence},
			fakeSend{WRID: 3, NumSGE: 1, Opcode: OpRead, Flags: SendFence, RemoteAddr: 0x3000, RKey: 7, SGE: local},
		},
		{
			SendWR{ID: 4, Opcode: OpSend},
			fakeSend{WRID: 4, NumSGE: 0, Opcode: OpSend},
		},
	}
	for _, tt := range tests {
		if err := qp.PostSend(tt.wr); err != nil {
			t.Fatalf("PostSend(%+v): %v", tt.wr, err)
		}
		if got := p.lastSend(); got != tt.want {
			t.Errorf("PostSend(%v)\nposted %+v\nwant   %+v", tt.wr.Opcode, got, tt.want)
		}
	}
	if err := qp.PostSend(SendWR{Opcode: WROpcode(42)}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("PostSend(bad opcode) = %v, want EINVAL", err)
	}
	if p.sends() != len(tests) {
		t.Errorf("provider saw %d sends, want %d (the bad opcode must not reach it)", p.sends(), len(tests))
	}
}

func TestFakePostRecv(t *testing.T) {
	p := newFakeProvider()
	defer p.free()
	qp := p.qp()
	if err := qp.PostRecv(5, SGE{}); err != nil {
		t.Fatal(err)
	}
	if got := p.lastRecv(); got.WRID != 5 || got.NumSGE != 0 || got.HasNext {
		t.Errorf("empty recv posted %+v", got)
	}
	sge := SGE{Addr: 0x4000, Length: 64, LKey: 3}
	if err := qp.PostRecv(6, sge); err != nil {
		t.Fatal(err)
	}
	if got := p.lastRecv(); got.WRID != 6 || got.NumSGE != 1 || got.SGE != sge {
		t.Errorf("recv posted %+v", got)
	}
	p.setPostFail(-int(unix.ENOMEM)) // some providers return -errno
	if err := qp.PostRecv(7, sge); !errors.Is(err, unix.ENOMEM) {
		t.Errorf("PostRecv on a full queue = %v, want ENOMEM", err)
	}
	if p.recvs() != 3 {
		t.Errorf("provider saw %d recvs", p.recvs())
	}
}

// TestFakeDataPathDoesNotAllocate guards the progress engine's hot path:
// posting and polling must not allocate.
func TestFakeDataPathDoesNotAllocate(t *testing.T) {
	p := newFakeProvider()
	defer p.free()
	q := p.cq()
	defer p.releaseCQ(q)
	qp := p.qp()
	wc := make([]WC, 16)
	sge := SGE{Addr: 0x1000, Length: 64, LKey: 1}
	allocs := testing.AllocsPerRun(100, func() {
		p.addWC(WC{WRID: 1, Opcode: WCRecvRDMAWithImm, HasImm: true, ImmData: 3})
		if n, err := q.Poll(wc); n != 1 || err != nil {
			t.Fatalf("Poll = %d, %v", n, err)
		}
		if err := qp.PostWriteImm(2, sge, 0x2000, 3, 4, true); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostRecv(5, SGE{}); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostSend(SendWR{ID: 6, Opcode: OpWrite, Local: sge, Flags: SendSignaled}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("data path allocates %.1f times per iteration", allocs)
	}
}
