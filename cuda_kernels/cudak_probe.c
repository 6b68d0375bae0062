/*
 * cudak_probe.c - GPU detection (see cudak_probe.h).
 */
#include <stdio.h>
#include <cuda_runtime_api.h>
#include "cudak_probe.h"

int cudak_probe_devices(char *why, size_t why_len)
{
	int count = 0;
	cudaError_t err = cudaGetDeviceCount(&count);

	if (err != cudaSuccess) {
		if (why)
			snprintf(why, why_len, "cudaGetDeviceCount: %s (%s)",
				 cudaGetErrorString(err), cudaGetErrorName(err));
		/* Clear the sticky-free error so later calls start clean. */
		cudaGetLastError();
		return 0;
	}
	if (count <= 0) {
		if (why)
			snprintf(why, why_len, "cudaGetDeviceCount: no CUDA device");
		return 0;
	}
	return count;
}
