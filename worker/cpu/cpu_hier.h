/*
 * cpu_hier.h - the CPU backend across several nodes of several ranks each:
 * the shared-memory transport inside each node (cpu_shm.h) and a TCP ring
 * between the nodes' local rank 0 (cpu_ring.h); all-reduce = node
 * all-reduce, leaders' all-reduce, node broadcast, each in a fixed order
 * (bit-identical results everywhere, run after run).
 */
#ifndef DDP_WORKER_CPU_HIER_H
#define DDP_WORKER_CPU_HIER_H

#include <stddef.h>

#include "backend.h"

/* Needs WORLD_SIZE a multiple of LOCAL_WORLD_SIZE and ranks numbered node by
 * node, as the launcher does (node = rank / LOCAL_WORLD_SIZE). Errors as
 * cpu_shm_new and cpu_ring_new; a failure in either stage stops both. */
int cpu_hier_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		 size_t errbuf_len);

#endif
