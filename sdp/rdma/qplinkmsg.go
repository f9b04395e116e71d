package rdma

import "fmt"

// A link's own messages (qplink.go's header comment gives their layout):
// their parser, which bounds every word the peer wrote, and their builder.

// qpLinkMsg is a parsed link message.
type qpLinkMsg struct {
	kind, slot uint8
	body       []byte
}

// parseQPLinkMsg checks a message the peer sent: its length against its
// kind and the reserved bytes; the body is decoded (and checked) by its
// kind's decoder. A registration it carries is only ever the remote
// address of our writes (the peer's device checks it).
func parseQPLinkMsg(b []byte) (qpLinkMsg, error) {
	if len(b) < qpLinkHdr || len(b) > QPLinkMsgMax {
		return qpLinkMsg{}, fmt.Errorf("%w: link message of %d bytes", ErrWire, len(b))
	}
	m := qpLinkMsg{kind: b[0], slot: b[1], body: b[qpLinkHdr:]}
	if b[2] != 0 || b[3] != 0 || m.slot == 0 {
		return m, fmt.Errorf("%w: link message of kind %d for stream %d, reserved %#x", ErrWire, m.kind, m.slot, b[2:4])
	}
	want := 0
	switch m.kind {
	case qpLinkOpen:
		want = SizeofConnectData
	case qpLinkAccept:
		want = SizeofAcceptData
	case qpLinkReject:
		want = SizeofRejectData
	case qpLinkEnd:
	default:
		return m, fmt.Errorf("%w: link message of kind %d", ErrWire, m.kind)
	}
	if len(m.body) != want {
		return m, fmt.Errorf("%w: link message of kind %d: %d bytes", ErrWire, m.kind, len(m.body))
	}
	return m, nil
}

// qpLinkMessage builds a link message.
func qpLinkMessage(kind, slot uint8, body []byte) []byte {
	b := make([]byte, qpLinkHdr+len(body))
	b[0], b[1] = kind, slot
	copy(b[qpLinkHdr:], body)
	return b
}
