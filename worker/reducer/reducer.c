/*
 * reducer.c - DDP's gradient reducer: parameters checked and broadcast from
 * rank 0 at creation; gradients packed into buckets (bucket.c) whose
 * all-reduce (avg) is queued on the communication thread as soon as the
 * bucket is complete, in bucket order on every rank (a bucket ready early
 * waits for the ones before it, so every rank issues the same sequence);
 * no_sync; buffers broadcast from rank 0.
 *
 * In place (as llm.c's ZeRO reduces its flat gradient buffer): when a
 * bucket's gradients lie back to back in the application's memory, in
 * parameter order (one flat gradient buffer, as ddp-train keeps), the
 * bucket is that range itself and is all-reduced where it lies, with no
 * copy in or out. Otherwise the bucket is a buffer of its own, packed at
 * grad_ready and unpacked at finish. Both lay a bucket out the same way, so
 * they give the same bits; from ddp_mem_alloc memory the shared-memory
 * transport reduces the range in place across ranks too.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "ctx.h"
#include "reducer.h"
#include "reducer_check.h"
#include "timeutil.h"

struct reducer_bucket {
	void *buf;    /* the bucket's elements: its own buffer, or the view */
	int in_place; /* buf is the parameters' gradients themselves */
	size_t pending;
	struct ddp_work *work;
};

struct ddp_reducer {
	struct ddp_ctx *ctx;
	struct ddp_param *params;
	size_t nparams;
	struct ddp_param *buffers;
	size_t nbuffers;
	struct bucket_plan plan;
	struct reducer_bucket *buckets;
	unsigned char *ready;
	size_t next_launch;
	int sync;
	int finishing; /* inside ddp_reducer_finish */
	int failed;
	struct ddp_reducer_stats stats;
};

size_t ddp_param_numel(const struct ddp_param *p)
{
	size_t n = 1;

	for (int d = 0; d < p->ndim; d++)
		n *= (size_t)p->shape[d];
	return n;
}

static int reducer_copy_params(const struct ddp_param *src, size_t n, struct ddp_param **out)
{
	struct ddp_param *dst = calloc(n ? n : 1, sizeof(*dst));

	*out = dst;
	if (!dst)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		dst[i] = src[i];
		dst[i].name = strdup(src[i].name ? src[i].name : "");
		if (!dst[i].name || src[i].ndim < 0 || src[i].ndim > 8)
			return dst[i].name ? -EINVAL : -ENOMEM;
	}
	return 0;
}

static void reducer_free_params(struct ddp_param *p, size_t n)
{
	for (size_t i = 0; p && i < n; i++)
		free((char *)p[i].name);
	free(p);
}

void ddp_reducer_free(struct ddp_reducer *r)
{
	if (!r)
		return;
	for (size_t b = 0; r->buckets && b < r->plan.nbuckets; b++) {
		if (r->buckets[b].work)
			ddp_work_wait(r->buckets[b].work);
		if (r->buckets[b].buf && !r->buckets[b].in_place)
			r->ctx->backend->ops->free_mem(r->ctx->backend, r->buckets[b].buf);
	}
	free(r->buckets);
	free(r->ready);
	bucket_plan_release(&r->plan);
	reducer_free_params(r->params, r->nparams);
	reducer_free_params(r->buffers, r->nbuffers);
	free(r);
}

static int reducer_plan(struct ddp_reducer *r, const struct ddp_reducer_options *o)
{
	size_t n = r->nparams ? r->nparams : 1;
	size_t *numel = malloc(n * sizeof(*numel));
	enum ddp_dtype *dt = malloc(n * sizeof(*dt));
	int *tr = malloc(n * sizeof(*tr));
	int rc = -ENOMEM;

	if (numel && dt && tr) {
		for (size_t i = 0; i < r->nparams; i++) {
			numel[i] = ddp_param_numel(&r->params[i]);
			dt[i] = r->params[i].dtype;
			tr[i] = r->params[i].requires_grad && r->params[i].grad;
		}
		rc = bucket_plan_build(
		    numel, dt, tr, r->nparams,
		    o && o->bucket_cap_bytes ? o->bucket_cap_bytes : DDP_BUCKET_CAP_DEFAULT,
		    o && o->first_bucket_cap_bytes ? o->first_bucket_cap_bytes
						   : DDP_FIRST_BUCKET_CAP_DEFAULT,
		    &r->plan);
	}
	free(numel);
	free(dt);
	free(tr);
	return rc;
}

/* Points each bucket whose gradients lie back to back, at the offsets the
 * plan gives them, at the first one's gradient (in_place); the others keep
 * buf NULL. A gradient out of place makes its bucket a copy: its base is
 * set to UINTPTR_MAX. */
static void reducer_find_views(struct ddp_reducer *r)
{
	uintptr_t *base = calloc(r->plan.nbuckets ? r->plan.nbuckets : 1, sizeof(*base));

	if (!base)
		return; /* every bucket a copy */
	for (size_t i = 0; i < r->nparams; i++) {
		size_t k = r->plan.bucket_of[i];
		uintptr_t at;

		if (k == BUCKET_NONE)
			continue;
		at = (uintptr_t)r->params[i].grad -
		     r->plan.offset[i] * ddp_dtype_size(r->plan.bucket_dtype[k]);
		if (r->plan.offset[i] == 0 && base[k] == 0)
			base[k] = at;
		else if (at != base[k])
			base[k] = UINTPTR_MAX;
	}
	for (size_t k = 0; k < r->plan.nbuckets; k++) {
		r->buckets[k].in_place = base[k] != 0 && base[k] != UINTPTR_MAX;
		if (r->buckets[k].in_place)
			r->buckets[k].buf = (void *)base[k];
	}
	free(base);
}

static int reducer_alloc_buckets(struct ddp_reducer *r)
{
	struct ddp_backend *b = r->ctx->backend;

	r->buckets = calloc(r->plan.nbuckets ? r->plan.nbuckets : 1, sizeof(*r->buckets));
	r->ready = calloc(r->nparams ? r->nparams : 1, 1);
	if (!r->buckets || !r->ready)
		return -ENOMEM;
	reducer_find_views(r);
	for (size_t k = 0; k < r->plan.nbuckets; k++) {
		size_t bytes = r->plan.bucket_numel[k] * ddp_dtype_size(r->plan.bucket_dtype[k]);
		int rc = r->buckets[k].in_place ? 0 : b->ops->alloc(b, bytes, &r->buckets[k].buf);

		if (rc < 0)
			return rc;
	}
	return 0;
}

static int reducer_broadcast_all(struct ddp_ctx *ctx, struct ddp_param *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int rc = ddp_broadcast(ctx, p[i].data, ddp_param_numel(&p[i]), p[i].dtype, 0);

		if (rc < 0)
			return rc;
	}
	return 0;
}

int ddp_reducer_new(struct ddp_ctx *ctx, const struct ddp_param *params, size_t nparams,
		    const struct ddp_param *buffers, size_t nbuffers,
		    const struct ddp_reducer_options *opts, struct ddp_reducer **out)
{
	struct ddp_reducer *r = calloc(1, sizeof(*r));
	int rc;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->ctx = ctx;
	r->nparams = nparams;
	r->nbuffers = nbuffers;
	r->sync = 1;
	rc = reducer_copy_params(params, nparams, &r->params);
	if (rc == 0)
		rc = reducer_copy_params(buffers, nbuffers, &r->buffers);
	if (rc < 0) {
		snprintf(ctx->err, sizeof(ctx->err), "reducer: bad parameter list (%s)",
			 strerror(-rc));
		goto fail;
	}
	rc = reducer_check_ranks(ctx, r->params, nparams, r->buffers, nbuffers);
	if (rc < 0)
		goto fail;
	rc = reducer_plan(r, opts);
	if (rc == 0)
		rc = reducer_alloc_buckets(r);
	if (rc < 0) {
		snprintf(ctx->err, sizeof(ctx->err), "reducer: cannot plan buckets: %s",
			 strerror(-rc));
		goto fail;
	}
	rc = reducer_broadcast_all(ctx, r->params, nparams);
	if (rc == 0)
		rc = reducer_broadcast_all(ctx, r->buffers, nbuffers);
	if (rc < 0)
		goto fail;
	*out = r;
	return 0;
fail:
	ddp_reducer_free(r);
	return rc;
}

size_t ddp_reducer_num_buckets(const struct ddp_reducer *r)
{
	return r->plan.nbuckets;
}

int ddp_reducer_bucket_of(const struct ddp_reducer *r, size_t param_index)
{
	if (param_index >= r->nparams || r->plan.bucket_of[param_index] == BUCKET_NONE)
		return -1;
	return (int)r->plan.bucket_of[param_index];
}

int ddp_reducer_prepare(struct ddp_reducer *r, int sync)
{
	if (r->failed)
		return -ECANCELED;
	r->sync = sync;
	r->next_launch = 0;
	memset(r->ready, 0, r->nparams ? r->nparams : 1);
	for (size_t k = 0; k < r->plan.nbuckets; k++)
		r->buckets[k].pending = r->plan.bucket_nparams[k];
	return 0;
}

/* Queues every complete bucket from next_launch on, in bucket order. */
static int reducer_launch_ready(struct ddp_reducer *r)
{
	while (r->next_launch < r->plan.nbuckets && r->buckets[r->next_launch].pending == 0) {
		size_t k = r->next_launch++;
		int rc = coll_allreduce_async(r->ctx, r->buckets[k].buf, r->plan.bucket_numel[k],
					      r->plan.bucket_dtype[k], DDP_AVG, (int)k,
					      &r->buckets[k].work);

		if (rc < 0)
			return rc;
	}
	return 0;
}

int ddp_reducer_grad_ready(struct ddp_reducer *r, size_t i)
{
	struct ddp_backend *b = r->ctx->backend;
	const struct ddp_param *p;
	size_t k, esz;
	int rc;

	if (i >= r->nparams) {
		snprintf(r->ctx->err, sizeof(r->ctx->err), "reducer: no parameter %zu", i);
		return -EINVAL;
	}
	k = r->plan.bucket_of[i];
	if (!r->sync || k == BUCKET_NONE || r->ready[i])
		return 0;
	p = &r->params[i];
	esz = ddp_dtype_size(p->dtype);
	/* In place, the all-reduce must still come after the kernels that
	 * wrote this gradient: fence() orders it as copy() would have. */
	if (!r->buckets[k].in_place)
		rc = b->ops->copy(b, (char *)r->buckets[k].buf + r->plan.offset[i] * esz, p->grad,
				  ddp_param_numel(p) * esz);
	else
		rc = b->ops->fence ? b->ops->fence(b) : 0;
	if (rc < 0)
		return rc;
	r->ready[i] = 1;
	r->buckets[k].pending--;
	if (r->buckets[k].pending == 0 && !r->finishing)
		r->stats.early_buckets++;
	return reducer_launch_ready(r);
}

/* Waits for bucket k and copies its averaged gradients back (in place:
 * they are already there, and comm_wait returned after the all-reduce
 * completed, on the device too). */
static int reducer_complete(struct ddp_reducer *r, size_t k)
{
	struct ddp_backend *b = r->ctx->backend;
	struct ddp_work *w = r->buckets[k].work;
	int rc = comm_wait(w);

	r->buckets[k].work = NULL;
	r->stats.comm_seconds += (double)(w->end_ns - w->start_ns) / 1e9;
	free(w);
	if (rc < 0)
		return rc;
	r->stats.bytes_reduced += r->plan.bucket_numel[k] * ddp_dtype_size(r->plan.bucket_dtype[k]);
	for (size_t i = 0; i < r->nparams && !r->buckets[k].in_place; i++) {
		size_t esz = ddp_dtype_size(r->params[i].dtype);

		if (r->plan.bucket_of[i] != k)
			continue;
		rc = b->ops->copy(b, r->params[i].grad,
				  (char *)r->buckets[k].buf + r->plan.offset[i] * esz,
				  ddp_param_numel(&r->params[i]) * esz);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int ddp_reducer_finish(struct ddp_reducer *r)
{
	uint64_t t0 = time_now_ns();
	int rc = 0, first = 0;

	if (r->failed)
		return -ECANCELED;
	if (!r->sync)
		return 0;
	/* Parameters never marked ready still carry their (local) gradient. */
	r->finishing = 1;
	for (size_t i = 0; i < r->nparams && rc == 0; i++)
		rc = ddp_reducer_grad_ready(r, i);
	r->finishing = 0;
	for (size_t k = 0; k < r->plan.nbuckets; k++) {
		int one;

		if (!r->buckets[k].work)
			continue;
		one = reducer_complete(r, k);
		if (one < 0 && first == 0)
			first = one;
	}
	if (rc == 0)
		rc = first;
	if (rc < 0)
		r->failed = 1;
	else
		r->stats.steps++;
	r->stats.wait_seconds += (double)(time_now_ns() - t0) / 1e9;
	return rc;
}

int ddp_reducer_sync_buffers(struct ddp_reducer *r)
{
	if (r->failed)
		return -ECANCELED;
	return reducer_broadcast_all(r->ctx, r->buffers, r->nbuffers);
}

void ddp_reducer_get_stats(const struct ddp_reducer *r, struct ddp_reducer_stats *st)
{
	*st = r->stats;
}

size_t reducer_num_in_place(const struct ddp_reducer *r)
{
	size_t n = 0;

	for (size_t k = 0; k < r->plan.nbuckets; k++)
		n += r->buckets[k].in_place != 0;
	return n;
}
