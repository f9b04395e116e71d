/* reason.h: the text of each enum osf_reason (fdtable.h), for log lines
 * written in C (preload/log.c). Go's internal/policy.Reason.Describe says
 * the same; fdtable's TestReasonDescribe holds the two together for every
 * reason, rule and detail shape. */
#ifndef OSF_REASON_H
#define OSF_REASON_H

#include <stdio.h>
#include <string.h>

#include "fdtable.h"

/* osf_reason_text is the text of r with "%d" standing for the rule
 * number, or NULL for an undefined reason. */
static inline const char *osf_reason_text(int r)
{
	switch (r) {
	case OSF_R_NONE: return "offloaded";
	case OSF_R_RULE: return "route rule %d chose kernel";
	case OSF_R_NO_RULE: return "no route rule matched";
	case OSF_R_NO_LISTENER:
		return "no osf listener at the peer (peer without osf, or not listening)";
	case OSF_R_NO_RDMA_DEVICE:
		return "peer is another host and no RDMA device serves the route";
	case OSF_R_FORK_NO_RDMA: return "fork child could not set up RDMA";
	case OSF_R_STRICT: return "strict mode refused the fallback";
	case OSF_R_RESOURCE: return "resource limit";
	case OSF_R_HANDSHAKE: return "handshake failed";
	case OSF_R_TRANSPORT_KERNEL: return "OSF_TRANSPORT=kernel";
	case OSF_R_DISABLED:
		return "osf disabled (malformed configuration or core unavailable)";
	case OSF_R_BACKLOG: return "osf listener backlog full";
	case OSF_R_PEER_KERNEL:
		return "peer connected over kernel TCP (peer without osf or routed to kernel)";
	case OSF_R_SHM_REMOTE: return "OSF_TRANSPORT=shm and the peer is another host";
	case OSF_R_SANDBOX: return "seccomp filter in this process";
	case OSF_R_GO_OFF: return "Go program and OSF_GO is not 1";
	case OSF_R_GO_STRIPPED: return "Go program without a symbol table (stripped)";
	case OSF_R_GO_UNKNOWN: return "Go version or code not recognised";
	}
	return NULL;
}

/* osf_reason_describe writes, NUL-terminated and truncated to n bytes,
 * what policy.Reason(r).Describe(rule, detail) returns: the text with the
 * rule number filled in (rule 0 drops " %d"), then ": detail" unless
 * detail is empty or NULL. */
static inline void osf_reason_describe(int r, int rule, const char *detail,
				       char *out, size_t n)
{
	const char *t = osf_reason_text(r), *d;
	size_t k = 0;
	int w;

	if (n == 0)
		return;
	out[0] = 0;
	if (!t)
		w = snprintf(out, n, "reason(%d)", r);
	else if (!(d = strstr(t, " %d")))
		w = snprintf(out, n, "%s", t);
	else if (rule > 0)
		w = snprintf(out, n, "%.*s %d%s", (int)(d - t), t, rule, d + 3);
	else
		w = snprintf(out, n, "%.*s%s", (int)(d - t), t, d + 3);
	if (w > 0)
		k = (size_t)w < n ? (size_t)w : n - 1;
	if (detail && detail[0])
		snprintf(out + k, n - k, ": %s", detail);
}

#endif
