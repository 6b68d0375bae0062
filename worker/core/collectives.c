/*
 * collectives.c - the public collective entry points: each queues a work
 * item on the communication thread (comm.c); the blocking ones wait for it.
 * Also the namespaced store access.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx.h"

static int coll_check(struct ddp_ctx *ctx, enum ddp_dtype dtype)
{
	if (ddp_dtype_size(dtype) == 0) {
		snprintf(ctx->err, sizeof(ctx->err), "unknown dtype %d", (int)dtype);
		return -EINVAL;
	}
	return 0;
}

static int coll_run(struct ddp_ctx *ctx, struct ddp_work *w)
{
	int rc = comm_submit(ctx, w);

	if (rc >= 0)
		rc = comm_wait(w);
	return rc;
}

int coll_allreduce_async(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dtype,
			 enum ddp_op op, int bucket, struct ddp_work **out)
{
	struct ddp_work *w;
	int rc = coll_check(ctx, dtype);

	*out = NULL;
	if (rc < 0)
		return rc;
	if (op != DDP_SUM && op != DDP_AVG && op != DDP_MAX) {
		snprintf(ctx->err, sizeof(ctx->err), "unknown reduction op %d", (int)op);
		return -EINVAL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->kind = COMM_ALLREDUCE;
	w->buf = buf;
	w->count = count;
	w->dtype = dtype;
	w->op = op;
	w->bucket = bucket;
	comm_submit(ctx, w);
	*out = w;
	return 0;
}

int ddp_allreduce_async(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dtype,
			enum ddp_op op, struct ddp_work **out)
{
	return coll_allreduce_async(ctx, buf, count, dtype, op, -1, out);
}

int ddp_work_wait(struct ddp_work *work)
{
	int rc;

	if (!work)
		return -EINVAL;
	rc = comm_wait(work);
	free(work);
	return rc;
}

int ddp_allreduce(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dtype,
		  enum ddp_op op)
{
	struct ddp_work *w;
	int rc = ddp_allreduce_async(ctx, buf, count, dtype, op, &w);

	return rc < 0 ? rc : ddp_work_wait(w);
}

int ddp_broadcast(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dtype, int root)
{
	struct ddp_work w = {.kind = COMM_BROADCAST,
			     .buf = buf,
			     .count = count,
			     .dtype = dtype,
			     .root = root,
			     .bucket = -1};
	int rc = coll_check(ctx, dtype);

	if (rc < 0)
		return rc;
	if (root < 0 || root >= ctx->world_size) {
		snprintf(ctx->err, sizeof(ctx->err), "broadcast: root %d is not a rank", root);
		return -EINVAL;
	}
	return coll_run(ctx, &w);
}

int ddp_allgather(struct ddp_ctx *ctx, const void *send, void *recv, size_t count,
		  enum ddp_dtype dtype)
{
	struct ddp_work w = {.kind = COMM_ALLGATHER,
			     .buf = recv,
			     .send = send,
			     .count = count,
			     .dtype = dtype,
			     .bucket = -1};
	int rc = coll_check(ctx, dtype);

	return rc < 0 ? rc : coll_run(ctx, &w);
}

int ddp_barrier(struct ddp_ctx *ctx)
{
	struct ddp_work w = {.kind = COMM_BARRIER, .bucket = -1};

	return coll_run(ctx, &w);
}

int ddp_store_set(struct ddp_ctx *ctx, const char *key, const void *value, size_t len)
{
	char full[768];
	int rc;

	snprintf(full, sizeof(full), "%s/user/%s", ctx->prefix, key);
	pthread_mutex_lock(&ctx->kv_lock);
	rc = ctx->kv ? kv_set(ctx->kv, full, value, len) : -ENOTCONN;
	if (rc < 0)
		snprintf(ctx->err, sizeof(ctx->err), "store: cannot set '%s': %s", key,
			 ctx->kv ? kv_error(ctx->kv) : "no store: the last ddp_reform failed");
	pthread_mutex_unlock(&ctx->kv_lock);
	return rc;
}

int ddp_store_get(struct ddp_ctx *ctx, const char *key, void **value, size_t *len)
{
	char full[768];
	int rc;

	snprintf(full, sizeof(full), "%s/user/%s", ctx->prefix, key);
	pthread_mutex_lock(&ctx->kv_lock);
	rc = ctx->kv ? kv_get(ctx->kv, full, ctx->timeout_ms, value, len) : -ENOTCONN;
	if (rc < 0)
		snprintf(ctx->err, sizeof(ctx->err), "store: cannot get '%s': %s", key,
			 ctx->kv ? kv_error(ctx->kv) : "no store: the last ddp_reform failed");
	pthread_mutex_unlock(&ctx->kv_lock);
	return rc;
}

int ddp_mem_alloc(struct ddp_ctx *ctx, size_t bytes, void **out)
{
	int rc = ctx->backend ? ctx->backend->ops->alloc(ctx->backend, bytes, out) : -ECANCELED;

	if (rc < 0)
		snprintf(ctx->err, sizeof(ctx->err), "cannot allocate %zu bytes for collectives",
			 bytes);
	return rc;
}

void ddp_mem_free(struct ddp_ctx *ctx, void *ptr)
{
	if (ptr && ctx->backend)
		ctx->backend->ops->free_mem(ctx->backend, ptr);
}
