package main

/*
#include <sys/socket.h>
#include "core_api.h"
#include "../../fdtable/fdtable.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"os"
	"unsafe"

	_ "github.com/osfproject/osf/fdtable" // rebuilds the core when fdtable.h changes (fdtable/headers.go)
	"github.com/osfproject/osf/internal/policy"
	"github.com/osfproject/osf/shm"
	"golang.org/x/sys/unix"
)

func main() {}

// core is the state of the loaded core; written once by osfcore_init and
// then only read, by the single osf-core thread that calls into Go.
var core struct {
	cfg     *policy.Config
	prog    string
	isLocal func(netip.Addr) bool
	rdma    func(netip.Addr) (string, bool, string)
	log     *logger
}

//export osfcore_init
func osfcore_init(in *C.struct_osf_core_init_in, out *C.struct_osf_core_init_out) C.int {
	if in.abi != C.OSF_CORE_ABI {
		return C.int(unix.EPROTO)
	}
	env := splitEnv(C.GoBytes(unsafe.Pointer(in.env), C.int(in.env_len)))
	core.prog = C.GoString(in.prog)
	cfg, err := policy.Parse(env)
	if err != nil {
		// Reported once, with the exact offending text; osf then stays
		// out of the way for the life of this process.
		report("%v; osf is disabled (pass-through) in this process\n", err)
		out.disabled = 1
		return 0
	}
	core.cfg = cfg
	core.isLocal = shm.IsLocal
	core.rdma = rdmaProbe
	var logFD int
	core.log, logFD = newLogger(cfg, int(in.pid), core.prog, int(in.hidden_base))
	out.log_fd = C.int32_t(logFD)
	core.log.Infof("core loaded: pid=%d prog=%s fresh_copy=%d lib=%s config: %s",
		int(in.pid), core.prog, int(in.fresh_copy), C.GoString(in.lib_path), cfg.Summary())
	startNetpoller()
	// While libosf.so holds the program's low fd numbers: the fds the RDMA
	// libraries open are born in the hidden range.
	startRDMA(cfg, int(in.pid), int(in.hidden_base), in.fresh_copy != 0)
	return 0
}

// startNetpoller makes the runtime create its netpoller (an epoll and an
// eventfd) now, while libosf.so keeps the program's low fd numbers
// occupied, so that those fds are born in osf's hidden range: registering a
// non-blocking pipe with the poller initializes it.
func startNetpoller() {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return
	}
	r, w := os.NewFile(uintptr(p[0]), "osf-poller"), os.NewFile(uintptr(p[1]), "osf-poller")
	r.Close()
	w.Close()
}

// report writes a message to standard error with one raw write.
func report(format string, a ...any) {
	stderr.Write([]byte(fmt.Sprintf(format, a...)))
}

// splitEnv splits the "K=V\0K=V\0" block libosf.so captured.
func splitEnv(b []byte) []string {
	var env []string
	start := 0
	for i, c := range b {
		if c == 0 {
			if i > start {
				env = append(env, string(b[start:i]))
			}
			start = i + 1
		}
	}
	return env
}

// setDetail copies s, truncated and NUL-terminated, into a C char array.
func setDetail(dst *[96]C.char, s string) {
	n := min(len(s), len(dst)-1)
	for i := 0; i < n; i++ {
		dst[i] = C.char(s[i])
	}
	dst[n] = 0
}
