/*
 * train_state.c - the one list of the training state (train_state.h): the
 * header's fields as a checkpoint names them, the segments, and the
 * checkpoint's tensors over them.
 */
#include "train_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD(key, member, words, kind)                                                            \
	{                                                                                          \
		key, offsetof(struct train_state_header, member), words, kind                      \
	}

const struct train_state_field train_state_fields[] = {
    FIELD("ddp_train", magic, 2, TRAIN_STATE_FORMAT),
    FIELD("step", step, 1, TRAIN_STATE_U64),
    FIELD("epoch", epoch, 1, TRAIN_STATE_U64),
    FIELD("sampler_pos", sampler_pos, 1, TRAIN_STATE_U64),
    FIELD("seed", seed, 1, TRAIN_STATE_I64),
    FIELD("total_steps", total_steps, 1, TRAIN_STATE_U64),
    FIELD("job.", job, 1, TRAIN_STATE_JOB),
    FIELD("rng_state", rng, 4, TRAIN_STATE_RNG),
    FIELD("", nparams, 2, TRAIN_STATE_SIZES),
};
const size_t train_state_nfields = sizeof(train_state_fields) / sizeof(train_state_fields[0]);

size_t train_state_floats(const struct model *m)
{
	return 2 * m->nparams + m->nbuffers;
}

size_t train_state_bytes(const struct model *m)
{
	return sizeof(struct train_state_header) + train_state_floats(m) * sizeof(float);
}

int train_state_data_world(const struct trainer *t)
{
	return t->shards ? 1 : t->world;
}

uint64_t train_state_data_batch(const struct trainer *t)
{
	return t->shards ? t->global_batch : (uint64_t)t->cfg.batch_size;
}

void train_state_header_of(const struct trainer *t, struct train_state_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = TRAIN_STATE_MAGIC;
	h->version = TRAIN_STATE_VERSION;
	h->step = t->step;
	h->epoch = t->step / t->steps_per_epoch;
	h->sampler_pos = (t->step % t->steps_per_epoch) * train_state_data_batch(t);
	h->seed = (uint64_t)t->cfg.seed;
	h->total_steps = t->total_steps;
	h->job = t->job_hash;
	memcpy(h->rng, t->rng.s, sizeof(h->rng));
	h->nparams = t->model.nparams;
	h->nbuffers = t->model.nbuffers;
}

void train_state_header_apply(struct trainer *t, const struct train_state_header *h)
{
	t->step = h->step;
	memcpy(t->rng.s, h->rng, sizeof(h->rng));
}

/* The segments' device memory and lengths, in the layout's order. */
static void train_state_segs(const struct trainer *t, float *dev[TRAIN_STATE_NSEGS],
			     size_t n[TRAIN_STATE_NSEGS])
{
	dev[TRAIN_STATE_PARAMS] = t->model.params;
	n[TRAIN_STATE_PARAMS] = t->model.nparams;
	dev[TRAIN_STATE_BUFFERS] = t->model.buffers;
	n[TRAIN_STATE_BUFFERS] = t->model.nbuffers;
	dev[TRAIN_STATE_MOMENTUM] = t->optim.mom;
	n[TRAIN_STATE_MOMENTUM] = t->model.nparams;
}

int train_state_stage(struct trainer *t, float *host, bool to_host)
{
	float *dev[TRAIN_STATE_NSEGS];
	size_t n[TRAIN_STATE_NSEGS], off = 0;
	int ret = 0;

	train_state_segs(t, dev, n);
	for (int i = 0; ret == 0 && i < TRAIN_STATE_NSEGS; i++) {
		size_t bytes = n[i] * sizeof(float);

		if (bytes)
			ret = to_host ? t->ops->copy_d2h(t->kctx, host + off, dev[i], bytes)
				      : t->ops->copy_h2d(t->kctx, dev[i], host + off, bytes);
		off += n[i];
	}
	return ret;
}

void train_state_tensors_release(struct train_state_tensors *v)
{
	free(v->t);
	free(v->names);
	memset(v, 0, sizeof(*v));
}

static void train_state_describe(struct ddp_tensor *d, const struct model_tensor *mt,
				 const char *name, float *data)
{
	memset(d, 0, sizeof(*d));
	d->name = name;
	d->dtype = DDP_FLOAT32;
	d->ndim = mt->ndim;
	for (int k = 0; k < mt->ndim; k++)
		d->shape[k] = mt->shape[k];
	d->data = data;
}

int train_state_tensors_init(struct train_state_tensors *v, const struct model *m, float *host)
{
	float *seg[TRAIN_STATE_NSEGS];
	size_t k = 0;

	memset(v, 0, sizeof(*v));
	v->t = calloc((size_t)m->ntensors * 2 + 1, sizeof(*v->t));
	v->names = calloc((size_t)m->ntensors * 2 + 1, sizeof(*v->names));
	if (!v->t || !v->names) {
		train_state_tensors_release(v);
		return -ENOMEM;
	}
	seg[TRAIN_STATE_PARAMS] = host;
	seg[TRAIN_STATE_BUFFERS] = host + m->nparams;
	seg[TRAIN_STATE_MOMENTUM] = host + m->nparams + m->nbuffers;
	for (int i = 0; i < m->ntensors; i++) {
		const struct model_tensor *mt = &m->tensors[i];
		int s = mt->is_buffer ? TRAIN_STATE_BUFFERS : TRAIN_STATE_PARAMS;

		snprintf(v->names[k], sizeof(v->names[k]), "%s", mt->name);
		train_state_describe(&v->t[k], mt, v->names[k], seg[s] + mt->offset);
		k++;
	}
	for (int i = 0; i < m->ntensors; i++) {
		const struct model_tensor *mt = &m->tensors[i];

		if (mt->is_buffer)
			continue;
		snprintf(v->names[k], sizeof(v->names[k]), "optimizer.%s.momentum_buffer",
			 mt->name);
		train_state_describe(&v->t[k], mt, v->names[k],
				     seg[TRAIN_STATE_MOMENTUM] + mt->offset);
		k++;
	}
	v->n = k;
	return 0;
}
