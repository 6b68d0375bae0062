/*
 * kernels_cpu.c - kernel_ops_cpu: the CPU twin of every trainer kernel.
 * Matrix products go to OpenBLAS; the rest is plain C. Reductions accumulate
 * in double so results do not depend on the batch size's rounding drift.
 */
#include "kernels.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kernel_ctx {
	int device;
	/* Per-column scratch of the reductions and BatchNorm, grown on demand
	 * and kept, so a training step does not allocate. */
	double *scratch;
	size_t scratch_cap; /* in doubles */
};

/* At least n doubles of scratch (also used as 2n floats), or NULL. */
static double *cpu_scratch(struct kernel_ctx *ctx, size_t n)
{
	if (n == 0)
		n = 1;
	if (n > ctx->scratch_cap) {
		double *p = realloc(ctx->scratch, n * sizeof(double));

		if (!p)
			return NULL;
		ctx->scratch = p;
		ctx->scratch_cap = n;
	}
	return ctx->scratch;
}

static int cpu_ctx_new(int device, struct kernel_ctx **out)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	(*out)->device = device;
	return 0;
}

static void cpu_ctx_free(struct kernel_ctx *ctx)
{
	if (ctx)
		free(ctx->scratch);
	free(ctx);
}

static int cpu_sync(struct kernel_ctx *ctx)
{
	return 0;
}

/* Everything runs on the calling thread: no stream. */
static void *cpu_stream(struct kernel_ctx *ctx)
{
	return NULL;
}

static int cpu_alloc(struct kernel_ctx *ctx, size_t bytes, void **out)
{
	size_t rounded = (bytes + 63) / 64 * 64;

	if (rounded == 0)
		rounded = 64;
	*out = aligned_alloc(64, rounded);
	if (!*out)
		return -ENOMEM;
	memset(*out, 0, rounded);
	return 0;
}

static void cpu_free(struct kernel_ctx *ctx, void *ptr)
{
	free(ptr);
}

static int cpu_copy(struct kernel_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	if (bytes && (!dst || !src))
		return -EINVAL;
	if (bytes)
		memcpy(dst, src, bytes);
	return 0;
}

static int cpu_zero(struct kernel_ctx *ctx, void *ptr, size_t bytes)
{
	if (bytes && !ptr)
		return -EINVAL;
	if (bytes)
		memset(ptr, 0, bytes);
	return 0;
}

static int cpu_gemm(struct kernel_ctx *ctx, bool trans_a, bool trans_b, int m, int n, int k,
		    float alpha, const float *a, int lda, const float *b, int ldb, float beta,
		    float *c, int ldc)
{
	if (m < 0 || n < 0 || k < 0)
		return -EINVAL;
	if (m == 0 || n == 0)
		return 0;
	if (k == 0) {
		/* BLAS would scale C by beta; beta == 0 must not read C. */
		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++)
				c[(size_t)i * ldc + j] =
				    beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
		return 0;
	}
	cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
		    trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
		    ldc);
	return 0;
}

static int cpu_scale(struct kernel_ctx *ctx, float *restrict x, size_t n, float alpha)
{
	for (size_t i = 0; i < n; i++)
		x[i] *= alpha;
	return 0;
}

static int cpu_sqnorm(struct kernel_ctx *ctx, const float *x, size_t n, float *out, bool accumulate)
{
	/* Eight fixed lanes: vectorisable, and the summation order (hence
	 * the result) depends only on n. */
	double lane[8] = {0}, s = accumulate ? *out : 0.0;
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			lane[k] += (double)x[i + k] * x[i + k];
	for (; i < n; i++)
		lane[0] += (double)x[i] * x[i];
	for (int k = 0; k < 8; k++)
		s += lane[k];
	*out = (float)s;
	return 0;
}

static int cpu_bias_act_fwd(struct kernel_ctx *ctx, float *y, const float *bias, int rows, int cols,
			    bool relu)
{
	if (rows < 0 || cols < 0)
		return -EINVAL;
	/* Separate loops per case keep each one branch-free (vectorised). */
	for (int r = 0; r < rows; r++) {
		float *restrict row = y + (size_t)r * cols;

		if (bias)
			for (int c = 0; c < cols; c++)
				row[c] += bias[c];
		if (relu)
			for (int c = 0; c < cols; c++)
				row[c] = row[c] > 0.0f ? row[c] : 0.0f;
	}
	return 0;
}

static int cpu_relu_bwd(struct kernel_ctx *ctx, float *restrict dy, const float *restrict y,
			size_t n)
{
	for (size_t i = 0; i < n; i++)
		dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
	return 0;
}

/* Column sums of a rows x cols matrix, in double, into acc[cols]. */
static void col_sums_double(const float *x, int rows, int cols, double *acc)
{
	for (int c = 0; c < cols; c++)
		acc[c] = 0.0;
	for (int r = 0; r < rows; r++) {
		const float *row = x + (size_t)r * cols;

		for (int c = 0; c < cols; c++)
			acc[c] += row[c];
	}
}

static int cpu_col_sum(struct kernel_ctx *ctx, const float *dy, int rows, int cols, float *dbias,
		       bool accumulate)
{
	double *acc;

	if (rows < 0 || cols < 0)
		return -EINVAL;
	acc = cpu_scratch(ctx, (size_t)cols);
	if (!acc)
		return -ENOMEM;
	col_sums_double(dy, rows, cols, acc);
	for (int c = 0; c < cols; c++)
		dbias[c] = (float)(accumulate ? dbias[c] + acc[c] : acc[c]);
	return 0;
}

/* out[c] = sum_r a[r][c] * b[r][c] (b NULL: a^2), out[cols + c] likewise
 * for the plain sum of a; both in double. */
static int pair_sums(struct kernel_ctx *ctx, const float *a, const float *b, int rows, int cols,
		     float *sum, float *prod_sum)
{
	double *acc = cpu_scratch(ctx, 2 * (size_t)cols);

	if (!acc)
		return -ENOMEM;
	memset(acc, 0, 2 * (size_t)cols * sizeof(*acc));
	for (int r = 0; r < rows; r++) {
		const float *ra = a + (size_t)r * cols;
		const float *rb = b ? b + (size_t)r * cols : ra;

		for (int c = 0; c < cols; c++) {
			acc[c] += ra[c];
			acc[cols + c] += (double)ra[c] * rb[c];
		}
	}
	for (int c = 0; c < cols; c++) {
		sum[c] = (float)acc[c];
		prod_sum[c] = (float)acc[cols + c];
	}
	return 0;
}

static int cpu_bn_stats(struct kernel_ctx *ctx, const float *x, int rows, int cols, float *stats)
{
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return pair_sums(ctx, x, NULL, rows, cols, stats, stats + cols);
}

/* Per-column scale and shift in two scratch arrays (row-wise loops below
 * then stream through memory). */
static int bn_scratch(struct kernel_ctx *ctx, int cols, float **a, float **b)
{
	*a = (float *)cpu_scratch(ctx, (size_t)cols);
	*b = *a ? *a + cols : NULL;
	return *a ? 0 : -ENOMEM;
}

/* y = x * k[c] + m[c] row by row; x and y may alias. */
static void bn_affine_rows(const float *x, int rows, int cols, const float *k, const float *m,
			   float *y)
{
	for (int r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * cols;
		float *yr = y + (size_t)r * cols;

		for (int c = 0; c < cols; c++)
			yr[c] = xr[c] * k[c] + m[c];
	}
}

static int cpu_bn_fwd(struct kernel_ctx *ctx, const float *x, const float *stats, int rows,
		      int cols, double count, const float *gamma, const float *beta, float eps,
		      float momentum, float *running_mean, float *running_var, float *saved_invstd,
		      float *xhat, float *y)
{
	float *mean, *unused;

	if (rows < 0 || cols < 0 || !(count > 0.0) || (running_var && !(count > 1.0)))
		return -EINVAL;
	if (bn_scratch(ctx, cols, &mean, &unused) < 0)
		return -ENOMEM;
	for (int c = 0; c < cols; c++) {
		double m = stats[c] / count;
		double var = stats[cols + c] / count - m * m;

		if (var < 0.0)
			var = 0.0;
		saved_invstd[c] = (float)(1.0 / sqrt(var + eps));
		mean[c] = (float)m;
		if (running_mean) {
			running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * (float)m;
			running_var[c] = (1.0f - momentum) * running_var[c] +
					 momentum * (float)(var * count / (count - 1.0));
		}
	}
	/* xhat = (x - mean) * invstd, then y = gamma * xhat + beta. */
	for (int r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * cols;
		float *hr = xhat + (size_t)r * cols;

		for (int c = 0; c < cols; c++)
			hr[c] = (xr[c] - mean[c]) * saved_invstd[c];
	}
	bn_affine_rows(xhat, rows, cols, gamma, beta, y);
	return 0;
}

static int cpu_bn_infer(struct kernel_ctx *ctx, const float *x, int rows, int cols,
			const float *gamma, const float *beta, const float *running_mean,
			const float *running_var, float eps, float *y)
{
	float *k, *m;

	if (rows < 0 || cols < 0)
		return -EINVAL;
	if (bn_scratch(ctx, cols, &k, &m) < 0)
		return -ENOMEM;
	for (int c = 0; c < cols; c++) {
		k[c] = gamma[c] * (float)(1.0 / sqrt((double)running_var[c] + eps));
		m[c] = beta[c] - running_mean[c] * k[c];
	}
	bn_affine_rows(x, rows, cols, k, m, y);
	return 0;
}

static int cpu_bn_bwd_stats(struct kernel_ctx *ctx, const float *dy, const float *xhat, int rows,
			    int cols, float *dstats)
{
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return pair_sums(ctx, dy, xhat, rows, cols, dstats, dstats + cols);
}

static int cpu_bn_bwd_dx(struct kernel_ctx *ctx, const float *dy, const float *xhat,
			 const float *saved_invstd, const float *gamma, const float *dstats,
			 int rows, int cols, double count, float *dx)
{
	float *k, *mdy, *mdyx;

	if (rows < 0 || cols < 0 || !(count > 0.0))
		return -EINVAL;
	k = (float *)cpu_scratch(ctx, 2 * (size_t)cols); /* 3 cols floats fit in 2 cols doubles */
	if (!k)
		return -ENOMEM;
	mdy = k + cols;
	mdyx = k + 2 * (size_t)cols;
	for (int c = 0; c < cols; c++) {
		k[c] = gamma[c] * saved_invstd[c];
		mdy[c] = (float)(dstats[c] / count);
		mdyx[c] = (float)(dstats[cols + c] / count);
	}
	for (int r = 0; r < rows; r++) {
		const float *dyr = dy + (size_t)r * cols, *hr = xhat + (size_t)r * cols;
		float *dxr = dx + (size_t)r * cols;

		for (int c = 0; c < cols; c++)
			dxr[c] = k[c] * (dyr[c] - mdy[c] - hr[c] * mdyx[c]);
	}
	return 0;
}

/* One row of softmax cross-entropy; returns the loss, sets *hit. */
static double xent_row(const float *z, int32_t label, int classes, float grad_scale, float *dz,
		       int *hit)
{
	float mx = z[0];
	int arg = 0;
	double sum = 0.0, lse;

	for (int j = 1; j < classes; j++)
		if (z[j] > mx) {
			mx = z[j];
			arg = j;
		}
	for (int j = 0; j < classes; j++)
		sum += exp((double)z[j] - mx);
	lse = mx + log(sum);
	*hit = arg == label;
	if (dz)
		for (int j = 0; j < classes; j++) {
			double p = exp((double)z[j] - lse);

			dz[j] = (float)((p - (j == label)) * grad_scale);
		}
	return lse - z[label];
}

static int cpu_xent(struct kernel_ctx *ctx, const float *logits, const int32_t *labels, int rows,
		    int classes, float grad_scale, float *dlogits, float *out)
{
	double loss = 0.0;
	int correct = 0;

	if (rows < 0 || classes <= 0)
		return -EINVAL;
	for (int r = 0; r < rows; r++)
		if (labels[r] < 0 || labels[r] >= classes)
			return -EINVAL;
	for (int r = 0; r < rows; r++) {
		int hit;

		loss += xent_row(logits + (size_t)r * classes, labels[r], classes, grad_scale,
				 dlogits ? dlogits + (size_t)r * classes : NULL, &hit);
		correct += hit;
	}
	out[0] = (float)loss;
	out[1] = (float)correct;
	return 0;
}

static int cpu_sgd_update(struct kernel_ctx *ctx, float *restrict param, const float *restrict grad,
			  float *restrict mom, size_t n, float lr, float momentum,
			  float weight_decay, float grad_scale)
{
	if (momentum == 0.0f) {
		for (size_t i = 0; i < n; i++)
			param[i] -= lr * (grad_scale * grad[i] + weight_decay * param[i]);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		float g = grad_scale * grad[i] + weight_decay * param[i];

		mom[i] = momentum * mom[i] + g;
		param[i] -= lr * mom[i];
	}
	return 0;
}

static int cpu_bucket_copy_in(struct kernel_ctx *ctx, float *flat, const struct kernel_bucket *b)
{
	size_t off = 0;

	if (b->n < 0)
		return -EINVAL;
	for (int i = 0; i < b->n; i++) {
		memcpy(flat + off, b->tensors[i], b->lens[i] * sizeof(float));
		off += b->lens[i];
	}
	return 0;
}

static int cpu_bucket_copy_out(struct kernel_ctx *ctx, const float *flat,
			       const struct kernel_bucket *b, float scale)
{
	size_t off = 0;

	if (b->n < 0)
		return -EINVAL;
	for (int i = 0; i < b->n; i++) {
		float *t = b->tensors[i];

		if (scale == 1.0f)
			memcpy(t, flat + off, b->lens[i] * sizeof(float));
		else
			for (size_t j = 0; j < b->lens[i]; j++)
				t[j] = flat[off + j] * scale;
		off += b->lens[i];
	}
	return 0;
}

void kernel_cpu_set_threads(int n)
{
	if (n > 0)
		openblas_set_num_threads(n);
}

const struct kernel_ops kernel_ops_cpu = {
    .name = "cpu",
    .ctx_new = cpu_ctx_new,
    .ctx_free = cpu_ctx_free,
    .sync = cpu_sync,
    .stream = cpu_stream,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .zero = cpu_zero,
    .gemm = cpu_gemm,
    .scale = cpu_scale,
    .sqnorm = cpu_sqnorm,
    .bias_act_fwd = cpu_bias_act_fwd,
    .relu_bwd = cpu_relu_bwd,
    .col_sum = cpu_col_sum,
    .bn_stats = cpu_bn_stats,
    .bn_fwd = cpu_bn_fwd,
    .bn_infer = cpu_bn_infer,
    .bn_bwd_stats = cpu_bn_bwd_stats,
    .bn_bwd_dx = cpu_bn_bwd_dx,
    .xent = cpu_xent,
    .sgd_update = cpu_sgd_update,
    .bucket_copy_in = cpu_bucket_copy_in,
    .bucket_copy_out = cpu_bucket_copy_out,
};
