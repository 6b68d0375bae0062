/*
 * handover.c - the training state from a peer's memory (--global_batch_size
 * mode): at the start and after every re-formation, a process that joins
 * (a new node, a replaced rank) or one that is a step behind takes what a
 * disk checkpoint would hold from the lowest rank at the highest step, in
 * one broadcast of one contiguous buffer. No file is read.
 *
 * The buffer: a header (step, the ledger, the RNG state, the job's
 * identity and the sizes), then the parameters, the BatchNorm buffers and
 * the SGD momentum as they lie in memory (train_ckpt.c's tensors, in the
 * same order), sent as float32 words: a broadcast copies bits.
 */
#include "trainer.h"

#include "log.h"
#include "timeutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define HANDOVER_MAGIC 0x4554415453504444ull /* "DDPSTATE" */

struct handover_header {
	uint64_t magic;
	uint64_t step, epoch, sampler_pos; /* the ledger: the permutation is (seed, epoch) */
	uint64_t seed, total_steps, job;   /* the job's identity (trainer_ckpt_job_hash) */
	uint64_t rng[4];
	uint64_t nparams, nbuffers;
};

/* Floats of the buffer: the header, params, buffers, momentum. */
static size_t handover_words(const struct model *m)
{
	return sizeof(struct handover_header) / sizeof(float) + 2 * m->nparams + m->nbuffers;
}

static void handover_header_of(const struct trainer *t, struct handover_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = HANDOVER_MAGIC;
	h->step = t->step;
	h->epoch = t->step / t->steps_per_epoch;
	h->sampler_pos = (t->step % t->steps_per_epoch) * t->global_batch;
	h->seed = (uint64_t)t->cfg.seed;
	h->total_steps = t->total_steps;
	h->job = trainer_ckpt_job_hash(t);
	memcpy(h->rng, t->rng.s, sizeof(h->rng));
	h->nparams = t->model.nparams;
	h->nbuffers = t->model.nbuffers;
}

/* Device <-> buffer copies of params, buffers and momentum. */
static int handover_stage(struct trainer *t, float *body, bool to_buf)
{
	struct model *m = &t->model;
	void *dev[3] = {m->params, m->buffers, t->optim.mom};
	size_t n[3] = {m->nparams, m->nbuffers, m->nparams}, off = 0;
	int ret = 0;

	for (int i = 0; ret == 0 && i < 3; i++) {
		size_t bytes = n[i] * sizeof(float);

		if (bytes)
			ret = to_buf ? t->ops->copy_d2h(t->kctx, body + off, dev[i], bytes)
				     : t->ops->copy_h2d(t->kctx, dev[i], body + off, bytes);
		off += n[i];
	}
	return ret;
}

/* Checks the received header against this process's job; takes it. */
static int handover_take(struct trainer *t, const struct handover_header *h, int from)
{
	struct handover_header mine;

	handover_header_of(t, &mine);
	if (h->magic != HANDOVER_MAGIC || h->job != mine.job || h->seed != mine.seed ||
	    h->total_steps != mine.total_steps || h->nparams != mine.nparams ||
	    h->nbuffers != mine.nbuffers || h->step > mine.total_steps ||
	    h->epoch != h->step / t->steps_per_epoch) {
		log_error("the training state from rank %d is another job's (its settings, seed, "
			  "steps or model differ from this process's): start every rank with the "
			  "same settings",
			  from);
		return -EPROTO;
	}
	t->step = h->step;
	memcpy(t->rng.s, h->rng, sizeof(h->rng));
	return handover_stage(t, (float *)(h + 1), false);
}

/* One broadcast of the whole state from root; the ranks behind take it. */
static int handover_broadcast(struct trainer *t, int root, bool take)
{
	size_t words = handover_words(&t->model);
	float *buf = malloc(words * sizeof(float));
	struct handover_header *h = (struct handover_header *)buf;
	uint64_t t0;
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	if (t->rank == root) {
		handover_header_of(t, h);
		ret = handover_stage(t, (float *)(h + 1), true);
	}
	t0 = time_now_ns();
	if (ret == 0)
		ret = ddp_broadcast(t->ddp, buf, words, DDP_FLOAT32, root);
	if (ret == 0 && take) {
		double s, bytes = (double)words * 4.0;

		ret = handover_take(t, h, root);
		s = (double)(time_now_ns() - t0) * 1e-9; /* received and in place */
		if (ret == 0)
			log_info("step %" PRIu64 ": took the training state from rank %d's memory: "
				 "%.0f bytes in %.3f s (%.2f GB/s)",
				 t->step, root, bytes, s, s > 0 ? bytes / s / 1e9 : 0.0);
	}
	free(buf);
	return ret;
}

int trainer_state_sync(struct trainer *t)
{
	double *steps, max = -1.0;
	int root = -1, behind = 0, ret;

	if (!t->ddp || t->world == 1)
		return t->has_state ? 1 : 0;
	steps = malloc((size_t)t->world * sizeof(*steps));
	if (!steps)
		return -ENOMEM;
	for (int r = 0; r < t->world; r++)
		steps[r] = -1.0;
	steps[t->rank] = t->has_state ? (double)t->step : -1.0;
	ret = ddp_allreduce(t->ddp, steps, (size_t)t->world, DDP_FLOAT64, DDP_MAX);
	for (int r = 0; ret == 0 && r < t->world; r++) {
		if (steps[r] > max) {
			max = steps[r];
			root = r;
		}
	}
	for (int r = 0; ret == 0 && r < t->world; r++)
		behind += steps[r] < max;
	if (ret == 0 && max >= 0.0 && behind)
		ret = handover_broadcast(t, root, steps[t->rank] < max);
	free(steps);
	if (ret < 0)
		return ret;
	if (max >= 0.0)
		t->has_state = true;
	return max >= 0.0 ? 1 : 0;
}
