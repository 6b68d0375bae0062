/*
 * bucket.c - bucket planning for the reducer (see bucket.h). Reverse order
 * because backward produces the last layers' gradients first, so the first
 * bucket fills (and its all-reduce starts) earliest; it is small for the
 * same reason. Inside a bucket the parameters keep their index order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"

void bucket_plan_release(struct bucket_plan *plan)
{
	if (!plan)
		return;
	free(plan->bucket_of);
	free(plan->offset);
	free(plan->bucket_numel);
	free(plan->bucket_nparams);
	free(plan->bucket_dtype);
	memset(plan, 0, sizeof(*plan));
}

static int bucket_alloc(struct bucket_plan *p, size_t n)
{
	size_t m = n ? n : 1;

	p->bucket_of = malloc(m * sizeof(*p->bucket_of));
	p->offset = calloc(m, sizeof(*p->offset));
	p->bucket_numel = calloc(m, sizeof(*p->bucket_numel));
	p->bucket_nparams = calloc(m, sizeof(*p->bucket_nparams));
	p->bucket_dtype = calloc(m, sizeof(*p->bucket_dtype));
	if (!p->bucket_of || !p->offset || !p->bucket_numel || !p->bucket_nparams ||
	    !p->bucket_dtype)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		p->bucket_of[i] = BUCKET_NONE;
	return 0;
}

/* The loop above placed each bucket's parameters in reverse order; inside a
 * bucket they go back to index order, the mirror image: a bucket is then
 * the same range as in a flat gradient buffer laid out in parameter order,
 * so it can be a view of that buffer instead of a copy. */
static void bucket_offsets_forward(struct bucket_plan *p, const size_t *numel)
{
	for (size_t k = 0; k < p->nparams; k++) {
		size_t b = p->bucket_of[k];

		if (b != BUCKET_NONE)
			p->offset[k] = p->bucket_numel[b] - p->offset[k] - numel[k];
	}
}

int bucket_plan_build(const size_t *numel, const enum ddp_dtype *dtype, const int *trainable,
		      size_t nparams, size_t cap, size_t first_cap, struct bucket_plan *out)
{
	size_t cur = BUCKET_NONE, cur_bytes = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if (cap == 0 || first_cap == 0)
		return -EINVAL;
	rc = bucket_alloc(out, nparams);
	if (rc < 0)
		goto fail;
	out->nparams = nparams;
	for (size_t k = nparams; k-- > 0;) {
		size_t esz = ddp_dtype_size(dtype[k]), bytes = numel[k] * esz;
		size_t limit = cur == 0 ? first_cap : cap;

		if (!trainable[k])
			continue;
		if (esz == 0) {
			rc = -EINVAL;
			goto fail;
		}
		if (cur == BUCKET_NONE || out->bucket_dtype[cur] != dtype[k] ||
		    (cur_bytes > 0 && cur_bytes + bytes > limit)) {
			cur = out->nbuckets++;
			cur_bytes = 0;
			out->bucket_dtype[cur] = dtype[k];
		}
		out->bucket_of[k] = cur;
		out->offset[k] = out->bucket_numel[cur];
		out->bucket_numel[cur] += numel[k];
		out->bucket_nparams[cur]++;
		cur_bytes += bytes;
	}
	bucket_offsets_forward(out, numel);
	return 0;
fail:
	bucket_plan_release(out);
	return rc;
}
