/*
 * fake_cuda_nccl.h - controls and counters of the host-memory stand-in for
 * CUDA and NCCL (fake_cuda_nccl.c).
 */
#ifndef DDP_TESTS_GPU_FAKE_CUDA_NCCL_H
#define DDP_TESTS_GPU_FAKE_CUDA_NCCL_H

struct fake_state {
	/* settings */
	int init_polls;	    /* ncclInProgress answers before init completes */
	int hang_after;	    /* collectives after this many never complete (-1: none) */
	int async_error;    /* ncclCommGetAsyncError reports ncclRemoteError */
	float sum_factor;   /* a float32 sum all-reduce multiplies by this (as if
			     * that many identical ranks; 0 = 1) */
	float avg_add;	    /* a float32 average all-reduce adds this (to see
			     * the data went through the collective) */
	void *watch_stream; /* a stream whose events and waits are counted */
	/* counters */
	int collectives;
	int comms; /* communicators alive */
	int aborts;
	int destroys; /* after a finalize */
	int device_allocs;
	long event_queries;
	int watch_records;  /* cudaEventRecord on watch_stream */
	int watch_waits;    /* cudaStreamWaitEvent by watch_stream */
	int legacy_records; /* cudaEventRecord on cudaStreamLegacy */
};

void fake_set(const struct fake_state *st);
struct fake_state fake_get(void);

#endif
