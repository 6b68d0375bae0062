/*
 * cudak_optim.cu - the fused SGD-momentum update and the squared norm used
 * for clipping by global norm.
 */
#include "cudak_internal.h"

__global__ static void sgd_kernel(float *param, const float *__restrict__ grad, float *mom,
				  size_t n, float lr, float momentum, float wd, float grad_scale)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float g = grad_scale * grad[i] + wd * param[i];
		if (momentum != 0.0f) {
			float m = momentum * mom[i] + g;
			mom[i] = m;
			g = m;
		}
		param[i] -= lr * g;
	}
}

extern "C" int cudak_sgd_update(cudaStream_t stream, float *param, const float *grad, float *mom,
				size_t n, float lr, float momentum, float weight_decay,
				float grad_scale)
{
	if (n == 0)
		return 0;
	if (momentum != 0.0f && !mom)
		return cudak_fail_msg("cudak_sgd_update", "momentum needs a buffer");
	sgd_kernel<<<cudak_grid(n, 65535), CUDAK_THREADS, 0, stream>>>(
	    param, grad, mom, n, lr, momentum, weight_decay, grad_scale);
	return cudak_check_launch("cudak_sgd_update");
}

/* Pass 1: each of a fixed number of blocks sums a fixed grid-strided subset. */
__global__ static void sqnorm_partial_kernel(const float *__restrict__ x, size_t n, double *part)
{
	__shared__ double red[CUDAK_THREADS];
	double s = 0.0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		double v = x[i];
		s += v * v;
	}
	s = cudak_block_sum(s, red);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

/* Pass 2: one block adds the partials in order. */
__global__ static void sqnorm_final_kernel(const double *part, unsigned nparts, float *out,
					   int accumulate)
{
	__shared__ double red[CUDAK_THREADS];
	double s = threadIdx.x < nparts ? part[threadIdx.x] : 0.0;
	s = cudak_block_sum(s, red);
	if (threadIdx.x == 0)
		*out = (float)((accumulate ? (double)*out : 0.0) + s);
}

extern "C" int cudak_sqnorm(cudaStream_t stream, const float *x, size_t n, float *out,
			    int accumulate, double *scratch)
{
	static_assert(CUDAK_SQNORM_SCRATCH <= CUDAK_THREADS, "one block finishes the sum");
	/* The grid depends only on n, so the summation order does too. */
	unsigned blocks = n ? cudak_grid(n, CUDAK_SQNORM_SCRATCH) : 0;
	int ret;

	if (blocks) {
		sqnorm_partial_kernel<<<blocks, CUDAK_THREADS, 0, stream>>>(x, n, scratch);
		ret = cudak_check_launch("cudak_sqnorm");
		if (ret < 0)
			return ret;
	}
	sqnorm_final_kernel<<<1, CUDAK_THREADS, 0, stream>>>(scratch, blocks, out, accumulate);
	return cudak_check_launch("cudak_sqnorm");
}
