/*
 * replica_check.h - every replica's state compared after committed steps
 * (--global_batch_size mode, where the replicas are bitwise equal by
 * construction): each rank digests its training state (xxHash XXH3_64 of
 * train_state.h's header and segments: parameters, BatchNorm buffers, SGD
 * momentum) and the digests travel in the next step's first all-reduce,
 * which the step makes anyway (loop_shards.c): each rank writes its digest
 * as REPLICA_FLOATS integer words of 21-22 bits into its own run and 0
 * elsewhere, so the float32 sum is an exact copy and every rank reads every
 * rank's digest with no collective of its own. The last step's digest has
 * no next step: one all-gather of 8 bytes per rank, once. A mismatch is named on every rank (rank,
 * step, the first tensor that differs, found from per-tensor digests once a mismatch is seen) and
 * recorded in rank 0's metrics file. With a majority (3 ranks or more, one bad) the minority takes
 * the majority's state from the lowest majority rank's memory (the hand-over's broadcast) and
 * training goes on; without one (2 ranks, a tie) the run stops.
 *
 * The digest of step s's state (1 MiB or more) runs on a helper thread while step s+1's
 * shards compute (they only read the state); replica_check_finish waits for
 * it before step s+1 writes anything, so a corrupted replica is caught
 * before its state goes further, and step s+1 is redone after a heal.
 *
 * DDP_TEST_FLIP=RANK:STEP (tests only; read in every build): the process
 * that is rank RANK flips mantissa bit 16 of the first float of the model's
 * last parameter tensor right after step STEP's update, once, on restart
 * attempt 0 only (a group restarted from a checkpoint runs clean).
 */
#ifndef DDP_WORKER_TRAIN_REPLICA_CHECK_H
#define DDP_WORKER_TRAIN_REPLICA_CHECK_H

#include "trainer.h"

/* replica_check_take: a minority was healed; redo the step in progress. */
#define REPLICA_HEALED 1

/* Floats per rank that carry its digest in the step's first all-reduce:
 * bits 0-21, 22-43, then 44-63 with bit 20 set (the run holds a digest;
 * all 0: this rank had none), each below 2^24 so float32 holds it and adds
 * 0 to it exactly. */
#define REPLICA_FLOATS 3

/* Sets up t->replica (NULL when --replica_check_every is 0 and no flip is
 * asked) after the model and optimizer exist (trainer_run's start). Returns 0, -ENOMEM, or
 * -EINVAL when DDP_TEST_FLIP is not RANK:STEP (said). */
int replica_check_init(struct trainer *t);
/* Waits for a running digest and frees everything. NULL-safe. */
void replica_check_release(struct trainer *t);

/* After step t->step was committed: the test flip, then, when the period
 * says so and there are ranks to compare with, the digest starts on the
 * helper thread (a state under 1 MiB: made here at once). A check that
 * cannot run (the state's copy to the host fails) is skipped and a thread
 * that cannot start is done without: said once, the run goes on. Returns 0,
 * or the test flip's copy error. */
int replica_check_after_step(struct trainer *t);

/* Before the step in progress's first all-reduce: waits for the pending
 * digest (nothing pending: writes nothing) and writes it into this rank's
 * run of x (world x REPLICA_FLOATS floats, zeroed). */
void replica_check_put(struct trainer *t, float *x);

/* After that all-reduce, before the step writes the state: compares the
 * digests in x (every rank's run). When every rank sent one: returns 0
 * when all agree; REPLICA_HEALED when a minority took the
 * majority's state (said, recorded; the caller redoes the step in
 * progress); -EIO when they differ with no majority (said, recorded; the
 * run stops: a restart from the last checkpoint recovers, so it is an
 * ordinary failure, not a permanent one); or a collective's error (a
 * re-formation follows as for any step). When only some ranks sent one
 * (a re-formation dropped the digest on some): 0, and the check counts as
 * skipped (replica_check_report). */
int replica_check_take(struct trainer *t, const float *x);

/* After the last step (no step follows to carry it): waits for the
 * pending digest and compares it in one all-gather. Returns as
 * replica_check_take. */
int replica_check_finish(struct trainer *t);

/* Drops the pending digest (waits for the thread): before a re-formation
 * or a hand-over writes the state. NULL-safe. */
void replica_check_cancel(struct trainer *t);

/* Rank 0's closing line: checks run, mismatches caught and healed, the
 * digest's cost per check (main thread's wait and the helper's hashing). */
void replica_check_report(const struct trainer *t, double step_s);
/* Any rank's line, when a re-formation (or a failed copy of the state)
 * made it skip checks: how many. */
void replica_check_report_skipped(const struct trainer *t);

#endif
