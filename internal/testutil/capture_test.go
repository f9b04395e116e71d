package testutil

import (
	"os"
	"testing"
	"time"
)

// TestCaptureDrainsAfterDeadline: output left in the pipe when the read
// deadline has already passed (the copying goroutine ran late) is kept.
func TestCaptureDrainsAfterDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cp := &capture{r: r, w: w, buf: &syncBuffer{}, done: make(chan struct{})}
	if _, err := w.WriteString("last words\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	_ = r.SetReadDeadline(time.Now().Add(-time.Second))
	cp.copy()
	r.Close()
	if got := cp.buf.String(); got != "last words\n" {
		t.Errorf("captured %q, want %q", got, "last words\n")
	}
}
