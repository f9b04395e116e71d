package main

import (
	"io"
	"net"
	"time"
)

// nodeLeg is the stream between a node and the gateway: a kernel TCP
// connection, or an offloaded one (ringLeg). The exchange (challenge,
// request, reply) and then the connection's bytes travel on it.
type nodeLeg interface {
	// node returns the node's address, for logs and --status.
	node() string
	// transport names the leg's transport: kernel, shm or rdma.
	transport() string
	// send writes a whole control message.
	send(b []byte) error
	// recv reads exactly len(b) bytes, failing after handshakeTimeout.
	recv(b []byte) error
	// established is called once the OK reply is sent: from then on an
	// abnormal end resets the node, and reads no longer time out.
	established()
	// close ends the leg (after a refusal, or a failure before the relay).
	close()
	// relay moves both directions between the leg and dest until both
	// ended, closes both, and returns how it ended.
	relay(r *relay, dest *net.TCPConn) string
}

// tcpLeg is a node connected over kernel TCP.
type tcpLeg struct{ c *net.TCPConn }

func newTCPLeg(c *net.TCPConn) *tcpLeg {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	return &tcpLeg{c}
}

func (t *tcpLeg) node() string      { return t.c.RemoteAddr().String() }
func (t *tcpLeg) transport() string { return "kernel" }

func (t *tcpLeg) send(b []byte) error {
	_, err := t.c.Write(b)
	return err
}

func (t *tcpLeg) recv(b []byte) error {
	_, err := io.ReadFull(t.c, b)
	return err
}

func (t *tcpLeg) established() {
	// Until both ends have closed cleanly, closing resets (run).
	t.c.SetLinger(0)
	t.c.SetDeadline(time.Time{})
}

func (t *tcpLeg) close() { t.c.Close() }

func (t *tcpLeg) relay(r *relay, dest *net.TCPConn) string { return r.run(t.c, dest) }
