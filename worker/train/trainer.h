/*
 * trainer.h - ddp-train's training job: the data, the model, the optimizer,
 * libddp's sampler and reducer, checkpoints and output, wired together.
 * Lifetime: trainer_init (from parsed settings), trainer_run, then
 * trainer_release (also after a failed trainer_init).
 */
#ifndef DDP_WORKER_TRAIN_TRAINER_H
#define DDP_WORKER_TRAIN_TRAINER_H

#include "config.h"
#include "data.h"
#include "ddp.h"
#include "kernels.h"
#include "metrics.h"
#include "model.h"
#include "numerics.h"
#include "optim.h"
#include "rng.h"

#include <stdbool.h>
#include <stdint.h>

struct trainer {
	struct train_config cfg;
	struct ddp_ctx *ddp; /* NULL when run without a launcher (one process) */
	int rank, world, attempt;
	const struct kernel_ops *ops;
	struct kernel_ctx *kctx;
	struct dataset train, held_out;
	struct model model;
	struct optim optim;
	struct ddp_sampler sampler;
	struct ddp_reducer *reducer;
	int *param_of_tensor; /* model tensor index -> reducer param index */
	struct rng rng;	      /* saved in checkpoints with the rest */
	struct metrics metrics;
	/* One batch, host and device copies. */
	size_t *idx;
	float *hx, *dx;
	int32_t *hy, *dy;
	int eval_rows;	    /* model's max_batch */
	size_t model_bytes; /* model_memory_bytes + momentum, for messages */
	uint64_t steps_per_epoch, total_steps, epochs, step;
	/* Samples whose loss a step sums into its output (this rank's batch,
	 * or the global batch with --global_batch_size), and samples per step
	 * over all ranks. */
	uint64_t step_samples, global_batch;
	struct trainer_shards *shards; /* --global_batch_size mode, else NULL */
	/* This process holds the training state (it resumed, started from
	 * step 0, or took it from a peer): false in a fresh process until
	 * then (trainer_state_sync). */
	bool has_state;
	/* This process holds rank 0's outputs (the metrics file open, the
	 * checkpoint_dir checked): it is rank 0, or was (trainer_take_rank0). */
	bool rank0_duties;
	/* What a checkpoint and a hand-over must agree on (the job's settings
	 * and data: trainer_ckpt_job_hash), from trainer_init on. */
	uint64_t job_hash;
	double comm_wait_s; /* blocking collectives outside the reducer */
	/* The job's numeric identity and the promise of a 1-rank run's bits
	 * (trainer_numerics.c). */
	struct numerics_record numerics;
	struct replica_check *replica;	 /* replica_check.h; NULL: off */
	struct trainer_balance *balance; /* shard mode: stragglers, the shard plan */
};

/* Sets everything up from cfg: libddp (when the launcher's environment is
 * present), the kernels for cfg->device, the data, the model (parameters
 * broadcast from rank 0), and the starting point (a checkpoint when
 * resuming). Returns 0, or a negative errno after printing a message that
 * names the problem and the fix: -EEXIST when checkpoint_dir holds
 * checkpoints this run may neither resume from nor replace (another job's,
 * steps past this run's end, or none usable), which no restart cures. */
int trainer_init(struct trainer *t, const struct train_config *cfg);

/* Trains until the last step, writing checkpoints and metrics; returns 0 or
 * a negative errno (message printed). */
int trainer_run(struct trainer *t);

void trainer_release(struct trainer *t);

/* ---- rank 0's duties (rank0.c) ---- */

/* Rank 0's metrics file (opened for appending), before any work: sets
 * t->rank0_duties. Nothing on other ranks. Returns 0 or a negative errno
 * (said). */
int trainer_init_outputs(struct trainer *t);

/* checkpoint_dir (rank 0 creates it) must be a directory this process can
 * write in: tried with a probe file, not at the first checkpoint, which may
 * be the last thing the run does; partial checkpoints a killed run left go.
 * Returns 0 or a negative errno (said). */
int trainer_check_ckpt_dir(const char *dir);

/* Rank 0's duties in whichever process is rank 0 now: after a
 * re-formation renumbered the ranks (the node of rank 0 died), the new rank
 * 0 opens the metrics file (appending) and checks checkpoint_dir (made when
 * missing) before its first progress line or checkpoint. Nothing when this
 * process is not rank 0 or holds them already. Returns 0, or a negative
 * errno (said). The loop calls it before rank 0's output after every step
 * and before every checkpoint. */
int trainer_take_rank0(struct trainer *t);

/* Copies the samples idx[0..rows) of ds into the batch buffers (host and
 * device). */
int trainer_load_batch(struct trainer *t, const struct dataset *ds, const size_t *idx, size_t rows);

/* ---- the fixed global batch (loop_shards.c) ---- */

/* Sets up --global_batch_size mode after the model: this rank's shards and
 * the exchange buffers. Returns 0, -ENOMEM. */
int trainer_shards_init(struct trainer *t);
void trainer_shards_release(struct trainer *t);
/* One step over the global batch: this rank's shards one backward each,
 * the exact sum of all shards' gradients, the BatchNorm running statistics
 * of every shard in shard order, the optimizer. out = the global batch's
 * summed loss and correct count, the same on every rank. */
int trainer_shards_step(struct trainer *t, float out[2]);
/* The virtual shards this rank computes in a step: 0 outside shard mode. */
int trainer_shards_count(const struct trainer *t);
/* After a step failed on a collective error, in a worker the launcher
 * resizes in place (ddp_resizable): ddp_rejoin takes the launcher's next
 * round and re-forms for it, then (its after()) this hands the training
 * state to the ranks that lack it (trainer_state_sync: a process that
 * joined, a rank a step behind), and ddp_rejoin tries the next round
 * when a later round supersedes the re-formation or the hand-over fails
 * on a collective; this takes the new rank and world and this rank's
 * shards of them. A step is committed on every rank or on none: the failed step
 * changed nothing here (the model, optimizer and BatchNorm statistics are
 * updated only after both all-reduces), or it was committed elsewhere and
 * this rank has now taken its result; the caller runs the step t->step.
 * Returns 0, -ENOTSUP (not resizable: exit as before, the launcher
 * restarts the job), -EPROTO (a peer's state is another job's) or
 * ddp_rejoin's other errors (said here). Also after the last step, when
 * the final checkpoint's collective failed (loop.c saves it again). */
int trainer_shards_reform(struct trainer *t);
/* At the start (a fresh process: after ddp_init, before any checkpoint
 * is read): every rank's numeric identity compared with the job's
 * (trainer_numerics_check), then the state from a peer's memory when some
 * rank has it (a process that joins a running job), as trainer_state_sync;
 * on a collective error in a resizable worker, re-forms
 * (trainer_shards_reform, whose hand-over does both again). Returns 1 when
 * this process now holds the state (read no file), 0 when every process is
 * fresh (a whole-job start: load the disk checkpoint as before),
 * NUMERICS_REFUSED (said), or a negative errno. */
int trainer_shards_join(struct trainer *t);

/* ---- stragglers and the weighted shard plan (loop_balance.c) ---- */

/* Floats per rank that a step's first all-reduce carries for the
 * straggler exchange (each rank writes its own run, the others are 0). */
#define TRAINER_BALANCE_FLOATS 19

/* Sets up for t->world ranks (again after a re-formation: the history and
 * the plan start afresh on every rank alike, the even spread). Returns 0,
 * -ENOMEM. */
int trainer_balance_init(struct trainer *t);
void trainer_balance_release(struct trainer *t);
/* This rank's shards under the current plan (a plan decided in a step
 * takes effect from the next step: a step boundary). */
void trainer_balance_share(struct trainer *t, int *first, int *count);
/* Writes this rank's run of the exchange (x: world x
 * TRAINER_BALANCE_FLOATS floats, zeroed): its last completed step's
 * compute and wait seconds and shards, its node and host. */
void trainer_balance_put(const struct trainer *t, float *x);
/* After the exchange: every rank's samples to the straggler detector
 * (one line on every rank when a rank is named or cleared; a "straggler"
 * record in --metrics), and the next plan (with --rebalance). The same on
 * every rank: the inputs are the all-reduced floats. */
void trainer_balance_take(struct trainer *t, const float *x);
/* At the end of a step: this rank's compute and wait seconds and shards. */
void trainer_balance_record(struct trainer *t, double compute_s, double wait_s, int shards);
/* Rank 0 at the end of the run: one line naming every straggler the run
 * saw (or none) and the plan changes. */
void trainer_balance_report(const struct trainer *t);

/* ---- the training state from a peer's memory (handover.c) ---- */

/* With more than one rank: one all-reduce (MAX) of every rank's step (-1:
 * a fresh process, t->has_state false); when some rank holds the state,
 * the lowest rank at the highest step broadcasts everything a checkpoint
 * holds (parameters, BatchNorm buffers, momentum, step, the ledger, the
 * RNG state) as one buffer, and every rank behind takes it (one log line:
 * bytes, seconds, GB/s, from which rank); ranks at that step keep theirs.
 * Returns 1 when every rank now holds the state, 0 when every process is
 * fresh (nothing sent), -EPROTO when the state is another job's or ranks
 * holding state are more than one step apart (said: handover_plan), or
 * the collective's error. One rank: 1 or 0 from t->has_state. */
int trainer_state_sync(struct trainer *t);
/* The whole state as one buffer of train_state_bytes(&t->model) bytes in
 * train_state.h's layout (what a checkpoint stores too), 8-byte aligned:
 * pack writes t's; take checks that buf is this job's state (the layout's
 * magic and version, the job's identity, seed, steps and sizes; -EPROTO,
 * said, naming rank `from`, when not) and takes it. Both return 0 or a
 * negative errno (the kernels' copies). */
int trainer_state_pack(struct trainer *t, void *buf);
/* One broadcast of the whole state from rank root (collective); the ranks
 * with take set take it (one log line: bytes, seconds, GB/s, from which
 * rank), the others keep theirs. Returns 0 or a negative errno. */
int trainer_state_broadcast(struct trainer *t, int root, bool take);
int trainer_state_take(struct trainer *t, const void *buf, int from);

/* ---- the numeric identity (trainer_numerics.c) ---- */

/* Collective (one all-gather; nothing with one rank): every rank's numeric
 * identity (numerics.h) against the job's, whose reference is the lowest
 * rank holding the state (t->has_state), else rank 0. Called after the
 * kernels are set up: in trainer_init without a fixed global batch; with
 * one, first in trainer_shards_join and in every re-formation's hand-over
 * (before trainer_state_sync), so that a joining process and the ranks it
 * joins meet in it. With --global_batch_size a difference is
 * refused (the line names both sides and what to set): NUMERICS_REFUSED
 * on every rank at the start, on the ranks without state that differ at a
 * join (the others return 0 and go on without them); with
 * --allow_numeric_mismatch it is accepted (t->numerics.dropped); without
 * a fixed global batch it is a warning. Returns 0, NUMERICS_REFUSED,
 * -ENOMEM or the all-gather's error. */
int trainer_numerics_check(struct trainer *t);
/* Rank 0, at the end of a --global_batch_size run: one line saying whether
 * the bits of a 1-rank run were kept (with the identity every rank had) or
 * dropped (and why), and a "numerics" record in the metrics file. Nothing
 * without a fixed global batch (nothing was promised). */
void trainer_numerics_report(struct trainer *t);

/* ---- checkpoints (train_ckpt.c) ---- */

/* Writes the complete training state after `t->step` steps to path
 * (collective when t->ddp: rank 0 writes). */
int trainer_ckpt_save(struct trainer *t, const char *path);
/* Restores the state from path (every rank), including step, sampler
 * position and RNG. strict per t->cfg.strict. */
int trainer_ckpt_load(struct trainer *t, const char *path);
/* A hash of the job's identity (every "job.NAME" of config_job_settings
 * and the sample count, as checkpoints store them): two processes of one
 * job have the same. */
uint64_t trainer_ckpt_job_hash(const struct trainer *t);
/* Reads path's metadata only: 1 when it is this job's (every "job.NAME" of
 * config_job_settings, and the sample count, equal to this run's), 0 when
 * not (why says the first difference), or a negative errno when it cannot
 * be read (why says so). *step: the step it holds (0 when unknown). */
int trainer_ckpt_peek(const struct trainer *t, const char *path, uint64_t *step, char *why,
		      size_t len);

#endif
