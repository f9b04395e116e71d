package main

import "github.com/osfproject/osf/sdp"

// tcpState is a socket's state in TCP's terms. The values 1-11 are the
// kernel's (include/net/tcp_states.h, the "st" column of /proc/net/tcp).
type tcpState uint8

// The states.
const (
	stateUnknown     tcpState = 0
	stateEstablished tcpState = 1
	stateSynSent     tcpState = 2
	stateSynRecv     tcpState = 3
	stateFinWait1    tcpState = 4
	stateFinWait2    tcpState = 5
	stateTimeWait    tcpState = 6
	stateClose       tcpState = 7
	stateCloseWait   tcpState = 8
	stateLastAck     tcpState = 9
	stateListen      tcpState = 10
	stateClosing     tcpState = 11
	stateNewSynRecv  tcpState = 12
)

var stateNames = map[tcpState]string{
	stateEstablished: "ESTABLISHED",
	stateSynSent:     "SYN_SENT",
	stateSynRecv:     "SYN_RECV",
	stateFinWait1:    "FIN_WAIT1",
	stateFinWait2:    "FIN_WAIT2",
	stateTimeWait:    "TIME_WAIT",
	stateClose:       "CLOSE",
	stateCloseWait:   "CLOSE_WAIT",
	stateLastAck:     "LAST_ACK",
	stateListen:      "LISTEN",
	stateClosing:     "CLOSING",
	stateNewSynRecv:  "NEW_SYN_RECV",
}

// String returns the state's name as osfstat prints it, "-" when unknown.
func (s tcpState) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return "-"
}

// sideState derives the state of an offloaded connection, seen from one
// side, from the two sides' flags in the segment: me and peer are the
// sides' flags, peerClosed says that the last process holding the peer's
// side closed it, and unread is what this side sent that the peer has not
// read. It is the state TCP_INFO reports in the process itself (the one
// mapping, osf_tcp_state in sdp/segment.h):
//
//	ESTABLISHED  neither side shut down writing, the peer is open
//	CLOSE_WAIT   the peer shut down writing (FIN) or closed; this side did not
//	FIN_WAIT2    this side shut down writing; the peer did not (shared
//	             memory acknowledges a FIN at once, hence not FIN_WAIT1)
//	CLOSE        both sides shut down writing, or the peer reset the
//	             connection: it closed abortively (SO_LINGER 0) or with
//	             bytes it never read (the segment's flags still say which)
func sideState(me, peer sdp.SideFlags, peerClosed bool, unread int64) tcpState {
	reset := peerClosed && sdp.EndIsReset(peer, unread != 0)
	return tcpState(sdp.StateOf(me, peer, peerClosed, reset))
}
