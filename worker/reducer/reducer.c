/*
 * reducer.c - DDP's gradient reducer: parameters checked and broadcast from
 * rank 0 at creation; gradients packed into buckets (bucket.c) whose
 * all-reduce (avg) is queued on the communication thread as soon as the
 * bucket is complete, in bucket order on every rank (a bucket ready early
 * waits for the ones before it, so every rank issues the same sequence);
 * no_sync; buffers broadcast from rank 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "ctx.h"
#include "reducer_check.h"
#include "timeutil.h"

struct reducer_bucket {
	void *buf;
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
		if (r->buckets[b].buf)
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

static int reducer_alloc_buckets(struct ddp_reducer *r)
{
	struct ddp_backend *b = r->ctx->backend;

	r->buckets = calloc(r->plan.nbuckets ? r->plan.nbuckets : 1, sizeof(*r->buckets));
	r->ready = calloc(r->nparams ? r->nparams : 1, 1);
	if (!r->buckets || !r->ready)
		return -ENOMEM;
	for (size_t k = 0; k < r->plan.nbuckets; k++) {
		size_t bytes = r->plan.bucket_numel[k] * ddp_dtype_size(r->plan.bucket_dtype[k]);
		int rc = b->ops->alloc(b, bytes, &r->buckets[k].buf);

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
		int rc = ddp_allreduce_async(r->ctx, r->buckets[k].buf, r->plan.bucket_numel[k],
					     r->plan.bucket_dtype[k], DDP_AVG, &r->buckets[k].work);

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
	rc = b->ops->copy(b, (char *)r->buckets[k].buf + r->plan.offset[i] * esz, p->grad,
			  ddp_param_numel(p) * esz);
	if (rc < 0)
		return rc;
	r->ready[i] = 1;
	r->buckets[k].pending--;
	if (r->buckets[k].pending == 0 && !r->finishing)
		r->stats.early_buckets++;
	return reducer_launch_ready(r);
}

/* Waits for bucket k and copies its averaged gradients back. */
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
	for (size_t i = 0; i < r->nparams; i++) {
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
