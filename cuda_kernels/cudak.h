/*
 * cudak.h - the trainer's CUDA kernels (prefix cudak_), each the twin of a CPU
 * kernel of worker/train: cuBLAS matrix products, bias + ReLU, BatchNorm with
 * its statistics exposed for SyncBatchNorm, softmax cross-entropy, the fused
 * SGD-momentum update, sums of squares for gradient clipping, and bucket
 * packing for the reducer.
 *
 * Conventions:
 *  - Every pointer named in a kernel call is device memory unless it says
 *    "host"; matrices are row-major float32, `rows` x `cols`.
 *  - Every call is asynchronous on the given stream (NULL = legacy default
 *    stream) and returns 0 when the launch was accepted, or -EIO when CUDA or
 *    cuBLAS refused it; cudak_last_error() then says what and where (a
 *    thread-local message, valid until the next failing call on the thread).
 *    Errors of the kernel's execution surface at the next synchronisation.
 *  - Sizes of 0 are valid and launch nothing.
 *  - Reductions (bias gradient, BatchNorm statistics, sums of squares) use a
 *    fixed order: the same inputs give the same bits on every run.
 */
#ifndef DDP_CUDA_KERNELS_CUDAK_H
#define DDP_CUDA_KERNELS_CUDAK_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The last error on this thread ("" if none). */
const char *cudak_last_error(void);

/* --- matrix products (cudak_gemm.cu) ----------------------------------- */

/* Precision of the matrix products; storage stays float32 in every mode.
 * TF32 and BF16 use the tensor cores with float32 accumulation
 * (CUBLAS_COMPUTE_32F_FAST_TF32 / _FAST_16BF). */
enum cudak_precision {
	CUDAK_FP32 = 0,
	CUDAK_TF32 = 1,
	CUDAK_BF16 = 2,
};

/* Parses "fp32", "tf32", "bf16" (NULL or "" = fp32); -EINVAL otherwise. */
int cudak_precision_parse(const char *s, enum cudak_precision *out);

struct cudak_blas;

/* Creates a cuBLAS handle bound to `stream` (the current device). -EIO when
 * cuBLAS cannot start (message in cudak_last_error()), -ENOMEM. */
int cudak_blas_new(cudaStream_t stream, enum cudak_precision precision, struct cudak_blas **out);
/* NULL is allowed. */
void cudak_blas_free(struct cudak_blas *blas);

/* Row-major C (m x n) = alpha * op(A) * op(B) + beta * C, with op(A) m x k
 * and op(B) k x n; lda/ldb/ldc are the row strides of A, B, C as stored (A
 * stored k x m when trans_a). beta == 0: C is not read. */
int cudak_gemm(struct cudak_blas *blas, int trans_a, int trans_b, int m, int n, int k, float alpha,
	       const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* --- element-wise layers and copies (cudak_elementwise.cu) -------------- */

/* In place: y[r][c] += bias[c] (bias may be NULL), then max(., 0) if relu
 * (NaN becomes 0, as on the CPU). */
int cudak_bias_act_fwd(cudaStream_t stream, float *y, const float *bias, int rows, int cols,
		       int relu);
/* In place: dy[i] = y[i] > 0 ? dy[i] : 0, y the ReLU's output. */
int cudak_relu_bwd(cudaStream_t stream, float *dy, const float *y, size_t n);
/* dbias[c] = sum_r dy[r][c] (+ dbias[c] if accumulate). */
int cudak_col_sum(cudaStream_t stream, const float *dy, int rows, int cols, float *dbias,
		  int accumulate);
/* dst[i] = alpha * src[i]; dst may be src. */
int cudak_scale(cudaStream_t stream, const float *src, float *dst, size_t n, float alpha);
/* C (m x n, row stride ldc) = beta * C, or 0 when beta == 0 (C not read). */
int cudak_scale_matrix(cudaStream_t stream, float *c, int m, int n, int ldc, float beta);

/* Reducer buckets: copies `count` tensors (host arrays of device pointers,
 * lens[i] floats each) back to back into `flat` (pack), or the reverse,
 * multiplied by `scale` (unpack; 1 = plain copy). */
int cudak_bucket_pack(cudaStream_t stream, float *flat, const float *const *srcs,
		      const size_t *lens, int count);
int cudak_bucket_unpack(cudaStream_t stream, const float *flat, float *const *dsts,
			const size_t *lens, int count, float scale);

/* --- BatchNorm1d over the rows, per column (cudak_batchnorm.cu) ----------
 * Same split and formulas as worker/train/kernels.h (bn_stats, bn_fwd,
 * bn_infer, bn_bwd_stats, bn_bwd_dx); stats and dstats are float[2 * cols]
 * (sums, then sums of squares / of dy * xhat), accumulated in double. */
int cudak_bn_stats(cudaStream_t stream, const float *x, int rows, int cols, float *stats);
int cudak_bn_fwd(cudaStream_t stream, const float *x, const float *stats, int rows, int cols,
		 double count, const float *gamma, const float *beta, float eps, float momentum,
		 float *running_mean, float *running_var, float *saved_invstd, float *xhat,
		 float *y);
int cudak_bn_infer(cudaStream_t stream, const float *x, int rows, int cols, const float *gamma,
		   const float *beta, const float *running_mean, const float *running_var,
		   float eps, float *y);
int cudak_bn_bwd_stats(cudaStream_t stream, const float *dy, const float *xhat, int rows, int cols,
		       float *dstats);
int cudak_bn_bwd_dx(cudaStream_t stream, const float *dy, const float *xhat,
		    const float *saved_invstd, const float *gamma, const float *dstats, int rows,
		    int cols, double count, float *dx);

/* --- softmax cross-entropy (cudak_loss.cu) ------------------------------ */

/* Doubles of scratch cudak_xent needs for `rows` rows. */
#define CUDAK_XENT_SCRATCH(rows) (2 * (size_t)(rows))
/* out[0] (device float) = sum over rows of -log softmax(logits)[label],
 * out[1] = rows whose first argmax equals the label; dlogits (may be NULL,
 * may alias logits) = (softmax - onehot) * grad_scale. A label outside
 * [0, classes) counts as wrong, adds no loss and gets a zero gradient.
 * scratch: CUDAK_XENT_SCRATCH(rows) doubles of device memory. */
int cudak_xent(cudaStream_t stream, const float *logits, const int32_t *labels, int rows,
	       int classes, float grad_scale, float *dlogits, float *out, double *scratch);

/* --- optimizer and norms (cudak_optim.cu) ------------------------------- */

/* PyTorch SGD (dampening 0, not Nesterov) for n elements:
 * g = grad_scale * grad + weight_decay * param; mom = momentum * mom + g
 * (mom may be NULL when momentum == 0); param -= lr * (momentum ? mom : g). */
int cudak_sgd_update(cudaStream_t stream, float *param, const float *grad, float *mom, size_t n,
		     float lr, float momentum, float weight_decay, float grad_scale);

/* Doubles of scratch cudak_sqnorm needs. */
#define CUDAK_SQNORM_SCRATCH 256
/* *out (device float) = sum of x[i]^2 (+ *out if accumulate), accumulated in
 * double in a fixed order; scratch: CUDAK_SQNORM_SCRATCH doubles. */
int cudak_sqnorm(cudaStream_t stream, const float *x, size_t n, float *out, int accumulate,
		 double *scratch);

#ifdef __cplusplus
}
#endif

#endif
