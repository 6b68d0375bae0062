/*
 * reducer_check.h - the check ddp_reducer_new runs before anything else:
 * every rank built the same model (parameter and buffer names, dtypes and
 * shapes, in the same order), so that the buckets line up across ranks.
 */
#ifndef DDP_WORKER_REDUCER_CHECK_H
#define DDP_WORKER_REDUCER_CHECK_H

#include <stddef.h>

#include "ddp.h"

/* Collective: every rank publishes its model's signature through the
 * context's store (under ctx->kv_lock) and reads everyone's. 0 when they
 * all match; else -EINVAL on every rank with ddp_error(ctx) naming the
 * first mismatch (the same message everywhere), -ETIMEDOUT naming the ranks
 * that never published, another negative errno from the store, or -ENOMEM. */
int reducer_check_ranks(struct ddp_ctx *ctx, const struct ddp_param *params, size_t nparams,
			const struct ddp_param *buffers, size_t nbuffers);

#endif
