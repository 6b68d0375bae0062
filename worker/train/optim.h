/*
 * optim.h - SGD with momentum over the model's two parameter groups, the
 * learning-rate schedule and gradient clipping by global norm.
 *
 * Groups (as common DDP scripts set them up): group 0 = Linear weights, with
 * the base learning rate and weight decay; group 1 = every bias and
 * BatchNorm affine parameter, with lr * bias_lr_mult and bias_weight_decay
 * (defaults 2 and 0).
 */
#ifndef DDP_WORKER_TRAIN_OPTIM_H
#define DDP_WORKER_TRAIN_OPTIM_H

#include "model.h"

#include <stdint.h>

enum optim_schedule {
	OPTIM_CONSTANT = 0,
	OPTIM_POLY = 1,	  /* lr * (1 - t/T)^power */
	OPTIM_COSINE = 2, /* min_lr + (lr - min_lr) * (1 + cos(pi t/T)) / 2 */
};

struct optim_config {
	float lr;
	float momentum;
	float weight_decay;
	float bias_lr_mult;
	float bias_weight_decay;
	enum optim_schedule schedule;
	float poly_power;
	float min_lr;	       /* cosine floor */
	uint64_t warmup_steps; /* linear warm-up from lr/warmup to lr; 0: none */
	float clip_norm;       /* 0: no clipping */
};

/* Parses "constant", "poly", "cosine"; -EINVAL otherwise. */
int optim_schedule_parse(const char *s, enum optim_schedule *out);

/* Group-0 learning rate before step `step` (0-based) of `total` steps.
 * Pure; t >= total gives the schedule's end value. */
double optim_lr_at(const struct optim_config *cfg, uint64_t step, uint64_t total);

struct optim {
	struct optim_config cfg;
	float *mom;	  /* device, one momentum buffer per parameter float */
	float *norm_dev;  /* device float: squared gradient norm scratch */
	double last_norm; /* gradient norm of the last step (before clipping) */
	double last_lr;	  /* group-0 lr used by the last step */
};

/* Allocates the momentum buffers (zeroed) for model m. */
int optim_init(struct optim *o, const struct optim_config *cfg, struct model *m);
void optim_release(struct optim *o, struct model *m);

/* One SGD step with the gradients in m->grads: clip (if configured) by the
 * global norm, then update every parameter with its group's lr/decay. */
int optim_step(struct optim *o, struct model *m, uint64_t step, uint64_t total);

#endif
