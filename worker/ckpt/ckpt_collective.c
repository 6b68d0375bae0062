/*
 * ckpt_collective.c - collective checkpoint save and load: rank 0 writes, a
 * barrier makes the file complete for everyone; loading starts with a
 * barrier so that a save issued just before is finished.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctx.h"

int ddp_checkpoint_save(struct ddp_ctx *ctx, const char *path, const struct ddp_tensor *tensors,
			size_t ntensors, const struct ddp_meta *meta, size_t nmeta)
{
	int rc = 0, brc;
	float status = 0;

	if (ctx->rank == 0) {
		rc = ddp_ckpt_write(path, tensors, ntensors, meta, nmeta, ctx->err,
				    sizeof(ctx->err));
		status = rc < 0 ? (float)-rc : 0.0f;
	}
	/* Everyone learns rank 0's errno (and waits for the write): a full
	 * disk is ENOSPC on every rank, so each can say it will repeat. An
	 * all-reduce (the others give 0), not a broadcast: it returns on no
	 * rank before every rank entered it, so when one rank never comes (it
	 * died at the save) every rank fails and can re-form around it; a
	 * broadcast would let rank 0 and those before the gap return, and
	 * leave the job, while the others fail. */
	brc = ddp_allreduce(ctx, &status, 1, DDP_FLOAT32, DDP_MAX);
	if (brc < 0)
		return brc;
	if (status == 0.0f)
		return 0;
	rc = status >= 1.0f && status < 4096.0f ? -(int)status : -EIO;
	if (ctx->rank != 0)
		snprintf(ctx->err, sizeof(ctx->err), "rank 0 could not write checkpoint '%s': %s",
			 path, strerror(-rc));
	return rc;
}

int ddp_checkpoint_load(struct ddp_ctx *ctx, const char *path, const struct ddp_tensor *tensors,
			size_t ntensors, enum ddp_load_flags flags, struct ddp_load_report *rep,
			struct ddp_ckpt **ck_out)
{
	struct ddp_ckpt *ck = NULL;
	int rc = ddp_barrier(ctx);

	if (ck_out)
		*ck_out = NULL;
	if (rep)
		memset(rep, 0, sizeof(*rep));
	if (rc < 0)
		return rc;
	rc = ddp_ckpt_open(path, &ck, ctx->err, sizeof(ctx->err));
	if (rc < 0)
		return rc;
	rc = ddp_ckpt_load(ck, tensors, ntensors, flags, rep, ctx->err, sizeof(ctx->err));
	if (rc < 0 || !ck_out)
		ddp_ckpt_free(ck);
	else
		*ck_out = ck;
	return rc;
}
