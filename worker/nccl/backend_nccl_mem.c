/*
 * backend_nccl_mem.c - the NCCL backend's memory: device allocations (the
 * reducer's buckets, tracked so collectives on them skip the compute-stream
 * wait), the copy stream (see backend_nccl.c's header for the ordering), and
 * the staging of host buffers passed to collectives.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nccl_int.h"

static int nb_track(struct nccl_backend *nb, void *p, size_t bytes)
{
	struct nccl_alloc *a = realloc(nb->allocs, (nb->nallocs + 1) * sizeof(*a));

	if (!a)
		return -ENOMEM;
	nb->allocs = a;
	a[nb->nallocs++] = (struct nccl_alloc){p, bytes};
	return 0;
}

int nb_alloc(struct ddp_backend *b, size_t bytes, void **out)
{
	struct nccl_backend *nb = nb_of(b);
	void *p = NULL;
	size_t n = bytes < 64 ? 64 : bytes;
	int rc;

	*out = NULL;
	pthread_mutex_lock(&nb->lock);
	rc = nb_cuda(nb, "cudaSetDevice", cudaSetDevice(b->device));
	if (rc == 0 && cudaMalloc(&p, n) != cudaSuccess) {
		snprintf(b->err, sizeof(b->err),
			 "nccl backend: cannot allocate %zu bytes on device %d", n, b->device);
		rc = -ENOMEM;
	}
	/* Zero-filled and visible to every stream once alloc returns. */
	if (rc == 0)
		rc = nb_cuda(nb, "cudaMemsetAsync", cudaMemsetAsync(p, 0, n, nb->cstream));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaStreamSynchronize", cudaStreamSynchronize(nb->cstream));
	if (rc == 0)
		rc = nb_track(nb, p, n);
	if (rc < 0)
		cudaFree(p);
	else
		*out = p;
	pthread_mutex_unlock(&nb->lock);
	return rc;
}

void nb_free_mem(struct ddp_backend *b, void *ptr)
{
	struct nccl_backend *nb = nb_of(b);

	if (!ptr)
		return;
	pthread_mutex_lock(&nb->lock);
	for (size_t i = 0; i < nb->nallocs; i++)
		if (nb->allocs[i].ptr == ptr) {
			nb->allocs[i] = nb->allocs[--nb->nallocs];
			break;
		}
	cudaSetDevice(b->device);
	cudaFree(ptr);
	pthread_mutex_unlock(&nb->lock);
}

/* compute -> copy stream -> compute (see the top of backend_nccl.c). */
int nb_copy(struct ddp_backend *b, void *dst, const void *src, size_t bytes)
{
	struct nccl_backend *nb = nb_of(b);
	cudaStream_t compute;
	int rc;

	if (bytes == 0)
		return 0;
	pthread_mutex_lock(&nb->lock);
	compute = nb->app_stream;
	rc = nb_cuda(nb, "cudaSetDevice", cudaSetDevice(b->device));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->compute, compute));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaStreamWaitEvent",
			     cudaStreamWaitEvent(nb->cstream, nb->compute, 0));
	if (rc == 0)
		rc = nb_cuda(
		    nb, "cudaMemcpyAsync",
		    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nb->cstream));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->copied, nb->cstream));
	if (rc == 0)
		rc =
		    nb_cuda(nb, "cudaStreamWaitEvent", cudaStreamWaitEvent(compute, nb->copied, 0));
	pthread_mutex_unlock(&nb->lock);
	return rc;
}

/* compute -> copy stream, nothing copied: the next collectives wait for
 * the copy stream (nb_begin), so for what the compute stream had queued. */
int nb_fence(struct ddp_backend *b)
{
	struct nccl_backend *nb = nb_of(b);
	int rc;

	pthread_mutex_lock(&nb->lock);
	rc = nb_cuda(nb, "cudaSetDevice", cudaSetDevice(b->device));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->compute, nb->app_stream));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaStreamWaitEvent",
			     cudaStreamWaitEvent(nb->cstream, nb->compute, 0));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->copied, nb->cstream));
	pthread_mutex_unlock(&nb->lock);
	return rc;
}

/* 1 if [ptr, ptr + bytes) lies in a buffer from this backend's alloc(). */
int nb_owns(struct nccl_backend *nb, const void *ptr, size_t bytes)
{
	const char *p = ptr;

	for (size_t i = 0; i < nb->nallocs; i++)
		if (p >= nb->allocs[i].ptr && p + bytes <= nb->allocs[i].ptr + nb->allocs[i].bytes)
			return 1;
	return 0;
}

int nb_is_host(const void *ptr)
{
	struct cudaPointerAttributes attr;

	if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
		cudaGetLastError(); /* older runtimes: error for unregistered host memory */
		return 1;
	}
	return attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeUnregistered;
}

int nb_stage_reserve(struct nccl_backend *nb, size_t bytes)
{
	size_t n = 256;
	int rc;

	if (bytes <= nb->stage_len)
		return 0;
	while (n < bytes)
		n *= 2;
	/* Nothing is queued on the staging buffers here: every collective
	 * was synchronized before the next one starts. */
	cudaFree(nb->stage_dev);
	cudaFreeHost(nb->stage_host);
	nb->stage_dev = nb->stage_host = NULL;
	nb->stage_len = 0;
	rc = nb_cuda(nb, "cudaMalloc", cudaMalloc((void **)&nb->stage_dev, n));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaMallocHost", cudaMallocHost((void **)&nb->stage_host, n));
	if (rc < 0)
		return rc;
	nb->stage_len = n;
	return 0;
}

int nb_stage_in(struct nccl_backend *nb, size_t off, const void *src, size_t bytes)
{
	memcpy(nb->stage_host + off, src, bytes);
	return nb_cuda(nb, "cudaMemcpyAsync",
		       cudaMemcpyAsync(nb->stage_dev + off, nb->stage_host + off, bytes,
				       cudaMemcpyHostToDevice, nb->stream));
}

int nb_stage_out(struct nccl_backend *nb, size_t off, void *dst, size_t bytes)
{
	int rc = nb_cuda(nb, "cudaMemcpyAsync",
			 cudaMemcpyAsync(nb->stage_host + off, nb->stage_dev + off, bytes,
					 cudaMemcpyDeviceToHost, nb->stream));

	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->done, nb->stream));
	if (rc == 0) {
		nb->copyback = dst;
		nb->copyback_off = off;
		nb->copyback_len = bytes;
	}
	return rc;
}

void nb_stage_finish(struct nccl_backend *nb)
{
	if (nb->copyback)
		memcpy(nb->copyback, nb->stage_host + nb->copyback_off, nb->copyback_len);
	nb->copyback = NULL;
}

void nb_mem_adopt(struct nccl_backend *nb, struct nccl_backend *old)
{
	pthread_mutex_lock(&old->lock);
	nb->allocs = old->allocs;
	nb->nallocs = old->nallocs;
	nb->app_stream = old->app_stream;
	old->allocs = NULL;
	old->nallocs = 0;
	pthread_mutex_unlock(&old->lock);
}

void nb_mem_release(struct nccl_backend *nb)
{
	for (size_t i = 0; i < nb->nallocs; i++)
		cudaFree(nb->allocs[i].ptr);
	free(nb->allocs);
	nb->allocs = NULL;
	nb->nallocs = 0;
	cudaFree(nb->stage_dev);
	cudaFreeHost(nb->stage_host);
	nb->stage_dev = nb->stage_host = NULL;
}
