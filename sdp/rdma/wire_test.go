package rdma

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"

	"github.com/osfproject/osf/verbs"
)

func TestConnectDataLayout(t *testing.T) {
	d := ConnectData{
		RingBytes: 1 << 20,
		RKey:      0x11223344,
		RingBase:  0x0102030405060708,
		Client:    netip.MustParseAddrPort("10.77.0.2:40000"),
		Server:    netip.MustParseAddrPort("10.77.0.1:5001"),
	}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := "5153" + "02" + "00" + "14" + "00" + "9c40" + "1389" + "0000" + "11223344" + "0102030405060708" +
		"0a4d0002" + "000000000000000000000000" + "0a4d0001" + "000000000000000000000000"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("layout\n got %s\nwant %s", got, want)
	}
	if len(b) != SizeofConnectData || SizeofConnectData > verbs.MaxConnectPrivateData {
		t.Fatalf("%d bytes; the REQ carries %d", len(b), verbs.MaxConnectPrivateData)
	}
}

func TestConnectDataRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    ConnectData
	}{
		{"v4", ConnectData{RingBytes: 4096, RKey: 1, RingBase: 4096, Client: netip.MustParseAddrPort("1.2.3.4:1"), Server: netip.MustParseAddrPort("5.6.7.8:65535")}},
		{"v6", ConnectData{RingBytes: 64 << 20, RKey: ^uint32(0), RingBase: ^uint64(0), Client: netip.MustParseAddrPort("[fd00::1]:33000"), Server: netip.MustParseAddrPort("[fd00::2]:80")}},
		{"v4-mapped is v4", ConnectData{RingBytes: 1 << 16, Client: netip.MustParseAddrPort("[::ffff:1.2.3.4]:9"), Server: netip.MustParseAddrPort("5.6.7.8:10")}},
		{"link v6", ConnectData{RingBytes: 4096, Link: true, Client: netip.MustParseAddrPort("[fd00::1]:1"), Server: netip.MustParseAddrPort("[fd00::2]:2")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.d.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			// Over IB/RoCE the server gets the REQ's full private data,
			// zero-padded.
			padded := append(b, make([]byte, 200)...)
			got, err := DecodeConnectData(padded)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.d
			want.Client = netip.AddrPortFrom(want.Client.Addr().Unmap(), want.Client.Port())
			if got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestConnectDataErrors(t *testing.T) {
	good, _ := ConnectData{RingBytes: 4096, Client: netip.MustParseAddrPort("1.2.3.4:1"), Server: netip.MustParseAddrPort("5.6.7.8:2")}.Marshal()
	mut := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short", good[:55]},
		{"empty", nil},
		{"magic", mut(func(b []byte) { b[0] = 'X' })},
		{"version", mut(func(b []byte) { b[2] = WireVersion + 1 })},
		{"flags", mut(func(b []byte) { b[3] = 0x80 })},
		{"flag 2", mut(func(b []byte) { b[3] = 0x4 })},
		{"ring too small", mut(func(b []byte) { b[4] = 11 })},
		{"ring too large", mut(func(b []byte) { b[4] = 27 })},
		{"ring shift huge", mut(func(b []byte) { b[4] = 200 })},
		{"reserved 5", mut(func(b []byte) { b[5] = 1 })},
		{"reserved 10", mut(func(b []byte) { b[10] = 1 })},
		{"v4 trailing bytes", mut(func(b []byte) { b[30] = 1 })},
		{"v4-mapped in v6", mut(func(b []byte) {
			b[3] = flagV6
			copy(b[24:40], netip.MustParseAddr("::ffff:1.2.3.4").AsSlice())
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeConnectData(tc.b); !errors.Is(err, ErrWire) {
				t.Fatalf("err %v, want ErrWire", err)
			}
		})
	}
	for _, d := range []ConnectData{
		{RingBytes: 5000, Client: netip.MustParseAddrPort("1.2.3.4:1"), Server: netip.MustParseAddrPort("5.6.7.8:2")},
		{RingBytes: 4096, Client: netip.MustParseAddrPort("1.2.3.4:1"), Server: netip.MustParseAddrPort("[::1]:2")},
		{RingBytes: 4096},
	} {
		if _, err := d.Marshal(); !errors.Is(err, ErrWire) {
			t.Errorf("Marshal(%+v): err %v, want ErrWire", d, err)
		}
	}
}

func TestAcceptData(t *testing.T) {
	d := AcceptData{RingBytes: 256 << 10, RKey: 0xdeadbeef, RingBase: 0x7f0000001000}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := "5153" + "02" + "00" + "12" + "000000" + "deadbeef" + "00000000" + "00007f0000001000"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("layout\n got %s\nwant %s", got, want)
	}
	got, err := DecodeAcceptData(append(b, make([]byte, 196-len(b))...))
	if err != nil || got != d {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := 3; i < 16; i++ {
		if i == 4 || (i >= 8 && i < 12) {
			continue
		}
		bad := bytes.Clone(b)
		bad[i] = 1
		if _, err := DecodeAcceptData(bad); !errors.Is(err, ErrWire) {
			t.Errorf("reserved byte %d set: err %v", i, err)
		}
	}
	if _, err := DecodeAcceptData(b[:23]); !errors.Is(err, ErrWire) {
		t.Errorf("short: %v", err)
	}
}

func TestReject(t *testing.T) {
	for _, c := range []RejectCode{RejectNoListener, RejectBacklog, RejectBadHello, RejectResource, RejectSetup} {
		got, ok := DecodeReject(append(c.Marshal(), make([]byte, 144)...))
		if !ok || got != c {
			t.Errorf("%v: got %v %v", c, got, ok)
		}
		if c.String() == "" {
			t.Errorf("%d has no name", c)
		}
	}
	for _, b := range [][]byte{nil, {'Q', 'S', WireVersion}, {'Q', 'S', WireVersion + 1, 1}, {'X', 'S', WireVersion, 1}, {'Q', 'S', WireVersion, 0}, make([]byte, 148)} {
		if _, ok := DecodeReject(b); ok {
			t.Errorf("DecodeReject(%x) accepted", b)
		}
	}
}

func TestImm(t *testing.T) {
	for _, tc := range []struct {
		kind  ImmKind
		value uint64
		imm   uint32
	}{
		{ImmData, 1, 0x00000001},
		{ImmData, 1<<28 + 5, 0x00000005},
		{ImmCredit, 0xfffffff, 0x1fffffff},
		{ImmFlags, FlagFIN, 0x20000001},
		{ImmClose, CloseAbort, 0x30000001},
	} {
		if got := MakeImm(tc.kind, tc.value); got != tc.imm {
			t.Errorf("MakeImm(%v, %#x) = %#x, want %#x", tc.kind, tc.value, got, tc.imm)
		}
		k, v := ParseImm(tc.imm)
		if k != tc.kind || uint64(v) != tc.value&ImmValueMask {
			t.Errorf("ParseImm(%#x) = %v %#x", tc.imm, k, v)
		}
	}
	if ImmKind(9).String() != "ImmKind(9)" || ImmClose.String() != "CLOSE" {
		t.Error("kind names")
	}
}

// TestAdvance checks the position arithmetic across wraparound of the 28
// bits carried and of the 64-bit positions themselves.
func TestAdvance(t *testing.T) {
	const m = ImmValueMask + 1
	for _, tc := range []struct{ from, to uint64 }{
		{0, 0}, {0, 1}, {0, 64 << 20}, {m - 1, m}, {m - 10, m + 10}, {5*m + 7, 5*m + 7 + (64 << 20)},
		{^uint64(0), 0}, {123, 123 + m - 1},
	} {
		if got := Advance(tc.from, uint32(tc.to)&ImmValueMask); got != tc.to {
			t.Errorf("Advance(%#x, low(%#x)) = %#x", tc.from, tc.to, got)
		}
	}
	// Across the 64-bit wrap of the positions themselves.
	from := ^uint64(0) - 100
	to := from + 4096
	if got := Advance(from, uint32(to)&ImmValueMask); got != to {
		t.Errorf("Advance(%#x, low(%#x)) = %#x", from, to, got)
	}
}

func FuzzConnectData(f *testing.F) {
	good, _ := ConnectData{RingBytes: 4096, Client: netip.MustParseAddrPort("1.2.3.4:1"), Server: netip.MustParseAddrPort("5.6.7.8:2")}.Marshal()
	v6, _ := ConnectData{RingBytes: 1 << 20, Client: netip.MustParseAddrPort("[fd00::1]:1"), Server: netip.MustParseAddrPort("[fd00::2]:2")}.Marshal()
	f.Add(good)
	f.Add(v6)
	f.Add([]byte{})
	f.Add(make([]byte, 196))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeConnectData(b)
		if err != nil {
			if !errors.Is(err, ErrWire) {
				t.Fatalf("error %v does not wrap ErrWire", err)
			}
			return
		}
		// What decodes re-encodes to the same 56 bytes.
		out, err := d.Marshal()
		if err != nil {
			t.Fatalf("decoded %+v does not marshal: %v", d, err)
		}
		if !bytes.Equal(out, b[:SizeofConnectData]) {
			t.Fatalf("round trip\n in %x\nout %x", b[:SizeofConnectData], out)
		}
	})
}

func FuzzAcceptData(f *testing.F) {
	good, _ := AcceptData{RingBytes: 4096, RKey: 7, RingBase: 4096}.Marshal()
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeAcceptData(b)
		if err != nil {
			return
		}
		out, err := d.Marshal()
		if err != nil || !bytes.Equal(out, b[:SizeofAcceptData]) {
			t.Fatalf("round trip %x -> %+v -> %x (%v)", b, d, out, err)
		}
	})
}
