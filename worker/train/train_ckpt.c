/*
 * train_ckpt.c - the trainer's complete state as a safetensors checkpoint:
 * model parameters and BatchNorm buffers by their torch names, the SGD
 * momentum buffers as "optimizer.<name>.momentum_buffer", and step, sampler
 * position, LR schedule and RNG state in the metadata. Nothing time- or
 * host-dependent is stored, so the same training gives the same bytes.
 */
#include "trainer.h"

#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_FORMAT "ddp-train/1"

struct ckpt_state {
	float *host; /* params | buffers | momentum, host copies */
	struct ddp_tensor *tensors;
	size_t ntensors;
	char (*names)[MODEL_NAME_MAX + 32];
};

static void ckpt_state_release(struct ckpt_state *s)
{
	free(s->host);
	free(s->tensors);
	free(s->names);
	memset(s, 0, sizeof(*s));
}

static void ckpt_describe(struct ddp_tensor *d, const struct model_tensor *mt, const char *name,
			  float *data)
{
	memset(d, 0, sizeof(*d));
	d->name = name;
	d->dtype = DDP_FLOAT32;
	d->ndim = mt->ndim;
	for (int k = 0; k < mt->ndim; k++)
		d->shape[k] = mt->shape[k];
	d->data = data;
}

/* Builds the tensor table over host staging memory (not yet filled). */
static int ckpt_state_init(struct ckpt_state *s, const struct model *m)
{
	size_t nfloats = 2 * m->nparams + m->nbuffers, k = 0;
	float *hparams, *hbuffers, *hmom;

	memset(s, 0, sizeof(*s));
	s->host = malloc(sizeof(float) * (nfloats ? nfloats : 1));
	s->tensors = calloc((size_t)m->ntensors * 2, sizeof(*s->tensors));
	s->names = calloc((size_t)m->ntensors * 2, sizeof(*s->names));
	if (!s->host || !s->tensors || !s->names) {
		ckpt_state_release(s);
		return -ENOMEM;
	}
	hparams = s->host;
	hbuffers = hparams + m->nparams;
	hmom = hbuffers + m->nbuffers;
	for (int i = 0; i < m->ntensors; i++) {
		const struct model_tensor *mt = &m->tensors[i];

		snprintf(s->names[k], sizeof(s->names[k]), "%s", mt->name);
		ckpt_describe(&s->tensors[k], mt, s->names[k],
			      (mt->is_buffer ? hbuffers : hparams) + mt->offset);
		k++;
	}
	for (int i = 0; i < m->ntensors; i++) {
		const struct model_tensor *mt = &m->tensors[i];

		if (mt->is_buffer)
			continue;
		snprintf(s->names[k], sizeof(s->names[k]), "optimizer.%s.momentum_buffer",
			 mt->name);
		ckpt_describe(&s->tensors[k], mt, s->names[k], hmom + mt->offset);
		k++;
	}
	s->ntensors = k;
	return 0;
}

/* Device <-> host staging of params, buffers and momentum. */
static int ckpt_stage(struct trainer *t, struct ckpt_state *s, bool to_host)
{
	struct model *m = &t->model;
	void *dev[3] = {m->params, m->buffers, t->optim.mom};
	size_t n[3] = {m->nparams, m->nbuffers, m->nparams}, off = 0;
	int ret = 0;

	for (int i = 0; ret == 0 && i < 3; i++) {
		size_t bytes = n[i] * sizeof(float);

		ret = to_host ? m->ops->copy_d2h(m->kctx, s->host + off, dev[i], bytes)
			      : m->ops->copy_h2d(m->kctx, dev[i], s->host + off, bytes);
		off += n[i];
	}
	return ret;
}

enum { CKPT_NMETA = 12 };

static void ckpt_meta(const struct trainer *t, struct ddp_meta *meta, char (*vals)[80])
{
	const char *keys[CKPT_NMETA] = {"format",      "ddp_train",  "step",	    "epoch",
					"sampler_pos", "world_size", "batch_size",  "seed",
					"lr_schedule", "lr",	     "total_steps", "rng_state"};
	uint64_t spe = t->steps_per_epoch;

	snprintf(vals[0], 80, "pt");
	snprintf(vals[1], 80, CKPT_FORMAT);
	snprintf(vals[2], 80, "%" PRIu64, t->step);
	snprintf(vals[3], 80, "%" PRIu64, t->step / spe);
	snprintf(vals[4], 80, "%" PRIu64, (t->step % spe) * (uint64_t)t->cfg.batch_size);
	snprintf(vals[5], 80, "%d", t->world);
	snprintf(vals[6], 80, "%" PRId64, t->cfg.batch_size);
	snprintf(vals[7], 80, "%" PRId64, t->cfg.seed);
	snprintf(vals[8], 80, "%s", t->cfg.schedule);
	snprintf(vals[9], 80, "%.9g", t->cfg.lr);
	snprintf(vals[10], 80, "%" PRIu64, t->total_steps);
	snprintf(vals[11], 80, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, t->rng.s[0],
		 t->rng.s[1], t->rng.s[2], t->rng.s[3]);
	for (int i = 0; i < CKPT_NMETA; i++) {
		meta[i].key = keys[i];
		meta[i].value = vals[i];
	}
}

int trainer_ckpt_save(struct trainer *t, const char *path)
{
	struct ckpt_state s;
	struct ddp_meta meta[CKPT_NMETA];
	char vals[CKPT_NMETA][80], err[512] = "";
	int ret;

	ret = ckpt_state_init(&s, &t->model);
	if (ret < 0)
		return ret;
	if (t->rank == 0)
		ret = ckpt_stage(t, &s, true);
	ckpt_meta(t, meta, vals);
	if (ret == 0 && t->ddp)
		ret = ddp_checkpoint_save(t->ddp, path, s.tensors, s.ntensors, meta, CKPT_NMETA);
	else if (ret == 0)
		ret =
		    ddp_ckpt_write(path, s.tensors, s.ntensors, meta, CKPT_NMETA, err, sizeof(err));
	if (ret < 0)
		log_error("cannot write checkpoint '%s': %s (check that the directory is writable)",
			  path, t->ddp ? ddp_error(t->ddp) : err);
	ckpt_state_release(&s);
	return ret;
}

/* Reads an unsigned metadata value; -EINVAL naming it when absent/bad. */
static int ckpt_meta_u64(const struct ddp_ckpt *ck, const char *path, const char *key,
			 uint64_t *out)
{
	const char *v = ddp_ckpt_meta(ck, key);
	char *end;

	if (v) {
		*out = strtoull(v, &end, 10);
		if (end != v && *end == '\0')
			return 0;
	}
	log_error(
	    "checkpoint '%s' has no valid '%s' in its metadata (was it written by ddp-train?)",
	    path, key);
	return -EINVAL;
}

/* Restores step, RNG and checks the data order can be resumed. */
static int ckpt_restore_meta(struct trainer *t, const struct ddp_ckpt *ck, const char *path)
{
	const char *rng = ddp_ckpt_meta(ck, "rng_state");
	uint64_t step, world, batch;
	int ret;

	ret = ckpt_meta_u64(ck, path, "step", &step);
	ret = ret ? ret : ckpt_meta_u64(ck, path, "world_size", &world);
	ret = ret ? ret : ckpt_meta_u64(ck, path, "batch_size", &batch);
	if (ret < 0)
		return ret;
	if (!rng || strlen(rng) != 64) {
		log_error("checkpoint '%s' has no valid 'rng_state' in its metadata", path);
		return -EINVAL;
	}
	for (int i = 0; i < 4; i++) {
		char part[17];

		memcpy(part, rng + 16 * i, 16);
		part[16] = '\0';
		t->rng.s[i] = strtoull(part, NULL, 16);
	}
	if (world != (uint64_t)t->world || batch != (uint64_t)t->cfg.batch_size)
		log_warn("checkpoint '%s' was written with %" PRIu64 " ranks x batch %" PRIu64
			 "; continuing with %d x %" PRId64 " changes the data order",
			 path, world, batch, t->world, t->cfg.batch_size);
	t->step = step;
	return 0;
}

static int ckpt_open_load(struct trainer *t, const char *path, struct ckpt_state *s,
			  struct ddp_load_report *rep, struct ddp_ckpt **ck)
{
	enum ddp_load_flags flags = t->cfg.strict ? DDP_LOAD_STRICT : DDP_LOAD_NON_STRICT;
	char err[1024] = "";
	int ret;

	if (t->ddp) {
		ret = ddp_checkpoint_load(t->ddp, path, s->tensors, s->ntensors, flags, rep, ck);
		if (ret < 0)
			snprintf(err, sizeof(err), "%s", ddp_error(t->ddp));
	} else {
		ret = ddp_ckpt_open(path, ck, err, sizeof(err));
		if (ret == 0)
			ret = ddp_ckpt_load(*ck, s->tensors, s->ntensors, flags, rep, err,
					    sizeof(err));
	}
	if (ret < 0)
		log_error("cannot load checkpoint '%s': %s", path, err);
	return ret;
}

int trainer_ckpt_load(struct trainer *t, const char *path)
{
	struct ckpt_state s;
	struct ddp_load_report rep;
	struct ddp_ckpt *ck = NULL;
	int ret;

	memset(&rep, 0, sizeof(rep));
	ret = ckpt_state_init(&s, &t->model);
	if (ret < 0)
		return ret;
	ret = ckpt_open_load(t, path, &s, &rep, &ck);
	if (ret == 0 && rep.report && t->rank == 0)
		log_info("%s", rep.report);
	if (ret == 0)
		ret = ckpt_restore_meta(t, ck, path);
	if (ret == 0)
		ret = ckpt_stage(t, &s, false);
	ddp_ckpt_free(ck);
	ddp_load_report_release(&rep);
	ckpt_state_release(&s);
	return ret;
}
