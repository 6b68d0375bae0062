/*
 * cudak_gemm.cu - row-major matrix products through cuBLAS.
 *
 * cuBLAS is column-major: a row-major matrix is the column-major view of its
 * transpose, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, which is
 * the same memory without any copy.
 */
#include <stdlib.h>
#include <string.h>
#include <cublas_v2.h>
#include "cudak_internal.h"

struct cudak_blas {
	cublasHandle_t handle;
	cublasComputeType_t compute;
};

static int blas_fail(const char *what, cublasStatus_t st)
{
	return cudak_fail_msg(what, cublasGetStatusString(st));
}

extern "C" int cudak_blas_new(cudaStream_t stream, enum cudak_precision precision,
			      struct cudak_blas **out)
{
	struct cudak_blas *blas = (struct cudak_blas *)calloc(1, sizeof(*blas));
	cublasStatus_t st;
	int ret;

	*out = NULL;
	if (!blas)
		return -ENOMEM;
	switch (precision) {
	case CUDAK_TF32:
		blas->compute = CUBLAS_COMPUTE_32F_FAST_TF32;
		break;
	case CUDAK_BF16:
		blas->compute = CUBLAS_COMPUTE_32F_FAST_16BF;
		break;
	default:
		blas->compute = CUBLAS_COMPUTE_32F;
		break;
	}
	st = cublasCreate(&blas->handle);
	if (st != CUBLAS_STATUS_SUCCESS) {
		ret = blas_fail("cublasCreate", st);
		goto fail;
	}
	st = cublasSetStream(blas->handle, stream);
	if (st != CUBLAS_STATUS_SUCCESS) {
		ret = blas_fail("cublasSetStream", st);
		cublasDestroy(blas->handle);
		goto fail;
	}
	*out = blas;
	return 0;
fail:
	free(blas);
	return ret;
}

extern "C" void cudak_blas_free(struct cudak_blas *blas)
{
	if (!blas)
		return;
	cublasDestroy(blas->handle);
	free(blas);
}

extern "C" int cudak_precision_parse(const char *s, enum cudak_precision *out)
{
	if (!s || !*s || strcmp(s, "fp32") == 0)
		*out = CUDAK_FP32;
	else if (strcmp(s, "tf32") == 0)
		*out = CUDAK_TF32;
	else if (strcmp(s, "bf16") == 0)
		*out = CUDAK_BF16;
	else
		return -EINVAL;
	return 0;
}

extern "C" int cudak_gemm(struct cudak_blas *blas, int trans_a, int trans_b, int m, int n, int k,
			  float alpha, const float *a, int lda, const float *b, int ldb, float beta,
			  float *c, int ldc)
{
	cudaStream_t stream;
	cublasStatus_t st;

	if (m < 0 || n < 0 || k < 0)
		return cudak_fail_msg("cudak_gemm", "negative size");
	if (m == 0 || n == 0)
		return 0;
	if (k == 0) {
		/* An empty product: C = beta * C (cuBLAS does not promise this). */
		st = cublasGetStream(blas->handle, &stream);
		if (st != CUBLAS_STATUS_SUCCESS)
			return blas_fail("cublasGetStream", st);
		return cudak_scale_matrix(stream, c, m, n, ldc, beta);
	}
	st = cublasGemmEx(blas->handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
			  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_32F, ldb,
			  a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc, blas->compute,
			  CUBLAS_GEMM_DEFAULT);
	return st == CUBLAS_STATUS_SUCCESS ? 0 : blas_fail("cublasGemmEx", st);
}
