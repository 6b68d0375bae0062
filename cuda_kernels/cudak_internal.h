/*
 * cudak_internal.h - helpers shared by the .cu files of cuda_kernels/ (C++
 * only, not installed).
 */
#ifndef DDP_CUDA_KERNELS_CUDAK_INTERNAL_H
#define DDP_CUDA_KERNELS_CUDAK_INTERNAL_H

#include <errno.h>
#include <cuda_runtime.h>
#include "cudak.h"

/* Records "what: cuda error string" as the thread's last error; returns -EIO. */
int cudak_fail(const char *what, cudaError_t err);
/* Same with a free-form reason. */
int cudak_fail_msg(const char *what, const char *reason);

/* Checks the launch that just happened on this thread. */
static inline int cudak_check_launch(const char *what)
{
	cudaError_t err = cudaGetLastError();
	return err == cudaSuccess ? 0 : cudak_fail(what, err);
}

/* Threads per block used by every kernel of this folder. */
#define CUDAK_THREADS 256

/* A grid of at most `cap` blocks covering n items with CUDAK_THREADS each
 * (grid-stride loops do the rest). */
static inline unsigned cudak_grid(size_t n, unsigned cap)
{
	size_t blocks = (n + CUDAK_THREADS - 1) / CUDAK_THREADS;
	if (blocks < 1)
		blocks = 1;
	return blocks > cap ? cap : (unsigned)blocks;
}

/* Sum over a block of CUDAK_THREADS threads in a fixed order; every thread
 * gets the result. `shared` holds CUDAK_THREADS doubles. */
__device__ static inline double cudak_block_sum(double v, double *shared)
{
	shared[threadIdx.x] = v;
	__syncthreads();
	for (unsigned s = CUDAK_THREADS / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			shared[threadIdx.x] += shared[threadIdx.x + s];
		__syncthreads();
	}
	double r = shared[0];
	__syncthreads();
	return r;
}

#endif
