/*
 * shards.c - virtual shards: their spread over ranks and the exact sum.
 */
#include "shards.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

void shards_range(int v, int w, int r, int *first, int *count)
{
	int base = v / w, extra = v % w;

	*count = base + (r < extra ? 1 : 0);
	*first = r * base + (r < extra ? r : extra);
}

/* 1.5 x 2^52: adding and subtracting it rounds a double of magnitude at
 * most 2^51 to an integer (to nearest, ties to even), without a libm call
 * and in a loop the compiler vectorises. */
#define SHARDS_ROUND 0x1.8p52

/* The passes over every gradient element (max |x|, quantize, dequantize)
 * are bound by vector width and memory: on x86-64 they are also built for
 * AVX2 and the loader picks that clone where the CPU has it (an ifunc).
 * Each element's operations are exact or rounded once, the same way at any
 * vector width, so the clone never changes a bit. GCC only: Debian 12's
 * clang (the fuzz build) names the clones so that callers in another file
 * do not link. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(__clang__)
#if __has_attribute(target_clones)
#define SHARDS_SIMD __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef SHARDS_SIMD
#define SHARDS_SIMD
#endif

/* Elements per block of shards_quantize_sum: its partial sums (8 KiB of
 * doubles) stay in the L1 cache while every shard is added to them. */
#define SHARDS_BLOCK 1024

SHARDS_SIMD float shards_maxabs(const float *x, size_t n)
{
	uint32_t m = 0, a;
	float f;

	/* |x| as its bits: for non-negative floats the integer order is the
	 * float order, +inf is 0x7f800000 and every NaN is above it, so the
	 * largest is a NaN whenever there is one. An integer max is exact and
	 * vectorises; a float max that must see NaNs does not. */
	for (size_t i = 0; i < n; i++) {
		memcpy(&a, x + i, sizeof(a));
		a &= 0x7fffffffu;
		m = a > m ? a : m;
	}
	memcpy(&f, &m, sizeof(f));
	return f;
}

int shards_scale_exp(float maxabs, int nshards)
{
	int e, bits = 0;

	if (maxabs == 0.0f)
		return 0;
	while ((1 << bits) < nshards)
		bits++;
	(void)frexpf(maxabs, &e); /* maxabs = m * 2^e, 0.5 <= m < 1 */
	return 51 - bits - e;
}

/* q[i] (op) round(x[i] * p) for i < n: set when add is false. */
SHARDS_SIMD static void shards_quantize_block(double *q, const float *x, size_t n, double p,
					      int add)
{
	if (!add) {
		for (size_t i = 0; i < n; i++)
			q[i] = ((double)x[i] * p + SHARDS_ROUND) - SHARDS_ROUND;
		return;
	}
	for (size_t i = 0; i < n; i++)
		q[i] += ((double)x[i] * p + SHARDS_ROUND) - SHARDS_ROUND;
}

void shards_quantize_sum(double *q, const float *x, size_t stride, int count, size_t n, int s)
{
	double p = ldexp(1.0, s); /* x * p is exact: a float times a power of 2 */

	if (count <= 0) {
		memset(q, 0, n * sizeof(double));
		return;
	}
	/* Block by block, every shard into the block's sums: q is written
	 * once, not read and written once per shard. */
	for (size_t i = 0; i < n; i += SHARDS_BLOCK) {
		size_t len = n - i < SHARDS_BLOCK ? n - i : SHARDS_BLOCK;

		for (int k = 0; k < count; k++)
			shards_quantize_block(q + i, x + (size_t)k * stride + i, len, p, k > 0);
	}
}

SHARDS_SIMD void shards_dequantize(float *x, const double *q, size_t n, int s, int nshards)
{
	double p = ldexp(1.0, -s);

	/* q * 2^-s is exact; dividing by a power of two is too, so then one
	 * multiplication gives the same bits as the division. */
	if ((nshards & (nshards - 1)) == 0) {
		p /= (double)nshards;
		for (size_t i = 0; i < n; i++)
			x[i] = (float)(q[i] * p);
		return;
	}
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(q[i] * p / (double)nshards);
}
