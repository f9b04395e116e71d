package gateway

import (
	"fmt"
	"io"
	"net"
	"time"
)

// Dial connects to the gateway at addr, authenticates with key and sends
// req, all within timeout, then waits for the reply (the gateway's own
// connect may take up to req.Timeout). It returns the stream and the reply;
// when reply.Errno is not 0 the stream is closed and nil. It is the Go
// counterpart of what libosf.so does for a connect on a "gateway" route.
func Dial(addr string, key []byte, req Request, timeout time.Duration) (net.Conn, Reply, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, Reply{}, fmt.Errorf("gateway: dial %s: %w", addr, err)
	}
	c.SetDeadline(time.Now().Add(timeout))
	b := make([]byte, ChallengeSize)
	if _, err := io.ReadFull(c, b); err != nil {
		c.Close()
		return nil, Reply{}, fmt.Errorf("gateway: read challenge: %w", err)
	}
	ch, err := ParseChallenge(b)
	if err != nil {
		c.Close()
		return nil, Reply{}, err
	}
	if _, err := c.Write(req.Marshal(key, ch.Nonce)); err != nil {
		c.Close()
		return nil, Reply{}, fmt.Errorf("gateway: send request: %w", err)
	}
	c.SetDeadline(time.Now().Add(timeout + req.Timeout))
	b = make([]byte, ReplySize)
	if _, err := io.ReadFull(c, b); err != nil {
		c.Close()
		return nil, Reply{}, fmt.Errorf("gateway: read reply: %w", err)
	}
	c.SetDeadline(time.Time{})
	r, err := ParseReply(b)
	if err != nil || r.Errno != 0 {
		c.Close()
		return nil, r, err
	}
	return c, r, nil
}
