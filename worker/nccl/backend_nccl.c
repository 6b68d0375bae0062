/*
 * backend_nccl.c - the NCCL backend of libddp (backend.h): device memory,
 * collectives on a dedicated communication stream, and a watchdog.
 *
 * Bootstrap (backend_nccl_boot.c): rank 0 makes the NCCL unique id and
 * publishes it under the attempt's key, so a restarted group never reads the
 * id of a dead communicator; the communicator is built with
 * ncclCommInitRankConfig in non-blocking mode and polled with a deadline.
 *
 * Streams and events. Three streams meet here: the application's compute
 * stream (ddp_set_compute_stream; the legacy default stream until then), a
 * copy stream and the communication stream.
 *  - copy() (the reducer packing a gradient into its bucket, or unpacking the
 *    averaged bucket) runs on the copy stream after an event recorded on the
 *    compute stream at the time of the call, and the compute stream then
 *    waits for the copy. It is called on the application's thread, at
 *    ddp_reducer_grad_ready(), so the event marks exactly "this gradient is
 *    written" and later backward kernels are not waited for.
 *  - A collective on memory from this backend's alloc() (the reducer's
 *    buckets) waits only on the copy stream; on any other memory (the
 *    application's own tensors: SyncBatchNorm statistics, parameter
 *    broadcasts) it also waits on the compute stream. So bucket all-reduces
 *    overlap the rest of the backward pass, and the compute stream never
 *    waits on the communication stream except through what it reads.
 *  - fence() (the reducer reducing a gradient in place, with no copy) is a
 *    copy of nothing: the copy stream waits for an event recorded on the
 *    compute stream then, and the next collectives wait for the copy
 *    stream as above.
 *  - synchronize() waits on the communication stream's last event only,
 *    never on the whole device.
 *
 * Watchdog: synchronize() polls the last collective's event together with
 * ncclCommGetAsyncError until the collective's deadline (the backend timeout,
 * counted from its launch). An NCCL error, a timeout or ddp_abort() aborts
 * the communicator (ncclCommAbort: peers see this rank as gone), leaves a
 * message naming the operation and the ranks, and fails this and every
 * later call; the launcher then restarts the group with a new unique id.
 *
 * Host buffers: a collective given host memory (libddp's checkpoint status
 * flag, say) is staged through a pinned buffer and a device buffer; the
 * result reaches the host buffer when synchronize() sees it done.
 *
 * Files: this one (collectives, watchdog, close), backend_nccl_mem.c
 * (allocations, copies, staging), backend_nccl_boot.c (unique id, device,
 * communicator creation).
 *
 * Threads: NCCL calls are made by the thread that runs the collectives (the
 * context's communication thread); copy() may come from the application
 * thread at the same time, so a mutex covers the backend's state and every
 * enqueue. abort() only raises an atomic flag, obeyed at the next poll.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_nccl_int.h"
#include "timeutil.h"

/* Sleeps a little while polling; the interval grows to 1 ms. */
static void nb_pause(unsigned *us)
{
	struct timespec ts = {0, (long)*us * 1000};

	nanosleep(&ts, NULL);
	if (*us < 1000)
		*us *= 2;
}

/* Aborts the communicator (once); peers then fail instead of waiting. */
void nb_abort_comm(struct nccl_backend *nb)
{
	if (nb->comm) {
		ncclCommAbort(nb->comm);
		nb->comm = NULL;
	}
	nb->broken = 1;
}

/* Fails the collective in progress: aborts the communicator and sets the
 * message "nccl: OP on rank R of W REASON; ...". */
static int nb_fail(struct nccl_backend *nb, int rc, const char *reason)
{
	nb_abort_comm(nb);
	nb->copyback = NULL;
	nb->pending = 0;
	snprintf(nb->base.err, sizeof(nb->base.err),
		 "nccl: %.90s on rank %d of %d %.300s; the communicator was aborted "
		 "(re-form with ddp_reform or restart the group)",
		 nb->op, nb->base.rank, nb->base.world_size, reason);
	return rc;
}

/* "rank 1" or "ranks 0, 2, 3" (the peers of this rank; NCCL cannot tell
 * which of them is missing), at most 16 named. */
static void nb_peers(const struct nccl_backend *nb, char *buf, size_t len)
{
	int w = nb->base.world_size, me = nb->base.rank, named = 0;
	size_t off;

	if (w <= 1) {
		snprintf(buf, len, "no other rank");
		return;
	}
	off = (size_t)snprintf(buf, len, w == 2 ? "rank" : "ranks");
	for (int r = 0; r < w && off < len; r++) {
		if (r == me)
			continue;
		if (named == 16) {
			snprintf(buf + off, len - off, " and %d more", w - 1 - named);
			return;
		}
		off += (size_t)snprintf(buf + off, len - off, "%s %d", named ? "," : "", r);
		named++;
	}
}

static int nb_fail_timeout(struct nccl_backend *nb)
{
	char why[300], peers[160];

	nb_peers(nb, peers, sizeof(peers));
	snprintf(why, sizeof(why),
		 "did not complete within %llu ms waiting for %s: one of them %s, died or cannot "
		 "be reached",
		 (unsigned long long)nb->timeout_ms, peers,
		 nb->comm_ready ? "stopped calling collectives" : "did not start");
	return nb_fail(nb, -ETIMEDOUT, why);
}

/* One look at the communicator: 0 healthy, 1 still in progress (non-blocking
 * init, finalize or enqueue), < 0 failed (and aborted). Also obeys
 * ddp_abort(), the creation's cancel flag (a superseded re-formation) and
 * the deadline. */
static int nb_poll(struct nccl_backend *nb, uint64_t deadline_ms)
{
	ncclResult_t st;
	char why[400];

	if (ncclCommGetAsyncError(nb->comm, &st) != ncclSuccess)
		st = ncclInternalError;
	if (st != ncclSuccess && st != ncclInProgress) {
		char peers[160];

		nb_peers(nb, peers, sizeof(peers));
		snprintf(why, sizeof(why), "failed with %s: %s (%s; probably one of them died)",
			 peers, ncclGetErrorString(st), ncclGetLastError(nb->comm));
		return nb_fail(nb, -ECONNRESET, why);
	}
	if (atomic_load(&nb->abort_requested))
		return nb_fail(nb, -ECANCELED, "was cancelled (ddp_abort)");
	if (nb->cancel && atomic_load(nb->cancel))
		return nb_fail(nb, -ECANCELED, "was cancelled: a later round superseded it");
	if (time_now_ms() >= deadline_ms)
		return nb_fail_timeout(nb);
	return st == ncclInProgress;
}

/* Waits while the communicator reports ncclInProgress, until deadline_ms.
 * Called with the lock held (only init, enqueue and finalize get here). */
int nb_wait_progress(struct nccl_backend *nb, uint64_t deadline_ms)
{
	unsigned us = 20;
	int rc;

	while ((rc = nb_poll(nb, deadline_ms)) == 1)
		nb_pause(&us);
	return rc;
}

/* Start of a collective (lock held): usable? right device? the
 * communication stream waits for the copies and, unless the buffers are the
 * backend's own, for the compute stream's queued work. */
static int nb_begin(struct nccl_backend *nb, const char *what, size_t count, const void *a,
		    const void *b, size_t bytes)
{
	int rc;

	snprintf(nb->op, sizeof(nb->op), "%s of %zu elements", what, count);
	if (nb->broken || atomic_load(&nb->abort_requested)) {
		nb_abort_comm(nb);
		snprintf(nb->base.err, sizeof(nb->base.err),
			 "nccl: %s on rank %d refused: the communicator was aborted earlier",
			 nb->op, nb->base.rank);
		return -ECANCELED;
	}
	rc = nb_cuda(nb, "cudaSetDevice", cudaSetDevice(nb->base.device));
	if (rc == 0 && !(nb_owns(nb, a, bytes) && nb_owns(nb, b, bytes))) {
		rc = nb_cuda(nb, "cudaEventRecord", cudaEventRecord(nb->compute, nb->app_stream));
		if (rc == 0)
			rc = nb_cuda(nb, "cudaStreamWaitEvent",
				     cudaStreamWaitEvent(nb->stream, nb->compute, 0));
	}
	if (rc == 0)
		rc = nb_cuda(nb, "cudaStreamWaitEvent",
			     cudaStreamWaitEvent(nb->stream, nb->copied, 0));
	if (rc == 0 && !nb->pending)
		nb->deadline_ms = time_now_ms() + nb->timeout_ms;
	return rc;
}

/* End of a collective (lock held): checks the launch (ncclInProgress = still
 * being enqueued in non-blocking mode) and records the completion event. */
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
		    ncclRedOp_t *o, size_t *esz)
{
	if (dtype != DDP_FLOAT32 && dtype != DDP_FLOAT64)
		goto bad;
	*t = dtype == DDP_FLOAT32 ? ncclFloat32 : ncclFloat64;
	*esz = dtype == DDP_FLOAT32 ? 4 : 8;
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

/* An in-place collective on buf (all-reduce or broadcast): a host buffer
 * goes through the staging buffers. */
static int nb_inplace(struct nccl_backend *nb, const char *what, void *buf, size_t count,
		      ncclDataType_t t, size_t esz, ncclRedOp_t o, int root)
{
	size_t bytes = count * esz;
	int host = bytes && nb_is_host(buf);
	void *d = buf;
	int rc = nb_begin(nb, what, count, buf, buf, bytes);

	if (rc < 0 || count == 0) /* nothing to move: no NCCL call at all */
		return rc;
	if (host) {
		rc = nb_stage_reserve(nb, bytes);
		if (rc == 0)
			rc = nb_stage_in(nb, 0, buf, bytes);
		d = nb->stage_dev;
	}
	if (rc < 0)
		return rc;
	if (root < 0)
		rc = nb_end(nb, ncclAllReduce(d, d, count, t, o, nb->comm, nb->stream));
	else
		rc = nb_end(nb, ncclBroadcast(d, d, count, t, root, nb->comm, nb->stream));
	if (rc == 0 && host)
		rc = nb_stage_out(nb, 0, buf, bytes);
	return rc;
}

static int nb_allreduce(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			enum ddp_op op)
{
	struct nccl_backend *nb = nb_of(b);
	ncclDataType_t t;
	ncclRedOp_t o;
	size_t esz;
	int rc = nb_types(b, dtype, op, &t, &o, &esz);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&nb->lock);
	rc = nb_inplace(nb, "all-reduce", buf, count, t, esz, o, -1);
	pthread_mutex_unlock(&nb->lock);
	return rc;
}

static int nb_broadcast(struct ddp_backend *b, void *buf, size_t count, enum ddp_dtype dtype,
			int root)
{
	struct nccl_backend *nb = nb_of(b);
	ncclDataType_t t;
	ncclRedOp_t o;
	size_t esz;
	int rc = nb_types(b, dtype, DDP_SUM, &t, &o, &esz);

	if (rc < 0)
		return rc;
	if (root < 0 || root >= b->world_size) {
		snprintf(b->err, sizeof(b->err), "nccl: broadcast root %d is not a rank (0 to %d)",
			 root, b->world_size - 1);
		return -EINVAL;
	}
	pthread_mutex_lock(&nb->lock);
	rc = nb_inplace(nb, "broadcast", buf, count, t, esz, o, root);
	pthread_mutex_unlock(&nb->lock);
	return rc;
}

/* All-gather; host send or recv buffers go through the staging buffers
 * (send at offset 0, recv after it). */
static int nb_gather(struct nccl_backend *nb, const void *send, void *recv, size_t count,
		     ncclDataType_t t, size_t esz)
{
	size_t sb = count * esz, rb = sb * (size_t)nb->base.world_size;
	size_t roff = (sb + 255) / 256 * 256;
	int hs = sb && nb_is_host(send), hr = sb && nb_is_host(recv);
	const void *ds = send;
	void *dr = recv;
	int rc = nb_begin(nb, "all-gather", count, send, recv, sb);

	if (rc < 0 || count == 0)
		return rc;
	if (hs || hr)
		rc = nb_stage_reserve(nb, roff + rb);
	if (rc == 0 && hs) {
		rc = nb_stage_in(nb, 0, send, sb);
		ds = nb->stage_dev;
	}
	if (hr)
		dr = nb->stage_dev + roff;
	if (rc == 0)
		rc = nb_end(nb, ncclAllGather(ds, dr, count, t, nb->comm, nb->stream));
	if (rc == 0 && hr)
		rc = nb_stage_out(nb, roff, recv, rb);
	return rc;
}

static int nb_allgather(struct ddp_backend *b, const void *send, void *recv, size_t count,
			enum ddp_dtype dtype)
{
	struct nccl_backend *nb = nb_of(b);
	ncclDataType_t t;
	ncclRedOp_t o;
	size_t esz;
	int rc = nb_types(b, dtype, DDP_SUM, &t, &o, &esz);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&nb->lock);
	rc = nb_gather(nb, send, recv, count, t, esz);
	pthread_mutex_unlock(&nb->lock);
	return rc;
}

static int nb_barrier(struct ddp_backend *b)
{
	struct nccl_backend *nb = nb_of(b);
	int rc;

	pthread_mutex_lock(&nb->lock);
	rc = nb_begin(nb, "barrier", 1, nb->scratch, nb->scratch, sizeof(float));
	if (rc == 0)
		rc = nb_end(nb, ncclAllReduce(nb->scratch, nb->scratch, 1, ncclFloat32, ncclSum,
					      nb->comm, nb->stream));
	pthread_mutex_unlock(&nb->lock);
	return rc;
}

/* One poll of the pending collective (lock held): 0 done, 1 not yet, < 0
 * failed. */
static int nb_sync_step(struct nccl_backend *nb)
{
	cudaError_t q;
	int rc;

	if (nb->broken)
		return -ECANCELED;
	if (!nb->pending)
		return 0;
	q = cudaEventQuery(nb->done);
	if (q == cudaSuccess) {
		nb->pending = 0;
		nb_stage_finish(nb);
		return 0;
	}
	if (q != cudaErrorNotReady)
		return nb_fail(nb, nb_cuda(nb, "cudaEventQuery", q), "hit a CUDA error");
	/* Asynchronous NCCL errors (a peer's closed socket...), the deadline
	 * and ddp_abort(). */
	rc = nb_poll(nb, nb->deadline_ms);
	return rc < 0 ? rc : 1;
}

/* The watchdog: waits for the pending collective until its deadline,
 * releasing the lock between polls so copies can proceed. */
static int nb_synchronize(struct ddp_backend *b)
{
	struct nccl_backend *nb = nb_of(b);
	unsigned us = 10;
	int rc;

	for (;;) {
		pthread_mutex_lock(&nb->lock);
		rc = nb_sync_step(nb);
		pthread_mutex_unlock(&nb->lock);
		if (rc != 1)
			return rc;
		nb_pause(&us);
	}
}

/* The stream is read under the lock by collectives (communication thread)
 * and copies (application thread), so a change never tears. */
static int nb_set_compute_stream(struct ddp_backend *b, void *stream)
{
	struct nccl_backend *nb = nb_of(b);

	pthread_mutex_lock(&nb->lock);
	nb->app_stream = stream ? (cudaStream_t)stream : cudaStreamLegacy;
	pthread_mutex_unlock(&nb->lock);
	return 0;
}

static void nb_abort(struct ddp_backend *b)
{
	atomic_store(&nb_of(b)->abort_requested, 1);
}

/* Finalizes a healthy communicator (flushing its work) within the timeout,
 * else aborts it. */
static void nb_release_comm(struct nccl_backend *nb)
{
	ncclResult_t res;

	if (!nb->comm)
		return;
	if (nb->broken || atomic_load(&nb->abort_requested)) {
		nb_abort_comm(nb);
		return;
	}
	snprintf(nb->op, sizeof(nb->op), "communicator finalisation");
	res = ncclCommFinalize(nb->comm);
	if ((res == ncclSuccess || res == ncclInProgress) &&
	    nb_wait_progress(nb, time_now_ms() + nb->timeout_ms) == 0) {
		ncclCommDestroy(nb->comm);
		nb->comm = NULL;
		return;
	}
	nb_abort_comm(nb);
}

void nb_close(struct ddp_backend *b)
{
	struct nccl_backend *nb = nb_of(b);

	if (!b)
		return;
	cudaSetDevice(b->device);
	/* A collective still pending is waited for under the watchdog (its
	 * deadline, ddp_abort), never unboundedly. */
	if (nb->pending && !nb->broken)
		nb_synchronize(b);
	nb_release_comm(nb);
	if (nb->cstream)
		cudaStreamSynchronize(nb->cstream);
	nb_mem_release(nb);
	cudaFree(nb->scratch);
	if (nb->compute)
		cudaEventDestroy(nb->compute);
	if (nb->copied)
		cudaEventDestroy(nb->copied);
	if (nb->done)
		cudaEventDestroy(nb->done);
	if (nb->stream)
		cudaStreamDestroy(nb->stream);
	if (nb->cstream)
		cudaStreamDestroy(nb->cstream);
	pthread_mutex_destroy(&nb->lock);
	free(nb);
}

const struct ddp_backend_ops nb_ops = {
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
    .fence = nb_fence,
    .set_compute_stream = nb_set_compute_stream,
    .abort = nb_abort,
    .close = nb_close,
};
