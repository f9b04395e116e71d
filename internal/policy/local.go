package policy

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// hostTTL is how long the host's address list is trusted before it is read
// again.
const hostTTL = 2 * time.Second

// host caches the addresses of this host's interfaces.
var host = &addrCache{load: interfaceAddrs, now: time.Now, ttl: hostTTL}

// HostIsLocal returns a function, for Query.IsLocal, that reports whether an
// address is loopback or assigned to an interface of this host. The address
// list comes from net.InterfaceAddrs, is shared by all callers and is read
// again when it is older than two seconds; if it cannot be read, only
// loopback addresses are local. IPv4-mapped IPv6 addresses are unmapped and
// zones ignored. The function is safe for concurrent use.
func HostIsLocal() func(netip.Addr) bool {
	return host.isLocal
}

// addrCache is a set of addresses that is reloaded when it gets old.
type addrCache struct {
	load func() ([]netip.Addr, error)
	now  func() time.Time
	ttl  time.Duration

	mu     sync.Mutex
	addrs  map[netip.Addr]bool
	loaded time.Time
}

// isLocal reports whether a is loopback or in the cache.
func (c *addrCache) isLocal(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if a.IsLoopback() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); c.addrs == nil || now.Sub(c.loaded) >= c.ttl {
		c.reload(now)
	}
	return c.addrs[a]
}

// reload reads the address list again; on error it keeps an empty set.
func (c *addrCache) reload(now time.Time) {
	addrs, _ := c.load()
	c.addrs = make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		c.addrs[a.Unmap().WithZone("")] = true
	}
	c.loaded = now
}

// interfaceAddrs returns the addresses of this host's interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.Addr, 0, len(ifAddrs))
	for _, ia := range ifAddrs {
		ipNet, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		if a, ok := netip.AddrFromSlice(ipNet.IP); ok {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}
