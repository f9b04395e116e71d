package verbs

import (
	"strings"
	"testing"
)

func TestWCStatusStringMatchesLibibverbs(t *testing.T) {
	for s := WCSuccess; s <= WCTMRndvIncomplete; s++ {
		if got, want := s.String(), wcStatusStrC(s); got != want {
			t.Errorf("WCStatus(%d).String() = %q, ibv_wc_status_str says %q", int(s), got, want)
		}
	}
	if got := WCStatus(99).String(); got != "WCStatus(99)" {
		t.Errorf("unknown status String() = %q", got)
	}
	if got := WCStatus(-1).String(); got != "WCStatus(-1)" {
		t.Errorf("negative status String() = %q", got)
	}
	if !WCSuccess.OK() || WCRetryExcErr.OK() || !WCWRFlushErr.Flushed() || WCSuccess.Flushed() {
		t.Error("WCStatus question methods disagree with their statuses")
	}
}

func TestEventTypeStringMatchesLibrdmacm(t *testing.T) {
	for e := EventAddrResolved; e <= EventTimewaitExit; e++ {
		want := strings.TrimPrefix(eventStrC(e), "RDMA_CM_EVENT_")
		if got := e.String(); got != want {
			t.Errorf("EventType(%d).String() = %q, rdma_event_str says %q", int(e), got, want)
		}
	}
	tests := []struct {
		e    EventType
		want string
	}{
		{EventConnectRequest, "CONNECT_REQUEST"},
		{EventEstablished, "ESTABLISHED"},
		{EventRejected, "REJECTED"},
		{EventType(16), "EventType(16)"},
		{EventType(-1), "EventType(-1)"},
	}
	for _, tt := range tests {
		if got := tt.e.String(); got != tt.want {
			t.Errorf("EventType(%d).String() = %q, want %q", int(tt.e), got, tt.want)
		}
	}
	ev := &Event{Type: EventRejected, Status: 28}
	if got := ev.String(); got != "REJECTED status 28" {
		t.Errorf("Event.String() = %q", got)
	}
	if got := (&Event{Type: EventEstablished}).String(); got != "ESTABLISHED" {
		t.Errorf("Event.String() = %q", got)
	}
}

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{PortActive.String(), "ACTIVE"},
		{PortDown.String(), "DOWN"},
		{PortState(42).String(), "PortState(42)"},
		{LinkLayerInfiniBand.String(), "InfiniBand"},
		{LinkLayerEthernet.String(), "Ethernet"},
		{LinkLayerUnspecified.String(), "unspecified"},
		{TransportIB.String(), "InfiniBand"},
		{TransportIWARP.String(), "iWARP"},
		{Transport(17).String(), "Transport(17)"},
		{MTU1024.String(), "1024"},
		{MTU(0).String(), "MTU(0)"},
		{GUID(0x0002c90300a1b2c3).String(), "0002:c903:00a1:b2c3"},
		{QPRTS.String(), "RTS"},
		{QPErr.String(), "ERR"},
		{QPState(99).String(), "QPState(99)"},
		{WCRecvRDMAWithImm.String(), "RECV_RDMA_WITH_IMM"},
		{WCRDMAWrite.String(), "RDMA_WRITE"},
		{WCOpcode(77).String(), "WCOpcode(77)"},
		{OpWriteImm.String(), "RDMA_WRITE_WITH_IMM"},
		{WROpcode(99).String(), "WROpcode(99)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestEnumQuestions(t *testing.T) {
	mtus := map[MTU]int{MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096, 0: 0, 6: 0}
	for m, want := range mtus {
		if got := m.Bytes(); got != want {
			t.Errorf("MTU(%d).Bytes() = %d, want %d", int(m), got, want)
		}
	}
	if !PortActive.Active() || !PortActiveDefer.Active() || PortDown.Active() || PortInit.Active() {
		t.Error("PortState.Active is wrong")
	}
	if !LinkLayerEthernet.RoCE() || LinkLayerInfiniBand.RoCE() {
		t.Error("LinkLayer.RoCE is wrong")
	}
	for _, s := range []QPState{QPReset, QPInit, QPRTR, QPRTS, QPSQD, QPSQE, QPErr} {
		if s.CanSend() != (s == QPRTS) {
			t.Errorf("%v.CanSend() = %v", s, s.CanSend())
		}
		if s.Failed() != (s == QPErr) {
			t.Errorf("%v.Failed() = %v", s, s.Failed())
		}
	}
	if QPInit.CanReceive() || !QPRTR.CanReceive() || !QPRTS.CanReceive() || QPErr.CanReceive() {
		t.Error("QPState.CanReceive is wrong")
	}
	if !WCRecv.Recv() || !WCRecvRDMAWithImm.Recv() || WCRDMAWrite.Recv() || WCSend.Recv() {
		t.Error("WCOpcode.Recv is wrong")
	}
}
