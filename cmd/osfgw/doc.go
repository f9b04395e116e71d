// Command osfgw is the osf gateway: nodes without a route to a destination
// connect to it (route action "gateway" in OSF_ROUTES), authenticate with a
// shared key, and ask it to connect to the destination over kernel TCP from
// its own interfaces; osfgw then relays both directions, keeping TCP's
// semantics end to end (connect errors as the same errno, half-close,
// reset, back-pressure). Nodes on this host (its own network namespace and
// each --node-netns) reach it over shared memory as an osf listener, and
// osfgw relays straight between the rings and the destination's socket
// (sdp/side.c, the data path's own code); others over kernel TCP, relayed
// with splice. With --allow-listen, nodes may also
// ask it to listen on a port and deliver the connections it accepts to
// their own listener. The protocol is in
// docs/ARCHITECTURE.md, "Gateways".
//
// Usage:
//
//	osfgw --listen 10.0.1.1:7000 --key /etc/osf/gateway.key --allow '10.0.2.0/24:80' --allow '*:443' --allow-listen '*:8080' --node-netns /run/netns/nodes
//	osfgw --status [--listen ADDR:PORT] [--json]
//
// The allow-list is never open by default: a destination no --allow entry
// covers is refused (EPERM at the node, and a log line here). --status lists
// the relayed connections of every osfgw in this network namespace (or the
// one on --listen): node, the leg's transport, destination, bytes each way and state.
package main
