package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// SHA256 returns the hex SHA-256 of b.
func SHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SHA256File returns the hex SHA-256 of the file at path, failing the test
// if it cannot be read.
func SHA256File(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("testutil: read %s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Seed returns a seed for random test data and logs it, so that a failure
// can be replayed with RandomBytesSeed.
func Seed(t testing.TB) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	t.Logf("random data seed %d", s)
	return s
}

// RandomBytes returns n pseudo-random bytes from a logged seed.
func RandomBytes(t testing.TB, n int) []byte {
	t.Helper()
	return RandomBytesSeed(Seed(t), n)
}

// RandomBytesSeed returns n pseudo-random bytes determined by seed.
func RandomBytesSeed(seed uint64, n int) []byte {
	var key [32]byte
	for i := range 4 {
		for j := range 8 {
			key[i*8+j] = byte(seed >> (8 * j))
		}
		seed = seed*6364136223846793005 + 1442695040888963407
	}
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// WriteRandomFile writes n pseudo-random bytes (from a logged seed) to
// dir/name with mode 0644 and returns its path and hex SHA-256.
func WriteRandomFile(t testing.TB, dir, name string, n int) (path, sum string) {
	t.Helper()
	b := RandomBytes(t, n)
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatalf("testutil: %v", err)
	}
	return path, SHA256(b)
}
