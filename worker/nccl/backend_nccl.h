/*
 * backend_nccl.h - the NCCL backend's bootstrap parts, useful on their own:
 * the unique-id exchange through the store and the choice of device (the
 * exchange runs and is tested without a GPU). The backend itself is reached
 * through backend.h (backend_nccl_new).
 *
 * Environment read by the backend:
 *   DDP_CUDA_DEVICE  the CUDA device to use (default: LOCAL_RANK, wrapped
 *                    modulo the device count so several ranks can share one
 *                    GPU in tests; NCCL then needs NCCL_HOSTID per rank or,
 *                    from NCCL 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1)
 *   NCCL_*           read by NCCL itself (NCCL_SOCKET_IFNAME, ...)
 */
#ifndef DDP_WORKER_BACKEND_NCCL_H
#define DDP_WORKER_BACKEND_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "kv.h"

/* Size of an NCCL unique id (sizeof(ncclUniqueId)). */
#define BACKEND_NCCL_ID_BYTES 128

/* The store key under which rank 0 publishes the unique id: "<prefix>/nccl_id". */
void backend_nccl_id_key(const char *prefix, char *key, size_t key_len);

/* Rank 0 creates a unique id (ncclGetUniqueId) and sets it under the key
 * above; every other rank waits up to timeout_ms for it. `id` receives the
 * BACKEND_NCCL_ID_BYTES bytes on every rank. Returns 0, or:
 *   -ETIMEDOUT  rank 0 never published it (errbuf names rank 0 and the key)
 *   -EPROTO     the stored value is not an NCCL id (wrong length)
 *   -EIO        ncclGetUniqueId failed (errbuf has NCCL's reason)
 *   other negative errnos from the store. */
int backend_nccl_exchange_id(struct kv *kv, const char *prefix, int rank, uint64_t timeout_ms,
			     void *id, char *errbuf, size_t errbuf_len);

/* The CUDA device for a rank: DDP_CUDA_DEVICE when set, else LOCAL_RANK
 * modulo the device count. -ENODEV (message in errbuf) when no GPU is usable
 * or DDP_CUDA_DEVICE names no device. */
int backend_nccl_pick_device(int rank, int local_rank, char *errbuf, size_t errbuf_len);

#endif
