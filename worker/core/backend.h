/*
 * backend.h - the communication backend interface inside libddp.
 *
 * A backend is a struct of function pointers (like a libuv handle type):
 * the CPU backend (worker/cpu/: shared memory, TCP ring, or shared memory
 * per node with a ring between nodes) and the NCCL backend (worker/nccl/,
 * built with CUDA). ddp_init() picks one. The collectives and synchronize()
 * are called only from the context's communication thread (one at a time,
 * in the order the application issued them); alloc, free_mem, copy and
 * set_compute_stream come from the application thread (ddp_mem_alloc, the
 * reducer), possibly while a collective runs; abort() from any thread at
 * any time.
 *
 * Memory: when ops->device_memory is 1, every buffer passed to the
 * collectives is a CUDA device pointer, and alloc/free/copy handle device
 * memory; the reducer uses only these to touch gradient memory. Collectives
 * may be asynchronous on the backend's own stream: synchronize() waits for
 * everything issued so far (the CPU backend's collectives are synchronous and
 * its synchronize does nothing).
 *
 * Errors: >= 0 or a negative errno; on failure the backend writes a message
 * to b->err (lowercase, naming the operation and the peer ranks involved,
 * e.g. "all-reduce: rank 3 closed its connection (it probably died)").
 * After a failed collective the backend is unusable except for abort/close.
 */
#ifndef DDP_WORKER_BACKEND_H
#define DDP_WORKER_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ddp.h"
#include "kv.h"

struct ddp_backend;

struct ddp_backend_ops {
	const char *name;  /* "cpu-shm", "cpu-ring", "nccl" */
	int device_memory; /* 1: buffers are CUDA device pointers */

	int (*allreduce)(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			 enum ddp_op op);
	int (*broadcast)(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			 int root);
	/* recv = world_size * count elements, rank order. */
	int (*allgather)(struct ddp_backend *b, const void *send, void *recv, size_t count,
			 enum ddp_dtype dtype);
	int (*barrier)(struct ddp_backend *b);
	/* Waits for every operation issued so far. */
	int (*synchronize)(struct ddp_backend *b);

	/* Memory in the backend's space (host for CPU, device for NCCL). */
	int (*alloc)(struct ddp_backend *b, size_t bytes, void **out);
	void (*free_mem)(struct ddp_backend *b, void *ptr);
	/* Copies within the backend's memory, ordered with the collectives. */
	int (*copy)(struct ddp_backend *b, void *dst, const void *src, size_t bytes);
	/* What copy() does for ordering, without a copy: the collectives issued
	 * after it start only after the work queued so far on the compute
	 * stream. The reducer calls it where a gradient it reduces in place
	 * (no copy into a bucket) is final. NULL: the backend has no streams
	 * (CPU). */
	int (*fence)(struct ddp_backend *b);

	/* The application's CUDA stream (a cudaStream_t; NULL: the legacy
	 * default stream) that collectives on its memory and copies order
	 * themselves after (ddp_set_compute_stream). Application thread, any
	 * time after creation. NULL op: the backend has no streams (CPU). */
	int (*set_compute_stream)(struct ddp_backend *b, void *stream);

	/* Makes every blocked or later collective fail with -ECANCELED; peers
	 * see this rank as gone. Any thread; idempotent. */
	void (*abort)(struct ddp_backend *b);
	/* Frees the backend (after abort if a collective might be blocked). */
	void (*close)(struct ddp_backend *b);
};

struct ddp_backend {
	const struct ddp_backend_ops *ops;
	int rank;
	int world_size;
	int device; /* CUDA device, -1 for CPU */
	char err[512];
};

/* What a backend needs to build its communicator. The kv and the prefix are
 * valid only during the *_new call. */
struct ddp_backend_params {
	int rank;
	int world_size;
	int local_rank;
	int local_world_size;
	/* every rank said this LOCAL_WORLD_SIZE (the hierarchical transport's
	 * condition, with WORLD_SIZE a multiple of it) */
	bool nodes_even;
	struct kv *kv;
	/* Namespace for this backend's keys, e.g. "/ddp/<run>/attempt_<n>/cpu"
	 * (unique per run and attempt, so old values are never read). */
	const char *prefix;
	uint64_t timeout_ms; /* deadline of init and of every collective */
	enum ddp_transport transport;
	const char *master_addr; /* the store's host, to choose a routable address;
				    NULL without one (file://) */
	/* How messages name rank r of this communicator: as global rank
	 * rank_name_base + r * rank_name_stride (a sub-communicator of a
	 * hierarchical backend names the job's ranks). Stride 0 means 1. */
	int rank_name_base;
	int rank_name_stride;
	/* ddp_reform: the communicator being replaced (aborted, its
	 * collectives ended, closed by the caller after *_new returns), or
	 * NULL. A backend of the same kind takes over what the application
	 * still holds of it, the memory from ddp_mem_alloc (shm: this rank's
	 * arena; NCCL: the device allocations), so that memory stays valid;
	 * everything else of prev is left for its close(). */
	struct ddp_backend *prev;
	/* NULL, or a flag that ends the set-up's waits (kv's, the TCP ring's
	 * connect and accept, NCCL's communicator creation) with -ECANCELED,
	 * polled every KV_CANCEL_POLL_MS (NCCL: every poll, at most 1 ms): a
	 * later round superseded this re-formation. */
	const atomic_int *cancel;
};

/* The job-wide number of rank r of a communicator built from p. */
static inline int backend_rank_name(const struct ddp_backend_params *p, int r)
{
	return p->rank_name_base + r * (p->rank_name_stride ? p->rank_name_stride : 1);
}

/* CPU backend (always built). errbuf gets a message on failure. */
int backend_cpu_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		    size_t errbuf_len);

/* NCCL backend (backend_nccl.c, only when built with CUDA; DDP_HAVE_NCCL
 * is defined then). backend_nccl_usable() returns 1 if a GPU is usable
 * (cudaGetDeviceCount succeeds with >= 1 device), else 0. */
#ifdef DDP_HAVE_NCCL
int backend_nccl_usable(void);
int backend_nccl_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		     size_t errbuf_len);
#endif

#endif
