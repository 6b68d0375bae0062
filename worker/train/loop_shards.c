/*
 * loop_shards.c - the step of --global_batch_size G --virtual_shards V: the
 * global batch of step s is samples [s*G, (s+1)*G) of the epoch's
 * permutation (seed and epoch only), cut into V shards of G/V samples; this
 * rank computes its contiguous run of whole shards, one forward and
 * backward each (BatchNorm statistics per shard: ghost batches), and the
 * shards' gradients are summed exactly (shards.h), so the step's bits do
 * not depend on which rank computed which shard.
 *
 * A step is committed on every rank or on none. A membership change
 * while a step runs makes its all-reduces fail, and the step is redone by
 * the new membership with the same samples. The one exception, a failure
 * in the last all-reduce of step s that some ranks finished (they apply
 * the optimizer and are at s+1; the others redo s), is repaired at the
 * re-formation: the lowest rank at s+1 hands its state over to the ranks
 * at s (handover.c), and rolling them forward gives the bits that redoing
 * s would, since a step is deterministic.
 *
 * Per step, two all-reduces:
 *   1. floats, V slots of [BatchNorm sums | loss, correct | max |grad| per
 *      parameter tensor]; each slot is written by the one rank that
 *      computed that shard and is 0 elsewhere, so the sum is a copy (x + 0
 *      is exact) and every rank holds every shard's values; then a run of
 *      TRAINER_BALANCE_FLOATS per rank, the same way: its step timings,
 *      from which every rank names stragglers and takes the same shard plan
 *      (loop_balance.c: which run of shards a rank computes changes, the
 *      bits do not); then a run of REPLICA_FLOATS per rank, the same way:
 *      the digest of its state after the last step (replica_check.h), so
 *      the replicas are compared with no collective of their own;
 *   2. the fixed-point gradient sums, as integer-valued doubles (exact).
 */
#include "replica_check.h"
#include "shards.h"
#include "trainer.h"

#include "log.h"
#include "timeutil.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct trainer_shards {
	int v, rows;	  /* shards, samples per shard */
	int first, count; /* this rank's shards */
	int cap;	  /* shards the host gradient slots hold */
	int ntensors;	  /* parameter tensors (those with a gradient) */
	size_t slot_len;  /* floats per shard in the exchange */
	bool host;	  /* the kernels work on host memory (CPU) */
	float *slots;	  /* v x slot_len, world x TRAINER_BALANCE_FLOATS, world x
			     REPLICA_FLOATS */
	float *grads;	  /* max(count, 1) x nparams, host */
	double *q;	  /* nparams: the fixed-point sum */
	int *scale;	  /* per model tensor: the exponent of its fixed point */
};

/* Floats in the step's first all-reduce: the shards' slots, then every
 * rank's timings, then every rank's replica digest. */
static size_t shards_xchg_len(const struct trainer *t)
{
	return (size_t)t->shards->v * t->shards->slot_len +
	       (size_t)t->world * (TRAINER_BALANCE_FLOATS + REPLICA_FLOATS);
}

/* Offsets in a slot. */
static size_t shards_loss_off(const struct model *m)
{
	return m->bn_stats_len;
}

static size_t shards_max_off(const struct model *m)
{
	return m->bn_stats_len + 2;
}

int trainer_shards_init(struct trainer *t)
{
	struct trainer_shards *s = calloc(1, sizeof(*s));
	const struct model *m = &t->model;
	int ret;

	if (!s)
		return -ENOMEM;
	t->shards = s;
	/* The exchange buffers are host memory: the NCCL backend stages a
	 * host buffer through its device buffer by itself. */
	s->host = t->ops == &kernel_ops_cpu;
	s->v = (int)t->cfg.virtual_shards;
	s->rows = (int)(t->cfg.global_batch_size / t->cfg.virtual_shards);
	ret = trainer_balance_init(t);
	if (ret < 0)
		return ret;
	trainer_balance_share(t, &s->first, &s->count);
	s->cap = s->count ? s->count : 1;
	for (int i = 0; i < m->ntensors; i++)
		s->ntensors += m->tensors[i].is_buffer ? 0 : 1;
	s->slot_len = shards_max_off(m) + (size_t)s->ntensors;
	s->slots = calloc(shards_xchg_len(t), sizeof(float));
	s->grads = calloc((size_t)s->cap * m->nparams, sizeof(float));
	s->q = calloc(m->nparams ? m->nparams : 1, sizeof(double));
	s->scale = calloc((size_t)m->ntensors, sizeof(int));
	if (!s->slots || !s->grads || !s->q || !s->scale)
		return -ENOMEM;
	if (t->rank == 0 && s->v < t->world)
		log_warn("virtual_shards %d < %d ranks: ranks %d to %d compute no shard and only "
			 "take part in the reductions (raise virtual_shards to use them)",
			 s->v, t->world, s->v, t->world - 1);
	return 0;
}

void trainer_shards_release(struct trainer *t)
{
	struct trainer_shards *s = t->shards;

	if (!s)
		return;
	t->model.bn_capture = NULL;
	free(s->slots);
	free(s->grads);
	free(s->q);
	free(s->scale);
	free(s);
	t->shards = NULL;
	trainer_balance_release(t);
}

/* The samples of shard v of step t->step: positions [s*G + v*rows, +rows)
 * of the epoch's permutation. */
static int shards_load(struct trainer *t, int v)
{
	const struct trainer_shards *s = t->shards;
	uint64_t epoch = t->step / t->steps_per_epoch;
	size_t pos = (size_t)(t->step % t->steps_per_epoch) * (size_t)t->cfg.global_batch_size +
		     (size_t)v * (size_t)s->rows;
	int ret = ddp_sampler_seek(&t->sampler, epoch, pos);

	if (ret == 0 &&
	    ddp_sampler_next_batch(&t->sampler, t->idx, (size_t)s->rows) != (size_t)s->rows)
		ret = -EINVAL;
	return ret ? ret : trainer_load_batch(t, &t->train, t->idx, (size_t)s->rows);
}

/* The backward pass of the last forward, its gradient into host slot g.
 * On host memory the model's gradient buffer is pointed at the slot for
 * the pass (no copy); elsewhere the gradient is copied out. */
static int shards_backward(struct trainer *t, float *g, float *loss)
{
	struct model *m = &t->model;
	float *grads = m->grads;
	int ret;

	if (t->shards->host)
		m->grads = g;
	ret = model_loss_backward(m, t->dx, t->dy, t->shards->rows, true, loss);
	m->grads = grads;
	if (ret == 0 && !t->shards->host)
		ret = t->ops->copy_d2h(t->kctx, g, m->grads, m->nparams * sizeof(float));
	return ret;
}

/* Shard v, the k-th of this rank: its gradient into host slot k, its
 * BatchNorm sums, loss, correct count and per-tensor max |grad| into its
 * exchange slot. */
static int shards_compute(struct trainer *t, int v, int k)
{
	struct trainer_shards *s = t->shards;
	struct model *m = &t->model;
	float *slot = s->slots + (size_t)v * s->slot_len;
	float *g = s->grads + (size_t)k * m->nparams, *mx = slot + shards_max_off(m);
	const float *logits;
	int ret = shards_load(t, v);

	m->bn_capture = slot;
	if (ret == 0)
		ret = model_forward(m, t->dx, s->rows, true, &logits);
	if (ret == 0)
		ret = shards_backward(t, g, slot + shards_loss_off(m));
	m->bn_capture = NULL;
	for (int i = 0; ret == 0 && i < m->ntensors; i++)
		if (!m->tensors[i].is_buffer)
			*mx++ = shards_maxabs(g + m->tensors[i].offset, m->tensors[i].numel);
	return ret;
}

static int shards_allreduce(struct trainer *t, void *buf, size_t n, enum ddp_dtype dtype)
{
	uint64_t t0 = time_now_ns();
	int ret;

	/* One rank under a launcher reduces too: a resizable worker
	 * notices a new round (a node joins) by a collective that fails.
	 * One rank's sum is its buffer, so one element does (the whole
	 * buffer is a copy through libddp's thread: a quarter of the digits
	 * step). */
	if (!t->ddp || (t->world == 1 && !ddp_resizable(t->ddp)))
		return 0;
	ret = ddp_allreduce(t->ddp, buf, t->world == 1 && n ? 1 : n, dtype, DDP_SUM);
	t->comm_wait_s += (double)(time_now_ns() - t0) * 1e-9;
	return ret;
}

/* Each parameter tensor's exponent, from its max |grad| over all shards;
 * -ERANGE (said) when a gradient is not finite: every rank sees the same
 * maxima, so every rank stops at the same step. */
static int shards_scales(struct trainer *t)
{
	struct trainer_shards *s = t->shards;
	const struct model *m = &t->model;
	int j = 0;

	for (int i = 0; i < m->ntensors; i++) {
		float mx = 0.0f;

		if (m->tensors[i].is_buffer)
			continue;
		for (int v = 0; v < s->v; v++)
			mx = fmaxf(mx, s->slots[(size_t)v * s->slot_len + shards_max_off(m) + j]);
		for (int v = 0; v < s->v; v++)
			if (!isfinite(s->slots[(size_t)v * s->slot_len + shards_max_off(m) + j]))
				mx = INFINITY;
		j++;
		if (!isfinite(mx)) {
			log_error("step %llu: the gradient of '%s' is not finite: lower --lr (or "
				  "set --clip_norm)",
				  (unsigned long long)t->step, m->tensors[i].name);
			return -ERANGE;
		}
		s->scale[i] = shards_scale_exp(mx, s->v);
	}
	return 0;
}

/* The exact mean of the shards' gradients into the model's gradients. */
static int shards_reduce_grads(struct trainer *t)
{
	struct trainer_shards *s = t->shards;
	struct model *m = &t->model;
	float *out = s->host ? m->grads : s->grads;
	int ret = shards_scales(t);

	if (ret < 0)
		return ret;
	for (int i = 0; i < m->ntensors; i++)
		if (!m->tensors[i].is_buffer)
			shards_quantize_sum(s->q + m->tensors[i].offset,
					    s->grads + m->tensors[i].offset, m->nparams, s->count,
					    m->tensors[i].numel, s->scale[i]);
	/* With one rank the step's first all-reduce was its notice. */
	ret = t->world > 1 ? shards_allreduce(t, s->q, m->nparams, DDP_FLOAT64) : 0;
	if (ret < 0)
		return ret;
	for (int i = 0; i < m->ntensors; i++)
		if (!m->tensors[i].is_buffer)
			shards_dequantize(out + m->tensors[i].offset, s->q + m->tensors[i].offset,
					  m->tensors[i].numel, s->scale[i], s->v);
	if (s->host)
		return 0;
	return t->ops->copy_h2d(t->kctx, m->grads, s->grads, m->nparams * sizeof(float));
}

/* Every shard's BatchNorm running-statistics update, in shard order, and
 * the global batch's loss and correct count. */
static int shards_finish(struct trainer *t, float out[2])
{
	struct trainer_shards *s = t->shards;
	struct model *m = &t->model;
	double loss = 0.0, correct = 0.0;
	int ret = 0;

	for (int v = 0; v < s->v; v++) {
		const float *slot = s->slots + (size_t)v * s->slot_len;

		if (m->bn_stats_len && ret == 0)
			ret = model_bn_update_running(m, slot, (double)s->rows);
		loss += slot[shards_loss_off(m)];
		correct += slot[shards_loss_off(m) + 1];
	}
	out[0] = (float)loss;
	out[1] = (float)correct;
	return ret;
}

/* This rank's shards under the plan of this step; the host gradient slots
 * grow when it computes more shards than they hold. */
static int shards_take_plan(struct trainer *t)
{
	struct trainer_shards *s = t->shards;
	float *g;

	trainer_balance_share(t, &s->first, &s->count);
	if (s->count <= s->cap)
		return 0;
	g = realloc(s->grads, (size_t)s->count * t->model.nparams * sizeof(float));
	if (!g)
		return -ENOMEM;
	s->grads = g;
	s->cap = s->count;
	return 0;
}

int trainer_shards_step(struct trainer *t, float out[2])
{
	struct trainer_shards *s = t->shards;
	double wait0 = t->comm_wait_s;
	float *xchg = s->slots + (size_t)s->v * s->slot_len;
	float *digests = xchg + (size_t)t->world * TRAINER_BALANCE_FLOATS;
	uint64_t t0;
	double compute_s = 0.0;
	int ret = shards_take_plan(t);

	memset(s->slots, 0, shards_xchg_len(t) * sizeof(float));
	t0 = time_now_ns();
	for (int k = 0; ret == 0 && k < s->count; k++)
		ret = shards_compute(t, s->first + k, k);
	compute_s = (double)(time_now_ns() - t0) * 1e-9;
	/* The last step's digest rides in this all-reduce, and the replicas
	 * are compared before this step writes the state (REPLICA_HEALED:
	 * redo it). */
	trainer_balance_put(t, xchg);
	if (ret == 0)
		replica_check_put(t, digests);
	if (ret == 0)
		ret = shards_allreduce(t, s->slots, shards_xchg_len(t), DDP_FLOAT32);
	if (ret == 0)
		ret = replica_check_take(t, digests);
	if (ret == REPLICA_HEALED)
		return ret;
	if (ret == 0)
		trainer_balance_take(t, xchg);
	if (ret == 0)
		ret = shards_reduce_grads(t);
	if (ret == 0)
		ret = shards_finish(t, out);
	if (ret == 0)
		ret = optim_step(&t->optim, &t->model, t->step, t->total_steps);
	if (ret == 0)
		trainer_balance_record(t, compute_s, t->comm_wait_s - wait0, s->count);
	return ret;
}

int trainer_shards_count(const struct trainer *t)
{
	return t->shards ? t->shards->count : 0;
}

/* After a re-formation: the exchange for the new world, and the plan and
 * the straggler history afresh (the even spread) on every rank alike. */
static int shards_respread(struct trainer *t)
{
	struct trainer_shards *s = t->shards;
	float *x = realloc(s->slots, shards_xchg_len(t) * sizeof(float));

	if (!x)
		return -ENOMEM;
	s->slots = x;
	return trainer_balance_init(t);
}

/* ddp_rejoin's after(): the new rank and world, then the training state
 * to the ranks that lack it. Its collective failing means the membership
 * changed again (ddp_rejoin takes the next round); -EPROTO (another job's
 * state, said) and -ENOMEM end the re-joining. */
static int shards_after_reform(struct ddp_ctx *ctx, void *arg)
{
	struct trainer *t = arg;
	int ret;

	t->rank = ddp_rank(ctx);
	t->world = ddp_world_size(ctx);
	ret = trainer_numerics_check(t);
	return ret < 0 ? ret : trainer_state_sync(t);
}

int trainer_shards_reform(struct trainer *t)
{
	struct ddp_round r;
	char err[1024], node[16];
	int ret;

	if (!t->ddp || !ddp_resizable(t->ddp))
		return -ENOTSUP;
	ret = ddp_rejoin(t->ddp, &r, 0, shards_after_reform, t, err, sizeof(err));
	if (ret < 0) {
		log_error("step %llu: cannot re-form in place: %s; stopping",
			  (unsigned long long)t->step, err);
		return ret;
	}
	/* This node's number in the new round, for the straggler lines (as
	 * the launcher's environment gave it at the start). */
	snprintf(node, sizeof(node), "%d", r.group_rank);
	setenv("GROUP_RANK", node, 1);
	ret = shards_respread(t);
	if (ret == 0)
		log_info("step %llu: re-formed in place as rank %d of %d (round %d, pid %d); %s",
			 (unsigned long long)t->step, t->rank, t->world, r.round, (int)getpid(),
			 t->step < t->total_steps ? "redoing the step with the same samples"
						  : "the last step is done: saving the end");
	return ret;
}

int trainer_shards_join(struct trainer *t)
{
	int ret = trainer_numerics_check(t);

	ret = ret ? ret : trainer_state_sync(t);
	if (ret >= 0 || ret == -EPROTO || ret == -ENOMEM || ret == NUMERICS_REFUSED || !t->ddp ||
	    !ddp_resizable(t->ddp))
		return ret;
	/* The membership changed while joining: re-form as the survivors do;
	 * the state comes from whoever holds it in the new round. */
	ret = trainer_shards_reform(t);
	if (ret < 0)
		return ret;
	return t->has_state ? 1 : 0;
}
