/*
 * gpu_probe.c - exit 0 and print the device count, the first device and
 * the CUDA runtime and NCCL versions actually loaded when a GPU is usable,
 * else print why and exit 77 (meson's "skipped"). Test scripts call it first.
 */
#include <stdio.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cudak_probe.h"

int main(void)
{
	char why[256];
	int n = cudak_probe_devices(why, sizeof(why));

	if (n == 0) {
		printf("skip: no usable GPU (%s)\n", why);
		return CUDAK_EXIT_SKIP;
	}
	struct cudaDeviceProp prop;
	int rt = 0, nccl = 0;

	cudaRuntimeGetVersion(&rt);
	ncclGetVersion(&nccl);
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
		snprintf(prop.name, sizeof(prop.name), "?");
	printf("%d GPU(s), device 0: %s (sm_%d%d), CUDA runtime %d, NCCL %d\n", n, prop.name,
	       prop.major, prop.minor, rt, nccl);
	return 0;
}
