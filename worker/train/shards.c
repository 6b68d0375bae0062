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

float shards_maxabs(const float *x, size_t n)
{
	float m = 0.0f;

	for (size_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);

		if (isnan(a))
			return a;
		if (a > m)
			m = a;
	}
	return m;
}

int shards_scale_exp(float maxabs, int nshards)
{
	int e, bits = 0;

	if (maxabs == 0.0f)
		return 0;
	while ((1 << bits) < nshards)
		bits++;
	(void)frexpf(maxabs, &e); /* maxabs = m * 2^e, 0.5 <= m < 1 */
	return 52 - bits - e;
}

void shards_quantize_add(double *q, const float *x, size_t n, int s)
{
	for (size_t i = 0; i < n; i++)
		q[i] += nearbyint(ldexp((double)x[i], s));
}

void shards_dequantize(float *x, const double *q, size_t n, int s, int nshards)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(ldexp(q[i], -s) / (double)nshards);
}
