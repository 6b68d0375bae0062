/*
 * train_state.h - the one list of ddp-train's training state: what a
 * checkpoint holds (train_ckpt.c) and what a peer hands to a process that
 * joins (handover.c) are the parts listed here, in one versioned layout (as
 * llm.c's save_state/load_state: a header with a magic and a version, then
 * the buffers).
 *
 * Layout version 1:
 *   the header (struct train_state_header): magic, version, the step, the
 *     ledger (epoch, sampler position), the seed, the run's steps, the
 *     job's identity, the RNG's four words, the segments' float counts;
 *   the segments, float32 as they lie in memory, in this order: the
 *     parameters, the BatchNorm buffers, the SGD momentum (one float per
 *     parameter float).
 * A hand-over sends the header and the segments as one buffer. A
 * checkpoint stores every header field under its key in
 * train_state_fields (the format as "ddp_train": "ddp-train/1", the
 * identity as its "job.NAME" items, the counts as the tensors' shapes),
 * and the segments as tensors (train_state_tensors_init): the checkpoint
 * file format ddp-train/1, as before.
 *
 * A part added to the state is added here, and both follow;
 * tests/worker/train/test_train_state.c fails when the header has a field
 * the table lacks, when a float of the segments is in no checkpoint
 * tensor, or when a checkpoint and a hand-over of one state differ.
 */
#ifndef DDP_WORKER_TRAIN_TRAIN_STATE_H
#define DDP_WORKER_TRAIN_TRAIN_STATE_H

#include "trainer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRAIN_STATE_MAGIC   0x4554415453504444ull /* "DDPSTATE" */
#define TRAIN_STATE_VERSION 1

struct train_state_header {
	uint64_t magic, version;
	uint64_t step, epoch, sampler_pos; /* the ledger: the permutation is (seed, epoch) */
	uint64_t seed, total_steps, job;   /* seed: the setting's int64 bits */
	uint64_t rng[4];
	uint64_t nparams, nbuffers;
};

/* How a checkpoint stores a header field. */
enum train_state_kind {
	TRAIN_STATE_FORMAT, /* magic, version: "ddp-train/VERSION" */
	TRAIN_STATE_U64,    /* decimal */
	TRAIN_STATE_I64,    /* decimal, signed */
	TRAIN_STATE_JOB,    /* the "job.NAME" items it hashes (trainer_ckpt_job_hash) */
	TRAIN_STATE_RNG,    /* 64 hex digits */
	TRAIN_STATE_SIZES,  /* the tensors' shapes: no metadata */
};

struct train_state_field {
	const char *key; /* the checkpoint's metadata key ("job." prefixes the items) */
	size_t offset;	 /* in struct train_state_header */
	int words;	 /* uint64_t words from offset */
	enum train_state_kind kind;
};

/* Every field of the header, in its order: the words of all the entries
 * are the whole header, each once. */
extern const struct train_state_field train_state_fields[];
extern const size_t train_state_nfields;

/* The float segments, in the layout's order. */
enum { TRAIN_STATE_PARAMS, TRAIN_STATE_BUFFERS, TRAIN_STATE_MOMENTUM, TRAIN_STATE_NSEGS };

/* Floats of the segments of m's state (2 x parameters + buffers). */
size_t train_state_floats(const struct model *m);
/* Bytes of the whole state: the header and the segments. */
size_t train_state_bytes(const struct model *m);

/* The data order's shape: ranks x samples per rank per step; with
 * --global_batch_size, one rank's order of G samples per step, whatever
 * the number of ranks that computed it. The sampler position counts in
 * these samples. */
int train_state_data_world(const struct trainer *t);
uint64_t train_state_data_batch(const struct trainer *t);

/* The header of t's state now. */
void train_state_header_of(const struct trainer *t, struct train_state_header *h);
/* Takes what the header holds of the state (the step and the RNG); the
 * rest of it is the job's identity, checked by the caller. */
void train_state_header_apply(struct trainer *t, const struct train_state_header *h);

/* Copies the segments between device memory and host, in the layout's
 * order (train_state_floats(&t->model) floats). Returns 0 or the kernels'
 * negative errno. */
int train_state_stage(struct trainer *t, float *host, bool to_host);

/* The checkpoint's tensors over a host copy of the segments: every model
 * tensor by its torch name (in the parameters' or the buffers' segment),
 * then each parameter's momentum as "optimizer.NAME.momentum_buffer". */
struct train_state_tensors {
	struct ddp_tensor *t;
	size_t n;
	char (*names)[MODEL_NAME_MAX + 32];
};
/* Builds the views over host (not read). Returns 0, -ENOMEM. */
int train_state_tensors_init(struct train_state_tensors *v, const struct model *m, float *host);
void train_state_tensors_release(struct train_state_tensors *v);

#endif
