package rdma

import (
	"sync"
	"time"
)

// handshakeBound scales a dial's bound with what this host's successful
// handshakes have needed: a slow but healthy host (loaded, or emulated)
// must not see connections fall back to kernel TCP because a fixed bound
// (OSF_CONNECT_TIMEOUT_MS, 1 s by default) expired, while a dead or
// silent peer still costs a bounded wait. The bound is the configured one,
// or boundFactor times the slowest recent successful handshake (it decays
// by an eighth at each success), whichever is larger, at most
// boundMaxFactor times the configured one and maxBound.
type handshakeBound struct {
	mu   sync.Mutex
	slow time.Duration
}

const (
	boundFactor    = 4
	boundMaxFactor = 10
	maxBound       = 60 * time.Second
)

// of returns the bound for a dial configured with timeout.
func (b *handshakeBound) of(timeout time.Duration) time.Duration {
	b.mu.Lock()
	d := boundFactor * b.slow
	b.mu.Unlock()
	d = min(d, boundMaxFactor*timeout, maxBound)
	return max(d, timeout)
}

// observe records a successful handshake that took d.
func (b *handshakeBound) observe(d time.Duration) {
	b.mu.Lock()
	b.slow = max(d, b.slow-b.slow/8)
	b.mu.Unlock()
}
