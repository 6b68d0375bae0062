/*
 * kernels_cuda.c - kernel_ops_cuda, the CUDA twin of kernel_ops_cpu
 * (worker/train/kernels.h): cuBLAS for the matrix products, the cudak_*
 * kernels for the rest, everything in order on one stream per context.
 *
 * Matrix-product precision: DDP_MATMUL_PRECISION = fp32 (default), tf32 or
 * bf16 (tensor cores, float32 storage and accumulation), read at ctx_new.
 */
#include <errno.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>

#include "kernels.h"
#include "cudak.h"
#include "cudak_probe.h"
#include "log.h"

struct kernel_ctx {
	int device;
	cudaStream_t stream;
	struct cudak_blas *blas;
	double *scratch; /* CUDAK_SQNORM_SCRATCH, then the cross-entropy's rows */
	size_t scratch_len;
};

/* A CUDA runtime error at the boundary: logged at debug level, -EIO. */
static int kc_cuda(const char *what, cudaError_t err)
{
	if (err == cudaSuccess)
		return 0;
	log_debug("kernel_ops_cuda: %s: %s (%s)", what, cudaGetErrorString(err),
		  cudaGetErrorName(err));
	return -EIO;
}

/* A cudak_* return value: logs its message when it failed. */
static int kc_ret(int ret)
{
	if (ret < 0)
		log_debug("kernel_ops_cuda: %s", cudak_last_error());
	return ret < 0 ? -EIO : 0;
}

static int kc_scratch(struct kernel_ctx *ctx, size_t len)
{
	double *p;
	int ret;

	if (len <= ctx->scratch_len)
		return 0;
	/* cudaFree waits for the device, so no queued kernel still reads the
	 * old buffer. */
	ret = kc_cuda("cudaFree", cudaFree(ctx->scratch));
	ctx->scratch = NULL;
	ctx->scratch_len = 0;
	if (ret < 0)
		return ret;
	ret = kc_cuda("cudaMalloc", cudaMalloc((void **)&p, len * sizeof(double)));
	if (ret < 0)
		return -ENOMEM;
	ctx->scratch = p;
	ctx->scratch_len = len;
	return 0;
}

static void kc_ctx_free(struct kernel_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->stream)
		cudaStreamSynchronize(ctx->stream);
	cudak_blas_free(ctx->blas);
	cudaFree(ctx->scratch);
	if (ctx->stream)
		cudaStreamDestroy(ctx->stream);
	free(ctx);
}

static int kc_ctx_new(int device, struct kernel_ctx **out)
{
	struct kernel_ctx *ctx;
	enum cudak_precision prec;
	char why[200];
	int ndev = cudak_probe_devices(why, sizeof(why));
	int ret;

	*out = NULL;
	if (ndev == 0) {
		log_debug("kernel_ops_cuda: no usable GPU: %s", why);
		return -ENODEV;
	}
	if (device < 0 || device >= ndev) {
		log_debug("kernel_ops_cuda: device %d does not exist (%d devices)", device, ndev);
		return -ENODEV;
	}
	if (cudak_precision_parse(getenv("DDP_MATMUL_PRECISION"), &prec) < 0) {
		log_debug("kernel_ops_cuda: DDP_MATMUL_PRECISION is not fp32, tf32 or bf16");
		return -EINVAL;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->device = device;
	ret = kc_cuda("cudaSetDevice", cudaSetDevice(device));
	if (ret < 0)
		goto fail;
	ret = kc_cuda("cudaStreamCreate",
		      cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
	if (ret < 0)
		goto fail;
	ret = kc_ret(cudak_blas_new(ctx->stream, prec, &ctx->blas));
	if (ret < 0)
		goto fail;
	ret = kc_scratch(ctx, CUDAK_SQNORM_SCRATCH);
	if (ret < 0)
		goto fail;
	*out = ctx;
	return 0;
fail:
	kc_ctx_free(ctx);
	return ret;
}

static int kc_sync(struct kernel_ctx *ctx)
{
	return kc_cuda("cudaStreamSynchronize", cudaStreamSynchronize(ctx->stream));
}

static void *kc_stream(struct kernel_ctx *ctx)
{
	return ctx->stream;
}

static int kc_alloc(struct kernel_ctx *ctx, size_t bytes, void **out)
{
	void *p = NULL;
	size_t n = bytes < 64 ? 64 : bytes;

	*out = NULL;
	if (kc_cuda("cudaMalloc", cudaMalloc(&p, n)) < 0)
		return -ENOMEM;
	/* Zero-filled and visible to every stream once alloc returns. */
	if (kc_cuda("cudaMemsetAsync", cudaMemsetAsync(p, 0, n, ctx->stream)) < 0 ||
	    kc_sync(ctx) < 0) {
		cudaFree(p);
		return -EIO;
	}
	*out = p;
	return 0;
}

static void kc_free(struct kernel_ctx *ctx, void *ptr)
{
	if (ptr)
		cudaFree(ptr);
}

static int kc_copy_h2d(struct kernel_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	/* From pageable memory the call returns once src has been staged, so
	 * the caller may reuse src at once. */
	if (bytes == 0)
		return 0;
	return kc_cuda("cudaMemcpyAsync(h2d)",
		       cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
}

static int kc_copy_d2h(struct kernel_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	int ret = 0;

	if (bytes > 0)
		ret =
		    kc_cuda("cudaMemcpyAsync(d2h)",
			    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
	return ret < 0 ? ret : kc_sync(ctx);
}

static int kc_copy_d2d(struct kernel_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	if (bytes == 0)
		return 0;
	return kc_cuda("cudaMemcpyAsync(d2d)",
		       cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
}

static int kc_zero(struct kernel_ctx *ctx, void *ptr, size_t bytes)
{
	if (bytes == 0)
		return 0;
	return kc_cuda("cudaMemsetAsync", cudaMemsetAsync(ptr, 0, bytes, ctx->stream));
}

static int kc_gemm(struct kernel_ctx *ctx, bool trans_a, bool trans_b, int m, int n, int k,
		   float alpha, const float *a, int lda, const float *b, int ldb, float beta,
		   float *c, int ldc)
{
	if (m < 0 || n < 0 || k < 0)
		return -EINVAL;
	return kc_ret(
	    cudak_gemm(ctx->blas, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

static int kc_scale(struct kernel_ctx *ctx, float *x, size_t n, float alpha)
{
	return kc_ret(cudak_scale(ctx->stream, x, x, n, alpha));
}

static int kc_sqnorm(struct kernel_ctx *ctx, const float *x, size_t n, float *out, bool accumulate)
{
	return kc_ret(cudak_sqnorm(ctx->stream, x, n, out, accumulate, ctx->scratch));
}

static int kc_bias_act_fwd(struct kernel_ctx *ctx, float *y, const float *bias, int rows, int cols,
			   bool relu)
{
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return kc_ret(cudak_bias_act_fwd(ctx->stream, y, bias, rows, cols, relu));
}

static int kc_relu_bwd(struct kernel_ctx *ctx, float *dy, const float *y, size_t n)
{
	return kc_ret(cudak_relu_bwd(ctx->stream, dy, y, n));
}

static int kc_col_sum(struct kernel_ctx *ctx, const float *dy, int rows, int cols, float *dbias,
		      bool accumulate)
{
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return kc_ret(cudak_col_sum(ctx->stream, dy, rows, cols, dbias, accumulate));
}

static int kc_bn_stats(struct kernel_ctx *ctx, const float *x, int rows, int cols, float *stats)
{
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return kc_ret(cudak_bn_stats(ctx->stream, x, rows, cols, stats));
}

static int kc_bn_fwd(struct kernel_ctx *ctx, const float *x, const float *stats, int rows, int cols,
		     double count, const float *gamma, const float *beta, float eps, float momentum,
		     float *running_mean, float *running_var, float *saved_invstd, float *xhat,
		     float *y)
{
	if (rows < 0 || cols < 0 || !(count > 0.0) || (running_var && !(count > 1.0)))
		return -EINVAL;
	return kc_ret(cudak_bn_fwd(ctx->stream, x, stats, rows, cols, count, gamma, beta, eps,
				   momentum, running_mean, running_var, saved_invstd, xhat, y));
}

static int kc_bn_infer(struct kernel_ctx *ctx, const float *x, int rows, int cols,
		       const float *gamma, const float *beta, const float *running_mean,
		       const float *running_var, float eps, float *y)
{
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return kc_ret(cudak_bn_infer(ctx->stream, x, rows, cols, gamma, beta, running_mean,
				     running_var, eps, y));
}

static int kc_bn_bwd_stats(struct kernel_ctx *ctx, const float *dy, const float *xhat, int rows,
			   int cols, float *dstats)
{
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return kc_ret(cudak_bn_bwd_stats(ctx->stream, dy, xhat, rows, cols, dstats));
}

static int kc_bn_bwd_dx(struct kernel_ctx *ctx, const float *dy, const float *xhat,
			const float *saved_invstd, const float *gamma, const float *dstats,
			int rows, int cols, double count, float *dx)
{
	if (rows < 0 || cols < 0 || !(count > 0.0))
		return -EINVAL;
	return kc_ret(cudak_bn_bwd_dx(ctx->stream, dy, xhat, saved_invstd, gamma, dstats, rows,
				      cols, count, dx));
}

static int kc_xent(struct kernel_ctx *ctx, const float *logits, const int32_t *labels, int rows,
		   int classes, float grad_scale, float *dlogits, float *out)
{
	int ret;

	if (rows < 0 || classes <= 0)
		return -EINVAL;
	ret = kc_scratch(ctx, CUDAK_SQNORM_SCRATCH + CUDAK_XENT_SCRATCH(rows));
	if (ret < 0)
		return ret;
	return kc_ret(cudak_xent(ctx->stream, logits, labels, rows, classes, grad_scale, dlogits,
				 out, ctx->scratch + CUDAK_SQNORM_SCRATCH));
}

static int kc_sgd_update(struct kernel_ctx *ctx, float *param, const float *grad, float *mom,
			 size_t n, float lr, float momentum, float weight_decay, float grad_scale)
{
	return kc_ret(cudak_sgd_update(ctx->stream, param, grad, mom, n, lr, momentum, weight_decay,
				       grad_scale));
}

static int kc_bucket_copy_in(struct kernel_ctx *ctx, float *flat, const struct kernel_bucket *b)
{
	return kc_ret(
	    cudak_bucket_pack(ctx->stream, flat, (const float *const *)b->tensors, b->lens, b->n));
}

static int kc_bucket_copy_out(struct kernel_ctx *ctx, const float *flat,
			      const struct kernel_bucket *b, float scale)
{
	return kc_ret(cudak_bucket_unpack(ctx->stream, flat, b->tensors, b->lens, b->n, scale));
}

const struct kernel_ops kernel_ops_cuda = {
    .name = "cuda",
    .ctx_new = kc_ctx_new,
    .ctx_free = kc_ctx_free,
    .sync = kc_sync,
    .stream = kc_stream,
    .alloc = kc_alloc,
    .free = kc_free,
    .copy_h2d = kc_copy_h2d,
    .copy_d2h = kc_copy_d2h,
    .copy_d2d = kc_copy_d2d,
    .zero = kc_zero,
    .gemm = kc_gemm,
    .scale = kc_scale,
    .sqnorm = kc_sqnorm,
    .bias_act_fwd = kc_bias_act_fwd,
    .relu_bwd = kc_relu_bwd,
    .col_sum = kc_col_sum,
    .bn_stats = kc_bn_stats,
    .bn_fwd = kc_bn_fwd,
    .bn_infer = kc_bn_infer,
    .bn_bwd_stats = kc_bn_bwd_stats,
    .bn_bwd_dx = kc_bn_bwd_dx,
    .xent = kc_xent,
    .sgd_update = kc_sgd_update,
    .bucket_copy_in = kc_bucket_copy_in,
    .bucket_copy_out = kc_bucket_copy_out,
};
