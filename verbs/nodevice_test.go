package verbs

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests need no RDMA device; on a machine that has one, the few that
// assert its absence skip.

func kernelHasRDMA() bool {
	_, err := os.Stat("/sys/class/infiniband")
	return err == nil
}

func TestDevicesWithoutDevice(t *testing.T) {
	devs, err := Devices()
	if err == nil {
		t.Skipf("this machine has %d RDMA devices", len(devs))
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Devices() error %v does not satisfy errors.Is(_, ErrNoDevice)", err)
	}
	var e unix.Errno
	if !errors.As(err, &e) {
		t.Errorf("Devices() error %v wraps no errno", err)
	}
	if !kernelHasRDMA() {
		if !errors.Is(err, ErrNoKernelSupport) || !errors.Is(err, unix.ENOSYS) {
			t.Errorf("without /sys/class/infiniband, Devices() = %v; want ErrNoKernelSupport wrapping ENOSYS", err)
		}
		if want := "verbs: get device list: no kernel RDMA support: function not implemented"; err.Error() != want {
			t.Errorf("message %q, want %q", err, want)
		}
	}
	// A second call must say the same (libibverbs caches its init).
	if _, err2 := Devices(); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second Devices() = %v, first %v", err2, err)
	}
}

func TestOpenDeviceWithoutDevice(t *testing.T) {
	if _, err := Devices(); err == nil {
		t.Skip("this machine has RDMA devices")
	}
	for _, name := range []string{"", "mlx5_0"} {
		c, err := OpenDevice(name)
		if err == nil {
			c.Close()
			t.Fatalf("OpenDevice(%q) succeeded without devices", name)
		}
		if !errors.Is(err, ErrNoDevice) {
			t.Errorf("OpenDevice(%q) = %v, want ErrNoDevice", name, err)
		}
	}
}

func TestOpenDeviceNoSuchName(t *testing.T) {
	_, err := OpenDevice("osf-no-such-device")
	if !errors.Is(err, ErrNoDevice) || !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.ENOSYS) {
		t.Errorf("OpenDevice(no such name) = %v, want ErrNoDevice", err)
	}
}

func TestEventChannelWithoutDevice(t *testing.T) {
	if _, err := Devices(); err == nil {
		t.Skip("this machine has RDMA devices")
	}
	ch, err := NewEventChannel()
	if err == nil {
		ch.Close()
		t.Skip("rdma_cm works without verbs devices here")
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("NewEventChannel() = %v, want ErrNoDevice", err)
	}
	var e unix.Errno
	if !errors.As(err, &e) {
		t.Errorf("NewEventChannel() error %v wraps no errno", err)
	}
}

// TestZeroValuesAreClosed checks that every resource type's zero value (and
// nil pointer) reports ErrClosed from Close and from its methods, instead
// of touching a NULL C pointer.
func TestZeroValuesAreClosed(t *testing.T) {
	closers := map[string]interface{ Close() error }{
		"Context":      &Context{},
		"PD":           &PD{},
		"MR":           &MR{},
		"CompChannel":  &CompChannel{},
		"CQ":           &CQ{},
		"QP":           &QP{},
		"EventChannel": &EventChannel{},
		"CMID":         &CMID{},
		"nil Context":  (*Context)(nil),
		"nil PD":       (*PD)(nil),
		"nil MR":       (*MR)(nil),
		"nil CQ":       (*CQ)(nil),
		"nil QP":       (*QP)(nil),
		"nil CMID":     (*CMID)(nil),
		"nil Channel":  (*EventChannel)(nil),
		"nil CompChan": (*CompChannel)(nil),
	}
	for name, c := range closers {
		for i := range 2 {
			if err := c.Close(); !errors.Is(err, ErrClosed) {
				t.Errorf("%s: Close #%d = %v, want ErrClosed", name, i+1, err)
			}
		}
	}

	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s = %v, want ErrClosed", what, err)
		}
	}
	var ctx Context
	_, err := ctx.AllocPD()
	check("Context.AllocPD", err)
	_, err = ctx.CreateCQ(16, nil, 0)
	check("Context.CreateCQ", err)
	_, err = ctx.CreateCompChannel()
	check("Context.CreateCompChannel", err)
	_, err = ctx.Attr()
	check("Context.Attr", err)
	_, err = ctx.QueryPort(1)
	check("Context.QueryPort", err)

	var pd PD
	_, err = pd.RegMR(nil, 0, AccessLocalWrite)
	check("PD.RegMR", err)

	var cq CQ
	n, err := cq.Poll(make([]WC, 4))
	check("CQ.Poll", err)
	if n != 0 {
		t.Errorf("closed CQ.Poll returned %d completions", n)
	}
	check("CQ.ReqNotify", cq.ReqNotify(false))
	cq.AckEvents(3) // must not crash
	if cq.Size() != 0 {
		t.Errorf("closed CQ.Size() = %d", cq.Size())
	}

	var ch CompChannel
	_, err = ch.GetEvent()
	check("CompChannel.GetEvent", err)
	check("CompChannel.SetNonblock", ch.SetNonblock(true))
	if ch.Fd() != -1 {
		t.Errorf("closed CompChannel.Fd() = %d", ch.Fd())
	}

	var qp QP
	check("QP.PostWriteImm", qp.PostWriteImm(1, SGE{}, 0, 0, 0, true))
	check("QP.PostSend", qp.PostSend(SendWR{Opcode: OpSend}))
	check("QP.PostRecv", qp.PostRecv(1, SGE{}))
	_, err = qp.State()
	check("QP.State", err)

	var ech EventChannel
	_, err = ech.GetEvent()
	check("EventChannel.GetEvent", err)
	_, err = ech.WaitEvent(time.Millisecond)
	check("EventChannel.WaitEvent", err)
	_, err = ech.CreateID()
	check("EventChannel.CreateID", err)
	check("EventChannel.SetNonblock", ech.SetNonblock(true))
	if ech.Fd() != -1 {
		t.Errorf("closed EventChannel.Fd() = %d", ech.Fd())
	}

	var id CMID
	ap := netip.MustParseAddrPort("192.0.2.1:5000")
	check("CMID.Bind", id.Bind(ap))
	check("CMID.Listen", id.Listen(1))
	check("CMID.ResolveAddr", id.ResolveAddr(netip.AddrPort{}, ap, time.Second))
	check("CMID.ResolveRoute", id.ResolveRoute(time.Second))
	check("CMID.Connect", id.Connect(ConnParam{}))
	check("CMID.Accept", id.Accept(ConnParam{}))
	check("CMID.Reject", id.Reject(nil))
	check("CMID.Disconnect", id.Disconnect())
	_, err = id.CreateQP(&PD{}, QPConfig{})
	check("CMID.CreateQP", err)
	_, err = id.Context()
	check("CMID.Context", err)
	if id.Port() != 0 || id.QP() != nil || id.LocalAddr().IsValid() || id.RemoteAddr().IsValid() {
		t.Error("closed CMID accessors returned values")
	}
}

func TestCMContextCloseIsNoop(t *testing.T) {
	c := &Context{cm: true}
	for i := range 2 {
		if err := c.Close(); err != nil {
			t.Errorf("Close #%d of a librdmacm-owned Context = %v, want nil", i+1, err)
		}
	}
}

func TestMRSGE(t *testing.T) {
	m := &MR{addr: 0x10000, len: 4096, lkey: 7}
	tests := []struct {
		off, n int
		ok     bool
		want   SGE
	}{
		{0, 0, true, SGE{Addr: 0x10000, Length: 0, LKey: 7}},
		{0, 4096, true, SGE{Addr: 0x10000, Length: 4096, LKey: 7}},
		{100, 28, true, SGE{Addr: 0x10064, Length: 28, LKey: 7}},
		{4096, 0, true, SGE{Addr: 0x11000, Length: 0, LKey: 7}},
		{4095, 2, false, SGE{}},
		{4097, 0, false, SGE{}},
		{-1, 1, false, SGE{}},
		{0, -1, false, SGE{}},
	}
	for _, tt := range tests {
		got, err := m.SGE(tt.off, tt.n)
		if (err == nil) != tt.ok {
			t.Errorf("SGE(%d, %d) error = %v, want ok=%v", tt.off, tt.n, err, tt.ok)
			continue
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("SGE(%d, %d) error %v does not wrap EINVAL", tt.off, tt.n, err)
		}
		if got != tt.want {
			t.Errorf("SGE(%d, %d) = %+v, want %+v", tt.off, tt.n, got, tt.want)
		}
	}
}

func TestConnParamCheck(t *testing.T) {
	tests := []struct {
		name    string
		op      string
		max     int
		p       ConnParam
		tooLong bool
		invalid bool
	}{
		{"connect empty", "connect", MaxConnectPrivateData, ConnParam{}, false, false},
		{"connect 56", "connect", MaxConnectPrivateData, ConnParam{PrivateData: make([]byte, 56)}, false, false},
		{"connect 57", "connect", MaxConnectPrivateData, ConnParam{PrivateData: make([]byte, 57)}, true, true},
		{"accept 196", "accept", MaxAcceptPrivateData, ConnParam{PrivateData: make([]byte, 196)}, false, false},
		{"accept 197", "accept", MaxAcceptPrivateData, ConnParam{PrivateData: make([]byte, 197)}, true, true},
		{"retry 7", "connect", MaxConnectPrivateData, ConnParam{RetryCount: 7, RNRRetryCount: 7}, false, false},
		{"retry 8", "connect", MaxConnectPrivateData, ConnParam{RetryCount: 8}, false, true},
		{"rnr 8", "accept", MaxAcceptPrivateData, ConnParam{RNRRetryCount: 8}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.check(tt.op, tt.max)
			if got := errors.Is(err, ErrPrivateDataTooLong); got != tt.tooLong {
				t.Errorf("check = %v; ErrPrivateDataTooLong %v, want %v", err, got, tt.tooLong)
			}
			if got := errors.Is(err, unix.EINVAL); got != tt.invalid {
				t.Errorf("check = %v; EINVAL %v, want %v", err, got, tt.invalid)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "verbs: "+tt.op+": ") {
				t.Errorf("message %q does not name the operation", err)
			}
		})
	}
	if got := privateDataError("reject", 149, MaxRejectPrivateData).Error(); got != "verbs: reject: private data too long (149 bytes, at most 148): invalid argument" {
		t.Errorf("reject message = %q", got)
	}
}

func TestConnParamRetryDefaults(t *testing.T) {
	tests := []struct {
		p              ConnParam
		retry, rnrWant int
	}{
		{ConnParam{}, 7, 7},
		{ConnParam{RetryCount: 3}, 3, 7},
		{ConnParam{RNRRetryCount: 1}, 7, 1},
		{ConnParam{RetryCount: 6, RNRRetryCount: 5}, 6, 5},
	}
	for _, tt := range tests {
		r, n := tt.p.retries()
		if int(r) != tt.retry || int(n) != tt.rnrWant {
			t.Errorf("%+v.retries() = %d, %d; want %d, %d", tt.p, r, n, tt.retry, tt.rnrWant)
		}
	}
}

func TestSockaddrRoundTrip(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"10.1.2.3:4791", "10.1.2.3:4791"},
		{"0.0.0.0:0", "0.0.0.0:0"},
		{"[::ffff:10.1.2.3]:80", "10.1.2.3:80"},
		{"[fe80::1%1]:5000", ""}, // zone 1 is lo or whatever index 1 is called
		{"[2001:db8::1]:65535", "[2001:db8::1]:65535"},
		{"[::]:7", "[::]:7"},
	}
	for _, tt := range tests {
		in := netip.MustParseAddrPort(tt.in)
		got, err := sockaddrRoundTrip(in)
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if tt.want == "" {
			if got.Addr().WithZone("") != in.Addr().WithZone("") || got.Port() != in.Port() || got.Addr().Zone() == "" {
				t.Errorf("%s round trip = %s", tt.in, got)
			}
			continue
		}
		if got.String() != tt.want {
			t.Errorf("%s round trip = %s, want %s", tt.in, got, tt.want)
		}
	}
	if _, err := sockaddrRoundTrip(netip.AddrPort{}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("zero AddrPort: %v, want EINVAL", err)
	}
	if _, err := sockaddrRoundTrip(netip.MustParseAddrPort("[fe80::1%osf-no-such-if]:1")); !errors.Is(err, unix.EINVAL) {
		t.Errorf("unknown zone: %v, want EINVAL", err)
	}
}

func TestTimeoutMS(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int
	}{
		{0, 2000},
		{-time.Second, 2000},
		{time.Millisecond, 1},
		{time.Microsecond, 1},
		{1500 * time.Millisecond, 1500},
		{1000 * time.Hour, 1<<31 - 1},
	}
	for _, tt := range tests {
		if got := int(timeoutMS(tt.d)); got != tt.want {
			t.Errorf("timeoutMS(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestDeviceForInterfaceLoopback(t *testing.T) {
	dev, port, err := DeviceForInterface("lo")
	if err == nil {
		t.Skipf("lo is served by %s port %d here", dev, port)
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("DeviceForInterface(lo) = %v, want ErrNoDevice", err)
	}
	if !strings.HasPrefix(err.Error(), "verbs: no RDMA device serves interface lo: ") {
		t.Errorf("message %q", err)
	}
	if !kernelHasRDMA() {
		if !errors.Is(err, ErrNoKernelSupport) {
			t.Errorf("without kernel support, error %v does not satisfy ErrNoKernelSupport", err)
		}
		if want := "verbs: no RDMA device serves interface lo: /sys/class/infiniband does not exist (kernel has no RDMA support)"; err.Error() != want {
			t.Errorf("message %q, want %q", err, want)
		}
	}
}

func TestDeviceForInterfaceMissing(t *testing.T) {
	_, _, err := DeviceForInterface("osfnosuch0")
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("DeviceForInterface(osfnosuch0) = %v, want ErrNoDevice", err)
	}
	if want := "verbs: no RDMA device serves interface osfnosuch0: no such network interface"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestDeviceForAddr(t *testing.T) {
	_, _, err := DeviceForAddr(netip.MustParseAddr("127.0.0.1"))
	if err == nil {
		t.Skip("127.0.0.1 is served by an RDMA device here")
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("DeviceForAddr(127.0.0.1) = %v, want ErrNoDevice", err)
	}
	if !strings.HasPrefix(err.Error(), "verbs: no RDMA device serves address 127.0.0.1 (interface lo): ") {
		t.Errorf("message %q", err)
	}
	_, _, err = DeviceForAddr(netip.MustParseAddr("::ffff:192.0.2.77")) // TEST-NET-1, not local
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("DeviceForAddr(192.0.2.77) = %v, want ErrNoDevice", err)
	}
	if want := "verbs: no RDMA device serves address 192.0.2.77: no local interface has address 192.0.2.77"; err == nil || err.Error() != want {
		t.Errorf("message %v, want %q", err, want)
	}
}

func TestCMDevicesWithoutDevice(t *testing.T) {
	if _, err := Devices(); err == nil {
		t.Skip("this machine has RDMA devices")
	}
	ctxs, err := CMDevices()
	if err == nil {
		t.Fatalf("CMDevices() = %d contexts without devices", len(ctxs))
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("CMDevices() = %v, want ErrNoDevice", err)
	}
}

func TestSetAFOnlyClosed(t *testing.T) {
	var id *CMID
	if err := id.SetAFOnly(true); !errors.Is(err, ErrClosed) {
		t.Errorf("SetAFOnly on nil id: %v, want ErrClosed", err)
	}
}
