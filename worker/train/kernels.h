/*
 * kernels.h - the compute kernels of ddp-train, behind one table of function
 * pointers so the same model code runs on the CPU (kernel_ops_cpu: plain C +
 * OpenBLAS, kernels_cpu.c) and on a GPU (kernel_ops_cuda, kernels_cuda.c:
 * cuBLAS and the CUDA kernels of cuda_kernels/).
 *
 * Memory model. Every tensor the model touches is "device memory": allocated
 * with ops->alloc and passed to the kernels as a plain pointer. On the CPU
 * device memory is host memory; on CUDA it is cudaMalloc'ed. The host only
 * reads or writes it through copy_h2d / copy_d2h. Kernels may run
 * asynchronously (on CUDA: in order on the context's stream); copy_d2h and
 * sync() wait for all work queued before them, so a value copied to the host
 * is final when copy_d2h returns.
 *
 * Layout. Matrices are row-major float32; a batch of activations is
 * rows = batch samples, cols = features. Element counts are size_t, matrix
 * dimensions int (>= 0; a zero dimension is a no-op, never an error).
 *
 * Errors. Every fallible op returns 0 on success or a negative errno: -EINVAL
 * for bad arguments (negative dimension, NULL where data is needed), -ENOMEM
 * when an allocation fails, -EIO for a device error (the CUDA twin logs the
 * CUDA/cuBLAS message at debug level). Kernels never print.
 *
 * Threads. A struct kernel_ctx is used by one thread at a time.
 *
 * Numerics shared by both twins (the CUDA tests compare against the CPU):
 *   - reductions over a batch (column sums, BatchNorm statistics, loss sums,
 *     squared norms) accumulate in double on the CPU; the CUDA twin may use
 *     float partial sums combined in double, so expect ~1e-6 relative error;
 *   - BatchNorm uses the biased variance to normalise and the unbiased one
 *     (count / (count - 1)) for the running variance, as PyTorch does.
 */
#ifndef DDP_WORKER_TRAIN_KERNELS_H
#define DDP_WORKER_TRAIN_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Opaque per-device state (CPU: nothing much; CUDA: device id, stream,
 * cuBLAS handle, scratch buffers). */
struct kernel_ctx;

/* Where the tensors of one bucket copy live: n source tensors of lens[i]
 * floats each, gathered back to back into (or scattered from) one flat
 * buffer. The arrays `tensors` and `lens` are HOST arrays of DEVICE
 * pointers; they are read during the call only. */
struct kernel_bucket {
	float *const *tensors;
	const size_t *lens;
	int n;
};

struct kernel_ops {
	/* "cpu" or "cuda"; static string. */
	const char *name;

	/* ---- lifetime ------------------------------------------------------ */

	/* Creates the context for device `device` (CPU: ignored; CUDA: the
	 * device index, usually LOCAL_RANK). *out is NULL on failure. */
	int (*ctx_new)(int device, struct kernel_ctx **out);
	/* Waits for outstanding work and frees the context. NULL is allowed. */
	void (*ctx_free)(struct kernel_ctx *ctx);
	/* Waits until every queued kernel and copy has finished. */
	int (*sync)(struct kernel_ctx *ctx);
	/* The stream the context's kernels and copies run on, for libddp's
	 * ddp_set_compute_stream (CUDA: the cudaStream_t; CPU: NULL). Valid
	 * until ctx_free. */
	void *(*stream)(struct kernel_ctx *ctx);

	/* ---- memory ---------------------------------------------------------- */

	/* Allocates `bytes` of device memory, zero-filled, aligned to at least
	 * 64 bytes. bytes == 0 yields a valid pointer that may be freed. */
	int (*alloc)(struct kernel_ctx *ctx, size_t bytes, void **out);
	/* Frees memory from alloc. NULL is allowed. */
	void (*free)(struct kernel_ctx *ctx, void *ptr);
	/* dst (device) <- src (host), `bytes` bytes. */
	int (*copy_h2d)(struct kernel_ctx *ctx, void *dst, const void *src, size_t bytes);
	/* dst (host) <- src (device); returns once the bytes are in dst. */
	int (*copy_d2h)(struct kernel_ctx *ctx, void *dst, const void *src, size_t bytes);
	/* dst (device) <- src (device); the ranges must not overlap. */
	int (*copy_d2d)(struct kernel_ctx *ctx, void *dst, const void *src, size_t bytes);
	/* Sets `bytes` bytes of device memory to 0. */
	int (*zero)(struct kernel_ctx *ctx, void *ptr, size_t bytes);

	/* ---- dense algebra --------------------------------------------------- */

	/* C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T.
	 * op(A) is m x k, op(B) is k x n, C is m x n; lda/ldb/ldc are the row
	 * strides of A, B, C as stored (e.g. A stored k x m when trans_a: lda >= m).
	 * beta == 0 means C is not read (may hold NaN). */
	int (*gemm)(struct kernel_ctx *ctx, bool trans_a, bool trans_b, int m, int n, int k,
		    float alpha, const float *a, int lda, const float *b, int ldb, float beta,
		    float *c, int ldc);
	/* x[i] *= alpha for i < n. */
	int (*scale)(struct kernel_ctx *ctx, float *x, size_t n, float alpha);
	/* *out (device float) = sum of x[i]^2 for i < n, plus *out if
	 * accumulate is true (to sum several tensors into one norm). */
	int (*sqnorm)(struct kernel_ctx *ctx, const float *x, size_t n, float *out,
		      bool accumulate);

	/* ---- Linear bias + ReLU --------------------------------------------- */

	/* y[r][c] = y[r][c] + bias[c], then max(., 0) if relu; y is rows x cols,
	 * in place. bias may be NULL (no bias). */
	int (*bias_act_fwd)(struct kernel_ctx *ctx, float *y, const float *bias, int rows, int cols,
			    bool relu);
	/* ReLU backward in place: dy[i] = y[i] > 0 ? dy[i] : 0, where y is the
	 * ReLU's OUTPUT, n elements. */
	int (*relu_bwd)(struct kernel_ctx *ctx, float *dy, const float *y, size_t n);
	/* Bias gradient: dbias[c] = sum_r dy[r][c] (+ dbias[c] if accumulate),
	 * dy is rows x cols. */
	int (*col_sum)(struct kernel_ctx *ctx, const float *dy, int rows, int cols, float *dbias,
		       bool accumulate);

	/* ---- BatchNorm1d over a batch (per column = per feature) ------------- *
	 * Training forward is split so SyncBatchNorm can all-reduce the
	 * statistics between the steps (sums over the local batch, so the
	 * all-reduce is a plain SUM and the global count is known):
	 *   1. bn_stats(x) -> stats[0..cols) = sum_r x, stats[cols..2cols) =
	 *      sum_r x^2                             [SyncBN: all-reduce SUM]
	 *   2. bn_fwd(x, stats, count) -> mean, invstd saved, xhat, y; running
	 *      statistics updated.
	 * Backward:
	 *   3. bn_bwd_stats(dy, xhat) -> dstats[0..cols) = sum_r dy (= dbeta),
	 *      dstats[cols..2cols) = sum_r dy*xhat (= dgamma)
	 *                                            [SyncBN: all-reduce SUM a
	 *                                             COPY; dgamma/dbeta use the
	 *                                             local sums, as PyTorch]
	 *   4. bn_bwd_dx(dy, xhat, invstd, gamma, dstats, count) -> dx.
	 * `count` is the number of rows summed into the statistics (the global
	 * batch under SyncBN). The sums are in double-accumulated float. */
	int (*bn_stats)(struct kernel_ctx *ctx, const float *x, int rows, int cols, float *stats);
	/* mean = stats[c]/count, var = stats[cols+c]/count - mean^2 (clamped at
	 * 0), invstd = 1/sqrt(var + eps) -> saved_invstd[c];
	 * xhat = (x - mean) * invstd; y = gamma * xhat + beta.
	 * running_mean = (1-momentum)*running_mean + momentum*mean,
	 * running_var  = (1-momentum)*running_var + momentum*var*count/(count-1)
	 * (running_* may be NULL to skip; count must be >= 2 when they are not).
	 * x and y may alias (in place); xhat must not alias either. */
	int (*bn_fwd)(struct kernel_ctx *ctx, const float *x, const float *stats, int rows,
		      int cols, double count, const float *gamma, const float *beta, float eps,
		      float momentum, float *running_mean, float *running_var, float *saved_invstd,
		      float *xhat, float *y);
	/* Inference: y = gamma * (x - running_mean) / sqrt(running_var + eps)
	 * + beta; x and y may alias. */
	int (*bn_infer)(struct kernel_ctx *ctx, const float *x, int rows, int cols,
			const float *gamma, const float *beta, const float *running_mean,
			const float *running_var, float eps, float *y);
	int (*bn_bwd_stats)(struct kernel_ctx *ctx, const float *dy, const float *xhat, int rows,
			    int cols, float *dstats);
	/* dx = gamma*invstd * (dy - dstats[c]/count - xhat*dstats[cols+c]/count);
	 * dx may alias dy. */
	int (*bn_bwd_dx)(struct kernel_ctx *ctx, const float *dy, const float *xhat,
			 const float *saved_invstd, const float *gamma, const float *dstats,
			 int rows, int cols, double count, float *dx);

	/* ---- softmax cross-entropy ------------------------------------------ */

	/* logits rows x classes; labels (device int32, each in [0, classes)).
	 * out[0] = sum over rows of -log softmax(logits)[label] (double
	 * accumulated), out[1] = number of rows whose argmax (first maximum)
	 * equals the label. If dlogits is not NULL:
	 * dlogits = (softmax(logits) - onehot(label)) * grad_scale (e.g.
	 * 1/rows for a mean loss); dlogits may alias logits. out is a device
	 * float[2]. A label out of range is -EINVAL (checked on CPU; the CUDA
	 * twin counts it as wrong and gives it zero gradient). */
	int (*xent)(struct kernel_ctx *ctx, const float *logits, const int32_t *labels, int rows,
		    int classes, float grad_scale, float *dlogits, float *out);

	/* ---- optimizer ------------------------------------------------------ */

	/* PyTorch SGD (dampening 0, not Nesterov), fused, for n elements:
	 *   g   = grad_scale * grad + weight_decay * param
	 *   mom = momentum * mom + g        (mom starts zeroed: same as torch's
	 *                                    "buf = g" on the first step)
	 *   param -= lr * (momentum != 0 ? mom : g)
	 * grad_scale carries gradient clipping (min(1, max_norm/norm)); lr and
	 * weight_decay are the parameter group's. grad is not modified. */
	int (*sgd_update)(struct kernel_ctx *ctx, float *param, const float *grad, float *mom,
			  size_t n, float lr, float momentum, float weight_decay, float grad_scale);

	/* ---- buckets -------------------------------------------------------- */

	/* Gathers b->tensors[i] (b->lens[i] floats each, i < b->n) back to back
	 * into flat (device), in order. */
	int (*bucket_copy_in)(struct kernel_ctx *ctx, float *flat, const struct kernel_bucket *b);
	/* Scatters flat back into b->tensors, multiplying by `scale` on the way
	 * (1.0f for a plain copy; 1/world for an averaged SUM). */
	int (*bucket_copy_out)(struct kernel_ctx *ctx, const float *flat,
			       const struct kernel_bucket *b, float scale);
};

/* Plain C + OpenBLAS; always available. */
extern const struct kernel_ops kernel_ops_cpu;

/* Sets the number of OpenBLAS threads of kernel_ops_cpu's matrix products
 * (process-wide); n <= 0 leaves OpenBLAS's own choice (OPENBLAS_NUM_THREADS /
 * OMP_NUM_THREADS, else every core). */
void kernel_cpu_set_threads(int n);

/* cuBLAS + CUDA kernels (kernels_cuda.c), built when the build has CUDA
 * (meson: have_cuda, C macro DDP_HAVE_CUDA). The table exists even when no
 * GPU is present; its ctx_new then returns -ENODEV. */
#ifdef DDP_HAVE_CUDA
extern const struct kernel_ops kernel_ops_cuda;
#endif

#endif
