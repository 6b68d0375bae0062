/*
 * shards.c - virtual shards: their spread over ranks and the exact sum.
 */
#include "shards.h"

#include <math.h>

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

float shards_maxabs(const float *x, size_t n)
{
	float m = 0.0f;
	int nan = 0;

	for (size_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);

		nan |= a != a;
		m = a > m ? a : m;
	}
	return nan ? NAN : m;
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

void shards_quantize_add(double *q, const float *x, size_t n, int s)
{
	double p = ldexp(1.0, s); /* x * p is exact: a float times a power of 2 */

	for (size_t i = 0; i < n; i++)
		q[i] += ((double)x[i] * p + SHARDS_ROUND) - SHARDS_ROUND;
}

void shards_dequantize(float *x, const double *q, size_t n, int s, int nshards)
{
	double p = ldexp(1.0, -s);

	for (size_t i = 0; i < n; i++)
		x[i] = (float)(q[i] * p / (double)nshards);
}
