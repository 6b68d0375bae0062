/*
 * numerics_cuda.c - the GPU path's numeric identity (numerics.h): the
 * current device's model, the CUDA driver, cuBLAS and NCCL versions and
 * DDP_MATMUL_PRECISION. Built with the CUDA kernels only.
 */
#include "numerics.h"

#include "log.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "12.4" from the runtime's 12040. */
static void numerics_cuda_version(int v, char *buf, size_t len)
{
	snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

static int numerics_cublas(char *buf, size_t len)
{
	int major = 0, minor = 0, patch = 0;

	if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
	    cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
	    cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
		return -EIO;
	snprintf(buf, len, "%d.%d.%d", major, minor, patch);
	return 0;
}

static int numerics_nccl(char *buf, size_t len)
{
	int v = 0;

	if (ncclGetVersion(&v) != ncclSuccess)
		return -EIO;
	/* NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before). */
	if (v >= 20900)
		snprintf(buf, len, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
	else
		snprintf(buf, len, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
	return 0;
}

int numerics_of_gpu(struct numerics_identity *id)
{
	struct cudaDeviceProp prop;
	const char *prec = getenv("DDP_MATMUL_PRECISION");
	int device = 0, driver = 0;
	char host[NUMERICS_HOST_MAX];
	int node;

	/* host and node as the CPU path finds them; then the GPU's fields. */
	numerics_of_cpu(id);
	memcpy(host, id->host, sizeof(host));
	node = id->node;
	memset(id, 0, sizeof(*id));
	memcpy(id->host, host, sizeof(host));
	id->node = node;
	if (cudaGetDevice(&device) != cudaSuccess ||
	    cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
	    cudaDriverGetVersion(&driver) != cudaSuccess) {
		log_debug("numerics: the CUDA runtime cannot describe device %d", device);
		return -EIO;
	}
	snprintf(id->value[NUMERICS_KERNELS], NUMERICS_VALUE_MAX, "cuda");
	snprintf(id->value[NUMERICS_GPU], NUMERICS_VALUE_MAX, "%.80s (sm_%d%d)", prop.name,
		 prop.major, prop.minor);
	numerics_cuda_version(driver, id->value[NUMERICS_DRIVER], NUMERICS_VALUE_MAX);
	if (numerics_cublas(id->value[NUMERICS_CUBLAS], NUMERICS_VALUE_MAX) < 0 ||
	    numerics_nccl(id->value[NUMERICS_NCCL], NUMERICS_VALUE_MAX) < 0) {
		log_debug("numerics: cuBLAS or NCCL cannot say its version");
		return -EIO;
	}
	snprintf(id->value[NUMERICS_MATMUL], NUMERICS_VALUE_MAX, "%s",
		 prec && *prec ? prec : "fp32");
	numerics_build(id->value[NUMERICS_BUILD], NUMERICS_VALUE_MAX);
	return 0;
}
