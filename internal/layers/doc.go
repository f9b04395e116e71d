// Package layers holds the tree's dependency rule and its test: which
// folder may include or import which (docs/ARCHITECTURE.md, "Layers").
// TestLayers reads every C and Go file's #include lines (cgo preambles
// too) and Go imports, maps each file to its unit (a folder named in
// Allowed, the longest that contains it) and fails on an edge the table
// does not allow, naming the file and line. The table itself has no
// circle. TestFileSize holds every product source file (not tests/,
// spike/ or a _test.go) to 900 lines.
//
// A new folder gets a row in Allowed before it builds:
//
//	"sdp/newkind": {"sdp", "fdtable", "include"},
package layers

// Allowed says, for each unit, the units its files may include or import
// (besides its own files). A unit is a folder of the tree; a file belongs
// to the longest unit that contains it ("sdp/rdma/tx.c" to "sdp/rdma",
// "preload/core/main.go" to "preload"). "*" allows any unit but "preload"
// (tests and spikes only): nothing includes or imports preload/, the top
// of libosf.so, and a lower unit that needs something of an upper one
// declares the interface itself for the upper to implement (as
// selectmux/ready.h and host.h do for preload/). A test file (_test.go)
// may also use internal/testutil and any unit that cannot reach its own
// through the table, except preload and the programs.
var Allowed = map[string][]string{
	// libosf.so's hooks and connections, and its Go core (preload/core).
	"preload": {"selectmux", "sdp", "sdp/rdma", "shm", "verbs", "verbs/devroute", "fdtable",
		"internal/routec", "internal/gateway", "internal/policy", "include"},
	// poll/select/epoll over offloaded and kernel fds.
	"selectmux": {"sdp", "fdtable", "include"},
	// the stream protocol (segments, set-up, wake), C and Go.
	"sdp": {"fdtable", "include"},
	// the RDMA transport under sdp.
	"sdp/rdma": {"sdp", "shm", "verbs", "verbs/devroute", "fdtable", "include"},
	// a unit-test driver of sdp's C.
	"sdp/sidetest": {"sdp", "include"},
	// the shm transport's Go binding of sdp's set-up.
	"shm": {"sdp", "verbs/devroute", "fdtable", "include"},
	// the per-process fd table, the bottom of libosf.so.
	"fdtable": {"include"},
	// RDMA verbs; knows nothing of sockets.
	"verbs":          {"verbs/devroute"},
	"verbs/devroute": {},
	// the public C API (qsock.h).
	"include": {},
	// route lookup (C and its Go binding), policy, the gateway protocol.
	"internal/routec":  {},
	"internal/policy":  {},
	"internal/gateway": {},
	// fuzz targets of the C parsers of peer-written data.
	"internal/peerwire": {"sdp", "internal/gateway", "fdtable", "include"},
	// helpers shared by tests.
	"internal/testutil": {"verbs", "verbs/devroute", "include"},
	"internal/mangen":   {"internal/policy"},
	"internal/layers":   {},
	// the programs: anything below preload, not each other.
	"cmd/osfgw": {"sdp", "sdp/rdma", "shm", "verbs", "verbs/devroute", "fdtable",
		"internal/policy", "internal/gateway", "internal/routec", "include"},
	"cmd/osfrun": {"internal/policy", "internal/gateway", "verbs/devroute", "include"},
	"cmd/osfstat": {"sdp", "fdtable", "internal/policy", "internal/routec",
		"verbs", "verbs/devroute", "include"},
	"cmd/osfperf": {"include"},
	// integration tests, benchmarks and spikes.
	"tests": {"*"},
	"spike": {"*"},
}
