/*
 * cudak_stream.c - the per-device compute stream registry (cudak_stream.h).
 */
#include <pthread.h>
#include "cudak_stream.h"

#define CUDAK_MAX_DEVICES 64

static pthread_mutex_t cudak_stream_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t cudak_streams[CUDAK_MAX_DEVICES];
static int cudak_stream_set[CUDAK_MAX_DEVICES];

void cudak_stream_register(int device, cudaStream_t stream)
{
	if (device < 0 || device >= CUDAK_MAX_DEVICES)
		return;
	pthread_mutex_lock(&cudak_stream_lock);
	cudak_streams[device] = stream;
	cudak_stream_set[device] = 1;
	pthread_mutex_unlock(&cudak_stream_lock);
}

void cudak_stream_unregister(int device, cudaStream_t stream)
{
	if (device < 0 || device >= CUDAK_MAX_DEVICES)
		return;
	pthread_mutex_lock(&cudak_stream_lock);
	if (cudak_stream_set[device] && cudak_streams[device] == stream)
		cudak_stream_set[device] = 0;
	pthread_mutex_unlock(&cudak_stream_lock);
}

cudaStream_t cudak_stream_compute(int device)
{
	cudaStream_t s = cudaStreamLegacy;

	if (device < 0 || device >= CUDAK_MAX_DEVICES)
		return s;
	pthread_mutex_lock(&cudak_stream_lock);
	if (cudak_stream_set[device])
		s = cudak_streams[device];
	pthread_mutex_unlock(&cudak_stream_lock);
	return s;
}
