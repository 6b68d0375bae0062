/*
 * shards.h - the arithmetic of the fixed global batch (--global_batch_size G
 * --virtual_shards V): which shards a rank computes, and the exact sum of
 * the shards' gradients.
 *
 * The exact reduction. Each shard's float gradient of tensor t is scaled by
 * 2^s_t and rounded to an integer; the integers of every shard are summed
 * (locally, then across ranks) and the sum is scaled back once and divided
 * by V. s_t is the same on every rank: it comes from the largest |gradient|
 * of the tensor over all V shards (agreed by an all-reduce), chosen so that
 * V integers of at most that size sum to at most 2^51. The integers are
 * carried in doubles: every partial sum is an integer of at most 2^51,
 * which a double holds exactly, so any grouping and any order of the
 * additions (any spread of the shards over ranks, any all-reduce algorithm)
 * gives the same bits. Error against the exact mean: at most 2^-s_t / 2 per
 * element, i.e. max |grad| x 2^ceil(log2 V) x 2^-51, before the one final
 * rounding to float.
 * Pure functions on host memory; no I/O.
 */
#ifndef DDP_WORKER_TRAIN_SHARDS_H
#define DDP_WORKER_TRAIN_SHARDS_H

#include <stddef.h>

/* The contiguous run of whole shards that rank r of w computes out of v:
 * *first and *count (0 when v < w and r >= v). The v shards are spread as
 * evenly as possible, the first v % w ranks taking one more. */
void shards_range(int v, int w, int r, int *first, int *count);

/* Largest |x[i]| of n floats (NaN if any x[i] is NaN, whatever its sign;
 * 0 for n == 0). */
float shards_maxabs(const float *x, size_t n);

/* The exponent s such that nshards integers round(x * 2^s), |x| <= maxabs,
 * sum to at most 2^51 in magnitude: s = 51 - ceil(log2(nshards)) - e,
 * where maxabs < 2^e. 0 when maxabs is 0. maxabs must be finite. */
int shards_scale_exp(float maxabs, int nshards);

/* q[i] = the sum over k < count of round-half-even(x[k * stride + i] * 2^s)
 * for i < n: the integers of count shards laid out stride floats apart.
 * With s from shards_scale_exp over every shard, each partial sum is an
 * integer of at most 2^51, exact in a double, so the result does not depend
 * on how the shards are grouped. count 0 sets q to zeros. */
void shards_quantize_sum(double *q, const float *x, size_t stride, int count, size_t n, int s);

/* x[i] = (float)(q[i] * 2^-s / nshards) for i < n. */
void shards_dequantize(float *x, const double *q, size_t n, int s, int nshards);

#endif
