/*
 * backend_nccl.c - the NCCL backend of libddp (backend.h): device memory,
 * collectives on a dedicated communication stream, and a watchdog.
 *
 * Bootstrap: rank 0 makes the NCCL unique id and publishes it under the
 * attempt's key (the prefix holds run id and attempt, so a restarted group
 * never reads the id of a dead communicator); the communicator is built
 * with ncclCommInitRankConfig in non-blocking mode and polled with a
 * deadline.
 *
 * Ordering: before each collective or copy the communication stream waits on
 * an event recorded on the application's compute stream (cudak_stream.h),
 * so an all-reduce reads finished gradients yet overlaps whatever the
 * application queues later; synchronize() waits on the communication stream
 * only, never on the whole device.
 *
 * Watchdog: synchronize() polls the last operation's event together with
 * ncclCommGetAsyncError until the operation's deadline (the backend timeout,
 * counted from its launch). An NCCL error, a timeout or ddp_abort() aborts
 * the communicator (ncclCommAbort, so peers see this rank as gone), leaves a
 * message naming the operation and the ranks, and fails this and every
 * later call; the launcher then restarts the group with a new unique id.
 * All NCCL calls happen on the thread that owns the backend (the context's
 * communication thread); abort() only raises a flag that the watchdog loop
 * and every later call obey.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

/* This file is built only with NCCL; backend.h declares its entry points
 * under DDP_HAVE_NCCL. */
#ifndef DDP_HAVE_NCCL
#define DDP_HAVE_NCCL 1
#endif
#include "backend.h"
#include "backend_nccl.h"
#include "cudak_probe.h"
#include "cudak_stream.h"
#include "log.h"
#include "timeutil.h"

struct nccl_backend {
	struct ddp_backend base;
	ncclComm_t comm;
	cudaStream_t stream;
	cudaEvent_t ready; /* recorded on the compute stream */
	cudaEvent_t done;  /* recorded after the last operation */
	float *scratch;	   /* one float for the barrier */
	uint64_t timeout_ms;
	atomic_int abort_requested;
	int broken;	      /* the communicator was aborted */
	int pending;	      /* operations issued since the last synchronize */
	uint64_t deadline_ms; /* of the oldest pending operation */
	char op[96];	      /* the last operation, for messages */
};

_Static_assert(sizeof(ncclUniqueId) == BACKEND_NCCL_ID_BYTES, "NCCL unique id size");

static struct nccl_backend *nb_of(struct ddp_backend *b)
{
	return (struct nccl_backend *)b;
}

/* Sleeps a little while polling; the interval grows to 1 ms. */
static void nb_pause(unsigned *us)
{
	struct timespec ts = {0, (long)*us * 1000};

	nanosleep(&ts, NULL);
	if (*us < 1000)
		*us *= 2;
}

static int nb_cuda(struct nccl_backend *nb, const char *what, cudaError_t err)
{
	if (err == cudaSuccess)
		return 0;
	snprintf(nb->base.err, sizeof(nb->base.err), "nccl backend: %s on rank %d (device %d): %s",
		 what, nb->base.rank, nb->base.device, cudaGetErrorString(err));
	return -EIO;
}

/* Aborts the communicator (once); peers then fail instead of waiting. */
static void nb_abort_comm(struct nccl_backend *nb)
{
	if (nb->comm) {
		ncclCommAbort(nb->comm);
		nb->comm = NULL;
	}
	nb->broken = 1;
}

/* Fails the operation in progress: aborts the communicator and sets the
 * message "nccl: OP on rank R of W REASON; the communicator was aborted". */
static int nb_fail(struct nccl_backend *nb, int rc, const char *reason)
{
	nb_abort_comm(nb);
	snprintf(nb->base.err, sizeof(nb->base.err),
		 "nccl: %s on rank %d of %d %s; the communicator was aborted (the launcher "
		 "restarts the group)",
		 nb->op, nb->base.rank, nb->base.world_size, reason);
	return rc;
}

/* Waits while the communicator reports ncclInProgress (non-blocking mode),
 * until deadline_ms. */
static int nb_wait_progress(struct nccl_backend *nb, uint64_t deadline_ms)
{
	unsigned us = 20;
	ncclResult_t st;
	char why[200];

	for (;;) {
		if (ncclCommGetAsyncError(nb->comm, &st) != ncclSuccess)
			st = ncclInternalError;
		if (st == ncclSuccess)
			return 0;
		if (st != ncclInProgress) {
			snprintf(why, sizeof(why), "failed: %s (%s)", ncclGetErrorString(st),
				 ncclGetLastError(nb->comm));
			return nb_fail(nb, -ECONNRESET, why);
		}
		if (atomic_load(&nb->abort_requested))
			return nb_fail(nb, -ECANCELED, "was cancelled (ddp_abort)");
		if (time_now_ms() >= deadline_ms) {
			snprintf(why, sizeof(why),
				 "did not complete within %llu ms: another rank stopped calling "
				 "collectives, died or cannot be reached",
				 (unsigned long long)nb->timeout_ms);
			return nb_fail(nb, -ETIMEDOUT, why);
		}
		nb_pause(&us);
	}
}

/* Common start of every operation: usable? right device? wait for the
 * compute stream's work queued so far. */
static int nb_begin(struct nccl_backend *nb, const char *fmt, size_t count)
{
	int rc;

	snprintf(nb->op, sizeof(nb->op), fmt, count);
	if (nb->broken || atomic_load(&nb->abort_requested)) {
		nb_abort_comm(nb);
		snprintf(nb->base.err, sizeof(nb->base.err),
			 "nccl: %s on rank %d refused: the communicator was aborted earlier",
			 nb->op, nb->base.rank);
		return -ECANCELED;
	}
	rc = nb_cuda(nb, "cudaSetDevice", cudaSetDevice(nb->base.device));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventRecord",
			     cudaEventRecord(nb->ready, cudak_stream_compute(nb->base.device)));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaStreamWaitEvent",
			     cudaStreamWaitEvent(nb->stream, nb->ready, 0));
	if (rc == 0 && !nb->pending)
		nb->deadline_ms = time_now_ms() + nb->timeout_ms;
	return rc;
}

/* Common end: checks the launch (ncclInProgress = still being enqueued in
 * non-blocking mode) and records the completion event. */
static int nb_end(struct nccl_backend *nb, ncclResult_t res)
{
	char why[200];
	int rc;

	if (res == ncclInProgress) {
		rc = nb_wait_progress(nb, nb->deadline_ms);
		if (rc < 0)
			return rc;
	} else if (res != ncclSuccess) {
		snprintf(why, sizeof(why), "could not be launched: %s (%s)",
			 ncclGetErrorString(res), ncclGetLastError(nb->comm));
		return nb_fail(nb, -EIO, why);
	}
	nb->pending = 1;
	return nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->done, nb->stream));
}

static int nb_types(struct ddp_backend *b, enum ddp_dtype dtype, enum ddp_op op, ncclDataType_t *t,
		    ncclRedOp_t *o)
{
	if (dtype != DDP_FLOAT32 && dtype != DDP_FLOAT64)
		goto bad;
	*t = dtype == DDP_FLOAT32 ? ncclFloat32 : ncclFloat64;
	if (op == DDP_SUM)
		*o = ncclSum;
	else if (op == DDP_AVG)
		*o = ncclAvg;
	else if (op == DDP_MAX)
		*o = ncclMax;
	else
		goto bad;
	return 0;
bad:
	snprintf(b->err, sizeof(b->err), "nccl: unsupported dtype %d or reduction %d", dtype, op);
	return -EINVAL;
}

static int nb_allreduce(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			enum ddp_op op)
{
	struct nccl_backend *nb = nb_of(b);
	ncclDataType_t t;
	ncclRedOp_t o;
	int rc = nb_types(b, dtype, op, &t, &o);

	if (rc == 0)
		rc = nb_begin(nb, "all-reduce of %zu elements", count);
	if (rc < 0)
		return rc;
	return nb_end(nb, ncclAllReduce(buf, buf, count, t, o, nb->comm, nb->stream));
}

static int nb_broadcast(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			int root)
{
	struct nccl_backend *nb = nb_of(b);
	ncclDataType_t t;
	ncclRedOp_t o;
	int rc = nb_types(b, dtype, DDP_SUM, &t, &o);

	if (rc == 0)
		rc = nb_begin(nb, "broadcast of %zu elements", count);
	if (rc < 0)
		return rc;
	return nb_end(nb, ncclBroadcast(buf, buf, count, t, root, nb->comm, nb->stream));
}

static int nb_allgather(struct ddp_backend *b, const void *send, void *recv, size_t count,
			enum ddp_dtype dtype)
{
	struct nccl_backend *nb = nb_of(b);
	ncclDataType_t t;
	ncclRedOp_t o;
	int rc = nb_types(b, dtype, DDP_SUM, &t, &o);

	if (rc == 0)
		rc = nb_begin(nb, "all-gather of %zu elements", count);
	if (rc < 0)
		return rc;
	return nb_end(nb, ncclAllGather(send, recv, count, t, nb->comm, nb->stream));
}

static int nb_barrier(struct ddp_backend *b)
{
	struct nccl_backend *nb = nb_of(b);
	int rc = nb_begin(nb, "barrier (%zu elements)", 1);

	if (rc < 0)
		return rc;
	return nb_end(nb, ncclAllReduce(nb->scratch, nb->scratch, 1, ncclFloat32, ncclSum, nb->comm,
					nb->stream));
}

/* The watchdog: waits for the last operation until its deadline. */
static int nb_synchronize(struct ddp_backend *b)
{
	struct nccl_backend *nb = nb_of(b);
	unsigned us = 10;
	cudaError_t q;
	int rc;

	if (!nb->pending)
		return nb->broken ? -ECANCELED : 0;
	for (;;) {
		q = cudaEventQuery(nb->done);
		if (q == cudaSuccess) {
			nb->pending = 0;
			return 0;
		}
		if (q != cudaErrorNotReady)
			return nb_fail(nb, nb_cuda(nb, "cudaEventQuery", q), "hit a CUDA error");
		/* Reports asynchronous NCCL errors (a peer's closed socket...),
		 * the deadline and ddp_abort(). */
		rc = nb_wait_progress(nb, nb->deadline_ms);
		if (rc < 0)
			return rc;
		if (atomic_load(&nb->abort_requested))
			return nb_fail(nb, -ECANCELED, "was cancelled (ddp_abort)");
		if (time_now_ms() >= nb->deadline_ms) {
			char why[200];

			snprintf(why, sizeof(why),
				 "did not complete within %llu ms: another rank stopped calling "
				 "collectives, died or cannot be reached",
				 (unsigned long long)nb->timeout_ms);
			return nb_fail(nb, -ETIMEDOUT, why);
		}
		nb_pause(&us);
	}
}

static int nb_alloc(struct ddp_backend *b, size_t bytes, void **out)
{
	struct nccl_backend *nb = nb_of(b);
	void *p = NULL;
	size_t n = bytes < 64 ? 64 : bytes;
	int rc = nb_cuda(nb, "cudaSetDevice", cudaSetDevice(b->device));

	*out = NULL;
	if (rc == 0 && cudaMalloc(&p, n) != cudaSuccess) {
		snprintf(b->err, sizeof(b->err),
			 "nccl backend: cannot allocate %zu bytes on device %d", n, b->device);
		return -ENOMEM;
	}
	if (rc == 0)
		rc = nb_cuda(nb, "cudaMemsetAsync", cudaMemsetAsync(p, 0, n, nb->stream));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaStreamSynchronize", cudaStreamSynchronize(nb->stream));
	if (rc < 0) {
		cudaFree(p);
		return rc;
	}
	*out = p;
	return 0;
}

static void nb_free_mem(struct ddp_backend *b, void *ptr)
{
	if (ptr) {
		cudaSetDevice(b->device);
		cudaFree(ptr);
	}
}

/* Device-to-device copy ordered after the compute stream's queued work and
 * before later collectives (the reducer packs buckets with it). */
static int nb_copy(struct ddp_backend *b, void *dst, const void *src, size_t bytes)
{
	struct nccl_backend *nb = nb_of(b);
	int rc = nb_begin(nb, "copy of %zu bytes", bytes);

	if (rc < 0 || bytes == 0)
		return rc;
	rc = nb_cuda(nb, "cudaMemcpyAsync",
		     cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nb->stream));
	if (rc == 0) {
		nb->pending = 1;
		rc = nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->done, nb->stream));
	}
	return rc;
}

static int nb_copy_host(struct ddp_backend *b, void *dst, const void *src, size_t bytes,
			int to_host)
{
	struct nccl_backend *nb = nb_of(b);
	int rc = nb_begin(nb, "host copy of %zu bytes", bytes);

	if (rc < 0)
		return rc;
	if (bytes)
		rc = nb_cuda(
		    nb, "cudaMemcpyAsync",
		    cudaMemcpyAsync(dst, src, bytes,
				    to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
				    nb->stream));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->done, nb->stream));
	if (rc == 0) {
		nb->pending = 1;
		rc = nb_synchronize(b);
	}
	return rc;
}

static void nb_abort(struct ddp_backend *b)
{
	atomic_store(&nb_of(b)->abort_requested, 1);
}

/* Finalizes a healthy communicator (flushing its work) within the timeout,
 * else aborts it. */
static void nb_release_comm(struct nccl_backend *nb)
{
	uint64_t deadline = time_now_ms() + nb->timeout_ms;
	ncclResult_t res;

	if (!nb->comm)
		return;
	if (nb->broken || atomic_load(&nb->abort_requested)) {
		nb_abort_comm(nb);
		return;
	}
	snprintf(nb->op, sizeof(nb->op), "communicator finalisation");
	res = ncclCommFinalize(nb->comm);
	if ((res == ncclSuccess || res == ncclInProgress) && nb_wait_progress(nb, deadline) == 0) {
		ncclCommDestroy(nb->comm);
		nb->comm = NULL;
		return;
	}
	nb_abort_comm(nb);
}

static void nb_close(struct ddp_backend *b)
{
	struct nccl_backend *nb = nb_of(b);

	if (!b)
		return;
	cudaSetDevice(b->device);
	if (nb->stream && !nb->broken)
		cudaStreamSynchronize(nb->stream);
	nb_release_comm(nb);
	cudaFree(nb->scratch);
	if (nb->ready)
		cudaEventDestroy(nb->ready);
	if (nb->done)
		cudaEventDestroy(nb->done);
	if (nb->stream)
		cudaStreamDestroy(nb->stream);
	free(nb);
}

static const struct ddp_backend_ops nccl_ops = {
    .name = "nccl",
    .device_memory = 1,
    .allreduce = nb_allreduce,
    .broadcast = nb_broadcast,
    .allgather = nb_allgather,
    .barrier = nb_barrier,
    .synchronize = nb_synchronize,
    .alloc = nb_alloc,
    .free_mem = nb_free_mem,
    .copy = nb_copy,
    .copy_host = nb_copy_host,
    .abort = nb_abort,
    .close = nb_close,
};

int backend_nccl_usable(void)
{
	return cudak_probe_devices(NULL, 0) > 0;
}

void backend_nccl_id_key(const char *prefix, char *key, size_t key_len)
{
	snprintf(key, key_len, "%s/nccl_id", prefix);
}

int backend_nccl_exchange_id(struct kv *kv, const char *prefix, int rank, uint64_t timeout_ms,
			     void *id, char *errbuf, size_t errbuf_len)
{
	char key[512];
	void *val = NULL;
	size_t len = 0;
	ncclResult_t res;
	int rc;

	backend_nccl_id_key(prefix, key, sizeof(key));
	if (rank == 0) {
		res = ncclGetUniqueId((ncclUniqueId *)id);
		if (res != ncclSuccess) {
			snprintf(errbuf, errbuf_len,
				 "nccl: ncclGetUniqueId failed on rank 0: %s (%s)",
				 ncclGetErrorString(res), ncclGetLastError(NULL));
			return -EIO;
		}
		rc = kv_set(kv, key, id, BACKEND_NCCL_ID_BYTES);
		if (rc < 0)
			snprintf(errbuf, errbuf_len, "nccl: rank 0 could not publish '%s': %s", key,
				 kv_error(kv));
		return rc < 0 ? rc : 0;
	}
	rc = kv_get(kv, key, timeout_ms, &val, &len);
	if (rc == -ETIMEDOUT) {
		snprintf(errbuf, errbuf_len,
			 "nccl: rank %d waited %llu ms for rank 0's unique id ('%s'); rank 0 never "
			 "published it (did it start, or die during initialisation?)",
			 rank, (unsigned long long)timeout_ms, key);
	} else if (rc < 0) {
		snprintf(errbuf, errbuf_len, "nccl: rank %d could not read '%s': %s", rank, key,
			 kv_error(kv));
	} else if (len != BACKEND_NCCL_ID_BYTES) {
		snprintf(
		    errbuf, errbuf_len,
		    "nccl: '%s' holds %zu bytes, not a %d-byte nccl unique id (another program "
		    "uses this key?)",
		    key, len, BACKEND_NCCL_ID_BYTES);
		rc = -EPROTO;
	} else {
		memcpy(id, val, BACKEND_NCCL_ID_BYTES);
		rc = 0;
	}
	free(val);
	return rc;
}

/* DDP_CUDA_DEVICE, else LOCAL_RANK modulo the device count. */
static int nb_pick_device(const struct ddp_backend_params *p, char *errbuf, size_t errbuf_len)
{
	char why[200];
	int ndev = cudak_probe_devices(why, sizeof(why));
	const char *env = getenv("DDP_CUDA_DEVICE");
	int dev;

	if (ndev == 0) {
		snprintf(errbuf, errbuf_len,
			 "nccl: no usable GPU on rank %d (%s); use DDP_BACKEND=cpu on this machine",
			 p->rank, why);
		return -ENODEV;
	}
	if (env && *env) {
		dev = atoi(env);
		if (dev < 0 || dev >= ndev) {
			snprintf(errbuf, errbuf_len,
				 "nccl: DDP_CUDA_DEVICE=%s but this machine has %d GPU(s)", env,
				 ndev);
			return -ENODEV;
		}
		return dev;
	}
	dev = p->local_rank % ndev;
	if (dev != p->local_rank)
		log_debug("nccl: LOCAL_RANK %d shares GPU %d (%d GPUs)", p->local_rank, dev, ndev);
	return dev;
}

/* Builds the communicator in non-blocking mode, polling with a deadline. */
static int nb_init_comm(struct nccl_backend *nb, const ncclUniqueId *id, char *errbuf,
			size_t errbuf_len)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclResult_t res;
	int rc;

	cfg.blocking = 0;
	snprintf(nb->op, sizeof(nb->op), "communicator initialisation");
	res = ncclCommInitRankConfig(&nb->comm, nb->base.world_size, *id, nb->base.rank, &cfg);
	if (res != ncclSuccess && res != ncclInProgress) {
		snprintf(errbuf, errbuf_len,
			 "nccl: ncclCommInitRankConfig failed on rank %d: %s (%s)", nb->base.rank,
			 ncclGetErrorString(res), ncclGetLastError(nb->comm));
		if (nb->comm)
			nb_abort_comm(nb);
		return -EIO;
	}
	rc = nb_wait_progress(nb, time_now_ms() + nb->timeout_ms);
	if (rc < 0)
		snprintf(errbuf, errbuf_len, "%s%s", nb->base.err,
			 rc == -ETIMEDOUT ? " (every rank must start; NCCL_SOCKET_IFNAME must name "
					    "an interface the ranks can reach)"
					  : "");
	return rc;
}

static int nb_setup(struct nccl_backend *nb, const struct ddp_backend_params *p, char *errbuf,
		    size_t errbuf_len)
{
	ncclUniqueId id;
	int rc;

	rc = backend_nccl_exchange_id(p->kv, p->prefix, p->rank, p->timeout_ms, &id, errbuf,
				      errbuf_len);
	if (rc < 0)
		return rc;
	rc = nb_cuda(nb, "cudaStreamCreate",
		     cudaStreamCreateWithFlags(&nb->stream, cudaStreamNonBlocking));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventCreate",
			     cudaEventCreateWithFlags(&nb->ready, cudaEventDisableTiming));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventCreate",
			     cudaEventCreateWithFlags(&nb->done, cudaEventDisableTiming));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaMalloc", cudaMalloc((void **)&nb->scratch, sizeof(float)));
	if (rc < 0) {
		snprintf(errbuf, errbuf_len, "%s", nb->base.err);
		return rc;
	}
	return nb_init_comm(nb, &id, errbuf, errbuf_len);
}

int backend_nccl_new(const struct ddp_backend_params *p, struct ddp_backend **out, char *errbuf,
		     size_t errbuf_len)
{
	struct nccl_backend *nb;
	int dev, rc;

	*out = NULL;
	dev = nb_pick_device(p, errbuf, errbuf_len);
	if (dev < 0)
		return dev;
	nb = calloc(1, sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	nb->base.ops = &nccl_ops;
	nb->base.rank = p->rank;
	nb->base.world_size = p->world_size;
	nb->base.device = dev;
	nb->timeout_ms = p->timeout_ms ? p->timeout_ms : DDP_DEFAULT_TIMEOUT_MS;
	atomic_init(&nb->abort_requested, 0);
	rc = nb_cuda(nb, "cudaSetDevice", cudaSetDevice(dev));
	if (rc < 0)
		snprintf(errbuf, errbuf_len, "%s", nb->base.err);
	else
		rc = nb_setup(nb, p, errbuf, errbuf_len);
	if (rc < 0) {
		nb->broken = 1;
		nb_close(&nb->base);
		return rc;
	}
	*out = &nb->base;
	return 0;
}
