// shim.h: small C wrappers that cgo can call where libibverbs and librdmacm
// offer only macros, static inline functions or unions (ibv_query_port,
// ibv_reg_mr, ibv_poll_cq, ibv_req_notify_cq, ibv_post_send, ibv_post_recv,
// rdma_get_local_addr, struct rdma_cm_event's param union).
//
// Conventions: a wrapper that can fail returns 0 on success and a positive
// errno value on failure, whatever convention the wrapped call uses (-1 and
// errno, the errno value itself, or a negative errno). The original errno is
// never lost across a cleanup call.

#ifndef OSF_VERBS_SHIM_H
#define OSF_VERBS_SHIM_H

#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// OSF_POLL_BATCH is the most completions osf_poll_cq takes per call.
#define OSF_POLL_BATCH 16

// OSF_MAX_PRIVATE_DATA bounds any private data copied out of a CM event
// (the length field is a uint8_t).
#define OSF_MAX_PRIVATE_DATA 256

// osf_errno turns a libibverbs/librdmacm return code into a positive errno
// value: rc itself when positive, -rc when below -1, and errno (or EIO when
// errno was not set) when rc is -1.
static inline int osf_errno(int rc, int saved_errno) {
	if (rc > 0)
		return rc;
	if (rc < -1)
		return -rc;
	return saved_errno ? saved_errno : EIO;
}

// osf_get_device_list wraps ibv_get_device_list; on failure it returns NULL
// and stores the errno in *err.
static inline struct ibv_device **osf_get_device_list(int *num, int *err) {
	struct ibv_device **list;

	errno = 0;
	*num = 0;
	list = ibv_get_device_list(num);
	*err = list ? 0 : (errno ? errno : ENODEV);
	return list;
}

// osf_device_guid returns the node GUID of dev in host byte order.
static inline uint64_t osf_device_guid(struct ibv_device *dev) {
	return be64toh(ibv_get_device_guid(dev));
}

// osf_query_port wraps the ibv_query_port macro.
static inline int osf_query_port(struct ibv_context *ctx, uint8_t port,
				 struct ibv_port_attr *attr) {
	int rc;

	errno = 0;
	rc = ibv_query_port(ctx, port, attr);
	return rc ? osf_errno(rc, errno) : 0;
}

// osf_query_device wraps ibv_query_device.
static inline int osf_query_device(struct ibv_context *ctx,
				   struct ibv_device_attr *attr) {
	int rc;

	errno = 0;
	rc = ibv_query_device(ctx, attr);
	return rc ? osf_errno(rc, errno) : 0;
}

// osf_reg_mr wraps the ibv_reg_mr macro; on failure it returns NULL and
// stores the errno in *err.
static inline struct ibv_mr *osf_reg_mr(struct ibv_pd *pd, void *addr,
					size_t len, int access, int *err) {
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(pd, addr, len, access);
	*err = mr ? 0 : (errno ? errno : EINVAL);
	return mr;
}

// osf_wc is a flat copy of the ibv_wc fields osf uses; imm_data is already
// in host byte order and is 0 unless IBV_WC_WITH_IMM is set in wc_flags.
struct osf_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
};

// osf_poll_cq polls up to n (at most OSF_POLL_BATCH) completions into out
// without blocking. It returns the number polled, or -errno on failure.
static inline int osf_poll_cq(struct ibv_cq *cq, int n, struct osf_wc *out) {
	struct ibv_wc wc[OSF_POLL_BATCH];
	int got, i;

	if (n > OSF_POLL_BATCH)
		n = OSF_POLL_BATCH;
	errno = 0;
	got = ibv_poll_cq(cq, n, wc);
	if (got < 0)
		return -osf_errno(got, errno);
	for (i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].imm_data = (wc[i].wc_flags & IBV_WC_WITH_IMM) ?
			be32toh(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].src_qp = wc[i].src_qp;
		out[i].wc_flags = wc[i].wc_flags;
	}
	return got;
}

// osf_req_notify_cq wraps the ibv_req_notify_cq inline function.
static inline int osf_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
	int rc;

	errno = 0;
	rc = ibv_req_notify_cq(cq, solicited_only);
	return rc ? osf_errno(rc, errno) : 0;
}

// osf_post_send posts one work request built from scalars, so that no Go
// pointer is stored in C memory. A zero length posts no scatter/gather entry
// (a zero-byte SEND or RDMA WRITE, e.g. a bare immediate). imm is in host
// byte order and converted to network byte order here.
static inline int osf_post_send(struct ibv_qp *qp, uint64_t wr_id,
				uint64_t laddr, uint32_t length, uint32_t lkey,
				uint64_t raddr, uint32_t rkey, uint32_t imm,
				int opcode, unsigned int flags) {
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	int rc;

	memset(&wr, 0, sizeof wr);
	sge.addr = laddr;
	sge.length = length;
	sge.lkey = lkey;
	wr.wr_id = wr_id;
	wr.sg_list = length ? &sge : NULL;
	wr.num_sge = length ? 1 : 0;
	wr.opcode = (enum ibv_wr_opcode)opcode;
	wr.send_flags = flags;
	if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM || opcode == IBV_WR_SEND_WITH_IMM)
		wr.imm_data = htobe32(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	errno = 0;
	rc = ibv_post_send(qp, &wr, &bad);
	return rc ? osf_errno(rc, errno) : 0;
}

// osf_post_recv posts one receive; a zero length posts no scatter/gather
// entry, which is enough to take an RDMA WRITE WITH IMMEDIATE completion.
static inline int osf_post_recv(struct ibv_qp *qp, uint64_t wr_id,
				uint64_t addr, uint32_t length, uint32_t lkey) {
	struct ibv_sge sge;
	struct ibv_recv_wr wr, *bad = NULL;
	int rc;

	memset(&wr, 0, sizeof wr);
	sge.addr = addr;
	sge.length = length;
	sge.lkey = lkey;
	wr.wr_id = wr_id;
	wr.sg_list = length ? &sge : NULL;
	wr.num_sge = length ? 1 : 0;
	errno = 0;
	rc = ibv_post_recv(qp, &wr, &bad);
	return rc ? osf_errno(rc, errno) : 0;
}

// osf_query_qp_state stores the current state of qp in *state.
static inline int osf_query_qp_state(struct ibv_qp *qp, int *state) {
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int rc;

	memset(&attr, 0, sizeof attr);
	errno = 0;
	rc = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
	if (rc)
		return osf_errno(rc, errno);
	*state = attr.qp_state;
	return 0;
}

// osf_sockaddr_make fills ss with an AF_INET (addr[0..3]) or AF_INET6
// (addr[0..15], scope) address and a host-order port.
static inline void osf_sockaddr_make(struct sockaddr_storage *ss, int family,
				     const uint8_t *addr, uint16_t port,
				     uint32_t scope) {
	memset(ss, 0, sizeof *ss);
	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		memcpy(&sin->sin_addr, addr, 4);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		memcpy(&sin6->sin6_addr, addr, 16);
		sin6->sin6_scope_id = scope;
	}
}

// osf_sockaddr_parse is the inverse of osf_sockaddr_make; it returns the
// address family (0 when sa is NULL or neither AF_INET nor AF_INET6).
static inline int osf_sockaddr_parse(const struct sockaddr *sa, uint8_t *addr,
				     uint16_t *port, uint32_t *scope) {
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		memcpy(addr, &sin->sin_addr, 4);
		*port = ntohs(sin->sin_port);
		*scope = 0;
		return AF_INET;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

		memcpy(addr, &sin6->sin6_addr, 16);
		*port = ntohs(sin6->sin6_port);
		*scope = sin6->sin6_scope_id;
		return AF_INET6;
	}
	return 0;
}

// osf_local_addr and osf_peer_addr wrap the rdma_get_local_addr and
// rdma_get_peer_addr inline functions.
static inline struct sockaddr *osf_local_addr(struct rdma_cm_id *id) {
	return rdma_get_local_addr(id);
}

static inline struct sockaddr *osf_peer_addr(struct rdma_cm_id *id) {
	return rdma_get_peer_addr(id);
}

// osf_conn_param builds a struct rdma_conn_param on the C side from scalars
// and a private data pointer that rdma_connect/rdma_accept copy before they
// return.
static inline void osf_conn_param(struct rdma_conn_param *p, const void *pd,
				  uint8_t pd_len, uint8_t responder_resources,
				  uint8_t initiator_depth, uint8_t retry_count,
				  uint8_t rnr_retry_count) {
	memset(p, 0, sizeof *p);
	p->private_data = pd_len ? pd : NULL;
	p->private_data_len = pd_len;
	p->responder_resources = responder_resources;
	p->initiator_depth = initiator_depth;
	p->retry_count = retry_count;
	p->rnr_retry_count = rnr_retry_count;
}

// osf_connect wraps rdma_connect.
static inline int osf_connect(struct rdma_cm_id *id, const void *pd,
			      uint8_t pd_len, uint8_t rr, uint8_t depth,
			      uint8_t retry, uint8_t rnr) {
	struct rdma_conn_param p;

	osf_conn_param(&p, pd, pd_len, rr, depth, retry, rnr);
	errno = 0;
	return rdma_connect(id, &p) ? osf_errno(-1, errno) : 0;
}

// osf_accept wraps rdma_accept.
static inline int osf_accept(struct rdma_cm_id *id, const void *pd,
			     uint8_t pd_len, uint8_t rr, uint8_t depth,
			     uint8_t rnr) {
	struct rdma_conn_param p;

	osf_conn_param(&p, pd, pd_len, rr, depth, 0, rnr);
	errno = 0;
	return rdma_accept(id, &p) ? osf_errno(-1, errno) : 0;
}

// osf_cm_event is a flat, self-contained copy of a struct rdma_cm_event for
// an RDMA_PS_TCP id: everything the caller may need after the event has been
// acknowledged.
struct osf_cm_event {
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	int event;
	int status;
	uint8_t private_data[OSF_MAX_PRIVATE_DATA];
	uint32_t private_data_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint32_t qp_num;
};

// osf_get_cm_event gets one event from ch (blocking unless the channel's fd
// is O_NONBLOCK), copies it into *out and acknowledges it at once, so that
// rdma_destroy_id can never wait on an event the caller forgot to ack.
static inline int osf_get_cm_event(struct rdma_event_channel *ch,
				   struct osf_cm_event *out) {
	struct rdma_cm_event *ev = NULL;
	const struct rdma_conn_param *c;

	errno = 0;
	if (rdma_get_cm_event(ch, &ev))
		return osf_errno(-1, errno);
	memset(out, 0, sizeof *out);
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	out->event = ev->event;
	out->status = ev->status;
	c = &ev->param.conn;
	if (c->private_data && c->private_data_len) {
		memcpy(out->private_data, c->private_data, c->private_data_len);
		out->private_data_len = c->private_data_len;
	}
	out->responder_resources = c->responder_resources;
	out->initiator_depth = c->initiator_depth;
	out->flow_control = c->flow_control;
	out->retry_count = c->retry_count;
	out->rnr_retry_count = c->rnr_retry_count;
	out->srq = c->srq;
	out->qp_num = c->qp_num;
	rdma_ack_cm_event(ev);
	return 0;
}

#endif // OSF_VERBS_SHIM_H
