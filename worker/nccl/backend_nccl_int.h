/*
 * backend_nccl_int.h - the NCCL backend from the inside: its state (the
 * communicator, the three streams and their events, the allocations it
 * tracks, the staging of host buffers, the watchdog's deadline) and the
 * steps its ops are made of. backend_nccl.c's top comment describes the
 * stream ordering and the watchdog. Not installed.
 *
 * Locking: one mutex, nb->lock, covers the state and every enqueue. The
 * nb_* functions that take a struct nccl_backend are called with it held
 * (or before the backend is shared, during creation, or at close, when
 * nothing else runs); those that take a struct ddp_backend are ops and take
 * it themselves.
 */
#ifndef DDP_WORKER_BACKEND_NCCL_INT_H
#define DDP_WORKER_BACKEND_NCCL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

/* This code is built only with NCCL; backend.h declares its entry points
 * under DDP_HAVE_NCCL. */
#ifndef DDP_HAVE_NCCL
#define DDP_HAVE_NCCL 1
#endif
#include "backend.h"

struct nccl_alloc {
	char *ptr;
	size_t bytes;
};

struct nccl_backend {
	struct ddp_backend base;
	pthread_mutex_t lock;
	ncclComm_t comm;
	cudaStream_t stream;  /* collectives */
	cudaStream_t cstream; /* copies */
	/* The application's compute stream (ddp_set_compute_stream), else
	 * cudaStreamLegacy; read and written under the lock. */
	cudaStream_t app_stream;
	cudaEvent_t compute; /* recorded on app_stream */
	cudaEvent_t copied;  /* recorded after each copy */
	cudaEvent_t done;    /* recorded after each collective */
	float *scratch;	     /* one float for the barrier */
	struct nccl_alloc *allocs;
	size_t nallocs;
	/* Staging of host buffers given to collectives (small control values
	 * such as a checkpoint's status flag): device and pinned host twins,
	 * and where synchronize() copies the result once the collective is
	 * done. */
	char *stage_dev;
	char *stage_host;
	size_t stage_len;
	void *copyback;
	size_t copyback_len;
	size_t copyback_off;
	uint64_t timeout_ms;
	atomic_int abort_requested;
	/* While the communicator is created: the set-up's cancel flag
	 * (ddp_backend_params.cancel: a later round superseded this
	 * re-formation), polled with its progress; NULL otherwise. */
	const atomic_int *cancel;
	int comm_ready;	      /* initialisation completed */
	int broken;	      /* the communicator was aborted */
	int pending;	      /* a collective issued since the last synchronize */
	uint64_t deadline_ms; /* of the pending collective */
	char op[96];	      /* the last collective, for messages */
};

static inline struct nccl_backend *nb_of(struct ddp_backend *b)
{
	return (struct nccl_backend *)b;
}

/* A CUDA error: message in nb->base.err naming `what`, -EIO. */
int nb_cuda(struct nccl_backend *nb, const char *what, cudaError_t err);

/* backend_nccl.c: the backend table; aborting the communicator (once);
 * waiting while NCCL reports ncclInProgress until deadline_ms (an error, a
 * timeout or ddp_abort() aborts it and fails with a message); closing. */
extern const struct ddp_backend_ops nb_ops;
void nb_abort_comm(struct nccl_backend *nb);
int nb_wait_progress(struct nccl_backend *nb, uint64_t deadline_ms);
void nb_close(struct ddp_backend *b);

/* backend_nccl_mem.c: the memory ops of the backend table (they take the
 * lock themselves). */
int nb_alloc(struct ddp_backend *b, size_t bytes, void **out);
void nb_free_mem(struct ddp_backend *b, void *ptr);
int nb_copy(struct ddp_backend *b, void *dst, const void *src, size_t bytes);
int nb_fence(struct ddp_backend *b);

/* 1 if [ptr, ptr + bytes) lies in a buffer from this backend's alloc(). */
int nb_owns(struct nccl_backend *nb, const void *ptr, size_t bytes);
/* 1 if ptr is host memory (pageable or pinned), 0 for device or managed. */
int nb_is_host(const void *ptr);
/* Makes the staging buffers at least `bytes` long. */
int nb_stage_reserve(struct nccl_backend *nb, size_t bytes);
/* Queues host src -> device staging area at `off` on the comm stream. */
int nb_stage_in(struct nccl_backend *nb, size_t off, const void *src, size_t bytes);
/* Queues the device staging area at `off` back to the pinned buffer after
 * the collective, re-records nb->done, and remembers dst: nb_stage_finish()
 * copies the bytes there once nb->done has completed. */
int nb_stage_out(struct nccl_backend *nb, size_t off, void *dst, size_t bytes);
void nb_stage_finish(struct nccl_backend *nb);
/* ddp_reform: takes over old's device allocations (the application's
 * ddp_mem_alloc memory, which old's close would free) and its compute
 * stream. Before nb is set up. */
void nb_mem_adopt(struct nccl_backend *nb, struct nccl_backend *old);
/* Frees what backend_nccl_mem.c owns (at close). */
void nb_mem_release(struct nccl_backend *nb);

#endif
