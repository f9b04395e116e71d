package policy

import "strconv"

// Role is the side of a connection a route rule or a query is about.
type Role uint8

// The roles. A Query uses Client or Server; a Rule uses any of the three.
const (
	// Client is the side that calls connect; a client query is matched
	// against the destination address.
	Client Role = 1 << iota
	// Server is the side that calls listen; a server query is matched
	// against the listening address.
	Server
	// Both, in a rule, matches clients and servers.
	Both = Client | Server
)

// String returns "client", "server" or "both", or "role(N)" for an invalid
// role.
func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Server:
		return "server"
	case Both:
		return "both"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// parseRole parses "client", "server" or "both".
func parseRole(s string) (Role, bool) {
	for _, r := range [...]Role{Client, Server, Both} {
		if s == r.String() {
			return r, true
		}
	}
	return 0, false
}

// Transport is what carries a connection.
//
// The values are those of enum osf_transport in fdtable/fdtable.h, which
// the fd table records (fdtable.Transport); fdtable's TestPolicyABI checks
// them, since this package stays free of cgo.
type Transport uint8

// The transports.
const (
	// Kernel is kernel TCP.
	Kernel Transport = 1
	// Shm is a shared-memory ring between processes of one host.
	Shm Transport = 2
	// RDMA is RDMA between hosts.
	RDMA Transport = 3
	// Gateway is a stream through an osfgw gateway, which connects to the
	// destination over kernel TCP on this node's behalf.
	Gateway Transport = 4
)

// String returns "kernel", "shm", "rdma" or "gateway", or "transport(N)" for an
// invalid transport.
func (t Transport) String() string {
	switch t {
	case Kernel:
		return "kernel"
	case Shm:
		return "shm"
	case RDMA:
		return "rdma"
	case Gateway:
		return "gateway"
	}
	return "transport(" + strconv.Itoa(int(t)) + ")"
}

// TransportMode is the value of OSF_TRANSPORT: which transports osf may use
// for connections that a route rule offloads.
type TransportMode uint8

// The transport modes. Auto is the zero value and the default.
const (
	// Auto uses shm for peers on this host and RDMA for other hosts.
	Auto TransportMode = iota
	// ShmOnly uses shm only; connections to other hosts use kernel TCP.
	ShmOnly
	// RDMAOnly uses RDMA only, also for peers on this host.
	RDMAOnly
	// KernelOnly offloads nothing.
	KernelOnly
)

var modeNames = [...]string{
	Auto:       "auto",
	ShmOnly:    "shm",
	RDMAOnly:   "rdma",
	KernelOnly: "kernel",
}

// String returns the OSF_TRANSPORT spelling of m ("auto", "shm", "rdma" or
// "kernel"), or "mode(N)" for an invalid mode.
func (m TransportMode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// allowsShm reports whether m may use shm.
func (m TransportMode) allowsShm() bool { return m == Auto || m == ShmOnly }

// allowsRDMA reports whether m may use RDMA.
func (m TransportMode) allowsRDMA() bool { return m == Auto || m == RDMAOnly }

// LogLevel is the value of OSF_LOG_LEVEL. Its numeric values equal those of
// go.uber.org/zap/zapcore.Level, so zapcore.Level(l) converts it.
type LogLevel int8

// The log levels.
const (
	LogDebug LogLevel = -1
	LogInfo  LogLevel = 0
	LogWarn  LogLevel = 1
	LogError LogLevel = 2
)

// String returns the OSF_LOG_LEVEL spelling of l ("debug", "info", "warn" or
// "error"), or "level(N)" for an invalid level.
func (l LogLevel) String() string {
	switch l {
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}
