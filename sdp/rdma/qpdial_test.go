package rdma

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDeviceLinkBound: a link whose server does not answer within the
// bound of the dial that started it is abandoned at that deadline (the
// connection manager alone would keep it for up to a minute, and every
// later dial to that listener queued on it), and once the server answers
// again the next dials make a new link and run as streams on it, bytes
// verified, the later ones on segments of the link's pool.
func TestDeviceLinkBound(t *testing.T) {
	srv, ip := startDevice(t)
	cli, err := Start(Config{PollSpin: 20 * time.Microsecond, PID: unix.Getpid(), Logf: t.Logf, Links: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cli.Stop)
	addr := netip.AddrPortFrom(ip, 20000+uint16(rand.IntN(20000)))
	lfd := listenBoth(t, srv, addr)
	defer unix.Close(lfd)

	const busy = 3 * time.Second
	start := time.Now()
	if err := srv.eng.post(func() { time.Sleep(busy) }); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Dial(addr, netip.AddrPortFrom(ip, 40100), 64<<10, 500*time.Millisecond); err == nil {
		t.Fatal("a dial answered by a server whose engine is busy")
	}
	time.Sleep(100 * time.Millisecond)
	var making int
	_ = cli.eng.Do(func() { making = len(cli.linkDials) })
	if making != 0 && time.Since(start) < busy {
		t.Fatalf("the link being made outlived the deadline of the dial that started it (%v after it)", time.Since(start))
	}
	time.Sleep(time.Until(start.Add(busy + 500*time.Millisecond)))

	for k := range 4 {
		cep, err := cli.Dial(addr, netip.AddrPortFrom(ip, uint16(40101+k)), 64<<10, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %d once the server is free: %v", k, err)
		}
		apps := acceptBoth(t, lfd, addr, cep)
		exchangeBoth(t, apps, 256<<10, uint64(k), 30*time.Second)
		for _, a := range apps {
			a.seg.SetLetGo(a.side) // as the C data path does when it unmaps
			a.close(false)
		}
	}
	var links, taken int
	_ = cli.eng.Do(func() {
		links = len(cli.qlinks)
		for _, ql := range cli.qlinks {
			_, _, taken, _ = ql.pool.counts()
		}
	})
	if links != 1 {
		t.Fatalf("%d links to the listener, want 1", links)
	}
	if taken == 0 {
		t.Error("no stream took a segment of the link's pool")
	}
}
