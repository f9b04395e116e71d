package verbs

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var allSentinels = []error{
	ErrNoDevice, ErrNoKernelSupport, ErrClosed, ErrTimeout, ErrRejected,
	ErrUnreachable, ErrWouldBlock, ErrPrivateDataTooLong,
}

func TestErrnoTable(t *testing.T) {
	tests := []struct {
		errno unix.Errno
		want  []error // sentinels the error must satisfy; all others must not match
	}{
		{unix.ENOSYS, []error{ErrNoKernelSupport, ErrNoDevice}},
		{unix.ENODEV, []error{ErrNoDevice}},
		{unix.ETIMEDOUT, []error{ErrTimeout}},
		{unix.ECONNREFUSED, []error{ErrRejected}},
		{unix.ENETUNREACH, []error{ErrUnreachable}},
		{unix.EHOSTUNREACH, []error{ErrUnreachable}},
		{unix.ENETDOWN, []error{ErrUnreachable}},
		{unix.EAGAIN, []error{ErrWouldBlock}},
		{unix.EINVAL, nil},
		{unix.ENOMEM, nil},
		{unix.EBUSY, nil},
		{unix.EPERM, nil},
	}
	for _, tt := range tests {
		t.Run(unix.ErrnoName(tt.errno), func(t *testing.T) {
			err := opError("reg mr", tt.errno)
			if !errors.Is(err, tt.errno) {
				t.Errorf("%v does not wrap %v", err, unix.ErrnoName(tt.errno))
			}
			var e unix.Errno
			if !errors.As(err, &e) || e != tt.errno {
				t.Errorf("errors.As(%v) = %v, want %v", err, e, tt.errno)
			}
			if !strings.HasPrefix(err.Error(), "verbs: reg mr: ") || !strings.HasSuffix(err.Error(), tt.errno.Error()) {
				t.Errorf("message %q: want \"verbs: reg mr: ...%s\"", err, tt.errno.Error())
			}
			for _, s := range allSentinels {
				want := false
				for _, w := range tt.want {
					want = want || w == s
				}
				if got := errors.Is(err, s); got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, want)
				}
			}
		})
	}
}

func TestErrnoTableCoversTableTest(t *testing.T) {
	// Every entry of the table is exercised above: keep the two in step.
	for e := range errnoTable {
		switch e {
		case unix.ENOSYS, unix.ENODEV, unix.ETIMEDOUT, unix.ECONNREFUSED,
			unix.ENETUNREACH, unix.EHOSTUNREACH, unix.ENETDOWN, unix.EAGAIN:
		default:
			t.Errorf("errnoTable entry %s has no case in TestErrnoTable", unix.ErrnoName(e))
		}
	}
}

func TestSentinelMessages(t *testing.T) {
	if !errors.Is(ErrNoKernelSupport, ErrNoDevice) {
		t.Error("ErrNoKernelSupport must satisfy errors.Is(_, ErrNoDevice)")
	}
	if errors.Is(ErrNoDevice, ErrNoKernelSupport) {
		t.Error("ErrNoDevice must not satisfy errors.Is(_, ErrNoKernelSupport)")
	}
	got := opError("get device list", unix.ENOSYS).Error()
	if want := "verbs: get device list: no kernel RDMA support: function not implemented"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	got = closedError("poll cq").Error()
	if want := "verbs: poll cq: use of closed resource"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

func TestEventErrors(t *testing.T) {
	tests := []struct {
		typ    EventType
		status int
		nilErr bool
		want   []error
		errno  unix.Errno
		text   string
	}{
		{typ: EventAddrResolved, nilErr: true},
		{typ: EventRouteResolved, nilErr: true},
		{typ: EventConnectRequest, nilErr: true},
		{typ: EventEstablished, nilErr: true},
		{typ: EventDisconnected, nilErr: true},
		{typ: EventTimewaitExit, nilErr: true},
		{typ: EventAddrError, status: -int(unix.ENODEV), want: []error{ErrUnreachable, ErrNoDevice}, errno: unix.ENODEV},
		{typ: EventAddrError, status: -int(unix.ETIMEDOUT), want: []error{ErrUnreachable, ErrTimeout}, errno: unix.ETIMEDOUT},
		{typ: EventAddrError, status: 0, want: []error{ErrUnreachable}, errno: unix.EHOSTUNREACH},
		{typ: EventRouteError, status: -int(unix.ENETUNREACH), want: []error{ErrUnreachable}, errno: unix.ENETUNREACH},
		{typ: EventUnreachable, status: -int(unix.ETIMEDOUT), want: []error{ErrUnreachable, ErrTimeout}, errno: unix.ETIMEDOUT},
		{typ: EventRejected, status: 28, want: []error{ErrRejected}, errno: unix.ECONNREFUSED, text: "REJECTED (reject reason 28)"},
		{typ: EventRejected, status: 8, want: []error{ErrRejected}, errno: unix.ECONNREFUSED, text: "(reject reason 8)"},
		{typ: EventRejected, status: -int(unix.ECONNRESET), want: []error{ErrRejected}, errno: unix.ECONNRESET},
		{typ: EventConnectError, status: -int(unix.ETIMEDOUT), want: []error{ErrTimeout}, errno: unix.ETIMEDOUT},
		{typ: EventConnectError, status: 0, want: nil, errno: unix.ECONNABORTED},
		{typ: EventDeviceRemoval, status: 0, want: []error{ErrNoDevice}, errno: unix.ENODEV},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String(), func(t *testing.T) {
			ev := &Event{Type: tt.typ, Status: tt.status}
			if tt.typ.Failure() == tt.nilErr {
				t.Errorf("Failure() = %v, want %v", tt.typ.Failure(), !tt.nilErr)
			}
			err := ev.Err()
			if tt.nilErr {
				if err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Err() = nil")
			}
			if !errors.Is(err, tt.errno) {
				t.Errorf("%v does not wrap %s", err, unix.ErrnoName(tt.errno))
			}
			for _, s := range allSentinels {
				want := false
				for _, w := range tt.want {
					want = want || w == s || errors.Is(w, s)
				}
				if got := errors.Is(err, s); got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, want)
				}
			}
			if !strings.HasPrefix(err.Error(), "verbs: "+tt.typ.String()) {
				t.Errorf("message %q does not start with the event type", err)
			}
			if tt.text != "" && !strings.Contains(err.Error(), tt.text) {
				t.Errorf("message %q does not contain %q", err, tt.text)
			}
		})
	}
}

func TestRCErrno(t *testing.T) {
	tests := []struct {
		rc   int
		err  error
		want unix.Errno
	}{
		{int(unix.EBUSY), nil, unix.EBUSY},
		{-int(unix.EINVAL), nil, unix.EINVAL},
		{-1, unix.ENOMEM, unix.ENOMEM},
		{-1, nil, unix.EIO},
		{int(unix.EBUSY), unix.EINVAL, unix.EBUSY}, // the return code wins
	}
	for _, tt := range tests {
		if got := rcErrno(tt.rc, tt.err); got != tt.want {
			t.Errorf("rcErrno(%d, %v) = %s, want %s", tt.rc, tt.err, unix.ErrnoName(got), unix.ErrnoName(tt.want))
		}
	}
	if got := errnoOf(errors.New("not an errno"), unix.ENODEV); got != unix.ENODEV {
		t.Errorf("errnoOf(non-errno) = %v, want fallback ENODEV", got)
	}
}
