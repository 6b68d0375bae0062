/*
 * test_shard_plan.c - the weighted shard plan: table cases (the plan for
 * given speeds, its predicted step time), the properties every plan has
 * (every shard once, contiguous in rank order, at least one shard per
 * rank when there are enough, never worse than the even spread, equal
 * speeds give shards_range's spread) over many random speeds, and the
 * hysteresis of the decision (noise moves nothing, a recovery gives the
 * share back).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rng.h"
#include "shard_plan.h"
#include "shards.h"

#include <math.h>
#include <string.h>

struct plan_case {
	int v, w;
	double cost[4];
	int want[4];
};

static void test_table(void **state)
{
	static const struct plan_case cases[] = {
	    /* Equal speeds: the even spread, extra shards to the low ranks. */
	    {24, 2, {1, 1}, {12, 12}},
	    {8, 3, {1, 1, 1}, {3, 3, 2}},
	    /* One rank at half speed: it takes a third (the optimum: 16 x 1
	     * = 8 x 2). */
	    {24, 2, {1, 2}, {16, 8}},
	    {24, 2, {2, 1}, {8, 16}},
	    {24, 3, {1, 2, 1}, {10, 5, 9}},
	    /* Few shards: every rank keeps one (its speed stays measured). */
	    {3, 3, {1, 10, 1}, {1, 1, 1}},
	    {4, 2, {1, 100}, {3, 1}},
	    /* Fewer shards than ranks: the fastest take them. */
	    {2, 4, {3, 1, 2, 1}, {0, 1, 0, 1}},
	    /* Unknown costs (0, NaN, -1) count as the median of the known. */
	    {12, 3, {0, 1, 1}, {4, 4, 4}},
	    {12, 3, {NAN, -1, 2}, {4, 4, 4}},
	    {9, 3, {0, 0, 0}, {3, 3, 3}},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got[4] = {0};

		shard_plan_optimal(cases[i].v, cases[i].w, cases[i].cost, got);
		for (int r = 0; r < cases[i].w; r++)
			if (got[r] != cases[i].want[r])
				fail_msg("case %zu rank %d: %d shards, want %d", i, r, got[r],
					 cases[i].want[r]);
	}
	assert_true(shard_plan_time(2, (int[]){16, 8}, (double[]){1, 2}) == 16.0);
	assert_true(shard_plan_time(2, (int[]){12, 12}, (double[]){1, 2}) == 24.0);
	assert_int_equal(shard_plan_first((int[]){5, 3, 4}, 0), 0);
	assert_int_equal(shard_plan_first((int[]){5, 3, 4}, 2), 8);
}

/* The plain greedy (no head start), the reference the fast one must
 * match: one shard each, then each next to the rank that ends it first. */
static void plain_greedy(int v, int w, const double *cost, int *counts)
{
	for (int r = 0; r < w; r++)
		counts[r] = 1;
	for (int left = v - w; left > 0; left--) {
		int best = 0;

		for (int r = 1; r < w; r++)
			if ((counts[r] + 1) * cost[r] < (counts[best] + 1) * cost[best])
				best = r;
		counts[best]++;
	}
}

/* The smallest max count x cost over every split, by brute force (w = 3). */
static double brute_best(int v, const double *cost)
{
	double best = INFINITY;

	for (int a = 1; a <= v - 2; a++)
		for (int b = 1; a + b <= v - 1; b++) {
			int c[3] = {a, b, v - a - b};

			best = fmin(best, shard_plan_time(3, c, cost));
		}
	return best;
}

static void test_properties(void **state)
{
	struct rng g;

	(void)state;
	rng_seed(&g, 26);
	for (int it = 0; it < 2000; it++) {
		int w = 1 + (int)(rng_below(&g, 8)),
		    v = 1 + (int)(rng_below(&g, it % 2 ? 64 : 4096));
		double cost[8], even[8];
		int counts[8], sum = 0, first, count;

		for (int r = 0; r < w; r++) {
			/* Few distinct values half the time: ties. */
			cost[r] = it % 4 < 2 ? 0.1 + (double)(rng_below(&g, 1000)) / 100.0
					     : (double)(1 + rng_below(&g, 3));
			even[r] = 1.0;
		}
		shard_plan_optimal(v, w, cost, counts);
		for (int r = 0; r < w; r++) {
			assert_int_equal(shard_plan_first(counts, r), sum);
			sum += counts[r];
			if (v >= w)
				assert_true(counts[r] >= 1);
		}
		assert_int_equal(sum, v); /* every shard once */
		/* Never worse than the even spread it replaces. */
		for (int r = 0; r < w; r++) {
			shards_range(v, w, r, &first, &count);
			counts[r] = count;
		}
		{
			int opt[8];

			shard_plan_optimal(v, w, cost, opt);
			assert_true(shard_plan_time(w, opt, cost) <=
				    shard_plan_time(w, counts, cost));
			/* Equal costs: exactly shards_range. */
			shard_plan_optimal(v, w, even, opt);
			assert_memory_equal(opt, counts, (size_t)w * sizeof(int));
			/* The same split as the plain greedy, tie for tie. */
			if (v >= w) {
				int ref[8];

				shard_plan_optimal(v, w, cost, opt);
				plain_greedy(v, w, cost, ref);
				assert_memory_equal(opt, ref, (size_t)w * sizeof(int));
			}
			/* Optimal (w = 3, brute force). */
			if (w == 3 && v >= 3 && v <= 64) {
				shard_plan_optimal(v, w, cost, opt);
				assert_true(shard_plan_time(w, opt, cost) == brute_best(v, cost));
			}
		}
	}
}

static void test_hysteresis(void **state)
{
	int even[2] = {12, 12}, moved[2] = {16, 8}, next[2];

	(void)state;
	/* Noise (8% apart): the even plan stays. */
	assert_int_equal(shard_plan_decide(24, 2, (double[]){1.0, 1.08}, even, 0.1, next), 0);
	assert_memory_equal(next, even, sizeof(even));
	/* Half speed: the plan moves (24 -> 16 predicted). */
	assert_int_equal(shard_plan_decide(24, 2, (double[]){1.0, 2.0}, even, 0.1, next), 1);
	assert_memory_equal(next, moved, sizeof(moved));
	/* Moved, and the speeds wobble a little: no new plan. */
	assert_int_equal(shard_plan_decide(24, 2, (double[]){1.02, 1.95}, moved, 0.1, next), 0);
	assert_memory_equal(next, moved, sizeof(moved));
	/* Recovered: the share comes back. */
	assert_int_equal(shard_plan_decide(24, 2, (double[]){1.0, 1.0}, moved, 0.1, next), 1);
	assert_memory_equal(next, even, sizeof(even));
	/* A current plan that is not a split of v is replaced. */
	assert_int_equal(shard_plan_decide(24, 2, (double[]){1.0, 1.0}, (int[]){12, 11}, 0.9, next),
			 1);
	assert_memory_equal(next, even, sizeof(even));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table),
	    cmocka_unit_test(test_properties),
	    cmocka_unit_test(test_hysteresis),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
