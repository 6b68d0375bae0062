/*
 * backend_cpu.c - the CPU backend (backend_cpu_new, backend.h): picks one
 * of the three transports (shared memory when every rank is on this node;
 * shared memory per node + a ring between nodes when there are several
 * nodes of several ranks; else the flat TCP ring; DDP_CPU_TRANSPORT or the
 * options force one) and refuses a forced one that cannot work here.
 */
#include <errno.h>
#include <stdio.h>

#include "backend.h"
#include "cpu_hier.h"
#include "cpu_ring.h"
#include "cpu_shm.h"

int backend_cpu_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		    size_t errbuf_len)
{
	enum ddp_transport t = p->transport;
	/* Every node of as many ranks (a node whose replaced worker has not
	 * joined yet has fewer, and its ranks must choose as the others do). */
	int nodes_even = p->nodes_even && p->world_size % p->local_world_size == 0;

	if (t == DDP_TRANSPORT_AUTO) {
		if (p->local_world_size == p->world_size)
			t = DDP_TRANSPORT_SHM;
		else if (p->local_world_size > 1 && nodes_even)
			t = DDP_TRANSPORT_HIER;
		else
			t = DDP_TRANSPORT_RING;
	}
	if (t == DDP_TRANSPORT_SHM && p->local_world_size != p->world_size) {
		snprintf(
		    errbuf, errbuf_len,
		    "the shared-memory transport needs every rank on one node "
		    "(LOCAL_WORLD_SIZE %d != WORLD_SIZE %d); use DDP_CPU_TRANSPORT=hier or ring",
		    p->local_world_size, p->world_size);
		return -EINVAL;
	}
	if (t == DDP_TRANSPORT_HIER && !nodes_even) {
		snprintf(errbuf, errbuf_len,
			 "the hierarchical transport needs the same number of ranks on every node "
			 "(WORLD_SIZE %d, LOCAL_WORLD_SIZE %d here, not every node's); use "
			 "DDP_CPU_TRANSPORT=ring",
			 p->world_size, p->local_world_size);
		return -EINVAL;
	}
	if (t == DDP_TRANSPORT_SHM)
		return cpu_shm_new(p, out, errbuf, errbuf_len);
	if (t == DDP_TRANSPORT_HIER)
		return cpu_hier_new(p, out, errbuf, errbuf_len);
	return cpu_ring_new(p, out, errbuf, errbuf_len);
}
