/*
 * fake_cuda_nccl.c - a host-memory stand-in for the CUDA runtime and NCCL
 * calls libddp's NCCL backend makes, linked into test_nccl_backend_fake so
 * that its definitions take the place of libcudart's and libnccl's (an
 * executable's symbols come first in the dynamic linker's lookup). It lets
 * the backend's state machine (non-blocking init, staging of host buffers,
 * the watchdog, abort, finalize) run on a machine without a GPU, with one
 * rank: a collective of one rank leaves its buffer as it is.
 *
 * "Device" memory is malloc'ed and remembered, so cudaPointerGetAttributes
 * can tell it from host memory. Every copy happens at once. Faults are
 * chosen with fake_set(): an all-reduce that never completes (its stream
 * "hangs": events recorded there after it stay not-ready), or an
 * asynchronous NCCL error.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "fake_cuda_nccl.h"

struct fake_stream {
	int hung;
};

struct fake_event {
	int complete;
};

static struct fake_state fs;
static void *fake_dev[4096];
static size_t fake_ndev;

void fake_set(const struct fake_state *st)
{
	fs = *st;
}

struct fake_state fake_get(void)
{
	return fs;
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = 1;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "fake cuda error";
}

const char *cudaGetErrorName(cudaError_t e)
{
	return e == cudaSuccess ? "cudaSuccess" : "cudaErrorFake";
}

cudaError_t cudaGetLastError(void)
{
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
	if (fake_ndev == sizeof(fake_dev) / sizeof(fake_dev[0]) || !(*p = calloc(1, n ? n : 1)))
		return cudaErrorMemoryAllocation;
	fake_dev[fake_ndev++] = *p;
	fs.device_allocs++;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	for (size_t i = 0; p && i < fake_ndev; i++)
		if (fake_dev[i] == p) {
			fake_dev[i] = fake_dev[--fake_ndev];
			fs.device_allocs--;
			free(p);
			return cudaSuccess;
		}
	return p ? cudaErrorInvalidValue : cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
	*p = calloc(1, n ? n : 1);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	memset(a, 0, sizeof(*a));
	a->type = cudaMemoryTypeUnregistered;
	for (size_t i = 0; i < fake_ndev; i++)
		if (fake_dev[i] == p) /* the tests pass buffer starts */
			a->type = cudaMemoryTypeDevice;
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	*s = (cudaStream_t)calloc(1, sizeof(struct fake_stream));
	return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	free(s);
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
	if (fs.watch_stream && s == (cudaStream_t)fs.watch_stream)
		fs.watch_waits++;
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	*e = (cudaEvent_t)calloc(1, sizeof(struct fake_event));
	return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	free(e);
	return cudaSuccess;
}

static int stream_hung(cudaStream_t s)
{
	/* The legacy and per-thread default streams are never ours. */
	return (uintptr_t)s > 2 && ((struct fake_stream *)s)->hung;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (fs.watch_stream && s == (cudaStream_t)fs.watch_stream)
		fs.watch_records++;
	if (s == cudaStreamLegacy)
		fs.legacy_records++;
	((struct fake_event *)e)->complete = !stream_hung(s);
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	fs.event_queries++;
	return ((struct fake_event *)e)->complete ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
			    cudaStream_t s)
{
	memmove(dst, src, n);
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	memset(p, v, n);
	return cudaSuccess;
}

/* ---- NCCL, one rank ---- */

struct ncclComm {
	int init_polls; /* ncclInProgress left before init completes */
	int finalizing;
};

const char *ncclGetErrorString(ncclResult_t r)
{
	return r == ncclSuccess ? "no error" : "fake nccl error";
}

const char *ncclGetLastError(ncclComm_t comm)
{
	return "fake: remote process exited";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0x5a, sizeof(*id));
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
				    ncclConfig_t *cfg)
{
	if (nranks != 1 || rank != 0 || !cfg || cfg->blocking != 0)
		return ncclInvalidArgument;
	*comm = calloc(1, sizeof(**comm));
	(*comm)->init_polls = fs.init_polls;
	fs.comms++;
	return fs.init_polls ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *st)
{
	if (!comm)
		return ncclInvalidArgument;
	if (comm->init_polls > 0) {
		comm->init_polls--;
		*st = ncclInProgress;
	} else {
		*st = fs.async_error ? ncclRemoteError : ncclSuccess;
	}
	return ncclSuccess;
}

static ncclResult_t collective(cudaStream_t s)
{
	fs.collectives++;
	if (fs.hang_after >= 0 && fs.collectives > fs.hang_after)
		((struct fake_stream *)s)->hung = 1;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
			   ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
	memmove(recv, send, count * (t == ncclFloat64 ? 8 : 4));
	if (t == ncclFloat32 && op == ncclSum && fs.sum_factor != 0.0f)
		for (size_t i = 0; i < count; i++)
			((float *)recv)[i] *= fs.sum_factor;
	if (t == ncclFloat32 && op == ncclAvg)
		for (size_t i = 0; i < count; i++)
			((float *)recv)[i] += fs.avg_add;
	return collective(s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
			   ncclComm_t comm, cudaStream_t s)
{
	memmove(recv, send, count * (t == ncclFloat64 ? 8 : 4));
	return collective(s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
			   ncclComm_t comm, cudaStream_t s)
{
	memmove(recv, send, count * (t == ncclFloat64 ? 8 : 4));
	return collective(s);
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	fs.aborts++;
	fs.comms--;
	free(comm);
	return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	comm->finalizing = 1;
	comm->init_polls = 2; /* finalize reports ncclInProgress twice */
	return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	fs.destroys += comm->finalizing;
	fs.comms--;
	free(comm);
	return ncclSuccess;
}
