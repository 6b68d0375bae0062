/*
 * hang_deadline.h - how long a worker may go without progress before it is
 * hung, learned from the job itself. Pure: no I/O, no clock (the caller
 * gives every duration, in nanoseconds).
 *
 * A deadline is kept per kind of wait: the time in COMPUTE between two
 * collectives (fed from each committed step's compute_ns and from the gaps
 * seen between consecutive collectives), the time inside a collective per
 * op (fed from each finished collective seen, and from each step's
 * wait_ns), and the time in each other phase (start-up, re-forming,
 * hand-over, checkpoint, evaluation, final save, shutdown: each phase's
 * whole duration). Each kind keeps its last HANG_RING samples; once it has
 * its warm-up count of them its deadline is
 *
 *     max(floor, k x p99, m x longest) of those samples
 *
 * with the floor never below HANG_FLOOR_MIN_NS (a page-fault storm or a
 * scheduler hiccup is never a hang). Before the warm-up a kind has no
 * deadline: start-up, a job's first steps, its first checkpoints are never
 * judged until the job has shown what they cost. The long phases (every
 * phase but COMPUTE and COLLECTIVE) have a floor of their own
 * (long_floor_ns) and a shorter warm-up: they are judged by their own
 * measure only.
 *
 * An explicit override (--hang_timeout) replaces the learned deadline of
 * COMPUTE and COLLECTIVE, from the first moment (no warm-up); the long
 * phases stay learned. Off: no deadline at all.
 */
#ifndef DDP_LAUNCHER_HANG_DEADLINE_H
#define DDP_LAUNCHER_HANG_DEADLINE_H

#include <stdbool.h>
#include <stdint.h>

#include "progress.h"

#define HANG_RING	   256
#define HANG_FLOOR_MIN_NS  500000000ull	  /* 0.5 s */
#define HANG_LONG_FLOOR_NS 10000000000ull /* 10 s */

/* The kinds: one per phase (COLLECTIVE's slot holds the step's wait_ns,
 * every op's), then one per collective op. */
#define HANG_KINDS (DDP_PHASE_COUNT + DDP_OP_COUNT)

struct hang_deadline_cfg {
	uint64_t floor_ns;	/* >= HANG_FLOOR_MIN_NS */
	uint64_t long_floor_ns; /* the long phases' floor */
	double k, m;		/* multipliers of the p99 and of the longest */
	uint32_t warmup;	/* samples before COMPUTE and COLLECTIVE are judged */
	uint32_t long_warmup;	/* the same for the long phases */
	uint64_t fixed_ns;	/* the override: 0 to learn */
	bool off;		/* never a deadline */
};

struct hang_ring {
	uint64_t v[HANG_RING];
	uint32_t n, next; /* samples held (<= HANG_RING), where the next goes */
};

struct hang_deadline {
	struct hang_deadline_cfg cfg;
	struct hang_ring ring[HANG_KINDS];
};

/* The defaults: floor 0.5 s, long floor 10 s, k 4, m 2, warm-up 20 and 3,
 * learned. */
void hang_deadline_cfg_defaults(struct hang_deadline_cfg *c);

/* Empties d and takes cfg (a floor below HANG_FLOOR_MIN_NS is raised to
 * it; an override too). */
void hang_deadline_init(struct hang_deadline *d, const struct hang_deadline_cfg *cfg);

/* One sample: a wait of `ns` in `phase` (for DDP_PHASE_COLLECTIVE, `op`
 * names the collective; DDP_OP_NONE: a step's time in any collective).
 * Out-of-range phases or ops are ignored. */
void hang_deadline_add(struct hang_deadline *d, enum ddp_progress_phase phase,
		       enum ddp_progress_op op, uint64_t ns);

/* The deadline of a wait in `phase` (and collective `op`), in ns, or 0
 * when none applies (off, not warmed up, NONE). A collective's deadline is
 * the larger of its op's and the step's waits' (each once warmed up).
 * COMPUTE's is the larger of its own and every collective's (a peer's wait
 * inside a collective is a rank's time outside one), and needs both warmed
 * up. */
uint64_t hang_deadline_get(const struct hang_deadline *d, enum ddp_progress_phase phase,
			   enum ddp_progress_op op);

/* The 99th percentile of a ring (the nearest rank), 0 when empty. */
uint64_t hang_ring_p99(const struct hang_ring *r);

#endif
