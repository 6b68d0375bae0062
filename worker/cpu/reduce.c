/*
 * reduce.c - element-wise reduction kernels of the CPU backend. Plain loops
 * the compiler vectorises (O3 here: these loops are the all-reduce's
 * arithmetic). The order of operations is fixed by the caller, so results
 * are reproducible bit for bit.
 */
#pragma GCC optimize("O3")

#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "reduce.h"

#define REDUCE_LOOP(T, OPEXPR)                                                                     \
	do {                                                                                       \
		T *restrict d = dst;                                                               \
		const T *restrict s = src;                                                         \
		for (size_t i = 0; i < count; i++) {                                               \
			T a = d[i], b = s[i];                                                      \
			d[i] = OPEXPR;                                                             \
		}                                                                                  \
	} while (0)

void cpu_reduce_into(void *dst, const void *src, size_t count, enum ddp_dtype dtype, enum ddp_op op)
{
	if (dtype == DDP_FLOAT32) {
		if (op == DDP_MAX)
			REDUCE_LOOP(float, a > b ? a : b);
		else
			REDUCE_LOOP(float, a + b);
	} else {
		if (op == DDP_MAX)
			REDUCE_LOOP(double, a > b ? a : b);
		else
			REDUCE_LOOP(double, a + b);
	}
}

#define REDUCE2_LOOP(T, OPEXPR)                                                                    \
	do {                                                                                       \
		T *restrict d = dst;                                                               \
		const T *restrict x = s0;                                                          \
		const T *restrict y = s1;                                                          \
		for (size_t i = 0; i < count; i++) {                                               \
			T a = x[i], b = y[i];                                                      \
			d[i] = OPEXPR;                                                             \
		}                                                                                  \
	} while (0)

static void reduce_two(void *dst, const void *s0, const void *s1, size_t count,
		       enum ddp_dtype dtype, enum ddp_op op)
{
	if (dtype == DDP_FLOAT32) {
		if (op == DDP_MAX)
			REDUCE2_LOOP(float, a > b ? a : b);
		else
			REDUCE2_LOOP(float, a + b);
	} else {
		if (op == DDP_MAX)
			REDUCE2_LOOP(double, a > b ? a : b);
		else
			REDUCE2_LOOP(double, a + b);
	}
}

void cpu_reduce_many(void *dst, const void *const *srcs, size_t nsrcs, size_t count,
		     enum ddp_dtype dtype, enum ddp_op op)
{
	if (nsrcs == 0 || count == 0)
		return;
	if (nsrcs == 1) {
		memmove(dst, srcs[0], count * ddp_dtype_size(dtype));
		return;
	}
	reduce_two(dst, srcs[0], srcs[1], count, dtype, op);
	for (size_t k = 2; k < nsrcs; k++)
		cpu_reduce_into(dst, srcs[k], count, dtype, op);
}

void cpu_divide(void *buf, size_t count, enum ddp_dtype dtype, int divisor)
{
	if (dtype == DDP_FLOAT32) {
		float *b = buf, dv = (float)divisor;

		for (size_t i = 0; i < count; i++)
			b[i] /= dv;
	} else {
		double *b = buf, dv = (double)divisor;

		for (size_t i = 0; i < count; i++)
			b[i] /= dv;
	}
}

void cpu_copy_stream(void *dst, const void *src, size_t bytes)
{
#ifdef __SSE2__
	char *d = dst;
	const char *s = src;
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (bytes < 256) {
		memcpy(dst, src, bytes);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	bytes -= head;
	/* Non-temporal stores: the destination is not read first (no
	 * read-for-ownership), which saves a third of the memory traffic of a
	 * large copy-out. */
	for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, bytes);
	_mm_sfence();
#else
	memcpy(dst, src, bytes);
#endif
}
