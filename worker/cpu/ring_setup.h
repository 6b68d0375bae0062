/*
 * ring_setup.h - the TCP ring's two connections, made through the store:
 * each rank listens on a kernel-chosen port, publishes "ip port" under the
 * backend's prefix, connects to rank+1 and accepts rank-1; both ends check
 * a hello carrying a magic number, the ranks and the namespace token, so a
 * stray or stale connection is refused.
 */
#ifndef DDP_WORKER_CPU_RING_SETUP_H
#define DDP_WORKER_CPU_RING_SETUP_H

#include <stdint.h>

#include "backend.h"

/* Listens on this node's address for the other nodes (DDP_RING_ADDR, else
 * the launcher's DDP_LOCAL_ADDR, else the interface that routes to
 * p->master_addr, else the default route's; see ring_local_addr), publishes
 * it, connects and accepts within p->timeout_ms.
 * *fd_next (to rank+1) and *fd_prev (from rank-1) come back non-blocking.
 * On failure (-ETIMEDOUT when a rank never arrives or never connects, or
 * another negative errno) errbuf names the rank and no fd is left open. */
int ring_setup(const struct ddp_backend_params *p, uint64_t token, int *fd_next, int *fd_prev,
	       char *errbuf, size_t errbuf_len);

#endif
