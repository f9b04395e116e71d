package shm

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/osfproject/osf/sdp"
	"golang.org/x/sys/unix"
)

// TestHelloAfterLinkReset: a client that closes its link with the
// server's note unread (a thread's second link, closed right after its
// hello: preload/setup_link.c setup_link_keep; a process that exits)
// leaves ECONNRESET on the server's end, which AF_UNIX reports once and
// ahead of the hellos still queued. The reader takes the hello: it once
// read the link to its end there and the server reset the connection.
func TestHelloAfterLinkReset(t *testing.T) {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := p[0], p[1]
	defer unix.Close(srv)
	if _, err := unix.Write(srv, []byte("the server's note")); err != nil {
		t.Fatal(err)
	}
	const ring = 64 << 10
	seg, err := sdp.CreateSegment(ring)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	client := netip.MustParseAddrPort("127.0.0.1:40000")
	server := netip.MustParseAddrPort("127.0.0.1:7000")
	seg.InitHeader(client, server, os.Getpid())
	w, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(w[0])
	err = sdp.SendHello(cli, sdp.Hello{RingBytes: ring, Client: client, Server: server}, seg.FD, w[1])
	unix.Close(w[1])
	unix.Close(cli)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := Transport{}.Accept(srv, server, time.Second)
	if err != nil {
		t.Fatalf("the hello queued before the link's reset: %v", err)
	}
	defer ep.Segment.Close()
	if ep.Remote != client {
		t.Errorf("hello from %v, want %v", ep.Remote, client)
	}
}
