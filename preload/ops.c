//go:build osf_make

/* ops.c: the list of per-kind operations tables (ops.h), and the tables
 * of offloaded connections: shm and RDMA share the ring functions today
 * (conn_io.c, conn_poll.c, conn.c; an RDMA connection's writes post on
 * the writer's thread from inside them, conn_rdma.c), and are two tables
 * so that either can change without a test of the transport. */
#include "ops.h"
#include "conn.h"

#define RING_OPS                                                               \
	.ready = {                                                             \
		.poll = osf_conn_poll,                                         \
		.arm_kinds = osf_conn_arm_kinds_fd,                            \
		.arm = osf_conn_arm,                                           \
		.disarm = osf_conn_disarm,                                     \
		.stamp = osf_conn_stamp,                                       \
		.trim = osf_conn_trim,                                         \
		.rx_blind = osf_conn_rx_blind,                                 \
		.wake_events = osf_conn_wake_events,                           \
		.wake_tx_fd = osf_conn_wake_tx_fd,                             \
		.hold = osf_conn_hold,                                         \
	},                                                                     \
	.recv = osf_conn_recv, .send = osf_conn_send, .close = osf_conn_close

const struct osf_fd_ops osf_ops_shm = {RING_OPS};
const struct osf_fd_ops osf_ops_rdma = {RING_OPS, .ready.chan = osf_conn_chan};

const struct osf_fd_ops *const osf_fd_ops[OSF_FDT_OPS_MAX] = {
	[OSF_OPS_SHM] = &osf_ops_shm,
	[OSF_OPS_RDMA] = &osf_ops_rdma,
	[OSF_OPS_GW_PENDING] = &osf_ops_gw_pending,
};

const struct osf_ready *const osf_ready_ops[OSF_FDT_OPS_MAX] = {
	[OSF_OPS_SHM] = &osf_ops_shm.ready,
	[OSF_OPS_RDMA] = &osf_ops_rdma.ready,
	[OSF_OPS_GW_PENDING] = &osf_ops_gw_pending.ready,
};
