/*
 * cpu_hier.c - the CPU backend across several nodes with several ranks
 * each: shared memory inside each node (cpu_shm.c) and a TCP ring between
 * the nodes' leaders (local rank 0, cpu_ring.c). Ranks are grouped by node
 * as the launcher numbers them: node = rank / LOCAL_WORLD_SIZE.
 *
 * All-reduce: node all-reduce (shm), leaders' all-reduce (ring), node
 * broadcast from the leader; each stage has a fixed order, so the result
 * is bit-identical everywhere and repeatable. A failure in the leaders'
 * ring aborts the node's segment, so the node's other ranks stop at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_hier.h"
#include "cpu_ring.h"
#include "cpu_shm.h"
#include "reduce.h"
#include "transport.h"

struct cpu_hier {
	struct ddp_backend base;
	struct ddp_backend *node;    /* shm among this node's ranks */
	struct ddp_backend *leaders; /* ring among local ranks 0; NULL elsewhere */
	int local_rank, local_world, node_id, nnodes;
};

/* Records the failing stage's message and stops the node. */
static int hier_fail(struct cpu_hier *h, struct ddp_backend *stage, int rc)
{
	if (!h->base.err[0])
		snprintf(h->base.err, sizeof(h->base.err), "%s", stage->err);
	h->node->ops->abort(h->node);
	if (h->leaders)
		h->leaders->ops->abort(h->leaders);
	return rc;
}

/* Broadcasts bytes from the node's leader to the node (shm). */
static int hier_node_bcast(struct cpu_hier *h, void *buf, size_t count, enum ddp_dtype dtype)
{
	int rc = h->node->ops->broadcast(h->node, buf, count, dtype, 0);

	return rc < 0 ? hier_fail(h, h->node, rc) : 0;
}

static int hier_allreduce(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			  enum ddp_op op)
{
	struct cpu_hier *h = (struct cpu_hier *)b;
	enum ddp_op partial = op == DDP_AVG ? DDP_SUM : op;
	int rc;

	if (count == 0)
		return 0;
	rc = h->node->ops->allreduce(h->node, buf, count, dtype, partial);
	if (rc < 0)
		return hier_fail(h, h->node, rc);
	if (h->leaders) {
		rc = h->leaders->ops->allreduce(h->leaders, buf, count, dtype, partial);
		if (rc < 0)
			return hier_fail(h, h->leaders, rc);
		if (op == DDP_AVG)
			cpu_divide(buf, count, dtype, b->world_size);
	}
	return hier_node_bcast(h, buf, count, dtype);
}

static int hier_broadcast(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			  int root)
{
	struct cpu_hier *h = (struct cpu_hier *)b;
	int root_node = root / h->local_world, root_local = root % h->local_world, rc;

	if (count == 0)
		return 0;
	/* On the root's node everyone gets it from the root directly. */
	if (h->node_id == root_node) {
		rc = h->node->ops->broadcast(h->node, buf, count, dtype, root_local);
		if (rc < 0)
			return hier_fail(h, h->node, rc);
	}
	if (h->leaders) {
		rc = h->leaders->ops->broadcast(h->leaders, buf, count, dtype, root_node);
		if (rc < 0)
			return hier_fail(h, h->leaders, rc);
	}
	return h->node_id == root_node ? 0 : hier_node_bcast(h, buf, count, dtype);
}

static int hier_allgather(struct ddp_backend *b, const void *send, void *recv, size_t count,
			  enum ddp_dtype dtype)
{
	struct cpu_hier *h = (struct cpu_hier *)b;
	size_t node_elems = (size_t)h->local_world * count;
	char *mine = (char *)recv + (size_t)h->node_id * node_elems * ddp_dtype_size(dtype);
	int rc;

	if (count == 0)
		return 0;
	rc = h->node->ops->allgather(h->node, send, mine, count, dtype);
	if (rc < 0)
		return hier_fail(h, h->node, rc);
	if (h->leaders) {
		rc = h->leaders->ops->allgather(h->leaders, mine, recv, node_elems, dtype);
		if (rc < 0)
			return hier_fail(h, h->leaders, rc);
	}
	return hier_node_bcast(h, recv, (size_t)b->world_size * count, dtype);
}

static int hier_barrier(struct ddp_backend *b)
{
	struct cpu_hier *h = (struct cpu_hier *)b;
	int rc = h->node->ops->barrier(h->node);

	if (rc < 0)
		return hier_fail(h, h->node, rc);
	if (h->leaders && (rc = h->leaders->ops->barrier(h->leaders)) < 0)
		return hier_fail(h, h->leaders, rc);
	rc = h->node->ops->barrier(h->node);
	return rc < 0 ? hier_fail(h, h->node, rc) : 0;
}

static void hier_abort(struct ddp_backend *b)
{
	struct cpu_hier *h = (struct cpu_hier *)b;

	if (h->node)
		h->node->ops->abort(h->node);
	if (h->leaders)
		h->leaders->ops->abort(h->leaders);
}

static void hier_close(struct ddp_backend *b)
{
	struct cpu_hier *h = (struct cpu_hier *)b;

	if (h->node)
		h->node->ops->close(h->node);
	if (h->leaders)
		h->leaders->ops->close(h->leaders);
	free(h);
}

/* The node's arena, so node-level all-reduces can run in place. */
static int hier_alloc(struct ddp_backend *b, size_t bytes, void **out)
{
	struct cpu_hier *h = (struct cpu_hier *)b;

	return h->node->ops->alloc(h->node, bytes, out);
}

static void hier_free_mem(struct ddp_backend *b, void *ptr)
{
	struct cpu_hier *h = (struct cpu_hier *)b;

	h->node->ops->free_mem(h->node, ptr);
}

static const struct ddp_backend_ops hier_ops = {
    .name = "cpu-hier",
    .device_memory = 0,
    .allreduce = hier_allreduce,
    .broadcast = hier_broadcast,
    .allgather = hier_allgather,
    .barrier = hier_barrier,
    .synchronize = cpu_synchronize,
    .alloc = hier_alloc,
    .free_mem = hier_free_mem,
    .copy = cpu_copy,
    .abort = hier_abort,
    .close = hier_close,
};

int cpu_hier_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		 size_t errbuf_len)
{
	struct cpu_hier *h = calloc(1, sizeof(*h));
	struct ddp_backend_params sub = *p;
	char prefix[400];
	int rc;

	*out = NULL;
	if (!h)
		return -ENOMEM;
	h->base.ops = &hier_ops;
	h->base.rank = p->rank;
	h->base.world_size = p->world_size;
	h->base.device = -1;
	h->local_world = p->local_world_size;
	h->local_rank = p->rank % p->local_world_size;
	h->node_id = p->rank / p->local_world_size;
	h->nnodes = p->world_size / p->local_world_size;
	/* Node-local shared memory, keyed by the node number. */
	snprintf(prefix, sizeof(prefix), "%s/node_%d", p->prefix, h->node_id);
	sub.prefix = prefix;
	sub.rank = sub.local_rank = h->local_rank;
	sub.world_size = sub.local_world_size = h->local_world;
	sub.rank_name_base = h->node_id * h->local_world;
	sub.rank_name_stride = 1;
	/* A re-formed hierarchy's node segment takes over the old one's
	 * arena; the leaders' ring has no memory to keep. */
	sub.prev = p->prev && p->prev->ops == &hier_ops ? ((struct cpu_hier *)p->prev)->node : NULL;
	rc = cpu_shm_new(&sub, &h->node, errbuf, errbuf_len);
	if (rc < 0)
		goto fail;
	if (h->local_rank == 0) {
		snprintf(prefix, sizeof(prefix), "%s/leaders", p->prefix);
		sub = *p;
		sub.prefix = prefix;
		sub.rank = h->node_id;
		sub.world_size = h->nnodes;
		sub.local_rank = 0;
		sub.local_world_size = 1;
		sub.rank_name_base = 0;
		sub.rank_name_stride = h->local_world;
		sub.prev = NULL;
		rc = cpu_ring_new(&sub, &h->leaders, errbuf, errbuf_len);
		if (rc < 0)
			goto fail;
	}
	*out = &h->base;
	return 0;
fail:
	hier_close(&h->base);
	return rc;
}
