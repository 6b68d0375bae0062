/*
 * reduce.h - the CPU backend's element-wise kernels (reduce.c): reductions
 * in a fixed order, so every rank that computes one gets the same bits, run
 * after run; the AVG finish; a cache-bypassing copy. Pure: no state.
 * dtype is DDP_FLOAT32 or DDP_FLOAT64; op SUM or MAX (AVG sums; divide
 * afterwards with cpu_divide).
 */
#ifndef DDP_WORKER_CPU_REDUCE_H
#define DDP_WORKER_CPU_REDUCE_H

#include <stddef.h>

#include "ddp.h"

/* dst[i] = dst[i] op src[i] for i < count; dst and src do not overlap. */
void cpu_reduce_into(void *dst, const void *src, size_t count, enum ddp_dtype dtype,
		     enum ddp_op op);
/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], in that order;
 * dst overlaps none of the sources. */
void cpu_reduce_many(void *dst, const void *const *srcs, size_t nsrcs, size_t count,
		     enum ddp_dtype dtype, enum ddp_op op);
/* buf[i] /= divisor (the AVG finish). */
void cpu_divide(void *buf, size_t count, enum ddp_dtype dtype, int divisor);
/* memcpy for large copies whose destination is not needed in cache soon:
 * non-temporal stores where the CPU has them. The ranges must not overlap. */
void cpu_copy_stream(void *dst, const void *src, size_t bytes);

#endif
