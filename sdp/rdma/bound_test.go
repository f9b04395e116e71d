package rdma

import (
	"testing"
	"time"
)

func TestHandshakeBound(t *testing.T) {
	var b handshakeBound
	const cfg = time.Second
	if got := b.of(cfg); got != cfg {
		t.Fatalf("no history: bound %v, want %v", got, cfg)
	}
	b.observe(100 * time.Millisecond) // a fast host: the configured bound
	if got := b.of(cfg); got != cfg {
		t.Errorf("fast handshakes: bound %v, want %v", got, cfg)
	}
	b.observe(800 * time.Millisecond) // a slow but healthy host
	if got := b.of(cfg); got != 3200*time.Millisecond {
		t.Errorf("after an 800 ms handshake: bound %v, want 3.2s", got)
	}
	b.observe(time.Minute) // never beyond 10x the configured bound
	if got := b.of(cfg); got != 10*time.Second {
		t.Errorf("after a minute: bound %v, want 10s", got)
	}
	if got := b.of(20 * time.Second); got != maxBound {
		t.Errorf("configured 20s: bound %v, want %v", got, maxBound)
	}
	for range 100 { // fast handshakes again: back to the configured bound
		b.observe(10 * time.Millisecond)
	}
	if got := b.of(cfg); got != cfg {
		t.Errorf("after fast handshakes: bound %v, want %v", got, cfg)
	}
}
