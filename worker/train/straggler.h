/*
 * straggler.h - naming a persistently slow rank from every rank's step
 * timings. Each step every rank contributes one sample of its last
 * completed step: its compute time, the shards it computed and its time in
 * collectives (the samples travel in the step's first all-reduce, so every
 * rank feeds the same samples in the same order and reaches the same
 * verdicts: the module is deterministic).
 *
 * Per rank, over the last STRAGGLER_WINDOW samples (medians, so that a
 * spike of fewer than half the window moves nothing):
 *   - compute: seconds per shard;
 *   - link: seconds in collectives not spent waiting for a slower rank's
 *     compute (its time in collectives minus the slowest rank's compute
 *     less its own): the transfer itself.
 * A rank is named when its compute per shard exceeds `ratio` x the median
 * of the other ranks' (cause compute), or else its link time exceeds
 * `ratio` x the others' median and them by at least STRAGGLER_LINK_MIN_S
 * and STRAGGLER_LINK_SHARE of the median step (cause link: a transfer
 * that costs the job little is not worth a line), on `persist` consecutive
 * samples lasting STRAGGLER_MIN_S together (the job's step: the slowest
 * rank's compute and wait), so that with steps of a millisecond the
 * scheduler's noise on a busy machine names nobody; it is cleared when it
 * has been under 1 + (ratio - 1) / 2 as long (a band, so that a rank near
 * the threshold does not flap). Pure module: no I/O, no clock (the times
 * are the samples').
 */
#ifndef DDP_WORKER_TRAIN_STRAGGLER_H
#define DDP_WORKER_TRAIN_STRAGGLER_H

#include <stdint.h>

#define STRAGGLER_WINDOW     5
#define STRAGGLER_LINK_MIN_S 0.002
#define STRAGGLER_LINK_SHARE 0.2
#define STRAGGLER_MIN_S	     0.5

enum straggler_cause {
	STRAGGLER_NONE = 0,
	STRAGGLER_COMPUTE, /* its own work per shard grew */
	STRAGGLER_LINK,	   /* its transfers grew */
};

/* One rank's last completed step. shards 0: no compute sample. */
struct straggler_sample {
	double compute_s, wait_s;
	int shards;
};

struct straggler_rank {
	double shard_s[STRAGGLER_WINDOW], link_s[STRAGGLER_WINDOW], step_s[STRAGGLER_WINDOW];
	double step;		    /* median seconds of its steps (compute + wait) */
	double cost;		    /* median seconds per shard; 0: unknown */
	double link;		    /* median link seconds */
	double slower;		    /* how much slower than the others (>= 0; 1: as fast) */
	enum straggler_cause cause; /* the cause now over the threshold, NONE: none */
	enum straggler_cause named; /* named (and not cleared) */
	int over, under;	    /* consecutive samples over / under the band */
	double over_s, under_s;	    /* the job's seconds in those samples */
	uint64_t since;		    /* the sample count when named */
};

struct straggler {
	int world;
	double ratio;
	int persist;
	uint64_t n;    /* samples fed */
	double step_s; /* the job's step in the last sample */
	struct straggler_rank *r;
};

/* world ranks; ratio > 1 (e.g. 1.25); persist >= 1 (e.g. 3). Returns 0,
 * -EINVAL, -ENOMEM. */
int straggler_init(struct straggler *s, int world, double ratio, int persist);
void straggler_release(struct straggler *s);

/* Feeds one sample per rank (x[0..world)). Returns how many ranks were
 * named or cleared by this sample (their `named` changed), >= 0. */
int straggler_update(struct straggler *s, const struct straggler_sample *x);

/* Every rank's median seconds per shard into cost[0..world) (0 where
 * unknown): what the shard plan weighs. */
void straggler_costs(const struct straggler *s, double *cost);

/* "compute", "link" or "none". */
const char *straggler_cause_name(enum straggler_cause c);

#endif
