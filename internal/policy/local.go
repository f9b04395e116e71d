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

// IsLocal reports whether a connection to a stays on this host (in this
// network namespace): a is loopback, unspecified (Linux connects 0.0.0.0
// and :: to the host itself, 127.0.0.1 and ::1; probed), or assigned to an
// interface of this host. It is the Go twin of libosf.so's osf_addr_local
// (sdp/setup.c), which libosf.so and, through cgo (shm.IsLocal), the core
// and osfgw use; osfrun, built without cgo, uses this one, and shm's
// FuzzIsLocalAgree holds the two together. (verbs/devroute asks a different question, which interface holds an
// address, because RDMA devices serve interfaces; see Host.ForRoute.)
//
// The interface addresses come from net.InterfaceAddrs, are shared by all
// callers and are read again when older than two seconds; if they cannot
// be read, only loopback and unspecified addresses are local.
// IPv4-mapped IPv6 addresses are unmapped and zones ignored. A bind test
// would be exact without a cache, but it says yes to every address under
// net.ipv4.ip_nonlocal_bind=1 and to broadcast addresses, which TCP cannot
// connect to. IsLocal is safe for concurrent use.
func IsLocal(a netip.Addr) bool { return isLocal(a, host.has) }

// isLocal is the rule of IsLocal, with assigned telling whether an address
// is assigned to an interface (nil: none is).
func isLocal(a netip.Addr, assigned func(netip.Addr) bool) bool {
	a = a.Unmap().WithZone("")
	return a.IsLoopback() || a.IsUnspecified() || (assigned != nil && assigned(a))
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

// has reports whether a (unmapped, without zone) is in the cache.
func (c *addrCache) has(a netip.Addr) bool {
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
