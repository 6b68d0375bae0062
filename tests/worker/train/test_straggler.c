/*
 * test_straggler.c - naming a slow rank from step samples: noise and short
 * spikes name nobody, a rank at half speed is named (compute) within a few
 * samples with how much slower, a rank whose transfers grow is named
 * (link), a rank that recovers is cleared, and per-shard times do not
 * mistake a rank that computes fewer shards for a fast one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rng.h"
#include "straggler.h"

#include <errno.h>
#include <math.h>

#define W 3

/* Feeds a step where rank r computes shards[r] shards at per[r] seconds
 * each (times noise in [1 - jit, 1 + jit]) and every rank's collectives end
 * together, `xfer` seconds after the slowest compute (extra[r] more on
 * rank r's side). Returns straggler_update's value. */
static int feed(struct straggler *s, struct rng *g, const double *per, const int *shards,
		double jit, double xfer, const double *extra)
{
	struct straggler_sample x[W];
	double slowest = 0.0;

	for (int r = 0; r < W; r++) {
		double noise = 1.0 + jit * (2.0 * rng_uniform(g) - 1.0);

		x[r].compute_s = per[r] * shards[r] * noise;
		x[r].shards = shards[r];
		slowest = fmax(slowest, x[r].compute_s);
	}
	for (int r = 0; r < W; r++)
		x[r].wait_s = slowest - x[r].compute_s + xfer + (extra ? extra[r] : 0.0);
	return straggler_update(s, x);
}

static const int even[W] = {8, 8, 8};

static void test_noise_names_nobody(void **state)
{
	struct straggler s;
	struct rng g;
	double per[W] = {0.01, 0.01, 0.01};

	(void)state;
	rng_seed(&g, 1);
	assert_int_equal(straggler_init(&s, W, 1.5, 4), 0);
	for (int i = 0; i < 500; i++) {
		/* A spike of two samples (5x) on one rank every 25: the medians
		 * hold. */
		for (int r = 0; r < W; r++)
			per[r] = r == (i / 25) % W && i % 25 < 2 ? 0.05 : 0.01;
		assert_int_equal(feed(&s, &g, per, even, 0.2, 0.005, NULL), 0);
	}
	for (int r = 0; r < W; r++)
		assert_int_equal(s.r[r].named, STRAGGLER_NONE);
	straggler_release(&s);
}

static void test_half_speed_named_then_cleared(void **state)
{
	struct straggler s;
	struct rng g;
	double per[W] = {0.01, 0.01, 0.01}, cost[W];
	int i, named = -1, cleared = -1;

	(void)state;
	rng_seed(&g, 2);
	assert_int_equal(straggler_init(&s, W, 1.5, 4), 0);
	for (i = 0; i < 20; i++)
		feed(&s, &g, per, even, 0.1, 0.005, NULL);
	per[1] = 0.02; /* half speed from sample 20 */
	for (; i < 60 && named < 0; i++)
		if (feed(&s, &g, per, even, 0.1, 0.005, NULL))
			named = i;
	/* Three slow samples turn the median, then four in a row. */
	assert_true(named >= 20 + 5 && named <= 20 + 7);
	assert_int_equal(s.r[1].named, STRAGGLER_COMPUTE);
	assert_int_equal(s.r[0].named, STRAGGLER_NONE);
	assert_true(s.r[1].slower > 1.7 && s.r[1].slower < 2.3);
	straggler_costs(&s, cost);
	assert_true(cost[1] > 1.7 * cost[0]);
	/* The plan moved shards away: fewer shards, the same per-shard time,
	 * still named. */
	for (int k = 0; k < 20; k++)
		assert_int_equal(feed(&s, &g, per, (int[]){10, 5, 9}, 0.1, 0.005, NULL), 0);
	assert_int_equal(s.r[1].named, STRAGGLER_COMPUTE);
	per[1] = 0.01; /* recovered */
	for (i = 0; i < 40 && cleared < 0; i++)
		if (feed(&s, &g, per, (int[]){10, 5, 9}, 0.1, 0.005, NULL))
			cleared = i;
	assert_true(cleared >= 0 && cleared <= 7);
	assert_int_equal(s.r[1].named, STRAGGLER_NONE);
	straggler_release(&s);
}

/* Steps of a millisecond: a rank twice as slow for 20 steps (40 ms: a
 * busy machine's scheduler) is not named; for half a second it is. */
static void test_short_steps_need_half_a_second(void **state)
{
	struct straggler s;
	struct rng g;
	double per[W] = {0.000125, 0.000125, 0.000125};
	int i, named = -1;

	(void)state;
	rng_seed(&g, 4);
	assert_int_equal(straggler_init(&s, W, 1.5, 4), 0);
	for (i = 0; i < 20; i++)
		feed(&s, &g, per, even, 0.1, 0.0001, NULL);
	per[0] = 0.00025;
	for (i = 0; i < 20; i++)
		assert_int_equal(feed(&s, &g, per, even, 0.1, 0.0001, NULL), 0);
	for (; i < 1000 && named < 0; i++)
		if (feed(&s, &g, per, even, 0.1, 0.0001, NULL))
			named = i;
	/* 2.1 ms a step: 0.5 s is about 240 steps. */
	assert_true(named >= 200 && named <= 300);
	assert_int_equal(s.r[0].named, STRAGGLER_COMPUTE);
	straggler_release(&s);
}

static void test_link(void **state)
{
	struct straggler s;
	struct rng g;
	double per[W] = {0.01, 0.01, 0.01}, extra[W] = {0, 0, 0.02};
	int i, named = -1;

	(void)state;
	rng_seed(&g, 3);
	assert_int_equal(straggler_init(&s, W, 1.5, 4), 0);
	for (i = 0; i < 10; i++)
		feed(&s, &g, per, even, 0.1, 0.005, NULL);
	for (; i < 40 && named < 0; i++)
		if (feed(&s, &g, per, even, 0.1, 0.005, extra))
			named = i;
	assert_true(named >= 0 && named <= 10 + 7);
	assert_int_equal(s.r[2].named, STRAGGLER_LINK);
	assert_true(s.r[2].slower > 3.0); /* 25 ms against 5 ms */
	assert_int_equal(s.r[0].named, STRAGGLER_NONE);
	assert_int_equal(s.r[1].named, STRAGGLER_NONE);
	straggler_release(&s);
}

static void test_args(void **state)
{
	struct straggler s;
	struct straggler_sample x = {1.0, 0.0, 1};

	(void)state;
	assert_int_equal(straggler_init(&s, 0, 1.5, 4), -EINVAL);
	assert_int_equal(straggler_init(&s, 2, 1.0, 4), -EINVAL);
	assert_int_equal(straggler_init(&s, 2, 1.5, 0), -EINVAL);
	/* One rank: nobody to compare with. */
	assert_int_equal(straggler_init(&s, 1, 1.5, 1), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(straggler_update(&s, &x), 0);
	straggler_release(&s);
	assert_string_equal(straggler_cause_name(STRAGGLER_LINK), "link");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_noise_names_nobody),
	    cmocka_unit_test(test_half_speed_named_then_cleared),
	    cmocka_unit_test(test_short_steps_need_half_a_second),
	    cmocka_unit_test(test_link),
	    cmocka_unit_test(test_args),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
