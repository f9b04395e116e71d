package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

func randRead(b []byte) (int, error) { return rand.Read(b) }

// state is a relayed connection's state, for --status.
type state int32

const (
	stateConnecting state = iota
	stateEstablished
	stateNodeFin // the node shut down writing; the destination still sends
	stateDestFin // the destination shut down writing; the node still sends
	stateClosing // both did
	stateListen  // a node's listen: node, the address listened on, local the node's listener
)

func (s state) String() string {
	switch s {
	case stateConnecting:
		return "CONNECTING"
	case stateEstablished:
		return "ESTABLISHED"
	case stateNodeFin:
		return "NODE-FIN"
	case stateDestFin:
		return "DEST-FIN"
	case stateClosing:
		return "CLOSING"
	case stateListen:
		return "LISTEN"
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

type atomicState struct{ v atomic.Int32 }

func (a *atomicState) Load() state   { return state(a.v.Load()) }
func (a *atomicState) Store(s state) { a.v.Store(int32(s)) }

// relay is one node connection relayed to its destination.
type relay struct {
	id             uint64
	node, dest     string
	start          time.Time
	state          atomicState
	toDest, toNode atomic.Int64
	eofs           atomic.Int32 // directions ended with a FIN

	// mu guards what is set after the relay is listed (--status reads
	// it meanwhile).
	mu     sync.Mutex
	local  string
	leg    string                        // the node leg's transport: kernel, shm, rdma
	counts func() (toDest, toNode int64) // live counters kept elsewhere (ring leg)
}

// setLocal records the relay's local address.
func (r *relay) setLocal(local string) {
	r.mu.Lock()
	r.local = local
	r.mu.Unlock()
}

// setLeg records the transport of the relay's node leg.
func (r *relay) setLeg(leg string) {
	r.mu.Lock()
	r.leg = leg
	r.mu.Unlock()
}

// names returns the relay's local address and node leg's transport.
func (r *relay) names() (local, leg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.local, r.leg
}

// setCounts installs (nil: removes) the source of the live byte counts.
func (r *relay) setCounts(f func() (int64, int64)) {
	r.mu.Lock()
	r.counts = f
	r.mu.Unlock()
}

// bytes returns the bytes relayed each way so far.
func (r *relay) bytes() (toDest, toNode int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts != nil {
		return r.counts()
	}
	return r.toDest.Load(), r.toNode.Load()
}

// fin records that one direction ended with a FIN (fin: which one).
func (r *relay) fin(fin state) {
	if r.eofs.Add(1) == 2 {
		r.state.Store(stateClosing)
	} else {
		r.state.Store(fin)
	}
}

// pipeBytes is the capacity of each direction's pipe: the most the gateway
// holds per direction (back-pressure beyond it stays in the sockets).
const pipeBytes = 256 << 10

// run relays both directions until both have ended; it returns how the
// connection ended. Closing happens here.
func (r *relay) run(node, dest *net.TCPConn) string {
	var once sync.Once
	var how string
	abort := func(why string) {
		once.Do(func() {
			how = why
			// SO_LINGER 0 is set: these closes send resets.
			node.Close()
			dest.Close()
		})
	}
	var wg sync.WaitGroup
	half := func(src, dst *net.TCPConn, n *atomic.Int64, srcName, dstName string, fin state) {
		defer wg.Done()
		err := splice(src, dst, n)
		switch {
		case err == nil: // end of stream: pass the FIN on
			if cerr := dst.CloseWrite(); cerr != nil {
				abort(fmt.Sprintf("%s gone after the %s's FIN: %v", dstName, srcName, cerr))
				return
			}
			r.fin(fin)
		case errors.Is(err, errWrite):
			abort(fmt.Sprintf("reset: the %s is gone (%v)", dstName, errors.Unwrap(err)))
		default:
			abort(fmt.Sprintf("reset by the %s (%v)", srcName, err))
		}
	}
	wg.Add(2)
	go half(node, dest, &r.toDest, "node", "destination", stateNodeFin)
	go half(dest, node, &r.toNode, "destination", "node", stateDestFin)
	wg.Wait()
	once.Do(func() {
		how = "closed"
		node.SetLinger(-1)
		dest.SetLinger(-1)
		node.Close()
		dest.Close()
	})
	return how
}

// errWrite marks a failure to write to the destination side of a splice.
var errWrite = errors.New("write")

type writeError struct{ err error }

func (e writeError) Error() string   { return "write: " + e.err.Error() }
func (e writeError) Unwrap() error   { return e.err }
func (e writeError) Is(t error) bool { return t == errWrite }

// splice moves bytes from src to dst through a pipe, without copying them
// into user space, until src ends (nil) or fails; a failure to write dst
// is a writeError. n counts the bytes delivered to dst.
func splice(src, dst *net.TCPConn, n *atomic.Int64) error {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("osfgw: pipe: %w", err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, pipeBytes)
	rc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	wc, err := dst.SyscallConn()
	if err != nil {
		return writeError{err}
	}
	const flags = unix.SPLICE_F_NONBLOCK | unix.SPLICE_F_MOVE
	for {
		var got int64
		var serr error
		if err := rc.Read(func(fd uintptr) bool {
			for {
				got, serr = unix.Splice(int(fd), nil, p[1], nil, pipeBytes, flags)
				if serr != unix.EINTR {
					return serr != unix.EAGAIN
				}
			}
		}); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		if got == 0 {
			return nil
		}
		for got > 0 {
			var put int64
			if err := wc.Write(func(fd uintptr) bool {
				for {
					put, serr = unix.Splice(p[0], nil, int(fd), nil, int(got), flags)
					if serr != unix.EINTR {
						return serr != unix.EAGAIN
					}
				}
			}); err != nil {
				return writeError{err}
			}
			if serr != nil {
				return writeError{serr}
			}
			got -= put
			n.Add(put)
		}
	}
}
