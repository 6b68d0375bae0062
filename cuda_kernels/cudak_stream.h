/*
 * cudak_stream.h - which CUDA stream the application computes on.
 *
 * The trainer's kernel context (kernel_ops_cuda) registers its stream here;
 * the NCCL backend makes its communication stream wait on an event recorded
 * on that stream before each collective or copy, so an all-reduce starts
 * when the gradients it reads are written, without synchronising the whole
 * device. With nothing registered the backend records on the legacy default
 * stream, which orders it after all blocking streams' earlier work.
 */
#ifndef DDP_CUDA_KERNELS_CUDAK_STREAM_H
#define DDP_CUDA_KERNELS_CUDAK_STREAM_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Registers `stream` as the compute stream of `device` (replacing any
 * earlier one). Thread-safe. */
void cudak_stream_register(int device, cudaStream_t stream);
/* Forgets `stream` if it is the one registered for `device` (a newer
 * registration stays). */
void cudak_stream_unregister(int device, cudaStream_t stream);
/* The registered compute stream of `device`, or cudaStreamLegacy. */
cudaStream_t cudak_stream_compute(int device);

#ifdef __cplusplus
}
#endif

#endif
