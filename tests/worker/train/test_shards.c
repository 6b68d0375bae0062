/*
 * test_shards.c - virtual shards: their spread over ranks, and the exact
 * reduction: the same bits for every spread of the shards over ranks and
 * every order of the sums, and its error against the exact mean (measured
 * beside a plain float sum's, which depends on the grouping).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rng.h"
#include "shards.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSHARDS 12
#define NELEM	4096

static void test_range(void **state)
{
	(void)state;
	for (int v = 1; v <= 17; v++) {
		for (int w = 1; w <= 8; w++) {
			int next = 0, lo = v, hi = 0;

			for (int r = 0; r < w; r++) {
				int first, count;

				shards_range(v, w, r, &first, &count);
				assert_int_equal(first, next); /* contiguous, in rank order */
				next = first + count;
				lo = count < lo ? count : lo;
				hi = count > hi ? count : hi;
			}
			assert_int_equal(next, v);
			assert_true(hi - lo <= 1);
		}
	}
}

static void test_scale(void **state)
{
	(void)state;
	assert_int_equal(shards_scale_exp(0.0f, 8), 0);
	/* 0.75 < 2^0; 8 shards take 3 bits: 8 x 2^48 = 2^51. */
	assert_int_equal(shards_scale_exp(0.75f, 8), 48);
	assert_int_equal(shards_scale_exp(1.0f, 1), 50);
	assert_int_equal(shards_scale_exp(1.0f, 3), 48);
}

static void test_maxabs(void **state)
{
	static float x[3001];

	(void)state;
	assert_true(isnan(shards_maxabs((const float[]){1.0f, NAN, 2.0f}, 3)));
	assert_true(isnan(shards_maxabs((const float[]){1.0f, -NAN, INFINITY}, 3)));
	assert_true(shards_maxabs((const float[]){1.0f, -3.0f, 2.0f}, 3) == 3.0f);
	assert_true(shards_maxabs((const float[]){1.0f, -INFINITY}, 2) == INFINITY);
	assert_true(shards_maxabs((const float[]){-0.0f, 0x1p-149f, -0x1p-140f}, 3) == 0x1p-140f);
	assert_true(shards_maxabs(x, 0) == 0.0f);
	/* Past any vector width, the largest at the end, then in the middle. */
	for (int i = 0; i < 3001; i++)
		x[i] = (i % 2 ? -1.0f : 1.0f) * (float)i * 0x1p-10f;
	assert_true(shards_maxabs(x, 3001) == 3000.0f * 0x1p-10f);
	x[1501] = -5.0f;
	assert_true(shards_maxabs(x, 3001) == 5.0f);
	assert_true(shards_maxabs(x, 1501) == 1500.0f * 0x1p-10f);
}

/* Every shard rounded on its own (ties to even) and summed, against the
 * one pass over all of them; count 0 clears the sums. */
static void test_quantize_sum(void **state)
{
	enum { N = 2500, K = 3 };
	static float x[K][N + 7];
	static double q[N], want[N];

	(void)state;
	for (int k = 0; k < K; k++)
		for (int i = 0; i < N + 7; i++)
			x[k][i] = (float)((i * 7 + k * 13) % 29 - 14) * 0.25f;
	/* s = 1: x * 2 ends in .5 for odd quarters: the ties round to even. */
	for (int i = 0; i < N; i++) {
		want[i] = 0.0;
		for (int k = 0; k < K; k++)
			want[i] += nearbyint((double)x[k][i] * 2.0);
	}
	for (int i = 0; i < N; i++)
		q[i] = 12345.0; /* overwritten, not added to */
	shards_quantize_sum(q, &x[0][0], N + 7, K, N, 1);
	assert_memory_equal(q, want, sizeof(q));
	assert_true(q[0] == nearbyint(-3.5 * 2) + nearbyint(-0.25 * 2) + nearbyint(3.0 * 2));
	shards_quantize_sum(q, &x[0][0], N + 7, 0, N, 1);
	for (int i = 0; i < N; i++)
		assert_true(q[i] == 0.0);
}

/* Gradients spanning 30 binary orders of magnitude, signs mixed. */
static void fill(float g[NSHARDS][NELEM])
{
	struct rng rng;

	rng_seed(&rng, 42);
	for (int v = 0; v < NSHARDS; v++)
		for (int i = 0; i < NELEM; i++)
			g[v][i] = ldexpf(rng_normal(&rng), -(int)(i % 31));
}

/* The exact reduction with the shards spread over w ranks: each rank sums
 * its own shards' integers, then the ranks' sums are added in `order`
 * (0: rank 0 first, 1: last rank first, 2: pairs). */
static void reduce_exact(float g[NSHARDS][NELEM], int w, int order, float *out)
{
	static double q[8][NELEM];
	float mx = 0.0f;
	int s;

	for (int v = 0; v < NSHARDS; v++)
		mx = fmaxf(mx, shards_maxabs(g[v], NELEM));
	s = shards_scale_exp(mx, NSHARDS);
	memset(q, 0, sizeof(q));
	for (int r = 0; r < w; r++) {
		int first, count;

		shards_range(NSHARDS, w, r, &first, &count);
		shards_quantize_sum(q[r], &g[0][0] + (size_t)first * NELEM, NELEM, count, NELEM, s);
	}
	for (int i = 0; i < NELEM; i++) {
		double sum = 0.0, a = 0.0, b = 0.0;

		for (int r = 0; r < w; r++) {
			int rr = order == 1 ? w - 1 - r : r;

			if (order == 2)
				*(r % 2 ? &b : &a) += q[r][i];
			else
				sum += q[rr][i];
		}
		q[0][i] = order == 2 ? a + b : sum;
	}
	shards_dequantize(out, q[0], NELEM, s, NSHARDS);
}

/* What a float all-reduce would give: each rank's shards summed in float,
 * the ranks' sums added in float, divided by the shards. */
static void reduce_float(float g[NSHARDS][NELEM], int w, float *out)
{
	for (int i = 0; i < NELEM; i++) {
		float sum = 0.0f;

		for (int r = 0; r < w; r++) {
			int first, count;
			float part = 0.0f;

			shards_range(NSHARDS, w, r, &first, &count);
			for (int k = 0; k < count; k++)
				part += g[first + k][i];
			sum += part;
		}
		out[i] = sum / NSHARDS;
	}
}

/* The exact mean of the shards (long double: 64-bit significand). */
static long double mean_ref(float g[NSHARDS][NELEM], int i)
{
	long double s = 0.0L;

	for (int v = 0; v < NSHARDS; v++)
		s += g[v][i];
	return s / NSHARDS;
}

/* Largest |g[v][i]| over the shards: the scale of element i's inputs. */
static float input_max(float g[NSHARDS][NELEM], int i)
{
	float m = 0.0f;

	for (int v = 0; v < NSHARDS; v++)
		m = fmaxf(m, fabsf(g[v][i]));
	return m;
}

/* Error of got against the exact mean, in ulps of the element's largest
 * input (a sum with cancellation has no better scale); *rounded counts
 * the elements equal to the exact mean rounded to float. */
static double err_ulps(float g[NSHARDS][NELEM], const float *got, float floor, int *rounded)
{
	double worst = 0.0;

	*rounded = 0;
	for (int i = 0; i < NELEM; i++) {
		long double ref = mean_ref(g, i);
		double ulp = ldexp(1.0, ilogbf(input_max(g, i)) - 23);

		if (input_max(g, i) < floor)
			continue;

		worst = fmax(worst, (double)fabsl((long double)got[i] - ref) / ulp);
		*rounded += got[i] == (float)ref;
	}
	return worst;
}

static void test_exact(void **state)
{
	static float g[NSHARDS][NELEM], base[NELEM], out[NELEM], fl[NELEM], fl1[NELEM];
	int float_differs = 0, rounded, rounded_float, n20;
	double worst, worst_float, worst20, worst20_float;
	float mx = 0.0f;

	(void)state;
	fill(g);
	reduce_exact(g, 1, 0, base);
	for (int w = 1; w <= 8; w++) {
		for (int order = 0; order < 3; order++) {
			reduce_exact(g, w, order, out);
			assert_memory_equal(out, base, sizeof(base));
		}
	}
	/* A float sum depends on the grouping: the test data can tell. */
	reduce_float(g, 1, fl1);
	for (int w = 2; w <= 8; w++) {
		reduce_float(g, w, fl);
		float_differs += memcmp(fl, fl1, sizeof(fl)) != 0;
	}
	assert_true(float_differs > 0);
	for (int v = 0; v < NSHARDS; v++)
		mx = fmaxf(mx, shards_maxabs(g[v], NELEM));
	/* The bound: half the fixed point's step (max x 2^4 x 2^-51 for 12
	 * shards) plus the final rounding to float (half an ulp). */
	for (int i = 0; i < NELEM; i++) {
		long double ref = mean_ref(g, i);
		double err = (double)fabsl((long double)base[i] - ref);
		double ulp = ldexp(1.0, ilogbf((float)ref) - 23);

		assert_true(err <= ((double)mx * 16.0 * 0x1p-51 + 0.5 * ulp) * (1.0 + 1e-9));
	}
	worst20 = err_ulps(g, base, ldexpf(mx, -20), &n20);
	worst20_float = err_ulps(g, fl1, ldexpf(mx, -20), &n20);
	worst = err_ulps(g, base, 0.0f, &rounded);
	worst_float = err_ulps(g, fl1, 0.0f, &rounded_float);
	printf("%d shards, %d elements over 31 binary orders of magnitude: the exact reduction "
	       "is the correctly rounded mean for %d, max error %.3g ulp of the element's "
	       "largest input (%.3g within 2^20 of the tensor's max); a float sum: %d, %.3g "
	       "ulp (%.3g), and its bits change with the spread over ranks in %d of 7 "
	       "spreads\n",
	       NSHARDS, NELEM, rounded, worst, worst20, rounded_float, worst_float, worst20_float,
	       float_differs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_range),  cmocka_unit_test(test_scale),
	    cmocka_unit_test(test_maxabs), cmocka_unit_test(test_quantize_sum),
	    cmocka_unit_test(test_exact),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
