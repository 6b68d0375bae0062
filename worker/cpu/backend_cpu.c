/*
 * backend_cpu.c - the CPU backend: picks the transport (shared memory when
 * every rank is on this node; shared memory per node + a ring between nodes
 * when there are several nodes of several ranks; else the flat TCP ring;
 * DDP_CPU_TRANSPORT or the options force one) and provides the host-memory
 * ops the transports share.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "timeutil.h"

int cpu_synchronize(struct ddp_backend *b)
{
	return 0;
}

int cpu_alloc(struct ddp_backend *b, size_t bytes, void **out)
{
	/* 64-byte alignment keeps the reduction loops on whole cache lines. */
	void *p = NULL;

	if (posix_memalign(&p, 64, bytes ? bytes : 64))
		return -ENOMEM;
	*out = p;
	return 0;
}

void cpu_free_mem(struct ddp_backend *b, void *ptr)
{
	free(ptr);
}

int cpu_copy(struct ddp_backend *b, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memmove(dst, src, bytes);
	return 0;
}

int cpu_copy_host(struct ddp_backend *b, void *dst, const void *src, size_t bytes, int to_host)
{
	return cpu_copy(b, dst, src, bytes);
}

int cpu_poll_ms(uint64_t deadline)
{
	uint64_t left = time_left_ms(deadline);

	return left > INT_MAX ? INT_MAX : (int)left;
}

const char *cpu_op_name(int kind)
{
	static const char *const names[] = {"all-reduce", "broadcast", "all-gather", "barrier"};

	return (kind >= 0 && kind < 4) ? names[kind] : "collective";
}

int backend_cpu_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		    size_t errbuf_len)
{
	enum ddp_transport t = p->transport;
	int nodes_even = p->world_size % p->local_world_size == 0;

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
			 "(WORLD_SIZE %d is not a multiple of LOCAL_WORLD_SIZE %d); use "
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
