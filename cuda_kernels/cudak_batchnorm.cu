/*
 * cudak_batchnorm.cu - BatchNorm1d over the rows of a (rows x cols)
 * activation, split as worker/train/kernels.h describes so that
 * SyncBatchNorm can all-reduce the per-column sums between the local
 * reduction and the element-wise pass.
 */
#include "cudak_internal.h"

#define GRID_STRIDE(i, n)                                                                          \
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                    \
	     i += (size_t)gridDim.x * blockDim.x)

/* Column sums (out[c]) and sums of a*b or a*a (out[cols + c]) over the rows,
 * in double and a fixed order: one block per 32 columns, 8 row-strided
 * partial sums per column added in order. b == NULL means a*a. */
__global__ static void pair_sums_kernel(const float *__restrict__ a, const float *__restrict__ b,
					int rows, int cols, float *out)
{
	__shared__ double p1[8][33];
	__shared__ double p2[8][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	double s1 = 0.0, s2 = 0.0;
	if (c < cols) {
		for (int r = threadIdx.y; r < rows; r += 8) {
			size_t i = (size_t)r * cols + c;
			double va = a[i];
			s1 += va;
			s2 += va * (b ? (double)b[i] : va);
		}
	}
	p1[threadIdx.y][threadIdx.x] = s1;
	p2[threadIdx.y][threadIdx.x] = s2;
	__syncthreads();
	if (threadIdx.y == 0 && c < cols) {
		double t1 = 0.0, t2 = 0.0;
		for (int j = 0; j < 8; j++) {
			t1 += p1[j][threadIdx.x];
			t2 += p2[j][threadIdx.x];
		}
		out[c] = (float)t1;
		out[cols + c] = (float)t2;
	}
}

static int pair_sums(cudaStream_t stream, const float *a, const float *b, int rows, int cols,
		     float *out, const char *what)
{
	if (rows < 0 || cols < 0)
		return cudak_fail_msg(what, "negative size");
	if (cols == 0)
		return 0;
	pair_sums_kernel<<<(cols + 31) / 32, dim3(32, 8), 0, stream>>>(a, b, rows, cols, out);
	return cudak_check_launch(what);
}

extern "C" int cudak_bn_stats(cudaStream_t stream, const float *x, int rows, int cols, float *stats)
{
	return pair_sums(stream, x, NULL, rows, cols, stats, "cudak_bn_stats");
}

extern "C" int cudak_bn_bwd_stats(cudaStream_t stream, const float *dy, const float *xhat, int rows,
				  int cols, float *dstats)
{
	return pair_sums(stream, dy, xhat, rows, cols, dstats, "cudak_bn_bwd_stats");
}

/* Per column: invstd and the running statistics (as the CPU twin). */
__global__ static void bn_col_kernel(const float *stats, int cols, double count, float eps,
				     float momentum, float *rmean, float *rvar, float *invstd)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= cols)
		return;
	double mean = stats[c] / count;
	double var = stats[cols + c] / count - mean * mean;
	if (var < 0.0)
		var = 0.0;
	invstd[c] = (float)(1.0 / sqrt(var + eps));
	if (rmean) {
		rmean[c] = (1.0f - momentum) * rmean[c] + momentum * (float)mean;
		rvar[c] =
		    (1.0f - momentum) * rvar[c] + momentum * (float)(var * count / (count - 1.0));
	}
}

__global__ static void bn_apply_kernel(const float *x, const float *__restrict__ stats,
				       double count, const float *__restrict__ invstd,
				       const float *__restrict__ gamma,
				       const float *__restrict__ beta, size_t n, int cols,
				       float *xhat, float *y)
{
	GRID_STRIDE(i, n)
	{
		int c = (int)(i % cols);
		float mean = (float)(stats[c] / count);
		float h = (x[i] - mean) * invstd[c];
		xhat[i] = h;
		y[i] = gamma[c] * h + beta[c];
	}
}

extern "C" int cudak_bn_fwd(cudaStream_t stream, const float *x, const float *stats, int rows,
			    int cols, double count, const float *gamma, const float *beta,
			    float eps, float momentum, float *running_mean, float *running_var,
			    float *saved_invstd, float *xhat, float *y)
{
	size_t n = (size_t)rows * cols;
	int ret;

	if (rows < 0 || cols < 0 || !(count > 0.0) || (running_var && !(count > 1.0)))
		return cudak_fail_msg("cudak_bn_fwd", "bad size or count");
	if (cols == 0)
		return 0;
	bn_col_kernel<<<(cols + CUDAK_THREADS - 1) / CUDAK_THREADS, CUDAK_THREADS, 0, stream>>>(
	    stats, cols, count, eps, momentum, running_mean, running_var, saved_invstd);
	ret = cudak_check_launch("cudak_bn_fwd");
	if (ret < 0 || n == 0)
		return ret;
	bn_apply_kernel<<<cudak_grid(n, 65535), CUDAK_THREADS, 0, stream>>>(
	    x, stats, count, saved_invstd, gamma, beta, n, cols, xhat, y);
	return cudak_check_launch("cudak_bn_fwd");
}

__global__ static void bn_infer_kernel(const float *x, const float *__restrict__ gamma,
				       const float *__restrict__ beta,
				       const float *__restrict__ rmean,
				       const float *__restrict__ rvar, float eps, size_t n,
				       int cols, float *y)
{
	GRID_STRIDE(i, n)
	{
		int c = (int)(i % cols);
		float inv = (float)(1.0 / sqrt((double)rvar[c] + eps));
		y[i] = gamma[c] * (x[i] - rmean[c]) * inv + beta[c];
	}
}

extern "C" int cudak_bn_infer(cudaStream_t stream, const float *x, int rows, int cols,
			      const float *gamma, const float *beta, const float *running_mean,
			      const float *running_var, float eps, float *y)
{
	size_t n = (size_t)rows * cols;
	if (rows < 0 || cols < 0)
		return cudak_fail_msg("cudak_bn_infer", "negative size");
	if (n == 0)
		return 0;
	bn_infer_kernel<<<cudak_grid(n, 65535), CUDAK_THREADS, 0, stream>>>(
	    x, gamma, beta, running_mean, running_var, eps, n, cols, y);
	return cudak_check_launch("cudak_bn_infer");
}

__global__ static void bn_bwd_dx_kernel(const float *dy, const float *__restrict__ xhat,
					const float *__restrict__ invstd,
					const float *__restrict__ gamma,
					const float *__restrict__ dstats, double count, size_t n,
					int cols, float *dx)
{
	GRID_STRIDE(i, n)
	{
		int c = (int)(i % cols);
		float mdy = (float)(dstats[c] / count);
		float mdyx = (float)(dstats[cols + c] / count);
		float k = gamma[c] * invstd[c];
		dx[i] = k * (dy[i] - mdy - xhat[i] * mdyx);
	}
}

extern "C" int cudak_bn_bwd_dx(cudaStream_t stream, const float *dy, const float *xhat,
			       const float *saved_invstd, const float *gamma, const float *dstats,
			       int rows, int cols, double count, float *dx)
{
	size_t n = (size_t)rows * cols;
	if (rows < 0 || cols < 0 || !(count > 0.0))
		return cudak_fail_msg("cudak_bn_bwd_dx", "bad size or count");
	if (n == 0)
		return 0;
	bn_bwd_dx_kernel<<<cudak_grid(n, 65535), CUDAK_THREADS, 0, stream>>>(
	    dy, xhat, saved_invstd, gamma, dstats, count, n, cols, dx);
	return cudak_check_launch("cudak_bn_bwd_dx");
}
