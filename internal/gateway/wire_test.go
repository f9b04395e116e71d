package gateway

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestRequestRoundTrip(t *testing.T) {
	key := []byte("0123456789abcdef-secret")
	var nonce [NonceSize]byte
	nonce[3] = 7
	for _, dst := range []string{"10.1.2.3:80", "[fd00::1]:443"} {
		req := Request{Op: OpConnect, Dest: netip.MustParseAddrPort(dst), Timeout: 1500 * time.Millisecond}
		b := req.Marshal(key, nonce)
		got, err := ParseRequest(b, key, nonce)
		if err != nil || got != req {
			t.Fatalf("%s: got %+v, %v", dst, got, err)
		}
		if _, err := ParseRequest(b, []byte("another key, same length"), nonce); !errors.Is(err, ErrAuth) {
			t.Errorf("%s: wrong key: %v, want ErrAuth", dst, err)
		}
		other := nonce
		other[0] = 1
		if _, err := ParseRequest(b, key, other); !errors.Is(err, ErrAuth) {
			t.Errorf("%s: replayed to another nonce: %v, want ErrAuth", dst, err)
		}
		b[9] ^= 1 // the port: covered by the MAC
		if _, err := ParseRequest(b, key, nonce); !errors.Is(err, ErrAuth) {
			t.Errorf("%s: tampered: %v, want ErrAuth", dst, err)
		}
	}
	if _, err := ParseRequest(make([]byte, RequestSize), key, nonce); !errors.Is(err, ErrMalformed) {
		t.Errorf("zeros: %v, want ErrMalformed", err)
	}
}

func TestReplyChallengeRoundTrip(t *testing.T) {
	for _, r := range []Reply{{}, {Errno: unix.ECONNREFUSED}, {Local: netip.MustParseAddrPort("10.0.2.1:40000")}} {
		got, err := ParseReply(r.Marshal())
		if err != nil || got != r {
			t.Errorf("%+v: got %+v, %v", r, got, err)
		}
	}
	n := Notice{Remote: netip.MustParseAddrPort("198.51.100.7:40000"), Local: netip.MustParseAddrPort("[fd00::1]:8080")}
	if got, err := ParseNotice(n.Marshal()); err != nil || got != n {
		t.Errorf("notice: %+v, %v", got, err)
	}
	lr := Request{Op: OpListen, Dest: netip.MustParseAddrPort("0.0.0.0:8080"), NodePort: 8081}
	if got, err := ParseRequest(lr.Marshal([]byte("k"), [NonceSize]byte{}), []byte("k"), [NonceSize]byte{}); err != nil || got != lr {
		t.Errorf("listen request: %+v, %v", got, err)
	}
	var c Challenge
	c.Nonce[31] = 9
	if got, err := ParseChallenge(c.Marshal()); err != nil || got != c {
		t.Errorf("challenge: %+v, %v", got, err)
	}
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := os.WriteFile(p, []byte("0123456789abcdefXYZ\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := LoadKey(p); err != nil || string(k) != "0123456789abcdefXYZ" {
		t.Fatalf("LoadKey: %q, %v", k, err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(p); err == nil {
		t.Error("mode 0640 accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, "short"), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(filepath.Join(dir, "short")); err == nil {
		t.Error("short key accepted")
	}
}

func FuzzParse(f *testing.F) {
	var nonce [NonceSize]byte
	f.Add(Request{Op: OpConnect, Dest: netip.MustParseAddrPort("1.2.3.4:5")}.Marshal([]byte("k"), nonce))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseRequest(b, []byte("k"), nonce)
		ParseReply(b)
		ParseChallenge(b)
		ParseNotice(b)
	})
}
