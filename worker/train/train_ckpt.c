/*
 * train_ckpt.c - the trainer's complete state as a safetensors checkpoint,
 * in train_state.h's one list of the state (the hand-over's too): model
 * parameters and BatchNorm buffers by their torch names, the SGD momentum
 * buffers as "optimizer.<name>.momentum_buffer", and the header's fields
 * (step, sampler position, RNG state, the job's identity) in the metadata,
 * with what describes the run (ranks, batch, learning rate). Nothing time-
 * or host-dependent is stored, so the same training gives the same bytes.
 */
#include "train_state.h"
#include "trainer.h"

#include "exit_status.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_FORMAT_PREFIX "ddp-train/"

/* The state over host staging memory (train_state.h's segments). */
struct ckpt_state {
	float *host;
	struct train_state_tensors v;
};

static void ckpt_state_release(struct ckpt_state *s)
{
	free(s->host);
	train_state_tensors_release(&s->v);
	memset(s, 0, sizeof(*s));
}

/* Builds the tensor table over host staging memory (not yet filled). */
static int ckpt_state_init(struct ckpt_state *s, const struct model *m)
{
	size_t nfloats = train_state_floats(m);
	int ret;

	memset(s, 0, sizeof(*s));
	s->host = malloc(sizeof(float) * (nfloats ? nfloats : 1));
	if (!s->host)
		return -ENOMEM;
	ret = train_state_tensors_init(&s->v, m, s->host);
	if (ret < 0)
		ckpt_state_release(s);
	return ret;
}

enum { CKPT_NMETA_MAX = 64, CKPT_NJOB_MAX = 40, CKPT_VAL_LEN = 160 };

/* The metadata of a checkpoint. */
struct ckpt_meta_buf {
	struct ddp_meta meta[CKPT_NMETA_MAX];
	char keys[CKPT_NJOB_MAX][48];
	char vals[CKPT_NMETA_MAX][CKPT_VAL_LEN];
	size_t n, njob;
};

/* Job identity item i ("job.NAME" and its value in this run): the settings
 * of config_job_settings (NULL-terminated), then the number of training
 * samples (the data itself). Returns 0, or -ENOENT past the last. */
static int ckpt_job_item(const struct trainer *t, int i, char *key, size_t klen, char *val,
			 size_t vlen)
{
	int n = 0;

	while (config_job_settings[n])
		n++;
	if (i < 0 || i > n)
		return -ENOENT;
	if (i < n) {
		snprintf(key, klen, "job.%s", config_job_settings[i]);
		return config_format(&t->cfg, config_job_settings[i], val, vlen);
	}
	snprintf(key, klen, "job.train_samples");
	snprintf(val, vlen, "%zu", t->train.n);
	return 0;
}

/* Adds key = value (printf) to b; the key must outlive b's use. */
static void ckpt_meta_add(struct ckpt_meta_buf *b, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ckpt_meta_add(struct ckpt_meta_buf *b, const char *key, const char *fmt, ...)
{
	va_list ap;

	if (b->n >= CKPT_NMETA_MAX)
		return;
	va_start(ap, fmt);
	vsnprintf(b->vals[b->n], CKPT_VAL_LEN, fmt, ap);
	va_end(ap);
	b->meta[b->n].key = key;
	b->meta[b->n].value = b->vals[b->n];
	b->n++;
}

static void ckpt_meta_job(const struct trainer *t, struct ckpt_meta_buf *b)
{
	char val[CKPT_VAL_LEN];

	for (b->njob = 0; b->njob < CKPT_NJOB_MAX; b->njob++) {
		char *key = b->keys[b->njob];

		if (ckpt_job_item(t, (int)b->njob, key, sizeof(b->keys[0]), val, sizeof(val)))
			break;
		ckpt_meta_add(b, key, "%s", val);
	}
}

/* One header field as the checkpoint stores it (train_state_fields). */
static void ckpt_meta_field(const struct trainer *t, const struct train_state_field *f,
			    const struct train_state_header *h, struct ckpt_meta_buf *b)
{
	const uint64_t *w = (const uint64_t *)((const char *)h + f->offset);

	switch (f->kind) {
	case TRAIN_STATE_FORMAT:
		ckpt_meta_add(b, f->key, CKPT_FORMAT_PREFIX "%" PRIu64, w[1]);
		break;
	case TRAIN_STATE_U64:
		ckpt_meta_add(b, f->key, "%" PRIu64, w[0]);
		break;
	case TRAIN_STATE_I64:
		ckpt_meta_add(b, f->key, "%" PRId64, (int64_t)w[0]);
		break;
	case TRAIN_STATE_JOB:
		ckpt_meta_job(t, b);
		break;
	case TRAIN_STATE_RNG:
		ckpt_meta_add(b, f->key, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64,
			      w[0], w[1], w[2], w[3]);
		break;
	case TRAIN_STATE_SIZES:
		break; /* the tensors' shapes */
	}
}

/* "format": "pt" (what Hugging Face's loaders look for), every field of
 * the state's header, then what describes the run. */
static void ckpt_meta(const struct trainer *t, struct ckpt_meta_buf *b)
{
	struct train_state_header h;

	train_state_header_of(t, &h);
	b->n = 0;
	ckpt_meta_add(b, "format", "pt");
	for (size_t i = 0; i < train_state_nfields; i++)
		ckpt_meta_field(t, &train_state_fields[i], &h, b);
	ckpt_meta_add(b, "world_size", "%d", train_state_data_world(t));
	ckpt_meta_add(b, "batch_size", "%" PRIu64, train_state_data_batch(t));
	ckpt_meta_add(b, "lr_schedule", "%s", t->cfg.schedule);
	ckpt_meta_add(b, "lr", "%.9g", t->cfg.lr);
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
	else if (ret == -EMFILE || ret == -ENFILE)
		log_error("cannot write checkpoint '%s': %s: no file descriptor left (if it "
			  "persists, raise the limit, ulimit -n)",
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
		ret = train_state_stage(t, s.host, true);
	ckpt_meta(t, b);
	if (ret == 0 && t->ddp)
		ret = ddp_checkpoint_save(t->ddp, path, s.v.t, s.v.n, b->meta, b->n);
	else if (ret == 0)
		ret = ddp_ckpt_write(path, s.v.t, s.v.n, b->meta, b->n, err, sizeof(err));
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
	char want[32];
	struct train_state_header h;
	uint64_t step, world, batch;
	struct rng rng;
	int ret;

	snprintf(want, sizeof(want), CKPT_FORMAT_PREFIX "%d", TRAIN_STATE_VERSION);
	if (fmt && strcmp(fmt, want) != 0) {
		log_error("checkpoint '%s' is format '%.40s'; this ddp-train reads %s", path, fmt,
			  want);
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
	if (t->rank == 0 &&
	    (world != (uint64_t)train_state_data_world(t) || batch != train_state_data_batch(t)))
		log_warn("checkpoint '%s' was written with %" PRIu64 " ranks x batch %" PRIu64
			 "; continuing with %d x %" PRIu64 " changes the data order",
			 path, world, batch, train_state_data_world(t), train_state_data_batch(t));
	if (t->rank == 0 && step == t->total_steps)
		log_info("checkpoint '%s' is at the run's last step %" PRIu64 ": nothing left to "
			 "train",
			 path, step);
	/* The rest of the header is this run's: the checkpoint's identity was
	 * compared (trainer_ckpt_peek) before a resume from checkpoint_dir. */
	train_state_header_of(t, &h);
	h.step = step;
	memcpy(h.rng, rng.s, sizeof(h.rng));
	train_state_header_apply(t, &h);
	return 0;
}

/* NaN or infinity in any loaded tensor would make every later step NaN. */
static int ckpt_check_finite(const struct ckpt_state *s, const char *path)
{
	for (size_t i = 0; i < s->v.n; i++) {
		const struct ddp_tensor *d = &s->v.t[i];
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
		ret = ddp_checkpoint_load(t->ddp, path, s->v.t, s->v.n, flags, rep, ck);
		if (ret < 0)
			snprintf(err, sizeof(err), "%s", ddp_error(t->ddp));
	} else {
		ret = ddp_ckpt_open(path, ck, err, sizeof(err));
		if (ret == 0)
			ret = ddp_ckpt_load(*ck, s->v.t, s->v.n, flags, rep, err, sizeof(err));
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
	ret = train_state_stage(t, s.host, true);
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
		ret = train_state_stage(t, s.host, false);
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
