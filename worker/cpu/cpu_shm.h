/*
 * cpu_shm.h - the CPU backend's shared-memory transport: every rank of the
 * communicator on this node, collectives through one shared segment (see
 * cpu_shm.c for the algorithm), and ddp_mem_alloc memory in arenas that
 * the node's ranks map, on which all-reduces run in place.
 *
 * Environment: DDP_SHM_CHUNK_BYTES (slot per rank), DDP_SHM_ARENA_BYTES
 * (address space of each rank's arena; 0: none). Nothing is left in
 * /dev/shm once every rank has attached, even if a rank dies later.
 */
#ifndef DDP_WORKER_CPU_SHM_H
#define DDP_WORKER_CPU_SHM_H

#include <stddef.h>

#include "backend.h"

/* Builds the transport for p (p->rank and p->world_size number the ranks of
 * this node; p->rank_name_* how messages name them). Blocks until every
 * rank has attached or p->timeout_ms passed (-ETIMEDOUT naming the missing
 * ranks); -ENOSPC when /dev/shm has no room; other negative errnos from the
 * store or the system. errbuf gets the message. */
int cpu_shm_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		size_t errbuf_len);

#endif
