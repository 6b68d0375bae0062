/*
 * handover.c - the training state from a peer's memory (--global_batch_size
 * mode): at the start and after every re-formation, a process that joins
 * (a new node, a replaced rank) or one that is a step behind takes what a
 * disk checkpoint would hold from the lowest rank at the highest step, in
 * one broadcast of one contiguous buffer. No file is read.
 *
 * The buffer is the state in train_state.h's layout, the one a checkpoint
 * stores too: the header (step, the ledger, the RNG state, the job's
 * identity and the sizes), then the parameters, the BatchNorm buffers and
 * the SGD momentum as they lie in memory, sent as float32 words: a
 * broadcast copies bits.
 */
#include "handover_plan.h"
#include "train_state.h"
#include "trainer.h"

#include "log.h"
#include "timeutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int trainer_state_pack(struct trainer *t, void *buf)
{
	struct train_state_header *h = buf;

	train_state_header_of(t, h);
	return train_state_stage(t, (float *)(h + 1), true);
}

int trainer_state_take(struct trainer *t, const void *buf, int from)
{
	const struct train_state_header *h = buf;
	struct train_state_header mine;

	train_state_header_of(t, &mine);
	if (h->magic != TRAIN_STATE_MAGIC || h->version != TRAIN_STATE_VERSION) {
		log_error("the training state from rank %d is not in this ddp-train's layout "
			  "(version %" PRIu64 ", this one's %d): run one ddp-train on every node",
			  from, h->magic == TRAIN_STATE_MAGIC ? h->version : 0,
			  TRAIN_STATE_VERSION);
		return -EPROTO;
	}
	if (h->job != mine.job || h->seed != mine.seed || h->total_steps != mine.total_steps ||
	    h->nparams != mine.nparams || h->nbuffers != mine.nbuffers ||
	    h->step > mine.total_steps || h->epoch != h->step / t->steps_per_epoch ||
	    h->sampler_pos != (h->step % t->steps_per_epoch) * train_state_data_batch(t)) {
		log_error("the training state from rank %d is another job's (its settings, seed, "
			  "steps or model differ from this process's): start every rank with the "
			  "same settings",
			  from);
		return -EPROTO;
	}
	train_state_header_apply(t, h);
	return train_state_stage(t, (float *)(h + 1), false);
}

int trainer_state_broadcast(struct trainer *t, int root, bool take)
{
	size_t words = train_state_bytes(&t->model) / sizeof(float);
	float *buf = malloc(words * sizeof(float));
	uint64_t t0;
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	if (t->rank == root)
		ret = trainer_state_pack(t, buf);
	t0 = time_now_ns();
	if (ret == 0)
		ret = ddp_broadcast(t->ddp, buf, words, DDP_FLOAT32, root);
	if (ret == 0 && take) {
		double s, bytes = (double)words * 4.0;

		ret = trainer_state_take(t, buf, root);
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
	struct handover_plan p = {.max = -1.0};
	double *steps;
	int ret;

	if (!t->ddp || t->world == 1)
		return t->has_state ? 1 : 0;
	steps = malloc((size_t)t->world * sizeof(*steps));
	if (!steps)
		return -ENOMEM;
	for (int r = 0; r < t->world; r++)
		steps[r] = -1.0;
	steps[t->rank] = t->has_state ? (double)t->step : -1.0;
	ret = ddp_allreduce(t->ddp, steps, (size_t)t->world, DDP_FLOAT64, DDP_MAX);
	if (ret == 0 && handover_plan(steps, t->world, &p) < 0) {
		log_error("rank %d is at step %.0f and rank %d at step %.0f: a hand-over takes at "
			  "most one step, these ranks hold another run's state (start every rank "
			  "of a job from one checkpoint)",
			  p.lo_rank, p.lo, p.root, p.max);
		ret = -EPROTO;
	}
	if (ret == 0 && p.max >= 0.0 && p.behind)
		ret = trainer_state_broadcast(t, p.root, steps[t->rank] < p.max);
	free(steps);
	if (ret < 0)
		return ret;
	if (p.max >= 0.0)
		t->has_state = true;
	return p.max >= 0.0 ? 1 : 0;
}
