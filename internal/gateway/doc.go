// Package gateway is the wire protocol between osf nodes and osfgw, the
// gateway that connects to TCP peers on their behalf (docs/ARCHITECTURE.md,
// "Gateways"), and the shared secret both sides authenticate with.
//
// A node opens a stream to the gateway, reads the gateway's Challenge,
// sends a Request carrying the destination and an HMAC-SHA256 over the
// challenge's nonce (the key never crosses the wire), and reads a Reply
// whose Errno is what connect returns. After an OK reply the stream is the
// connection to the destination, byte for byte, with TCP's end and reset.
//
// gwwire.h holds the node's C parsers of the connect reply and the notice
// of a delivered connection (libosf.so's preload/gateway.c and conn_gw.c
// include it; internal/peerwire fuzzes it).
//
//	key, err := gateway.LoadKey("/etc/osf/gateway.key")
//	ch, err := gateway.ParseChallenge(buf[:gateway.ChallengeSize])
//	req := gateway.Request{Op: gateway.OpConnect, Dest: dst, Timeout: 20 * time.Second}
//	wire := req.Marshal(key, ch.Nonce)
package gateway
