/*
 * cpu_ring.h - the CPU backend's TCP ring: rank r sends to r+1 and
 * receives from r-1 (ranks on any nodes); all-reduce as reduce-scatter then
 * all-gather, reducing pieces as they arrive (see cpu_ring.c). A rank that
 * fails shuts its sockets down, so the failure travels round the ring.
 *
 * Environment: DDP_RING_ADDR (the IPv4 address to listen on; default: the
 * local address that routes to the store).
 */
#ifndef DDP_WORKER_CPU_RING_H
#define DDP_WORKER_CPU_RING_H

#include <stddef.h>

#include "backend.h"

/* Builds the ring for p through the store (ring_setup.h): blocks until both
 * neighbours are connected or p->timeout_ms passed (-ETIMEDOUT), message in
 * errbuf. */
int cpu_ring_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		 size_t errbuf_len);

#endif
