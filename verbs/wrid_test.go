package verbs

import (
	"math"
	"testing"
)

func TestWRIDLayout(t *testing.T) {
	tests := []struct {
		name string
		kind uint8
		conn uint32
		seq  uint32
		want WRID
	}{
		{"zero", 0, 0, 0, 0},
		{"seq only", 0, 0, 1, 0x0000_0000_0000_0001},
		{"conn only", 0, 1, 0, 0x0000_0001_0000_0000},
		{"kind only", 1, 0, 0, 0x0100_0000_0000_0000},
		{"all fields", 0xab, 0x123456, 0x89abcdef, 0xab12_3456_89ab_cdef},
		{"max", math.MaxUint8, MaxWRIDConn, math.MaxUint32, math.MaxUint64},
		{"conn masked to 24 bits", 2, 0xff00_0001, 7, 0x0200_0001_0000_0007},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MakeWRID(tt.kind, tt.conn, tt.seq)
			if got != tt.want {
				t.Fatalf("MakeWRID(%#x, %#x, %#x) = %#016x, want %#016x", tt.kind, tt.conn, tt.seq, uint64(got), uint64(tt.want))
			}
			if got.Kind() != tt.kind {
				t.Errorf("Kind() = %#x, want %#x", got.Kind(), tt.kind)
			}
			if want := tt.conn & MaxWRIDConn; got.Conn() != want {
				t.Errorf("Conn() = %#x, want %#x", got.Conn(), want)
			}
			if got.Seq() != tt.seq {
				t.Errorf("Seq() = %#x, want %#x", got.Seq(), tt.seq)
			}
		})
	}
}

func TestWRIDFieldsIndependent(t *testing.T) {
	// Changing one field never disturbs the others.
	base := MakeWRID(0x5a, 0xa5a5a5, 0x5a5a5a5a)
	for _, k := range []uint8{0, 1, 0x7f, 0xff} {
		w := MakeWRID(k, base.Conn(), base.Seq())
		if w.Conn() != base.Conn() || w.Seq() != base.Seq() || w.Kind() != k {
			t.Errorf("kind %#x: got (%#x, %#x, %#x)", k, w.Kind(), w.Conn(), w.Seq())
		}
	}
	for _, s := range []uint32{0, 1, math.MaxUint32} {
		w := MakeWRID(base.Kind(), base.Conn(), s)
		if w.Kind() != base.Kind() || w.Conn() != base.Conn() || w.Seq() != s {
			t.Errorf("seq %#x: got (%#x, %#x, %#x)", s, w.Kind(), w.Conn(), w.Seq())
		}
	}
}

func FuzzWRID(f *testing.F) {
	f.Add(uint8(0), uint32(0), uint32(0))
	f.Add(uint8(255), uint32(math.MaxUint32), uint32(math.MaxUint32))
	f.Fuzz(func(t *testing.T, kind uint8, conn, seq uint32) {
		w := MakeWRID(kind, conn, seq)
		if w.Kind() != kind || w.Conn() != conn&MaxWRIDConn || w.Seq() != seq {
			t.Fatalf("MakeWRID(%#x, %#x, %#x) round trip = (%#x, %#x, %#x)", kind, conn, seq, w.Kind(), w.Conn(), w.Seq())
		}
		if WRID(uint64(w)) != w {
			t.Fatal("uint64 conversion changed the value")
		}
	})
}
