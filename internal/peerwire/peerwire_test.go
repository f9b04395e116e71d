package peerwire_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"syscall"
	"testing"

	"github.com/osfproject/osf/internal/peerwire"
	"github.com/osfproject/osf/sdp"
)

// TestMain runs the tests with UndefinedBehaviorSanitizer halting on its
// first report (the option is read when the process starts: the test
// binary runs itself again with it set).
func TestMain(m *testing.M) {
	if os.Getenv("UBSAN_OPTIONS") == "" {
		env := append(os.Environ(), "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
		if err := syscall.Exec("/proc/self/exe", os.Args, env); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// hello is a hello as sdp.SendHello sends it (segment.h struct
// osf_hello, host byte order), addresses zero.
func hello(ring uint32) []byte {
	b := make([]byte, sdp.SizeofHello)
	binary.NativeEndian.PutUint32(b[0:], sdp.HelloMagic)
	binary.NativeEndian.PutUint16(b[4:], sdp.Version)
	binary.NativeEndian.PutUint16(b[6:], sdp.SizeofHello)
	binary.NativeEndian.PutUint32(b[8:], ring)
	return b
}

// FuzzHello: a hello passes only when it is exactly the struct's size (or
// that plus the pooled part's bytes, exactly when its flags say
// OSF_HELLO_F_POOL) with the magic, version and size, and a power-of-two
// ring 4 KiB..64 MiB at most the cap; one with the right magic, version,
// size and length for its flag is never malformed.
func FuzzHello(f *testing.F) {
	f.Add(hello(65536), uint32(1<<20))
	f.Add(hello(1<<26), uint32(1<<20))
	f.Add(hello(4096), uint32(4096))
	f.Add(hello(3<<12), uint32(1<<26))
	f.Add(hello(1<<31), uint32(0xffffffff))
	f.Add(hello(0), uint32(0xffffffff))
	f.Add(append(hello(65536), 0), uint32(1<<20))
	f.Add(hello(65536)[:40], uint32(1<<20))
	f.Add([]byte{}, uint32(0))
	pooled := append(hello(65536), make([]byte, peerwire.HelloPoolBytes)...)
	binary.NativeEndian.PutUint32(pooled[12:], peerwire.HelloFlagPool)
	f.Add(pooled, uint32(1<<20))
	f.Add(pooled[:peerwire.HelloBytes], uint32(1<<20))
	f.Fuzz(func(t *testing.T, b []byte, cap uint32) {
		if len(b) > 200 {
			b = b[:200]
		}
		v := peerwire.HelloCheck(b, cap)
		pool := len(b) >= peerwire.HelloBytes && binary.NativeEndian.Uint32(b[12:])&peerwire.HelloFlagPool != 0
		want := peerwire.HelloBytes
		if pool {
			want += peerwire.HelloPoolBytes
		}
		if len(b) != want {
			if v != peerwire.HelloMalformed {
				t.Fatalf("%d bytes (pooled %v): verdict %d", len(b), pool, v)
			}
			return
		}
		ring := binary.LittleEndian.Uint32(b[8:])
		okRing := ring >= 4096 && ring <= 64<<20 && ring&(ring-1) == 0
		switch v {
		case peerwire.HelloOK:
			if !okRing || ring > cap {
				t.Fatalf("accepted ring %d with cap %d", ring, cap)
			}
		case peerwire.HelloBadRing:
			if okRing {
				t.Fatalf("refused a good ring %d", ring)
			}
		case peerwire.HelloOverCap:
			if !okRing || ring <= cap {
				t.Fatalf("over cap? ring %d cap %d", ring, cap)
			}
		case peerwire.HelloMalformed:
			if binary.NativeEndian.Uint32(b[0:]) == sdp.HelloMagic &&
				binary.NativeEndian.Uint16(b[4:]) == sdp.Version &&
				binary.NativeEndian.Uint16(b[6:]) == sdp.SizeofHello {
				t.Fatalf("malformed, but magic, version and size are right")
			}
		default:
			t.Fatalf("verdict %d", v)
		}
	})
}

func header(ring uint32) []byte {
	b := make([]byte, peerwire.HdrBytes)
	binary.LittleEndian.PutUint64(b, sdp.Magic)
	binary.LittleEndian.PutUint32(b[8:], sdp.Version)
	binary.LittleEndian.PutUint32(b[12:], uint32(peerwire.HdrBytes))
	binary.LittleEndian.PutUint32(b[16:], ring)
	return b
}

// FuzzSegHeader: a segment header passes only with the magic, version,
// header size and exactly the ring size the hello announced.
func FuzzSegHeader(f *testing.F) {
	f.Add(header(65536), uint32(65536))
	f.Add(header(65536), uint32(4096))
	f.Add(header(0), uint32(0))
	f.Add(make([]byte, 8), uint32(65536))
	f.Fuzz(func(t *testing.T, b []byte, ring uint32) {
		ok := peerwire.HdrCheck(b, ring)
		full := make([]byte, peerwire.HdrBytes)
		copy(full, b)
		want := bytes.Equal(full[:20], header(ring)[:20])
		if ok != want {
			t.Fatalf("check %v, want %v", ok, want)
		}
	})
}

func reply(err uint32) []byte {
	b := make([]byte, peerwire.ReplyBytes)
	copy(b, "OSFA\x01")
	binary.BigEndian.PutUint32(b[8:], err)
	return b
}

// FuzzGatewayReply: the reply's errno is 0..4095, EPROTO for anything that
// is not a version 1 reply.
func FuzzGatewayReply(f *testing.F) {
	for _, e := range []uint32{0, 13, 111, 4095, 4096, 0x80000000, 0xffffffff} {
		f.Add(reply(e))
	}
	f.Add([]byte("OSFA\x02"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e := peerwire.ReplyErrno(b)
		if e < 0 || e > 4095 {
			t.Fatalf("errno %d", e)
		}
		full := make([]byte, peerwire.ReplyBytes)
		copy(full, b)
		if string(full[:4]) != "OSFA" || full[4] != 1 {
			if e != int(syscall.EPROTO) {
				t.Fatalf("not a reply, errno %d", e)
			}
		} else if w := binary.BigEndian.Uint32(full[8:]); w < 4096 && e != int(w) {
			t.Fatalf("errno %d, sent %d", e, w)
		}
	})
}

// FuzzGatewayNotice: a notice is recognised by its magic and version
// only, and its addresses always become a sockaddr of the listener's
// family (AF_INET only for a v4 listener and family code 4) with the
// notice's port, whatever the family codes say.
func FuzzGatewayNotice(f *testing.F) {
	n := make([]byte, peerwire.NoticeBytes)
	copy(n, "OSFN\x01\x04\x04")
	f.Add(n, false)
	m := append([]byte(nil), n...)
	m[5], m[6] = 6, 6
	f.Add(m, true)
	m2 := append([]byte(nil), n...)
	m2[5], m2[6] = 0xff, 0
	f.Add(m2, false)
	f.Add([]byte("OSFN"), true)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		full := make([]byte, peerwire.NoticeBytes)
		copy(full, b)
		if ok := peerwire.NoticeOK(b); ok != (string(full[:4]) == "OSFN" && full[4] == 1) {
			t.Fatalf("notice ok %v", ok)
		}
		peer, local := peerwire.NoticeAddrs(b, v6)
		for i, sa := range [][28]byte{peer, local} {
			fam, port := full[5+i], full[8+2*i:10+2*i]
			wantFam := uint16(syscall.AF_INET6)
			if !v6 && fam == 4 {
				wantFam = syscall.AF_INET
			}
			if got := binary.LittleEndian.Uint16(sa[:]); got != wantFam {
				t.Fatalf("address %d: family %d, want %d", i, got, wantFam)
			}
			if !bytes.Equal(sa[2:4], port) {
				t.Fatalf("address %d: port %x, want %x", i, sa[2:4], port)
			}
		}
	})
}
