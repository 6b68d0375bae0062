/*
 * backend_nccl_boot.c - the NCCL backend's bootstrap: the unique-id
 * exchange through the store (runs without a GPU), the choice of the CUDA
 * device, and the communicator's non-blocking creation under a deadline.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "backend_nccl.h"
#include "backend_nccl_int.h"
#include "cudak_probe.h"
#include "log.h"
#include "timeutil.h"

_Static_assert(sizeof(ncclUniqueId) == BACKEND_NCCL_ID_BYTES, "NCCL unique id size");

void backend_nccl_id_key(const char *prefix, char *key, size_t key_len)
{
	snprintf(key, key_len, "%s/nccl_id", prefix);
}

static int boot_publish(struct kv *kv, const char *key, void *id, char *errbuf, size_t errbuf_len)
{
	ncclResult_t res = ncclGetUniqueId((ncclUniqueId *)id);
	int rc;

	if (res != ncclSuccess) {
		snprintf(errbuf, errbuf_len, "nccl: ncclGetUniqueId failed on rank 0: %s (%s)",
			 ncclGetErrorString(res), ncclGetLastError(NULL));
		return -EIO;
	}
	rc = kv_set(kv, key, id, BACKEND_NCCL_ID_BYTES);
	if (rc < 0)
		snprintf(errbuf, errbuf_len, "nccl: rank 0 could not publish '%s': %s", key,
			 kv_error(kv));
	return rc < 0 ? rc : 0;
}

int backend_nccl_exchange_id(struct kv *kv, const char *prefix, int rank, uint64_t timeout_ms,
			     void *id, char *errbuf, size_t errbuf_len)
{
	char key[512];
	void *val = NULL;
	size_t len = 0;
	int rc;

	backend_nccl_id_key(prefix, key, sizeof(key));
	if (rank == 0)
		return boot_publish(kv, key, id, errbuf, errbuf_len);
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

int backend_nccl_pick_device(int rank, int local_rank, char *errbuf, size_t errbuf_len)
{
	char why[200];
	int ndev = cudak_probe_devices(why, sizeof(why));
	const char *env = getenv("DDP_CUDA_DEVICE");
	char *end = NULL;
	long dev;

	if (ndev == 0) {
		snprintf(errbuf, errbuf_len,
			 "nccl: no usable GPU on rank %d (%s); use DDP_BACKEND=cpu on this machine",
			 rank, why);
		return -ENODEV;
	}
	if (env && *env) {
		dev = strtol(env, &end, 10);
		if (*end || dev < 0 || dev >= ndev) {
			snprintf(
			    errbuf, errbuf_len,
			    "nccl: DDP_CUDA_DEVICE='%s' is not a device of this machine (it has "
			    "%d GPU(s): 0 to %d)",
			    env, ndev, ndev - 1);
			return -ENODEV;
		}
		return (int)dev;
	}
	dev = local_rank < 0 ? 0 : local_rank % ndev;
	if (dev != local_rank)
		log_debug("nccl: LOCAL_RANK %d shares GPU %ld (%d GPUs)", local_rank, dev, ndev);
	return (int)dev;
}

int backend_nccl_usable(void)
{
	return cudak_probe_devices(NULL, 0) > 0;
}

/* Builds the communicator in non-blocking mode, polling with a deadline and
 * nb->cancel: a re-formation that a later round superseded ends within a
 * poll (at most 1 ms), its half-made communicator aborted (ncclCommAbort),
 * instead of waiting for the deadline. */
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
		nb_abort_comm(nb);
		return -EIO;
	}
	rc = nb_wait_progress(nb, time_now_ms() + nb->timeout_ms);
	nb->comm_ready = rc == 0;
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
	const unsigned ev = cudaEventDisableTiming;
	ncclUniqueId id;
	int rc;

	rc = backend_nccl_exchange_id(p->kv, p->prefix, p->rank, p->timeout_ms, &id, errbuf,
				      errbuf_len);
	if (rc < 0)
		return rc;
	rc = nb_cuda(nb, "cudaSetDevice", cudaSetDevice(nb->base.device));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaStreamCreate",
			     cudaStreamCreateWithFlags(&nb->stream, cudaStreamNonBlocking));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaStreamCreate",
			     cudaStreamCreateWithFlags(&nb->cstream, cudaStreamNonBlocking));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventCreate", cudaEventCreateWithFlags(&nb->compute, ev));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventCreate", cudaEventCreateWithFlags(&nb->copied, ev));
	if (rc == 0)
		rc = nb_cuda(nb, "cudaEventCreate", cudaEventCreateWithFlags(&nb->done, ev));
	/* Waiting on a never-recorded event is a no-op, so `copied` and
	 * `done` need no first record. */
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
	dev = backend_nccl_pick_device(p->rank, p->local_rank, errbuf, errbuf_len);
	if (dev < 0)
		return dev;
	nb = calloc(1, sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	pthread_mutex_init(&nb->lock, NULL);
	nb->base.ops = &nb_ops;
	nb->base.rank = p->rank;
	nb->base.world_size = p->world_size;
	nb->base.device = dev;
	nb->app_stream = cudaStreamLegacy;
	nb->timeout_ms = p->timeout_ms ? p->timeout_ms : DDP_DEFAULT_TIMEOUT_MS;
	atomic_init(&nb->abort_requested, 0);
	/* The old communicator is aborted (ncclCommAbort at its close); the
	 * new one gets a new unique id under the new round's prefix. */
	if (p->prev && p->prev->ops == &nb_ops) {
		/* Free the old communicator's resources before the new one
		 * takes its own. */
		nb_abort_comm(nb_of(p->prev));
		nb_mem_adopt(nb, nb_of(p->prev));
	}
	/* The cancel flag is the set-up's only (backend.h). */
	nb->cancel = p->cancel;
	rc = nb_setup(nb, p, errbuf, errbuf_len);
	nb->cancel = NULL;
	if (rc < 0) {
		nb->broken = 1;
		nb_close(&nb->base);
		return rc;
	}
	*out = &nb->base;
	return 0;
}
