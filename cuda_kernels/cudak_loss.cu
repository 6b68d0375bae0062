/*
 * cudak_loss.cu - softmax cross-entropy: one block per row writes the row's
 * loss and hit to scratch (and its gradient), then one block adds the rows
 * in order, so the sums are the same bits on every run.
 */
#include <math.h>
#include "cudak_internal.h"

__global__ static void xent_row_kernel(const float *logits, const int32_t *__restrict__ labels,
				       int classes, float grad_scale, float *dlogits,
				       double *row_loss, double *row_hit)
{
	__shared__ double red[CUDAK_THREADS];
	__shared__ float vmax[CUDAK_THREADS];
	__shared__ int imax[CUDAK_THREADS];
	const float *z = logits + (size_t)blockIdx.x * classes;
	int t = threadIdx.x;

	/* Row maximum and its first index. */
	float best = -INFINITY;
	int besti = classes;
	for (int j = t; j < classes; j += CUDAK_THREADS)
		if (z[j] > best || besti == classes) {
			best = z[j];
			besti = j;
		}
	vmax[t] = best;
	imax[t] = besti;
	__syncthreads();
	for (int s = CUDAK_THREADS / 2; s > 0; s >>= 1) {
		if (t < s) {
			float o = vmax[t + s];
			int oi = imax[t + s];
			if (oi < classes &&
			    (imax[t] == classes || o > vmax[t] || (o == vmax[t] && oi < imax[t]))) {
				vmax[t] = o;
				imax[t] = oi;
			}
		}
		__syncthreads();
	}
	float mx = vmax[0];
	int arg = imax[0];

	double sum = 0.0;
	for (int j = t; j < classes; j += CUDAK_THREADS)
		sum += exp((double)z[j] - mx);
	sum = cudak_block_sum(sum, red);
	double lse = mx + log(sum);

	int label = labels[blockIdx.x];
	int valid = label >= 0 && label < classes;
	/* Read the label's logit before dlogits (which may alias) is written. */
	float zl = valid ? z[label] : 0.0f;
	__syncthreads();
	if (dlogits) {
		float *dz = dlogits + (size_t)blockIdx.x * classes;
		for (int j = t; j < classes; j += CUDAK_THREADS) {
			double p = exp((double)z[j] - lse);
			dz[j] = valid ? (float)((p - (j == label)) * grad_scale) : 0.0f;
		}
	}
	if (t == 0) {
		row_loss[blockIdx.x] = valid ? lse - zl : 0.0;
		row_hit[blockIdx.x] = valid && arg == label ? 1.0 : 0.0;
	}
}

__global__ static void xent_sum_kernel(const double *row_loss, const double *row_hit, int rows,
				       float *out)
{
	__shared__ double red[CUDAK_THREADS];
	double l = 0.0, h = 0.0;
	for (int r = threadIdx.x; r < rows; r += CUDAK_THREADS) {
		l += row_loss[r];
		h += row_hit[r];
	}
	l = cudak_block_sum(l, red);
	h = cudak_block_sum(h, red);
	if (threadIdx.x == 0) {
		out[0] = (float)l;
		out[1] = (float)h;
	}
}

extern "C" int cudak_xent(cudaStream_t stream, const float *logits, const int32_t *labels, int rows,
			  int classes, float grad_scale, float *dlogits, float *out,
			  double *scratch)
{
	int ret;

	if (rows < 0 || classes <= 0)
		return cudak_fail_msg("cudak_xent", "bad size");
	if (rows > 0) {
		xent_row_kernel<<<rows, CUDAK_THREADS, 0, stream>>>(
		    logits, labels, classes, grad_scale, dlogits, scratch, scratch + rows);
		ret = cudak_check_launch("cudak_xent");
		if (ret < 0)
			return ret;
	}
	xent_sum_kernel<<<1, CUDAK_THREADS, 0, stream>>>(scratch, scratch + rows, rows, out);
	return cudak_check_launch("cudak_xent");
}
