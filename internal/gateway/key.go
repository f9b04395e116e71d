package gateway

import (
	"bytes"
	"fmt"
	"os"
)

// MinKeyBytes is the shortest key LoadKey accepts.
const MinKeyBytes = 16

// LoadKey reads the shared secret from path. The file must be a regular
// file that neither its group nor others may access (mode 0600 or
// stricter), and hold at least MinKeyBytes bytes; trailing blanks and
// newlines are not part of the key.
func LoadKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gateway: key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gateway: key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gateway: key %s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("gateway: key %s: mode %04o, want 0600 (no access for group and others)", path, perm)
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil {
		return nil, fmt.Errorf("gateway: key %s: %w", path, err)
	}
	key := bytes.TrimRight(b[:n], " \t\r\n")
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("gateway: key %s: %d bytes, want at least %d", path, len(key), MinKeyBytes)
	}
	return key, nil
}
