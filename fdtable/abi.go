package fdtable

/*
#include <stdlib.h>
#include "fdtable.h"
#include "reason.h"
*/
import "C"

import "unsafe"

// cDescribe is osf_reason_describe (reason.h), the text libosf.so's C log
// lines give a reason: TestReasonDescribe holds it to policy's Describe.
func cDescribe(r, rule int, detail string) string {
	var buf [512]C.char
	d := C.CString(detail)
	defer C.free(unsafe.Pointer(d))
	C.osf_reason_describe(C.int(r), C.int(rule), d, &buf[0], C.size_t(len(buf)))
	return C.GoString(&buf[0])
}

// The C enums that internal/policy mirrors by value, by their C names:
// policy must stay free of cgo (osfrun is built without it), so
// TestPolicyABI holds policy.Reason and policy.Transport to these.
var (
	cReasons = map[string]uint8{
		"OSF_R_NONE":             C.OSF_R_NONE,
		"OSF_R_RULE":             C.OSF_R_RULE,
		"OSF_R_NO_RULE":          C.OSF_R_NO_RULE,
		"OSF_R_NO_LISTENER":      C.OSF_R_NO_LISTENER,
		"OSF_R_NO_RDMA_DEVICE":   C.OSF_R_NO_RDMA_DEVICE,
		"OSF_R_FORK_NO_RDMA":     C.OSF_R_FORK_NO_RDMA,
		"OSF_R_STRICT":           C.OSF_R_STRICT,
		"OSF_R_RESOURCE":         C.OSF_R_RESOURCE,
		"OSF_R_HANDSHAKE":        C.OSF_R_HANDSHAKE,
		"OSF_R_TRANSPORT_KERNEL": C.OSF_R_TRANSPORT_KERNEL,
		"OSF_R_DISABLED":         C.OSF_R_DISABLED,
		"OSF_R_BACKLOG":          C.OSF_R_BACKLOG,
		"OSF_R_PEER_KERNEL":      C.OSF_R_PEER_KERNEL,
		"OSF_R_SHM_REMOTE":       C.OSF_R_SHM_REMOTE,
		"OSF_R_SANDBOX":          C.OSF_R_SANDBOX,
		"OSF_R_GO_OFF":           C.OSF_R_GO_OFF,
		"OSF_R_GO_STRIPPED":      C.OSF_R_GO_STRIPPED,
		"OSF_R_GO_UNKNOWN":       C.OSF_R_GO_UNKNOWN,
	}
	cTransports = map[string]uint8{
		"OSF_TP_KERNEL":  C.OSF_TP_KERNEL,
		"OSF_TP_SHM":     C.OSF_TP_SHM,
		"OSF_TP_RDMA":    C.OSF_TP_RDMA,
		"OSF_TP_GATEWAY": C.OSF_TP_GATEWAY,
	}
)
