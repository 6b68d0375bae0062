/*
 * optim.c - SGD with momentum, parameter groups, LR schedule, clipping.
 */
#include "optim.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const char *const optim_schedule_names[] = {"constant", "poly", "cosine"};

int optim_schedule_parse(const char *s, enum optim_schedule *out)
{
	for (int i = 0; i < 3; i++)
		if (strcmp(s, optim_schedule_names[i]) == 0) {
			*out = (enum optim_schedule)i;
			return 0;
		}
	return -EINVAL;
}

double optim_lr_at(const struct optim_config *cfg, uint64_t step, uint64_t total)
{
	double t, lr = cfg->lr;

	if (cfg->warmup_steps && step < cfg->warmup_steps)
		return lr * (double)(step + 1) / (double)cfg->warmup_steps;
	if (total == 0 || cfg->schedule == OPTIM_CONSTANT)
		return lr;
	t = step >= total ? 1.0 : (double)step / (double)total;
	if (cfg->schedule == OPTIM_POLY)
		return lr * pow(1.0 - t, cfg->poly_power);
	return cfg->min_lr + (lr - cfg->min_lr) * 0.5 * (1.0 + cos(M_PI * t));
}

int optim_init(struct optim *o, const struct optim_config *cfg, struct model *m)
{
	int ret;

	memset(o, 0, sizeof(*o));
	o->cfg = *cfg;
	ret = m->ops->alloc(m->kctx, m->nparams * sizeof(float), (void **)&o->mom);
	if (ret == 0)
		ret = m->ops->alloc(m->kctx, sizeof(float), (void **)&o->norm_dev);
	if (ret < 0)
		optim_release(o, m);
	return ret;
}

void optim_release(struct optim *o, struct model *m)
{
	if (m->ops) {
		m->ops->free(m->kctx, o->mom);
		m->ops->free(m->kctx, o->norm_dev);
	}
	o->mom = NULL;
	o->norm_dev = NULL;
}

/* Global gradient norm and the clip factor min(1, clip / (norm + 1e-6)),
 * as torch.nn.utils.clip_grad_norm_. */
static int optim_clip_scale(struct optim *o, struct model *m, float *scale)
{
	float sq;
	int ret;

	*scale = 1.0f;
	ret = m->ops->sqnorm(m->kctx, m->grads, m->nparams, o->norm_dev, false);
	if (ret == 0)
		ret = m->ops->copy_d2h(m->kctx, &sq, o->norm_dev, sizeof(sq));
	if (ret < 0)
		return ret;
	o->last_norm = sqrt((double)sq);
	if (o->cfg.clip_norm > 0.0f && o->last_norm > o->cfg.clip_norm)
		*scale = (float)(o->cfg.clip_norm / (o->last_norm + 1e-6));
	return 0;
}

int optim_step(struct optim *o, struct model *m, uint64_t step, uint64_t total)
{
	double lr = optim_lr_at(&o->cfg, step, total);
	float scale = 1.0f;
	int ret = 0;

	o->last_lr = lr;
	if (o->cfg.clip_norm > 0.0f)
		ret = optim_clip_scale(o, m, &scale);
	for (int i = 0; ret == 0 && i < m->ntensors; i++) {
		const struct model_tensor *t = &m->tensors[i];
		float glr = (float)(t->decay ? lr : lr * o->cfg.bias_lr_mult);
		float wd = t->decay ? o->cfg.weight_decay : o->cfg.bias_weight_decay;

		if (t->is_buffer)
			continue;
		ret = m->ops->sgd_update(m->kctx, m->params + t->offset, m->grads + t->offset,
					 o->mom + t->offset, t->numel, glr, o->cfg.momentum, wd,
					 scale);
	}
	return ret;
}
