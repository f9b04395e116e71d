package sdp_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/osfproject/osf/sdp"
)

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []sdp.Hello{
		{RingBytes: 1 << 20, Client: netip.MustParseAddrPort("127.0.0.1:40000"), Server: netip.MustParseAddrPort("127.0.0.1:80")},
		{RingBytes: 4096, Flags: 3, Client: netip.MustParseAddrPort("[::1]:1"), Server: netip.MustParseAddrPort("[::ffff:10.0.0.1]:65535")},
	} {
		got, err := sdp.DecodeHello(h.Marshal())
		if err != nil || got != h {
			t.Errorf("DecodeHello(Marshal(%+v)) = %+v, %v", h, got, err)
		}
	}
}

func TestHelloMalformed(t *testing.T) {
	good := sdp.Hello{RingBytes: 1 << 20, Client: netip.MustParseAddrPort("127.0.0.1:1"), Server: netip.MustParseAddrPort("127.0.0.1:2")}.Marshal()
	for name, b := range map[string][]byte{
		"short":     good[:10],
		"long":      append(append([]byte(nil), good...), 0),
		"magic":     append([]byte{0}, good[1:]...),
		"ring size": func() []byte { b := append([]byte(nil), good...); b[8] = 1; return b }(),
		"family":    func() []byte { b := append([]byte(nil), good...); b[16], b[17] = 99, 0; return b }(),
	} {
		if _, err := sdp.DecodeHello(b); !errors.Is(err, sdp.ErrHello) {
			t.Errorf("%s: DecodeHello error %v, want ErrHello", name, err)
		}
	}
}

// FuzzDecodeHello checks that any bytes a peer sends either decode into a
// hello with a usable ring size, which survives re-encoding, or
// are rejected with ErrHello; never a panic.
func FuzzDecodeHello(f *testing.F) {
	f.Add(sdp.Hello{RingBytes: 1 << 20, Client: netip.MustParseAddrPort("127.0.0.1:1"), Server: netip.MustParseAddrPort("[::1]:2")}.Marshal())
	f.Add(make([]byte, sdp.SizeofHello))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := sdp.DecodeHello(b)
		if err != nil {
			if !errors.Is(err, sdp.ErrHello) {
				t.Fatalf("error %v does not wrap ErrHello", err)
			}
			return
		}
		if !sdp.RingSizeOK(h.RingBytes) {
			t.Fatalf("accepted ring size %d", h.RingBytes)
		}
		if again, err := sdp.DecodeHello(h.Marshal()); err != nil || again != h {
			t.Fatalf("re-decode %+v: %+v, %v", h, again, err)
		}
	})
}
