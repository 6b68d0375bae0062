/*
 * bucket.h - the reducer's bucket plan (pure; no I/O): trainable parameters
 * in reverse order, packed into buckets of at most cap bytes (the first
 * bucket: first_cap), a new bucket at each dtype change; a parameter larger
 * than the cap gets a bucket of its own. A bucket holds consecutive
 * trainable parameters, in index order inside it (offset), so when the
 * gradients lie back to back in one flat buffer a bucket is a range of it.
 */
#ifndef DDP_WORKER_BUCKET_H
#define DDP_WORKER_BUCKET_H

#include <stddef.h>

#include "ddp.h"

#define BUCKET_NONE ((size_t)-1)

struct bucket_plan {
	size_t nparams;
	size_t nbuckets;
	size_t *bucket_of;	/* [nparams]: bucket index or BUCKET_NONE (frozen) */
	size_t *offset;		/* [nparams]: element offset inside its bucket (index order) */
	size_t *bucket_numel;	/* [nbuckets] */
	size_t *bucket_nparams; /* [nbuckets] */
	enum ddp_dtype *bucket_dtype; /* [nbuckets] */
};

/* numel/dtype/trainable describe params in their order. Returns 0, -EINVAL
 * (cap 0 or an unknown dtype) or -ENOMEM. */
int bucket_plan_build(const size_t *numel, const enum ddp_dtype *dtype, const int *trainable,
		      size_t nparams, size_t cap, size_t first_cap, struct bucket_plan *out);
void bucket_plan_release(struct bucket_plan *plan);

#endif
