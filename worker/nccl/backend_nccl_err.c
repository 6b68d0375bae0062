/*
 * backend_nccl_err.c - how the NCCL backend reports a failed CUDA runtime
 * call (nb_cuda, backend_nccl_int.h): at libddp's boundary every CUDA error
 * becomes -EIO and a message naming the call, the rank and the device.
 */
#include <errno.h>
#include <stdio.h>

#include "backend_nccl_int.h"

int nb_cuda(struct nccl_backend *nb, const char *what, cudaError_t err)
{
	if (err == cudaSuccess)
		return 0;
	snprintf(nb->base.err, sizeof(nb->base.err), "nccl backend: %s on rank %d (device %d): %s",
		 what, nb->base.rank, nb->base.device, cudaGetErrorString(err));
	return -EIO;
}
