package verbs

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// sentinel is the type of the package's sentinel errors. A sentinel may have
// parents: errors.Is(ErrNoKernelSupport, ErrNoDevice) is true.
type sentinel struct {
	msg     string
	parents []error
}

func (e *sentinel) Error() string   { return e.msg }
func (e *sentinel) Unwrap() []error { return e.parents }

// Sentinel errors. Errors returned by this package wrap at most one of these
// and, when the failure came from the kernel or from libibverbs/librdmacm,
// the unix.Errno that caused it; test with errors.Is.
var (
	// ErrNoDevice reports that no RDMA device is present or that none serves
	// the given interface, address or route.
	ErrNoDevice error = &sentinel{msg: "no RDMA device"}

	// ErrNoKernelSupport reports that the kernel has no RDMA support at all
	// (ibv_get_device_list fails with ENOSYS, /sys/class/infiniband is
	// missing). It satisfies errors.Is(err, ErrNoDevice).
	ErrNoKernelSupport error = &sentinel{msg: "no kernel RDMA support", parents: []error{ErrNoDevice}}

	// ErrClosed reports use of a resource after its Close, including a
	// second Close.
	ErrClosed error = &sentinel{msg: "use of closed resource"}

	// ErrTimeout reports that an operation or a wait timed out.
	ErrTimeout error = &sentinel{msg: "timed out"}

	// ErrRejected reports that the peer rejected a connection request
	// (rdma_reject, or no listener on the port).
	ErrRejected error = &sentinel{msg: "connection rejected by peer"}

	// ErrUnreachable reports that address or route resolution failed or the
	// peer did not answer a connection request.
	ErrUnreachable error = &sentinel{msg: "address or route unreachable"}

	// ErrWouldBlock reports that a non-blocking operation found nothing to
	// do (EAGAIN).
	ErrWouldBlock error = &sentinel{msg: "operation would block"}

	// ErrPrivateDataTooLong reports CM private data longer than the
	// transport carries (see MaxConnectPrivateData and friends); such
	// errors also wrap unix.EINVAL.
	ErrPrivateDataTooLong error = &sentinel{msg: "private data too long"}
)

// errnoTable is the one place that maps errno values to sentinels. An errno
// not listed here is returned wrapped but without a sentinel.
var errnoTable = map[unix.Errno]error{
	unix.ENOSYS:       ErrNoKernelSupport,
	unix.ENODEV:       ErrNoDevice,
	unix.ETIMEDOUT:    ErrTimeout,
	unix.ECONNREFUSED: ErrRejected,
	unix.ENETUNREACH:  ErrUnreachable,
	unix.EHOSTUNREACH: ErrUnreachable,
	unix.ENETDOWN:     ErrUnreachable,
	unix.EAGAIN:       ErrWouldBlock,
}

// errnoSentinel returns the sentinel the errno table assigns to e, or nil.
func errnoSentinel(e unix.Errno) error {
	return errnoTable[e]
}

// opError returns the error for a failed operation op: "verbs: op: sentinel:
// errno text", wrapping both the sentinel (when the table has one) and e.
func opError(op string, e unix.Errno) error {
	if s := errnoSentinel(e); s != nil {
		return fmt.Errorf("verbs: %s: %w: %w", op, s, e)
	}
	return fmt.Errorf("verbs: %s: %w", op, e)
}

// errnoOf extracts the errno from the error cgo returns next to a C call's
// result, or fallback when there is none.
func errnoOf(err error, fallback unix.Errno) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return fallback
}

// closedError returns the error for op on a closed resource.
func closedError(op string) error {
	return fmt.Errorf("verbs: %s: %w", op, ErrClosed)
}

// eventFailure describes how an error event type turns into an error: the
// sentinel it always wraps, and the errno used when the event's status
// carries none.
type eventFailure struct {
	kind  error
	errno unix.Errno
}

// eventTable maps the CM event types that report a failure to their
// sentinel. Event types not listed report success (Event.Err returns nil).
var eventTable = map[EventType]eventFailure{
	EventAddrError:     {ErrUnreachable, unix.EHOSTUNREACH},
	EventRouteError:    {ErrUnreachable, unix.EHOSTUNREACH},
	EventUnreachable:   {ErrUnreachable, unix.ETIMEDOUT},
	EventRejected:      {ErrRejected, unix.ECONNREFUSED},
	EventConnectError:  {nil, unix.ECONNABORTED},
	EventDeviceRemoval: {ErrNoDevice, unix.ENODEV},
}

// eventError returns the error an event of type t with status reports, or
// nil when t is not a failure. For EventRejected a positive status is the
// transport's reject reason (IB CM REJ reason), not an errno, and the error
// wraps unix.ECONNREFUSED; otherwise a negative status is -errno.
func eventError(t EventType, status int) error {
	f, ok := eventTable[t]
	if !ok {
		return nil
	}
	e := f.errno
	detail := ""
	switch {
	case status < 0:
		e = unix.Errno(-status)
	case status > 0 && t == EventRejected:
		detail = " (reject reason " + strconv.Itoa(status) + ")"
	case status > 0:
		e = unix.Errno(status)
	}
	kinds := make([]error, 0, 2)
	if f.kind != nil {
		kinds = append(kinds, f.kind)
	}
	// The errno may map to a second sentinel (an UNREACHABLE event with
	// status -ETIMEDOUT is both ErrUnreachable and ErrTimeout).
	if s := errnoSentinel(e); s != nil && s != f.kind {
		kinds = append(kinds, s)
	}
	switch len(kinds) {
	case 0:
		return fmt.Errorf("verbs: %s%s: %w", t, detail, e)
	case 1:
		return fmt.Errorf("verbs: %s%s: %w: %w", t, detail, kinds[0], e)
	default:
		return fmt.Errorf("verbs: %s%s: %w: %w: %w", t, detail, kinds[0], kinds[1], e)
	}
}

// rcErrno turns the return code of a libibverbs call that returns "0 or the
// value of errno" (some providers return -errno or -1 with errno set) into
// an errno; err is the errno cgo captured.
func rcErrno(rc int, err error) unix.Errno {
	switch {
	case rc > 0:
		return unix.Errno(rc)
	case rc < -1:
		return unix.Errno(-rc)
	}
	return errnoOf(err, unix.EIO)
}
