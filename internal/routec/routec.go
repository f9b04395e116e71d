// Package routec holds libosf.so's C route evaluator (route.c, route.h:
// internal/policy's configuration parser and route decision in C, built
// into libosf.so by the Makefile) and exposes it to Go tests, so that a
// differential fuzz test holds it to internal/policy: same configuration,
// same query, same decision. Only tests import it.
package routec

/*
#include <stdlib.h>
#include <string.h>
#include "route.h"

static int routec_local(int v4, const uint8_t *a, void *arg)
{
	(void)v4;
	(void)a;
	return arg != NULL;
}

static void routec_decide(const struct osf_route_config *c, int role,
			  const char *prog, int v4, const uint8_t *addr,
			  uint16_t port, int local, int rdma_absent,
			  struct osf_route_decision *d)
{
	struct osf_route_query q;

	memset(&q, 0, sizeof(q));
	q.role = role;
	q.prog = prog;
	q.v4 = v4;
	memcpy(q.addr, addr, v4 ? 4 : 16);
	q.port = port;
	q.is_local = routec_local;
	q.arg = local ? (void *)1 : NULL;
	q.rdma_absent = rdma_absent;
	osf_route_decide(c, &q, d);
}
*/
import "C"

import (
	"net/netip"
	"strings"
	"unsafe"
)

// Results of Parse.
const (
	OK          = C.OSF_ROUTE_OK
	Malformed   = C.OSF_ROUTE_MALFORMED
	Unsupported = C.OSF_ROUTE_UNSUPPORTED
)

// Config is a configuration parsed by the C evaluator.
type Config struct {
	c *C.struct_osf_route_config
	// Mode, Strict, RingSize and the rest, as the C parser saw them.
	Mode, Strict, LogLevel, RingSize int
}

// Parse parses env ("KEY=VALUE" strings) with osf_route_parse; the result
// is OK, Malformed or Unsupported.
func Parse(env []string) (*Config, int) {
	block := strings.Join(env, "\x00")
	if len(env) > 0 {
		block += "\x00"
	}
	cs := C.CBytes([]byte(block))
	defer C.free(cs)
	c := (*C.struct_osf_route_config)(C.malloc(C.sizeof_struct_osf_route_config))
	rc := int(C.osf_route_parse((*C.char)(cs), C.uint32_t(len(block)), c))
	if rc != OK {
		C.free(unsafe.Pointer(c))
		return nil, rc
	}
	return &Config{c: c, Mode: int(c.mode), Strict: int(c.strict), LogLevel: int(c.log_level), RingSize: int(c.ring_size)}, rc
}

// Free releases c.
func (c *Config) Free() { C.free(unsafe.Pointer(c.c)) }

// Decision is osf_route_decide's answer.
type Decision struct {
	Transport, Rule, Reason int
	NeedGo                  bool
	Detail                  string
}

// Decide asks the C evaluator. server selects the role; local answers the
// is-local question for addresses other than loopback and unspecified;
// rdmaAbsent says the RDMA probe would find no device.
func (c *Config) Decide(server bool, prog string, ap netip.AddrPort, local, rdmaAbsent bool) Decision {
	role := C.OSF_ROUTE_CLIENT
	if server {
		role = C.OSF_ROUTE_SERVER
	}
	cp := C.CString(prog)
	defer C.free(unsafe.Pointer(cp))
	a := ap.Addr()
	v4 := 0
	var raw [16]byte
	if a.Is4() {
		v4 = 1
		b := a.As4()
		copy(raw[:], b[:])
	} else {
		raw = a.As16()
	}
	var d C.struct_osf_route_decision
	C.routec_decide(c.c, C.int(role), cp, C.int(v4), (*C.uint8_t)(unsafe.Pointer(&raw[0])), C.uint16_t(ap.Port()),
		C.int(b2i(local)), C.int(b2i(rdmaAbsent)), &d)
	out := Decision{Transport: int(d.transport), Rule: int(d.rule), Reason: int(d.reason), NeedGo: d.need_go != 0}
	if d.detail != nil {
		out.Detail = C.GoString(d.detail)
	}
	return out
}

// NoDevice is the detail of "no RDMA device".
const NoDevice = C.OSF_ROUTE_NO_DEVICE

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
