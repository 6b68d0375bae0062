/*
 * train_progress.h - what ddp-train tells its agent through libddp's
 * progress page (ddp.h, ddp_progress_phase and ddp_progress_step): the
 * parts of a run libddp cannot see (start-up's model broadcast and resume,
 * checkpoints, evaluation, the final save, the end) and each committed
 * step's timings. COMPUTE and COLLECTIVE, REFORM and HANDOVER inside
 * ddp_rejoin come from libddp itself.
 */
#ifndef DDP_WORKER_TRAIN_PROGRESS_H
#define DDP_WORKER_TRAIN_PROGRESS_H

#include <stdint.h>

#include "ddp.h"

struct trainer;

/* The phase from now on (nothing without a launcher's page). */
void train_progress_phase(const struct trainer *t, enum ddp_progress_phase phase);

/* One step's clock: started before each try of a step, reported once the
 * step is committed (t->step counts it). */
struct train_step_clock {
	uint64_t t0_ns;
	double comm0_s; /* t->comm_wait_s at the start */
};
void train_step_clock_start(const struct trainer *t, struct train_step_clock *c);
/* ddp_progress_step for the step just committed: its duration since the
 * clock started, the time inside collectives (t->comm_wait_s's growth) and
 * outside, and the shards this rank computed (0 outside shard mode). */
void train_progress_step(const struct trainer *t, const struct train_step_clock *c);

#endif
