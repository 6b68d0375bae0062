/*
 * cudak_elementwise.cu - bias + ReLU forward and backward, the bias gradient
 * (column sums), scaling, and the reducer's bucket packing.
 */
#include "cudak_internal.h"

#define GRID_STRIDE(i, n)                                                                          \
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                    \
	     i += (size_t)gridDim.x * blockDim.x)

__global__ static void bias_act_kernel(float *y, const float *__restrict__ bias, size_t n, int cols,
				       int relu)
{
	GRID_STRIDE(i, n)
	{
		float v = bias ? y[i] + bias[i % cols] : y[i];
		y[i] = relu && !(v > 0.0f) ? 0.0f : v;
	}
}

extern "C" int cudak_bias_act_fwd(cudaStream_t stream, float *y, const float *bias, int rows,
				  int cols, int relu)
{
	size_t n = (size_t)rows * cols;
	if (rows < 0 || cols < 0)
		return cudak_fail_msg("cudak_bias_act_fwd", "negative size");
	if (n == 0 || (!bias && !relu))
		return 0;
	bias_act_kernel<<<cudak_grid(n, 65535), CUDAK_THREADS, 0, stream>>>(y, bias, n, cols, relu);
	return cudak_check_launch("cudak_bias_act_fwd");
}

__global__ static void relu_bwd_kernel(float *dy, const float *__restrict__ y, size_t n)
{
	GRID_STRIDE(i, n)
	{
		if (!(y[i] > 0.0f))
			dy[i] = 0.0f;
	}
}

extern "C" int cudak_relu_bwd(cudaStream_t stream, float *dy, const float *y, size_t n)
{
	if (n == 0)
		return 0;
	relu_bwd_kernel<<<cudak_grid(n, 65535), CUDAK_THREADS, 0, stream>>>(dy, y, n);
	return cudak_check_launch("cudak_relu_bwd");
}

/* One block per 32 columns: a 32 x 8 tile of threads walks down the rows,
 * each thread summing a fixed subset in double, then the 8 partial sums of a
 * column are added in a fixed order (deterministic). */
__global__ static void col_sum_kernel(const float *__restrict__ dy, float *dbias, int rows,
				      int cols, int accumulate)
{
	__shared__ double part[8][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	double s = 0.0;
	if (c < cols)
		for (int r = threadIdx.y; r < rows; r += 8)
			s += dy[(size_t)r * cols + c];
	part[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && c < cols) {
		double t = accumulate ? (double)dbias[c] : 0.0;
		double u = 0.0;
		for (int j = 0; j < 8; j++)
			u += part[j][threadIdx.x];
		dbias[c] = (float)(t + u);
	}
}

extern "C" int cudak_col_sum(cudaStream_t stream, const float *dy, int rows, int cols, float *dbias,
			     int accumulate)
{
	if (rows < 0 || cols < 0)
		return cudak_fail_msg("cudak_col_sum", "negative size");
	if (cols == 0)
		return 0;
	col_sum_kernel<<<(cols + 31) / 32, dim3(32, 8), 0, stream>>>(dy, dbias, rows, cols,
								     accumulate);
	return cudak_check_launch("cudak_col_sum");
}

__global__ static void scale_kernel(const float *src, float *dst, size_t n, float alpha)
{
	GRID_STRIDE(i, n)
	{
		dst[i] = alpha * src[i];
	}
}

extern "C" int cudak_scale(cudaStream_t stream, const float *src, float *dst, size_t n, float alpha)
{
	if (n == 0)
		return 0;
	scale_kernel<<<cudak_grid(n, 65535), CUDAK_THREADS, 0, stream>>>(src, dst, n, alpha);
	return cudak_check_launch("cudak_scale");
}

__global__ static void scale_matrix_kernel(float *c, int m, int n, int ldc, float beta)
{
	size_t total = (size_t)m * n;
	GRID_STRIDE(i, total)
	{
		float *p = c + (i / n) * (size_t)ldc + i % n;
		*p = beta == 0.0f ? 0.0f : beta * *p;
	}
}

extern "C" int cudak_scale_matrix(cudaStream_t stream, float *c, int m, int n, int ldc, float beta)
{
	size_t total = (size_t)m * n;
	if (m <= 0 || n <= 0)
		return 0;
	scale_matrix_kernel<<<cudak_grid(total, 65535), CUDAK_THREADS, 0, stream>>>(c, m, n, ldc,
										    beta);
	return cudak_check_launch("cudak_scale_matrix");
}

extern "C" int cudak_bucket_pack(cudaStream_t stream, float *flat, const float *const *srcs,
				 const size_t *lens, int count)
{
	size_t off = 0;
	for (int i = 0; i < count; i++) {
		if (lens[i] == 0)
			continue;
		cudaError_t err = cudaMemcpyAsync(flat + off, srcs[i], lens[i] * sizeof(float),
						  cudaMemcpyDeviceToDevice, stream);
		if (err != cudaSuccess)
			return cudak_fail("cudak_bucket_pack", err);
		off += lens[i];
	}
	return 0;
}

extern "C" int cudak_bucket_unpack(cudaStream_t stream, const float *flat, float *const *dsts,
				   const size_t *lens, int count, float scale)
{
	size_t off = 0;
	for (int i = 0; i < count; i++) {
		int ret = 0;
		if (lens[i] == 0)
			continue;
		if (scale == 1.0f) {
			cudaError_t err =
			    cudaMemcpyAsync(dsts[i], flat + off, lens[i] * sizeof(float),
					    cudaMemcpyDeviceToDevice, stream);
			if (err != cudaSuccess)
				ret = cudak_fail("cudak_bucket_unpack", err);
		} else {
			ret = cudak_scale(stream, flat + off, dsts[i], lens[i], scale);
		}
		if (ret < 0)
			return ret;
		off += lens[i];
	}
	return 0;
}
