/*
 * straggler_micro.c - what naming and planning cost a step on each rank, in
 * CPU: straggler_update (the medians, the verdicts) and shard_plan_decide
 * for W ranks and V = 8W shards, over many steps of noisy timings with one
 * rank at half speed, and the bytes the exchange adds to the step's first
 * all-reduce (19 floats per rank). Prints one markdown row per W.
 *
 *   straggler_micro [STEPS]
 */
#include "shard_plan.h"
#include "straggler.h"
#include "trainer.h" /* TRAINER_BALANCE_FLOATS */

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double one(int w, int steps)
{
	struct straggler s;
	struct straggler_sample *x = calloc((size_t)w, sizeof(*x));
	int *cur = calloc((size_t)w, sizeof(int)), *next = calloc((size_t)w, sizeof(int));
	double *cost = calloc((size_t)w, sizeof(double)), t0, sink = 0.0;
	unsigned seed = 26;

	if (!x || !cur || !next || !cost || straggler_init(&s, w, 1.5, 4) < 0)
		exit(1);
	for (int r = 0; r < w; r++)
		cur[r] = 8;
	t0 = now_ns();
	for (int i = 0; i < steps; i++) {
		for (int r = 0; r < w; r++) {
			double noise = 1.0 + 0.2 * ((double)rand_r(&seed) / RAND_MAX - 0.5);

			x[r] = (struct straggler_sample){0.01 * cur[r] * noise * (r == 1 ? 2 : 1),
							 0.002, cur[r]};
		}
		sink += straggler_update(&s, x);
		straggler_costs(&s, cost);
		if (shard_plan_decide(8 * w, w, cost, cur, 0.1, next))
			for (int r = 0; r < w; r++)
				cur[r] = next[r];
	}
	t0 = (now_ns() - t0) / steps;
	if (sink < 0)
		printf("%f\n", sink);
	straggler_release(&s);
	free(x);
	free(cur);
	free(next);
	free(cost);
	return t0;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 20000;

	printf("| ranks W | V | detector + plan per step (CPU, every rank) | bytes added to the "
	       "step's first all-reduce |\n|---:|---:|---:|---:|\n");
	for (int w = 2; w <= 256; w *= 4)
		printf("| %d | %d | %.2f us | %d |\n", w, 8 * w,
		       one(w, w > 64 ? steps / 20 : steps) / 1e3, w * TRAINER_BALANCE_FLOATS * 4);
	return 0;
}
