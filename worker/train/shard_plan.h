/*
 * shard_plan.h - the weighted shard plan of --global_batch_size G
 * --virtual_shards V: how many of a step's V shards each rank computes when
 * the ranks run at different speeds. Rank r computes the contiguous run
 * [shard_plan_first(counts, r), + counts[r]), in rank order, so any plan
 * covers every shard of a step exactly once (the data ledger holds), and
 * since the shards' gradients are summed exactly (shards.h) the plan never
 * changes a bit of the result, only the step time.
 *
 * Every rank computes the plan from the same agreed numbers (the per-shard
 * times of every rank, exchanged in the step's first all-reduce), with the
 * same code, so every rank reaches the same plan without another message.
 * Pure functions, no I/O; deterministic (ties go to the lower rank).
 */
#ifndef DDP_WORKER_TRAIN_SHARD_PLAN_H
#define DDP_WORKER_TRAIN_SHARD_PLAN_H

/* The split of v shards over w ranks (counts[r], r < w) with the smallest
 * predicted step time max_r counts[r] * cost[r], where cost[r] > 0 is rank
 * r's time per shard: every rank keeps at least one shard when v >= w (so
 * that its speed stays measured), and each further shard goes to the rank
 * that would finish it first (ties: the lower rank). A cost that is not a
 * finite positive number counts as the median of the others' (1 when none
 * is). With equal costs this is shards_range's even spread. */
void shard_plan_optimal(int v, int w, const double *cost, int *counts);

/* max_r counts[r] * cost[r] (cost as shard_plan_optimal reads it). */
double shard_plan_time(int w, const int *counts, const double *cost);

/* The first shard of rank r: counts[0] + ... + counts[r - 1]. */
int shard_plan_first(const int *counts, int r);

/* The next plan, with hysteresis: the optimal plan for cost when it
 * predicts a step at least `gain` (a fraction, e.g. 0.1) shorter than the
 * current plan under the same costs, else the current one. Returns 1 and
 * writes next (w counts) when the plan changes, 0 when it stays (next is
 * then a copy of current). A current plan that does not sum to v is
 * replaced by the optimal one whatever the gain. */
int shard_plan_decide(int v, int w, const double *cost, const int *current, double gain, int *next);

#endif
