/*
 * train_ckpt.c - the trainer's complete state as a safetensors checkpoint:
 * model parameters and BatchNorm buffers by their torch names, the SGD
 * momentum buffers as "optimizer.<name>.momentum_buffer", and step, sampler
 * position, LR schedule and RNG state in the metadata. Nothing time- or
 * host-dependent is stored, so the same training gives the same bytes.
 */
#include "trainer.h"

#include "exit_status.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
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

enum { CKPT_NMETA = 12, CKPT_NJOB_MAX = 31, CKPT_VAL_LEN = 160 };

/* The metadata of a checkpoint: the state's keys, then the job's. */
struct ckpt_meta_buf {
	struct ddp_meta meta[CKPT_NMETA + CKPT_NJOB_MAX];
	char keys[CKPT_NJOB_MAX][48];
	char vals[CKPT_NMETA + CKPT_NJOB_MAX][CKPT_VAL_LEN];
	size_t n;
};

/* Job identity item i ("job.NAME" and its value in this run): the settings
 * of config_job_settings, then the number of training samples (the data
 * itself). Returns 0, or -ENOENT past the last. */
static int ckpt_job_item(const struct trainer *t, int i, char *key, size_t klen, char *val,
			 size_t vlen)
{
	const char *name = config_job_settings[i];

	if (name) {
		snprintf(key, klen, "job.%s", name);
		return config_format(&t->cfg, name, val, vlen);
	}
	if (config_job_settings[i - 1] == NULL)
		return -ENOENT;
	snprintf(key, klen, "job.train_samples");
	snprintf(val, vlen, "%zu", t->train.n);
	return 0;
}

/* The data order's shape: ranks x batch per rank; with
 * --global_batch_size, one rank's order of G samples per step, whatever
 * the number of ranks that computed it. */
static int ckpt_data_world(const struct trainer *t)
{
	return t->shards ? 1 : t->world;
}

static uint64_t ckpt_data_batch(const struct trainer *t)
{
	return t->shards ? t->global_batch : (uint64_t)t->cfg.batch_size;
}

static void ckpt_meta(const struct trainer *t, struct ckpt_meta_buf *b)
{
	static const char *const keys[CKPT_NMETA] = {
	    "format",	  "ddp_train", "step",	      "epoch", "sampler_pos", "world_size",
	    "batch_size", "seed",      "lr_schedule", "lr",    "total_steps", "rng_state"};
	uint64_t spe = t->steps_per_epoch;
	char(*vals)[CKPT_VAL_LEN] = b->vals;

	snprintf(vals[0], CKPT_VAL_LEN, "pt");
	snprintf(vals[1], CKPT_VAL_LEN, CKPT_FORMAT);
	snprintf(vals[2], CKPT_VAL_LEN, "%" PRIu64, t->step);
	snprintf(vals[3], CKPT_VAL_LEN, "%" PRIu64, t->step / spe);
	snprintf(vals[4], CKPT_VAL_LEN, "%" PRIu64, (t->step % spe) * ckpt_data_batch(t));
	snprintf(vals[5], CKPT_VAL_LEN, "%d", ckpt_data_world(t));
	snprintf(vals[6], CKPT_VAL_LEN, "%" PRIu64, ckpt_data_batch(t));
	snprintf(vals[7], CKPT_VAL_LEN, "%" PRId64, t->cfg.seed);
	snprintf(vals[8], CKPT_VAL_LEN, "%s", t->cfg.schedule);
	snprintf(vals[9], CKPT_VAL_LEN, "%.9g", t->cfg.lr);
	snprintf(vals[10], CKPT_VAL_LEN, "%" PRIu64, t->total_steps);
	snprintf(vals[11], CKPT_VAL_LEN, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64,
		 t->rng.s[0], t->rng.s[1], t->rng.s[2], t->rng.s[3]);
	for (b->n = 0; b->n < CKPT_NMETA; b->n++) {
		b->meta[b->n].key = keys[b->n];
		b->meta[b->n].value = vals[b->n];
	}
	for (int i = 0; i < CKPT_NJOB_MAX; i++) {
		if (ckpt_job_item(t, i, b->keys[i], sizeof(b->keys[i]), vals[b->n], CKPT_VAL_LEN))
			break;
		b->meta[b->n].key = b->keys[i];
		b->meta[b->n].value = vals[b->n];
		b->n++;
	}
}

/* Names why a save failed and the fix; a shortage that a restart would
 * meet again (exit_status_permanent_errno) is said to be one. */
static void ckpt_save_error(const struct trainer *t, const char *path, int ret, const char *err)
{
	const char *why = t->ddp ? ddp_error(t->ddp) : err;

	/* The membership changed during the save: the caller re-forms in
	 * place (loop.c; the final checkpoint is saved again). */
	if (t->shards && t->ddp && ddp_resizable(t->ddp) && ddp_rejoin_retryable(ret))
		log_info("checkpoint '%s' interrupted (%s): the membership changed, re-forming",
			 path, why);
	else if (ret == -ENOSPC || ret == -EDQUOT)
		log_error("cannot write checkpoint '%s': %s: no space left on the file system of "
			  "checkpoint_dir '%s'; free space there or give another checkpoint_dir "
			  "(a restart would fail the same way)",
			  path, why, t->cfg.checkpoint_dir);
	else if (exit_status_permanent_errno(ret))
		log_error("cannot write checkpoint '%s': %s: no file descriptor left; raise the "
			  "limit (ulimit -n) (a restart would fail the same way)",
			  path, why);
	else if (ret == -EACCES || ret == -EPERM || ret == -EROFS)
		log_error("cannot write checkpoint '%s': %s (check that checkpoint_dir '%s' is "
			  "writable)",
			  path, why, t->cfg.checkpoint_dir);
	else
		log_error("cannot write checkpoint '%s': %s", path, why);
}

int trainer_ckpt_save(struct trainer *t, const char *path)
{
	struct ckpt_state s;
	struct ckpt_meta_buf *b = malloc(sizeof(*b));
	char err[512] = "";
	int ret;

	if (!b)
		return -ENOMEM;
	ret = ckpt_state_init(&s, &t->model);
	if (ret < 0) {
		free(b);
		return ret;
	}
	if (t->rank == 0)
		ret = ckpt_stage(t, &s, true);
	ckpt_meta(t, b);
	if (ret == 0 && t->ddp)
		ret = ddp_checkpoint_save(t->ddp, path, s.tensors, s.ntensors, b->meta, b->n);
	else if (ret == 0)
		ret = ddp_ckpt_write(path, s.tensors, s.ntensors, b->meta, b->n, err, sizeof(err));
	if (ret < 0)
		ckpt_save_error(t, path, ret, err);
	ckpt_state_release(&s);
	free(b);
	return ret;
}

/* Reads a decimal metadata value in [min, max]: digits only (no sign, no
 * spaces), -EINVAL naming it when absent, malformed or out of range. */
static int ckpt_meta_u64(const struct ddp_ckpt *ck, const char *path, const char *key, uint64_t min,
			 uint64_t max, uint64_t *out)
{
	const char *v = ddp_ckpt_meta(ck, key);
	char *end;

	if (!v) {
		log_error("checkpoint '%s' has no '%s' in its metadata (was it written by "
			  "ddp-train?)",
			  path, key);
		return -EINVAL;
	}
	errno = 0;
	*out = strtoull(v, &end, 10);
	if (v[0] < '0' || v[0] > '9' || *end || errno || *out < min || *out > max) {
		log_error("checkpoint '%s' has '%s' = '%.40s' in its metadata, not a number from "
			  "%" PRIu64 " to %" PRIu64 ": the file is damaged",
			  path, key, v, min, max);
		return -EINVAL;
	}
	return 0;
}

/* rng_state: exactly 64 hex digits, the generator's four words (not all
 * zero, a state xoshiro256** never leaves). */
static int ckpt_meta_rng(const struct ddp_ckpt *ck, const char *path, struct rng *rng)
{
	const char *v = ddp_ckpt_meta(ck, "rng_state");
	uint64_t any = 0;

	if (!v || strlen(v) != 64 || strspn(v, "0123456789abcdefABCDEF") != 64)
		goto bad;
	for (int i = 0; i < 4; i++) {
		char part[17];

		memcpy(part, v + 16 * i, 16);
		part[16] = '\0';
		rng->s[i] = strtoull(part, NULL, 16);
		any |= rng->s[i];
	}
	if (any)
		return 0;
bad:
	log_error("checkpoint '%s' has no valid 'rng_state' in its metadata (64 hex digits, "
		  "not all zero): the file is damaged or was not written by ddp-train",
		  path);
	return -EINVAL;
}

/* Checks the metadata against this run, then restores step and RNG (only
 * when everything is valid: a refused checkpoint changes nothing). */
static int ckpt_restore_meta(struct trainer *t, const struct ddp_ckpt *ck, const char *path)
{
	const char *fmt = ddp_ckpt_meta(ck, "ddp_train");
	uint64_t step, world, batch;
	struct rng rng;
	int ret;

	if (fmt && strcmp(fmt, CKPT_FORMAT) != 0) {
		log_error("checkpoint '%s' is format '%.40s'; this ddp-train reads " CKPT_FORMAT,
			  path, fmt);
		return -EINVAL;
	}
	ret = ckpt_meta_u64(ck, path, "step", 0, UINT64_MAX, &step);
	ret = ret ? ret : ckpt_meta_u64(ck, path, "world_size", 1, 1u << 24, &world);
	ret = ret ? ret : ckpt_meta_u64(ck, path, "batch_size", 1, 1u << 24, &batch);
	ret = ret ? ret : ckpt_meta_rng(ck, path, &rng);
	if (ret < 0)
		return ret;
	if (step > t->total_steps) {
		log_error("checkpoint '%s' is at step %" PRIu64 ", past this run's %" PRIu64
			  " steps: raise max_steps or epochs, or resume from an earlier "
			  "checkpoint",
			  path, step, t->total_steps);
		return -EINVAL;
	}
	if (t->rank == 0 && (world != (uint64_t)ckpt_data_world(t) || batch != ckpt_data_batch(t)))
		log_warn("checkpoint '%s' was written with %" PRIu64 " ranks x batch %" PRIu64
			 "; continuing with %d x %" PRIu64 " changes the data order",
			 path, world, batch, ckpt_data_world(t), ckpt_data_batch(t));
	if (t->rank == 0 && step == t->total_steps)
		log_info("checkpoint '%s' is at the run's last step %" PRIu64 ": nothing left to "
			 "train",
			 path, step);
	t->rng = rng;
	t->step = step;
	return 0;
}

/* NaN or infinity in any loaded tensor would make every later step NaN. */
static int ckpt_check_finite(const struct ckpt_state *s, const char *path)
{
	for (size_t i = 0; i < s->ntensors; i++) {
		const struct ddp_tensor *d = &s->tensors[i];
		const float *v = d->data;
		size_t n = 1, bad = 0;

		for (int k = 0; k < d->ndim; k++)
			n *= (size_t)d->shape[k];
		for (size_t j = 0; j < n; j++)
			bad += !isfinite(v[j]);
		if (bad) {
			log_error("checkpoint '%s': tensor '%s' holds %zu NaN or infinite value(s) "
				  "of %zu: the run that wrote it diverged; resume from an earlier "
				  "checkpoint",
				  path, d->name, bad, n);
			return -EINVAL;
		}
	}
	return 0;
}

/* Says (rank 0) which tensors carried no checksum, i.e. were not verified. */
static void ckpt_report_unverified(const struct trainer *t, const struct ddp_ckpt *ck,
				   const char *path)
{
	size_t n = ddp_ckpt_num_tensors(ck), unverified = 0;
	struct ddp_tensor d;
	const char *first = NULL;

	for (size_t i = 0; i < n; i++) {
		if (ddp_ckpt_tensor_verified(ck, i) == 1)
			continue;
		ddp_ckpt_tensor(ck, i, &d);
		first = first ? first : d.name;
		unverified++;
	}
	if (t->rank != 0 || !unverified)
		return;
	if (unverified == n)
		log_warn("checkpoint '%s' has no checksums (written by another program, e.g. "
			 "PyTorch's safetensors): its tensors are not verified",
			 path);
	else
		log_warn("checkpoint '%s': %zu of %zu tensors have no checksum (the first: '%s') "
			 "and are not verified",
			 path, unverified, n, first);
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
	/* The message names the file already when it comes from reading it. */
	if (ret < 0 && strncmp(err, "checkpoint '", 12) == 0)
		log_error("cannot load %s", err);
	else if (ret < 0)
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
	/* The current state first: what a non-strict load does not replace
	 * keeps its fresh initialisation (PyTorch's strict=False). */
	ret = ckpt_stage(t, &s, true);
	if (ret == 0)
		ret = ckpt_open_load(t, path, &s, &rep, &ck);
	if (ret == 0 && rep.report && t->rank == 0)
		log_info("%s", rep.report);
	if (ret == 0)
		ckpt_report_unverified(t, ck, path);
	if (ret == 0)
		ret = ckpt_check_finite(&s, path);
	if (ret == 0)
		ret = ckpt_restore_meta(t, ck, path);
	if (ret == 0)
		ret = ckpt_stage(t, &s, false);
	ddp_ckpt_free(ck);
	ddp_load_report_release(&rep);
	ckpt_state_release(&s);
	return ret;
}

uint64_t trainer_ckpt_job_hash(const struct trainer *t)
{
	char key[48], val[CKPT_VAL_LEN];
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (int i = 0; ckpt_job_item(t, i, key, sizeof(key), val, sizeof(val)) == 0; i++) {
		for (const char *p = key; *p; p++)
			h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
		h = (h ^ '=') * 0x100000001b3ull;
		for (const char *p = val; *p; p++)
			h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
		h = (h ^ '\n') * 0x100000001b3ull;
	}
	return h;
}

int trainer_ckpt_peek(const struct trainer *t, const char *path, uint64_t *step, char *why,
		      size_t len)
{
	struct ddp_ckpt *ck = NULL;
	char key[48], val[CKPT_VAL_LEN], err[512] = "";
	const char *v;
	int ret = ddp_ckpt_open(path, &ck, err, sizeof(err));

	if (ret < 0) {
		snprintf(why, len, "%s", err);
		return ret;
	}
	v = ddp_ckpt_meta(ck, "step");
	*step = v ? strtoull(v, NULL, 10) : 0;
	ret = 1;
	for (int i = 0; ret == 1 && ckpt_job_item(t, i, key, sizeof(key), val, sizeof(val)) == 0;
	     i++) {
		v = ddp_ckpt_meta(ck, key);
		if (!v)
			snprintf(why, len,
				 "it has no '%s' in its metadata (written by another program "
				 "or an older ddp-train)",
				 key);
		else if (strcmp(v, val) != 0)
			snprintf(why, len, "its %s is '%.60s', this run's '%.60s'", key + 4, v,
				 val);
		ret = v && strcmp(v, val) == 0 ? 1 : 0;
	}
	ddp_ckpt_free(ck);
	return ret;
}
