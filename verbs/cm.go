package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Private data limits for RDMA_PS_TCP over InfiniBand and RoCE (the IB CM
// message sizes less the rdma_cm header; see rdma_connect(3),
// rdma_accept(3)). iWARP carries at least as much.
const (
	MaxConnectPrivateData = 56  // rdma_connect: REQ
	MaxAcceptPrivateData  = 196 // rdma_accept: REP
	MaxRejectPrivateData  = 148 // rdma_reject: REJ
)

// MaxRDMAResources, as ConnParam.ResponderResources or InitiatorDepth, asks
// for the device's maximum (RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).
const MaxRDMAResources = 255

// DefaultResolveTimeout is used by ResolveAddr and ResolveRoute when the
// given timeout is not positive.
const DefaultResolveTimeout = 2 * time.Second

// EventType is the type of a connection manager event
// (rdma_cm_event_type).
type EventType int

// Connection manager event types.
const (
	EventAddrResolved    EventType = C.RDMA_CM_EVENT_ADDR_RESOLVED
	EventAddrError       EventType = C.RDMA_CM_EVENT_ADDR_ERROR
	EventRouteResolved   EventType = C.RDMA_CM_EVENT_ROUTE_RESOLVED
	EventRouteError      EventType = C.RDMA_CM_EVENT_ROUTE_ERROR
	EventConnectRequest  EventType = C.RDMA_CM_EVENT_CONNECT_REQUEST
	EventConnectResponse EventType = C.RDMA_CM_EVENT_CONNECT_RESPONSE
	EventConnectError    EventType = C.RDMA_CM_EVENT_CONNECT_ERROR
	EventUnreachable     EventType = C.RDMA_CM_EVENT_UNREACHABLE
	EventRejected        EventType = C.RDMA_CM_EVENT_REJECTED
	EventEstablished     EventType = C.RDMA_CM_EVENT_ESTABLISHED
	EventDisconnected    EventType = C.RDMA_CM_EVENT_DISCONNECTED
	EventDeviceRemoval   EventType = C.RDMA_CM_EVENT_DEVICE_REMOVAL
	EventMulticastJoin   EventType = C.RDMA_CM_EVENT_MULTICAST_JOIN
	EventMulticastError  EventType = C.RDMA_CM_EVENT_MULTICAST_ERROR
	EventAddrChange      EventType = C.RDMA_CM_EVENT_ADDR_CHANGE
	EventTimewaitExit    EventType = C.RDMA_CM_EVENT_TIMEWAIT_EXIT
)

var eventTypeNames = [...]string{
	EventAddrResolved:    "ADDR_RESOLVED",
	EventAddrError:       "ADDR_ERROR",
	EventRouteResolved:   "ROUTE_RESOLVED",
	EventRouteError:      "ROUTE_ERROR",
	EventConnectRequest:  "CONNECT_REQUEST",
	EventConnectResponse: "CONNECT_RESPONSE",
	EventConnectError:    "CONNECT_ERROR",
	EventUnreachable:     "UNREACHABLE",
	EventRejected:        "REJECTED",
	EventEstablished:     "ESTABLISHED",
	EventDisconnected:    "DISCONNECTED",
	EventDeviceRemoval:   "DEVICE_REMOVAL",
	EventMulticastJoin:   "MULTICAST_JOIN",
	EventMulticastError:  "MULTICAST_ERROR",
	EventAddrChange:      "ADDR_CHANGE",
	EventTimewaitExit:    "TIMEWAIT_EXIT",
}

// String returns the event's name without the RDMA_CM_EVENT_ prefix, e.g.
// "CONNECT_REQUEST".
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventTypeNames) {
		return eventTypeNames[t]
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Failure reports whether events of this type report a failure, i.e.
// whether Event.Err can be non-nil.
func (t EventType) Failure() bool {
	_, ok := eventTable[t]
	return ok
}

// eventStrC returns librdmacm's own name for t; tests compare it with
// String.
func eventStrC(t EventType) string {
	return C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(t)))
}

// ConnParam are the connection parameters of Connect and Accept
// (struct rdma_conn_param).
type ConnParam struct {
	// PrivateData is copied to the peer: at most MaxConnectPrivateData
	// bytes for Connect, MaxAcceptPrivateData for Accept. The peer may
	// receive it zero-padded (see Event.PrivateData).
	PrivateData []byte
	// ResponderResources is how many RDMA READ/atomic requests from the
	// peer may be in flight; InitiatorDepth how many this side may have
	// outstanding. Zero (fine for WRITE-only use) means none;
	// MaxRDMAResources means the device's maximum.
	ResponderResources uint8
	InitiatorDepth     uint8
	// RetryCount (0..7, Connect only) is how often a transport timeout is
	// retried before the QP fails with WCRetryExcErr; RNRRetryCount (0..7,
	// 7 = forever) how often a send meeting no posted receive is retried.
	// Zero means 7 for both: a lost packet must not kill a connection.
	RetryCount    uint8
	RNRRetryCount uint8
}

// check validates p for op with a private data limit of maxPriv bytes.
func (p ConnParam) check(op string, maxPriv int) error {
	if len(p.PrivateData) > maxPriv {
		return privateDataError(op, len(p.PrivateData), maxPriv)
	}
	if p.RetryCount > 7 || p.RNRRetryCount > 7 {
		return fmt.Errorf("verbs: %s: retry counts are 3-bit values (%d, %d): %w", op, p.RetryCount, p.RNRRetryCount, unix.EINVAL)
	}
	return nil
}

func privateDataError(op string, n, maxPriv int) error {
	return fmt.Errorf("verbs: %s: %w (%d bytes, at most %d): %w", op, ErrPrivateDataTooLong, n, maxPriv, unix.EINVAL)
}

// retries returns the retry counts to pass to librdmacm.
func (p ConnParam) retries() (retry, rnr C.uint8_t) {
	retry, rnr = 7, 7
	if p.RetryCount != 0 {
		retry = C.uint8_t(p.RetryCount)
	}
	if p.RNRRetryCount != 0 {
		rnr = C.uint8_t(p.RNRRetryCount)
	}
	return retry, rnr
}

// privateDataPtr returns a pointer to b's first byte (nil when empty). The
// pointer is only passed as a call argument; C copies the bytes before the
// call returns.
func privateDataPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// EventChannel is a connection manager event channel
// (struct rdma_event_channel). The CMIDs created on it report their events
// through it; its fd can be polled.
//
// Close fails with an error wrapping unix.EBUSY while CMIDs of the channel
// are open (including ids delivered by connection requests that were
// neither accepted nor closed). A second Close returns ErrClosed. Close
// must not run concurrently with other methods.
type EventChannel struct {
	ch *C.struct_rdma_event_channel

	mu  sync.Mutex
	ids map[*C.struct_rdma_cm_id]*CMID
}

// NewEventChannel creates an event channel. Its fd is blocking and
// close-on-exec; see SetNonblock. When the kernel has no RDMA CM support or
// there is no device it returns an error satisfying
// errors.Is(err, ErrNoDevice).
func NewEventChannel() (*EventChannel, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, opError("create event channel", errnoOf(err, unix.ENODEV))
	}
	unix.CloseOnExec(int(ch.fd))
	return &EventChannel{ch: ch, ids: map[*C.struct_rdma_cm_id]*CMID{}}, nil
}

// Fd returns the channel's file descriptor, or -1 after Close. It is
// readable when GetEvent has an event to return.
func (ch *EventChannel) Fd() int {
	if ch == nil || ch.ch == nil {
		return -1
	}
	return int(ch.ch.fd)
}

// SetNonblock switches GetEvent between blocking (the default) and
// non-blocking mode by setting O_NONBLOCK on the fd. The other CM calls
// (ResolveAddr, Connect, ...) never wait for the network either way.
func (ch *EventChannel) SetNonblock(nonblocking bool) error {
	if ch == nil || ch.ch == nil {
		return closedError("cm channel set nonblock")
	}
	if err := unix.SetNonblock(int(ch.ch.fd), nonblocking); err != nil {
		return opError("cm channel set nonblock", errnoOf(err, unix.EINVAL))
	}
	return nil
}

// Event is a connection manager event, copied out and already
// acknowledged: nothing in it refers to librdmacm memory, and there is no
// Ack to call.
type Event struct {
	Type EventType
	// Status is 0 on success; otherwise a negative errno or, for
	// EventRejected over InfiniBand/RoCE, the positive IB CM reject
	// reason (8: no listener on that port; 28: the peer called
	// rdma_reject). Err interprets it.
	Status int
	// ID is the id the event is for (nil only for an id not made by this
	// package). For EventConnectRequest it is a new id for the incoming
	// connection, registered on this channel: Accept or Reject it, and
	// Close it in any case when done.
	ID *CMID
	// Listener is the listening id, for EventConnectRequest only.
	Listener *CMID
	// PrivateData is the peer's private data (Connect's for
	// EventConnectRequest, Accept's for EventEstablished on the active
	// side, Reject's for EventRejected), copied. Over InfiniBand and RoCE
	// its length is the transport's fixed field size, not what the peer
	// sent: the tail is zero padding. Callers must therefore encode the
	// length (or a fixed layout) inside their own payload.
	PrivateData []byte
	// The peer's connection parameters, for EventConnectRequest and
	// EventEstablished. ResponderResources matches the peer's
	// InitiatorDepth and vice versa.
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	RemoteQPNum        uint32
}

// Err returns nil for an event that reports success, and otherwise an error
// wrapping the matching sentinel (ErrUnreachable for ADDR_ERROR,
// ROUTE_ERROR and UNREACHABLE; ErrRejected for REJECTED; ErrNoDevice for
// DEVICE_REMOVAL) and the errno from Status.
func (e *Event) Err() error {
	return eventError(e.Type, e.Status)
}

// String describes the event for logs, e.g. "REJECTED status 28".
func (e *Event) String() string {
	if e.Status == 0 {
		return e.Type.String()
	}
	return e.Type.String() + " status " + strconv.Itoa(e.Status)
}

// GetEvent returns the next event. In blocking mode (the default) it
// blocks, holding an OS thread, until there is one; in non-blocking mode it
// returns an error wrapping ErrWouldBlock and unix.EAGAIN when there is
// none. The event is acknowledged before GetEvent returns.
func (ch *EventChannel) GetEvent() (*Event, error) {
	if ch == nil || ch.ch == nil {
		return nil, closedError("get cm event")
	}
	var raw C.struct_osf_cm_event
	if rc := C.osf_get_cm_event(ch.ch, &raw); rc != 0 {
		return nil, opError("get cm event", unix.Errno(rc))
	}
	ev := &Event{
		Type:               EventType(raw.event),
		Status:             int(raw.status),
		ResponderResources: uint8(raw.responder_resources),
		InitiatorDepth:     uint8(raw.initiator_depth),
		RetryCount:         uint8(raw.retry_count),
		RNRRetryCount:      uint8(raw.rnr_retry_count),
		RemoteQPNum:        uint32(raw.qp_num),
	}
	if n := int(raw.private_data_len); n > 0 {
		ev.PrivateData = C.GoBytes(unsafe.Pointer(&raw.private_data[0]), C.int(n))
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ev.Type == EventConnectRequest {
		ev.ID = &CMID{id: raw.id, ch: ch}
		ch.ids[raw.id] = ev.ID
		ev.Listener = ch.ids[raw.listen_id]
	} else {
		ev.ID = ch.ids[raw.id]
	}
	return ev, nil
}

// WaitEvent waits up to timeout (forever when negative) for the fd to
// become readable, then returns GetEvent's result. It returns an error
// wrapping ErrTimeout and unix.ETIMEDOUT when nothing arrives in time. It
// is meant for a single reader per channel; put the channel in
// non-blocking mode if others may read it too.
func (ch *EventChannel) WaitEvent(timeout time.Duration) (*Event, error) {
	if ch == nil || ch.ch == nil {
		return nil, closedError("wait cm event")
	}
	deadline := time.Now().Add(timeout)
	for {
		ms := -1
		if timeout >= 0 {
			left := time.Until(deadline)
			if left < 0 {
				left = 0
			}
			ms = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		fds := []unix.PollFd{{Fd: int32(ch.ch.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, opError("wait cm event", errnoOf(err, unix.EIO))
		}
		if n == 0 {
			if timeout >= 0 && !time.Now().Before(deadline) {
				return nil, opError("wait cm event", unix.ETIMEDOUT)
			}
			continue
		}
		ev, err := ch.GetEvent()
		if errors.Is(err, ErrWouldBlock) {
			continue // another reader took it
		}
		return ev, err
	}
}

// CreateID creates a connection manager id in the RDMA_PS_TCP port space,
// which numbers ports as TCP does: a peer reaching "10.0.0.2:5000" over
// rdma_cm finds the CM listener bound to port 5000. Over InfiniBand and RoCE
// the CM keeps its own port table (a CM listener and a kernel TCP listener
// can both hold port 5000); two CM listeners on one port conflict
// (EADDRINUSE). It does not block.
func (ch *EventChannel) CreateID() (*CMID, error) {
	if ch == nil || ch.ch == nil {
		return nil, closedError("create id")
	}
	var cid *C.struct_rdma_cm_id
	if rc, err := C.rdma_create_id(ch.ch, &cid, nil, C.RDMA_PS_TCP); rc != 0 {
		return nil, opError("create id", errnoOf(err, unix.ENODEV))
	}
	id := &CMID{id: cid, ch: ch}
	ch.mu.Lock()
	ch.ids[cid] = id
	ch.mu.Unlock()
	return id, nil
}

// Close destroys the channel. See the type's comment for when it fails.
func (ch *EventChannel) Close() error {
	if ch == nil || ch.ch == nil {
		return closedError("destroy event channel")
	}
	ch.mu.Lock()
	n := len(ch.ids)
	ch.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("verbs: destroy event channel: %d ids still open: %w", n, unix.EBUSY)
	}
	C.rdma_destroy_event_channel(ch.ch)
	ch.ch = nil
	return nil
}

// CMID is a connection manager id (struct rdma_cm_id), the RDMA analogue of
// a socket. The calls that start a network operation (ResolveAddr,
// ResolveRoute, Connect, Accept, Disconnect) return at once; the outcome
// arrives as an event on the id's EventChannel.
//
// Close destroys the id's QP if it is still open, then the id; pending
// operations are cancelled. A second Close returns ErrClosed. Close must not
// run concurrently with other methods.
type CMID struct {
	id *C.struct_rdma_cm_id
	ch *EventChannel
	qp *QP
}

// cmContexts holds one Context per librdmacm device context, shared by all
// ids on that device, so that resource counts are kept in one place.
var cmContexts struct {
	sync.Mutex
	m map[*C.struct_ibv_context]*Context
}

// Context returns the device context the id is bound to, for allocating
// the PD, CQs and MRs of its connection. It fails with an error wrapping
// unix.EINVAL before the id is bound to a device (by Bind to a device
// address, ADDR_RESOLVED, or being a connection request's new id). The
// Context belongs to librdmacm and is shared by all ids on the device: its
// Close does nothing and returns nil, and it stays valid after the id is
// closed.
func (id *CMID) Context() (*Context, error) {
	if id == nil || id.id == nil {
		return nil, closedError("id context")
	}
	v := id.id.verbs
	if v == nil {
		return nil, opError("id context: not bound to a device", unix.EINVAL)
	}
	return cmContext(v), nil
}

// cmContext returns the shared Context for librdmacm's device context v.
func cmContext(v *C.struct_ibv_context) *Context {
	cmContexts.Lock()
	defer cmContexts.Unlock()
	if c := cmContexts.m[v]; c != nil {
		return c
	}
	if cmContexts.m == nil {
		cmContexts.m = map[*C.struct_ibv_context]*Context{}
	}
	c := &Context{ctx: v, name: C.GoString(C.ibv_get_device_name(v.device)), cm: true}
	cmContexts.m[v] = c
	return c
}

// CMDevices opens librdmacm's context of every RDMA device
// (rdma_get_devices) and returns them; they are the Contexts that
// CMID.Context later returns for ids on those devices, so resources
// allocated on them up front (PDs, completion channels) serve every
// connection. Opening a device opens its command and async event fds;
// callers that care where fds land in the process's fd space call this
// at a moment of their choosing. It does not block on the network. When
// there is no device it returns an error satisfying
// errors.Is(err, ErrNoDevice).
func CMDevices() ([]*Context, error) {
	var n C.int
	list, err := C.rdma_get_devices(&n)
	if list == nil {
		return nil, opError("get cm devices", errnoOf(err, unix.ENODEV))
	}
	defer C.rdma_free_devices(list)
	if n <= 0 {
		return nil, opError("get cm devices", unix.ENODEV)
	}
	out := make([]*Context, 0, int(n))
	for _, v := range unsafe.Slice(list, int(n)) {
		if v != nil {
			out = append(out, cmContext(v))
		}
	}
	return out, nil
}

// SetAFOnly makes an AF_INET6 id bound to a wildcard address accept only
// IPv6 (true) or IPv4 too (false), as IPV6_V6ONLY does for a socket
// (RDMA_OPTION_ID_AFONLY). Call it before Bind. It does not block.
func (id *CMID) SetAFOnly(only bool) error {
	if id == nil || id.id == nil {
		return closedError("set afonly")
	}
	v := C.int(0)
	if only {
		v = 1
	}
	if rc, err := C.rdma_set_option(id.id, C.RDMA_OPTION_ID, C.RDMA_OPTION_ID_AFONLY,
		unsafe.Pointer(&v), C.size_t(unsafe.Sizeof(v))); rc != 0 {
		return opError("set afonly", errnoOf(err, unix.EINVAL))
	}
	return nil
}

// Port returns the device port the id is bound to (from 1), or 0 when it
// is not bound.
func (id *CMID) Port() int {
	if id == nil || id.id == nil || id.id.verbs == nil {
		return 0
	}
	return int(id.id.port_num)
}

// QP returns the id's queue pair, or nil if none was created or it was
// closed.
func (id *CMID) QP() *QP {
	if id == nil {
		return nil
	}
	return id.qp
}

// Channel returns the event channel the id reports on.
func (id *CMID) Channel() *EventChannel {
	if id == nil {
		return nil
	}
	return id.ch
}

// LocalAddr returns the id's local address and port (after Bind,
// ResolveAddr or for a connection request's new id), or the zero AddrPort.
func (id *CMID) LocalAddr() netip.AddrPort {
	if id == nil || id.id == nil {
		return netip.AddrPort{}
	}
	return fromSockaddr(C.osf_local_addr(id.id))
}

// RemoteAddr returns the peer's address and port, or the zero AddrPort.
func (id *CMID) RemoteAddr() netip.AddrPort {
	if id == nil || id.id == nil {
		return netip.AddrPort{}
	}
	return fromSockaddr(C.osf_peer_addr(id.id))
}

// Bind binds the id to a local address and port (port 0 picks one); an
// unspecified address (0.0.0.0, ::) binds to all devices. Binding to an
// address that is not local fails with an error wrapping
// unix.EADDRNOTAVAIL, a port in use with unix.EADDRINUSE. It does not
// block.
func (id *CMID) Bind(addr netip.AddrPort) error {
	if id == nil || id.id == nil {
		return closedError("bind")
	}
	var ss C.struct_sockaddr_storage
	if err := toSockaddr(addr, &ss); err != nil {
		return fmt.Errorf("verbs: bind: %w", err)
	}
	if rc, err := C.rdma_bind_addr(id.id, (*C.struct_sockaddr)(unsafe.Pointer(&ss))); rc != 0 {
		return opError("bind "+addr.String(), errnoOf(err, unix.EINVAL))
	}
	return nil
}

// Listen starts listening for connection requests on the bound id; each
// arrives as an EventConnectRequest with a new id. It does not block.
func (id *CMID) Listen(backlog int) error {
	if id == nil || id.id == nil {
		return closedError("listen")
	}
	if rc, err := C.rdma_listen(id.id, C.int(backlog)); rc != 0 {
		return opError("listen", errnoOf(err, unix.EINVAL))
	}
	return nil
}

// ResolveAddr starts resolving dst (and binds the id to the local device
// that reaches it, optionally from src; pass the zero AddrPort for any
// source). It returns at once; EventAddrResolved or EventAddrError follows
// within timeout (DefaultResolveTimeout when not positive). An EventAddrError
// with status -ENODEV means no RDMA device serves the route to dst.
func (id *CMID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	if id == nil || id.id == nil {
		return closedError("resolve addr")
	}
	var sss, dss C.struct_sockaddr_storage
	var srcp *C.struct_sockaddr
	if src.IsValid() {
		if err := toSockaddr(src, &sss); err != nil {
			return fmt.Errorf("verbs: resolve addr: %w", err)
		}
		srcp = (*C.struct_sockaddr)(unsafe.Pointer(&sss))
	}
	if err := toSockaddr(dst, &dss); err != nil {
		return fmt.Errorf("verbs: resolve addr: %w", err)
	}
	rc, err := C.rdma_resolve_addr(id.id, srcp, (*C.struct_sockaddr)(unsafe.Pointer(&dss)), timeoutMS(timeout))
	if rc != 0 {
		return opError("resolve addr "+dst.String(), errnoOf(err, unix.EINVAL))
	}
	return nil
}

// ResolveRoute starts resolving the route to the address resolved by
// ResolveAddr. It returns at once; EventRouteResolved or EventRouteError
// follows within timeout (DefaultResolveTimeout when not positive). It
// fails with an error wrapping unix.EINVAL before the address is resolved.
func (id *CMID) ResolveRoute(timeout time.Duration) error {
	if id == nil || id.id == nil {
		return closedError("resolve route")
	}
	if id.id.verbs == nil {
		// librdmacm dereferences id->verbs here; refuse instead.
		return opError("resolve route: address not resolved", unix.EINVAL)
	}
	if rc, err := C.rdma_resolve_route(id.id, timeoutMS(timeout)); rc != 0 {
		return opError("resolve route", errnoOf(err, unix.EINVAL))
	}
	return nil
}

// Connect sends a connection request over the resolved route. The id must
// have a QP (CreateQP) and p.PrivateData at most MaxConnectPrivateData
// bytes (else an error wrapping ErrPrivateDataTooLong). It returns at once;
// EventEstablished (with the acceptor's private data) follows, or
// EventRejected, EventUnreachable or EventConnectError.
func (id *CMID) Connect(p ConnParam) error {
	if id == nil || id.id == nil {
		return closedError("connect")
	}
	if err := p.check("connect", MaxConnectPrivateData); err != nil {
		return err
	}
	if id.qp == nil {
		return opError("connect: id has no qp", unix.EINVAL)
	}
	retry, rnr := p.retries()
	rc := C.osf_connect(id.id, privateDataPtr(p.PrivateData), C.uint8_t(len(p.PrivateData)),
		C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth), retry, rnr)
	if rc != 0 {
		return opError("connect", unix.Errno(rc))
	}
	return nil
}

// Accept accepts the connection request that delivered this id, moving its
// QP to RTS. The id must have a QP and p.PrivateData at most
// MaxAcceptPrivateData bytes. p.RetryCount is ignored (the requester chose
// it). It returns at once; EventEstablished follows on this id, or
// EventConnectError.
func (id *CMID) Accept(p ConnParam) error {
	if id == nil || id.id == nil {
		return closedError("accept")
	}
	if err := p.check("accept", MaxAcceptPrivateData); err != nil {
		return err
	}
	if id.qp == nil {
		return opError("accept: id has no qp", unix.EINVAL)
	}
	_, rnr := p.retries()
	rc := C.osf_accept(id.id, privateDataPtr(p.PrivateData), C.uint8_t(len(p.PrivateData)),
		C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth), rnr)
	if rc != 0 {
		return opError("accept", unix.Errno(rc))
	}
	return nil
}

// Reject refuses the connection request that delivered this id, sending
// privateData (at most MaxRejectPrivateData bytes) to the requester, which
// gets EventRejected. The id must still be closed. It does not block.
func (id *CMID) Reject(privateData []byte) error {
	if id == nil || id.id == nil {
		return closedError("reject")
	}
	if len(privateData) > MaxRejectPrivateData {
		return privateDataError("reject", len(privateData), MaxRejectPrivateData)
	}
	if rc, err := C.rdma_reject(id.id, privateDataPtr(privateData), C.uint8_t(len(privateData))); rc != 0 {
		return opError("reject", errnoOf(err, unix.EINVAL))
	}
	return nil
}

// Disconnect tears the connection down: the QP goes to the error state (its
// outstanding work requests complete with WCWRFlushErr) and both sides get
// EventDisconnected. It does not wait for the peer.
func (id *CMID) Disconnect() error {
	if id == nil || id.id == nil {
		return closedError("disconnect")
	}
	if rc, err := C.rdma_disconnect(id.id); rc != 0 {
		return opError("disconnect", errnoOf(err, unix.EINVAL))
	}
	return nil
}

// Close destroys the id's QP if open, then the id. See the type's comment.
func (id *CMID) Close() error {
	if id == nil || id.id == nil {
		return closedError("destroy id")
	}
	if id.qp != nil {
		if err := id.qp.Close(); err != nil {
			return err
		}
	}
	// rdma_destroy_id waits until every event reported for the id has
	// been acknowledged; GetEvent acknowledges at once, so it cannot hang.
	if rc, err := C.rdma_destroy_id(id.id); rc != 0 {
		return opError("destroy id", errnoOf(err, unix.EIO))
	}
	id.ch.mu.Lock()
	delete(id.ch.ids, id.id)
	id.ch.mu.Unlock()
	id.id = nil
	return nil
}

// timeoutMS converts a resolve timeout to librdmacm's milliseconds.
func timeoutMS(d time.Duration) C.int {
	if d <= 0 {
		d = DefaultResolveTimeout
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > 1<<31-1 {
		ms = 1<<31 - 1
	}
	return C.int(ms)
}

// toSockaddr fills ss from ap. IPv4-mapped IPv6 addresses become IPv4; an
// IPv6 zone is resolved to an interface index.
func toSockaddr(ap netip.AddrPort, ss *C.struct_sockaddr_storage) error {
	if !ap.IsValid() {
		return fmt.Errorf("invalid address %v: %w", ap, unix.EINVAL)
	}
	a := ap.Addr()
	if a.Is4In6() {
		a = a.Unmap()
	}
	var raw [16]byte
	family := C.int(C.AF_INET6)
	var scope uint32
	if a.Is4() {
		family = C.AF_INET
		b := a.As4()
		copy(raw[:], b[:])
	} else {
		raw = a.As16()
		if z := a.Zone(); z != "" {
			s, err := zoneIndex(z)
			if err != nil {
				return err
			}
			scope = s
		}
	}
	C.osf_sockaddr_make(ss, family, (*C.uint8_t)(unsafe.Pointer(&raw[0])), C.uint16_t(ap.Port()), C.uint32_t(scope))
	return nil
}

// zoneIndex turns an IPv6 zone (interface name or number) into an index.
func zoneIndex(z string) (uint32, error) {
	if n, err := strconv.ParseUint(z, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(z)
	if err != nil {
		return 0, fmt.Errorf("ipv6 zone %q: %w", z, unix.EINVAL)
	}
	return uint32(ifi.Index), nil
}

// fromSockaddr converts an AF_INET/AF_INET6 sockaddr to a netip.AddrPort,
// or the zero AddrPort for anything else.
func fromSockaddr(sa *C.struct_sockaddr) netip.AddrPort {
	var raw [16]byte
	var port C.uint16_t
	var scope C.uint32_t
	switch C.osf_sockaddr_parse(sa, (*C.uint8_t)(unsafe.Pointer(&raw[0])), &port, &scope) {
	case C.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[:4])), uint16(port))
	case C.AF_INET6:
		a := netip.AddrFrom16(raw)
		if scope != 0 {
			zone := strconv.FormatUint(uint64(scope), 10)
			if ifi, err := net.InterfaceByIndex(int(scope)); err == nil {
				zone = ifi.Name
			}
			a = a.WithZone(zone)
		}
		return netip.AddrPortFrom(a, uint16(port))
	}
	return netip.AddrPort{}
}

// sockaddrRoundTrip converts ap to a C sockaddr and back; it exists for
// tests, which cannot use cgo.
func sockaddrRoundTrip(ap netip.AddrPort) (netip.AddrPort, error) {
	var ss C.struct_sockaddr_storage
	if err := toSockaddr(ap, &ss); err != nil {
		return netip.AddrPort{}, err
	}
	return fromSockaddr((*C.struct_sockaddr)(unsafe.Pointer(&ss))), nil
}
